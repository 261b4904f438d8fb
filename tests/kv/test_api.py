"""The xkv API: puts, gets, deletes, batches, iteration, compaction, errors."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import platform
import random
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from uringkit import kv


@pytest.mark.parametrize("durability", ["sync", "batch", "none"])
def test_basic_roundtrip(tmp_path: Path, durability: str) -> None:
    p = tmp_path / "db"
    with kv.open(p, durability=durability) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2" * 1000)
        assert db.get(b"a") == b"1" and db.get(b"missing") is None
        assert db.get(b"missing", b"dflt") == b"dflt"
        assert db.delete(b"a") is True and db.delete(b"a") is False
        assert b"b" in db and b"a" not in db and len(db) == 1
        with db.batch() as b:
            b.put(b"x", b"10")
            b.put(b"y", b"20")
            b.delete(b"b")
        assert sorted(db.keys()) == [b"x", b"y"]
        assert sorted(db.items()) == [(b"x", b"10"), (b"y", b"20")]
        assert db.multi_get([b"y", b"nope", b"x"]) == [b"20", None, b"10"]
    with kv.open(p) as db:
        assert sorted(db.items()) == [(b"x", b"10"), (b"y", b"20")]


def test_mapping_protocol(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p) as db:
        db[b"a"] = b"1"
        db[b"b"] = b"2"
        assert db[b"a"] == b"1"
        with pytest.raises(KeyError):
            db[b"missing"]
        del db[b"a"]
        with pytest.raises(KeyError):
            del db[b"a"]
        assert b"a" not in db and len(db) == 1
        assert db.values() == [b"2"] and list(db) == [b"b"]
        with pytest.raises(TypeError, match="key must be bytes"):
            db["text"] = b"x"  # type: ignore[index]
    with kv.open(p) as db:  # durable like put/delete
        assert db[b"b"] == b"2" and b"a" not in db


def test_bytes_like_values(tmp_path: Path) -> None:
    """Values may be any bytes-like object (copied when put); keys stay bytes."""
    import array

    p = tmp_path / "db"
    with kv.open(p) as db:
        ba = bytearray(b"mutable")
        db.put(b"ba", ba)
        db[b"mv"] = memoryview(b"0123456789")[2:5]
        db.put(b"arr", array.array("B", [1, 2, 3]))
        with db.batch() as b:
            b.put(b"batched", ba)
            ba[:] = b"changed"  # after put: not what the batch writes
        with pytest.raises(TypeError, match="bytes-like"):
            db.put(b"k", 5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="bytes-like"):
            db.put(b"k", "text")  # type: ignore[arg-type]

        async def go() -> None:
            async with kv.open_async(tmp_path / "adb") as adb:
                await adb.put(b"a", bytearray(b"async"))
                await adb.batch([(b"b", memoryview(b"view")), (b"c", None)])
                assert await adb.get(b"a") == b"async" and await adb.get(b"b") == b"view"

        asyncio.run(go())
    with kv.open(p) as db:
        assert db[b"ba"] == b"mutable" and db[b"mv"] == b"234"
        assert db[b"arr"] == b"\x01\x02\x03" and db[b"batched"] == b"mutable"


def test_failed_batch_is_not_applied(tmp_path: Path) -> None:
    with kv.open(tmp_path / "db") as db:
        with pytest.raises(RuntimeError), db.batch() as b:
            b.put(b"k", b"v")
            raise RuntimeError("abort")
        assert db.get(b"k") is None


def test_write_applies_ops_atomically(tmp_path: Path) -> None:
    with kv.open(tmp_path / "db") as db:
        db.put(b"gone", b"x")
        db.write([(b"a", b"1"), (b"b", bytearray(b"2")), (b"gone", None)])
        assert db.multi_get([b"a", b"b", b"gone"]) == [b"1", b"2", None]
        with pytest.raises(TypeError, match="bytes-like"):
            db.write([(b"c", b"3"), (b"d", 4)])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="key"):
            db.write([(b"c", b"3"), (b"", b"4")])
        assert b"c" not in db  # all or nothing
        with pytest.raises(TypeError, match="ops must be an iterable of"):
            db.write(5)  # type: ignore[arg-type]
        db.write((b"g%d" % i, b"x") for i in range(3))  # any iterable
        assert db[b"g2"] == b"x"


def test_batch_without_with(tmp_path: Path) -> None:
    """commit() applies a batch used without `with`; a batch dropped uncommitted warns."""
    import gc

    with kv.open(tmp_path / "db") as db:
        b = db.batch()
        b.put(b"a", b"1")
        b.delete(b"x")
        assert len(b) == 2 and db.get(b"a") is None
        b.commit()
        assert len(b) == 0 and db.get(b"a") == b"1"
        lost = db.batch()
        lost.put(b"never", b"1")
        with pytest.warns(ResourceWarning, match="never committed"):
            del lost
            gc.collect()
        assert db.get(b"never") is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ok = db.batch()
            ok.put(b"d", b"1")
            ok.discard()
            del ok
            gc.collect()


def test_bad_input(tmp_path: Path) -> None:
    with kv.open(tmp_path / "db") as db:
        with pytest.raises(TypeError, match="key must be bytes"):
            db.put("text", b"v")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="value must be bytes"):
            db.put(b"k", 42)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="64 KiB"):
            db.put(b"k" * (64 * 1024 + 1), b"v")
        with pytest.raises(ValueError, match="1 byte"):
            db.put(b"", b"v")
        with pytest.raises(ValueError, match="64 MiB"):
            db.put(b"k", b"v" * (64 * 1024 * 1024 + 1))
        for op in (db.get, db.delete):
            with pytest.raises(TypeError, match="key must be bytes"):
                op("text")  # type: ignore[operator]
            with pytest.raises(ValueError, match="1 byte to 64 KiB"):
                op(b"")
            with pytest.raises(ValueError, match="64 KiB"):
                op(b"k" * (64 * 1024 + 1))
        with pytest.raises(TypeError, match="key must be bytes"):
            db.multi_get([b"a", "b"])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="1 byte to 64 KiB"):
            db.multi_get([b"a", b""])
        for one in (b"abc", "abc", bytearray(b"abc")):
            # (iterated, one key would read as ints: named instead)
            with pytest.raises(TypeError, match=r"a list of bytes keys, not one .*\[key\]"):
                db.multi_get(one)  # type: ignore[arg-type]
        assert len(db) == 0  # nothing half-written by the failures
    with pytest.raises(ValueError, match="durability"):
        kv.open(tmp_path / "db2", durability="maybe")
    with pytest.raises(FileNotFoundError, match="no such store"):
        kv.open(tmp_path / "absent", create=False)
    assert not (tmp_path / "absent").exists()  # nothing created on the way
    with kv.open(tmp_path / "a" / "b" / "db") as db:  # parents made as needed
        db.put(b"k", b"v")
    with kv.open(tmp_path / "a" / "b" / "db", create=False) as db:
        assert db.get(b"k") == b"v"
    # a store that cannot be made: the error names it, errno intact, no "(os error N)"
    (tmp_path / "file").write_bytes(b"")
    for bad, code in (
        (tmp_path / "file" / "db", errno.ENOTDIR),  # (its LOCK cannot be opened)
        (Path("/proc/uringkit-absent/db"), errno.ENOENT),  # (its directory cannot be made)
    ):
        with pytest.raises(OSError) as e:
            kv.open(bad)
        assert str(bad) in str(e.value) and e.value.errno == code, e.value
        assert "os error" not in str(e.value)


def test_a_bad_op_of_a_batch_is_named_by_its_place(tmp_path: Path) -> None:
    """db.write(ops) names the wrong op by its place in ops, and writes none of them."""
    big = b"v" * (64 * 1024 * 1024 + 1)
    bad: list[tuple[type[Exception], str, object]] = [
        (TypeError, r"ops\[2\]: value must be bytes", 42),
        (TypeError, r"ops\[2\]: key must be bytes", ("text", b"v")),
        (TypeError, r"ops\[2\]: batch ops must be \(key, value_or_None\) pairs", (b"k",)),
        (ValueError, r"ops\[2\]: key must be 1 byte to 64 KiB \(got 0 bytes\)", (b"", b"v")),
        (ValueError, r"ops\[2\]: key must be 1 byte to 64 KiB", (b"k" * 65537, None)),
        (ValueError, r"ops\[2\]: value must be at most 64 MiB", (b"k", big)),
    ]
    with kv.open(tmp_path / "db") as db:
        for exc, match, op in bad:
            third = op if isinstance(op, tuple) else (b"c", op)
            with pytest.raises(exc, match=match):
                db.write([(b"a", b"1"), (b"b", b"2"), third, (b"d", b"4")])
        with pytest.raises(ValueError, match=r"^ops\[0\]: key must be 1 byte"):
            db.write([(b"", b"v")])
        assert len(db) == 0


def test_use_after_close(tmp_path: Path) -> None:
    db = kv.open(tmp_path / "db")
    db.close()
    db.close()
    assert db.closed
    with pytest.raises(ValueError, match="closed"):
        db.get(b"k")


def test_large_values_and_compaction(tmp_path: Path) -> None:
    with kv.open(tmp_path / "db", segment_size=1 << 20) as db:
        big = bytes(range(256)) * 4096  # 1 MiB
        db.put(b"big", big)
        for r in range(4):
            for i in range(300):
                db.put(b"k%d" % i, b"%d" % r * 500)
        for i in range(100):
            db.delete(b"k%d" % i)
        before = db.stats()["bytes_on_disk"]
        retired, freed = db.compact()
        assert retired >= 2 and freed > 0
        assert db.stats()["bytes_on_disk"] < before
        assert db.get(b"big") == big and db.get(b"k150") == b"3" * 500
        assert db.get(b"k5") is None and len(db) == 201
        n, problems = db.check()
        assert n == 201 and problems == []
    with kv.open(tmp_path / "db") as db:  # the index snapshot written at close
        assert db.recovery["from_snapshot"]
        assert db.get(b"big") == big and len(db) == 201
    (tmp_path / "db" / "INDEX").unlink()
    with kv.open(tmp_path / "db") as db:  # without it: hint files, then segments
        assert not db.recovery["from_snapshot"]
        assert db.recovery["segments_from_hints"] >= 1
        assert db.get(b"big") == big and len(db) == 201


def test_compaction_while_writing(tmp_path: Path) -> None:
    import threading

    with kv.open(tmp_path / "db", durability="none", segment_size=256 << 10) as db:
        for i in range(5000):
            db.put(b"k%d" % i, b"old")
        stop = threading.Event()

        def writer() -> None:
            i = 0
            while not stop.is_set():
                db.put(b"k%d" % (i % 5000), b"new%d" % i)
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        for _ in range(3):
            db.compact()
        stop.set()
        t.join()
        vals = dict(db.items())
        assert len(vals) == 5000
        assert all(v == b"old" or v.startswith(b"new") for v in vals.values())


def test_second_writer_refused_across_processes(tmp_path: Path) -> None:
    p = tmp_path / "db"
    code = (
        "import sys\nfrom uringkit import kv\n"
        "try:\n    kv.open(sys.argv[1])\nexcept BlockingIOError as e:\n    print('refused', e)\n"
    )
    with kv.open(p):
        out = subprocess.run(
            [sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=60
        )
        assert out.stdout.startswith("refused") and "another process" in out.stdout
    out = subprocess.run(
        [sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=60
    )
    assert out.stdout == ""  # free again once the first writer is gone


def test_second_writer_in_the_same_process_is_told_so(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p) as db:
        with pytest.raises(BlockingIOError, match="already open for writing in this process"):
            kv.open(p)
        with kv.open(p, read_only=True) as r:  # (readers take no lock)
            assert len(r) == 0
        db.put(b"k", b"v")  # (the failed open let nothing of the first one go)
    with kv.open(p) as db:  # closed: free again
        assert db[b"k"] == b"v"


def test_a_file_where_the_store_should_be(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    for p in (tmp_path / "f", tmp_path / "f" / "db"):
        for ro in (False, True):
            with pytest.raises(NotADirectoryError, match="a store is a directory"):
                kv.open(p, read_only=ro)
    assert (tmp_path / "f").read_bytes() == b"x"


@pytest.mark.parametrize("relay", ["1", "0"])
def test_concurrent_writer_threads_share_syncs(
    tmp_path: Path, relay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable puts from 64 threads, with relayed wake-ups (the default: a finished
    group's writers released one at a time, the next one woken ahead of its turn) and
    without (URINGKIT_KV_RELAY=0). Every put is there, fdatasyncs were shared, and with
    relaying the GIL was handed to primed writers."""
    import threading

    monkeypatch.setenv("URINGKIT_KV_RELAY", relay)
    with kv.open(tmp_path / "db") as db:

        def writer(t: int, r: int) -> None:
            for i in range(40):
                db.put(b"k%d-%d-%d" % (r, t, i), b"v%d" % t)

        # (rounds until a hand-off went to a primed writer: that needs more than 8
        # writers waiting for their turn at once, which a loaded machine may not give
        # every round)
        for r in range(5):
            ths = [threading.Thread(target=writer, args=(t, r)) for t in range(64)]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            if relay == "0" or db.stats()["relay_primed"] > 0:
                break
        n = 64 * 40 * (r + 1)
        assert len(db) == n
        keys = [b"k%d-%d-%d" % (r, t, i) for t in range(64) for i in range(40)]
        assert db.multi_get(keys) == [b"v%d" % t for t in range(64) for i in range(40)]
        st = db.stats()
        assert st["group_commits"] < n / 2  # group commit: fewer fdatasyncs than puts
        assert (st["relay_primed"] > 0) == (relay == "1"), st


