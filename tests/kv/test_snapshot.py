"""Snapshots (`db.snapshot()`): the store as it was when taken, whatever is written,
deleted or compacted since — RocksDB's GetSnapshot, plyvel's `db.snapshot()`."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from pathlib import Path

import pytest

from uringkit import kv

MODES = [
    {"durability": "none"},
    {"durability": "batch"},
    {"durability": "sync"},
    {"durability": "sync", "direct": True},
    {"durability": "none", "compression": "zstd"},
]


def deleted_segments() -> int:
    """Segment files this process still holds open that were removed (retired)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += t.endswith(".seg (deleted)")
    return n


@pytest.mark.parametrize("mode", MODES, ids=lambda m: ",".join(f"{k}={v}" for k, v in m.items()))
def test_a_snapshot_reads_the_store_as_it_was(tmp_path: Path, mode: dict[str, object]) -> None:
    try:
        db = kv.open(tmp_path / "s", segment_size=64 << 10, **mode)  # type: ignore[arg-type]
    except OSError as e:
        pytest.skip(f"not here: {e}")
    with db:
        then = {b"k%04d" % i: b"one-%d-" % i * (i % 7) for i in range(600)}
        db.write(list(then.items()))
        snap = db.snapshot()
        assert db.stats()["snapshots"] == 1
        # every kind of change since: overwrites, deletes, new keys, a batch, a range
        # delete, a compaction that retires the segments the snapshot's records are in
        for i in range(0, 600, 2):
            db.put(b"k%04d" % i, b"two")
        for i in range(1, 600, 3):
            db.delete(b"k%04d" % i)
        with db.batch() as b:
            b.put(b"k9999", b"new")
            b.delete(b"k0005")
        assert db.delete_range(start=b"k03", stop=b"k04") > 0
        db.compact()
        db.put(b"k0000", b"three")
        assert db.stats()["snapshot_keys"] >= 300

        assert len(snap) == len(then)
        for k, v in then.items():
            assert snap.get(k) == v
            assert k in snap
        assert snap.get(b"k9999") is None and b"k9999" not in snap
        assert snap.get(b"k9999", b"dflt") == b"dflt"
        with pytest.raises(KeyError):
            snap[b"k9999"]
        assert snap[b"k0000"] == then[b"k0000"]
        assert snap.multi_get([b"k0001", b"k9999", b"k0300"]) == [
            then[b"k0001"],
            None,
            then[b"k0300"],
        ]
        assert snap.keys() == sorted(then) == list(snap)
        assert snap.items() == sorted(then.items())
        assert snap.values() == [then[k] for k in sorted(then)]
        assert list(snap.iterator(prefix=b"k03", reverse=True, include_value=False)) == sorted(
            (k for k in then if k.startswith(b"k03")), reverse=True
        )
        assert list(snap.iterator(start=b"k0590")) == [
            (k, then[k]) for k in sorted(then) if k >= b"k0590"
        ]
        # the store itself moved on
        assert db.get(b"k0000") == b"three" and db.get(b"k0001") is None
        assert db.get(b"k9999") == b"new"
        # a second snapshot sees the store as it is now
        with db.snapshot() as now:
            assert now.get(b"k0000") == b"three" and len(now) == len(db)
            assert dict(now.items()) == dict(db.items())
        assert now.closed and not snap.closed
        snap.close()
        snap.close()  # (again: nothing)
        assert snap.closed and db.stats()["snapshots"] == 0
        assert db.stats()["snapshot_keys"] == 0
        with pytest.raises(ValueError, match="snapshot is closed"):
            snap.get(b"k0000")
        assert db.check()[1] == []


def test_a_snapshot_keeps_retired_segments_until_it_is_closed(tmp_path: Path) -> None:
    with kv.open(tmp_path / "s", durability="none", segment_size=64 << 10) as db:
        for i in range(2000):
            db.put(b"k%05d" % i, os.urandom(100))
        want = dict(db.items())
        snap = db.snapshot()
        for i in range(2000):
            db.put(b"k%05d" % i, b"x")
        base = deleted_segments()
        retired, _ = db.compact()
        assert retired > 1
        # the segments compaction retired are gone from the directory, still open here
        assert deleted_segments() - base >= retired - 1
        assert dict(snap.items()) == want
        snap.close()
        gc.collect()
        assert deleted_segments() == base
        # a snapshot dropped without close() ends too (plyvel's snapshots do)
        snap = db.snapshot()
        assert db.stats()["snapshots"] == 1
        del snap
        gc.collect()
        assert db.stats()["snapshots"] == 0


def test_snapshots_end_with_their_store(tmp_path: Path) -> None:
    db = kv.open(tmp_path / "s", durability="none")
    db.put(b"a", b"1")
    snap = db.snapshot()
    db.close()
    assert snap.closed
    with pytest.raises(ValueError, match="closed store"):
        snap.get(b"a")
    with pytest.raises(ValueError, match="closed store"):
        len(snap)
    snap.close()  # (nothing to do: no error)
    # and the store reopens at once: a snapshot holds nothing of a closed store
    with kv.open(tmp_path / "s", durability="none") as db:
        assert db.get(b"a") == b"1"


def test_snapshot_bad_input(tmp_path: Path) -> None:
    with kv.open(tmp_path / "s", durability="none") as db, db.snapshot() as snap:
        with pytest.raises(TypeError, match="key"):
            snap.get("a")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="key"):
            snap.get(b"")
        with pytest.raises(TypeError, match=r"list of bytes keys.*\[key\]"):
            snap.multi_get(b"a")  # type: ignore[arg-type]
        assert "a" not in snap  # (not a key: not in it, as for the store)


