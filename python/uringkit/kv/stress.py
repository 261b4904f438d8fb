"""A model-checked stress run for xkv (RocksDB's `db_stress`, in one process): random
operations on a store and on a plain dict side by side, every answer of the store
compared with the dict's.

    from uringkit.kv.stress import Config, run
    report = run("/tmp/s", Config(durability="none", compression="zstd"), seed=7, steps=5000)

What it does, step by step, each picked at random (the same seed, the same steps):
puts (values empty to larger than a segment, random bytes or text, given as bytes,
bytearray or memoryview), deletes (of present and absent keys: the returned bool is
checked), gets, multi_gets, `in`, `len`, batches (some abandoned by an exception inside
the `with`: nothing of them may show), `write(ops)`, `delete_range` (the count is
checked), ordered iterators with random bounds (`prefix`, `start`, `stop`, `reverse`),
`keys()`/`items()`, snapshots (up to three held through everything else, each read
as the store was when it was taken), `compact()`, `sync()`, close and reopen (now and
then with another compression, or with the index snapshot or the live overlay off),
checkpoints (the copy opened and compared whole with the dict as it was), and a
read-only follower opened beside the writer (`read_only=True`): between its `refresh()`
calls it must keep showing the store as it was at the last one, and after one it must
show everything the writer had synced; snapshots of it must not change at all. Small
segments (64 KiB by default) and a low `auto_compact_bytes` make segments seal and
background compactions run all along. At the end the store is closed, reopened,
compared whole and `check()`ed.

A disagreement raises `Mismatch`, whose message names the seed, the step and the last
operations (a trace to replay the run with). `tests/kv/test_stress.py` runs a few
seeds per configuration; `benches/kv_stress.py` runs for as long as asked.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import functools
import itertools
import os
import random
import shutil
import threading
import warnings
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from . import DB, AsyncDB, Snapshot
from . import open as kv_open
from . import open_async as kv_open_async

T = TypeVar("T")

__all__ = ["CONFIGS", "Config", "Mismatch", "Report", "run"]


class Mismatch(AssertionError):
    """The store answered differently from the model."""


@dataclass(frozen=True)
class Config:
    """How the store is opened (the arguments of `kv.open`), and the live overlay (off:
    `URINGKIT_KV_OVERLAY=0`, the overlay on the heap)."""

    durability: str = "none"
    compression: str | None = None
    index_snapshot: bool = True
    io_uring: bool = True
    direct: bool = False
    segment_size: int = 64 << 10
    auto_compact: float | None = 0.5
    auto_compact_bytes: int = 64 << 10
    overlay: bool = True

    def open(self, path: str | os.PathLike[str], **extra: Any) -> DB:
        with _env("URINGKIT_KV_OVERLAY", None if self.overlay else "0"):
            return kv_open(path, **self.kwargs(), **extra)

    def kwargs(self) -> dict[str, Any]:
        return {
            "durability": self.durability,
            "compression": self.compression,
            "index_snapshot": self.index_snapshot,
            "io_uring": self.io_uring,
            "direct": self.direct,
            "segment_size": self.segment_size,
            "auto_compact": self.auto_compact,
            "auto_compact_bytes": self.auto_compact_bytes,
        }

    def name(self) -> str:
        """A short label: the fields that differ from the defaults."""
        base = Config()
        diff = [
            f"{k}={v}" for k, v in vars(self).items() if getattr(base, k) != v or k == "durability"
        ]
        return ",".join(diff)


# the configurations the test suite (and, by default, the soak script) runs
CONFIGS: dict[str, Config] = {
    "none": Config(durability="none"),
    "sync-lz4": Config(durability="sync", compression="lz4"),
    "batch-zstd": Config(durability="batch", compression="zstd"),
    "no-snapshot": Config(durability="none", index_snapshot=False, overlay=False),
    "sync-pwrite": Config(durability="sync", io_uring=False, segment_size=16 << 10),
    "sync-direct": Config(durability="sync", direct=True),
    "manual-compact": Config(
        durability="none", auto_compact=None, compression="zstd", segment_size=256 << 10
    ),
}


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@dataclass
class Report:
    config: Config
    seed: int
    steps: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    keys: int = 0  # live keys at the end
    auto_compactions: int = 0  # background compactions seen (over all opens)

    def line(self) -> str:
        top = ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items()))
        return (
            f"seed {self.seed} [{self.config.name()}]: {self.steps} steps, {self.keys} keys "
            f"at the end, {self.auto_compactions} background compactions; {top}"
        )


class _Abandon(Exception):
    pass


_PREFIXES = (b"a/", b"b/", b"c/", b"")
_WORDS = (b"alpha ", b"beta ", b"gamma ", b"delta ", b"uring ", b"kv ", b"store ", b"\n")


def _gen_value(r: random.Random, big: float = 0.03) -> bytes:
    """A value: empty now and then, mostly small, some of a few KiB, and (`big` of
    them) larger than a small segment; random bytes or compressible text."""
    x = r.random()
    if x < 0.05:
        n = 0
    elif x < 0.7:
        n = r.randint(1, 120)
    elif x < 1 - big:
        n = r.randint(121, 5000)
    else:
        n = r.randint(20_000, 150_000)
    if r.random() < 0.5:
        return r.randbytes(n)
    out = bytearray()
    while len(out) < n:
        out += r.choice(_WORDS)
    return bytes(out[:n])


# A worker's call: (method name, arguments, the answer expected — or _ANY).
_Call = tuple[str, tuple[Any, ...], Any]
_ANY = object()


def _worker_plan(
    r: random.Random, prefix: bytes, m: dict[bytes, bytes], n: int
) -> Generator[_Call, bool, None]:
    """`n` calls of one concurrent worker on keys of its own (`prefix`), its model `m`
    updated as it goes: whatever the other workers do meanwhile, each answer is known.
    The driver sends back whether each call was carried out (False: it failed on a full
    disk, and changed nothing)."""
    keys = [prefix + b"%d" % i for i in range(40)]
    for _ in range(n):
        x = r.random()
        k = r.choice(keys)
        if x < 0.4:
            v = _gen_value(r, big=0.005)
            if (yield ("put", (k, v), None)):
                m[k] = v
        elif x < 0.55:
            if (yield ("delete", (k,), k in m)):
                m.pop(k, None)
        elif x < 0.8:
            yield ("get", (k,), m.get(k))
        elif x < 0.88:
            ks = [r.choice(keys) for _ in range(r.randint(1, 30))]
            yield ("multi_get", (ks,), [m.get(q) for q in ks])
        elif x < 0.91:
            # its keys in order, from an iterator (a snapshot, whatever the others do)
            yield ("listing", (prefix,), sorted(m.items()))
        elif x < 0.93:
            # delete_range of the keys starting with one digit: one atomic batch
            sub = prefix + b"%d" % r.randrange(10)
            gone = [q for q in m if q.startswith(sub)]
            if (yield ("delete_prefix", (sub,), len(gone))):
                for q in gone:
                    del m[q]
        else:
            ops = [
                (r.choice(keys), None if r.random() < 0.3 else _gen_value(r, 0))
                for _ in range(r.randint(1, 12))
            ]
            # (write(ops), or the batch API: a `with db.batch()` / `await db.batch(ops)`)
            how = "write" if r.random() < 0.5 else "batch"
            if (yield (how, (ops,), None)):
                for q, w in ops:
                    if w is None:
                        m.pop(q, None)
                    else:
                        m[q] = w


_Plan = Generator[_Call, bool, None]


def _fill_batch(b: Any, ops: list[tuple[bytes, Any]]) -> None:
    """Put `ops` — (key, value, or None for a delete) — into the batch `b`."""
    for k, v in ops:
        if v is None:
            b.delete(k)
        else:
            b.put(k, v)


def _sync_call(db: DB, name: str, args: tuple[Any, ...]) -> Any:
    """A worker's call on the blocking API."""
    if name == "listing":
        return list(db.iterator(prefix=args[0]))
    if name == "delete_prefix":
        return db.delete_range(prefix=args[0])
    if name == "batch":
        with db.batch() as b:
            _fill_batch(b, args[0])
        return None
    return getattr(db, name)(*args)


