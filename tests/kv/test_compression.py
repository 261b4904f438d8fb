"""`kv.open(compression="lz4")`: values stored LZ4-compressed when that pays, read back
exactly by every read path (get, multi_get cold and hot, iterator, items), kept
compressed by compaction, checked by check(), readable with compression off, and
refused as damaged — never served compressed — when a record lies about it."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from uringkit import kv


def _values(n: int) -> dict[bytes, bytes]:
    rng = random.Random(5)
    out = {}
    for i in range(n):
        kind = i % 4
        if kind == 0:  # JSON: compresses well
            v = json.dumps({"id": i, "name": f"user{i}", "tags": ["a", "b"] * 20}).encode()
        elif kind == 1:  # random: stored as it is
            v = rng.randbytes(rng.randrange(64, 3000))
        elif kind == 2:  # short: never compressed
            v = b"s%d" % i
        else:  # large and repetitive (a block of a log file)
            v = (b"2026-12-03 INFO request served in %d ms\n" % (i % 97)) * 300
        out[b"k%06d" % i] = v
    return out


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir() if f.suffix == ".seg")


def _drop_cache(p: Path) -> None:
    for f in p.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@pytest.mark.parametrize("durability", ["none", "sync"])
def test_every_read_path_gives_back_the_values(tmp_path: Path, durability: str) -> None:
    want = _values(2000)
    p = tmp_path / "db"
    plain = tmp_path / "plain"
    with kv.open(plain, durability="none") as db:
        db.write(list(want.items()))
    with kv.open(p, durability=durability, compression="lz4", segment_size=1 << 20) as db:
        items = list(want.items())
        db.write(items[:1000])  # a batch
        for k, v in items[1000:1500]:
            db.put(k, v)
        db.put(b"big", want[b"k000003"] * 200)  # 3.3 MB of log lines
        want[b"big"] = want[b"k000003"] * 200
        for k, v in items[1500:]:
            db[k] = bytearray(v)
        st = db.stats()
        assert st["compressed_values"] == 1001  # the JSON and the log blocks, not the rest
        assert st["compression_saved_bytes"] > 0.8 * 500 * len(want[b"k000003"])
        assert all(db.get(k) == v for k, v in want.items())
        keys = list(want)
        assert db.multi_get(keys) == [want[k] for k in keys]
        assert dict(db.iterator()) == want
        assert dict(db.items()) == want
        assert db.check() == (len(want), [])
    assert _size(p) < 0.45 * _size(plain)
    _drop_cache(p)
    # reopened without compression: the values come back; the cold path (a batch of
    # io_uring reads of whole records) decompresses too
    with kv.open(p, durability=durability) as db:
        assert db.multi_get(keys[:500]) == [want[k] for k in keys[:500]]
        assert all(db.get(k) == v for k, v in want.items())
        db.put(b"k000000", want[b"k000000"])  # stored plainly now
        assert db.stats()["compressed_values"] == 0


def test_compaction_keeps_values_compressed(tmp_path: Path) -> None:
    want = _values(1200)
    p = tmp_path / "db"
    with kv.open(p, durability="none", compression="lz4", segment_size=256 << 10) as db:
        db.write(list(want.items()))
        for k in list(want)[::3]:  # a third overwritten: segments to compact
            want[k] = want[k][::-1]
            db.put(k, want[k])
        before = _size(p)
        retired, _ = db.compact()
        assert retired > 0
        assert dict(db.iterator()) == want
        assert db.check() == (len(want), [])
        assert _size(p) < before
    with kv.open(p, compression="lz4") as db:
        assert dict(db.items()) == want


def test_async_store_compresses_too(tmp_path: Path) -> None:
    import asyncio

    v = b'{"a": "' + b"x" * 500 + b'"}'

    async def go() -> int:
        async with kv.open_async(tmp_path / "db", compression="lz4") as db:
            await asyncio.gather(*(db.put(b"k%d" % i, v) for i in range(50)))
            assert await db.get(b"k7") == v
            return db.db.stats()["compressed_values"]

    assert asyncio.run(go()) == 50
    with kv.open(tmp_path / "db") as db:
        assert db[b"k49"] == v


def test_a_record_that_lies_about_compression_is_damage(tmp_path: Path) -> None:
    """A compressed record is format version 2 with flag bit 1; a version-1 record with
    the flag, or a version-2 one without it, is damaged: reported, never decompressed or
    served as it is."""
    p = tmp_path / "db"
    v = b"abc" * 100
    with kv.open(p, durability="sync", compression="lz4", index_snapshot=False) as db:
        db.put(b"k", v)
    seg = p / "00000001.seg"
    data = bytearray(seg.read_bytes())
    assert data[6] == 2 and data[8] & 2  # version 2, compressed
    data[8] &= ~2  # drop the flag only (the CRC then fails too)
    seg.write_bytes(bytes(data))
    with pytest.raises(OSError, match="corrupt record at offset 0"), kv.open(p) as db:
        db.get(b"k")


def test_bad_compression_argument(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match='compression="zstd": use "lz4"'):
        kv.open(tmp_path / "db", compression="zstd")
