"""`db.checkpoint(path)` and `uringkit kv backup`: a copy of a live store (RocksDB's
checkpoint, LMDB's env.copy) — hard links for what never changes again."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from uringkit import kv


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_checkpoint_while_writing(tmp_path: Path, durability: str) -> None:
    """Threads put versioned values while a checkpoint is taken: the copy holds, for
    every key, a version between the last one acknowledged before the call and the
    last one written before it returned — and nothing after that changes either side."""
    src, cp = tmp_path / "src", tmp_path / "cp"
    db = kv.open(src, durability=durability, segment_size=256 << 10)
    for i in range(3000):
        db.put(b"k%04d" % i, b"0")
    db.compact()  # segments with hint files, to be linked
    acked = [[0] * 750 for _ in range(4)]
    stop = threading.Event()

    def writer(t: int) -> None:
        v = 0
        while not stop.is_set():
            v += 1
            for j in range(0, 750, 50):
                db.put(b"k%04d" % (t * 750 + j), b"%d" % v)
                acked[t][j] = v

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    try:
        before = [list(a) for a in acked]
        r = db.checkpoint(cp)
        after = [list(a) for a in acked]
    finally:
        stop.set()
        for th in threads:
            th.join()
    assert r["segments"] >= 2 and r["linked_bytes"] > 0 and r["copied_bytes"] > 0
    # what was linked is shared with the source, and stays shared only as long as
    # neither side retires it
    linked = [f for f in cp.glob("*.seg") if f.stat().st_nlink == 2]
    assert linked
    db.put(b"k0000", b"after")
    db.delete(b"k0001")
    db.compact()
    with kv.open(cp) as c:
        assert len(c) == 3000 and not c.recovery["skipped"]
        for t in range(4):
            for j in range(0, 750, 50):
                got = int(c.get(b"k%04d" % (t * 750 + j)) or b"-1")
                # (+1: a put that had returned but not yet been noted in `acked`)
                assert before[t][j] <= got <= after[t][j] + 1, (t, j, got)
        assert c.check()[1] == []
        c.put(b"only-in-the-copy", b"1")
        c.compact()
    assert db.get(b"only-in-the-copy") is None and db.get(b"k0000") == b"after"
    assert db.check()[1] == []
    db.close()
    with kv.open(src) as again:
        assert again.get(b"k0001") is None and len(again) == 2999


def test_a_damaged_copy_is_found(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with kv.open(src, segment_size=64 << 10) as db:
        for i in range(3000):
            db.put(b"k%04d" % i, b"v" * 40)
        db.checkpoint(tmp_path / "cp")
        with pytest.raises(FileExistsError, match="new directory"):
            db.checkpoint(tmp_path / "cp")
    segs = sorted((tmp_path / "cp").glob("*.seg"))
    segs[1].unlink()  # (a copy of the copy that lost a file)
    with pytest.raises(OSError, match=f"{segs[1].name}: missing"):
        kv.open(tmp_path / "cp")


@pytest.mark.parametrize("small_fs", ["2m"], indirect=True)
def test_a_checkpoint_that_does_not_fit_leaves_nothing(tmp_path: Path, small_fs: Path) -> None:
    """A checkpoint is made under a hidden name beside its path and renamed to it once
    whole: one that fails (here a full disk: another filesystem, so the segments are
    copied, not linked) leaves neither a partial copy under the name — it would open as
    a store missing data — nor the hidden directory."""
    with kv.open(tmp_path / "src", durability="none", segment_size=1 << 20) as db:
        db.write([(b"k%05d" % i, b"v" * 200) for i in range(15000)])
        with pytest.raises(OSError, match="No space left.*nothing was left there") as e:
            db.checkpoint(small_fs / "bak")
        assert "os error" not in str(e.value)
        assert list(small_fs.iterdir()) == []
        # and one that fits is made under the name given
        few = tmp_path / "few"
        with kv.open(few, durability="none") as small:
            small.put(b"a", b"1")
            small.checkpoint(small_fs / "bak")
    assert [p.name for p in small_fs.iterdir()] == ["bak"]
    with kv.open(small_fs / "bak", read_only=True) as b:
        assert b.get(b"a") == b"1"


def test_backup_cli_beside_a_writer(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "bak"
    with kv.open(src, segment_size=64 << 10) as db:
        for i in range(2000):
            db.put(b"user:%d" % i, b"x" * 50)
        # this process holds the store for writing: the backup opens it read-only
        out = subprocess.run(
            [sys.executable, "-m", "uringkit", "kv", "backup", str(src), str(dest)],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert "hard-linked" in out.stdout
        db.put(b"user:late", b"1")
    with kv.open(dest, read_only=True) as b:
        assert len(b) == 2000 and b.get(b"user:1999") == b"x" * 50
        assert b.get(b"user:late") is None


def test_async_checkpoint(tmp_path: Path) -> None:
    import asyncio

    async def main() -> None:
        async with kv.open_async(tmp_path / "src") as db:
            await asyncio.gather(*(db.put(b"k%d" % i, b"v") for i in range(200)))
            r = await db.checkpoint(tmp_path / "cp")
            assert r["segments"] >= 1
        with kv.open(tmp_path / "cp", read_only=True) as c:
            assert len(c) == 200

    asyncio.run(main())
