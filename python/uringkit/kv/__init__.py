"""xkv: a crash-safe append-only KV store on io_uring (Bitcask's design).

    from uringkit import kv
    with kv.open("data.xkv", durability="sync") as db:
        db.put(b"key", b"value")
        db.get(b"key")                     # b"value"
        db.multi_get([b"a", b"b"])         # [bytes | None, ...]
        with db.batch() as b:              # atomic: all or nothing
            b.put(b"x", b"1"); b.delete(b"y")
        len(db), b"key" in db, db.keys(), db.items()
        for k, v in db.iterator(prefix=b"user:"):   # in key order, as plyvel's
            ...
        db.compact(); db.stats(); db.check()

    async with kv.open_async("data.xkv") as db:    # the event loop's ring, group commits
        await db.put(b"key", b"value"); await db.get(b"key")
        async with db.batch() as b:
            b.put(b"x", b"1"); b.delete(b"y")

Durability: "sync" (put returns once the record is on disk; concurrent writers share
fdatasyncs), "batch" (fdatasync at most every batch_ms / batch_bytes), "none" (the
kernel writes back when it likes). With "batch" and "none" every write is in the page
cache when it returns: a killed process loses nothing, a crash of the machine what was
not synced yet (stats()["unsynced_bytes"]).
Format and guarantees: docs/kv-format.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, overload

from .._native import KvScan, KvStore, KvView

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = [
    "DB",
    "AsyncDB",
    "AsyncBatch",
    "AsyncSnapshot",
    "Batch",
    "Snapshot",
    "open",
    "open_async",
]

MAX_KEY = 64 * 1024
#: values read per multi_get while iterating in key order
_SCAN_CHUNK = 1000
#: keys the first page of a forward iterator reads (the rest: _SCAN_CHUNK a page)
_FIRST_PAGE = 16


def _need_bound(prefix: bytes | None, start: bytes | None, stop: bytes | None) -> None:
    """delete_range refuses to delete everything by omission."""
    if prefix is None and start is None and stop is None:
        raise ValueError("delete_range needs prefix=, start= or stop= (all keys: use a new store)")


def _scan_iter(scan: KvScan, include_value: bool) -> Iterator[Any]:
    """A scan's keys, or its (key, value) pairs read a chunk at a time (natively: no
    generator frame per pair)."""
    return scan if include_value else iter(scan.key_list())


MAX_VALUE = 64 * 1024 * 1024


class _Ops:
    """The puts and deletes a batch collects (checked and copied as they come)."""

    #: how the batch is meant to be applied, for the warning of one dropped unapplied
    _how = "`with db.batch() as b:` or b.commit()"

    def __init__(self) -> None:
        self.ops: list[tuple[bytes, bytes | None]] = []

    def __len__(self) -> int:
        return len(self.ops)

    def discard(self) -> None:
        self.ops = []

    def __del__(self) -> None:
        if getattr(self, "ops", None):
            warnings.warn(
                f"kv batch of {len(self.ops)} operations was never committed (use "
                f"{self._how}); its writes were dropped",
                ResourceWarning,
                stacklevel=2,
            )

    def put(self, key: bytes, value: Buffer) -> None:
        if type(value) is not bytes:
            value = _value(value)  # a copy: later changes to a bytearray do not leak in
        _check(key, value)
        self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        _check(key, None)
        self.ops.append((key, None))


class Batch(_Ops):
    """Collects puts and deletes; applied atomically when the `with` block ends without
    an exception (discarded otherwise), or by `commit()` when used without `with`. A
    batch dropped with operations neither committed nor discarded warns
    (ResourceWarning), as an unclosed file does: its writes never happened."""

    def __init__(self, db: DB) -> None:
        super().__init__()
        self._db = db

    def commit(self) -> None:
        """Apply the collected operations atomically (durably with durability="sync"),
        then start empty again."""
        ops, self.ops = self.ops, []  # (a failed commit raises; the batch is spent)
        if ops:
            self._db._s.batch(ops)

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self.commit()
        else:
            self.discard()


class AsyncBatch(_Ops):
    """The async store's batch: `async with db.batch() as b: b.put(k, v); b.delete(k2)`.
    Applied atomically when the block ends without an exception — the `async with`
    returns once it is written (durably with durability="sync", group-committed with
    the loop's other writes) — and discarded otherwise; or by `await b.commit()`."""

    _how = "`async with db.batch() as b:` or `await b.commit()`"

    def __init__(self, db: AsyncDB) -> None:
        super().__init__()
        self._db = db

    async def commit(self) -> None:
        """Apply the collected operations atomically, then start empty again."""
        ops, self.ops = self.ops, []
        if ops:
            await self._db.write(ops)

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            await self.commit()
        else:
            self.discard()


def _value(value: Any) -> bytes:
    """A value as bytes: bytes as is, any other bytes-like object (bytearray, memoryview,
    array, numpy array…) copied."""
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise TypeError(
            f"value must be bytes or a bytes-like object (bytearray, memoryview), "
            f"not {type(value).__name__}"
        ) from None


def _check(key: Any, value: Any) -> None:
    if not isinstance(key, bytes):
        raise TypeError(f"key must be bytes, not {type(key).__name__}")
    if not 0 < len(key) <= MAX_KEY:
        raise ValueError(f"key must be 1 byte to 64 KiB (got {len(key)} bytes)")
    if value is not None:
        if not isinstance(value, bytes):
            raise TypeError(f"value must be bytes, not {type(value).__name__}")
        if len(value) > MAX_VALUE:
            raise ValueError(f"value must be at most 64 MiB (got {len(value)} bytes)")


def _checked_ops(ops: Iterable[tuple[bytes, Buffer | None]]) -> list[tuple[bytes, bytes | None]]:
    """`ops` checked as `DB.write` checks them natively (a wrong op named by its place,
    `ops[3]: …`), bytes-like values copied."""
    held: list[tuple[bytes, bytes | None]] = []
    for i, op in enumerate(ops):
        try:
            try:
                k, v = op
            except (TypeError, ValueError):
                raise TypeError("batch ops must be (key, value_or_None) pairs") from None
            if v is not None and type(v) is not bytes:
                v = _value(v)
            _check(k, v)
        except (TypeError, ValueError) as e:
            raise type(e)(f"ops[{i}]: {e}") from None
        held.append((k, v))
    return held


class _Closes:
    """`close()`, `closed` and the `with` statement, passed on to `_closer` (the native
    object that does the closing)."""

    __slots__ = ()
    _closer: KvStore | KvView

    def close(self) -> None:
        self._closer.close()

    @property
    def closed(self) -> bool:
        return self._closer.closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Reads:
    """`db[key]` and `iterator()`, read from `_reader()`: the native store, or view."""

    __slots__ = ()

    def _reader(self) -> KvStore | KvView:
        raise NotImplementedError

    def __getitem__(self, key: bytes) -> bytes:
        v = self._reader().get(key)
        if v is None:
            raise KeyError(key)
        return v

    def iterator(
        self,
        *,
        prefix: bytes | None = None,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
        include_value: bool = True,
    ) -> Iterator[Any]:
        """(key, value) pairs — or keys, with include_value=False — in key order (bytewise;
        `reverse` for descending), of the keys that start with `prefix` and lie in
        [start, stop): plyvel's `db.iterator()`.

        A snapshot, as LevelDB's and RocksDB's iterators are: the pairs as they were at
        the call, whatever is put, deleted or compacted while iterating. Values are read
        1,000 at a time as the iteration reaches them (like multi_get: copies from the
        page cache, one batch of reads for the rest), from the records that held them at
        the call — the segments they are in stay open while the iterator lives, so the
        disk space of segments a compaction retires meanwhile is freed when it is done
        with. Closing the store ends it (ValueError at the next chunk).
        The index is a hash table (Bitcask): the first bounded scan (prefix, start or
        stop) sorts every key once, and the store keeps them sorted for later scans —
        O(log n + m) each — at the cost of the keys' bytes once more plus 8 bytes a key
        (`stats()["order_bytes"]`). A forward iterator reads a page at a time (16
        keys, then 1,000) through a snapshot view taken at the call, so
        `islice(db.iterator(start=k), 10)` reads one page whatever follows `k`; while
        it is open, writes note the keys they change in that view, as a `Snapshot`'s
        do. A reverse one lists its whole range at the call (~0.25 µs a key). See
        docs/kv.md."""
        r = self._reader()
        if reverse:
            return _scan_iter(r.scan(prefix, start, stop, reverse), include_value)
        # forward: read a page at a time through a view taken now (the store as it is
        # at this call, whatever is written meanwhile) — the first keys come at once
        view, owns = (r, False) if isinstance(r, KvView) else (KvView(r), True)
        return _paged(view, owns, prefix, start, stop, include_value)


def _paged(
    view: KvView,
    owns: bool,
    prefix: bytes | None,
    start: bytes | None,
    stop: bytes | None,
    include_value: bool,
) -> Iterator[Any]:
    """A forward scan of `view`, a page at a time (16 keys, then 1,000); `owns`: the view
    is the iterator's own, closed when it ends."""
    try:
        after = None
        n = _FIRST_PAGE
        while True:
            page = view.page(prefix, start, stop, after, n, include_value)
            yield from page
            if len(page) < n:
                return
            after = page[-1][0] if include_value else page[-1]
            n = _SCAN_CHUNK
    finally:
        if owns:
            view.close()


class Snapshot(KvView, _Closes, _Reads):  # (close and closed: KvView's own)
    """The store as it was when `db.snapshot()` was called: RocksDB's `GetSnapshot`,
    plyvel's `db.snapshot()`, an LMDB read transaction. Reads through it see every key
    with the value it had then, whatever is put, deleted or compacted since — several
    reads that must agree with each other (an account and its history, a row and its
    index entries) while writers go on.

    `get(key, default=None)`, `snap[key]`, `key in snap`, `len(snap)`,
    `multi_get(keys)` (one batch of reads, as `DB.multi_get`), `iterator(...)`,
    `keys()`, `values()`, `items()` (in key order).

    Taking one costs nothing up front (~0.2 µs). From then on each write that changes a
    key notes, once per key, where the key's record was before (~100 bytes of memory
    for a 16-byte key), and the segments those records are in stay on disk until the snapshot
    is closed (a compaction meanwhile frees their space only then). So close snapshots
    when done — `with db.snapshot() as snap:` — rather than hold one for hours over a
    store that is being rewritten. `db.stats()` counts them: `snapshots`,
    `snapshot_keys`. Closing the store ends them (ValueError on use after); so does the
    garbage collector.

    Thread-safe. On a `read_only=True` store the snapshot is the store as that open
    saw it when it was taken: `refresh()` does not change it (after a compaction the
    refresh reopens; the snapshot goes on reading the store it was taken of)."""

    __slots__ = ()  # (no __dict__ to make: taking one stays ~0.2 µs)

    def _reader(self) -> KvView:
        return self

    def keys(self) -> list[bytes]:
        """The keys then, in key order."""
        return self.scan().key_list()

    def items(self) -> list[tuple[bytes, bytes]]:
        """The (key, value) pairs then, in key order."""
        return list(self.iterator())

    def values(self) -> list[bytes]:
        """The values then, in the order of their keys."""
        return [v for _, v in self.iterator()]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.keys())