def test_async_api(tmp_path: Path) -> None:
    async def go() -> list[bytes | None]:
        async with kv.open_async(tmp_path / "db") as db:
            await asyncio.gather(*(db.put(b"k%d" % i, b"v%d" % i) for i in range(200)))
            await db.batch([(b"a", b"1"), (b"k0", None)])
            return [await db.get(b"k5"), await db.get(b"k0"), await db.get(b"a")]

    assert asyncio.run(go()) == [b"v5", None, b"1"]


def test_async_iteration_and_checks(tmp_path: Path) -> None:
    """The async store has what the sync one has for reading: `in`, keys/values/items
    (snapshots, copied off the loop), stats, check."""

    async def go() -> None:
        async with kv.open_async(tmp_path / "db") as db:
            await db.batch([(b"a", b"1"), (b"b", b"2")])
            assert b"a" in db and b"zz" not in db and "text" not in db
            assert sorted(await db.keys()) == [b"a", b"b"]
            assert sorted(await db.values()) == [b"1", b"2"]
            assert sorted(await db.items()) == [(b"a", b"1"), (b"b", b"2")]
            assert (await db.stats())["keys"] == 2
            assert await db.check() == (2, [])

    asyncio.run(go())


def test_index_memory_is_native(tmp_path: Path) -> None:
    with kv.open(tmp_path / "db", durability="none") as db:
        with db.batch() as b:
            for i in range(200_000):
                b.put(b"%016d" % i, b"v")
        per_key = db.stats()["index_bytes"] / len(db) - 16
        assert per_key <= 64, f"{per_key:.1f} bytes of index overhead per key"


