"""How long xkv's readers and writers wait while a compaction runs beside them.

    python benches/kv_compaction_pause.py [--keys 1000000] [--rounds 3]
        [--segment-size 0] [--durability none|batch|sync] [--dir /tmp] [--json]

Loads `--keys` 16-byte keys with 100-byte values (a quarter of them written twice, so
the compaction has something to drop), then runs `db.compact()` while one thread puts
new keys and another gets random loaded keys, each pausing 0.2 ms between calls. Prints,
per round, the compaction's time and what it freed, and each thread's operations,
median, P99 and longest call during the compaction: the longest is the figure that
docs/kv-format.md ("Compaction") quotes. Background compaction is off, so the one
measured is the only one.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from _common import emit_json, kv_parser

from uringkit import kv


def load(path: str, keys: int, durability: str, segment_size: int) -> kv.DB:
    """A store of `keys` keys, a quarter of them overwritten once."""
    opts: dict[str, Any] = {"durability": durability, "auto_compact": None}
    if segment_size:
        opts["segment_size"] = segment_size
    db = kv.open(path, **opts)
    val = b"v" * 100
    for start in range(0, keys, 1000):
        with db.batch() as b:
            for i in range(start, min(start + 1000, keys)):
                b.put(b"%016d" % i, val)
    for start in range(0, keys, 2000):
        with db.batch() as b:
            for i in range(start, min(start + 500, keys)):
                b.put(b"%016d" % i, val)
    return db


def one_round(path: str, args: argparse.Namespace) -> dict[str, Any]:
    db = load(path, args.keys, args.durability, args.segment_size)
    lat: dict[str, list[float]] = {"put": [], "get": []}
    running = threading.Event()
    done = threading.Event()
    val = b"w" * 100

    def worker(kind: str) -> None:
        i = 0
        call = db.put if kind == "put" else None
        while not done.is_set():
            t = time.perf_counter()
            if call is not None:
                call(b"w%015d" % i, val)
            else:
                db.get(b"%016d" % (i * 7919 % args.keys))
            dt = time.perf_counter() - t
            if running.is_set():
                lat[kind].append(dt)
            i += 1
            time.sleep(0.0002)

    threads = [threading.Thread(target=worker, args=(k,)) for k in lat]
    for t in threads:
        t.start()
    time.sleep(0.3)
    running.set()
    t0 = time.perf_counter()
    segments, freed = db.compact()
    took = time.perf_counter() - t0
    done.set()
    for t in threads:
        t.join()
    db.close()
    out: dict[str, Any] = {"compact_s": took, "segments": segments, "freed_bytes": freed}
    for kind, xs in lat.items():
        xs.sort()
        out[kind] = {
            "ops": len(xs),
            "median_ms": statistics.median(xs) * 1e3 if xs else 0.0,
            "p99_ms": xs[int(len(xs) * 0.99)] * 1e3 if xs else 0.0,
            "max_ms": xs[-1] * 1e3 if xs else 0.0,
        }
    return out


def main() -> int:
    ap = kv_parser(__doc__, rounds=3, keys=1_000_000)
    ap.add_argument("--segment-size", type=int, default=0, help="bytes (0: the default)")
    ap.add_argument("--durability", choices=["none", "batch", "sync"], default="none")
    args = ap.parse_args()
    if args.keys < 1000:
        ap.error("--keys must be at least 1000")
    rounds = []
    for r in range(args.rounds):
        path = tempfile.mkdtemp(prefix="kv-pause-", dir=args.dir)
        shutil.rmtree(path)
        try:
            res = one_round(path, args)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        rounds.append(res)
        if not args.json:
            cols = "  ".join(
                f"{k} {res[k]['ops']:,} ops, median {res[k]['median_ms']:.3f} ms, "
                f"P99 {res[k]['p99_ms']:.2f} ms, max {res[k]['max_ms']:.1f} ms"
                for k in ("put", "get")
            )
            print(
                f"round {r + 1}/{args.rounds}: compact {res['compact_s']:.2f} s "
                f"({res['segments']} segments, {res['freed_bytes'] / 1e6:.0f} MB freed)  {cols}",
                flush=True,
            )
    if args.json:
        emit_json(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
