"""Durable puts from many Python threads: xkv against LevelDB (plyvel) in the same run.

    python benches/kv_threads.py [--threads 64] [--puts 40000] [--rounds 3]
        [--dir /tmp] [--relay 1|0] [--json]

The `uringkit kv bench` row "durable put, 64 threads", alone and repeated: each round
runs every store once (alternating, so a slow stretch of the machine lands on both), in
a new store each time, with `--threads` plain threads each putting its share of `--puts`
16-byte keys with 100-byte values, durably (xkv `durability="sync"`, plyvel
`sync=True`). Prints puts/s, process CPU per put (user + system) and, for xkv, the
group commits and the GIL hand-offs that went to a primed writer (docs/kv-format.md,
"Writing"). `--relay 0` runs xkv with `URINGKIT_KV_RELAY=0` (a whole group woken at
once). plyvel is skipped when it is not installed (`pip install '.[bench]'`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from _common import emit_json, kv_parser, round_line


def one(name: str, directory: str, keys: list[bytes], val: bytes, threads: int) -> dict[str, Any]:
    """One round of one store; its figures."""
    from uringkit.kv.bench import Plyvel, Xkv

    p = Xkv() if name == "xkv" else Plyvel()
    path = tempfile.mkdtemp(prefix=f"kv-threads-{name}-", dir=directory)
    shutil.rmtree(path)
    p.open(path, durable=True)
    share = len(keys) // threads

    def writer(t: int) -> None:
        put = p.put
        for k in keys[t * share : (t + 1) * share]:
            put(k, val)

    ths = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    c0, t0 = os.times(), time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    dt, c1 = time.perf_counter() - t0, os.times()
    n = share * threads
    out: dict[str, Any] = {
        "store": name,
        "puts_per_s": n / dt,
        "cpu_us_per_put": (c1.user - c0.user + c1.system - c0.system) / n * 1e6,
    }
    if name == "xkv":
        st = p.db.stats()
        out["group_commits"] = st["group_commits"]
        out["relay_primed"] = st["relay_primed"]
    p.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def main() -> int:
    ap = kv_parser(__doc__, rounds=3)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--puts", type=int, default=40_000, help="puts per store and round")
    ap.add_argument("--relay", choices=["1", "0"], default="1")
    a = ap.parse_args()
    os.environ["URINGKIT_KV_RELAY"] = a.relay
    stores = ["xkv"]
    try:
        import plyvel  # noqa: F401

        stores.append("plyvel")
    except ImportError:
        print("plyvel is not installed: xkv alone", file=sys.stderr)
    keys = [os.urandom(16) for _ in range(a.puts)]
    val = os.urandom(100)
    results = []
    for r in range(a.rounds):
        row = [one(s, a.dir, keys, val, a.threads) for s in stores]
        results.append(row)
        if not a.json:
            cells = []
            for x in row:
                c = f"{x['store']} {x['puts_per_s']:>9,.0f} puts/s"
                c += f" {x['cpu_us_per_put']:5.1f} µs CPU"
                if "relay_primed" in x:
                    c += f" ({x['group_commits']} groups, {x['relay_primed']} primed)"
                cells.append(c)
            ratio = row[0]["puts_per_s"] / row[1]["puts_per_s"] if len(row) == 2 else None
            print(round_line(r, cells, ratio), flush=True)
    if a.json:
        emit_json({"threads": a.threads, "puts": a.puts, "rounds": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