async def _async_call(db: AsyncDB, name: str, args: tuple[Any, ...]) -> Any:
    """A worker's call on the async API."""
    if name == "listing":
        return [kv async for kv in db.iterator(prefix=args[0])]
    if name == "delete_prefix":
        return await db.delete_range(prefix=args[0])
    if name == "batch":
        if len(args[0]) % 2:
            async with db.batch() as b:
                _fill_batch(b, args[0])
            return None
        return await db.batch(args[0])
    return await getattr(db, name)(*args)


class _Run:
    def __init__(
        self, path: Path, config: Config, seed: int, trace: int, full: bool = False
    ) -> None:
        self.path = path
        self.full = full  # a small filesystem: writes may fail with ENOSPC
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.model: dict[bytes, bytes] = {}
        self.trace: deque[str] = deque(maxlen=trace)
        self.report = Report(config, seed)
        self.step = 0
        self.db = config.open(path, create=True)
        self.opened = config  # how the store is open now (reopens may vary it)
        # the read-only follower and the model as of its last refresh
        self.follower: DB | None = None
        self.seen: dict[bytes, bytes] = {}
        # snapshots held (of the writer, and of the follower), each with the model as it
        # was when it was taken
        self.snaps: list[tuple[Snapshot, dict[bytes, bytes]]] = []
        self.fsnaps: list[tuple[Snapshot, dict[bytes, bytes]]] = []
        # a pool of keys, so that puts overwrite and deletes hit
        self.pool: list[bytes] = [self._new_key() for _ in range(150)]

    # -- what goes in ---------------------------------------------------------------
    def _new_key(self) -> bytes:
        r = self.rng
        p = r.choice(_PREFIXES)
        n = (
            r.choice((1, 2, 4, 8, 16, 16, 16, 24, 40))
            if r.random() < 0.99
            else r.randint(300, 2000)
        )
        body = (
            bytes(r.randrange(256) for _ in range(n))
            if r.random() < 0.3
            else (b"%0*d" % (n, r.randrange(10 ** min(n, 18))))[:n]
        )
        return (p + body).lstrip(b"\xff") or b"0"  # (0xff starts the workers' keys)

    def _key(self) -> bytes:
        r = self.rng
        if r.random() < 0.08:
            k = self._new_key()
            self.pool.append(k)
            return k
        return r.choice(self.pool)

    def _value(self) -> bytes:
        return _gen_value(self.rng)

    def _as_given(self, v: bytes) -> Any:
        """The value as the caller hands it over: bytes, or another bytes-like object."""
        x = self.rng.random()
        if x < 0.1:
            return bytearray(v)
        if x < 0.15:
            return memoryview(bytearray(b"--" + v + b"--"))[2 : 2 + len(v)]
        return v

    # -- checks -----------------------------------------------------------------------
    def full_disk(self, e: BaseException) -> bool:
        """Whether `e` is a full disk the run allows (then what raised it changed
        nothing: the model stays as it was, and the next reads check that)."""
        return self.full and isinstance(e, OSError) and e.errno == errno.ENOSPC

    def writes(self, fn: Callable[[], T]) -> tuple[bool, T | None]:
        """(True, fn()) — or (False, None) when it failed on a full disk."""
        try:
            return True, fn()
        except OSError as e:
            if not self.full_disk(e):
                raise
            self.trace.append("  -> ENOSPC")
            self.report.ops["enospc"] += 1
            return False, None

    def fail(self, what: str) -> Mismatch:
        ops = "\n  ".join(self.trace)
        return Mismatch(
            f"seed {self.seed} [{self.config.name()}], step {self.step}: {what}\n"
            f"(the store open as [{self.opened.name()}])\n"
            f"last operations:\n  {ops}"
        )

    def expect(self, got: object, want: object, what: str) -> None:
        if got != want:
            raise self.fail(f"{what}: got {_short(got)}, expected {_short(want)}")

    def compare_whole(self, db: DB, model: dict[bytes, bytes], what: str) -> None:
        self.expect(len(db), len(model), f"{what}: len")
        items = db.items()
        if dict(items) != model or len(items) != len(model):
            got = dict(items)
            missing = [k for k in model if k not in got]
            extra = [k for k in got if k not in model]
            wrong = [k for k in model if k in got and got[k] != model[k]]
            raise self.fail(
                f"{what}: items differ — {len(missing)} missing {_short(missing[:3])}, "
                f"{len(extra)} extra {_short(extra[:3])}, {len(wrong)} with other values "
                f"{_short(wrong[:3])}"
            )

    # -- the operations ---------------------------------------------------------------
    def op_put(self) -> None:
        k, v = self._key(), self._value()
        self.trace.append(f"put {_short(k)} ({len(v)} B)")
        if self.writes(lambda: self.db.put(k, self._as_given(v)))[0]:
            self.model[k] = v

    def op_delete(self) -> None:
        k = self._key()
        self.trace.append(f"delete {_short(k)}")
        ok, got = self.writes(lambda: self.db.delete(k))
        if ok:
            self.expect(got, k in self.model, f"delete({_short(k)})")
            self.model.pop(k, None)

    def op_get(self) -> None:
        k = self._key()
        self.trace.append(f"get {_short(k)}")
        self.expect(self.db.get(k), self.model.get(k), f"get({_short(k)})")

    def op_contains(self) -> None:
        k = self._key()
        self.trace.append(f"in {_short(k)}")
        self.expect(k in self.db, k in self.model, f"{_short(k)} in db")
        self.expect(len(self.db), len(self.model), "len(db)")

    def op_multi_get(self) -> None:
        ks = [self._key() for _ in range(self.rng.randint(1, 60))]
        self.trace.append(f"multi_get of {len(ks)}")
        self.expect(self.db.multi_get(ks), [self.model.get(k) for k in ks], "multi_get")

    def _ops(self) -> list[tuple[bytes, bytes | None]]:
        out: list[tuple[bytes, bytes | None]] = []
        for _ in range(self.rng.randint(1, 24)):
            k = self._key()
            out.append((k, None if self.rng.random() < 0.3 else self._value()))
        return out

    def _apply(self, ops: list[tuple[bytes, bytes | None]]) -> None:
        for k, v in ops:
            if v is None:
                self.model.pop(k, None)
            else:
                self.model[k] = v

    def op_batch(self) -> None:
        ops = self._ops()
        abandon = self.rng.random() < 0.15
        self.trace.append(f"batch of {len(ops)}{' (abandoned)' if abandon else ''}")

        given = [(k, v if v is None else self._as_given(v)) for k, v in ops]

        def commit() -> None:
            with self.db.batch() as b:
                _fill_batch(b, given)
                if abandon:
                    raise _Abandon

        try:
            if self.writes(commit)[0]:
                self._apply(ops)
        except _Abandon:
            return

    def op_write(self) -> None:
        ops = self._ops()
        self.trace.append(f"write of {len(ops)}")
        given = [(k, v if v is None else self._as_given(v)) for k, v in ops]
        if self.writes(lambda: self.db.write(given))[0]:
            self._apply(ops)

    def _bounds(self) -> dict[str, bytes]:
        r = self.rng
        out: dict[str, bytes] = {}
        if r.random() < 0.5:
            out["prefix"] = r.choice(_PREFIXES[:3])
        if r.random() < 0.4 or not out:
            out["start"] = r.choice(self.pool)[: r.randint(1, 6)]
        if r.random() < 0.4:
            out["stop"] = r.choice(self.pool)[: r.randint(1, 6)]
        return out

    @staticmethod
    def _within(model: dict[bytes, bytes], b: dict[str, bytes]) -> list[bytes]:
        p, lo, hi = b.get("prefix", b""), b.get("start"), b.get("stop")
        return sorted(
            k
            for k in model
            if k.startswith(p) and (lo is None or k >= lo) and (hi is None or k < hi)
        )

    def op_delete_range(self) -> None:
        b = self._bounds()
        gone = self._within(self.model, b)
        self.trace.append(f"delete_range {_short(b)}")
        ok, n = self.writes(lambda: self.db.delete_range(**b))
        if ok:
            self.expect(n, len(gone), f"delete_range({_short(b)})")
            for k in gone:
                del self.model[k]

    def op_iterator(self) -> None:
        b = self._bounds()
        reverse = self.rng.random() < 0.3
        with_values = self.rng.random() < 0.6
        self.trace.append(f"iterator {_short(b)} reverse={reverse} values={with_values}")
        want_keys = self._within(self.model, b)
        if reverse:
            want_keys.reverse()
        got = list(self.db.iterator(reverse=reverse, include_value=with_values, **b))
        want: list[Any] = [(k, self.model[k]) for k in want_keys] if with_values else want_keys
        self.expect(got, want, f"iterator({_short(b)}, reverse={reverse})")

    def op_held_iterator(self) -> None:
        """An iterator taken, writes and a compaction meanwhile, then read on: it shows
        the store as it was when it was taken (its values read from the records that
        held them then, kept open through the compaction)."""
        r = self.rng
        b = self._bounds()
        reverse = r.random() < 0.3
        want_keys = self._within(self.model, b)
        if reverse:
            want_keys.reverse()
        want = [(k, self.model[k]) for k in want_keys]
        self.trace.append(f"held iterator {_short(b)} reverse={reverse}")
        it = self.db.iterator(
            prefix=b.get("prefix"), start=b.get("start"), stop=b.get("stop"), reverse=reverse
        )
        got = list(itertools.islice(it, 0 if r.random() < 0.7 else r.randint(1, 5)))
        for _ in range(r.randint(1, 8)):
            name = r.choice(("put", "put", "delete", "batch", "write", "delete_range", "compact"))
            getattr(self, "op_" + name)()
        got += list(it)
        self.trace.append("held iterator: read on")
        self.expect(got, want, f"an iterator ({_short(b)}) read on after writes")

    def op_snapshot(self) -> None:
        """Take a snapshot (up to 3 held at once), read one held through the writes
        since — it must show the store as it was when taken — or close one."""
        r = self.rng
        x = r.random()
        if not self.snaps or (x < 0.25 and len(self.snaps) < 3):
            self.trace.append("snapshot: take")
            self.snaps.append((self.db.snapshot(), dict(self.model)))
            return
        i = r.randrange(len(self.snaps))
        if x < 0.4:
            self.trace.append(f"snapshot {i}: close")
            snap, _ = self.snaps.pop(i)
            snap.close()
            self.expect(snap.closed, True, "a closed snapshot's closed")
            return
        self.trace.append(f"snapshot {i}: read")
        self.read_snapshot(*self.snaps[i], f"snapshot {i}")

    def read_snapshot(self, snap: Snapshot, then: dict[bytes, bytes], what: str) -> None:
        """Reads through `snap`, each compared with `then` (the model when it was taken)."""
        r = self.rng
        ks = [self._key() for _ in range(r.randint(1, 6))]
        self.expect(snap.get(ks[0]), then.get(ks[0]), f"{what}: get({_short(ks[0])})")
        self.expect(ks[0] in snap, ks[0] in then, f"{what}: in")
        self.expect(snap.multi_get(ks), [then.get(k) for k in ks], f"{what}: multi_get")
        self.expect(len(snap), len(then), f"{what}: len")
        b = self._bounds()
        reverse = r.random() < 0.3
        want_keys = self._within(then, b)
        if reverse:
            want_keys.reverse()
        got = list(
            snap.iterator(
                prefix=b.get("prefix"), start=b.get("start"), stop=b.get("stop"), reverse=reverse
            )
        )
        self.expect(got, [(k, then[k]) for k in want_keys], f"{what}: iterator({_short(b)})")
        if r.random() < 0.1:
            self.expect(dict(snap.items()), then, f"{what}: items()")

    def end_snapshots(self, snaps: list[tuple[Snapshot, dict[bytes, bytes]]]) -> None:
        """The store `snaps` were taken of was closed: each is ended (ValueError)."""
        for snap, _ in snaps:
            self.expect(snap.closed, True, "a snapshot of a closed store: closed")
            try:
                snap.get(b"x")
            except ValueError:
                pass
            else:
                raise self.fail("a snapshot of a closed store was read")
        snaps.clear()

    def op_listing(self) -> None:
        self.trace.append("keys/items")
        self.expect(sorted(self.db.keys()), sorted(self.model), "keys()")
        self.compare_whole(self.db, self.model, "items()")

    def op_compact(self) -> None:
        self.trace.append("compact")
        self.writes(self.db.compact)

    def op_sync(self) -> None:
        self.trace.append("sync")
        self.db.sync()

    def op_reopen(self) -> None:
        r = self.rng
        x = r.random()
        if x < 0.15:
            cfg = replace(self.config, compression=r.choice((None, "lz4", "zstd")))
        elif x < 0.25:
            cfg = replace(self.config, index_snapshot=not self.config.index_snapshot)
        elif x < 0.35:
            cfg = replace(self.config, overlay=not self.config.overlay)
        else:
            cfg = self.config
        # now and then with repair=True: every record read again, neither INDEX nor hint
        # files trusted — on an undamaged store, the same contents
        repair = r.random() < 0.05
        self.trace.append(f"reopen [{cfg.name()}]{' repair=True' if repair else ''}")
        self.report.auto_compactions += self.db.stats()["auto_compactions"]
        self.db.close()
        self.end_snapshots(self.snaps)
        self.db = cfg.open(self.path, repair=repair)
        self.opened = cfg
        self.compare_whole(self.db, self.model, "after reopening")

    def op_checkpoint(self) -> None:
        cp = self.path.with_name(f"{self.path.name}-checkpoint")
        shutil.rmtree(cp, ignore_errors=True)
        self.trace.append("checkpoint")
        if not self.writes(lambda: self.db.checkpoint(cp))[0]:
            self.expect(cp.exists(), False, "a checkpoint that failed left its directory")
            return
        copy = self.config.open(cp, read_only=self.rng.random() < 0.5)
        try:
            self.compare_whole(copy, self.model, "the checkpoint")
        finally:
            copy.close()
            shutil.rmtree(cp, ignore_errors=True)

    def op_follower(self) -> None:
        if self.follower is None or self.rng.random() < 0.1:
            if self.follower is not None:
                self.follower.close()
                self.end_snapshots(self.fsnaps)
            self.trace.append("follower: open")
            self.db.sync()
            self.follower = self.config.open(self.path, read_only=True)
            self.seen = dict(self.model)
        elif self.rng.random() < 0.15:
            # a snapshot of the follower: what it shows now, through refreshes (in place,
            # or reopening after a compaction)
            if len(self.fsnaps) < 2:
                self.trace.append("follower: snapshot")
                self.fsnaps.append((self.follower.snapshot(), dict(self.seen)))
            for i, (snap, then) in enumerate(self.fsnaps):
                self.trace.append(f"follower: snapshot {i}: read")
                self.read_snapshot(snap, then, f"the follower's snapshot {i}")
            if self.rng.random() < 0.3:
                self.trace.append("follower: snapshot 0: close")
                self.fsnaps.pop(0)[0].close()
            return
        elif self.rng.random() < 0.5:
            # until refreshed, the follower shows the store as it was
            self.trace.append("follower: read")
            k = self._key()
            self.expect(self.follower.get(k), self.seen.get(k), f"follower get({_short(k)})")
            self.expect(len(self.follower), len(self.seen), "follower len")
            return
        elif self.rng.random() < 0.8:
            self.trace.append("follower: sync + refresh")
            self.db.sync()
            self.follower.refresh()
            self.seen = dict(self.model)
        else:
            # a backup taken from the follower: the store as the follower sees it
            self.trace.append("follower: checkpoint")
            cp = self.path.with_name(f"{self.path.name}-follower-checkpoint")
            shutil.rmtree(cp, ignore_errors=True)
            follower = self.follower
            if self.writes(lambda: follower.checkpoint(cp))[0]:
                copy = self.config.open(cp, read_only=True)
                try:
                    self.compare_whole(copy, self.seen, "the follower's checkpoint")
                finally:
                    copy.close()
                    shutil.rmtree(cp, ignore_errors=True)
        self.compare_whole(self.follower, self.seen, "the follower")

    def _workers(self) -> list[tuple[bytes, dict[bytes, bytes], _Plan]]:
        """2–4 workers for a concurrent phase: each its prefix, its part of the model
        (copied) and its calls."""
        r = self.rng
        out = []
        n = r.randint(20, 80)
        for i in range(r.randint(2, 4)):
            prefix = b"\xffw%d/" % i
            m = {k: v for k, v in self.model.items() if k.startswith(prefix)}
            out.append((prefix, m, _worker_plan(random.Random(r.getrandbits(64)), prefix, m, n)))
        return out

    def _merge(self, workers: list[tuple[bytes, dict[bytes, bytes], _Plan]]) -> None:
        for prefix, m, _ in workers:
            for k in [k for k in self.model if k.startswith(prefix)]:
                del self.model[k]
            self.model.update(m)

    def _wrong(self, who: int, name: str, args: tuple[Any, ...], got: object, want: object) -> str:
        return (
            f"worker {who}: {name}({_short(args, 60)}): got {_short(got)}, expected {_short(want)}"
            + _difference(got, want)
        )

    def _drive(self, db: DB, who: int, calls: _Plan, errors: list[str]) -> None:
        """Run one worker's calls on the blocking API (on its own thread)."""
        log: deque[str] = deque(maxlen=12)
        try:
            done = None
            while True:
                name, args, want = calls.send(done) if done is not None else next(calls)
                ok, got = self.writes(functools.partial(_sync_call, db, name, args))
                log.append(_logged(name, args, ok))
                if ok and want is not _ANY and got != want:
                    errors.append(self._wrong(who, name, args, got, want) + _calls(log))
                    return
                done = ok
        except StopIteration:
            pass
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(f"worker {who}: {type(e).__name__}: {e}")

    def op_threads(self) -> None:
        """Workers on threads, each on keys of its own, the main thread compacting or
        reading its keys meanwhile."""
        workers = self._workers()
        compact = self.rng.random() < 0.4
        self.trace.append(f"{len(workers)} threads{' + compact' if compact else ''}")
        errors: list[str] = []

        ths = [
            threading.Thread(target=self._drive, args=(self.db, i, w[2], errors))
            for i, w in enumerate(workers)
        ]
        for t in ths:
            t.start()
        try:
            if compact:
                self.writes(self.db.compact)
            for _ in range(20):
                self.op_get()
        finally:
            for t in ths:
                t.join()
        if errors:
            raise self.fail("; ".join(errors))
        self._merge(workers)

    async def _async_compact(self, db: AsyncDB) -> None:
        try:
            await db.compact()
        except OSError as e:
            if not self.full_disk(e):
                raise

    def op_tasks(self) -> None:
        """The store closed and opened with the async API (`kv.open_async`); workers as
        asyncio tasks (their durable writes group-committed on the loop), maybe a
        compaction meanwhile; then opened again as before."""
        workers = self._workers()
        compact = self.rng.random() < 0.3
        self.trace.append(f"{len(workers)} tasks{' + compact' if compact else ''}")
        errors: list[str] = []

        async def drive(db: AsyncDB, who: int, calls: _Plan) -> None:
            done = None
            log: deque[str] = deque(maxlen=12)
            while True:
                try:
                    name, args, want = calls.send(done) if done is not None else next(calls)
                except StopIteration:
                    return
                try:
                    got, ok = await _async_call(db, name, args), True
                except OSError as e:
                    if not self.full_disk(e):
                        raise
                    got, ok = None, False
                    self.report.ops["enospc"] += 1
                log.append(_logged(name, args, ok))
                if ok and want is not _ANY and got != want:
                    errors.append(self._wrong(who, name, args, got, want) + _calls(log))
                    return
                done = ok

        then = dict(self.model)
        probe = [self._key() for _ in range(5)]
        mixed = self.rng.random() < 0.4
        if mixed:
            self.trace.append("  (worker 0 on a thread)")

        async def phase() -> None:
            async with kv_open_async(self.path, **self.config.kwargs()) as db:
                # a snapshot held through the tasks' writes: the store as it was before
                snap = db.snapshot()
                # (worker 0 on a thread now and then, on the same store: a thread's
                # leader then takes some of the loop's queued writes into its groups)
                jobs: list[Coroutine[Any, Any, Any]] = [
                    asyncio.to_thread(self._drive, db.db, i, w[2], errors)
                    if i == 0 and mixed
                    else drive(db, i, w[2])
                    for i, w in enumerate(workers)
                ]
                if compact:
                    jobs.append(self._async_compact(db))
                await asyncio.gather(*jobs)
                self.report.auto_compactions += (await db.stats())["auto_compactions"]
                async with snap:
                    got = [await snap.get(k) for k in probe]
                    if got != [then.get(k) for k in probe]:
                        errors.append(f"async snapshot get: {_short(got)}")
                    if await snap.multi_get(probe) != got:
                        errors.append("async snapshot multi_get differs from its gets")
                    items = [kv async for kv in snap.iterator()]
                    if items != sorted(then.items()):
                        errors.append(f"async snapshot iterator: {len(items)} pairs")

        self.report.auto_compactions += self.db.stats()["auto_compactions"]
        self.db.close()
        self.end_snapshots(self.snaps)
        try:
            with _env("URINGKIT_KV_OVERLAY", None if self.config.overlay else "0"):
                asyncio.run(phase())
        finally:
            self.db = self.config.open(self.path)
            self.opened = self.config
        if errors:
            raise self.fail("; ".join(errors))
        self._merge(workers)
        self.compare_whole(self.db, self.model, "after the tasks")

    def step_once(self) -> None:
        name, fn = _pick(self.rng, self)
        self.step += 1
        self.report.ops[name] += 1
        try:
            fn()
        except Mismatch:
            raise
        except Exception as e:
            # (an error the store raised is a disagreement too: the model has none)
            raise self.fail(f"{name} raised {type(e).__name__}: {e}") from e

    def finish(self) -> Report:
        for i, (snap, then) in enumerate(self.snaps):
            self.trace.append(f"snapshot {i}: read (at the end)")
            self.read_snapshot(snap, then, f"snapshot {i}")
        if self.follower is not None:
            self.follower.close()
            self.end_snapshots(self.fsnaps)
        self.report.auto_compactions += self.db.stats()["auto_compactions"]
        self.db.close()
        self.end_snapshots(self.snaps)
        self.db = self.config.open(self.path)
        self.opened = self.config
        try:
            self.compare_whole(self.db, self.model, "at the end, reopened")
            n, problems = self.db.check()
            self.expect(problems, [], "check()")
            self.expect(n, len(self.model), "check() records")
        finally:
            self.db.close()
        self.report.steps = self.step
        self.report.keys = len(self.model)
        return self.report


