"""The longest single puts: what a store makes one caller wait while it grows.

    python benches/kv_put_stalls.py [--keys 2000000] [--reopen-keys 300000] [--rounds 2]
        [--dir /tmp] [--json]

Two workloads of 16-byte keys and 100-byte values, non-durable (no fdatasync: what is
measured is the store's own work, not the disk's), each put timed on its own:

- **fresh**: `--keys` puts one at a time into a new store. xkv's index doubles its hash
  table on the way (at 1.8M keys a doubling used to make one put wait 67-94 ms: a
  rehash of every key); LMDB splits pages, LevelDB flushes its memtable and compacts.
- **reopened** (xkv only): a store of 1M keys loaded in batches and closed, reopened
  over its mapped `INDEX`, then `--reopen-keys` new keys one at a time: the overlay
  that holds them joins the table at 65,536 keys, and the table leaves the mapping for
  the heap when it must grow (23-55 ms for one put before session 27).

Every store installed (the `bench` extra: lmdb, plyvel, rocksdict) runs the fresh
workload in the same round, in turn (reversed every other round). Per store and
workload: puts/s, how many puts took over 1 ms, the P99.99 and the longest put; the
last column is xkv's longest put against the best peer's (> 1: xkv's is shorter).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from typing import Any

from _common import emit_json, kv_parser

from uringkit import kv
from uringkit.kv.bench import Peer, peers

VALUE = b"v" * 100


def timed_puts(put: Any, keys: int, prefix: bytes = b"") -> dict[str, float]:
    """Put `keys` keys one at a time through `put`; the latency figures."""
    lat = [0.0] * keys
    clock = time.perf_counter
    t0 = clock()
    for i in range(keys):
        k = prefix + b"%016d" % i
        t = clock()
        put(k, VALUE)
        lat[i] = clock() - t
    took = clock() - t0
    lat.sort()
    return {
        "puts_per_s": keys / took,
        "over_1ms": float(sum(1 for x in lat if x > 1e-3)),
        "p9999_ms": lat[min(keys - 1, int(keys * 0.9999))] * 1e3,
        "max_ms": lat[-1] * 1e3,
    }


def fresh(p: Peer, root: str, keys: int) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix=f"stall-{p.name}-", dir=root)
    shutil.rmtree(path)
    p.open(path, durable=False)
    try:
        return timed_puts(p.put, keys)
    finally:
        p.close()
        shutil.rmtree(path, ignore_errors=True)


def reopened(root: str, keys: int) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix="stall-reopen-", dir=root)
    try:
        with kv.open(path, durability="none", auto_compact=None) as db:
            for start in range(0, 1_000_000, 1000):
                with db.batch() as b:
                    for i in range(start, start + 1000):
                        b.put(b"%016d" % i, VALUE)
        with kv.open(path, durability="none", auto_compact=None) as db:
            if not db.stats()["index_mapped"]:
                raise SystemExit("the reopened store did not map its INDEX")
            return timed_puts(db.put, keys, prefix=b"n")
    finally:
        shutil.rmtree(path, ignore_errors=True)


def cell(r: dict[str, float]) -> str:
    return (
        f"{r['puts_per_s'] / 1e3:,.0f}K puts/s, {r['over_1ms']:.0f} over 1 ms, "
        f"P99.99 {r['p9999_ms']:.2f} ms, longest {r['max_ms']:.1f} ms"
    )


def main() -> int:
    ap = kv_parser(__doc__, rounds=2, keys=2_000_000)
    ap.add_argument("--reopen-keys", type=int, default=300_000)
    args = ap.parse_args()
    if args.keys < 10_000 or args.reopen_keys < 1000:
        ap.error("--keys must be at least 10000 and --reopen-keys at least 1000")
    stores = peers()
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        row: dict[str, Any] = {}
        for p in stores if r % 2 == 0 else stores[::-1]:
            row[p.name] = fresh(p, args.dir, args.keys)
            if not args.json:
                print(f"round {r + 1} fresh {p.name:8s} {cell(row[p.name])}", flush=True)
        row["xkv reopened"] = reopened(args.dir, args.reopen_keys)
        peer_max = [v["max_ms"] for k, v in row.items() if k not in ("xkv", "xkv reopened")]
        row["ratio"] = min(peer_max) / row["xkv"]["max_ms"] if peer_max else None
        rounds.append(row)
        if not args.json:
            print(f"round {r + 1} reopened xkv {cell(row['xkv reopened'])}", flush=True)
            if row["ratio"] is not None:
                print(
                    f"round {r + 1}: xkv's longest put {row['xkv']['max_ms']:.1f} ms against "
                    f"the best peer's {min(peer_max):.1f} ms: {row['ratio']:.2f}×",
                    flush=True,
                )
    if args.json:
        emit_json(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