def test_snapshots_agree_while_threads_transfer(tmp_path: Path) -> None:
    """Writers move amounts between accounts in atomic batches (the total never
    changes); every snapshot taken meanwhile — reads of many keys at one moment — sums
    to the total, however the batches land between its reads."""
    accounts, total = 50, 50 * 1000
    with kv.open(tmp_path / "s", durability="none", segment_size=64 << 10) as db:
        db.write([(b"acct%02d" % i, b"%d" % 1000) for i in range(accounts)])
        stop = threading.Event()
        errors: list[BaseException] = []
        lock = threading.Lock()  # (read-modify-write of two accounts: one mover at a time)

        def mover(seed: int) -> None:
            import random

            r = random.Random(seed)
            try:
                while not stop.is_set():
                    a, b = r.sample(range(accounts), 2)
                    ka, kb = b"acct%02d" % a, b"acct%02d" % b
                    with lock:
                        va, vb = int(db.get(ka) or 0), int(db.get(kb) or 0)
                        amt = r.randint(0, va)
                        db.write([(ka, b"%d" % (va - amt)), (kb, b"%d" % (vb + amt))])
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        def compactor() -> None:
            try:
                while not stop.is_set():
                    db.compact()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        ths = [threading.Thread(target=mover, args=(i,)) for i in range(3)]
        ths.append(threading.Thread(target=compactor))
        for t in ths:
            t.start()
        try:
            keys = [b"acct%02d" % i for i in range(accounts)]
            for _ in range(300):
                with db.snapshot() as snap:
                    # half the accounts read, then a transfer of our own from one of
                    # those to one not read yet (the movers' land anywhere), then the rest
                    first = {k: int(snap.get(k) or -(10**9)) for k in keys[:25]}
                    with lock:
                        src = max(keys[:25], key=lambda k: int(db.get(k) or 0))
                        va, vb = int(db.get(src) or 0), int(db.get(keys[-1]) or 0)
                        db.write([(src, b"0"), (keys[-1], b"%d" % (vb + va))])
                    rest = sum(int(snap.get(k) or -(10**9)) for k in keys[25:])
                    assert sum(first.values()) + rest == total
                    assert sum(int(v or 0) for v in snap.multi_get(keys)) == total
                    assert sum(int(v) for _, v in snap.iterator(prefix=b"acct")) == total
        finally:
            stop.set()
            for t in ths:
                t.join()
        assert not errors, errors
        assert sum(int(v) for v in db.values()) == total


def test_a_read_only_stores_snapshot_through_refreshes(tmp_path: Path) -> None:
    p = tmp_path / "s"
    with kv.open(p, durability="none", segment_size=64 << 10) as w:
        for i in range(500):
            w.put(b"k%04d" % i, b"v1")
        w.sync()
        with kv.open(p, read_only=True) as r:
            snap = r.snapshot()
            for i in range(500):
                w.put(b"k%04d" % i, b"v2")
            w.put(b"new", b"x")
            w.sync()
            assert r.refresh()["reopened"] == 0  # read in place
            assert r.get(b"k0000") == b"v2" and r.get(b"new") == b"x"
            assert snap.get(b"k0000") == b"v1" and b"new" not in snap and len(snap) == 500
            base = deleted_segments()
            w.compact()
            for i in range(250):
                w.delete(b"k%04d" % i)
            w.sync()
            assert r.refresh()["reopened"] == 1  # a compaction since: opened again
            assert r.get(b"k0000") is None and len(r) == 251
            # the snapshot reads the store it was taken of, as it was
            assert dict(snap.items()) == {b"k%04d" % i: b"v1" for i in range(500)}
            assert snap.multi_get([b"k0001", b"new"]) == [b"v1", None]
            snap.close()
            gc.collect()
            # (the store the refresh replaced went with its last snapshot)
            assert deleted_segments() <= base
            with r.snapshot() as now:
                assert len(now) == 251 and now.get(b"k0300") == b"v2"


def test_async_snapshot(tmp_path: Path) -> None:
    async def main() -> None:
        async with kv.open_async(tmp_path / "s", durability="sync") as db:
            await db.write([(b"k%03d" % i, b"old") for i in range(100)])
            async with db.snapshot() as snap:
                await asyncio.gather(*(db.put(b"k%03d" % i, b"new") for i in range(100)))
                await db.delete(b"k000")
                assert await snap.get(b"k000") == b"old"
                assert await snap.get(b"zzz", b"d") == b"d"
                assert await snap.multi_get([b"k001", b"zzz"]) == [b"old", None]
                assert b"k000" in snap and len(snap) == 100
                got = [kv async for kv in snap.iterator(prefix=b"k09")]
                assert got == [(b"k%03d" % i, b"old") for i in range(90, 100)]
                assert await snap.keys() == [b"k%03d" % i for i in range(100)]
                assert len(await snap.items()) == 100
                assert await snap.values() == [b"old"] * 100
            assert snap.closed
            assert await db.get(b"k001") == b"new"

    asyncio.run(main())


def test_many_snapshots_at_once(tmp_path: Path) -> None:
    """2,000 snapshots, one taken after each write, a third of them closed in between:
    each one that is left sees the store as it was when it was taken."""
    with kv.open(tmp_path / "s", durability="none") as db:
        snaps, model = [], {}
        for i in range(2000):
            k, v = b"k%d" % (i % 50), b"%d" % i
            db.put(k, v)
            model[k] = v
            snaps.append((dict(model), db.snapshot()))
        for _, s in snaps[::3]:
            s.close()
        live = [(then, s) for then, s in snaps if not s.closed]
        assert db.stats()["snapshots"] == len(live) == 1333
        for then, s in live[::7]:
            assert dict(s.items()) == then
        for _, s in live:
            s.close()
        assert db.stats()["snapshots"] == 0
