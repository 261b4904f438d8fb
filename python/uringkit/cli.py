"""The `uringkit` command."""

from __future__ import annotations

import argparse
import os
import sys


def _doctor(args: argparse.Namespace) -> int:
    from . import doctor

    return doctor.main(args.dir, args.json)


def _bench(args: argparse.Namespace) -> int:
    from . import bench

    return bench.main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="uringkit",
        description="All of Linux asynchronous I/O for Python: io_uring, libaio, POSIX AIO, "
        "thread pools.",
        epilog="examples:\n  uringkit doctor --dir /data\n  uringkit bench --quick\n"
        "  uringkit bench --name=r --filename=f --size=1g --rw=randread --ioengine=io_uring",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from . import __version__

    p.add_argument("--version", action="version", version=f"uringkit {__version__}")
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
    b = sub.add_parser(
        "bench",
        help="fio-style benchmark of io_uring/libaio/posixaio/threads/psync "
        "(uringkit bench --help)",
        add_help=False,
    )
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=_bench)
    sub.add_parser(
        "kv",
        help="the xkv store: put/get/delete/scan/compact/check/stats/bench (uringkit kv --help)",
        add_help=False,
    )
    sub.add_parser(
        "net",
        help="the io_uring echo server and its benchmark against asyncio and uvloop "
        "(uringkit net --help)",
        add_help=False,
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """The `uringkit` command. Output piped into a reader that stops early (`| head`)
    ends the command quietly with 141 (128 + SIGPIPE, as a shell reports a tool that
    SIGPIPE killed) instead of a traceback."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        # whatever is still buffered for stdout would raise again at exit: point it
        # at /dev/null
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "bench":
        # fio-style options (--name=… --rw=…) are parsed by the bench itself.
        from . import bench

        return bench.main(argv[1:])
    if argv and argv[0] == "kv":
        from .kv.cli import main as kv_main

        return kv_main(argv[1:])
    if argv and argv[0] == "net":
        from .net.cli import main as net_main

        return net_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
