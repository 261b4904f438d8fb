"""Linked SQEs: IO_LINK stops at a failure (-ECANCELED for the rest); IO_HARDLINK goes on;
link_timeout cancels a slow op."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from uringkit import Ring

from conftest import need_ops, wait_all


def test_link_failure_cancels_rest(ring: Ring, tmp_path: Path) -> None:
    need_ops("write", "fsync", "nop")
    fd = os.open(tmp_path / "x", os.O_RDONLY | os.O_CREAT)  # writes fail: EBADF
    try:
        ring.write(fd, b"data", 0, link=True, user_data=1)
        ring.fsync(fd, datasync=True, link=True, user_data=2)
        ring.nop(user_data=3)
        got = {c.user_data: c.res for c in wait_all(ring, 3)}
        assert got[1] == -errno.EBADF
        assert got[2] == -errno.ECANCELED
        assert got[3] == -errno.ECANCELED
    finally:
        os.close(fd)


def test_short_write_breaks_link(ring: Ring, tmp_path: Path) -> None:
    need_ops("read", "nop")
    fd = os.open(tmp_path / "y", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"abc")
        ring.read(fd, bytearray(100), 0, link=True, user_data=1)  # short: 3 of 100
        ring.nop(user_data=2)
        got = {c.user_data: c.res for c in wait_all(ring, 2)}
        assert got == {1: 3, 2: -errno.ECANCELED}
    finally:
        os.close(fd)


def test_hardlink_continues(ring: Ring, tmp_path: Path) -> None:
    need_ops("write", "nop")
    fd = os.open(tmp_path / "z", os.O_RDONLY | os.O_CREAT)
    try:
        ring.write(fd, b"data", 0, hardlink=True, user_data=1)
        ring.nop(user_data=2)
        got = {c.user_data: c.res for c in wait_all(ring, 2)}
        assert got == {1: -errno.EBADF, 2: 0}
    finally:
        os.close(fd)


def test_write_then_fdatasync_chain(ring: Ring, tmp_path: Path) -> None:
    need_ops("write", "fsync")
    fd = os.open(tmp_path / "d", os.O_RDWR | os.O_CREAT)
    try:
        for i in range(32):
            ring.write(fd, bytes([i]) * 4096, i * 4096, link=True, user_data=2 * i)
            ring.fsync(fd, datasync=True, user_data=2 * i + 1)
        done = wait_all(ring, 64)
        assert all(c.ok for c in done)
        for i in range(32):
            assert os.pread(fd, 4096, i * 4096) == bytes([i]) * 4096
    finally:
        os.close(fd)


def test_link_timeout_cancels_slow_read(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read", "link_timeout")
    ring.read(pipe[0], bytearray(10), link=True, user_data=1)
    ring.link_timeout(0.05, user_data=2)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {1: -errno.ECANCELED, 2: -errno.ETIME}


def test_link_timeout_not_needed(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read", "link_timeout")
    os.write(pipe[1], b"ready")
    ring.read(pipe[0], bytearray(10), link=True, user_data=1)
    ring.link_timeout(5, user_data=2)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {1: 5, 2: -errno.ECANCELED}


def test_skip_success_released_by_chain(ring: Ring, tmp_path: Path) -> None:
    need_ops("write", "fsync")
    fd = os.open(tmp_path / "k", os.O_RDWR | os.O_CREAT)
    try:
        ring.write(fd, b"q" * 100, 0, link=True, skip_success=True, user_data=1)
        ring.fsync(fd, user_data=2)
        got = wait_all(ring, 1)
        assert [c.user_data for c in got] == [2]  # the write posted no CQE
        assert ring.in_flight == 0
        assert os.pread(fd, 200, 0) == b"q" * 100
    finally:
        os.close(fd)
