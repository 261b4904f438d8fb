"""Bad input and kernel refusals get clear Python exceptions, never a crash or a hang."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from uringkit import Fixed, Ring, aligned_buffer

from conftest import need_ops


def test_closed_fd_is_ebadf_on_completion(ring: Ring, tmp_path: Path) -> None:
    need_ops("read")
    fd = os.open(tmp_path / "c", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    ring.read(fd, bytearray(4), 0)
    (c,) = ring.wait(1)
    assert c.errno == errno.EBADF
    with pytest.raises(OSError) as ei:
        c.raise_for_error()
    assert ei.value.errno == errno.EBADF and "read" in str(ei.value)


def _direct_file(tmp_path: Path) -> tuple[int, int]:
    p = tmp_path / "direct.bin"
    p.write_bytes(os.urandom(1 << 16))
    try:
        fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    except OSError as e:
        pytest.skip(f"{tmp_path} refuses O_DIRECT: {e}")
    from uringkit._native import dio_alignment

    al = dio_alignment(fd)
    return fd, (al[1] if al else 512)


def test_misaligned_o_direct_explained(ring: Ring, tmp_path: Path) -> None:
    need_ops("read")
    fd, align = _direct_file(tmp_path)
    try:
        good = aligned_buffer(8192)
        ring.read(fd, good, 0, nbytes=4096)
        assert ring.wait(1)[0].res == 4096
        bad = memoryview(good)[1:]  # address off by one byte
        ring.read(fd, bad, 0, nbytes=4096)
        (c,) = ring.wait(1)
        assert c.errno == errno.EINVAL
        assert c.message is not None and "align" in c.message and "O_DIRECT" in c.message
        with pytest.raises(OSError, match="aligned") as ei:
            c.raise_for_error()
        assert ei.value.errno == errno.EINVAL
        ring.read(fd, good, 100, nbytes=4096)  # offset not a block multiple
        (c,) = ring.wait(1)
        assert c.errno == errno.EINVAL and "offset 100" in (c.message or "")
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.nop(user_data=-1), r"user_data must be between 0 and 2\*\*64 - 1 \(got -1\)"),
        (lambda r: r.nop(user_data=2**64), r"user_data must be between 0 and 2\*\*64 - 1"),
        (
            lambda r: r.read(0, bytearray(1), 2**63),
            r"offset must be between 0 and 2\*\*63 - 1, or -1",
        ),
        (lambda r: r.read(0, bytearray(1), 0, nbytes=-1), r"nbytes must be between 0 and"),
        (lambda r: r.wait(-1), r"min_complete must be between 0 and"),
        (lambda r: r.completions(-5), r"max must be between 0 and"),
        (lambda r: r.register_files_sparse(-1), r"count must be between 0 and 2\*\*32 - 1"),
        (lambda r: Ring(2**70), r"entries must be between 1 and 32768"),
        (lambda r: Fixed(-1), r"index must be between 0 and 2\*\*32 - 1"),
    ],
)
def test_out_of_range_int_names_the_argument(ring: Ring, call: Any, message: str) -> None:
    """PyO3 alone says "can't convert negative int to unsigned" without saying which
    argument; every int argument of the native API names itself and its range."""
    with pytest.raises(OverflowError, match=message):
        call(ring)


def test_with_on_a_closed_ring_is_an_error() -> None:
    r = Ring(4)
    r.close()
    with pytest.raises(ValueError, match="closed Ring"), r:
        pass


def test_non_int_names_the_argument(ring: Ring) -> None:
    with pytest.raises(TypeError, match="user_data must be an int, not str"):
        ring.nop(user_data="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="offset must be an int, not float"):
        ring.read(0, bytearray(1), 1.5)  # type: ignore[arg-type]
    ring.nop(user_data=True)  # bool is an int, as everywhere in Python
    assert ring.wait(1)[0].user_data == 1


def test_iopoll_without_poll_queues_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """IOPOLL needs a device with poll queues. Where the device has them, the read works;
    where it has none (this VM's virtio disk) the completion carries EOPNOTSUPP with an
    explanation, and the test reports that as the skip reason."""
    need_ops("read")
    fd, _ = _direct_file(tmp_path)
    try:
        with Ring(8, iopoll=True) as r:
            buf = aligned_buffer(4096)
            r.read(fd, buf, 0)
            got = r.wait(1, timeout=10)
            assert got, "IOPOLL read neither completed nor failed within 10 s"
            (c,) = got
            if c.errno == errno.EOPNOTSUPP:
                assert "poll queues" in (c.message or "")
                pytest.skip("IOPOLL I/O: EOPNOTSUPP, the device has no poll queues")
            assert c.res == 4096
    finally:
        os.close(fd)


def test_io_len_too_large(ring: Ring) -> None:
    big = memoryview(bytearray(1)).cast("B")
    with pytest.raises(ValueError, match="nbytes"):
        ring.write(1, big, 0, nbytes=2)


def test_bad_fixed_index_is_ebadf(ring: Ring) -> None:
    need_ops("read")
    from uringkit import Fixed

    ring.read(Fixed(5), bytearray(1), 0)  # no file table at all
    (c,) = ring.wait(1)
    assert c.errno in (errno.EBADF, errno.ENXIO)


CHILD_BLOCKED = """
import errno, json, sys
from uringkit.testing import block_io_uring
block_io_uring(errno.{err})
from uringkit import Ring
out = {{}}
for kw in ({{}}, {{"sqpoll": True}}):
    try:
        Ring(8, **kw)
        out[str(kw)] = "created"
    except OSError as e:
        out[str(kw)] = [e.errno, str(e)]
print(json.dumps(out))
"""


@pytest.mark.parametrize("err", ["EPERM", "ENOSYS", "ENOMEM"])
def test_blocked_io_uring_is_explained(err: str) -> None:
    """io_uring really blocked by a seccomp filter in a child process."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", CHILD_BLOCKED.format(err=err)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    plain, sq = res["{}"], res["{'sqpoll': True}"]
    code = getattr(errno, err)
    assert plain[0] == code and sq[0] == code
    if err == "EPERM":
        assert "seccomp" in plain[1] or "io_uring_disabled" in plain[1]
        assert "sqpoll=False" in sq[1]  # SQPOLL refusal explained
    elif err == "ENOSYS":
        assert "no io_uring" in plain[1]
    else:
        assert "RLIMIT_MEMLOCK" in plain[1]
    assert "falls back" in plain[1] or "RLIMIT_MEMLOCK" in plain[1]