_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("put", 30),
    ("delete", 9),
    ("get", 14),
    ("contains", 3),
    ("multi_get", 5),
    ("batch", 6),
    ("write", 4),
    ("delete_range", 1),
    ("iterator", 3),
    ("held_iterator", 1),
    ("snapshot", 3),
    ("listing", 1),
    ("compact", 1),
    ("sync", 1),
    ("reopen", 1),
    ("checkpoint", 1),
    ("follower", 2),
    ("threads", 1),
    ("tasks", 1),
)
_NAMES = [n for n, _ in _WEIGHTS]
_CUM = list(itertools.accumulate(w for _, w in _WEIGHTS))


def _pick(rng: random.Random, r: _Run) -> tuple[str, Callable[[], None]]:
    i = bisect.bisect_right(_CUM, rng.randrange(_CUM[-1]))
    name = _NAMES[i]
    fn: Callable[[], None] = getattr(r, "op_" + name)
    return name, fn


def _logged(name: str, args: tuple[Any, ...], ok: bool) -> str:
    """One call of a worker as its log shows it: the keys it wrote (with the values'
    sizes), and whether it failed with ENOSPC."""
    if name in ("write", "batch"):
        what = ", ".join(f"{_short(k, 30)}={'del' if v is None else len(v)}" for k, v in args[0])
    elif name == "put":
        what = f"{_short(args[0], 30)}={len(args[1])}"
    else:
        what = _short(args, 40)
    return f"{name} {what}{'' if ok else ' -> ENOSPC'}"


