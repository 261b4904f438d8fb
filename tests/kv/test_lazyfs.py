"""The power-cut filesystem itself (`uringkit.kv.lazyfs`): what it keeps and forgets is
what test_power.py's verdicts rest on. Each check cuts a real mount (SIGKILL of the FUSE
process) and mounts the disk again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from uringkit.kv import lazyfs

pytestmark = pytest.mark.skipif(
    lazyfs.available() is not None, reason=f"no LazyFS mount: {lazyfs.available()}"
)


def _write(path: Path, data: bytes, sync: bool) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.timeout(120)
def test_only_synced_bytes_survive_a_cut(tmp_path: Path) -> None:
    with lazyfs.Mount(tmp_path / "disk", tmp_path / "mnt") as m:
        m.up(writeback=0)
        mnt = Path(m.mountpoint)
        _write(mnt / "synced", b"a" * 10_000, sync=True)
        _write(mnt / "unsynced", b"b" * 10_000, sync=False)
        assert (mnt / "unsynced").read_bytes() == b"b" * 10_000  # (its page cache)
        m.cut()
        m.up(writeback=0)
        assert (mnt / "synced").read_bytes() == b"a" * 10_000
        assert (mnt / "unsynced").read_bytes() == b""  # (a name: kept at once here)


@pytest.mark.timeout(300)
def test_a_truncate_is_volatile_with_lazy_names(tmp_path: Path) -> None:
    """With lazy names a truncate not yet made durable may be undone by the cut — the
    file back at its old length with the bytes it cut — and never once the file, or a
    directory, was fsynced after it."""
    data = os.urandom(3 * 4096 + 100)
    seen: set[int] = set()
    for seed in range(12):
        for commit in ("none", "file", "dir"):
            disk, mnt_dir = tmp_path / f"disk{seed}{commit}", tmp_path / f"mnt{seed}{commit}"
            with lazyfs.Mount(disk, mnt_dir) as m:
                m.up(seed=seed, writeback=0, lazy_names=True)
                mnt = Path(m.mountpoint)
                _write(mnt / "f", data, sync=True)
                dfd = os.open(mnt, os.O_RDONLY)
                os.fsync(dfd)  # (its name committed)
                fd = os.open(mnt / "f", os.O_RDWR)
                os.ftruncate(fd, 100)
                assert os.fstat(fd).st_size == 100
                if commit == "file":
                    os.fsync(fd)
                elif commit == "dir":
                    os.fsync(dfd)
                os.close(fd)
                os.close(dfd)
                m.cut()
                m.up(seed=seed + 1, writeback=0, lazy_names=True)
                got = (mnt / "f").read_bytes()
            if commit != "none":
                assert got == data[:100], (seed, commit, len(got))
            else:
                assert got in (data[:100], data), (seed, len(got))
                seen.add(len(got))
    # (the same seeds each time: both outcomes come up among them)
    assert seen == {100, len(data)}, seen


@pytest.mark.timeout(120)
def test_fallocate_growth_is_volatile_with_lazy_names(tmp_path: Path) -> None:
    lengths: set[int] = set()
    for seed in range(8):
        with lazyfs.Mount(tmp_path / f"disk{seed}", tmp_path / f"mnt{seed}") as m:
            m.up(seed=seed, writeback=0, lazy_names=True)
            mnt = Path(m.mountpoint)
            _write(mnt / "f", b"x" * 500, sync=True)
            dfd = os.open(mnt, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
            fd = os.open(mnt / "f", os.O_RDWR)
            os.posix_fallocate(fd, 0, 1 << 20)
            os.close(fd)
            m.cut()
            m.up(seed=seed + 1, writeback=0, lazy_names=True)
            lengths.add((mnt / "f").stat().st_size)
            assert (mnt / "f").read_bytes()[:500] == b"x" * 500
    assert lengths == {500, 1 << 20}, lengths
