"""Cold multi_get: xkv against LMDB, alternating, on stores loaded once.

    python benches/kv_cold.py [--keys 1000000] [--rounds 4] [--groups 500]
        [--dir /tmp] [--keep] [--json]

The `uringkit kv bench` row "multi_get x100 cold", repeated: both stores are loaded
with the bench's keys in the bench's order (16-byte keys, 100-byte values, batches of
1,000), closed, then each round opens each store in turn (the order alternating from
round to round, so that a slow stretch of the machine lands on both), drops its files
from the page cache, and times `--groups` multi_gets of 100 random keys. Prints keys/s
per round and, for xkv, how much the background warm-up had read. The stores stay in
`--dir` with `--keep` (a later run reuses them). LMDB is skipped when the `lmdb`
package is missing (`pip install '.[bench]'`).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from typing import Any

from _common import emit_json, kv_parser, round_line


def main() -> int:
    ap = kv_parser(__doc__, rounds=4, keys=1_000_000)
    ap.add_argument("--groups", type=int, default=500, help="multi_gets of 100 per round")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the stores")
    a = ap.parse_args()
    if a.keys < 1000 or a.groups < 1:
        ap.error("--keys must be at least 1000 and --groups at least 1")

    from uringkit.kv.bench import Lmdb, Peer, Xkv, evict

    peers: list[Peer] = [Xkv()]
    try:
        import lmdb  # noqa: F401

        peers.append(Lmdb())
    except ImportError:
        print("lmdb is not installed: xkv alone", file=sys.stderr)
    rng = random.Random(7)
    keys = [b"%016d" % i for i in range(a.keys)]
    val = os.urandom(100)
    groups = [[keys[rng.randrange(a.keys)] for _ in range(100)] for _ in range(a.groups)]
    base = os.path.join(a.dir, f"uringkit-kv-cold-{a.keys}")
    stores = []
    for p in peers:
        path = os.path.join(base, p.name)
        if not os.path.exists(path):
            if not a.json:
                print(f"loading {p.name}…", flush=True)
            p.open(path, durable=False)
            for i in range(0, a.keys, 1000):
                p.batch([(k, val) for k in keys[i : i + 1000]])
            p.close()
        stores.append((p, path))
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(a.rounds):
            row: dict[str, Any] = {}
            for p, path in stores if r % 2 == 0 else stores[::-1]:
                p.open(path, durable=False)
                evict(path)
                t = time.perf_counter()
                for g in groups:
                    p.multi_get(g)
                row[p.name] = len(groups) * 100 / (time.perf_counter() - t)
                if isinstance(p, Xkv):
                    row["xkv_warmed_bytes"] = p.db.stats()["warmed_bytes"]
                p.close()
            rounds.append(row)
            if not a.json:
                names = [p.name for p in peers]
                cells = [f"{n} {row[n]:>10,.0f} keys/s" for n in names]
                ratio = row[names[0]] / row[names[1]] if len(names) == 2 else None
                warmed = f" (warmed {row['xkv_warmed_bytes'] >> 20} MiB)"
                print(round_line(r, cells, ratio, warmed), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    if a.json:
        emit_json({"keys": a.keys, "groups": a.groups, "rounds": rounds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