def test_the_index_grows_a_few_keys_per_put(tmp_path: Path) -> None:
    """Past 16K keys the hash table doubles in steps: stats() shows it growing for a
    while, reads and writes go on meanwhile, every key stays readable; closed and
    reopened over INDEX, keys added past 65,536 join the mapped table the same way."""
    p = tmp_path / "db"
    seen: set[int] = set()
    with kv.open(p, durability="none") as db:
        for i in range(80_000):
            db.put(b"%016d" % i, b"%d" % i)
            if i % 64 == 0:
                seen.add(db.stats()["index_growing"])
                assert db.get(b"%016d" % (i // 2)) == b"%d" % (i // 2)
        assert seen == {0, 1}, "grew in steps, and finished"
        assert all(db.get(b"%016d" % i) == b"%d" % i for i in range(80_000))
    seen.clear()
    with kv.open(p, durability="none") as db:
        assert db.stats()["index_mapped"] == 1
        for i in range(80_000, 150_000):
            db.put(b"%016d" % i, b"%d" % i)
            if i % 64 == 0:
                seen.add(db.stats()["index_growing"])
        assert seen == {0, 1}
        assert len(db) == 150_000 and len(db.keys()) == 150_000
        assert all(db.get(b"%016d" % i) == b"%d" % i for i in range(0, 150_000, 7))


def test_torn_tail_warning(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p) as db:
        db.put(b"k", b"v")
    seg = sorted(p.glob("*.seg"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x01\x02\x03 half a record")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with kv.open(p) as db:
            assert db.get(b"k") == b"v"
    assert any("torn tail of 17 bytes" in str(x.message) for x in w)


def _rolled_store(p: Path, durability: str) -> Path:
    """2,000 puts (`k0000`… of 100 bytes) over 64 KiB segments, closed, INDEX removed
    (the next open scans every segment); returns the first segment's path."""
    with kv.open(p, durability=durability, segment_size=64 << 10) as db:
        for i in range(2000):
            db.put(b"k%04d" % i, b"v" * 100)
    (p / "INDEX").unlink()
    return p / "00000001.seg"


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_zero_tail_of_an_older_segment_is_not_corruption(tmp_path: Path, durability: str) -> None:
    """A segment's zero tail — the appender's pre-fill ("sync") or fallocate ("none"),
    cut off at the roll by an ftruncate a crash of the machine may undo — is cut off
    silently at open, in older segments too; anything non-zero after the last record of
    an older segment is corruption when a later record says it was synced ("sync"),
    else a tear that cuts the log there ("none", without INDEX)."""
    p = tmp_path / "db"
    first = _rolled_store(p, durability)
    size = first.stat().st_size
    with open(first, "ab") as f:
        f.write(bytes(200_000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torn-tail warning either
        with kv.open(p) as db:
            assert len(db) == 2000 and db.get(b"k0000") == b"v" * 100
            assert db.recovery["torn_bytes"] == 0
    assert first.stat().st_size == size
    (p / "INDEX").unlink()
    with open(first, "ab") as f:
        f.write(bytes(1000) + b"junk" + bytes(100))
    if durability == "sync":
        # the records after it say segment 1 was synced whole: damage
        with pytest.raises(OSError, match=r"00000001\.seg: corrupt record at offset"):
            kv.open(p)
        return
    # "none", and no INDEX to say the store was closed: nothing says segment 1 was
    # synced, so this is what a crash of the machine leaves of a segment it tore — the
    # log is cut there, the later segments emptied (a point in time; kv-format.md)
    with pytest.warns(RuntimeWarning, match="a crash of the machine tore .*00000001.seg"):
        db = kv.open(p)
    with db:
        assert db.recovery["unsynced_cut"][1] >= 2
        assert 0 < len(db) < 2000 and db.get(b"k0000") == b"v" * 100
        assert db.check()[1] == []


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_an_older_segment_that_lost_its_tail_whole(tmp_path: Path, durability: str) -> None:
    """A crash of the machine may lose the last pages of a segment the log rolled past
    (zeros) or its size (a shorter file) — no bad record shows it, but the seal record
    that starts the next segment says how long it was. Never synced ("none", no INDEX):
    the log is cut there with a warning, a point in time. Synced at the roll ("sync"):
    damage, an error naming both lengths; repair=True goes on without it."""
    p = tmp_path / "db"
    first = _rolled_store(p, durability)
    size = first.stat().st_size
    rec = 32 + 5 + 100  # a put's record: header, key, value
    os.truncate(first, size - 3 * rec)  # its last three puts
    if durability == "sync":
        lost = rf"00000001\.seg: .*sealed at {size} bytes: {3 * rec} bytes lost"
        with pytest.raises(OSError, match=lost):
            kv.open(p)
        with pytest.warns(RuntimeWarning, match=f"{3 * rec} bytes lost"):
            db = kv.open(p, repair=True)
        with db:
            assert len(db) == 2000 - 3
        return
    with pytest.warns(RuntimeWarning, match="a crash of the machine tore .*00000001.seg"):
        db = kv.open(p)
    with db:
        n = len(db)
        assert db.recovery["unsynced_cut"][1] >= 2
        # the puts before the lost ones, and none after them
        assert all(db.get(b"k%04d" % i) is not None for i in range(n))
        assert db.get(b"k%04d" % n) is None and db.get(b"k1999") is None
        assert db.check()[1] == []


def test_killed_writer_leaves_no_torn_tail_after_its_allocated_space(tmp_path: Path) -> None:
    """A "none" store's active segment is allocated 4 MiB ahead of its records; after the
    writer is SIGKILLed, reopening finds no torn bytes (no warning) in that zero space,
    writes continue right after the last record, and closing cuts what is left of it."""
    import signal
    import subprocess
    import sys

    p = tmp_path / "db"
    code = (
        "import sys\nfrom uringkit import kv\n"
        "db = kv.open(sys.argv[1], durability='none')\n"
        "for i in range(500):\n    db.put(b'k%d' % i, b'v' * 50)\n"
        "print('ok', flush=True)\nimport time; time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(p)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ok"
    seg = sorted(p.glob("*.seg"))[-1]
    alive = seg.stat().st_size  # 4 MiB where the writes go through the mapping
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with kv.open(p, durability="none") as db:
            assert db.recovery["torn_bytes"] == 0 and len(db) == 500
            assert seg.stat().st_size <= alive
            db.put(b"after", b"kill")
    assert seg.stat().st_size < 500 * 100  # the allocated tail is gone
    with kv.open(p) as db:
        assert db.get(b"after") == b"kill" and db.get(b"k499") == b"v" * 50


# A writer of a store opened from INDEX (a live overlay): 2,000 puts, an overwrite, a
# delete and a batch, then it says whether its overlay is the shared file, and waits.
_OVERLAY_WRITER = (
    "import sys\nfrom uringkit import kv\n"
    "db = kv.open(sys.argv[1], durability=sys.argv[2])\n"
    "for i in range(2000):\n    db.put(b'new%d' % i, b'n' * 30)\n"
    "db.put(b'old7', b'rewritten')\n"
    "db.delete(b'old8')\n"
    "with db.batch() as b:\n    b.put(b'b1', b'x'); b.delete(b'old9')\n"
    "print(db.stats()['live_overlay'], flush=True)\nimport time; time.sleep(60)\n"
)


def _killed_after_a_line(code: str, *args: str, env: dict[str, str] | None = None) -> bytes:
    """Run `python -c code *args` until it prints a line, then SIGKILL it (a writer
    killed between writes); returns the line, stripped."""
    import signal

    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        return proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


@pytest.mark.parametrize("boot", ["same", "rebooted"])
def test_a_live_overlay_is_trusted_within_its_boot_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str
) -> None:
    """The live overlay lives in the page cache: after a reboot it is not trusted and
    the log since INDEX is replayed instead. `URINGKIT_KV_BOOT_ID` (the power-cut tests'
    stand-in for the kernel's boot id) decides what a boot is: a killed writer's
    overlay is taken back under the same value, replayed past under another — the
    same store either way."""

    p = tmp_path / "db"
    monkeypatch.setenv("URINGKIT_KV_BOOT_ID", "boot-a")
    with kv.open(p, durability="none") as db:
        db.write([(b"old%d" % i, b"o" * 20) for i in range(3000)])
    assert _killed_after_a_line(_OVERLAY_WRITER, str(p), "none") == b"1"
    if boot == "rebooted":
        monkeypatch.setenv("URINGKIT_KV_BOOT_ID", "boot-b")
    with kv.open(p, durability="none") as db:
        assert db.recovery["from_snapshot"]
        assert db.recovery["from_overlay"] == (boot == "same")
        # (the overlay's keys, or the 2,000 puts, overwrite, delete and batch replayed)
        assert (db.recovery["records"] == 0) == (boot == "same")
        assert len(db) == 3000 + 2000 + 1 - 2
        assert db.get(b"new1999") == b"n" * 30 and db.get(b"old8") is None


@pytest.mark.parametrize("overlay", ["1", "0"])
def test_killed_writer_leaves_its_live_overlay(tmp_path: Path, overlay: str) -> None:
    """A writer of a store opened from INDEX keeps what it changed in the shared OVERLAY
    file; SIGKILLed between writes, its successor takes that back and replays nothing,
    with every put, overwrite, delete and batch there (URINGKIT_KV_OVERLAY=0: the
    overlay stays on the heap and the log since INDEX is replayed, same result)."""

    p = tmp_path / "db"
    with kv.open(p, durability="none") as db:
        db.write([(b"old%d" % i, b"o" * 20) for i in range(3000)])
    env = {**os.environ, "URINGKIT_KV_OVERLAY": overlay}
    for durability in ("none", "sync"):
        got = _killed_after_a_line(_OVERLAY_WRITER, str(p), durability, env=env)
        assert got == overlay.encode()
        assert (p / "OVERLAY").exists() == (overlay == "1")
        with kv.open(p, durability="none") as db:
            assert db.recovery["from_snapshot"]
            assert db.recovery["from_overlay"] == (overlay == "1")
            if overlay == "1":
                assert db.recovery["records"] == 0
            assert len(db) == 3000 + 2000 + 1 - 2
            assert db.get(b"new1999") == b"n" * 30 and db.get(b"old7") == b"rewritten"
            assert db.get(b"old8") is None and db.get(b"old9") is None
            assert db.get(b"b1") == b"x" and db.get(b"old10") == b"o" * 20
            assert sorted(db.keys()) == sorted(set(db.keys()))
        # closed cleanly: the overlay is kept for the next open (INDEX is not rewritten
        # for what fits in it)
        assert (p / "OVERLAY").exists() == (overlay == "1")


def test_corruption_elsewhere_names_file_and_offset(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p, segment_size=64 << 10) as db:
        for i in range(2000):
            db.put(b"k%d" % i, b"x" * 64)
    first = p / "00000001.seg"
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF
    first.write_bytes(bytes(data))
    # Opened from the index snapshot, old segments are not rescanned: the damaged record
    # is refused when read (every read checks its record's CRC) and check() names it.
    with kv.open(p) as db:
        assert db.recovery["from_snapshot"]
        failed = []
        for i in range(20):
            try:
                db.get(b"k%d" % i)
            except OSError as e:
                failed.append(str(e))
        assert len(failed) == 1 and "00000001.seg" in failed[0] and "CRC" in failed[0]
        n, problems = db.check()
        assert len(problems) == 1 and "segment 1" in problems[0]
    # Without the snapshot, the full scan at open finds it.
    (p / "INDEX").unlink()
    with pytest.raises(OSError, match=r"00000001\.seg: corrupt record at offset \d+"):
        kv.open(p)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with kv.open(p, repair=True) as db:
            assert len(db) >= 1990
    assert any("skipped" in str(x.message) for x in w)


def test_disk_full_leaves_store_readable(small_fs: Path) -> None:
    small = small_fs
    p = small / "db"
    with kv.open(p) as db:
        db.put(b"keep", b"safe")
        with pytest.raises(OSError) as ei:
            for i in range(100):
                db.put(b"k%d" % i, b"x" * 50_000)
        assert "No space left" in str(ei.value) and "still readable" in str(ei.value)
        assert ei.value.errno == errno.ENOSPC and "os error" not in str(ei.value)
        assert db.get(b"keep") == b"safe"
        n, problems = db.check()
        assert problems == []
        stored = n
    with kv.open(p) as db:  # reopens cleanly, nothing torn
        assert db.get(b"keep") == b"safe" and len(db) == stored
        assert db.recovery["torn_bytes"] == 0


def _fill(fs: Path) -> Path:
    """Fill the filesystem at `fs` to its last byte with a file; its path."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(64 << 10))
    except OSError:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, bytes(512))
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("small_fs", ["8m"], indirect=True)
def test_compaction_on_a_full_disk_leaves_nothing_behind(small_fs: Path) -> None:
    """A compaction that runs out of space raises, and what it had copied is gone — the
    files and their descriptors (retried at every sealed segment by the background
    compaction, each failure used to leave one more set on the full disk); the store
    reads and checks as before, and compacts once there is room."""
    p = small_fs / "db"

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with kv.open(p, durability="none", segment_size=256 << 10, auto_compact=None) as db:
        for r in range(4):
            db.write([(b"k%04d" % i, b"%d" % r * 300) for i in range(1500)])
        filler = _fill(small_fs)
        for attempt in range(3):
            before, files = fds(), sorted(os.listdir(p))
            with pytest.raises(OSError, match="No space left"):
                db.compact()
            after = sorted(os.listdir(p))
            assert not [f for f in after if f.endswith(".tmp")], after
            # (each attempt seals the active segment first: one new segment, no more)
            assert len(set(after) - set(files)) <= 1, (files, after)
            assert fds() <= before + 1, attempt
        assert [db.get(b"k%04d" % i) for i in range(1500)] == [b"3" * 300] * 1500
        assert db.check()[1] == []
        filler.unlink()
        segments, freed = db.compact()
        assert segments > 1 and freed > 0
        assert [db.get(b"k%04d" % i) for i in range(1500)] == [b"3" * 300] * 1500
    with kv.open(p) as db:
        assert len(db) == 1500 and db.check()[1] == []


@pytest.mark.parametrize("small_fs", ["8m"], indirect=True)
def test_close_on_a_full_disk_leaves_no_partial_index(small_fs: Path) -> None:
    """INDEX is written at close as a convenience for the next open: on a full disk it
    is given up — without leaving a partial INDEX.tmp to hold the space — and the next
    open replays the segments instead."""
    p = small_fs / "db"
    db = kv.open(p, durability="none", segment_size=256 << 10, auto_compact=None)
    db.write([(b"k%05d" % i, b"v" * 200) for i in range(8000)])
    _fill(small_fs)
    db.close()
    assert sorted(os.listdir(p)) == ["00000001.seg", "LOCK"]
    with kv.open(p) as db:
        assert not db.recovery["from_snapshot"]
        assert len(db) == 8000 and db.get(b"k07999") == b"v" * 200


@pytest.mark.parametrize("big", [30_000, 2_000], ids=["pwrite", "mapped"])
def test_disk_full_takes_the_failed_write_back(small_fs: Path, big: int) -> None:
    """durability="none": a write the disk cannot take is taken out of the index again,
    whole — its rewrites show the values before it, its delete is undone, its new key is
    absent — while every write acknowledged before it stays; the store stays consistent
    and reopens with exactly what was acknowledged. Large writes go with pwrite (ENOSPC
    from the write, a partial one cut off), small ones through the segment's mapping
    (ENOSPC from fallocate, before anything is stored: a store into a page the file does
    not cover would be a SIGBUS)."""
    p = small_fs / "db"
    keys = [b"keep%d" % i for i in range(50)] + [b"fresh%d" % i for i in range(1000)]
    expect: dict[bytes, bytes] = {}
    with kv.open(p, durability="none") as db:
        first = [(b"keep%d" % i, b"safe%d" % i) for i in range(50)]
        db.write(first)
        expect.update(first)
        with pytest.raises(OSError) as ei:
            for i in range(1000):
                ops: list[tuple[bytes, bytes | None]] = [
                    (b"keep%d" % j, b"new%d" % i) for j in range(10)
                ]
                ops += [(b"keep%d" % (10 + i % 40), None), (b"fresh%d" % i, b"y" * big)]
                db.write(ops)
                _apply(expect, ops)
        assert "No space left" in str(ei.value) and "still readable" in str(ei.value)
        assert ei.value.errno == errno.ENOSPC and "os error" not in str(ei.value)
        assert i > 2  # some writes went in before the disk filled
        assert [db.get(k) for k in keys] == [expect.get(k) for k in keys]
        assert len(db) == len(expect)
        assert db.check()[1] == []
    with kv.open(p) as db:
        assert [db.get(k) for k in keys] == [expect.get(k) for k in keys]
        assert len(db) == len(expect) and db.recovery["torn_bytes"] == 0


def _fill_leaving(fs: Path, room: int) -> Path:
    """Fill the filesystem at `fs` but `room` bytes with a file; its path."""
    st = os.statvfs(fs)
    filler = fs / "filler"
    with open(filler, "wb") as f:
        left = st.f_bavail * st.f_frsize - room
        while left > 0:
            left -= f.write(bytes(min(left, 1 << 20)))
    return filler


@pytest.mark.parametrize("small_fs", ["2m"], indirect=True)
def test_a_write_failing_after_a_segment_roll_leaves_no_hole(small_fs: Path) -> None:
    """A durable put that rolls the segment over and then does not fit in the new one
    fails alone: the next put goes to the new segment's start. (Before session 30 it
    went on at the old segment's length, in front of a hole the next open took for a
    torn tail, dropping acknowledged puts with it — found by `uringkit kv stress`.)"""
    p = small_fs / "db"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn tail at the reopen fails the test
        with kv.open(p, durability="sync", segment_size=64 << 10, auto_compact=None) as db:
            db.put(b"first", b"a" * 40_000)
            filler = _fill_leaving(small_fs, 16 << 10)
            with pytest.raises(OSError) as ei:
                db.put(b"big", b"b" * 30_000)  # past the segment: a new one, too small
            assert ei.value.errno == errno.ENOSPC
            db.put(b"small", b"c" * 100)
            assert db.get(b"small") == b"c" * 100 and db.get(b"big") is None
            segs = sorted(f for f in os.listdir(p) if f.endswith(".seg"))
            assert len(segs) == 2, segs
            assert os.path.getsize(p / segs[1]) < 4096, "the put did not start the segment"
        filler.unlink()
        with kv.open(p) as db:
            assert db.get(b"first") == b"a" * 40_000 and db.get(b"small") == b"c" * 100
            assert db.get(b"big") is None and db.recovery["torn_bytes"] == 0


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_direct_write_the_disk_takes_part_of_is_enospc(small_fs: Path, api: str) -> None:
    """An O_DIRECT write that fills the disk part of the way comes back short: the rest
    is written again, and fails with ENOSPC — an error that says what happened (it
    was "short O_DIRECT write", errno None, before session 30: found by `uringkit kv
    stress --full-disk`); the store stays as it was, and takes writes again once
    there is room. Through the blocking API (the store's own ring) and the async API
    (the loop's ring)."""
    p = small_fs / "db"
    try:
        db = kv.open(p, durability="sync", direct=True, segment_size=1 << 20)
    except OSError as e:
        pytest.skip(f"no O_DIRECT on this tmpfs: {e}")
    db.put(b"first", b"a" * 1000)
    db.close()
    filler = _fill_leaving(small_fs, 8 << 10)

    async def attempt() -> tuple[int | None, bytes | None]:
        async with kv.open_async(p, direct=True, segment_size=1 << 20) as adb:
            with pytest.raises(OSError) as ei:
                await adb.put(b"big", b"b" * 60_000)
            return ei.value.errno, await adb.get(b"first")

    if api == "async":
        code, first = asyncio.run(attempt())
    else:
        with kv.open(p, direct=True, segment_size=1 << 20) as db, pytest.raises(OSError) as ei:
            db.put(b"big", b"b" * 60_000)
        code, first = ei.value.errno, b"a" * 1000
    assert code == errno.ENOSPC
    assert first == b"a" * 1000
    filler.unlink()
    with kv.open(p, direct=True, segment_size=1 << 20) as db:
        assert db.get(b"first") == b"a" * 1000 and db.get(b"big") is None
        db.put(b"big", b"b" * 60_000)
        assert db.get(b"big") == b"b" * 60_000


HOLE_OPEN = """
import sys, warnings
from uringkit import kv
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    db = kv.open(sys.argv[1], durability="none", index_snapshot=False)
    print(len(db), db.get(b"k7"), [str(x.message) for x in w])
"""


def test_a_segment_with_a_hole_opens_on_a_full_tmpfs(small_fs: Path) -> None:
    """Reading a hole of a tmpfs file through a mapping allocates a page — SIGBUS when
    the tmpfs is full. A segment with bytes after a hole (only a bug or another program
    writes one) is read with pread at open instead, and judged as before: here a torn
    tail (the newest segment), cut with a warning; the other segments' keys are all
    there. (Before session 30 the open died of SIGBUS; found by `uringkit kv stress`.)"""
    p = small_fs / "db"
    with kv.open(p, durability="none", index_snapshot=False) as db:
        db.write([(b"k%d" % i, b"v%d" % i) for i in range(100)])
    last = max(int(f[:8]) for f in os.listdir(p) if f.endswith(".seg"))
    with open(p / f"{last + 1:08d}.seg", "wb") as f:
        f.truncate(16 << 10)
        f.seek(16 << 10)
        f.write(b"\x01" * 100)
    _fill(small_fs)
    out = subprocess.run(
        [sys.executable, "-c", HOLE_OPEN, str(p)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # -7: SIGBUS
    assert out.stdout.startswith("100 b'v7'") and "torn tail of 16484 bytes" in out.stdout


FILL_AND_WAIT = """
import sys
import threading
from uringkit import kv
db = kv.open(sys.argv[1], durability="none")
db.put(b"first", b"1")
print(db.stats()["live_overlay"], flush=True)
n = 0
try:
    for i in range(100_000):
        db.write([(b"keep%d" % (i % 50), b"new%d" % i), (b"fresh%d" % i, b"y" * 2000)])
        n = i + 1
except OSError as e:
    assert "No space left" in str(e), e
print(n, db.stats()["live_overlay"], flush=True)
import time; time.sleep(60)
"""


@pytest.mark.parametrize("small_fs", ["1m", "3m"], indirect=True)
def test_disk_full_with_a_live_overlay(small_fs: Path) -> None:
    """A store reopened from INDEX keeps its overlay in OVERLAY (allocated up front, ~0.1
    MiB for this small store): on a filesystem filled to its last 32 KiB first, that file
    cannot be made and the overlay stays on the heap; on 3 MiB it is made, and the
    records then fill the disk — the write that does not fit is taken out of the live
    overlay too, and the writer, killed after it, reopens (from the overlay) with
    exactly what was acknowledged."""
    import signal

    p = small_fs / "db"
    with kv.open(p, durability="none") as db:
        db.write([(b"keep%d" % i, b"safe") for i in range(50)])
        db.write([(b"other%d" % i, b"") for i in range(2000)])  # (room in OVERLAY)
    crowded = _fs_size(small_fs) < 2 << 20
    if crowded:
        st = os.statvfs(small_fs)
        (small_fs / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (32 << 10)))
    proc = subprocess.Popen(
        [sys.executable, "-c", FILL_AND_WAIT, str(p)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    live = int(proc.stdout.readline())
    n, still_live = map(int, proc.stdout.readline().split())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert live == still_live == (not crowded)
    assert n > 0  # some writes went in before the disk filled
    with kv.open(p, durability="none") as db:
        assert db.recovery["from_overlay"] == bool(live)
        assert db.get(b"first") == b"1" and len(db) == 50 + 2000 + 1 + n
        assert db.get(b"fresh%d" % (n - 1)) == b"y" * 2000 and db.get(b"fresh%d" % n) is None
        for j in range(50):
            last = max((i for i in range(n) if i % 50 == j), default=None)
            assert db.get(b"keep%d" % j) == (b"safe" if last is None else b"new%d" % last)
        assert db.check()[1] == []


def _fs_size(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


@pytest.mark.parametrize("mapped", ["1", "0"], ids=["mapped", "pwrite"])
@pytest.mark.parametrize("mode", ["none", "batch"])
def test_unsynced_writes_survive_a_killed_process(tmp_path: Path, mode: str, mapped: str) -> None:
    """durability="none"/"batch": every write is handed to the kernel before it returns,
    so a process killed right after it (SIGKILL, no time for anything) loses none of it —
    small puts (through the segment's mapping, or with pwrite where mappings are not
    used: URINGKIT_KV_MAPPED=0), large values, an atomic batch, a delete. Only a crash of
    the machine can lose what was not fdatasynced yet (LevelDB's and RocksDB's promise
    for unsynced writes)."""
    import signal
    import subprocess
    import sys

    p = tmp_path / "db"
    code = (
        "import sys\nfrom uringkit import kv\n"
        f"db = kv.open(sys.argv[1], durability={mode!r}, batch_ms=60000)\n"
        "assert db.stats()['mapped_writes'] == int(sys.argv[2])\n"
        "for i in range(3000):\n    db.put(b'small%d' % i, b'v%d' % i)\n"
        "db.put(b'big', b'B' * 200_000)\n"
        "db.write([(b'b%d' % i, b'batch') for i in range(100)])\n"
        "db.delete(b'small7')\n"
        "print('ok', flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    env = dict(os.environ, URINGKIT_KV_MAPPED=mapped)
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(p), mapped], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ok"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with kv.open(p) as db:
        assert db.recovery["torn_bytes"] == 0
        smalls = db.multi_get([b"small%d" % i for i in range(3000)])
        assert smalls == [None if i == 7 else b"v%d" % i for i in range(3000)]
        assert db.get(b"big") == b"B" * 200_000
        assert db.multi_get([b"b%d" % i for i in range(100)]) == [b"batch"] * 100
        assert len(db) == 3000 - 1 + 1 + 100


@pytest.mark.parametrize("batch_ms", [30, None])
def test_batch_durability_syncs_on_time_without_more_writes(
    tmp_path: Path, batch_ms: int | None
) -> None:
    """durability="batch": a lone write is fdatasynced within batch_ms even if no later
    write comes along (a background flusher): a crash of the machine then loses nothing.
    With "none" it stays unsynced until the kernel's write-back or close()."""
    import time

    mode = "batch" if batch_ms else "none"
    with kv.open(tmp_path / "db", durability=mode, batch_ms=batch_ms or 10) as db:
        db.put(b"lone", b"write")
        assert db.stats()["unsynced_bytes"] > 0
        deadline = time.monotonic() + 5
        while db.stats()["unsynced_bytes"] and time.monotonic() < deadline and batch_ms:
            time.sleep(0.005)
        if batch_ms:
            assert db.stats()["unsynced_bytes"] == 0
        else:
            time.sleep(0.2)
            assert db.stats()["unsynced_bytes"] > 0
        db.sync()
        assert db.stats()["unsynced_bytes"] == 0


def _direct_fds() -> list[str]:
    """Paths of this process's descriptors opened with O_DIRECT."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = int(f.read().split("flags:")[1].split()[0], 8)
            if flags & os.O_DIRECT:
                out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except (OSError, IndexError):
            continue
    return out


@pytest.mark.parametrize(
    ("durability", "sqpoll"), [("sync", False), ("none", False), ("sync", True)]
)
def test_direct_io_appends(tmp_path: Path, durability: str, sqpoll: bool) -> None:
    """O_DIRECT appends across segment rolls, compaction and reopening; with sqpoll=True
    (seed 003's configuration) through a ring with a real kernel polling thread."""
    p = tmp_path / "db"
    pollers = len(_sq_threads())
    try:
        db = kv.open(p, durability=durability, direct=True, sqpoll=sqpoll, segment_size=64 << 10)
    except OSError as e:
        pytest.skip(f"no O_DIRECT{' or no SQPOLL' if sqpoll else ''} here: {e}")
    model: dict[bytes, bytes | None] = {}
    with db:
        assert db.stats()["direct"] == 1
        # through io_uring (WRITE_FIXED to the registered O_DIRECT descriptor)
        assert db.stats()["io_uring"] == 1
        assert any(x.endswith(".seg") for x in _direct_fds())  # really O_DIRECT
        # the store's own poller (a new SQPOLL thread names itself iou-sqp-PID when it
        # first runs: on a loaded machine that can be a moment after the open)
        for _ in range(500):
            if len(_sq_threads()) == pollers + sqpoll:
                break
            time.sleep(0.01)
        assert len(_sq_threads()) == pollers + sqpoll, _sq_threads()
        for i in range(1500):  # odd sizes: records straddle blocks; several segments
            k, v = b"k%d" % (i % 700), bytes([i % 251]) * (i % 333 + 1)
            db.put(k, v)
            model[k] = v
            if i % 13 == 0:  # reads of the newest records (pread, no mapping)
                assert db.get(k) == v
            if i % 97 == 0:
                db.delete(b"k%d" % (i % 50))
                model[b"k%d" % (i % 50)] = None
            if i % 211 == 0:
                with db.batch() as b:
                    b.put(b"b%d" % i, b"batch")
                model[b"b%d" % i] = b"batch"
        keys = list(model)
        assert db.multi_get(keys) == [model[k] for k in keys]
        assert db.stats()["segments"] > 2
        db.compact()
        assert db.multi_get(keys) == [model[k] for k in keys]
        assert db.check()[1] == []
    for direct in (True, False):
        with kv.open(p, direct=direct) as db:
            assert db.multi_get(keys) == [model[k] for k in keys]
            db.put(b"after", b"reopen")
            assert db.get(b"after") == b"reopen"
    assert _direct_fds() == []  # closed with the store
    for _ in range(100):  # and the poller (the kernel tears a ring down asynchronously)
        if len(_sq_threads()) == pollers:
            break
        time.sleep(0.05)
    assert len(_sq_threads()) == pollers, _sq_threads()


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_direct_batch_larger_than_a_segment(tmp_path: Path, durability: str) -> None:
    """An O_DIRECT store's fresh records are read from its in-memory mirror of the active
    segment, which covers `segment_size` bytes: a batch larger than that goes into a
    segment of its own and runs past the mirror. Its records inside it must still be
    served from there (before session 30 none of that write was copied: they read as
    zeros, a CRC error — found by `uringkit kv stress`), those past it read from the
    file; and all of them are there after a reopen."""
    p = tmp_path / "db"
    try:
        db = kv.open(p, durability=durability, direct=True, segment_size=64 << 10)
    except OSError as e:
        pytest.skip(f"no O_DIRECT here: {e}")
    rng = random.Random(11)
    ops = [(b"k%d" % i, rng.randbytes(n)) for i, n in enumerate((100, 5000, 40_000, 30_000, 50))]
    with db:
        db.put(b"before", b"x" * 60_000)  # the batch then starts a segment of its own
        db.write(ops)
        # (read before the next write: that one seals the segment, whose reads then go
        # through the file)
        for k, v in ops:
            assert db.get(k) == v, k
        assert db.multi_get([k for k, _ in ops]) == [v for _, v in ops]
        db.put(b"after", b"y" * 10)
        assert db.multi_get([k for k, _ in ops]) == [v for _, v in ops]
        big = rng.randbytes(100_000)  # one record larger than a segment
        db.put(b"big", big)
        assert db.get(b"big") == big
        assert db.check()[1] == []
    with kv.open(p) as db:
        assert [db.get(k) for k, _ in ops] == [v for _, v in ops]
        assert db.get(b"big") == big and db.get(b"after") == b"y" * 10


@pytest.mark.parametrize("durability", ["none", "batch"])
def test_many_threads_buffered_puts(tmp_path: Path, durability: str) -> None:
    """Buffered puts that cannot block keep the GIL (no hand-off per put); those that must
    flush, sync or roll a segment take the blocking path. Either way nothing is lost."""
    import threading

    p = tmp_path / "db"
    with kv.open(p, durability=durability, segment_size=256 << 10, batch_ms=5) as db:

        def writer(t: int) -> None:
            for i in range(500):
                db.put(b"t%d-%d" % (t, i), b"v" * (i % 300))
                if i % 100 == 0:
                    with db.batch() as b:
                        b.put(b"b%d-%d" % (t, i), b"x")
                        b.delete(b"t%d-%d" % (t, i))

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(db) == 32 * 500
        assert db.stats()["segments"] > 3  # rolled while threads were putting
    with kv.open(p) as db:
        assert len(db) == 32 * 500
        assert db.get(b"t31-499") == b"v" * 199 and db.get(b"t5-100") is None
        assert db.get(b"b5-100") == b"x"


def test_index_snapshot_can_be_turned_off(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p) as db:
        db.put(b"a", b"1")
    assert (p / "INDEX").exists()
    with kv.open(p, index_snapshot=False) as db:
        assert not db.recovery["from_snapshot"]  # rebuilt from the segments
        db.put(b"b", b"2")
    # a stale one is not left behind: what replaces it lists the segments alone (so that
    # one cut short or removed is still found at open), and is not loaded as a snapshot
    assert (p / "INDEX").stat().st_size < 4096
    with kv.open(p) as db:
        assert not db.recovery["from_snapshot"] and db.get(b"b") == b"2"
    with kv.open(p) as db:
        assert db.recovery["from_snapshot"] and len(db) == 2


def _storage_read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def test_direct_store_serves_fresh_records_from_memory(tmp_path: Path) -> None:
    """O_DIRECT appends bypass the page cache; the active segment's in-memory mirror
    serves reads of fresh records, so reading what was just written costs no disk I/O."""
    p = tmp_path / "db"
    try:
        db = kv.open(p, direct=True, durability="sync")
    except OSError as e:
        pytest.skip(f"no O_DIRECT here: {e}")
    with db:
        for i in range(300):
            db.put(b"k%d" % i, bytes([i % 256]) * 1000)
        before = _storage_read_bytes()
        for i in range(300):
            assert db.get(b"k%d" % i) == bytes([i % 256]) * 1000
        assert db.multi_get([b"k1", b"k299"]) == [b"\x01" * 1000, bytes([299 % 256]) * 1000]
        assert _storage_read_bytes() - before < 64 * 1024  # 300 KB read, none of it disk


def test_iterator_in_key_order(tmp_path: Path) -> None:
    """db.iterator(): plyvel's ordered scan — key order (bytewise), prefix, [start, stop),
    reverse, keys only; values are read in chunks larger than one multi_get."""
    with kv.open(tmp_path / "db") as db:
        rng = random.Random(3)
        keys = [b"user:%05d" % i for i in range(2500)] + [b"item:1", b"item:2", b"a", b"\xff"]
        rng.shuffle(keys)
        db.write([(k, k[::-1]) for k in keys])
        assert list(db.iterator(include_value=False)) == sorted(keys)
        users = list(db.iterator(prefix=b"user:"))
        assert [k for k, _ in users] == sorted(k for k in keys if k.startswith(b"user:"))
        assert all(v == k[::-1] for k, v in users)
        assert list(db.iterator(start=b"item:", stop=b"user:", include_value=False)) == [
            b"item:1",
            b"item:2",
        ]
        assert list(db.iterator(start=b"user:02498", include_value=False)) == [
            b"user:02498",
            b"user:02499",
            b"\xff",
        ]
        rev = list(db.iterator(prefix=b"item:", reverse=True))
        assert rev == [(b"item:2", b"2:meti"), (b"item:1", b"1:meti")]
        assert list(db.iterator(prefix=b"nope")) == []


def _apply(model: dict[bytes, bytes], ops: list[tuple[bytes, bytes | None]]) -> None:
    """What db.write(ops) does, done to a model."""
    for k, v in ops:
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v


@pytest.mark.parametrize("durability", ["none", "sync"])
def test_range_scans_keep_up_with_every_change(tmp_path: Path, durability: str) -> None:
    """The first bounded scan sorts the keys and the store keeps them sorted (docs/kv.md):
    random puts of new and old keys, deletes, batches, delete_range, compactions and a
    reopen, with range, prefix and unbounded scans between them and through snapshots
    taken on the way, each against a model."""
    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    snaps: list[tuple[kv.Snapshot, dict[bytes, bytes]]] = []

    def key() -> bytes:
        return b"k%04d" % rng.randrange(3000)

    def scans(reader: Any, m: dict[bytes, bytes]) -> None:
        lo, hi = sorted([key(), key()])
        want = sorted((k, v) for k, v in m.items() if lo <= k < hi)
        assert list(reader.iterator(start=lo, stop=hi)) == want
        pre = key()[:3]
        assert list(reader.iterator(prefix=pre, include_value=False)) == sorted(
            k for k in m if k.startswith(pre)
        )
        assert list(reader.iterator(start=lo, reverse=True, include_value=False)) == sorted(
            (k for k in m if k >= lo), reverse=True
        )

    db = kv.open(tmp_path / "db", durability=durability, segment_size=256 << 10)
    assert db.stats()["order_bytes"] == 0
    try:
        for step in range(1500):
            op = rng.random()
            if op < 0.5:
                k, v = key(), b"v%d" % step
                db.put(k, v)
                model[k] = v
            elif op < 0.7:
                k = key()
                assert db.delete(k) == (k in model)
                model.pop(k, None)
            elif op < 0.8:
                ops = [(key(), b"b%d" % step if rng.random() < 0.7 else None) for _ in range(20)]
                db.write(ops)
                _apply(model, ops)
            elif op < 0.82:
                pre = key()[:4]
                db.delete_range(prefix=pre)
                model = {k: v for k, v in model.items() if not k.startswith(pre)}
            elif op < 0.83:
                db.compact()
            elif op < 0.835:
                db.close()
                db = kv.open(tmp_path / "db", durability=durability, segment_size=256 << 10)
                snaps = []  # (closed with the store)
            elif op < 0.85 and len(snaps) < 3:
                snaps.append((db.snapshot(), dict(model)))
            scans(db, model)
            if snaps and step % 7 == 0:
                snap, then = rng.choice(snaps)
                scans(snap, then)
        assert list(db.iterator(include_value=False)) == sorted(model)
        assert db.stats()["order_bytes"] > 0
    finally:
        db.close()


def test_range_scans_while_threads_write(tmp_path: Path) -> None:
    """Scans from two threads while two others put and delete keys between the
    permanent ones: every scan is sorted, in range, holds every permanent key in range
    with its value, and no key twice."""
    with kv.open(tmp_path / "db", durability="none") as db:
        db.write([(b"p%05d" % i, b"keep") for i in range(0, 20000, 10)])
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            rng = random.Random(t)
            while not stop.is_set():
                k = b"p%05d" % (rng.randrange(20000) // 10 * 10 + rng.randrange(1, 10))
                if rng.random() < 0.6:
                    db.put(k, b"tmp")
                else:
                    db.delete(k)

        def scanner(t: int) -> None:
            rng = random.Random(100 + t)
            try:
                for _ in range(300):
                    a = rng.randrange(19000)
                    lo, hi = b"p%05d" % a, b"p%05d" % (a + rng.randrange(1, 1000))
                    got = list(db.iterator(start=lo, stop=hi))
                    keys = [k for k, _ in got]
                    assert keys == sorted(set(keys)) and all(lo <= k < hi for k in keys)
                    kept = {k: v for k, v in got if int(k[1:]) % 10 == 0}
                    want = {b"p%05d" % i for i in range(a + (-a) % 10, 20000, 10)}
                    assert set(kept) == {k for k in want if lo <= k < hi}
                    assert all(v == b"keep" for v in kept.values())
            except BaseException as e:  # (reported by the main thread)
                errors.append(e)

        ws = [threading.Thread(target=writer, args=(t,)) for t in range(2)]
        ss = [threading.Thread(target=scanner, args=(t,)) for t in range(2)]
        for th in ws + ss:
            th.start()
        for th in ss:
            th.join()
        stop.set()
        for th in ws:
            th.join()
        assert not errors, errors[0]


def test_a_forward_iterator_reads_pages_through_a_view_of_its_own(tmp_path: Path) -> None:
    """iterator() holds a snapshot view while it is open (stats: snapshots), reading
    pages of 16 then 1,000 keys from it: keys put or deleted between pages do not show;
    the view ends when the iterator is exhausted or dropped; a reverse one takes none."""
    with kv.open(tmp_path / "db", durability="none") as db:
        db.write([(b"k%05d" % i, b"v") for i in range(0, 5000, 2)])
        it = db.iterator(start=b"k01000", include_value=False)
        assert db.stats()["snapshots"] == 1
        first = list(itertools.islice(it, 20))  # (past the first page)
        assert first == [b"k%05d" % i for i in range(1000, 1040, 2)]
        db.write([(b"k%05d" % i, b"new") for i in range(1041, 5000, 2)])  # odd: new keys
        db.delete(b"k04000")
        rest = list(it)
        assert rest == [b"k%05d" % i for i in range(1040, 5000, 2)]
        assert db.stats()["snapshots"] == 0, "ended with the iterator"
        it2 = db.iterator(prefix=b"k0")
        assert next(it2) == (b"k00000", b"v") and db.stats()["snapshots"] == 1
        del it2
        assert db.stats()["snapshots"] == 0, "ended when dropped"
        rev = db.iterator(reverse=True, include_value=False)
        assert db.stats()["snapshots"] == 0 and next(rev) == b"k04999"


@pytest.mark.parametrize("durability", ["none", "sync"])
def test_iterator_is_a_snapshot(tmp_path: Path, durability: str) -> None:
    """As LevelDB's and RocksDB's: the pairs as they were when iterator() was called,
    whatever is put, deleted or compacted before or while it is read — the records it
    reads stay readable after a compaction retired their segments."""
    with kv.open(tmp_path / "db", durability=durability, segment_size=64 << 10) as db:
        db.write([(b"k%05d" % i, b"old%d" % i * 10) for i in range(3000)])
        it = db.iterator()  # (taken here, not at the first next())
        keys_only = db.iterator(prefix=b"k00", include_value=False)
        db.delete(b"k00000")
        db.put(b"k00001", b"new")
        first = next(it)
        db.delete(b"k01500")  # in a chunk not read yet
        db.put(b"k02000", b"new")
        db.put(b"k99999", b"added")
        for i in range(3000, 6000):  # overwrite everything else: the old records go dead
            db.put(b"k%05d" % (i - 3000), b"newer")
        retired, _ = db.compact()
        assert retired > 0
        rest = dict(it)
        assert first == (b"k00000", b"old0" * 10)
        assert len(rest) == 2999 and b"k99999" not in rest
        assert all(v == b"old%d" % int(k[1:]) * 10 for k, v in rest.items())
        assert next(keys_only) == b"k00000" and len(list(keys_only)) == 999
        after = dict(db.iterator())
        assert after[b"k00001"] == b"newer" and after[b"k99999"] == b"added"
        it2 = db.iterator()
        next(it2)
    with pytest.raises(ValueError, match="closed store"):
        list(it2)  # (the first chunk was read; the next needs the store)


def test_async_iterator(tmp_path: Path) -> None:
    async def go() -> list[Any]:
        async with kv.open_async(tmp_path / "db") as db:
            await db.batch([(b"k%d" % i, b"v%d" % i) for i in range(12)])
            got = [kv_ async for kv_ in db.iterator(prefix=b"k1")]
            ks = [k async for k in db.iterator(reverse=True, include_value=False)]
            return [got, ks[:3]]

    got, ks = asyncio.run(go())
    assert got == [(b"k1", b"v1"), (b"k10", b"v10"), (b"k11", b"v11")]
    assert ks == [b"k9", b"k8", b"k7"]


def test_delete_range(tmp_path: Path) -> None:
    """delete_range(prefix=, start=, stop=): every matching key in one atomic batch (gone
    after a reopen too), the count returned; no bounds at all is refused."""
    p = tmp_path / "db"
    with kv.open(p, durability="sync") as db:
        db.write([(b"a:%03d" % i, b"x") for i in range(300)] + [(b"b:1", b"y"), (b"c", b"z")])
        assert db.delete_range(prefix=b"a:", start=b"a:100", stop=b"a:200") == 100
        assert db.delete_range(stop=b"a:050") == 50
        assert db.delete_range(prefix=b"nothing") == 0
        with pytest.raises(ValueError, match="needs prefix"):
            db.delete_range()
        left = list(db.iterator(include_value=False))
    with kv.open(p) as db:
        assert list(db.iterator(include_value=False)) == left
        assert len(left) == 150 + 2 and left[0] == b"a:050" and b"a:150" not in left

    async def go() -> int:
        async with kv.open_async(p, durability="sync") as adb:
            n = await adb.delete_range(prefix=b"a:")
            assert len(adb) == 2
            return n

    assert asyncio.run(go()) == 150


def test_large_index_snapshot_is_mapped_and_damage_is_reported(tmp_path: Path) -> None:
    """A store whose INDEX is large opens on a mapping of it (nothing read up front) and
    verifies its checksums in the background; damage surfaces as an OSError naming INDEX
    on the first answer that needs the whole index (a miss, a listing), the file is
    removed, and the next open rebuilds the index from the segments."""
    import errno

    p = tmp_path / "db"
    with kv.open(p, durability="none") as db:
        for i in range(0, 150_000, 1000):
            db.write([(b"key%d" % j, b"v%d" % j) for j in range(i, i + 1000)])
    index = p / "INDEX"
    assert index.stat().st_size > 4 << 20
    with kv.open(p) as db:
        assert db.recovery["from_snapshot"] and db.recovery["records"] == 0
        assert db.stats()["index_mapped"] == 1
        assert db.get(b"key777") == b"v777" and db.get(b"absent") is None
        assert db.stats()["index_verified"] == 1  # (the miss waited for it)
        assert b"key5" in db and len(db) == 150_000

    async def from_asyncio() -> None:
        # right after the open the verdict is not in: the loop does not wait for it
        # (gets go to the pool thread until it is), and the answers are the same
        async with kv.open_async(p) as adb:
            got = await asyncio.gather(adb.get(b"key42"), adb.get(b"absent"))
            assert got == [b"v42", None]
            assert await adb.multi_get([b"key1", b"nope"]) == [b"v1", None]

    asyncio.run(from_asyncio())
    raw = bytearray(index.read_bytes())
    raw[-10] ^= 0x40  # inside the key arena, the file's last section
    index.write_bytes(raw)
    with kv.open(p) as db:
        assert db.recovery["from_snapshot"]
        assert db.get(b"key5") == b"v5"  # a hit is checked against its record
        with pytest.raises(OSError, match=r"INDEX.*damaged.*reopen") as ei:
            db.get(b"absent")
        assert ei.value.errno == errno.EIO
        with pytest.raises(OSError, match="INDEX"):
            db.keys()
        assert not index.exists()
    with kv.open(p) as db:
        assert not db.recovery["from_snapshot"]
        assert len(db) == 150_000 and db.get(b"absent") is None
        assert db.get(b"key149999") == b"v149999"


def _threads_named(name: str) -> int:
    n = 0
    for t in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            n += (t / "comm").read_text().strip() == name
    return n


def _io_priorities(name: str) -> set[int]:
    """ioprio_get of every thread of this process called `name`."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    sys_ioprio_get = {"x86_64": 252, "aarch64": 31}[platform.machine()]
    got = set()
    for t in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            if (t / "comm").read_text().strip() == name:
                got.add(libc.syscall(sys_ioprio_get, 1, int(t.name)))
    return got


def test_index_verification_threads_are_reused(tmp_path: Path) -> None:
    """A large INDEX is verified on a background thread; one that finished waits for the
    next open's check instead of a thread being started per open (a thread start is a
    fifth of an open after a crash)."""
    p = tmp_path / "db"
    with kv.open(p, durability="none") as db:
        for i in range(0, 150_000, 1000):
            db.write([(b"key%d" % j, b"v%d" % j) for j in range(i, i + 1000)])
    before = _threads_named("uringkit-index")  # (idle ones an earlier test left)
    for _ in range(3):
        with kv.open(p, durability="none") as db:
            assert db.recovery["from_snapshot"] and db.stats()["index_mapped"] == 1
            assert db.get(b"absent") is None  # (waits for the verdict)
            assert db.stats()["index_verified"] == 1
            db.put(b"another", b"x")  # (each open checks INDEX again all the same)
    assert 1 <= _threads_named("uringkit-index") <= max(before, 1)
    # its I/O at the lowest best-effort priority: the store's own reads go first
    assert _io_priorities("uringkit-index") == {(2 << 13) | 7}
    # opened and closed at once, again and again (a reopen loop, a command line tool's
    # get): each check is dropped before it starts reading, and the next one waits for
    # the thread the previous one had — no thread started per open
    for _ in range(20):
        kv.open(p, durability="none").close()
    assert _threads_named("uringkit-index") <= max(before, 1)
    # nobody asks for the verdict: it comes all the same, in the background
    with kv.open(p, durability="none") as db:
        deadline = time.monotonic() + 20
        while db.stats()["index_verified"] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert db.stats()["index_verified"] == 1


def _evict(p: Path) -> None:
    for seg in p.glob("*.seg"):
        fd = os.open(seg, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def _wait_warmed(db: kv.DB, want: int) -> int:
    import time

    deadline = time.monotonic() + 20
    while db.stats()["warmed_bytes"] < want and time.monotonic() < deadline:
        time.sleep(0.01)
    return db.stats()["warmed_bytes"]


def _cold_store(p: Path, n: int = 6000) -> tuple[list[bytes], int]:
    """A store of `n` 500-byte values in 1 MiB segments, closed; its keys and the bytes
    of its segment files."""
    keys = [b"key%06d" % i for i in range(n)]
    with kv.open(p, durability="none", segment_size=1 << 20) as db:
        db.write([(k, k * 50) for k in keys])
    return keys, sum(s.stat().st_size for s in p.glob("*.seg"))


def test_a_cold_multi_get_warms_the_store(tmp_path: Path) -> None:
    """open(warm=True): once a multi_get has to read values from the disk, a background
    thread reads every segment into the page cache (stats()["warmed_bytes"] counts it);
    warm=False leaves the store cold until asked (DB.warm_up)."""
    p = tmp_path / "db"
    keys, total = _cold_store(p)
    assert total > 2 << 20  # several segments
    rng = random.Random(5)
    for warm in (True, False):
        with kv.open(p, durability="none", warm=warm) as db:
            _evict(p)
            if db._s.all_cached(keys):
                pytest.skip("this filesystem keeps the store cached (no eviction)")
            for _ in range(10):
                got = rng.sample(range(len(keys)), 100)
                assert db.multi_get([keys[i] for i in got]) == [keys[i] * 50 for i in got]
            if warm:
                assert _wait_warmed(db, total) == total
                assert db._s.all_cached(keys), "warmed, yet values are not in memory"
                assert db.warm_up() is True  # (once per open: it ran already)
            else:
                # (the kernel's own read-around may have cached it meanwhile)
                assert db.stats()["warmed_bytes"] == 0
                assert db.warm_up() is True
                assert _wait_warmed(db, total) == total
                assert db._s.all_cached(keys)
            # and every value still reads back whole
            assert db.multi_get(keys) == [k * 50 for k in keys]


def test_items_of_a_cold_store_warm_it(tmp_path: Path) -> None:
    """items() reads every value: on a cold store it starts the warm-up (as a cold
    multi_get does) rather than fault the values in one page at a time."""
    p = tmp_path / "db"
    keys, total = _cold_store(p)
    for warm in (True, False):
        with kv.open(p, durability="none", warm=warm) as db:
            _evict(p)
            if db._s.all_cached(keys):
                pytest.skip("this filesystem keeps the store cached (no eviction)")
            assert dict(db.items()) == {k: k * 50 for k in keys}
            if warm:
                assert _wait_warmed(db, total) == total
            else:
                assert db.stats()["warmed_bytes"] == 0


def test_a_cold_get_reads_its_page_not_the_read_ahead_window(tmp_path: Path) -> None:
    """A get whose record is not in memory faults in that page (the segments' mappings
    are read at random, MADV_RANDOM), not the device's read-ahead window around it
    (128 KiB by default, 8 MiB on some disks: megabytes per cold get); a compaction,
    which reads its segments from end to end, reads each of them once (at the disk's
    sequential speed: measured by hand, docs/kv.md)."""
    p = tmp_path / "db"
    keys, total = _cold_store(p, n=16000)  # (~8 MB in 1 MiB segments)
    with kv.open(p, durability="none", warm=False) as db:
        _evict(p)
        if db._s.all_cached(keys):
            pytest.skip("this filesystem keeps the store cached (no eviction)")
        rng = random.Random(9)
        picked = rng.sample(keys, 40)
        before = _storage_read_bytes()
        for k in picked:
            assert db.get(k) == k * 50
        read = _storage_read_bytes() - before
        if read == 0:
            pytest.skip("/proc/self/io does not count this filesystem's reads")
        # one page per get, and the index's pages (a record may straddle two pages)
        assert read <= 40 * 3 * 4096, f"{read} bytes read for 40 cold gets"
        _evict(p)
        before = _storage_read_bytes()
        db.compact()
        read = _storage_read_bytes() - before
        assert read < 1.5 * total, (read, total)
        assert dict(db.items()) == {k: k * 50 for k in keys}


def test_closing_while_warming_up(tmp_path: Path) -> None:
    """The warm-up thread holds the segments it reads; closing the store stops it at its
    next chunk and waits for it, and reopening works at once."""
    p = tmp_path / "db"
    keys, _ = _cold_store(p)
    for _ in range(3):
        with kv.open(p, durability="none") as db:
            _evict(p)
            db.warm_up()
        # (close waited for the thread: the segments' mappings went with the store)
        assert _threads_named("uringkit-warm") == 0
        with kv.open(p, durability="none") as db:
            assert db.get(keys[-1]) == keys[-1] * 50
            db.put(b"new", b"x")
        with kv.open(p) as db:
            assert db.get(b"new") == b"x"


def test_writes_over_a_mapped_index(tmp_path: Path) -> None:
    """After a reopen the index is the mapped INDEX snapshot; what is written then goes
    to the overlay (new keys, and rewrites that shadow the snapshot's entries): gets,
    deletes, counts and listings see one answer per key, and the next snapshot has it
    all."""
    p = tmp_path / "db"
    with kv.open(p, durability="none") as db:
        db.write([(b"k%d" % i, b"v%d" % i) for i in range(5000)])
    want = {b"k%d" % i: b"v%d" % i for i in range(5000)}
    for rnd in range(1, 4):
        with kv.open(p, durability="none") as db:
            assert db.stats()["index_mapped"] == 1
            for i in range(rnd, 5000, 3):  # rewrites of snapshot keys
                db.put(b"k%d" % i, b"r%d-%d" % (rnd, i))
                want[b"k%d" % i] = b"r%d-%d" % (rnd, i)
            for i in range(700):  # new keys
                db.put(b"n%d-%d" % (rnd, i), b"x")
                want[b"n%d-%d" % (rnd, i)] = b"x"
            for k in (b"k%d" % (10 * rnd), b"k%d" % (3 * rnd + 1), b"n%d-5" % rnd):
                assert db.delete(k) is (k in want)
                want.pop(k, None)
            assert len(db) == len(want)
            items = list(db.items())
            assert len(items) == len(want), "a key listed twice (snapshot + overlay)"
            assert dict(items) == want
            assert db.multi_get([b"k0", b"k1", b"n%d-6" % rnd, b"nope"]) == [
                want.get(b"k0"),
                want.get(b"k1"),
                b"x",
                None,
            ]
    with kv.open(p) as db:
        assert dict(db.items()) == want
        assert db.check()[1] == []


def _sq_threads() -> list[str]:
    """This process's SQPOLL kernel threads (`iou-sqp-<pid>`)."""
    out = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.startswith("iou-sqp"):
            out.append(comm)
    return out


def test_sqpoll_needs_direct(tmp_path: Path) -> None:
    for direct, io_uring in ((False, True), (True, False)):
        with pytest.raises(ValueError, match="sqpoll=True needs direct=True"):
            kv.open(tmp_path / "db", sqpoll=True, direct=direct, io_uring=io_uring)
    assert not (tmp_path / "db").exists()  # refused before anything was created


SQPOLL_BLOCKED = r"""
import sys
import threading
from uringkit.testing import block_io_uring
block_io_uring()
from uringkit import kv
try:
    kv.open(sys.argv[1], direct=True, sqpoll=True)
    print("opened")
except OSError as e:
    print(type(e).__name__, e.errno, e)
with kv.open(sys.argv[1], direct=True) as db:  # plain O_DIRECT appends still work
    db.put(b"k", b"v")
    print(db.get(b"k"), db.stats()["io_uring"])
"""


def test_sqpoll_refused_where_io_uring_is_blocked(tmp_path: Path) -> None:
    p = tmp_path / "db"
    try:
        kv.open(tmp_path / "probe", direct=True).close()
    except OSError as e:
        pytest.skip(f"no O_DIRECT here: {e}")
    out = subprocess.run(
        [sys.executable, "-c", SQPOLL_BLOCKED, str(p)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first.startswith("PermissionError 1 ") and "refused an SQPOLL ring" in first, first
    assert second == "b'v' 0"  # appended with plain pwrite: no ring in this process


@pytest.mark.parametrize("small_fs", ["4m"], indirect=True)
@pytest.mark.parametrize("api", ["threads", "async"])
def test_writers_on_a_disk_that_fills_and_empties_are_told_the_truth(
    small_fs: Path, api: str
) -> None:
    """Durable writers on a disk another file fills and empties again and again: every
    put that returned is there, with its value, now and after a reopen; every put that
    raised ENOSPC is not. (Until session 31 a writer whose group failed was told so
    only while that failure was among the last 64 recorded: on a full disk with many
    writers one woken later returned success for a put never written. The async API
    also told all of a loop's writes the outcome of the last one's group, while a
    thread's leader may have taken some of them into an earlier group.)"""
    p = small_fs / "db"
    stop = threading.Event()

    def balloon() -> None:
        """Fill the disk, then give the room back, over and over."""
        filler = small_fs / "filler"
        r = random.Random(7)
        while not stop.is_set():
            with contextlib.suppress(OSError), open(filler, "wb") as f:
                while not stop.is_set():
                    f.write(bytes(64 << 10))
            time.sleep(r.random() / 500)
            filler.unlink(missing_ok=True)
            time.sleep(r.random() / 500)

    told: dict[bytes, bytes | None] = {}  # what each put was told: its value, or None
    lock = threading.Lock()

    def outcome(k: bytes, v: bytes, e: OSError | None) -> None:
        if e is not None and e.errno != errno.ENOSPC:
            raise e
        with lock:
            told[k] = v if e is None else None

    def writer(db: kv.DB, t: int) -> None:
        r = random.Random(t)
        for j in range(150):
            k, v = b"t%02d-%04d" % (t, j), r.randbytes(r.randrange(1, 3000))
            try:
                db.put(k, v)
                outcome(k, v, None)
            except OSError as e:
                outcome(k, v, e)

    async def tasks(db: kv.DB) -> None:
        from uringkit.kv import AsyncDB

        adb = AsyncDB(db, "sync")  # (the store opened above, its writes on this loop)

        async def task(t: int) -> None:
            r = random.Random(1000 + t)
            for j in range(60):
                k, v = b"a%02d-%04d" % (t, j), r.randbytes(r.randrange(1, 3000))
                try:
                    await adb.put(k, v)
                    outcome(k, v, None)
                except OSError as e:
                    outcome(k, v, e)

        await asyncio.gather(*(task(t) for t in range(32)))

    with kv.open(p, durability="sync", segment_size=256 << 10, auto_compact=None) as db:
        b = threading.Thread(target=balloon)
        b.start()
        try:
            n = 32 if api == "threads" else 8  # (async: threads lead groups beside the loop)
            ths = [threading.Thread(target=writer, args=(db, t)) for t in range(n)]
            for t in ths:
                t.start()
            try:
                if api == "async":
                    asyncio.run(tasks(db))
            finally:
                for t in ths:
                    t.join()
        finally:
            stop.set()
            b.join()
            (small_fs / "filler").unlink(missing_ok=True)
        failed = [k for k, v in told.items() if v is None]
        written = {k: v for k, v in told.items() if v is not None}
        assert failed and written, "the disk never filled (or never emptied): no test"
        assert {k: db.get(k) for k in written} == written, "a put told success is not there"
        assert [k for k in failed if db.get(k) is not None] == [], "a failed put is there"
    with kv.open(p) as db:
        assert {k: db.get(k) for k in written} == written
        assert [k for k in failed if db.get(k) is not None] == []
