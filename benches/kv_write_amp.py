"""Write amplification with cold data: xkv's background compaction against LevelDB,
RocksDB and LMDB, each in its own process.

    python benches/kv_write_amp.py [--keys 1000000] [--hot 100000] [--overwrites 12000000]
        [--stores xkv,lmdb,leveldb,rocksdb] [--rounds 1] [--dir /tmp] [--json]

Each store is loaded with `--keys` keys (16-byte keys, 100-byte random values,
batches of 1,000), then `--overwrites` puts rewrite `--hot` of those keys (drawn once at random),
in batches of 1,000, not durably (xkv `durability="none"` with its default
`auto_compact`, the others without sync) — a small hot set beside cold data, the case
where a compaction that rewrites everything copies the cold data again and again.
Measured over the overwrite phase, closing included: the bytes the store's process
sent to storage (`/proc/self/io`: `write_bytes` − `cancelled_write_bytes`, every
thread's writes, counted when the page cache takes them) over the bytes put (keys and
values), i.e. the write amplification; the overwrites per second; and, after it, the
bytes on disk over the live data (space amplification). For xkv it also prints what its
compactions copied (`stats()["compacted_bytes"]`). Peers missing from the environment
(`pip install '.[bench]'`) are skipped.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import sys
import time
from typing import Any

from _common import Row, alternating_rounds, emit_json, kv_parser


def io_written() -> int:
    """Bytes this process has had sent to storage, net of writes cancelled (by a
    truncate or unlink before writeback)."""
    got = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, _, v = line.partition(":")
            got[k] = int(v)
    return got["write_bytes"] - got["cancelled_write_bytes"]


def run_peer(name: str, path: str, a: dict[str, int], out: Any) -> None:
    """One store's whole run, in a child process: results through `out` (a queue)."""
    from uringkit.kv.bench import Peer, du, peers

    peer: Peer = next(p for p in peers() if p.name == name)
    rng = random.Random(7)
    keys = [b"%016d" % i for i in range(a["keys"])]
    rng.shuffle(keys)
    hot = rng.sample(keys, a["hot"])
    peer.open(path, durable=False)
    for i in range(0, len(keys), 1000):
        peer.batch([(k, rng.randbytes(100)) for k in keys[i : i + 1000]])
    peer.close()
    peer.open(path, durable=False)
    before, t = io_written(), time.perf_counter()
    done = 0
    while done < a["overwrites"]:
        n = min(1000, a["overwrites"] - done)
        peer.batch([(hot[(done + j) % len(hot)], rng.randbytes(100)) for j in range(n)])
        done += n
    compacted = compactions = 0
    if name == "xkv":
        db: Any = peer.db  # type: ignore[attr-defined]
        while db.stats()["compaction_running"]:  # (counted once it is done)
            time.sleep(0.01)
        st = db.stats()
        compacted, compactions = st["compacted_bytes"], st["compactions"]
    peer.close()
    secs = time.perf_counter() - t
    wrote = io_written() - before
    put = a["overwrites"] * (16 + 100)
    live = a["keys"] * (16 + 100)
    out.put(
        {
            "store": name,
            "write_amp": wrote / put,
            "puts_per_s": a["overwrites"] / secs,
            "space_amp": du(path) / live,
            "compacted_bytes": compacted,
            "compactions": compactions,
        }
    )


def main() -> int:
    ap = kv_parser(__doc__, rounds=1, keys=1_000_000)
    ap.add_argument("--hot", type=int, default=100_000, help="keys overwritten")
    ap.add_argument("--overwrites", type=int, default=12_000_000, help="puts to hot keys")
    ap.add_argument(
        "--stores", default="xkv,lmdb,leveldb,rocksdb", help="which stores (comma-separated)"
    )
    a = ap.parse_args()
    if not 1 <= a.hot <= a.keys or a.overwrites < 1:
        ap.error("--hot must be between 1 and --keys, --overwrites at least 1")
    from uringkit.kv.bench import peers

    names = [p.name for p in peers() if p.name in a.stores.split(",")]
    ctx = mp.get_context("spawn")  # (a fresh process: its /proc/self/io is its own)
    params = {"keys": a.keys, "hot": a.hot, "overwrites": a.overwrites}

    def run(name: str) -> dict[str, Any]:
        path = os.path.join(a.dir, f"uringkit-wamp-{name}")
        shutil.rmtree(path, ignore_errors=True)
        q = ctx.Queue()
        proc = ctx.Process(target=run_peer, args=(name, path, params, q))
        proc.start()
        res: dict[str, Any] = q.get()
        proc.join()
        shutil.rmtree(path, ignore_errors=True)
        return res

    def line(name: str, res: dict[str, Any]) -> str:
        extra = ""
        if name == "xkv":
            extra = (
                f", {res['compactions']} compactions copied {res['compacted_bytes'] / 1e6:.1f} MB"
            )
        return (
            f"write amp {res['write_amp']:5.2f}  space amp {res['space_amp']:4.2f}  "
            f"{res['puts_per_s']:>10,.0f} puts/s{extra}"
        )

    def summary(row: Row) -> tuple[list[str], float | None, str]:
        others = [v["write_amp"] for k, v in row.items() if k != "xkv"]
        ratio = min(others) / row["xkv"]["write_amp"] if others else None
        cells = [f"{k} {v['write_amp']:.2f}" for k, v in row.items()]
        return cells, ratio, " (write amplification; ratio: best peer / xkv)"

    results = alternating_rounds(a.rounds, names, run, line, summary, a.json)
    if a.json:
        emit_json({"params": params, "rounds": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
