"""read / write / readv / writev / fsync / fallocate against real files."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from uringkit import Fixed, Ring

from conftest import need_ops, wait_all


def test_read_at_offset(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    data = data_file[1]
    buf = bytearray(4096)
    ring.read(rfd, buf, 8192, user_data=1)
    (c,) = ring.wait(1)
    assert c.res == 4096 and c.user_data == 1 and c.op == "read"
    assert bytes(buf) == data[8192 : 8192 + 4096]
    assert c.buffer is buf


def test_read_nbytes_and_memoryview(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    buf = bytearray(100)
    ring.read(rfd, memoryview(buf)[10:], 0, nbytes=50)
    (c,) = ring.wait(1)
    assert c.res == 50
    assert bytes(buf[10:60]) == data_file[1][:50]
    assert bytes(buf[:10]) == bytes(10) and bytes(buf[60:]) == bytes(40)


def test_read_current_position(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    os.lseek(rfd, 100, os.SEEK_SET)
    buf = bytearray(10)
    ring.read(rfd, buf)  # offset -1: the file position, which advances
    ring.wait(1)[0].raise_for_error()
    assert bytes(buf) == data_file[1][100:110]
    assert os.lseek(rfd, 0, os.SEEK_CUR) == 110


def test_short_read_at_eof(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    n = len(data_file[1])
    buf = bytearray(4096)
    ring.read(rfd, buf, n - 100)
    ring.read(rfd, bytearray(10), n + 10, user_data=2)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {0: 100, 2: 0}


def test_write_then_read_back(ring: Ring, tmp_path: Path) -> None:
    need_ops("write", "read")
    fd = os.open(tmp_path / "w", os.O_RDWR | os.O_CREAT)
    try:
        ring.write(fd, b"hello ", 0, user_data=1)
        ring.write(fd, bytearray(b"world"), 6, user_data=2)
        assert sorted(c.res for c in wait_all(ring, 2)) == [5, 6]
        assert os.pread(fd, 100, 0) == b"hello world"
        ring.write(fd, b"XXXXXXX", 0, nbytes=3)
        assert ring.wait(1)[0].res == 3
        assert os.pread(fd, 100, 0) == b"XXXlo world"
    finally:
        os.close(fd)


def test_rw_flags(ring: Ring, tmp_path: Path) -> None:
    """preadv2/pwritev2 flags on READ/WRITE: RWF_DSYNC writes durably in one SQE,
    RWF_NOWAIT makes a read that would wait (an empty pipe) fail with EAGAIN instead,
    and a flag the kernel does not know is its error, not a crash."""
    need_ops("write", "read")
    fd = os.open(tmp_path / "d", os.O_RDWR | os.O_CREAT)
    rd, wr = os.pipe()
    try:
        ring.write(fd, b"durable", 0, user_data=1, rw_flags=os.RWF_DSYNC)
        (c,) = ring.wait(1)
        assert c.res == 7 and os.pread(fd, 10, 0) == b"durable"
        buf = bytearray(8)
        ring.read(rd, buf, user_data=2, rw_flags=os.RWF_NOWAIT)
        (c,) = ring.wait(1, timeout=5)
        assert c.res == -errno.EAGAIN  # without the flag it would wait for a writer
        os.write(wr, b"now")
        ring.read(rd, buf, user_data=3, rw_flags=os.RWF_NOWAIT)
        (c,) = ring.wait(1, timeout=5)
        assert c.res == 3 and bytes(buf[:3]) == b"now"
        ring.write(fd, b"x", 0, user_data=4, rw_flags=1 << 30)
        (c,) = ring.wait(1)
        assert c.res == -errno.EOPNOTSUPP
        with pytest.raises(OSError):
            c.raise_for_error()
    finally:
        os.close(fd)
        os.close(rd)
        os.close(wr)


def test_readv_writev(ring: Ring, tmp_path: Path) -> None:
    need_ops("readv", "writev")
    fd = os.open(tmp_path / "v", os.O_RDWR | os.O_CREAT)
    try:
        ring.writev(fd, [b"abc", bytearray(b"defg"), memoryview(b"hij")], 0)
        assert ring.wait(1)[0].res == 10
        a, b = bytearray(4), bytearray(6)
        ring.readv(fd, [a, b], 0)
        (c,) = ring.wait(1)
        assert c.res == 10 and bytes(a) == b"abcd" and bytes(b) == b"efghij"
        assert c.buffer == [a, b]
    finally:
        os.close(fd)


def test_fsync_and_fdatasync(ring: Ring, tmp_path: Path) -> None:
    need_ops("fsync", "write")
    fd = os.open(tmp_path / "s", os.O_RDWR | os.O_CREAT)
    try:
        ring.write(fd, b"x" * 4096, 0, link=True, user_data=1)
        ring.fsync(fd, datasync=True, user_data=2)
        ring.fsync(fd, user_data=3)
        got = {c.user_data: c.res for c in wait_all(ring, 3)}
        assert got == {1: 4096, 2: 0, 3: 0}
    finally:
        os.close(fd)


def test_fallocate(ring: Ring, tmp_path: Path) -> None:
    need_ops("fallocate")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        ring.fallocate(fd, 1 << 20)
        ring.wait(1)[0].raise_for_error()
        assert os.fstat(fd).st_size == 1 << 20
        ring.fallocate(fd, 4096, 1 << 20, mode=1)  # FALLOC_FL_KEEP_SIZE
        ring.wait(1)[0].raise_for_error()
        assert os.fstat(fd).st_size == 1 << 20
    finally:
        os.close(fd)


def test_read_needs_writable_buffer(ring: Ring, rfd: int) -> None:
    with pytest.raises(TypeError, match="writable"):
        ring.read(rfd, b"immutable", 0)
    with pytest.raises(TypeError, match="buffer protocol"):
        ring.read(rfd, "text", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nbytes=20 is larger"):
        ring.read(rfd, bytearray(10), 0, nbytes=20)
    with pytest.raises(ValueError, match="offset"):
        ring.read(rfd, bytearray(10), -5)
    with pytest.raises(ValueError, match="buf"):
        ring.read(rfd)
    with pytest.raises(ValueError, match="non-negative"):
        ring.read(-3, bytearray(1))
    with pytest.raises(TypeError, match="file descriptor"):
        ring.read("nope", bytearray(1))  # type: ignore[arg-type]
    assert ring.in_flight == 0  # nothing half-queued


def test_fd_accepts_fileno_objects(ring: Ring, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    with open(data_file[0], "rb") as f:
        buf = bytearray(8)
        ring.read(f, buf, 0)
        assert ring.wait(1)[0].res == 8
        assert bytes(buf) == data_file[1][:8]


def test_big_batch_of_reads(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    bufs = [bytearray(512) for _ in range(128)]  # more than the 64-entry SQ
    for i, b in enumerate(bufs):
        ring.read(rfd, b, i * 512, user_data=i)
    done = wait_all(ring, 128)
    assert sorted(c.user_data for c in done) == list(range(128))
    assert all(c.res == 512 for c in done)
    assert b"".join(bufs) == data_file[1][: 128 * 512]


def test_read_batch(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    data = data_file[1]
    offs = [4096 * i for i in (3, 0, 7, 15)] + [len(data) - 100, len(data) + 4096]
    buf = bytearray(512 * len(offs))
    res = ring.read_batch(rfd, buf, offs, 512)
    assert res == [512, 512, 512, 512, 100, 0]
    for i, o in enumerate(offs[:4]):
        assert buf[i * 512 : (i + 1) * 512] == data[o : o + 512]
    assert ring.in_flight == 0


def test_read_batch_fixed_buffer_and_others_kept(
    ring: Ring, rfd: int, data_file: tuple[Path, bytes]
) -> None:
    need_ops("read_fixed", "nop")
    (fb,) = ring.register_buffers(1, 8192)
    ring.nop(user_data=99)  # an unrelated op in flight: its completion is not lost
    assert ring.read_batch(rfd, fb, [0, 4096], 4096) == [4096, 4096]
    assert bytes(memoryview(fb)) == data_file[1][:8192]
    assert [c.user_data for c in ring.wait(1)] == [99]


def test_write_batch(ring: Ring, tmp_path: Path) -> None:
    need_ops("write")
    fd = os.open(tmp_path / "wb", os.O_RDWR | os.O_CREAT)
    try:
        src = b"".join(bytes([i]) * 100 for i in range(4))
        assert ring.write_batch(fd, src, [300, 0, 200, 100], 100) == [100] * 4
        assert (
            os.pread(fd, 400, 0)
            == bytes([1]) * 100 + bytes([3]) * 100 + bytes([2]) * 100 + bytes([0]) * 100
        )
        with pytest.raises(ValueError, match="need 500"):
            ring.write_batch(fd, src, [0] * 5, 100)
        assert ring.write_batch(fd, src, [], 100) == []
    finally:
        os.close(fd)


def _batch_file(tmp_path: Path, size: int) -> tuple[int, bytes]:
    data = os.urandom(size)
    p = tmp_path / "batch.bin"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    return fd, data


def _check_batch(ring: Ring, fd: int, data: bytes, offs: list[int], size: int) -> None:
    """read_batch with and without the helper: the results and the bytes both ways are
    what the file holds (short at its end, empty past it)."""
    got = {}
    for helper in (True, False):
        buf = bytearray(size * len(offs))
        res = ring.read_batch(fd, buf, offs, size, helper=helper)
        assert res == [max(0, min(size, len(data) - o)) for o in offs], (helper, size)
        for i, o in enumerate(offs):
            assert buf[i * size : i * size + res[i]] == data[o : o + res[i]], (helper, i)
        got[helper] = (res, bytes(buf))
    assert got[True] == got[False]
    assert ring.in_flight == 0


def test_read_batch_helper_same_results(ring: Ring, tmp_path: Path) -> None:
    """Large batches of a plain fd are shared with the read helper thread; every shape
    (batch sizes around the 16-read threshold, odd block sizes, reads at and past the
    end of the file) gives what the ring alone gives."""
    need_ops("read")
    fd, data = _batch_file(tmp_path, 1_000_000 + 333)
    try:
        os.pread(fd, len(data), 0)  # cached: the helper reads its share
        for n in (1, 15, 16, 17, 64, 333):
            for size in (4096, 1000, 65536):
                offs = [(i * 7919 * 13) % (len(data) - 1) for i in range(n)]
                offs[-1] = len(data) - 10  # short
                if n > 2:
                    offs[0] = len(data) + 4096  # past the end: 0
                _check_batch(ring, fd, data, offs, size)
    finally:
        os.close(fd)


def test_read_batch_helper_takes_part(ring: Ring, tmp_path: Path) -> None:
    """The helper really reads chunks of large batches (on a machine with two CPUs or
    more), never with helper=False; its misses (an evicted file: it does not wait for
    the disk) are read by the ring."""
    from uringkit._native import read_helper_chunks

    need_ops("read")
    if len(os.sched_getaffinity(0)) < 2 or os.environ.get("URINGKIT_READ_HELPER") == "0":
        pytest.skip("no read helper: fewer than two CPUs or URINGKIT_READ_HELPER=0")
    fd, data = _batch_file(tmp_path, 4 << 20)
    try:
        offs = [((i * 7919) % 1024) * 4096 for i in range(256)]
        buf = bytearray(4096 * len(offs))
        os.pread(fd, len(data), 0)
        before = read_helper_chunks()
        for _ in range(50):
            assert ring.read_batch(fd, buf, offs, 4096, helper=False) == [4096] * len(offs)
        assert read_helper_chunks() == before
        for _ in range(200):
            assert ring.read_batch(fd, buf, offs, 4096) == [4096] * len(offs)
            if read_helper_chunks() > before:
                break
        assert read_helper_chunks() > before
        # evicted: whatever the helper finds missing is read through the ring
        for _ in range(3):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            _check_batch(ring, fd, data, offs, 4096)
    finally:
        os.close(fd)


def test_read_batch_not_shared_errors_and_direct(ring: Ring, tmp_path: Path) -> None:
    """Errors come from the ring as they would alone (a write-only fd: EBADF for each
    read), and O_DIRECT or Fixed files are read on the ring alone, correctly."""
    need_ops("read")
    fd, data = _batch_file(tmp_path, 1 << 20)
    os.close(fd)
    p = tmp_path / "batch.bin"
    wfd = os.open(p, os.O_WRONLY)
    try:
        assert ring.read_batch(wfd, bytearray(64 * 4096), [0] * 64, 4096) == [-errno.EBADF] * 64
    finally:
        os.close(wfd)
    offs = [((i * 37) % 256) * 4096 for i in range(64)]
    try:
        dfd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        dfd = None
    if dfd is not None:
        try:
            (fb,) = ring.register_buffers(1, 64 * 4096)  # page-aligned: fine for O_DIRECT
            assert ring.read_batch(dfd, fb, offs, 4096) == [4096] * 64
            mv = memoryview(fb)
            for i, o in enumerate(offs):
                assert mv[i * 4096 : (i + 1) * 4096] == data[o : o + 4096]
        finally:
            os.close(dfd)
    rfd = os.open(p, os.O_RDONLY)
    try:
        ring.register_files([rfd])
        buf = bytearray(64 * 4096)
        assert ring.read_batch(Fixed(0), buf, offs, 4096) == [4096] * 64
        assert all(buf[i * 4096 : (i + 1) * 4096] == data[o : o + 4096] for i, o in enumerate(offs))
    finally:
        os.close(rfd)


def test_read_batch_from_threads_at_once(tmp_path: Path) -> None:
    """Several threads, each with a ring, read batches at the same time (the GIL is
    released while the kernel copies; one of them at a time gets the read helper, the
    others read alone): every batch reads what the file holds."""
    import threading

    need_ops("read")
    fd, data = _batch_file(tmp_path, 2 << 20)
    errors: list[BaseException] = []

    def reader(t: int) -> None:
        try:
            with Ring(64) as r:
                for k in range(40):
                    offs = [((t * 977 + k * 131 + i * 37) % 512) * 4096 for i in range(48)]
                    buf = bytearray(4096 * len(offs))
                    assert r.read_batch(fd, buf, offs, 4096) == [4096] * len(offs)
                    for i, o in enumerate(offs):
                        assert buf[i * 4096 : (i + 1) * 4096] == data[o : o + 4096]
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    try:
        threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        os.close(fd)
    assert not errors, errors[0]
