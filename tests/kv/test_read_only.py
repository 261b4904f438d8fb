"""`kv.open(path, read_only=True)`: readers beside the one writer (LMDB's many readers,
RocksDB's OpenForReadOnly), seeing the store as it was at open — or at their last
refresh() — and changing nothing."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from uringkit import kv

WRITER = """
import sys
from uringkit import kv
db = kv.open(sys.argv[1], durability=sys.argv[2], segment_size=64 << 10)
print("ready", flush=True)
i = 0
while True:
    # every value is its key's round number, 5 times: a reader can tell a whole one
    db.put(b"w%05d" % (i % 3000), b"%d" % i * 5)
    i += 1
    if i % 4000 == 0:
        db.compact()
"""


def tree(d: Path) -> dict[str, str]:
    """Every file of the store with a hash of its bytes."""
    return {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in sorted(os.listdir(d))}


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_readers_beside_a_live_writer(tmp_path: Path, durability: str) -> None:
    """A writer process puts, rolls 64 KiB segments and compacts without pause; readers
    open and close the store over and over meanwhile: each open sees a consistent store
    (every value whole), never an error, a SIGBUS or a warning, and refuses writes."""
    p = tmp_path / "s"
    with kv.open(p) as db:
        db.put(b"before", b"1")
    w = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(p), durability], stdout=subprocess.PIPE, text=True
    )
    try:
        assert w.stdout is not None and w.stdout.readline() == "ready\n"
        with pytest.raises(BlockingIOError):
            kv.open(p)  # the writer's open stays exclusive
        opens, seen = 0, 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline or opens < 5:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no torn tail "dropped", nothing repaired
                db = kv.open(p, read_only=True)
            with db:
                assert db.get(b"before") == b"1"
                keys = [k for k in db if k.startswith(b"w")]
                for k in random.sample(keys, min(100, len(keys))):
                    v = db.get(k)
                    assert v is not None and len(v) % 5 == 0, (k, v)
                    assert v == v[: len(v) // 5] * 5
                assert db.check()[1] == []
                with pytest.raises(PermissionError, match="read_only=True"):
                    db.put(b"x", b"y")
                seen = max(seen, len(keys))
            opens += 1
        assert w.poll() is None, "the writer is unaffected"
        assert seen > 1
    finally:
        w.kill()
        w.wait()
        if w.stdout is not None:
            w.stdout.close()
    with kv.open(p) as db:  # the writer's lock died with it
        assert db.get(b"before") == b"1"


def test_readers_while_writers_are_killed(tmp_path: Path) -> None:
    """Writer processes SIGKILLed one after another mid-put (a torn tail, an OVERLAY, a
    compaction cut short left behind each time): read-only opens between them see whole
    values only and change none of what the next writer's recovery works on."""
    p = tmp_path / "s"
    kv.open(p).close()
    rng = random.Random(5)
    for _ in range(6):
        w = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(p), rng.choice(["sync", "none"])],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert w.stdout is not None and w.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0.05, 0.3))
        finally:
            w.kill()
            w.wait()
            if w.stdout is not None:
                w.stdout.close()
        before = tree(p)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            db = kv.open(p, read_only=True)
        with db:
            for k in db:
                v = db.get(k)
                assert v is not None and v == v[: len(v) // 5] * 5, (k, v)
        assert tree(p) == before


def test_read_only_changes_nothing(tmp_path: Path) -> None:
    """A torn tail is not cut (nor seen), no INDEX is written, nothing is created; the
    next writer's open does what recovery does."""
    p = tmp_path / "s"
    with kv.open(p, segment_size=64 << 10) as db:
        for i in range(2000):
            db.put(b"k%05d" % i, b"v" * 50)
        db.compact()
        db.put(b"last", b"1")
    (p / "INDEX").unlink()  # as after a killed writer: the open replays the segments
    # the segment appended to: the newest one without a hint file (compaction's carry one)
    newest = max(f for f in p.glob("*.seg") if not f.with_suffix(".hint").exists())
    with open(newest, "ab") as f:
        f.write(b"\x01torn record" * 3)
    before = tree(p)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with kv.open(p, read_only=True) as db:
            assert len(db) == 2001 and db.get(b"last") == b"1"
            assert db.multi_get([b"k00007", b"nope"]) == [b"v" * 50, None]
            assert list(db.iterator(prefix=b"k0000", include_value=False))[:2] == [
                b"k00000",
                b"k00001",
            ]
            for write in (
                lambda: db.delete(b"last"),
                lambda: db.write([(b"a", b"1")]),
                lambda: db.delete_range(prefix=b"k"),
                db.compact,
                db.sync,
            ):
                with pytest.raises(PermissionError):
                    write()
    assert tree(p) == before, "a read-only open changed the store's files"
    with pytest.warns(RuntimeWarning, match="torn tail"):
        kv.open(p).close()


def test_read_only_bad_input(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such store"):
        kv.open(tmp_path / "absent", read_only=True)
    assert not (tmp_path / "absent").exists()
    with kv.open(tmp_path / "s") as db:
        db.put(b"a", b"1")
    with pytest.raises(ValueError, match="repair=True"):
        kv.open(tmp_path / "s", read_only=True, repair=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not an xkv store"):
        kv.open(tmp_path / "empty", read_only=True)


def test_cli_reads_a_store_another_process_writes(tmp_path: Path) -> None:
    p = tmp_path / "s"
    with kv.open(p) as db:
        db.put(b"user:1", b"ada")
        # this process holds the store open for writing: the CLI's reads still work
        run = [sys.executable, "-m", "uringkit", "kv"]
        out = subprocess.run([*run, "get", str(p), "user:1"], capture_output=True, text=True)
        assert (out.returncode, out.stdout) == (0, "ada\n"), out.stderr
        out = subprocess.run([*run, "check", str(p)], capture_output=True, text=True)
        assert out.returncode == 0 and "0 problems" in out.stdout
        out = subprocess.run([*run, "put", str(p), "k", "v"], capture_output=True, text=True)
        assert out.returncode == 1 and "open for writing by another process" in out.stderr


def test_read_only_opens_map_index_and_leave_a_damaged_one(tmp_path: Path) -> None:
    """A read-only open maps INDEX as the writer's does (the writer's next close rewrites
    it; a reader's mapping keeps the old file); one found damaged is reported, but only
    the writer's open removes it."""
    p = tmp_path / "db"
    with kv.open(p, durability="none") as db:
        for i in range(0, 150_000, 1000):
            db.write([(b"key%d" % j, b"v%d" % j) for j in range(i, i + 1000)])
    index = p / "INDEX"
    assert index.stat().st_size > 4 << 20  # (verified in the background)
    with kv.open(p, read_only=True) as db:
        assert db.recovery["from_snapshot"] and db.stats()["index_mapped"] == 1
        assert db.get(b"key777") == b"v777" and db.get(b"absent") is None
    raw = bytearray(index.read_bytes())
    raw[-10] ^= 0x40  # inside the key arena, the file's last section
    index.write_bytes(raw)
    before = tree(p)
    with kv.open(p, read_only=True) as db, pytest.raises(OSError, match="INDEX"):
        db.get(b"absent")
    assert tree(p) == before, "a read-only open removed the damaged INDEX"
    with kv.open(p) as db, pytest.raises(OSError, match="INDEX"):
        db.get(b"absent")
    assert not index.exists()


def test_read_only_open_takes_a_closed_writers_overlay(tmp_path: Path) -> None:
    """A writer that changed a few keys of a store opened from INDEX closes keeping its
    live overlay (OVERLAY) instead of rewriting INDEX; a read-only open copies that
    overlay rather than replaying every record since INDEX — puts, overwrites and
    deletes (snapshot slots the overlay erased) all seen, nothing changed on disk."""
    p = tmp_path / "db"
    model = {b"key%d" % i: b"v%d" % i for i in range(20_000)}
    with kv.open(p, durability="none") as db:
        db.write(list(model.items()))
    for round_ in range(2):
        with kv.open(p, durability="none") as db:
            for i in range(300):
                k, v = b"new%d-%d" % (round_, i), b"n%d" % i
                db.put(k, v)
                model[k] = v
                k = b"key%d" % (round_ * 1000 + i)
                db.put(k, b"over%d" % round_)
                model[k] = b"over%d" % round_
                k = b"key%d" % (10_000 + round_ * 1000 + i)
                assert db.delete(k)
                del model[k]
        assert (p / "OVERLAY").exists(), "the close kept the overlay"
        before = tree(p)
        with kv.open(p, read_only=True) as db:
            assert db.recovery["from_snapshot"] and db.recovery["from_overlay"]
            assert db.recovery["records"] == 0, "nothing since INDEX replayed"
            assert len(db) == len(model)
            assert dict(db.items()) == model
            assert db.get(b"key%d" % (10_000 + round_ * 1000)) is None
            assert db.check()[1] == []
        assert tree(p) == before


LIVE_BATCHES = """
import sys
from uringkit import kv
import time
# (no auto-compaction: it would drop INDEX, and the overlay with it, for the session)
db = kv.open(sys.argv[1], durability="none", auto_compact=None)
print("ready", flush=True)
i = 0
while True:
    # one batch per round: key i % 500 gets round i, "last" says the round (500 keys
    # of the 20,000: the overlay file holds every change)
    db.write([(b"k%05d" % (i % 500), b"%d" % i), (b"last", b"%d" % i)])
    i += 1
    if i % 20 == 0:
        time.sleep(0.0002)  # (a log of a few MB, not hundreds, for the readers' replays)
"""


def test_read_only_opens_copy_a_live_writers_overlay_consistently(tmp_path: Path) -> None:
    """Read-only opens beside a writer that never stops updating its live overlay: a
    copy of it counts only if the writer changed nothing while it was taken (a seqlock
    on the overlay's `busy` word), else the open replays from INDEX. Either way every
    open sees one moment of the writer: after round L, the 500 rounds up to L exactly —
    no key from before it, none from after."""
    p = tmp_path / "db"
    with kv.open(p, durability="none") as db:
        db.write([(b"k%05d" % i, b"0") for i in range(20_000)] + [(b"last", b"0")])
    w = subprocess.Popen(
        [sys.executable, "-c", LIVE_BATCHES, str(p)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert w.stdout is not None and w.stdout.readline() == "ready\n"
        opens, copied = 0, 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline or opens < 20:
            with kv.open(p, read_only=True) as db:
                copied += db.recovery["from_overlay"]
                last = int(db.get(b"last") or b"0")
                got = dict(db.items())
            opens += 1
            for j in range(max(0, last - 499), last + 1):
                assert got[b"k%05d" % (j % 500)] == b"%d" % j, (last, j)
        assert w.poll() is None
        assert copied > 0, f"no open of {opens} took the overlay"
    finally:
        w.kill()
        w.wait()
        if w.stdout is not None:
            w.stdout.close()


FOLLOWED = """
import sys
from uringkit import kv
db = kv.open(sys.argv[1], durability=sys.argv[2], segment_size=64 << 10)
i = 0
while True:
    # keys in order, each value its number 5 times: a reader sees a prefix, values whole
    db.write([(b"f%07d" % j, b"%d" % j * 5) for j in range(i, i + 10)])
    i += 10
    if sys.argv[2] == "sync":
        print(i, flush=True)  # acknowledged: on disk
    if i % 3000 == 0:
        db.compact()
"""


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_refresh_follows_a_live_writer(tmp_path: Path, durability: str) -> None:
    """One read-only store, refreshed over and over beside a writer process that puts
    batches of 10 keys in order, rolls 64 KiB segments and compacts: after each refresh
    it holds a prefix of what was written, in whole batches, every value whole, and
    (durability="sync") at least every key the writer had acknowledged before the
    refresh; compactions make it reopen, the rest is read in place."""
    import threading

    p = tmp_path / "s"
    kv.open(p).close()
    w = subprocess.Popen(
        [sys.executable, "-c", FOLLOWED, str(p), durability], stdout=subprocess.PIPE, text=True
    )
    acked = [0]

    def read_acks() -> None:
        assert w.stdout is not None
        for line in w.stdout:
            acked[0] = int(line)

    t = threading.Thread(target=read_acks, daemon=True)
    t.start()
    totals = {"records": 0, "segments": 0, "reopened": 0}
    try:
        with kv.open(p, read_only=True) as db:
            seen, refreshes = 0, 0
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline or totals["reopened"] < 2:
                assert time.monotonic() < deadline + 30, f"no compaction followed: {totals}"
                before = acked[0]
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    r = db.refresh()
                refreshes += 1
                for k in totals:
                    totals[k] += r[k]
                n = len(db)
                assert n % 10 == 0 and n >= seen and n >= before, (n, seen, before, r)
                if n:
                    assert db.get(b"f%07d" % (n - 1)) == b"%d" % (n - 1) * 5
                assert db.get(b"f%07d" % n) is None
                for j in random.sample(range(n), min(50, n)):
                    assert db.get(b"f%07d" % j) == b"%d" % j * 5, j
                seen = n
                time.sleep(0.005)
            assert db.check()[1] == []
        assert w.poll() is None, "the writer is unaffected"
    finally:
        w.kill()
        w.wait()
        t.join(5)
        if w.stdout is not None:
            w.stdout.close()
    assert seen > 0 and totals["records"] > 0 and totals["segments"] > 0, totals
    assert refreshes > totals["reopened"] >= 2


def test_refresh_of_a_writer_or_a_closed_store(tmp_path: Path) -> None:
    p = tmp_path / "s"
    with kv.open(p) as w:
        with pytest.raises(ValueError, match="read_only=True"):
            w.refresh()
        r = kv.open(p, read_only=True)
        r.close()
        with pytest.raises(ValueError, match="closed"):
            r.refresh()


def test_async_refresh(tmp_path: Path) -> None:
    import asyncio

    p = tmp_path / "s"

    async def main() -> None:
        with kv.open(p) as w:
            w.put(b"a", b"1")
            async with kv.open_async(p, read_only=True) as r:
                w.put(b"b", b"2")
                assert await r.get(b"b") is None
                assert (await r.refresh())["records"] == 1
                assert await r.get(b"b") == b"2"

    asyncio.run(main())
