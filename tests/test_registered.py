"""Registered resources: fixed files (full, sparse, single-slot update) and fixed buffers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from uringkit import Buffer, Fixed, Ring

from conftest import need_ops


def test_fixed_file_read(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    ring.register_files([rfd])
    buf = bytearray(64)
    ring.read(Fixed(0), buf, 128)
    assert ring.wait(1)[0].res == 64
    assert bytes(buf) == data_file[1][128:192]
    ring.unregister_files()


def test_sparse_table_and_update(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read")
    ring.register_files_sparse(8)
    buf = bytearray(4)
    ring.read(Fixed(3), buf, 0)
    assert ring.wait(1)[0].errno == 9  # EBADF: empty slot
    assert ring.update_files(3, [rfd]) == 1
    ring.read(Fixed(3), buf, 0)
    assert ring.wait(1)[0].res == 4
    assert bytes(buf) == data_file[1][:4]
    assert ring.update_files(3, [-1]) == 1
    ring.read(Fixed(3), buf, 0)
    assert ring.wait(1)[0].errno == 9
    with pytest.raises(ValueError, match="exceeds the table"):
        ring.update_files(7, [rfd, rfd])


def test_update_without_table(ring: Ring) -> None:
    with pytest.raises(ValueError, match="register_files"):
        ring.update_files(0, [1])


def test_openat_into_fixed_slot(ring: Ring, data_file: tuple[Path, bytes]) -> None:
    need_ops("openat", "read", "close")
    ring.register_files_sparse(4)
    ring.openat(data_file[0], fixed_slot=2)
    assert ring.wait(1)[0].res == 0
    buf = bytearray(16)
    ring.read(Fixed(2), buf, 0)
    assert ring.wait(1)[0].res == 16 and bytes(buf) == data_file[1][:16]
    ring.close(Fixed(2))
    assert ring.wait(1)[0].res == 0


def test_fixed_buffers(ring: Ring, tmp_path: Path) -> None:
    need_ops("read_fixed", "write_fixed")
    bufs = ring.register_buffers(4, 8192)
    assert len(bufs) == 4 and all(isinstance(b, Buffer) for b in bufs)
    assert all(b.address % 4096 == 0 for b in bufs)
    assert [b.index for b in bufs] == [0, 1, 2, 3]
    fd = os.open(tmp_path / "fb", os.O_RDWR | os.O_CREAT)
    try:
        memoryview(bufs[1])[:] = b"z" * 8192
        ring.write_fixed(fd, bufs[1], 0, user_data=1)
        assert ring.wait(1)[0].res == 8192
        ring.read_fixed(fd, bufs[2], 0, nbytes=100, user_data=2)
        assert ring.wait(1)[0].res == 100
        assert bytes(memoryview(bufs[2])[:100]) == b"z" * 100
    finally:
        os.close(fd)
    with pytest.raises(ValueError, match="already registered"):
        ring.register_buffers(1, 4096)
    ring.unregister_buffers()
    # still valid memory after unregistering
    assert bytes(memoryview(bufs[1])[:3]) == b"zzz"


def test_buffer_from_other_ring_rejected(ring: Ring, rfd: int) -> None:
    need_ops("read_fixed")
    with Ring(8) as other:
        (b,) = other.register_buffers(1, 4096)
        with pytest.raises(ValueError, match="not registered with this Ring"):
            ring.read_fixed(rfd, b, 0)


def test_buffers_outlive_ring(rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read_fixed")
    r = Ring(8)
    (b,) = r.register_buffers(1, 4096)
    r.read_fixed(rfd, b, 0)
    r.wait(1)
    r.close()
    del r
    assert bytes(memoryview(b)[:16]) == data_file[1][:16]


def test_register_buffers_bad_sizes(ring: Ring) -> None:
    with pytest.raises(ValueError, match="count"):
        ring.register_buffers(0, 4096)
    with pytest.raises(ValueError, match="size"):
        ring.register_buffers(1, 0)


MEMLOCK_CHILD = """
import errno
from uringkit import Ring
r = Ring(8)
try:
    r.register_buffers(4, 4 << 20)
except OSError as e:
    assert e.errno == errno.ENOMEM, e
    print(str(e))
else:
    print("NO ERROR")
"""


def test_memlock_limit_explained() -> None:
    """Registering more than RLIMIT_MEMLOCK (8 MiB here) without CAP_IPC_LOCK."""
    need_ops("read_fixed")
    import resource
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop CAP_IPC_LOCK")
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= 16 << 20:
        pytest.skip(f"RLIMIT_MEMLOCK is {soft}: 16 MiB of buffers would fit")
    cmd = [
        setpriv,
        "--bounding-set=-ipc_lock",
        "--inh-caps=-ipc_lock",
        sys.executable,
        "-c",
        MEMLOCK_CHILD,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    msg = out.stdout
    assert "RLIMIT_MEMLOCK" in msg and "ulimit -l" in msg, msg


def test_read_and_write_use_fixed_ops_for_own_buffers(tmp_path: Path) -> None:
    """read()/write() given one of the ring's registered Buffers queue READ_FIXED /
    WRITE_FIXED themselves (no page pinning per op; the same bytes); another ring's
    Buffer, or rw_flags (which only READ/WRITE take), go as plain READ/WRITE."""
    p = tmp_path / "f"
    p.write_bytes(bytes(range(256)) * 64)
    fd = os.open(p, os.O_RDWR)
    try:
        with Ring(8) as ring, Ring(4) as other:
            (mine,) = ring.register_buffers(1, 4096)
            (theirs,) = other.register_buffers(1, 4096)
            ring.read(fd, mine, 256, user_data=1)
            ring.read(fd, theirs, 512, nbytes=100, user_data=2)
            got = {c.user_data: c for c in ring.wait(2, timeout=5)}
            assert got[1].op == "read_fixed" and got[1].res == 4096
            assert got[2].op == "read" and got[2].res == 100
            assert bytes(theirs)[:100] == (bytes(range(256)) * 2)[:100]
            memoryview(mine)[:4] = b"ABCD"
            ring.write(fd, mine, 8192, nbytes=4, user_data=4)
            ring.write(fd, mine, 8196, nbytes=4, rw_flags=os.RWF_DSYNC, user_data=5)
            got |= {c.user_data: c for c in ring.wait(2, timeout=5)}
            assert got[4].op == "write_fixed" and got[5].op == "write"
            assert os.pread(fd, 8, 8192) == b"ABCDABCD"
    finally:
        os.close(fd)
