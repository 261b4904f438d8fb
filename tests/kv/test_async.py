"""The async API on asyncio's loop and on uvloop: durable writes group-committed on the
event loop's own ring, mixed with threads, failures delivered to every writer."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from uringkit import kv
from uringkit.aio._backend import RingBackend, get_backend

Run = Callable[[Callable[[], Awaitable[Any]]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    def go(fn: Callable[[], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            return await fn()

        if request.param == "uvloop":
            uvloop = pytest.importorskip("uvloop")
            return uvloop.run(main())
        return asyncio.run(main())

    return go


def test_tasks_share_the_loops_ring_and_group_commits(tmp_path: Path, run: Run) -> None:
    async def go() -> None:
        async with kv.open_async(tmp_path / "db") as db:
            if isinstance(get_backend(), RingBackend):
                assert db._ring is get_backend()  # the loop's ring, not a thread pool

            async def writer(t: int) -> None:
                for i in range(40):
                    await db.put(b"t%d-%d" % (t, i), b"v%d" % i)

            await asyncio.gather(*(writer(t) for t in range(32)))
            assert len(db) == 32 * 40
            st = db.db.stats()
            assert 0 < st["group_commits"] < 32 * 40 / 4, st  # fdatasyncs shared
            await db.delete(b"t0-0")
            await db.batch([(b"a", b"1"), (b"t1-1", None)])
            assert await db.multi_get([b"t0-0", b"t1-1", b"a", b"t2-2"]) == [
                None,
                None,
                b"1",
                b"v2",
            ]

    run(go)
    with kv.open(tmp_path / "db") as db:  # all durable, all there after reopening
        assert len(db) == 32 * 40 - 2 + 1 and db.get(b"t31-39") == b"v39"


def test_tasks_and_threads_write_together(tmp_path: Path, run: Run) -> None:
    async def go() -> None:
        async with kv.open_async(tmp_path / "db") as db:
            stop = threading.Event()

            def thread_writer(n: int) -> None:
                for i in range(300):
                    db.db.put(b"th%d-%d" % (n, i), b"x")
                stop.set()

            threads = [threading.Thread(target=thread_writer, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()

            async def writer(t: int) -> None:
                for i in range(150):
                    await db.put(b"as%d-%d" % (t, i), b"y")

            await asyncio.gather(*(writer(t) for t in range(8)))
            for t in threads:
                await asyncio.get_running_loop().run_in_executor(None, t.join)
            assert len(db) == 4 * 300 + 8 * 150

    run(go)
    with kv.open(tmp_path / "db") as db:
        assert len(db) == 4 * 300 + 8 * 150


def test_cancelled_put_and_bad_input(tmp_path: Path, run: Run) -> None:
    async def go() -> None:
        async with kv.open_async(tmp_path / "db") as db:
            t = asyncio.ensure_future(db.put(b"k", b"v"))
            await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            await db.put(b"k2", b"v2")  # the store goes on
            assert await db.get(b"k2") == b"v2"
            with pytest.raises(TypeError, match="key must be bytes"):
                await db.put("k", b"v")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="64 KiB"):
                await db.put(b"k" * 70_000, b"v")
            # a wrong op of a batch is named by its place, as DB.write names it
            with pytest.raises(TypeError, match=r"^ops\[1\]: value must be bytes"):
                await db.write([(b"a", b"1"), (b"b", 2)])  # type: ignore[list-item]
            with pytest.raises(ValueError, match=r"^ops\[1\]: key must be 1 byte"):
                await db.write([(b"a", b"1"), (b"", b"v")])
            with pytest.raises(TypeError, match=r"^ops\[0\]: batch ops must be"):
                await db.write([(b"a",)])  # type: ignore[list-item]
            assert await db.get(b"a") is None

    run(go)


def test_disk_full_fails_every_writer_of_the_group(small_fs: Path, run: Run) -> None:
    async def go() -> None:
        async with kv.open_async(small_fs / "db") as db:
            await db.put(b"keep", b"safe")
            results = await asyncio.gather(
                *(db.put(b"k%d" % i, b"x" * 60_000) for i in range(40)),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, OSError)]
            assert errors and all("No space left" in str(e) for e in errors)
            assert {e.errno for e in errors} == {errno.ENOSPC}, errors[:2]
            assert await db.get(b"keep") == b"safe"
            assert db.db.check()[1] == []

    run(go)
    with kv.open(small_fs / "db") as db:
        assert db.get(b"keep") == b"safe" and db.recovery["torn_bytes"] == 0


def test_direct_store_groups_async_writes(tmp_path: Path, run: Run) -> None:
    async def go() -> None:
        try:
            adb = await kv.open_async(tmp_path / "db", direct=True)
        except OSError as e:
            pytest.skip(f"no O_DIRECT here: {e}")
        async with adb as db:

            async def writer(t: int) -> None:
                for i in range(30):
                    await db.put(b"t%d-%d" % (t, i), b"v" * (i + t))

            await asyncio.gather(*(writer(t) for t in range(16)))
            st = db.db.stats()
            assert st["direct"] == 1
            assert 0 < st["group_commits"] < 16 * 30 / 2
            if isinstance(get_backend(), RingBackend):
                # the block images went out on the loop's ring, not through the store's
                # own writer (which counts a write and an fdatasync per group)
                assert st["write_syscalls"] < st["group_commits"], st
            assert await db.get(b"t15-29") == b"v" * 44

    run(go)
    with kv.open(tmp_path / "db") as db:
        assert len(db) == 16 * 30


def test_loop_closing_mid_group_commit_releases_the_store(tmp_path: Path) -> None:
    """asyncio.run cancels the flusher while its write is in flight: the group fails,
    and the store keeps working for threads (no writer role left dangling)."""
    from uringkit.kv import AsyncDB

    db = kv.open(tmp_path / "db")

    async def main() -> None:
        adb = AsyncDB(db, "sync")
        for i in range(50):
            asyncio.ensure_future(adb.put(b"k%d" % i, b"v"))
        await asyncio.sleep(0)  # the flusher took the group; its write is queued
        # returning now: asyncio.run cancels the pending tasks, the loop closes its ring

    asyncio.run(main())
    done = threading.Event()

    def after() -> None:
        db.put(b"after", b"ok")
        done.set()

    t = threading.Thread(target=after, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set(), "a write after the loop closed hung"
    assert db.get(b"after") == b"ok"
    db.close()
    with kv.open(tmp_path / "db") as db2:
        assert db2.get(b"after") == b"ok"


def test_cold_reads_leave_the_loop(tmp_path: Path, run: Run) -> None:
    """A record that is not in memory is read off the event loop (a page fault there
    would stall every task); records in memory are read inline."""
    p = tmp_path / "db"
    with kv.open(p, durability="sync") as db:
        for i in range(200):
            db.put(b"k%d" % i, b"v%d" % i * 100)
        db._s.sync()
        for seg in p.glob("*.seg"):  # drop the store's pages from the page cache
            fd = os.open(seg, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        cold = 0
        for i in range(200):
            try:
                db._s.get_cached(b"k%d" % i)
            except BlockingIOError:
                cold += 1
        assert cold > 0, "eviction did not take: the test proves nothing"

        async def go() -> None:
            adb = kv.AsyncDB(db, "sync")
            assert await adb.get(b"k7") == b"v7" * 100
            assert await adb.get(b"missing") is None
            keys = [b"k%d" % i for i in range(0, 200, 7)] + [b"nope"]
            want = [b"v%d" % i * 100 for i in range(0, 200, 7)] + [None]
            assert await adb.multi_get(keys) == want
            assert db._s.all_cached(keys)  # read once: in memory now
            assert await adb.multi_get(keys) == want

        run(go)


@pytest.mark.parametrize("durability", ["none", "batch"])
def test_buffered_async_writes_inline(tmp_path: Path, run: Run, durability: str) -> None:
    """A buffered store's writes that cannot block happen inline (no thread hop); the
    ones that must flush or sync go to a pool thread. All of them land."""

    async def go() -> None:
        async with kv.open_async(tmp_path / "db", durability, segment_size=128 << 10) as db:
            await asyncio.gather(*(db.put(b"k%d" % i, b"v" * (i % 500)) for i in range(3000)))
            await db.batch([(b"a", b"1"), (b"k0", None)])
            assert await db.delete(b"k1") is True
            assert len(db) == 3000 - 2 + 1
            with pytest.raises(TypeError, match="key must be bytes"):
                await db.put("x", b"y")  # type: ignore[arg-type]

    run(go)
    with kv.open(tmp_path / "db") as db:
        assert len(db) == 2999 and db.get(b"k2999") == b"v" * (2999 % 500)


def test_a_store_outlives_its_loop(tmp_path: Path, run: Run) -> None:
    """Opened in one `asyncio.run()` and used in the next (one loop per test or per
    request): its durable writes go through the new loop's ring."""
    holder: dict[str, kv.AsyncDB] = {}

    async def first() -> None:
        holder["db"] = await kv.open_async(tmp_path / "db")
        await holder["db"].put(b"a", b"1")

    async def second() -> None:
        db = holder["db"]
        before = db.db.stats()["group_commits"]
        await asyncio.gather(*(db.put(b"k%d" % i, b"v") for i in range(50)))
        await db.batch([(b"b", b"2")])
        if isinstance(get_backend(), RingBackend):
            assert db._ring is get_backend()
        assert db.db.stats()["group_commits"] - before < 50  # (shared fdatasyncs)
        assert await db.get(b"a") == b"1"
        await db.close()

    run(first)
    run(second)
    with kv.open(tmp_path / "db") as db:
        assert len(db) == 52 and db[b"b"] == b"2"