def _calls(log: deque[str]) -> str:
    return "\n  its last calls:\n    " + "\n    ".join(log)


def _difference(got: object, want: object) -> str:
    """Where two listings of (key, value) pairs part: the first pair that differs, and
    the keys one has that the other lacks (a mismatch's message shows only the start)."""
    if not (isinstance(got, list) and isinstance(want, list)):
        return ""
    if len(got) == len(want) and not all(isinstance(x, tuple) for x in got + want):
        # values, as a multi_get's: the places where they differ
        at = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
        shown = ", ".join(
            f"[{i}] got {_short(got[i], 40)} expected {_short(want[i], 40)}" for i in at[:3]
        )
        return f" — {len(at)} differ: {shown}"
    try:
        g, w = dict(got), dict(want)
    except (TypeError, ValueError):
        return ""
    extra, missing = sorted(set(g) - set(w)), sorted(set(w) - set(g))
    other = [k for k in w if k in g and g[k] != w[k]]
    out = f" — {len(extra)} keys extra {_short(extra[:3])}, {len(missing)} missing"
    out += f" {_short(missing[:3])}, {len(other)} with another value"
    if other:
        k = other[0]
        out += f" (first: {_short(k)}: got {len(g[k])} bytes, expected {len(w[k])})"
    return out