class DB(_Closes, _Reads):
    """An open store. Thread-safe: many threads may put/get at once (their durable puts
    share fdatasyncs). Only one process may have a store open."""

    def _reader(self) -> KvStore:
        return self._s

    def __init__(self, store: KvStore, path: str) -> None:
        self._s = self._closer = store
        self.path = path
        rec = store.recovery()
        #: What the open found (docs/kv.md, "Damage"): segments and records read, whether
        #: INDEX or a live overlay was used, a torn tail cut (`torn_bytes`), the log cut in
        #: an older segment after a crash of the machine (`unsynced_cut`), what
        #: `repair=True` skipped, and how long it took (`seconds`).
        self.recovery: dict[str, Any] = rec
        cut = rec["unsynced_cut"]
        if cut:
            warnings.warn(
                f"{path}: a crash of the machine tore {cut[0]}, written with "
                f"durability='none' and never synced: the store is back at its last whole "
                f"record there — {rec['torn_bytes']} bytes of later writes dropped"
                + (f", {cut[1]} later segment(s) emptied" if cut[1] else ""),
                RuntimeWarning,
                stacklevel=3,
            )
        elif rec["torn_bytes"]:
            warnings.warn(
                f"{path}: dropped a torn tail of {rec['torn_bytes']} bytes from "
                f"{rec['torn_segment']} (a write interrupted by a crash; nothing it held "
                "was acknowledged)",
                RuntimeWarning,
                stacklevel=3,
            )
        for s in rec["skipped"]:
            warnings.warn(f"repair: {s}", RuntimeWarning, stacklevel=3)

    # put/get/delete: the native side checks types and sizes (same errors as _check)
    def put(self, key: bytes, value: Buffer) -> None:
        """Store `value` (bytes, or any bytes-like object: copied) under `key` (bytes)."""
        if type(value) is not bytes:
            value = _value(value)
        self._s.put(key, value)

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        v = self._s.get(key)
        return default if v is None else v

    def delete(self, key: bytes) -> bool:
        """Delete `key` (a tombstone is written); returns whether it existed."""
        return self._s.delete(key)

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        return self._s.multi_get(keys)  # keys checked natively

    def batch(self) -> Batch:
        """`with db.batch() as b: b.put(k, v); b.delete(k2)`: atomic, all or nothing."""
        return Batch(self)

    def write(self, ops: Iterable[tuple[bytes, Buffer | None]]) -> None:
        """Apply `[(key, value), (key, None), ...]` atomically as one batch (None deletes
        the key): the bulk path, checked natively (RocksDB's `Write`, LMDB's
        `putmulti`). Values may be bytes-like (copied)."""
        self._s.batch(ops)

    def __len__(self) -> int:
        return len(self._s)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and bool(key) and self._s.contains(key)

    def keys(self) -> list[bytes]:
        """A snapshot of the keys (arbitrary order)."""
        return self._s.keys()

    def items(self) -> list[tuple[bytes, bytes]]:
        """A snapshot of (key, value) pairs (arbitrary order)."""
        return self._s.items()

    def values(self) -> list[bytes]:
        """A snapshot of the values (in the order of `keys()` taken at the same time)."""
        return self._s.values()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.keys())

    def snapshot(self) -> Snapshot:
        """The store as it is now, to read while it goes on changing:
        `with db.snapshot() as snap: snap.get(k)` — see `Snapshot`."""
        return Snapshot(self._s)

    def delete_range(
        self, *, prefix: bytes | None = None, start: bytes | None = None, stop: bytes | None = None
    ) -> int:
        """Delete every key that starts with `prefix` and lies in [start, stop) (RocksDB's
        DeleteRange; give at least one bound) in one atomic batch; returns how many.
        A key put by another thread after the keys were listed is not deleted."""
        _need_bound(prefix, start, stop)
        keys = self._s.scan(prefix, start, stop).key_list()
        if keys:
            self._s.batch([(k, None) for k in keys])
        return len(keys)

    # the mapping protocol, as dbm/shelve/rocksdict: db[key], db[key] = value, del db[key]
    def __setitem__(self, key: bytes, value: Buffer) -> None:
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        if not self._s.delete(key):
            raise KeyError(key)

    def compact(self) -> tuple[int, int]:
        """Rewrite the live records of every segment, retire the old ones and the
        tombstones: (segments retired, bytes reclaimed). Reads and writes continue
        meanwhile. (Background compactions, `open(auto_compact=...)`, take only the
        segments mostly dead.)"""
        return self._s.compact()

    def sync(self) -> None:
        self._s.sync()

    def checkpoint(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Make `path` — a new directory, on the same filesystem for hard links — a
        store holding what this one holds now: a backup of a live store (RocksDB's
        checkpoint, LMDB's `env.copy`). Sealed segments and hint files are hard-linked
        (they never change again; copied across filesystems), the segment being
        appended to is copied up to what was written — flushed and fdatasynced first —
        and INDEX's header records what was taken, so a damaged copy is found when it is
        opened (its index is rebuilt from hints and segments there). Writes and reads go
        on meanwhile; a compaction waits. On a read_only store: the store as that open
        saw it (`uringkit kv backup` does that beside a running writer). The copy is
        made under a hidden name beside `path` (`.NAME.xkv-checkpoint-PID`) and renamed
        to `path` once whole: a failure (OSError, e.g. a full disk) removes it, and a
        crash leaves only that hidden directory — never a partial copy at `path` that
        would open as a store missing data. Returns {"segments", "linked_bytes",
        "copied_bytes"}; FileExistsError if `path` exists.
        """
        n, linked, copied = self._s.checkpoint(os.fspath(path))
        return {"segments": n, "linked_bytes": linked, "copied_bytes": copied}

    def refresh(self) -> dict[str, int]:
        """read_only=True: see what the writer wrote since this store was opened or last
        refreshed (RocksDB's `TryCatchUpWithPrimary`; an LMDB reader's next
        transaction). What the writer appended is read from where the last read stopped
        — the segment it was reading and any the writer rolled over to since — so a
        refresh costs what was written meanwhile, not a reopen. A record or a batch the
        writer is still writing is taken in by a later refresh once it is whole (never
        in part). A compaction since cannot be followed that way: the store is opened
        again (as `open(read_only=True)` does; iterators and calls already running
        finish on what they had). Until refreshed, the store reads as it was.

        Returns {"records" read, "bytes" read, "segments" the writer rolled over to,
        "reopened": 1 after a compaction, else 0}. OSError naming the file and offset
        where a segment is damaged (as the open would); ValueError on the writer's own
        open, which always sees its own writes."""
        records, nbytes, segments, reopened = self._s.refresh()
        return {
            "records": records,
            "bytes": nbytes,
            "segments": segments,
            "reopened": int(reopened),
        }

    def warm_up(self) -> bool:
        """Start reading the store's segments into the page cache in a background
        thread (what `open(warm=True)` does by itself once a multi_get finds the store
        cold), at most once per open. True if that reading runs or ran; False if the
        segments do not fit in a quarter of the memory available (or are empty).
        `stats()["warmed_bytes"]` counts its progress."""
        return self._s.warm_up()

    def stats(self) -> dict[str, int]:
        """Counters: keys, segments, bytes_on_disk, dead_bytes, index_bytes (native
        memory of the index), index_mapped (1 while the index is still the mapped INDEX
        snapshot), index_growing (1 while the index's hash table doubles a few keys per
        put, or the keys added over INDEX join it the same way: no put waits for all of
        it — see docs/kv.md), index_verified (1 once that snapshot's checksums have been
        checked), order_bytes (memory of the keys kept sorted for range scans once one
        has run: see `iterator`), order_sorts (scans that sorted every key: the first
        of a process, unless the last close saved them in `ORDER` for this state),
        seq, warmed_bytes (segment bytes the background warm-up has read in, see
        `open(warm=...)`), io_uring, direct, write_syscalls, mapped_writes (1 when
        "none"/"batch" writes are copied into the active segment's shared mapping rather
        than written with pwrite), unsynced_bytes (handed to the kernel but not yet
        fdatasynced: what a crash of the machine, not of the process, could lose),
        live_overlay (1 while what changed since INDEX lives in the shared OVERLAY file:
        if this process is killed, the next open replays nothing it covers — see
        docs/kv-format.md), group_commits (durable writes + fdatasyncs, each serving a
        group of writers), relay_primed (durable writes from threads whose GIL hand-off
        went to a writer woken ahead of its turn: see docs/kv-format.md, "Writing"),
        auto_compactions / auto_compact_failures (background compactions done / failed,
        see `open(auto_compact=...)`), compaction_running (1 while one runs),
        sealed_dead_bytes (dead records and tombstones in the sealed segments: what
        compacting them all would reclaim), tombstone_bytes
        (deletes' records: a compaction of some segments copies the ones still in force
        on, compacting all drops them), compactions / reclaimed_bytes / compacted_bytes
        / last_compaction_ms (every compaction that retired segments since open —
        background or `compact()` — the bytes they reclaimed, the bytes they copied:
        over the bytes written, the write amplification — and how long the last took),
        snapshots / snapshot_keys (snapshots open, and the keys changed since they were
        taken that they keep the old records of: see `Snapshot`)."""
        return self._s.stats()

    def check(self) -> tuple[int, list[str]]:
        """Re-read every live record and verify its CRC."""
        return self._s.check()


def open(  # noqa: A001
    path: str | os.PathLike[str],
    durability: str = "sync",
    create: bool = True,
    *,
    repair: bool = False,
    batch_ms: int = 10,
    batch_bytes: int = 1 << 20,
    segment_size: int = 256 << 20,
    io_uring: bool = True,
    direct: bool = False,
    index_snapshot: bool = True,
    warm: bool = True,
    sqpoll: bool = False,
    read_only: bool = False,
    auto_compact: float | None = 0.5,
    auto_compact_bytes: int = 64 << 20,
    compression: str | None = None,
    compression_level: int | None = None,
) -> DB:
    """Open (or create) the store in directory `path`.

    A torn tail left by a crash is truncated with a RuntimeWarning saying how many bytes
    were dropped; corruption elsewhere raises OSError naming the file and offset, and so
    does a segment cut short or removed outside uringkit (one shorter than the length
    its INDEX or hint file recorded). `repair=True` reads every record (no INDEX, no hint
    files), skips what is damaged or missing and warns what was lost. A second process
    opening the same store gets BlockingIOError.

    The store belongs to the process that opened it: in a child forked after the open,
    every operation on it raises RuntimeError (open it again there), closing it writes
    nothing, and the child does not keep it locked (docs/kv.md, "Forked processes").

    `read_only=True` opens without the writer's lock, so any number of processes can
    read a store while one writes it (`uringkit kv get/scan/stats/check` do): it sees
    the store as it was at open until `refresh()` takes in what was written since — and
    changes nothing in the directory (a torn tail is not cut, a compaction's cleanup is
    left to the writer, no INDEX is written). Writes, compact() and sync() raise
    PermissionError; it cannot be combined with repair=True (ValueError), and it creates
    nothing (FileNotFoundError for a missing store). It maps INDEX as a writer's open does
    and replays what the writer appended since (a damaged INDEX is reported, not removed).

    `direct=True` appends with O_DIRECT (whole 4 KiB blocks from an aligned buffer,
    bypassing the page cache: written data does not evict what readers cache). Fresh
    records are read from an in-memory copy of the active segment — anonymous memory
    that grows with the segment up to `segment_size` (lower it to bound the process's
    memory); older segments are read from the disk. Durable puts are faster this way
    here (1.5x one at a time, 2x in batches of 64). A filesystem without O_DIRECT
    support raises OSError saying so. `io_uring=False` makes O_DIRECT appends and cold
    multi_get reads plain system calls instead of going through a ring (buffered appends
    from threads always are: io_uring would hand buffered writes and fsyncs to a worker
    thread, 20-35 % slower for a caller that waits anyway; the async API writes its
    groups on the event loop's ring so the loop never blocks).

    `sqpoll=True` (with `direct=True`): the O_DIRECT appends go through a ring with a
    kernel submission-queue polling thread (seed 003's configuration), so submitting an
    append needs no system call while that thread is awake (it sleeps after 100 ms
    without appends). The thread spins on a CPU of its own while awake: worth it only with
    a core to spare (see docs/sqpoll.md). A kernel or container that refuses SQPOLL
    raises OSError saying so; without `direct=True` (or with `io_uring=False`) it is a
    ValueError: buffered appends never go through a ring.

    Closing writes the whole index to `INDEX` (about 46 MB and ~60 ms per million
    16-byte keys) so that the next open maps it instead of rebuilding it (~20-40 ms
    instead of ~0.3 s per million keys); `index_snapshot=False` skips both (closing then
    writes only INDEX's header, the list of segments and their sizes, so that one cut
    short or removed outside the store is still found at open). On a full disk closing
    gives INDEX up, leaving no partial file: the next open replays the segments.

    `auto_compact=0.5` (the default): each time a segment fills up and is sealed, a
    background thread compacts the sealed segments at least that fraction dead — records
    overwritten or deleted since — once they hold `auto_compact_bytes` (64 MiB) of dead
    records between them, with the small segments earlier compactions left (Bitcask's merge
    triggers and thresholds); the others, cold data, are not copied again. Tombstones that
    may still hide a value in a segment left alone are copied on. When the tombstones reach
    `auto_compact_bytes` and that fraction of the live bytes (a queue's deletes), or the
    sealed segments hold that fraction of dead bytes and tombstones in all, none of them
    enough alone, it compacts them all (dropping the tombstones), as `compact()` always
    does. Either way reads and writes go on, a crash loses nothing, one runs at a time, and
    close() waits for one that is running. `stats()` counts them (`auto_compactions`,
    `auto_compact_failures`: a failed one — a full disk — is tried again at the next sealed
    segment; `compact()` raises its error) and shows `sealed_dead_bytes`, `tombstone_bytes`
    and `compacted_bytes`. `auto_compact=None`: only `compact()` compacts.

    `warm=True` (the default): when a multi_get (or items()) finds values that are not in
    the page cache, the store's segments are read in by a background thread (once per open, 4 MiB
    at a time, lowest best-effort I/O priority) — only if they fit in a quarter of the
    memory available, so caching the store whole evicts nothing that matters. A cold
    store then warms at the disk's sequential speed instead of one 4 KiB page per missed
    value (LMDB gets the same from the kernel's read-around on its mapped file). Set
    `warm=False` for stores read rarely, or to keep their pages out of memory.

    `compression="zstd"` or `"lz4"`: values of 64 bytes or more are stored compressed when
    that saves at least an eighth of them (text, JSON, repetitive records), the others as
    they are — random or already compressed data costs one compression attempt per put and
    nothing on reads. `"zstd"` (level 3, or `compression_level` from 1 to 19: higher is
    smaller and slower to write; reads cost about the same) compresses each value against a
    dictionary trained on the store's own values: once 1,000 values (or 1 MiB of them) were
    compressed, a background thread trains a 16 KiB dictionary and keeps it in the store's
    directory as `DICT-<id>` (written durably before any record uses it), and every value
    compressed after that uses it — small values that resemble each other (JSON records of
    ~550 bytes: 0.26 of their size against 0.64 alone) then compress as a block compressor's
    would. When the values drift from it the dictionary is retrained (a new one is kept when
    it does at least 10 % better on values it was not trained on): by the writers, in the
    background, once a window of 1,000 values compresses 20 % worse than its first did
    (`stats()`: `compression_drift_retrainings`, `compression_drift_retrained`), and by a
    compaction of every segment (`compact()`), which rewrites every value against it and
    removes the dictionaries no record names any more. `"lz4"` compresses each value on its
    own: faster, little gain on small values. Reads decompress whatever a record holds, so a
    store can be opened with or without compression at any time, and compaction rewrites
    values in the compression the store is opened with (opened without, it copies them as
    they are stored); `stats()` counts `compressed_values` and `compression_saved_bytes`
    since the open, and names the `compression_dictionary` in use. A store's `DICT-*` files
    belong to it like its segments (`checkpoint()` copies them; a record whose dictionary is
    gone is reported as damaged, never decoded against another). Records with a compressed
    value are format version 2: a build without compression reports them as damaged instead
    of serving compressed bytes. Off by default (RocksDB and LevelDB compress by default): a
    get then copies the value once more, out of the decompression.
    """
    p = os.fspath(path)
    store = KvStore(
        p,
        durability=durability,
        batch_ms=batch_ms,
        batch_bytes=batch_bytes,
        create=create,
        repair=repair,
        segment_size=segment_size,
        io_uring=io_uring,
        direct=direct,
        index_snapshot=index_snapshot,
        warm=warm,
        sqpoll=sqpoll,
        read_only=read_only,
        auto_compact=auto_compact,
        auto_compact_bytes=auto_compact_bytes,
        compression=compression,
        compression_level=compression_level,
    )
    return DB(store, p)


_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="uringkit-kv")
    return _pool


def _forget_pool() -> None:
    # a forked child has none of the pool's threads: a job sent to it would never run
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


class _LoopGroup:
    """One event loop's side of an AsyncDB: its ring (None: writes go through the thread
    pool), the futures of the writes it queued since its last group went out, the task
    writing its groups, and the newest ticket it queued. Only that loop's thread touches
    it."""

    __slots__ = ("flusher", "last", "ring", "waiters")

    def __init__(self, ring: Any) -> None:
        self.ring = ring
        # (ticket, future) of each write queued: each is told its own ticket's outcome
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.last = 0


class _AsyncReads:
    """`async for` over `iterator()`: the listing and each chunk of values read off the
    loop. `_reader()`: the native store or view, and how to run a call off the loop."""

    def _reader(self) -> tuple[KvStore | KvView, Callable[..., Awaitable[Any]]]:
        raise NotImplementedError

    async def iterator(
        self,
        *,
        prefix: bytes | None = None,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
        include_value: bool = True,
    ) -> AsyncIterator[Any]:
        """`DB.iterator` for asyncio: `async for k, v in db.iterator(prefix=b"a:")`, a
        snapshot as `DB.iterator`'s, taken (off the loop) when the iteration starts;
        values come 1,000 at a time, each chunk read off the loop."""
        reader, run = self._reader()
        scan = await run(reader.scan, prefix, start, stop, reverse)
        if not include_value:
            keys: list[bytes] = scan.key_list()
            for k in keys:
                yield k
            return
        while chunk := await run(scan.next_items, _SCAN_CHUNK):
            for kv in chunk:
                yield kv


class AsyncSnapshot(_Closes, _AsyncReads):
    """`Snapshot` for asyncio (`db.snapshot()` of an `AsyncDB`): reads of records in
    memory run inline, the others on a pool thread; `async for` over `iterator()`.
    `async with db.snapshot() as snap:` (or `with`) closes it."""

    def __init__(self, snap: Snapshot, db: AsyncDB) -> None:
        self.sync = snap
        self._db = db
        self._closer = snap

    def _reader(self) -> tuple[KvView, Callable[..., Awaitable[Any]]]:
        return self.sync, self._db._run

    async def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        try:
            v = self.sync.get_cached(key)
        except BlockingIOError:
            v = await self._db._run(self.sync.get, key)
        return default if v is None else v

    async def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        return await self._db._run(self.sync.multi_get, keys)  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return key in self.sync

    def __len__(self) -> int:
        return len(self.sync)

    async def keys(self) -> list[bytes]:
        return await self._db._run(self.sync.keys)  # type: ignore[no-any-return]

    async def items(self) -> list[tuple[bytes, bytes]]:
        return await self._db._run(self.sync.items)  # type: ignore[no-any-return]

    async def values(self) -> list[bytes]:
        return await self._db._run(self.sync.values)  # type: ignore[no-any-return]

    async def __aenter__(self) -> AsyncSnapshot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncDB(_AsyncReads):
    """The store for asyncio. With durability="sync" and io_uring available, durable
    writes are group-committed on the event loop's own ring (the one `uringkit.aio` uses):
    every put queued during one loop iteration goes out as one write linked to one
    fdatasync, with no thread involved; puts queued while that is in flight form the
    next group. Reads of cached data run inline. Elsewhere (no io_uring), writes run on a
    thread pool and share group commits there.

    Cancelling a task awaiting `put` does not unqueue the record: it may still be
    written (as with a thread interrupted after calling `DB.put`).

    The store is not tied to the loop it was opened on: each event loop that awaits it
    (one `asyncio.run()` per test or per request, or loops in several threads at once)
    queues its writes and group-commits them on its own ring; the store orders the
    groups of every loop and thread.
    """

    def __init__(self, db: DB, durability: str) -> None:
        self.db = db
        self._sync = durability == "sync"
        self._groups: dict[asyncio.AbstractEventLoop, _LoopGroup] = {}
        # the last (loop, group) asked for: the hot path's one comparison
        self._cur: tuple[Any, Any] = (None, None)
        self._group()

    def _group(self) -> _LoopGroup:
        """The running loop's side of the store (made on its first use)."""
        loop = asyncio.get_running_loop()
        cur = self._cur
        if cur[0] is loop:
            return cur[1]  # type: ignore[no-any-return]
        g = self._groups.get(loop)
        if g is None:
            ring = None
            if self._sync:
                from ..aio._backend import RingBackend, get_backend

                b = get_backend()
                ring = b if isinstance(b, RingBackend) else None
            g = _LoopGroup(ring)
            for old in list(self._groups):
                if old.is_closed():  # (its futures and flusher went with it)
                    self._groups.pop(old, None)
            self._groups[loop] = g
        self._cur = (loop, g)
        return g

    @property
    def _ring(self) -> Any:
        """The running loop's ring for durable groups (None: the thread pool)."""
        return self._group().ring

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(_executor(), fn, *args)

    def _reader(self) -> tuple[KvStore, Callable[..., Awaitable[Any]]]:
        return self.db._s, self._run

    async def _write(self, ops: list[tuple[bytes, bytes | None]], atomic: bool) -> None:
        g = self._group()
        ring = g.ring
        if ring is None:
            # a buffered store takes the write inline when it cannot block
            if not self.db._s.write_nowait(ops, atomic):
                await self._run(self.db._s.batch if atomic else self._write_each, ops)
            return
        g.last = self.db._s.enqueue(ops, atomic)
        fut: asyncio.Future[None] = ring.loop.create_future()
        g.waiters.append((g.last, fut))
        if g.flusher is None or g.flusher.done():
            g.flusher = ring.loop.create_task(self._flush(g))
        await fut

    def _write_each(self, ops: list[tuple[bytes, bytes | None]]) -> None:
        for k, v in ops:
            if v is None:
                self.db._s.delete(k)
            else:
                self.db._s.put(k, v)

    async def _flush(self, g: _LoopGroup) -> None:
        """Write this loop's queued groups until none is left, one write+fdatasync at a
        time (a group another loop or a thread leads meanwhile is waited for)."""
        s, ring = self.db._s, g.ring
        while g.waiters:
            waiters, g.waiters = g.waiters, []
            last = g.last
            err: BaseException | None = None
            try:
                lead = s.lead_async()
                if lead is None:
                    # a thread of this process leads a group commit that holds ours (or
                    # will take it), or the store appends with O_DIRECT (its own writer
                    # does it): one wait off the loop for the whole group
                    await self._run(s.wait_ticket, last)
                else:
                    fd, off, data, _last = lead
                    try:
                        wrote, synced = await ring.write_datasync(fd, data, off)
                    except BaseException:
                        # (the loop is closing: cancelled) the group failed — release the
                        # store's writer role, or every later write would wait forever
                        s.finish_async(-errno.ECANCELED, -errno.ECANCELED)
                        raise
                    s.finish_async(wrote, synced)
            except BaseException as e:  # noqa: BLE001 - delivered to the waiters below
                err = e
            # Each write is told how its own group went: a thread's leader may have
            # taken some of this loop's writes into an earlier group than the rest.
            try:
                told: list[OSError | Literal[True] | None] = s.collect([t for t, _ in waiters])
            except BaseException as e:  # noqa: BLE001 - (the store closed meanwhile)
                err = err or e
                told = [None] * len(waiters)
            for (_, f), outcome in zip(waiters, told, strict=True):
                if f.done():
                    continue
                if outcome is True:
                    f.set_result(None)
                elif outcome is None:  # not written (yet): the flush itself failed
                    f.set_exception(err or OSError(errno.EIO, "the write was not done"))
                else:
                    f.set_exception(outcome)
            if isinstance(err, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise err

    async def put(self, key: bytes, value: Buffer) -> None:
        if type(value) is not bytes:
            value = _value(value)
        g = self._group()
        ring = g.ring
        if ring is None:
            if not self.db._s.write_nowait([(key, value)]):
                await self._run(self.db._s.put, key, value)
            return
        # the hot path: the native side checks key and value
        g.last = self.db._s.enqueue_put(key, value)
        fut: asyncio.Future[None] = ring.loop.create_future()
        g.waiters.append((g.last, fut))
        f = g.flusher
        if f is None or f.done():
            g.flusher = ring.loop.create_task(self._flush(g))
        await fut

    async def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """Inline when the record is in memory; otherwise read on a pool thread, so a
        cold read never stalls the event loop on a page fault."""
        try:
            v = self.db._s.get_cached(key)
        except BlockingIOError:
            v = await self._run(self.db._s.get, key)
        return default if v is None else v

    async def delete(self, key: bytes) -> bool:
        _check(key, None)
        existed = key in self.db
        await self._write([(key, None)], False)
        return existed

    async def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        """Inline when every record is in memory; otherwise one batch on a pool thread
        (its cold values are read with one batch of io_uring reads there)."""
        if self.db._s.all_cached(keys):
            return self.db.multi_get(keys)
        return await self._run(self.db.multi_get, keys)  # type: ignore[no-any-return]

    @overload
    def batch(self) -> AsyncBatch: ...

    @overload
    def batch(self, ops: Iterable[tuple[bytes, Buffer | None]]) -> Coroutine[Any, Any, None]: ...

    def batch(
        self, ops: Iterable[tuple[bytes, Buffer | None]] | None = None
    ) -> AsyncBatch | Coroutine[Any, Any, None]:
        """`async with db.batch() as b: b.put(k, v); b.delete(k2)`: atomic, as the sync
        store's batch (see AsyncBatch). `await db.batch(ops)` is `await db.write(ops)`."""
        if ops is None:
            return AsyncBatch(self)
        return self.write(ops)

    async def write(self, ops: Iterable[tuple[bytes, Buffer | None]]) -> None:
        """Apply `[(key, value), (key, None), ...]` atomically as one batch (None deletes
        the key); values may be bytes-like (copied)."""
        held = _checked_ops(ops)
        if held:
            await self._write(held, True)

    async def compact(self) -> tuple[int, int]:
        await self._drain()
        return await self._run(self.db.compact)  # type: ignore[no-any-return]

    async def checkpoint(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """As `DB.checkpoint`, off the loop, after this store's queued writes."""
        await self._drain()
        return await self._run(self.db.checkpoint, path)  # type: ignore[no-any-return]

    async def refresh(self) -> dict[str, int]:
        """As `DB.refresh` (read_only=True stores), off the loop."""
        return await self._run(self.db.refresh)  # type: ignore[no-any-return]

    async def _drain(self) -> None:
        """Wait until the writes every loop has queued are written."""
        here = asyncio.get_running_loop()
        for loop, g in list(self._groups.items()):
            if loop is here:
                while g.flusher is not None and not g.flusher.done():
                    await asyncio.shield(g.flusher)
            elif not loop.is_closed() and g.flusher is not None and not g.flusher.done():
                # (another running loop's: its newest write, waited for off this loop)
                await self._run(self.db._s.wait_ticket, g.last)

    def __len__(self) -> int:
        return len(self.db)

    def __contains__(self, key: object) -> bool:
        """An index lookup in memory: no I/O, so no await."""
        return key in self.db

    async def keys(self) -> list[bytes]:
        """A snapshot of the keys (off the loop: a big index takes a while to copy)."""
        return await self._run(self.db.keys)  # type: ignore[no-any-return]

    async def values(self) -> list[bytes]:
        return await self._run(self.db.values)  # type: ignore[no-any-return]

    async def delete_range(
        self, *, prefix: bytes | None = None, start: bytes | None = None, stop: bytes | None = None
    ) -> int:
        """`DB.delete_range` for asyncio: the deletes go out as one atomic batch (with
        durability="sync", through the loop's ring like any batch)."""
        _need_bound(prefix, start, stop)
        scan = await self._run(self.db._s.scan, prefix, start, stop)
        keys: list[bytes] = scan.key_list()
        if keys:
            await self.write([(k, None) for k in keys])
        return len(keys)

    def snapshot(self) -> AsyncSnapshot:
        """`DB.snapshot` for asyncio: the store as it is now (taking it is no I/O)."""
        return AsyncSnapshot(self.db.snapshot(), self)

    async def items(self) -> list[tuple[bytes, bytes]]:
        return await self._run(self.db.items)  # type: ignore[no-any-return]

    async def stats(self) -> dict[str, int]:
        return self.db.stats()

    async def warm_up(self) -> bool:
        """As `DB.warm_up` (it only starts a thread: no I/O on the loop)."""
        return self.db.warm_up()

    async def check(self) -> tuple[int, list[str]]:
        """Read and verify every record (off the loop)."""
        await self._drain()
        return await self._run(self.db.check)  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self._drain()
        await self._run(self.db.close)

    async def __aenter__(self) -> AsyncDB:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _AsyncOpener:
    def __init__(self, *a: Any, **kw: Any) -> None:
        self.a, self.kw = a, kw
        self.adb: AsyncDB | None = None

    def __await__(self) -> Any:
        return self._open().__await__()

    async def _open(self) -> AsyncDB:
        loop = asyncio.get_running_loop()
        db = await loop.run_in_executor(_executor(), lambda: open(*self.a, **self.kw))
        durability = self.a[1] if len(self.a) > 1 else self.kw.get("durability", "sync")
        self.adb = AsyncDB(db, durability)
        return self.adb

    async def __aenter__(self) -> AsyncDB:
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        if self.adb is not None:
            await self.adb.close()


def open_async(
    path: str | os.PathLike[str], durability: str = "sync", create: bool = True, **kw: Any
) -> _AsyncOpener:
    """`async with kv.open_async(path) as db:` (or `db = await kv.open_async(path)`)."""
    return _AsyncOpener(path, durability, create, **kw)
