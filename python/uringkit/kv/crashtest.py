"""The SIGKILL crash harness for xkv, shared by the test suite (tests/kv/test_crash.py,
30+ rounds in CI) and `benches/kv_crash.py` (as many rounds as asked).

A writer process puts with durability="sync" (or "batch"/"none": a killed process
loses nothing they acknowledged either — only a crash of the machine could), logging an
intent before each operation and an acknowledgement after it returns, and is SIGKILLed
at a random moment (some rounds during compaction: compact() is called in one round in
three, another third compacts in the background, `auto_compact`; one round in four
stores values LZ4-compressed, `compression="lz4"`, another zstd-compressed,
`compression="zstd"`, which trains the store's dictionary the first time it sees 1,000
values, then uses it in every zstd round after — their text changes vocabulary as
they go, so compactions retrain it and remove the dictionaries no record names). The
store is then
reopened and checked: every acknowledged write is there with its exact value, no
acknowledged delete has come back, nothing with a bad CRC is served, and the one
operation each writer had in flight at the kill either landed whole or not at all (a
batch all or nothing).

Two writers: "threads" (one blocking writer, puts/deletes/batches — `with db.batch()`
or `db.write(ops)` — delete_range calls and compactions on 400 hot keys, now and then a
put or delete of one of 3,000 cold ones, and in one round in five checkpoints, which a
kill may interrupt: at the checkpoint's path there must then be a whole store or
nothing) and "async"
(eight asyncio tasks on the event loop's group commit, each on its own keys so that each
task's in-flight operation is judged on its own).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import DB
from . import open as kv_open

__all__ = ["CrashCheckFailed", "Round", "run_rounds"]

Ops = list[tuple[bytes, bytes | None]]
Model = dict[bytes, bytes | None]

_LOG = r"""
import os, shutil, sys, random
from uringkit import kv
path, seed = sys.argv[1], int(sys.argv[2])
log = os.fdopen(int(sys.argv[3]), "w", buffering=1)
direct = sys.argv[4] == "direct"
durability = sys.argv[5]
# one round in three (seed % 3 == 1) compacts in the background, at nearly every
# sealed segment; the others only when compact() is called (or never)
auto = 16 << 10 if seed % 3 == 1 else None
# one round in four stores values LZ4-compressed (when they compress), another
# zstd-compressed (the store's dictionary trained in one of them, used after that)
compression = (None, "lz4", None, "zstd")[seed % 4]
# zstd rounds write text whose vocabulary changes every 500 operations: compactions
# then retrain the dictionary and remove the ones no record names any more
VOCABS = [
    [b"alpha", b"bravo", b"charlie", b"delta", b"echo"],
    [b"GET /api", b"status=200", b"latency_ms", b"request_id", b"WARN"],
    [b'{"user":', b'"score":', b'"tags": [', b'"email":', b"null}"],
]
def line(ops):
    return " ".join(k.hex() + ":" + ("-" if v is None else v.hex()) for k, v in ops)
"""

THREAD_WRITER = (
    _LOG
    + r"""