def _short(x: object, n: int = 80) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."


def run(
    path: str | os.PathLike[str],
    config: Config = Config(),
    seed: int = 0,
    steps: int = 2000,
    *,
    trace: int = 30,
    until: Callable[[int], bool] | None = None,
    full_disk: bool = False,
) -> Report:
    """`steps` random operations (or until `until(step)` is true) on a new store at
    `path` (removed first if it exists) opened as `config` says, each checked against
    the model; then the end checks. Raises Mismatch on the first disagreement (its
    message ends with the last `trace` operations). Torn-tail and similar warnings are
    errors here: nothing in such a run may lose data. `full_disk`: `path` is on a small
    filesystem, and a write, a compaction or a checkpoint may fail with ENOSPC — which
    must then have changed nothing (a put not there, a batch not in part)."""
    p = Path(path)
    shutil.rmtree(p, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = _Run(p, config, seed, trace, full_disk)
        try:
            while (until is None and r.step < steps) or (until is not None and not until(r.step)):
                r.step_once()
            return r.finish()
        except BaseException:
            for db in (r.db, r.follower):
                if db is not None and not db.closed:
                    db.close()
            raise


def direct_supported(directory: str | os.PathLike[str]) -> bool:
    """Whether files in `directory` can be opened with O_DIRECT (not on tmpfs)."""
    probe = Path(directory) / f".xkv-direct-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


EXAMPLES = (
    """examples:
  uringkit kv stress                                  # a minute, every configuration
  uringkit kv stress --seconds 600 --dir /data/tmp    # ten minutes, on that disk
  uringkit kv stress --config sync-lz4 --seed 42 --steps 20000
  uringkit kv stress --json > stress.json
  uringkit kv stress --full-disk 2m --seconds 120      # on a tmpfs it fills (root)

configurations (how the store is opened; all of them in turn by default):
"""
    + "\n".join(f"  {k:15} {c.name()}" for k, c in CONFIGS.items())
    + """

Each run: --steps random operations on a new store, every answer compared with a dict
(see uringkit/kv/stress.py). A disagreement prints the seed, the step and the last
operations, and the command that replays it; the exit status is then 1."""
)


def main(argv: list[str] | None = None) -> int:
    """`uringkit kv stress`: model-checked runs, configuration after configuration, for
    `--seconds` (or one run per configuration with `--seed`)."""
    import argparse
    import json
    import sys
    import tempfile
    import time

    from rich.console import Console

    ap = argparse.ArgumentParser(
        prog="uringkit kv stress",
        description="Random operations on xkv stores, each answer checked against a "
        "plain dict (RocksDB's db_stress, in one process): puts, deletes, batches, "
        "range deletes, iterators, snapshots, compactions, reopens, checkpoints, a read-only "
        "follower, worker threads and asyncio tasks.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--seconds", type=float, default=60.0, help="how long (default 60)")
    ap.add_argument("--steps", type=int, default=5000, help="operations per run")
    ap.add_argument(
        "--seed",
        type=int,
        help="run each configuration once with this seed (to replay a failure)",
    )
    ap.add_argument(
        "--config",
        choices=sorted(CONFIGS),
        action="append",
        help="only this configuration (repeatable)",
    )
    ap.add_argument(
        "--dir", default=tempfile.gettempdir(), help="where the stores go (default: $TMPDIR)"
    )
    ap.add_argument(
        "--full-disk",
        metavar="SIZE",
        help="run on a tmpfs of this size (e.g. 2m) that the runs fill up: writes, "
        "compactions and checkpoints that fail with ENOSPC must change nothing "
        "(mounts it: needs root; O_DIRECT configurations are skipped)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object per run on stdout")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.seconds <= 0:
        ap.error("--steps and --seconds must be positive")
    con = Console(stderr=a.json)
    names = a.config or list(CONFIGS)
    work = Path(tempfile.mkdtemp(prefix="xkv-stress-", dir=a.dir))
    if a.full_disk:
        import subprocess

        m = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={a.full_disk}", "tmpfs", str(work)],
            capture_output=True,
            text=True,
        )
        if m.returncode != 0:
            work.rmdir()
            con.print(
                f"[red]--full-disk: cannot mount a {a.full_disk} tmpfs: "
                f"{m.stderr.strip() or m.returncode}[/] (it needs root)"
            )
            return 2
    if not direct_supported(work):
        skipped = [n for n in names if CONFIGS[n].direct]
        names = [n for n in names if not CONFIGS[n].direct]
        if skipped:
            con.print(f"[yellow]no O_DIRECT in {work}: skipping {', '.join(skipped)}[/]")
        if not names:
            _unmount(work, bool(a.full_disk))
            return 2
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(10**6)
    end = time.monotonic() + a.seconds
    runs = 0
    try:
        for n in itertools.count():
            name = names[n % len(names)]
            if a.seed is not None and n >= len(names):
                break
            if a.seed is None and n and time.monotonic() >= end:
                break
            t = time.perf_counter()
            with con.status(f"{name}, seed {seed}…"):
                try:
                    rep = run(
                        work / "store", CONFIGS[name], seed, a.steps, full_disk=bool(a.full_disk)
                    )
                except Mismatch as e:
                    con.print("[bold red]MISMATCH[/]", end=" ")
                    con.print(str(e), markup=False, highlight=False)
                    full = f" --full-disk {a.full_disk}" if a.full_disk else ""
                    con.print(
                        f"replay: uringkit kv stress --config {name} --seed {seed} "
                        f"--steps {a.steps}{full}",
                        markup=False,
                    )
                    return 1
            runs += 1
            dt = time.perf_counter() - t
            if a.json:
                doc = {
                    "config": name,
                    "seed": seed,
                    "full_disk": a.full_disk,
                    "steps": rep.steps,
                    "keys": rep.keys,
                    "auto_compactions": rep.auto_compactions,
                    "ops": dict(rep.ops),
                    "seconds": round(dt, 3),
                }
                sys.stdout.write(json.dumps(doc) + "\n")
                sys.stdout.flush()
            else:
                full = f", {rep.ops['enospc']} ENOSPC" if a.full_disk else ""
                con.print(
                    f"[green]ok[/] {name:15} seed {seed:<7} {rep.steps} steps in {dt:5.1f} s, "
                    f"{rep.keys} keys, {rep.auto_compactions} background compactions{full}"
                )
            if a.seed is None and n % len(names) == len(names) - 1:
                seed += 1
    finally:
        _unmount(work, bool(a.full_disk))
    con.print(f"{runs} runs, no mismatch")
    return 0


def _unmount(work: Path, mounted: bool) -> None:
    """Remove the run's directory (unmounting its tmpfs first, when it is one)."""
    if mounted:
        import subprocess
        import time

        # (a closed ring drops its files asynchronously: the mount may be busy a moment)
        for _ in range(50):
            if subprocess.run(["umount", str(work)], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        else:
            subprocess.run(["umount", "-l", str(work)], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
