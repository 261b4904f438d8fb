"""Crash safety for real: a writer process puts with durability="sync", logging an intent
before each operation and an acknowledgement after it returns; it is SIGKILLed at random
moments (some during compaction). After each kill the store is reopened: every
acknowledged put must be there with its exact value, no acknowledged delete may come
back, and nothing with a bad CRC may be served. Only the single operation that was in
flight at the kill may have landed or not — atomically (a batch all or nothing)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from uringkit import kv

WRITER = r"""
import os, sys, random
from uringkit import kv
path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
db = kv.open(path, durability="sync", segment_size=64 << 10)
log = os.fdopen(int(sys.argv[3]), "w", buffering=1)
i = 0
while True:
    i += 1
    r = rng.random()
    if r < 0.75:
        k = b"k%d" % rng.randrange(400)
        v = b"%d-%d-" % (seed, i) + bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
        ops = [(k, v)]
    elif r < 0.9:
        ops = [(b"k%d" % rng.randrange(400), None)]
    elif r < 0.97:
        ops = [(b"b%d" % rng.randrange(50), b"%d-%d-%d" % (seed, i, j)) for j in range(5)]
    else:
        log.write("C\n")
        db.compact()
        continue
    line = " ".join(k.hex() + ":" + ("-" if v is None else v.hex()) for k, v in ops)
    log.write("I " + line + "\n")
    if len(ops) == 1:
        k, v = ops[0]
        db.delete(k) if v is None else db.put(k, v)
    else:
        with db.batch() as b:
            for k, v in ops:
                b.put(k, v)
    log.write("A " + line + "\n")
"""

ROUNDS = int(os.environ.get("URINGKIT_CRASH_ROUNDS", "30"))

Model = dict[bytes, bytes | None]


def parse(line: str) -> list[tuple[bytes, bytes | None]]:
    out = []
    for item in line.split()[1:]:
        k, v = item.split(":")
        out.append((bytes.fromhex(k), None if v == "-" else bytes.fromhex(v)))
    return out


def kill_writer(
    path: Path, seed: int
) -> tuple[list[list[tuple[bytes, bytes | None]]], list[tuple[bytes, bytes | None]] | None]:
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(seed), str(w)],
        pass_fds=(w,),
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    os.close(w)
    time.sleep(random.Random(seed).uniform(0.15, 0.6))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with os.fdopen(r, "rb") as f:
        lines = f.read().decode().split("\n")[:-1]  # a torn last line was never complete
    acked: list[list[tuple[bytes, bytes | None]]] = []
    pending = None
    for line in lines:
        if line.startswith("I "):
            pending = parse(line)
        elif line.startswith("A "):
            acked.append(parse(line))
            pending = None
    return acked, pending


@pytest.mark.timeout(900)
def test_sigkill_rounds(tmp_path: Path) -> None:
    path = tmp_path / "store"
    model: Model = {}
    for seed in range(ROUNDS):
        acked, pending = kill_writer(path, seed)
        for ops in acked:
            model.update(ops)
        with kv.open(path) as db:
            after = dict(model)
            if pending is not None:
                after.update(pending)
            state = {k: db.get(k) for k in set(model) | set(after)}
            if pending is not None:
                keys = [k for k, _ in pending]
                landed = all(state[k] == after[k] for k in keys)
                missed = all(state[k] == model.get(k) for k in keys)
                assert landed or missed, f"round {seed}: in-flight op half applied: {pending}"
                if landed:
                    model = after
            for k, v in model.items():
                assert state[k] == v, f"round {seed}: {k!r} is {state[k]!r}, acknowledged {v!r}"
            n, problems = db.check()
            assert problems == [] and n == sum(v is not None for v in model.values())


ASYNC_WRITER = r"""
import asyncio, os, sys, random
from uringkit import kv
path, seed = sys.argv[1], int(sys.argv[2])
log = os.fdopen(int(sys.argv[3]), "w", buffering=1)

async def task(db, t):
    rng = random.Random(seed * 100 + t)
    i = 0
    while True:
        i += 1
        r = rng.random()
        k = b"t%d-k%d" % (t, rng.randrange(60))
        if r < 0.8:
            ops = [(k, b"%d-%d-%d-" % (seed, t, i) + bytes(rng.randrange(200)))]
        elif r < 0.9:
            ops = [(k, None)]
        elif r < 0.99 or t != 0:
            ops = [(b"t%d-b%d" % (t, j), b"%d-%d-%d" % (seed, i, j)) for j in range(4)]
        else:
            await db.compact()
            continue
        line = " ".join(k.hex() + ":" + ("-" if v is None else v.hex()) for k, v in ops)
        log.write("I %d %s\n" % (t, line))
        if len(ops) > 1:
            await db.batch(ops)
        elif ops[0][1] is None:
            await db.delete(ops[0][0])
        else:
            await db.put(*ops[0])
        log.write("A %d %s\n" % (t, line))

async def main():
    async with kv.open_async(path, segment_size=64 << 10) as db:
        await asyncio.gather(*(task(db, t) for t in range(8)))

asyncio.run(main())
"""


@pytest.mark.timeout(600)
def test_sigkill_rounds_async_tasks(tmp_path: Path) -> None:
    """Eight tasks write through the event loop's group commit (disjoint keys, so each
    task's in-flight operation is judged on its own) and are killed mid-flight."""
    path = tmp_path / "store"
    model: Model = {}
    for seed in range(max(ROUNDS // 3, 5)):
        r, w = os.pipe()
        proc = subprocess.Popen(
            [sys.executable, "-c", ASYNC_WRITER, str(path), str(seed), str(w)],
            pass_fds=(w,),
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        os.close(w)
        time.sleep(random.Random(seed).uniform(0.3, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with os.fdopen(r, "rb") as f:
            lines = f.read().decode().split("\n")[:-1]
        pending: dict[str, list[tuple[bytes, bytes | None]]] = {}
        acks = 0
        for line in lines:
            kind, task, rest = line.split(" ", 2)
            if kind == "I":
                pending[task] = parse("x " + rest)
            else:
                model.update(parse("x " + rest))
                pending.pop(task, None)
                acks += 1
        assert acks > 0, f"round {seed}: the writer acknowledged nothing"
        with kv.open(path) as db:
            for task, ops in pending.items():
                keys = [k for k, _ in ops]
                after = dict(model)
                after.update(ops)
                landed = all(db.get(k) == after[k] for k in keys)
                missed = all(db.get(k) == model.get(k) for k in keys)
                assert landed or missed, f"round {seed}: task {task} half applied: {ops}"
                if landed:
                    model = after
            for k, v in model.items():
                got = db.get(k)
                assert got == v, f"round {seed}: {k!r} is {got!r}, acknowledged {v!r}"
            n, problems = db.check()
            assert problems == [] and n == sum(v is not None for v in model.values())
