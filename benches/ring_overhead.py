"""Ring overhead from Python, next to os.pread in the same run.

    python benches/ring_overhead.py [--size 1g] [--ops 200000] [--dir .] [--json]

Measures: NOP round trips one at a time and in batches of 64; 4 KiB reads of a
page-cache-hot file at random offsets in batches of 64 (into preallocated buffers, and
into registered buffers with read_fixed); os.pread and os.preadv loops on the same
offsets. Prints microseconds per op (wall clock, and CPU time of the whole process:
`read_batch` shares large batches with uringkit's read helper thread, a second core,
unless `helper=False`) and the wall-clock ratio to os.pread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable

from _common import directory, make_file, warm

from uringkit import Fixed, Ring
from uringkit.bench.options import parse_size

BATCH = 64


def best_of(fn: Callable[[], int], repeat: int = 5) -> tuple[float, float]:
    """(wall, CPU) µs per op of the fastest of `repeat` runs (fn returns the number of
    ops it did); CPU is the process's, all threads."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        n = fn()
        wall = (time.perf_counter() - t) * 1e6 / n
        if wall < best[0]:
            best = (wall, (time.process_time() - c) * 1e6 / n)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", default="1g", help="test file size (default 1g)")
    ap.add_argument("--ops", type=int, default=200_000, help="ops per measurement")
    ap.add_argument(
        "--dir", type=directory, default=".", help="where to put the test file (made if missing)"
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    size = parse_size(a.size)
    n = a.ops - a.ops % BATCH
    path = make_file(a.dir, size)
    res: dict[str, float] = {}
    cpu_us: dict[str, float] = {}
    try:
        fd = os.open(path, os.O_RDONLY)
        warm(path)
        rng = random.Random(1)
        offs = [rng.randrange(size // 4096) * 4096 for _ in range(n)]
        ring = Ring(256)
        ring2 = Ring(256)

        def nop_single() -> int:
            for _ in range(n // 8):
                ring.nop()
                ring.wait(1)
            return n // 8

        def nop_batch() -> int:
            for _ in range(n // BATCH):
                for _ in range(BATCH):
                    ring.nop()
                ring.wait(BATCH)
            return n

        bufs = [bytearray(4096) for _ in range(BATCH)]

        def ring_read() -> int:
            for b in range(0, n, BATCH):
                for j in range(BATCH):
                    ring.read(fd, bufs[j], offs[b + j])
                ring.wait(BATCH)
            return n

        fixed = ring.register_buffers(BATCH, 4096)

        def ring_read_fixed() -> int:
            for b in range(0, n, BATCH):
                for j in range(BATCH):
                    ring.read_fixed(fd, fixed[j], offs[b + j])
                ring.wait(BATCH)
            return n

        big = bytearray(4096 * BATCH)

        def ring_read_batch() -> int:
            for b in range(0, n, BATCH):
                ring.read_batch(fd, big, offs[b : b + BATCH], 4096)
            return n

        ring.register_files([fd])
        (fixed_big,) = ring2.register_buffers(1, 4096 * BATCH)

        def ring_read_batch_fixed() -> int:
            for b in range(0, n, BATCH):
                ring2.read_batch(fd, fixed_big, offs[b : b + BATCH], 4096)
            return n

        ring3 = Ring(256, single_issuer=True, defer_taskrun=True)
        ring3.register_files([fd])
        (fixed3,) = ring3.register_buffers(1, 4096 * BATCH)

        def ring_read_batch_one_ring() -> int:
            for b in range(0, n, BATCH):
                ring2.read_batch(fd, fixed_big, offs[b : b + BATCH], 4096, helper=False)
            return n

        def ring_read_batch_tuned() -> int:
            for b in range(0, n, BATCH):
                ring3.read_batch(Fixed(0), fixed3, offs[b : b + BATCH], 4096)
            return n

        def pread() -> int:
            p = os.pread
            for o in offs:
                p(fd, 4096, o)
            return n

        buf = bytearray(4096)

        def preadv() -> int:
            p = os.preadv
            bl = [buf]
            for o in offs:
                p(fd, bl, o)
            return n

        runs = {
            "nop_single_us": nop_single,
            "nop_batch64_us": nop_batch,
            "pread_us": pread,
            "preadv_us": preadv,
            "ring_read_batch64_us": ring_read,
            "ring_read_fixed_batch64_us": ring_read_fixed,
            "read_batch64_us": ring_read_batch,
            "read_batch64_fixedbuf_us": ring_read_batch_fixed,
            "read_batch64_fixedbuf_nohelper_us": ring_read_batch_one_ring,
            "read_batch64_fixedfile_fixedbuf_defer_us": ring_read_batch_tuned,
        }
        # round robin, best of five each: run one after the other, the machine's drift
        # would weigh into the ratios to os.pread
        for _ in range(5):
            for k, fn in runs.items():
                wall, cpu = best_of(fn, repeat=1)
                if wall < res.get(k, float("inf")):
                    res[k], cpu_us[k] = wall, cpu
        ring.close()
        ring2.close()
        ring3.close()
        os.close(fd)
    finally:
        os.unlink(path)
    if a.json:
        json.dump({**res, "cpu_us": cpu_us}, sys.stdout, indent=2)
        print()
        return 0
    base = res["pread_us"]
    print(f"{'measurement':42} {'µs/op':>8} {'CPU µs/op':>10} {'vs os.pread':>12}")
    for k, v in res.items():
        print(f"{k:42} {v:8.3f} {cpu_us[k]:10.3f} {base / v:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
