"""openat / close / statx / splice / tee / sync_file_range / fadvise / ftruncate."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from uringkit import Fixed, Ring

from conftest import need_ops, wait_all


def test_openat_and_close(ring: Ring, data_file: tuple[Path, bytes]) -> None:
    need_ops("openat", "close", "read")
    ring.openat(data_file[0], os.O_RDONLY)
    (c,) = ring.wait(1)
    fd = c.raise_for_error()
    assert fd > 2
    assert os.pread(fd, 4, 0) == data_file[1][:4]
    ring.close(fd, user_data=5)
    (c,) = ring.wait(1)
    assert c.user_data == 5 and c.res == 0 and c.op == "close"
    try:
        os.fstat(fd)
        raise AssertionError("fd still open")
    except OSError:
        pass


def test_openat_creates_with_mode(ring: Ring, tmp_path: Path) -> None:
    need_ops("openat")
    p = tmp_path / "new"
    ring.openat(str(p).encode(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    fd = ring.wait(1)[0].raise_for_error()
    os.close(fd)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600 & ~_umask()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_openat_missing_file(ring: Ring, tmp_path: Path) -> None:
    need_ops("openat")
    ring.openat(tmp_path / "absent")
    (c,) = ring.wait(1)
    assert c.errno == 2
    try:
        c.raise_for_error()
        raise AssertionError
    except FileNotFoundError as e:
        assert "openat" in str(e)


def test_openat_dir_fd(ring: Ring, data_file: tuple[Path, bytes]) -> None:
    need_ops("openat")
    d = os.open(data_file[0].parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ring.openat(data_file[0].name, dir_fd=d)
        fd = ring.wait(1)[0].raise_for_error()
        os.close(fd)
    finally:
        os.close(d)


def test_statx_path_and_fd(ring: Ring, data_file: tuple[Path, bytes], rfd: int) -> None:
    need_ops("statx")
    ring.statx(data_file[0], user_data=1)
    ring.statx("", dir_fd=rfd, flags=0x1000, user_data=2)  # AT_EMPTY_PATH
    res = {c.user_data: c for c in wait_all(ring, 2)}
    st = os.stat(data_file[0])
    for c in res.values():
        c.raise_for_error()
        r = c.result
        assert r["st_size"] == st.st_size == len(data_file[1])
        assert r["st_ino"] == st.st_ino
        assert r["st_mode"] == st.st_mode
        assert r["st_dev"] == st.st_dev
        assert r["st_mtime_ns"] == st.st_mtime_ns


def test_splice_file_to_pipe(
    ring: Ring, rfd: int, data_file: tuple[Path, bytes], pipe: tuple[int, int]
) -> None:
    need_ops("splice")
    r, w = pipe
    ring.splice(rfd, 0, w, -1, 1000)
    assert ring.wait(1)[0].res == 1000
    assert os.read(r, 2000) == data_file[1][:1000]


def test_tee_duplicates_pipe(ring: Ring) -> None:
    need_ops("tee")
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        os.write(w1, b"duplicated")
        ring.tee(r1, w2, 100)
        assert ring.wait(1)[0].res == 10
        assert os.read(r2, 100) == b"duplicated"
        assert os.read(r1, 100) == b"duplicated"  # tee does not consume
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_sync_file_range_and_fadvise(ring: Ring, tmp_path: Path) -> None:
    need_ops("sync_file_range", "fadvise")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, os.urandom(1 << 16))
        ring.sync_file_range(fd, user_data=1)  # start writeback of the whole file
        ring.sync_file_range(fd, 4096, 0, flags=1 | 2 | 4, user_data=2)  # and wait for it
        ring.fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED, user_data=3)
        ring.fadvise(fd, 0, 0, 12345, user_data=4)  # no such advice
        got = {c.user_data: c.res for c in wait_all(ring, 4)}
        assert got == {1: 0, 2: 0, 3: 0, 4: -22}
        with pytest.raises(OverflowError, match="length must be between 0 and 2"):
            ring.sync_file_range(fd, 2**32)
    finally:
        os.close(fd)


def test_ftruncate(ring: Ring, tmp_path: Path) -> None:
    need_ops("ftruncate")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 1000)
        ring.ftruncate(fd, 100, user_data=1)
        assert ring.wait(1)[0].res == 0
        assert os.fstat(fd).st_size == 100
        dfd = os.open(tmp_path, os.O_RDONLY)
        ring.ftruncate(dfd, 0, user_data=2)  # a directory
        assert ring.wait(1)[0].res < 0
        os.close(dfd)
    finally:
        os.close(fd)


def test_openat2_resolve_restrictions(ring: Ring, tmp_path: Path) -> None:
    """Resolve.BENEATH keeps a lookup under dir_fd; Resolve.NO_SYMLINKS refuses links —
    how a server opens user-supplied paths without traversal bugs."""
    import errno

    from uringkit import Resolve

    need_ops("openat2")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_text("inside")
    (tmp_path / "secret").write_text("outside")
    os.symlink("f", tmp_path / "sub" / "link")
    d = os.open(tmp_path / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        ring.openat2("f", os.O_RDONLY, resolve=Resolve.BENEATH, dir_fd=d, user_data=1)
        ring.openat2("../secret", os.O_RDONLY, resolve=Resolve.BENEATH, dir_fd=d, user_data=2)
        ring.openat2("link", os.O_RDONLY, resolve=Resolve.NO_SYMLINKS, dir_fd=d, user_data=3)
        ring.openat2("new", os.O_WRONLY | os.O_CREAT, dir_fd=d, user_data=4)  # mode 0o644
        got = {c.user_data: c for c in wait_all(ring, 4)}
        fd = got[1].raise_for_error()
        assert os.read(fd, 10) == b"inside"
        os.close(fd)
        assert got[2].res == -errno.EXDEV
        assert got[3].res == -errno.ELOOP
        os.close(got[4].raise_for_error())
        assert stat.S_IMODE(os.stat(tmp_path / "sub" / "new").st_mode) == 0o644 & ~_umask()
        with pytest.raises(ValueError, match="mode must be 0"):
            ring.openat2("f", os.O_RDONLY, 0o600, dir_fd=d)
    finally:
        os.close(d)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _xattrs_work(p: Path) -> None:
    try:
        os.setxattr(p, "user.probe", b"x")
    except OSError as e:
        pytest.skip(f"no user xattrs on this filesystem: {e}")


def test_xattr_ops(ring: Ring, tmp_path: Path) -> None:
    """setxattr/getxattr by path and by open file (fsetxattr/fgetxattr), as os.getxattr
    takes either, through the ring: the
    get's `result` is the value; missing attribute ENODATA, a too-small size ERANGE, a
    bad name a ValueError before anything is queued."""
    import errno

    need_ops("getxattr", "setxattr", "fgetxattr", "fsetxattr")
    p = tmp_path / "f"
    p.write_bytes(b"data")
    _xattrs_work(p)
    fd = os.open(p, os.O_RDWR)
    open_file = open(p, "rb")  # noqa: SIM115 - an object with fileno(), closed below
    ring.register_files([fd])
    try:
        value = bytearray(b"v" * 300)
        # one linked chain: xattr ops run on io-wq workers, in any order unless linked
        # (an unlinked get raced its set and saw ENODATA); the get that fails (ERANGE)
        # ends the chain, and the one for a missing attribute is on its own
        ring.setxattr(p, "user.tag", value, user_data=1, link=True)
        del value  # copied when queued
        ring.setxattr(fd, b"user.fd", b"via fd", flags=os.XATTR_CREATE, user_data=2, link=True)
        ring.getxattr(str(p), "user.tag", user_data=3, link=True)
        ring.getxattr(Fixed(0), "user.fd", user_data=4, link=True)
        ring.getxattr(open_file, "user.tag", size=10, user_data=6)
        ring.getxattr(p, "user.missing", user_data=5)
        got = {c.user_data: c for c in wait_all(ring, 6)}
        assert got[1].res == 0 and got[2].res == 0
        assert got[3].res == 300 and got[3].result == b"v" * 300
        assert got[4].res == 6 and got[4].result == b"via fd"
        assert got[5].res == -errno.ENODATA
        assert got[6].res == -errno.ERANGE
        assert os.getxattr(p, "user.fd") == b"via fd"
        ring.setxattr(fd, "user.fd", b"again", flags=os.XATTR_CREATE, user_data=7)
        (c,) = wait_all(ring, 1)
        assert c.res == -errno.EEXIST
        with pytest.raises(ValueError, match="attribute name"):
            ring.getxattr(p, None)  # type: ignore[arg-type]
        assert ring.pending == 0
    finally:
        open_file.close()
        os.close(fd)


def test_madvise(ring: Ring) -> None:
    """madvise on page-aligned memory (an mmap); memory that does not start on a page
    boundary is refused with the reason."""
    import mmap

    need_ops("madvise")
    m = mmap.mmap(-1, 4 * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m[:5] = b"hello"
        ring.madvise(m, mmap.MADV_WILLNEED, user_data=1)
        ring.madvise(m, mmap.MADV_DONTNEED, length=mmap.PAGESIZE, user_data=2)
        got = {c.user_data: c.res for c in wait_all(ring, 2)}
        assert got == {1: 0, 2: 0}
        assert m[:5] == b"\0" * 5  # DONTNEED on private anonymous memory: zero-filled
        with pytest.raises(ValueError, match="page boundary"):
            ring.madvise(memoryview(m)[1:], mmap.MADV_WILLNEED)
    finally:
        m.close()


def test_futex_wait_and_wake(ring: Ring) -> None:
    """A futex2 wait completes when a wake for the same word arrives (from the ring or
    another thread); a word that no longer holds `val` fails the wait with EAGAIN."""
    import errno
    import threading

    need_ops("futex_wait", "futex_wake")
    word = bytearray(8)
    ring.futex_wait(word, 0, user_data=1)
    ring.submit()
    assert ring.wait(1, timeout=0.05) == []  # nobody woke it
    ring.futex_wake(word, 1, user_data=2)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {1: 0, 2: 1}  # one waiter woken
    word[0] = 7
    ring.futex_wait(word, 0, user_data=3)
    (c,) = wait_all(ring, 1)
    assert c.res == -errno.EAGAIN
    # woken from another thread, by a second ring
    ring.futex_wait(word, 7, user_data=4)
    ring.submit()

    def waker() -> None:
        with Ring(4) as other:
            other.futex_wake(word, user_data=9)
            other.wait(1, timeout=5)

    t = threading.Thread(target=waker)
    t.start()
    (c,) = ring.wait(1, timeout=5)
    t.join()
    assert (c.user_data, c.res) == (4, 0)
    with pytest.raises(ValueError, match="4-byte boundary"):
        ring.futex_wait(memoryview(word)[1:5], 0)
    with pytest.raises(ValueError, match="4 bytes"):
        ring.futex_wake(bytearray(2))


def test_futex_wait_armed_before_the_first_thread(tmp_path: Path) -> None:
    """A wait queued while the process has a single thread is still woken by a thread
    started afterwards (with the default flags: on 6.16+ kernels a *private* futex wait
    is lost there — the process's futex hash changes when its second thread starts)."""
    import subprocess
    import sys

    need_ops("futex_wait", "futex_wake")
    code = """
import os, threading
from uringkit import Ring
assert len(os.listdir("/proc/self/task")) == 1, "single-threaded to start with"
ring = Ring(8)
word = bytearray(4)
ring.futex_wait(word, 0, user_data=1)
ring.submit()
def waker():
    with Ring(4) as other:
        other.futex_wake(word, user_data=2)
        other.wait(1, timeout=5)
t = threading.Thread(target=waker)
t.start()
got = ring.wait(1, timeout=5)
t.join()
print([(c.user_data, c.res) for c in got])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(1, 0)]"


def test_futex_waitv(ring: Ring) -> None:
    """futex_waitv waits on several words at once and completes with the index of the
    one woken; a word that already differs fails it with EAGAIN; each word's memory
    stays alive while it waits, whatever Python drops."""
    import errno

    need_ops("futex_waitv", "futex_wake")
    words = [bytearray(4) for _ in range(3)]
    ring.futex_waitv([(w, 0) for w in words], user_data=1)
    ring.submit()
    assert ring.wait(1, timeout=0.05) == []
    ring.futex_wake(words[2], user_data=2)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {1: 2, 2: 1}  # woke the third word
    words[1][0] = 5
    ring.futex_waitv([(words[0], 0), (words[1], 0)], user_data=3)
    (c,) = wait_all(ring, 1)
    assert c.res == -errno.EAGAIN
    kept = bytearray(4)
    ring.futex_waitv([(kept, 0)], user_data=4)
    ring.submit()
    view = memoryview(kept)
    del kept  # the ring holds the word
    ring.futex_wake(view, user_data=5)
    assert {c.user_data: c.res for c in wait_all(ring, 2)} == {4: 0, 5: 1}
    with pytest.raises(ValueError, match="1 to 128"):
        ring.futex_waitv([])
    with pytest.raises(ValueError, match="4-byte boundary"):
        ring.futex_waitv([(memoryview(words[0])[1:], 0)])


def test_readv_writev_fixed(ring: Ring, tmp_path: Path) -> None:
    """readv_fixed/writev_fixed move data between a file and (start, length) ranges of
    one registered Buffer, in order; ranges outside the buffer are refused up front."""
    need_ops("readv_fixed", "writev_fixed")
    (buf,) = ring.register_buffers(1, 8192)
    mv = memoryview(buf)
    mv[:100] = b"a" * 100
    mv[4096:4196] = b"b" * 100
    fd = os.open(tmp_path / "v", os.O_RDWR | os.O_CREAT)
    try:
        ring.writev_fixed(fd, buf, [(4096, 100), (0, 50)], 10, user_data=1)
        (c,) = wait_all(ring, 1)
        assert c.res == 150
        assert os.pread(fd, 200, 0) == bytes(10) + b"b" * 100 + b"a" * 50
        os.pwrite(fd, b"0123456789", 0)
        ring.readv_fixed(fd, buf, [(8000, 4), (2000, 6)], 0, user_data=2)
        (c,) = wait_all(ring, 1)
        assert c.res == 10
        assert bytes(mv[8000:8004]) == b"0123" and bytes(mv[2000:2006]) == b"456789"
        with pytest.raises(ValueError, match=r"ranges\[1\] = \(8000, 200\) reaches past"):
            ring.readv_fixed(fd, buf, [(0, 1), (8000, 200)], 0)
        with pytest.raises(ValueError, match="1 to 1024"):
            ring.writev_fixed(fd, buf, [], 0)
    finally:
        os.close(fd)


def test_pipe(ring: Ring) -> None:
    """pipe(flags=): the completion's result is (read_fd, write_fd), with the flags
    applied; bad flags fail with EINVAL."""
    import errno
    import fcntl

    need_ops("pipe")
    ring.pipe(flags=os.O_CLOEXEC | os.O_NONBLOCK, user_data=1)
    ring.pipe(flags=0x7FFF_0000, user_data=2)
    got = {c.user_data: c for c in wait_all(ring, 2)}
    assert got[2].res == -errno.EINVAL and got[2].result is None
    c = got[1]
    assert c.res == 0
    r, w = c.result
    try:
        assert os.write(w, b"through the pipe") == 16
        assert os.read(r, 100) == b"through the pipe"
        assert fcntl.fcntl(r, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        assert os.get_blocking(w) is False
    finally:
        os.close(r)
        os.close(w)
