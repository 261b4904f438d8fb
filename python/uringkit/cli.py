"""The `uringkit` command."""

from __future__ import annotations

import argparse
import sys


def _doctor(args: argparse.Namespace) -> int:
    from . import doctor

    return doctor.main(args.dir, args.json)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="uringkit",
        description="All of Linux asynchronous I/O for Python: io_uring, libaio, POSIX AIO, "
        "thread pools.",
        epilog="example: uringkit doctor --dir /data",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser(
        "doctor",
        help="check what this machine allows: io_uring, flags, opcodes, memlock, O_DIRECT",
        description="The io_uring production checklist, tried on this machine: kernel "
        "version and per-feature support (from the probe, not the version string), "
        "kernel.io_uring_disabled, seccomp, RLIMIT_MEMLOCK, SQPOLL, the opcode table, "
        "libaio, O_DIRECT in --dir, and recommended ring flags. Exit status 0 when "
        "io_uring is usable, 1 when not (with the reason and the fallback).",
        epilog="examples:\n  uringkit doctor\n  uringkit doctor --dir /mnt/nvme --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument(
        "--dir",
        default=".",
        help="directory whose filesystem to test for O_DIRECT (default: current directory)",
    )
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
