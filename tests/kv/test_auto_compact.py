"""`kv.open(auto_compact=...)`: compaction in the background once the sealed segments
are mostly dead (Bitcask's merge triggers), with writers, readers and a read-only
process going on; turned off with None."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from uringkit import kv


def wait_for(cond: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.005)


def overwrite(db: kv.DB, rounds: int, keys: int = 500) -> None:
    for r in range(rounds):
        db.write([(b"k%04d" % i, b"%03d" % r * 30) for i in range(keys)])


def test_overwrites_are_reclaimed_in_the_background(tmp_path: Path) -> None:
    p = tmp_path / "s"
    with kv.open(p, durability="none", segment_size=64 << 10, auto_compact_bytes=128 << 10) as db:
        overwrite(db, 60)  # ~3.6 MB written, ~50 KB live
        wait_for(lambda: db.stats()["auto_compactions"] > 0)
        st = db.stats()
        assert st["auto_compactions"] >= 1 and st["auto_compact_failures"] == 0, st
        assert st["compactions"] >= st["auto_compactions"] and st["reclaimed_bytes"] > 0, st
        assert st["bytes_on_disk"] < 3_000_000, st
        assert all(db.get(b"k%04d" % i) == b"059" * 30 for i in range(500))
    with kv.open(p, auto_compact=None) as db:
        assert len(db) == 500 and db.check()[1] == []
        assert db.get(b"k0007") == b"059" * 30


def test_turned_off_nothing_is_compacted(tmp_path: Path) -> None:
    with kv.open(tmp_path / "s", durability="none", segment_size=64 << 10, auto_compact=None) as db:
        overwrite(db, 60)
        time.sleep(0.1)
        st = db.stats()
        assert st["auto_compactions"] == 0 and st["bytes_on_disk"] > 3_000_000, st
        assert st["sealed_dead_bytes"] > 2_500_000, st
        assert (st["compactions"], st["reclaimed_bytes"]) == (0, 0), st
        n, freed = db.compact()  # (by hand, as always)
        st = db.stats()
        assert st["sealed_dead_bytes"] == 0
        assert (st["compactions"], st["reclaimed_bytes"]) == (1, freed) and freed > 0, st
        assert st["last_compaction_ms"] >= 0 and st["auto_compactions"] == 0, st


def test_writers_and_readers_meanwhile(tmp_path: Path) -> None:
    """Threads putting durably and reading while background compactions come and go:
    every read sees the newest value its own thread wrote."""
    p = tmp_path / "s"
    errors: list[BaseException] = []
    with kv.open(p, durability="sync", segment_size=16 << 10, auto_compact_bytes=16 << 10) as db:

        def worker(t: int) -> None:
            try:
                for r in range(150):
                    for i in range(8):
                        k = b"t%d-%d" % (t, i)
                        db.put(k, b"%d" % r * 20)
                        assert db.get(k) == b"%d" % r * 20, k
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        ths = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert not errors, errors[0]
        st = db.stats()
        assert st["auto_compactions"] >= 1 and st["auto_compact_failures"] == 0, st
    with kv.open(p, read_only=True) as db:
        assert len(db) == 32 and db.get(b"t3-7") == b"149" * 20


def test_async_store_compacts_in_the_background(tmp_path: Path) -> None:
    async def main() -> dict[str, int]:
        async with kv.open_async(
            tmp_path / "s", "sync", segment_size=16 << 10, auto_compact_bytes=16 << 10
        ) as db:
            for r in range(40):
                await asyncio.gather(*(db.put(b"k%d" % i, b"%d" % r * 40) for i in range(32)))
            wait_for(lambda: db.db.stats()["auto_compactions"] > 0)
            assert await db.get(b"k5") == b"39" * 40
            return db.db.stats()

    st = asyncio.run(main())
    assert st["auto_compactions"] >= 1, st


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan")])
def test_bad_trigger(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="auto_compact=.*fraction.*None") as e:
        kv.open(tmp_path / "s", auto_compact=bad)
    assert "  " not in str(e.value), "a message that reads as one sentence"
    assert not (tmp_path / "s").exists()


def test_cold_segments_are_left_alone_and_tombstones_carried(tmp_path: Path) -> None:
    """Background compactions take the overwritten segments, not the cold ones: their
    files are never rewritten (same inode), the compactions copy a fraction of them in
    all, and a key deleted while its value sits in a cold segment stays deleted after
    reopens that rebuild the index from hint files and records alone."""
    p = tmp_path / "s"
    seg = 64 << 10
    with kv.open(p, durability="none", segment_size=seg, auto_compact_bytes=16 << 10) as db:
        db.write([(b"c%04d" % i, b"%0100d" % i) for i in range(1000)])  # ~2 segments
        cold = {f.name: f.stat().st_ino for f in sorted(p.glob("*.seg"))[:2]}
        db.write([(b"c%04d" % i, None) for i in range(50)])
        r = 0
        while db.stats()["auto_compactions"] < 3 or r < 100:
            db.write([(b"h%02d" % i, b"%04d" % r * 25) for i in range(20)])
            r += 1
            assert r < 100_000, db.stats()
        st = db.stats()
        assert st["tombstone_bytes"] > 0 and st["compacted_bytes"] < 2 * seg, st
        assert {f: (p / f).stat().st_ino for f in cold} == cold, sorted(p.iterdir())
    for f in p.glob("INDEX*"):
        f.unlink()
    for repair in (False, True):
        with kv.open(p, auto_compact=None, repair=repair) as db:
            assert all(db.get(b"c%04d" % i) is None for i in range(50))
            assert all(db.get(b"c%04d" % i) == b"%0100d" % i for i in range(50, 1000))
            assert all(db.get(b"h%02d" % i) == b"%04d" % (r - 1) * 25 for i in range(20))
            assert db.check()[1] == []