rng = random.Random(seed)
db = kv.open(
    path, durability=durability, segment_size=64 << 10, direct=direct,
    auto_compact=auto and 0.3, auto_compact_bytes=auto or 0, compression=compression,
)
i = 0
while True:
    i += 1
    r = rng.random()
    if r < 0.72:
        k = b"k%d" % rng.randrange(400)
        n = rng.randrange(300)
        if rng.random() < 0.5:
            tail = bytes(rng.randrange(256) for _ in range(n))  # (incompressible)
        elif compression == "zstd":
            words = VOCABS[(seed + i // 500) % 3]
            tail = b" ".join(rng.choice(words) for _ in range(n // 6))
        else:
            tail = b"%d," % rng.randrange(10) * (n // 2)  # (compressible)
        v = b"%d-%d-" % (seed, i) + tail
        ops = [(k, v)]
    elif r < 0.75:
        # cold keys, written or deleted now and then: their values sit in old segments
        # that background compactions leave alone, so the tombstones of the deletes are
        # copied on from the segments that are compacted
        k = b"c%d" % rng.randrange(3000)
        ops = [(k, None if rng.random() < 0.5 else b"%d-%d-cold" % (seed, i))]
    elif r < 0.89:
        ops = [(b"k%d" % rng.randrange(400), None)]
    elif r < 0.91:
        # delete_range: the keys it will delete (one writer: the same as it finds), all
        # or none of them gone after a kill
        prefix = b"b%d" % rng.randrange(5)
        ops = [(k, None) for k in db.iterator(prefix=prefix, include_value=False)]
        log.write("I 0 " + line(ops) + "\n")
        db.delete_range(prefix=prefix)
        log.write("A 0 " + line(ops) + "\n")
        continue
    elif r < 0.915 and seed % 5 == 3:
        # a backup, which a kill may interrupt: never a partial copy at its path. (The
        # last one is renamed away before it is removed: a kill in the middle of
        # removing it must not leave a partial store at that path either.)
        shutil.rmtree(path + "-cp-old", ignore_errors=True)
        if os.path.exists(path + "-cp"):
            os.rename(path + "-cp", path + "-cp-old")
            shutil.rmtree(path + "-cp-old")
        db.checkpoint(path + "-cp")
        continue
    elif r < 0.97 or seed % 3:
        ops = [(b"b%d" % rng.randrange(50), b"%d-%d-%d" % (seed, i, j)) for j in range(5)]
    else:
        # (one round in three: a compaction drops INDEX and the live overlay over it,
        # which the other rounds' writers leave behind when killed)
        db.compact()
        continue
    log.write("I 0 " + line(ops) + "\n")
    if len(ops) == 1:
        k, v = ops[0]
        db.delete(k) if v is None else db.put(k, v)
    elif rng.random() < 0.5:
        db.write(ops)
    else:
        with db.batch() as b:
            for k, v in ops:
                b.put(k, v)
    log.write("A 0 " + line(ops) + "\n")
"""
)

ASYNC_WRITER = (
    _LOG
    + r"""
import asyncio

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
        elif r < 0.99 or t != 0 or seed % 3:
            ops = [(b"t%d-b%d" % (t, j), b"%d-%d-%d" % (seed, i, j)) for j in range(4)]
        else:
            await db.compact()
            continue
        log.write("I %d %s\n" % (t, line(ops)))
        if len(ops) > 1:
            await db.batch(ops)
        elif ops[0][1] is None:
            await db.delete(ops[0][0])
        else:
            await db.put(*ops[0])
        log.write("A %d %s\n" % (t, line(ops)))

async def main():
    async with kv.open_async(
        path, durability, segment_size=64 << 10, direct=direct,
        auto_compact=auto and 0.3, auto_compact_bytes=auto or 0, compression=compression,
    ) as db:
        await asyncio.gather(*(task(db, t) for t in range(8)))

asyncio.run(main())
"""
)

WRITERS = {"threads": THREAD_WRITER, "async": ASYNC_WRITER}


def _async_writer_of(key: bytes) -> bytes:
    """The task of ASYNC_WRITER that writes `key` (`t3-k17` and `t3-b2`: task t3)."""
    return key.split(b"-", 1)[0]


class CrashCheckFailed(AssertionError):
    """The store broke a promise after a SIGKILL (the message says which and where)."""


@dataclass
class Round:
    seed: int
    acked: int = 0
    in_flight: int = 0
    landed: int = 0
    checked_keys: int = 0
    #: the reopen took the killed writer's live overlay (OVERLAY) back instead of
    #: replaying the log since INDEX (a writer killed mid-update replays)
    from_overlay: bool = False
    #: the check's scan in key order read the order a close saved (`ORDER`) instead of
    #: sorting the keys
    order_from_file: bool = False
    #: the store had a zstd dictionary (DICT-*) when this round's writer was killed:
    #: zstd rounds from then on compress with it
    dictionary: bool = False
    #: the dictionaries (DICT-* names) in the store at the check: across rounds, more
    #: than one means compactions retrained it (and removed those no record named)
    dictionaries: list[str] = field(default_factory=list)
    #: a checkpoint (taken in one round in five) was found whole at the check
    backups: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _parse(text: str) -> Ops:
    out: Ops = []
    for item in text.split():
        k, v = item.split(":")
        out.append((bytes.fromhex(k), None if v == "-" else bytes.fromhex(v)))
    return out


def kill_writer(
    path: Path,
    seed: int,
    mode: str,
    direct: bool = False,
    durability: str = "sync",
    cut: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[list[Ops], dict[str, Ops]]:
    """Run a writer for a random 0.15-0.8 s, SIGKILL it; return what it acknowledged (in
    order) and, per writer task, the operation it had in flight. `cut`: the power cut,
    made just before the kill (the writer dies with the machine). `env`: more
    environment for the writer."""
    r, w = os.pipe()
    how = "direct" if direct else "buffered"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITERS[mode], str(path), str(seed), str(w), how, durability],
        pass_fds=(w,),
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
        # (after a power cut the writer's last calls fail: ENOTCONN, not a finding)
        stderr=subprocess.DEVNULL if cut else None,
    )
    os.close(w)
    # The log is read while the writer runs: a full pipe would block it on its next log
    # line (after ~64 KiB, some 120 operations), and the kill would nearly always find
    # it parked there — between operations — whatever the delay drawn below.
    chunks: list[bytes] = []
    with os.fdopen(r, "rb", buffering=0) as f:
        reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: f.read(1 << 16), b"")))
        reader.start()
        low = 0.15 if mode == "threads" else 0.3
        time.sleep(random.Random(seed).uniform(low, low + 0.5))
        if cut is not None:
            cut()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join()
    lines = b"".join(chunks).decode().split("\n")[:-1]  # a torn last line never completed
    acked: list[Ops] = []
    pending: dict[str, Ops] = {}
    for ln in lines:
        kind, task, rest = ln.split(" ", 2)
        if kind == "I":
            pending[task] = _parse(rest)
        elif kind == "A":
            acked.append(_parse(rest))
            pending.pop(task, None)
    return acked, pending


def check(path: Path, model: Model, pending: dict[str, Ops], rnd: Round) -> Model:
    """Reopen and check the store against `model` (acknowledged writes); returns the model
    including the in-flight operations that landed. A torn tail the reopen cuts (a write
    the kill interrupted) is expected: its warning goes to the round's notes."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", RuntimeWarning)
        db = kv_open(path)
    rnd.notes.extend(str(w.message) for w in seen)
    rnd.dictionaries = sorted(f.name for f in path.glob("DICT-*"))
    rnd.dictionary = bool(rnd.dictionaries)
    with db:
        rnd.from_overlay = bool(db.recovery["from_overlay"])
        for task, ops in pending.items():
            keys = [k for k, _ in ops]
            after = dict(model)
            after.update(ops)
            landed = all(db.get(k) == after[k] for k in keys)
            missed = all(db.get(k) == model.get(k) for k in keys)
            if not (landed or missed):
                odd = [(k, db.get(k), model.get(k)) for k in keys]
                odd = [o for o in odd if o[1] not in (after[o[0]], o[2])]
                raise CrashCheckFailed(
                    f"round {rnd.seed}: writer {task}'s in-flight operation is half applied"
                    + (
                        f", or a write before it lost: {odd[0][0]!r} reads {odd[0][1]!r}, "
                        f"neither what was acknowledged ({odd[0][2]!r}) nor the new value"
                        if odd
                        else ""
                    )
                    + f": {ops!r}"
                )
            if landed:
                model = after
                rnd.landed += 1
        for k, v in model.items():
            got = db.get(k)
            if got != v:
                raise CrashCheckFailed(
                    f"round {rnd.seed}: {k!r} reads {got!r}, but {v!r} was acknowledged"
                )
        n, problems = db.check()
        if problems:
            raise CrashCheckFailed(f"round {rnd.seed}: damaged records served: {problems}")
        live = sum(v is not None for v in model.values())
        if n != live:
            raise CrashCheckFailed(f"round {rnd.seed}: {n} live keys, expected {live}")
        _check_key_order(db, sorted(k for k, v in model.items() if v is not None), rnd)
        rnd.checked_keys = len(model)
    _check_backup(path, rnd)
    return model


def _prefix(base: Model, ops: list[Ops], state: Model) -> int:
    """How many of `ops` (in order, from `base`) the store's `state` is the result of:
    the longest such prefix, or -1 when it is the result of none."""
    model: Model = {k: v for k, v in base.items() if v is not None}
    # keys where the state differs from the model after j operations, for each j in turn
    differ = {k for k in model.keys() | state.keys() if model.get(k) != state.get(k)}
    kept = 0 if not differ else -1
    for j, group in enumerate(ops, 1):
        for k, v in group:
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
            if model.get(k) == state.get(k):
                differ.discard(k)
            else:
                differ.add(k)
        if not differ:
            kept = j
    return kept


def _check_key_order(db: DB, in_order: list[bytes], rnd: Round) -> None:
    """The store's keys in key order (a bounded scan: from the order the last close
    saved in ORDER, when this is the state it left, else sorted), and a range of them,
    are `in_order`."""
    got = list(db.iterator(start=b"", include_value=False))
    rnd.order_from_file = db.stats()["order_sorts"] == 0
    if got != in_order:
        extra = sorted(set(got) - set(in_order))[:3]
        missing = sorted(set(in_order) - set(got))[:3]
        raise CrashCheckFailed(
            f"round {rnd.seed}: a scan in key order lists {len(got)} keys, expected "
            f"{len(in_order)} (extra {extra}, missing {missing})"
        )
    if in_order:
        lo, hi = in_order[len(in_order) // 3], in_order[2 * len(in_order) // 3]
        got_range = list(db.iterator(start=lo, stop=hi, include_value=False))
        if got_range != [k for k in in_order if lo <= k < hi]:
            raise CrashCheckFailed(f"round {rnd.seed}: the scan of [{lo!r}, {hi!r}) differs")


def check_point_in_time(
    path: Path,
    base: Model,
    ops: list[Ops],
    rnd: Round,
    writer_of: Callable[[bytes], bytes] | None = None,
) -> Model:
    """After a power cut of a `durability="batch"` or `"none"` writer: the store opens
    without repair, serves no damaged record, and holds the state after some prefix of
    the writer's operations (`ops`: acknowledged ones in order, then the one in flight)
    — what the last sync covered and maybe more, never a later write without an
    earlier one, never part of a batch. Returns that state.

    `writer_of` (the async writer's tasks, each writing keys of its own, acknowledged
    in no one order between them): the key's writer. The keys of each writer then hold
    the state after some prefix of that writer's operations. (Until session 33 a
    `"none"` store was not held to either: a segment whose tail a crash lost whole went
    unseen — see docs/kv-format.md, Opening step 4.)"""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            db = kv_open(path)
        except OSError as e:
            raise CrashCheckFailed(f"round {rnd.seed}: the store does not open: {e}") from e
    rnd.notes.extend(str(w.message) for w in seen)
    with db:
        state: Model = {k: v for k, v in db.items()}
        n, problems = db.check()
        _check_key_order(db, sorted(state), rnd)
    if problems:
        raise CrashCheckFailed(f"round {rnd.seed}: damaged records served: {problems}")
    if writer_of is None:
        parts: dict[bytes, tuple[Model, list[Ops], Model]] = {b"": (base, ops, state)}
    else:
        keys = base.keys() | state.keys() | {k for g in ops for k, _ in g}
        parts = {}
        for w in {writer_of(k) for k in keys}:
            mine = {k for k in keys if writer_of(k) == w}
            parts[w] = (
                {k: v for k, v in base.items() if k in mine},
                [g for g in ops if g and writer_of(g[0][0]) == w],
                {k: v for k, v in state.items() if k in mine},
            )
    rnd.landed = 0
    for w, (b, o, st) in sorted(parts.items()):
        kept = _prefix(b, o, st)
        if kept < 0:
            who = f"writer {w.decode()}'s " if w else "the writer's "
            raise CrashCheckFailed(
                f"round {rnd.seed}: the store after the power cut is no prefix of {who}"
                f"{len(o)} operations (its {len(st)} keys against {len(b)} before them)"
            )
        rnd.landed += kept
    rnd.checked_keys = len(state)
    return dict(state)


def _check_backup(path: Path, rnd: Round) -> None:
    """A checkpoint the kill may have interrupted: at its path there is a whole store or
    nothing (the copy is made under a hidden name and renamed when whole); the hidden
    copies interrupted ones leave are removed here."""
    cp = Path(f"{path}-cp")
    for left in path.parent.glob(f".{cp.name}.xkv-checkpoint-*"):
        rnd.notes.append(f"an interrupted checkpoint left {left.name}")
        shutil.rmtree(left, ignore_errors=True)
    # (the writer's own removal of its last backup, if the kill interrupted it)
    shutil.rmtree(f"{cp}-old", ignore_errors=True)
    if not cp.exists():
        return
    rnd.backups += 1
    with kv_open(cp, read_only=True) as db:
        n, problems = db.check()
        if problems or n != len(db):
            raise CrashCheckFailed(
                f"round {rnd.seed}: the checkpoint at {cp} is damaged: {problems}"
            )


def run_rounds(
    path: Path,
    rounds: int,
    mode: str = "threads",
    on_round: Callable[[Round], None] | None = None,
    direct: bool = False,
    durability: str = "sync",
    power: bool = False,
) -> list[Round]:
    """Kill and check `rounds` times on one store (each round builds on the last);
    `direct`: the writer appends with O_DIRECT; `durability`: the writer's (the same
    promises hold for all three under SIGKILL). `power`: each kill is a power cut too
    — the store lives on a LazyFS mount (`uringkit.kv.lazyfs`, `<path>-disk` mounted at
    `<path>-mnt`) that loses every byte not fsynced, keeping a random part of them.
    `durability="sync"` then keeps every promise above; "batch" and "none" must
    reopen to a point in time (`check_point_in_time`: `Round.landed` is how many of the
    round's operations it kept) — with mode "async", each task's keys at a point of
    that task's operations. Raises CrashCheckFailed at the first broken promise."""
    if mode not in WRITERS:
        raise ValueError(f"mode={mode!r}: use one of {sorted(WRITERS)}")
    if durability not in ("sync", "batch", "none"):
        raise ValueError(f"durability={durability!r}: use sync, batch or none")
    mount = None
    boot = os.environ.get("URINGKIT_KV_BOOT_ID")
    if power:
        from .lazyfs import Mount

        mount = Mount(f"{path}-disk", f"{path}-mnt")
        path = Path(mount.mountpoint) / path.name
        mount.up(seed=0, writeback=0.5, lazy_names=True)
        # each power cut is a reboot to the store: what it keeps only within one boot
        # (the live overlay) is not trusted after it
        os.environ["URINGKIT_KV_BOOT_ID"] = "power-0"
    model: Model = {}
    done: list[Round] = []
    try:
        for seed in range(rounds):
            t = time.perf_counter()
            rnd = Round(seed)
            cut = mount.cut if mount else None
            # (every other round on the power-cut filesystem maps its appends and keeps
            # its live overlay in a mapped file, as on ext4; the others use pwrite)
            mapped = {"URINGKIT_KV_MAPPED": "1"} if power and seed % 2 else None
            acked, pending = kill_writer(path, seed, mode, direct, durability, cut, mapped)
            if mount is not None:
                # what the disk kept, mounted again: the check's writes (a cut tail, INDEX)
                # and the next round's are volatile until synced, as the writer's were
                wb = random.Random(seed).choice([0, 0.1, 0.5, 2])
                mount.up(seed=seed + 1, writeback=wb, lazy_names=True)
                os.environ["URINGKIT_KV_BOOT_ID"] = f"power-{seed + 1}"
            rnd.acked = len(acked)
            rnd.in_flight = len(pending)
            if not acked:
                rnd.notes.append("the writer acknowledged nothing before the kill")
            if power and durability != "sync":
                ops = acked + list(pending.values())
                # (eight tasks have no one order of operations to find a point in: each
                # task's keys are its own, and at a point of its operations)
                of = None if mode == "threads" else _async_writer_of
                model = check_point_in_time(path, model, ops, rnd, of)
            else:
                for group in acked:
                    model.update(group)
                model = check(path, model, pending, rnd)
            rnd.seconds = time.perf_counter() - t
            done.append(rnd)
            if on_round is not None:
                on_round(rnd)
    finally:
        if mount is not None:
            mount.cut()
            if boot is None:
                os.environ.pop("URINGKIT_KV_BOOT_ID", None)
            else:
                os.environ["URINGKIT_KV_BOOT_ID"] = boot
    return done