def test_two_running_loops_share_a_store(tmp_path: Path) -> None:
    """Loops in two threads awaiting the same store at once: every write lands and no
    loop hangs — each queues its writes and group-commits them on its own ring, the
    store orders the groups (one loop's group may carry the other's records: that one
    then waits for it off its loop). Once shared state raced here and a future of one
    loop was resolved from the other's thread: that loop never woke."""

    async def opener() -> kv.AsyncDB:
        return await kv.open_async(tmp_path / "db")

    db = asyncio.run(opener())
    errors: list[BaseException] = []

    def loop_thread(t: int) -> None:
        async def go() -> None:
            for r in range(60):
                await asyncio.gather(*(db.put(b"%d-%d-%d" % (t, r, i), b"v") for i in range(10)))
                if r % 10 == 0:
                    await db.batch([(b"%d-b%d" % (t, r), b"w")])
            await db._drain()

        try:
            asyncio.run(go())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=loop_thread, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads), "a loop hung"
    assert errors == []
    asyncio.run(db.close())
    with kv.open(tmp_path / "db") as d:
        assert len(d) == 2 * (60 * 10 + 6)


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_async_batch_block(tmp_path: Path, run: Run, durability: str) -> None:
    """`async with db.batch() as b:` as the sync store's `with db.batch()`: applied whole
    when the block ends (group-committed with the other tasks' writes), dropped on an
    exception; `await b.commit()` without the block; a dropped unapplied batch warns."""

    async def go() -> None:
        async with kv.open_async(tmp_path / "db", durability=durability) as db:
            await db.put(b"gone", b"x")

            async def task(t: int) -> None:
                async with db.batch() as b:
                    for i in range(10):
                        b.put(b"t%d-%d" % (t, i), bytearray(b"v%d" % i))
                    b.delete(b"gone")
                    assert len(b) == 11
                assert await db.get(b"t%d-9" % t) == b"v9"  # written when the block ended

            await asyncio.gather(*(task(t) for t in range(16)))
            assert len(db) == 160 and b"gone" not in db

            with pytest.raises(RuntimeError, match="abort"):
                async with db.batch() as b:
                    b.put(b"never", b"1")
                    b.delete(b"t0-0")
                    raise RuntimeError("abort")
            assert await db.get(b"never") is None and await db.get(b"t0-0") == b"v0"

            b = db.batch()
            b.put(b"late", b"1")
            await b.commit()
            assert len(b) == 0 and await db.get(b"late") == b"1"
            await db.write([(b"w", memoryview(b"2")), (b"late", None)])
            assert await db.multi_get([b"w", b"late"]) == [b"2", None]

            with pytest.raises(TypeError):
                async with db.batch() as b:
                    b.put(b"k", None)  # type: ignore[arg-type]
            with pytest.warns(ResourceWarning, match="async with db.batch"):
                b = db.batch()
                b.put(b"dropped", b"1")
                del b
                import gc

                gc.collect()
            assert await db.get(b"dropped") is None

    run(go)
    with kv.open(tmp_path / "db") as db:  # what was acknowledged is there after reopening
        assert len(db) == 161 and db.get(b"t15-0") == b"v0" and db.get(b"w") == b"2"
