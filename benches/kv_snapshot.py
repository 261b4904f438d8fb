"""Snapshots: xkv's `db.snapshot()` against LevelDB's (plyvel), RocksDB's (rocksdict)
and an LMDB read transaction, in the same run.

    python benches/kv_snapshot.py [--keys 200000] [--gets 500000] [--rounds 3]
        [--dir /tmp] [--json]

Each round, for every store (in turn, reversed every other round), a new store of
`--keys` 16-byte keys with 100-byte values (not durable), then:

- take: a snapshot taken and released 20,000 times — µs each;
- writes held: half the keys overwritten in batches of 1,000 while a snapshot is held
  (xkv notes each changed key in it) — puts/s;
- gets: `--gets` random gets through that snapshot, hot — gets/s; every 1,000th value
  is checked to be the one from before the overwrites.

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
from collections.abc import Callable
from typing import Any

from _common import alternating_rounds, emit_json, kv_parser, kv_peers, print_medians

ROWS = {"take": "take+release (µs)", "writes": "writes held (puts/s)", "gets": "gets (gets/s)"}


class Store:
    """One store's snapshot API: `snapshot()` returns (get, release)."""

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        if name == "xkv":
            from uringkit import kv

            self.db: Any = kv.open(path, durability="none")
        elif name == "leveldb":
            import plyvel

            self.db = plyvel.DB(path, create_if_missing=True)
        elif name == "rocksdb":
            import rocksdict

            self.db = rocksdict.Rdict(path)
        else:
            import lmdb

            self.db = lmdb.open(path, map_size=8 << 30, sync=False, metasync=False)

    def write(self, items: list[tuple[bytes, bytes]]) -> None:
        if self.name == "xkv":
            self.db.write(items)
        elif self.name == "leveldb":
            with self.db.write_batch() as b:
                for k, v in items:
                    b.put(k, v)
        elif self.name == "rocksdb":
            import rocksdict

            wb = rocksdict.WriteBatch()
            for k, v in items:
                wb.put(k, v)
            self.db.write(wb)
        else:
            with self.db.begin(write=True) as t:
                for k, v in items:
                    t.put(k, v)

    def snapshot(self) -> tuple[Callable[[bytes], Any], Callable[[], None]]:
        if self.name == "lmdb":
            t = self.db.begin()
            return t.get, t.abort
        s = self.db.snapshot()
        if self.name == "rocksdb":
            # (rocksdict's snapshot has only [] — every key read here exists — and is
            # released when dropped)
            return s.__getitem__, lambda: None
        return s.get, s.close

    def scan(self, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        """The (key, value) pairs in [start, stop), in key order (benches/kv_range.py)."""
        if self.name in ("xkv", "leveldb"):
            return list(self.db.iterator(start=start, stop=stop))
        out = []
        if self.name == "rocksdb":
            it = self.db.iter()
            it.seek(start)
            while it.valid() and it.key() < stop:
                out.append((it.key(), it.value()))
                it.next()
            return out
        with self.db.begin() as t:
            c = t.cursor()
            if c.set_range(start):
                for k, v in c:
                    if k >= stop:
                        break
                    out.append((k, v))
        return out

    def close(self) -> None:
        self.db.close()


def one(name: str, directory: str, keys: list[bytes], n_gets: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix=f"kv-snapshot-{name}-", dir=directory)
    shutil.rmtree(path)
    st = Store(name, path)
    old = os.urandom(100)
    try:
        for i in range(0, len(keys), 1000):
            st.write([(k, old) for k in keys[i : i + 1000]])
        t = time.perf_counter()
        for _ in range(20_000):
            st.snapshot()[1]()
        take = (time.perf_counter() - t) / 20_000 * 1e6
        get, release = st.snapshot()
        half = keys[: len(keys) // 2]
        new = os.urandom(100)
        t = time.perf_counter()
        for i in range(0, len(half), 1000):
            st.write([(k, new) for k in half[i : i + 1000]])
        writes = len(half) / (time.perf_counter() - t)
        sample = [random.choice(keys) for _ in range(n_gets)]
        t = time.perf_counter()
        for k in sample:
            get(k)
        gets = n_gets / (time.perf_counter() - t)
        wrong = sum(get(k) != old for k in sample[::1000])
        if wrong:
            raise SystemExit(f"{name}: {wrong} values through the snapshot were not the old ones")
        release()
        return {"take": take, "writes": writes, "gets": gets}
    finally:
        st.close()
        shutil.rmtree(path, ignore_errors=True)


def main() -> int:
    ap = kv_parser(__doc__, rounds=3, keys=200_000)
    ap.add_argument("--gets", type=int, default=500_000)
    a = ap.parse_args()
    names = kv_peers()
    keys = [os.urandom(16) for _ in range(a.keys)]

    def line(_: str, r: dict[str, Any]) -> str:
        w, g = r["writes"], r["gets"]
        return f"take {r['take']:6.2f} µs | writes {w:>10,.0f}/s | gets {g:>10,.0f}/s"

    def summary(row: dict[str, dict[str, Any]]) -> tuple[list[str], float | None, str]:
        cells = [f"{n} {row[n]['gets']:,.0f} gets/s" for n in names]
        peers = [row[n]["gets"] for n in names if n != "xkv"]
        return cells, (row["xkv"]["gets"] / max(peers) if peers else None), ""

    rows = alternating_rounds(
        a.rounds, names, lambda n: one(n, a.dir, keys, a.gets), line, summary, a.json
    )
    med = {n: {w: statistics.median(r[n][w] for r in rows) for w in ROWS} for n in names}
    if a.json:
        emit_json({"keys": a.keys, "gets": a.gets, "rounds": rows, "median": med})
        return 0
    print_medians(f"median of {a.rounds} rounds, {a.keys:,} keys:", ROWS, names, med, "take")
    return 0


if __name__ == "__main__":
    sys.exit(main())
