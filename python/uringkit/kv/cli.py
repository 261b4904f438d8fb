"""`uringkit kv put|get|delete|scan|compact|check|stats PATH ...`, `uringkit kv bench` and
`uringkit kv stress`."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys

from . import open as kv_open

EXAMPLES = """examples:
  uringkit kv put /data/store user:1 '{"name": "ada"}'
  uringkit kv get /data/store user:1
  uringkit kv delete /data/store user:1
  uringkit kv scan /data/store --prefix user: --limit 10
  uringkit kv scan /data/store --prefix user: --json
  uringkit kv scan /data/store --start user:1000 --stop user:2000 --keys-only
  uringkit kv compact /data/store
  uringkit kv compact /data/store --compression zstd --level 19
  uringkit kv check /data/store
  uringkit kv stats /data/store --json
  uringkit kv backup /data/store /backups/store-2026-12-02
  uringkit kv bench --quick
  uringkit kv stress --seconds 600

get, scan, check, stats and backup open the store read-only (read_only=True): they work
beside the process that has it open for writing, and see it as it is when they start.
put, delete, compact and --repair need the writer's open."""


def _b(s: str, hexa: bool) -> bytes:
    return bytes.fromhex(s) if hexa else s.encode()


def _field(name: str, b: bytes, hexa: bool) -> dict[str, str]:
    """`{name: text}` for `scan --json`, or `{name_hex: hex}` for bytes that are not
    UTF-8 (and for every key and value with --hex)."""
    if not hexa:
        with contextlib.suppress(UnicodeDecodeError):
            return {name: b.decode()}
    return {f"{name}_hex": b.hex()}


