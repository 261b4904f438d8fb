"""Compressible values: xkv without compression, with `compression="lz4"` and with
`compression="zstd"` (a trained dictionary) against LevelDB and RocksDB (both compress
with Snappy by default) and LMDB (which does not).

    python benches/kv_compression.py [--keys 200000] [--docs 1] [--drift] [--rounds 2]
        [--dir /tmp] [--json]

Each store is loaded with `--keys` 16-byte keys whose values are JSON records of
~550 bytes (a user profile: names and words drawn from small vocabularies, numbers,
timestamps, a list of tags), or lists of `--docs` of them, not durably, in
batches of 1,000; then the same random `--keys` gets are made. Prints puts/s, gets/s and
the bytes on disk over the bytes put (keys and values), each round in alternating
store order; the ratio is the best peer's space over xkv-zstd's (above 1: xkv-zstd is
smaller). Peers missing from the environment (`pip install '.[bench]'`) are skipped.

`--drift`: the store's values change kind — every key is written with a JSON profile,
then overwritten with a log line of ~230 bytes, and each store compacts (its own
compaction: LevelDB's and RocksDB's `compact_range`, xkv's `compact()`, which retrains
its zstd dictionary; LMDB has none). Puts/s are the log lines', space is over them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from typing import Any

from _common import Row, alternating_rounds, emit_json, kv_parser

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]


def record(rng: random.Random, i: int) -> bytes:
    """A ~600-byte JSON user profile."""
    doc = {
        "id": i,
        "name": f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()}",
        "email": f"{rng.choice(WORDS)}.{rng.choice(WORDS)}{rng.randrange(1000)}@example.com",
        "created": f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T"
        f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z",
        "score": round(rng.random() * 1000, 3),
        "tags": rng.sample(WORDS, 8),
        "bio": " ".join(rng.choice(WORDS) for _ in range(40)),
        "address": {
            "street": f"{rng.randrange(1, 999)} {rng.choice(WORDS).title()} Street",
            "city": rng.choice(WORDS).title(),
            "zip": f"{rng.randrange(10000, 99999)}",
        },
    }
    return json.dumps(doc).encode()


def log_line(rng: random.Random) -> bytes:
    """A ~230-byte access-log line: nothing like `record`'s JSON."""
    svc = rng.choice(WORDS)
    return (
        f"2026-12-03T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}."
        f"{rng.randrange(1000):03d}Z {rng.choice(['INFO', 'INFO', 'WARN', 'ERROR'])} [{svc}] "
        f"request_id={rng.getrandbits(64):016x} method={rng.choice(['GET', 'POST', 'PUT'])} "
        f"path=/api/v{rng.randrange(1, 4)}/{svc}/items/{rng.randrange(10**6)} "
        f"status={rng.choice([200, 200, 200, 201, 404, 500])} latency_ms={rng.random() * 250:.2f}"
    ).encode()


def run_store(
    peer: Any, path: str, keys: list[bytes], values: list[bytes], first: list[bytes] | None
) -> dict[str, float]:
    """Load `values` (over `first`, when given: then compact) and read them back."""
    from uringkit.kv.bench import du

    shutil.rmtree(path, ignore_errors=True)
    peer.open(path, durable=False)
    for i in range(0, len(keys), 1000) if first else ():
        peer.batch(list(zip(keys[i : i + 1000], first[i : i + 1000], strict=True)))
    t = time.perf_counter()
    for i in range(0, len(keys), 1000):
        peer.batch(list(zip(keys[i : i + 1000], values[i : i + 1000], strict=True)))
    puts = len(keys) / (time.perf_counter() - t)
    if first:
        peer.compact()
    peer.close()
    size = du(path)
    peer.open(path, durable=False)
    sample = random.Random(9).choices(range(len(keys)), k=len(keys))
    t = time.perf_counter()
    for j in sample:
        if peer.get(keys[j]) is None:
            raise AssertionError(f"{peer.name}: a key went missing")
    gets = len(keys) / (time.perf_counter() - t)
    peer.close()
    shutil.rmtree(path, ignore_errors=True)
    data = sum(len(k) + len(v) for k, v in zip(keys, values, strict=True))
    return {"puts_per_s": puts, "gets_per_s": gets, "space": size / data}


def main() -> int:
    ap = kv_parser(__doc__, rounds=2, keys=200_000)
    ap.add_argument("--docs", type=int, default=1, help="profiles per value (a JSON list)")
    ap.add_argument(
        "--drift", action="store_true", help="JSON first, then log lines over it; compact"
    )
    a = ap.parse_args()
    from uringkit.kv.bench import Xkv, peers

    rng = random.Random(3)
    keys = [b"%016d" % i for i in range(a.keys)]
    rng.shuffle(keys)
    values = [
        record(rng, i)
        if a.docs == 1
        else b"[" + b", ".join(record(rng, i) for _ in range(a.docs)) + b"]"
        for i in range(a.keys)
    ]
    first = None
    if a.drift:
        first, values = values, [log_line(rng) for _ in range(a.keys)]
    stores: list[tuple[str, Any]] = [("xkv", Xkv())]
    for how in ("lz4", "zstd"):
        x = Xkv()
        x.compression = how
        stores.append((f"xkv-{how}", x))
    stores += [(p.name, p) for p in peers() if p.name in ("leveldb", "rocksdb", "lmdb")]
    mean = sum(map(len, values)) / len(values)
    if not a.json:
        what = "log lines over JSON values" if a.drift else "JSON values"
        print(f"{a.keys:,} {what} of {mean:.0f} bytes on average", file=sys.stderr)
    by_name = dict(stores)

    def run(name: str) -> dict[str, Any]:
        path = os.path.join(a.dir, f"uringkit-compr-{name}")
        return run_store(by_name[name], path, keys, values, first)

    def line(name: str, res: dict[str, Any]) -> str:
        return (
            f"{res['puts_per_s']:>10,.0f} puts/s {res['gets_per_s']:>10,.0f} gets/s  "
            f"disk / data {res['space']:.3f}"
        )

    def summary(row: Row) -> tuple[list[str], float | None, str]:
        peers_space = [v["space"] for k, v in row.items() if not k.startswith("xkv")]
        ratio = min(peers_space) / row["xkv-zstd"]["space"] if peers_space else None
        cells = [f"{k} {v['space']:.3f}" for k, v in row.items()]
        return cells, ratio, " (disk / data; ratio: best peer / xkv-zstd)"

    results = alternating_rounds(a.rounds, list(by_name), run, line, summary, a.json)
    if a.json:
        emit_json({"keys": a.keys, "mean_value": mean, "drift": a.drift, "rounds": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
