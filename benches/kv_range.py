"""Range scans: xkv's `db.iterator(start=, stop=)` against LevelDB's (plyvel), RocksDB's
(rocksdict, `iter()` + `seek`) and an LMDB cursor (`set_range`), in the same run.

    python benches/kv_range.py [--keys 1000000] [--scans 5000] [--rounds 3]
        [--dir /tmp] [--json]

Each round, for every store (in turn, reversed every other round), a new store of
`--keys` 16-byte keys (`%016d`) with 100-byte values (not durable, batches of 1,000),
then:

- first: the first scan of 100 keys, in ms (xkv sorts its keys then: its index is a
  hash table, docs/kv.md);
- scans: `--scans` scans of 100 (key, value) pairs from random starts, hot — keys/s;
  every 100th checked against the keys asked for.

Prints each round's figures, then the median of each row per store with xkv's ratio
to the best peer. Peers not installed are skipped (`pip install '.[bench]'`).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from _common import alternating_rounds, emit_json, kv_parser, kv_peers, print_medians
from kv_snapshot import Store

ROWS = {"first": "first scan (ms)", "scans": "scans x100 (keys/s)"}


def one(name: str, directory: str, n_keys: int, n_scans: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix=f"kv-range-{name}-", dir=directory)
    shutil.rmtree(path)
    st = Store(name, path)
    val = os.urandom(100)
    rng = random.Random(5)
    starts = [rng.randrange(n_keys - 100) for _ in range(n_scans)]
    try:
        for i in range(0, n_keys, 1000):
            st.write([(b"%016d" % k, val) for k in range(i, min(i + 1000, n_keys))])
        t = time.perf_counter()
        st.scan(b"%016d" % 7, b"%016d" % 107)
        first = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        for a in starts:
            st.scan(b"%016d" % a, b"%016d" % (a + 100))
        scans = n_scans * 100 / (time.perf_counter() - t)
        for a in starts[::100]:
            got = [k for k, _ in st.scan(b"%016d" % a, b"%016d" % (a + 100))]
            if got != [b"%016d" % k for k in range(a, a + 100)]:
                raise SystemExit(f"{name}: the scan from {a} returned the wrong keys")
        return {"first": first, "scans": scans}
    finally:
        st.close()
        shutil.rmtree(path, ignore_errors=True)


def main() -> int:
    ap = kv_parser(__doc__, rounds=3, keys=1_000_000)
    ap.add_argument("--scans", type=int, default=5000)
    a = ap.parse_args()
    names = kv_peers()

    def line(_: str, r: dict[str, Any]) -> str:
        return f"first {r['first']:8.2f} ms | scans {r['scans']:>10,.0f} keys/s"

    def summary(row: dict[str, dict[str, Any]]) -> tuple[list[str], float | None, str]:
        cells = [f"{n} {row[n]['scans']:,.0f} keys/s" for n in names]
        peers = [row[n]["scans"] for n in names if n != "xkv"]
        return cells, (row["xkv"]["scans"] / max(peers) if peers else None), ""

    rows = alternating_rounds(
        a.rounds, names, lambda n: one(n, a.dir, a.keys, a.scans), line, summary, a.json
    )
    med = {n: {w: statistics.median(r[n][w] for r in rows) for w in ROWS} for n in names}
    if a.json:
        emit_json({"keys": a.keys, "scans": a.scans, "rounds": rows, "median": med})
        return 0
    print_medians(f"median of {a.rounds} rounds, {a.keys:,} keys:", ROWS, names, med, "first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