def _show(b: bytes, hexa: bool) -> str:
    if hexa:
        return b.hex()
    try:
        return b.decode()
    except UnicodeDecodeError:
        return "0x" + b.hex()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "bench":
        from .bench import main as bench_main

        return bench_main(argv[1:])
    if argv and argv[0] == "stress":
        from .stress import main as stress_main

        return stress_main(argv[1:])
    ap = argparse.ArgumentParser(
        prog="uringkit kv",
        description="The xkv store from the "
        "command line (keys and values as UTF-8 text, or hex with "
        "--hex).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--hex", action="store_true", help="keys and values are hex")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, hlp in (
        ("put", "store a value"),
        ("get", "print a value"),
        ("delete", "delete a key"),
        ("scan", "list keys (and values)"),
        (
            "compact",
            "rewrite live data, reclaim space now (a writer also compacts in the "
            "background once half of its sealed segments' bytes, and 64 MiB, are dead)",
        ),
        ("check", "verify every live record's CRC"),
        ("stats", "sizes, counts, recovery info"),
        ("backup", "copy the store to a new directory (hard links where it can)"),
        ("bench", "xkv vs LMDB/LevelDB/RocksDB/sqlite (uringkit kv bench -h)"),
        ("stress", "random operations checked against a dict (uringkit kv stress -h)"),
    ):
        mine = [ln for ln in EXAMPLES.splitlines() if ln.startswith(f"  uringkit kv {name} ")]
        p = sub.add_parser(
            name,
            help=hlp,
            description=hlp[:1].upper() + hlp[1:] + ".",
            epilog="\n".join(["examples:", *mine, "", EXAMPLES.split("\n\n", 1)[1]]),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name in ("bench", "stress"):
            continue
        p.add_argument(
            "path",
            help="the store's directory" + (" (created if missing)" if name == "put" else ""),
        )
        if name in ("put", "get", "delete"):
            p.add_argument("key", help="UTF-8 text, or hex with --hex (before the command)")
        if name == "put":
            p.add_argument("value", help="UTF-8 text, or hex with --hex")
        if name == "backup":
            p.add_argument("dest", help="a new directory (same filesystem: hard links)")
        if name == "scan":
            p.add_argument("--prefix", default="", help="only keys that start with it")
            p.add_argument("--start", help="only keys at or after it (bytewise)")
            p.add_argument("--stop", help="only keys before it")
            p.add_argument("--reverse", action="store_true", help="in descending key order")
            p.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")
            p.add_argument("--keys-only", action="store_true", help="keys without values")
            p.add_argument(
                "--json",
                action="store_true",
                help='JSON lines, one per key: {"key": ..., "value": ...} as UTF-8 text, '
                '"key_hex"/"value_hex" for bytes that are not (and for all with --hex)',
            )
        if name == "stats":
            p.add_argument("--json", action="store_true", help="one JSON object (for machines)")
        if name == "compact":
            p.add_argument(
                "--compression",
                choices=("zstd", "lz4"),
                help="rewrite the values in this compression (zstd: against a dictionary "
                "trained first on the store's values, or retrained when they have "
                "drifted from the one it has); without it, values are copied as they "
                "are stored",
            )
            p.add_argument(
                "--level",
                type=int,
                help="zstd's level, 1-19 (3 by default; higher: smaller, slower to write)",
            )
        if name in ("check", "stats", "scan", "get"):
            p.add_argument(
                "--repair",
                action="store_true",
                help="rebuild the index from every record, skipping damaged or missing ones "
                "(warns what was lost)",
            )
    a = ap.parse_args(argv)
    h = a.hex
    try:
        repair = getattr(a, "repair", False)
        read_only = a.cmd in ("get", "scan", "check", "stats", "backup") and not repair
        opts = {"create": a.cmd == "put", "repair": repair, "read_only": read_only}
        how = getattr(a, "compression", None)
        level = getattr(a, "level", None)
        with kv_open(a.path, **opts, compression=how, compression_level=level) as db:
            if a.cmd == "put":
                db.put(_b(a.key, h), _b(a.value, h))
            elif a.cmd == "get":
                v = db.get(_b(a.key, h))
                if v is None:
                    print(f"{a.key}: not found", file=sys.stderr)
                    return 1
                print(_show(v, h))
            elif a.cmd == "delete":
                if not db.delete(_b(a.key, h)):
                    print(f"{a.key}: not found", file=sys.stderr)
                    return 1
            elif a.cmd == "scan":
                # in key order (the store keeps its keys sorted once a scan has sorted
                # them, and a writer's close saves them: docs/kv.md); values read only
                # for what is printed
                rows = db.iterator(
                    prefix=_b(a.prefix, h),
                    start=None if a.start is None else _b(a.start, h),
                    stop=None if a.stop is None else _b(a.stop, h),
                    reverse=a.reverse,
                    include_value=not a.keys_only,
                )
                for row in itertools.islice(rows, a.limit or None):
                    if a.json:
                        k, v = (row, None) if a.keys_only else row
                        obj = _field("key", k, h)
                        if v is not None:
                            obj.update(_field("value", v, h))
                        print(json.dumps(obj, ensure_ascii=False))
                    elif a.keys_only:
                        print(_show(row, h))
                    else:
                        print(f"{_show(row[0], h)}\t{_show(row[1], h)}")
            elif a.cmd == "backup":
                r = db.checkpoint(a.dest)
                print(
                    f"{a.dest}: {r['segments']} segments, {r['linked_bytes']} bytes "
                    f"hard-linked, {r['copied_bytes']} copied"
                )
            elif a.cmd == "compact":
                retired, freed = db.compact()
                print(f"retired {retired} segments, reclaimed {freed} bytes")
                if a.compression:
                    now = db.stats()
                    d = now["compression_dictionary"]
                    g = now["compression_dictionary_generation"]
                    print(
                        f"values in {a.compression}"
                        + (f" (dictionary DICT-{d:08x}, generation {g})" if d else "")
                        + f"; {now['bytes_on_disk']} bytes on disk"
                    )
            elif a.cmd == "check":
                n, problems = db.check()
                for p_ in problems:
                    print(p_)
                print(f"{n} records checked, {len(problems)} problems")
                return 1 if problems else 0
            elif a.cmd == "stats":
                st = {**db.stats(), "recovery": db.recovery}
                if a.json:
                    print(json.dumps(st, indent=2))
                else:
                    width = max(map(len, st))
                    for name, value in st.items():
                        print(f"{name:{width}} {value}")
    except BrokenPipeError:
        raise  # (the reader stopped early: `uringkit` ends quietly, cli.main)
    except (OSError, ValueError) as e:
        print(f"uringkit kv: {e}", file=sys.stderr)
        return 1
    return 0
