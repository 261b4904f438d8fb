"""Timeouts and cancellation."""

from __future__ import annotations

import errno
import time

import pytest

from uringkit import Ring

from conftest import need_ops, wait_all


def test_timeout_fires(ring: Ring) -> None:
    need_ops("timeout")
    t = time.monotonic()
    ring.timeout(0.05, user_data=1)
    (c,) = ring.wait(1, timeout=5)
    assert c.res == -errno.ETIME
    assert time.monotonic() - t >= 0.04


def test_timeout_count(ring: Ring) -> None:
    need_ops("timeout", "nop")
    ring.timeout(10, count=2, user_data=1)
    ring.nop(user_data=2)
    ring.nop(user_data=3)
    got = {c.user_data: c.res for c in wait_all(ring, 3)}
    assert got == {1: 0, 2: 0, 3: 0}


def test_bad_seconds(ring: Ring) -> None:
    with pytest.raises(ValueError, match="seconds"):
        ring.timeout(-1)
    with pytest.raises(ValueError, match="seconds"):
        ring.link_timeout(float("nan"))


def test_cancel_by_user_data(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read", "cancel")
    buf = bytearray(10)
    ring.read(pipe[0], buf, user_data=42)
    ring.submit()
    ring.cancel(42, user_data=43)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {42: -errno.ECANCELED, 43: 0}


def test_cancel_nothing_matches(ring: Ring) -> None:
    need_ops("cancel")
    ring.cancel(12345, user_data=1)
    (c,) = ring.wait(1)
    assert c.res == -errno.ENOENT


def test_cancel_all_matching(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read", "cancel")
    for _ in range(3):
        ring.read(pipe[0], bytearray(4), user_data=7)
    ring.submit()
    ring.cancel(7, all=True, user_data=8)
    done = wait_all(ring, 4)
    assert sorted(c.res for c in done if c.user_data == 7) == [-errno.ECANCELED] * 3
    assert ring.in_flight == 0


def test_cancel_by_fd(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read", "cancel")
    ring.read(pipe[0], bytearray(4), user_data=1)
    ring.read(pipe[0], bytearray(4), user_data=2)
    ring.submit()
    ring.cancel(fd=pipe[0], all=True, user_data=3)
    got = {c.user_data: c.res for c in wait_all(ring, 3)}
    assert got[1] == got[2] == -errno.ECANCELED
    assert got[3] == 2  # number cancelled


def test_cancel_args(ring: Ring) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ring.cancel()
    with pytest.raises(ValueError, match="exactly one"):
        ring.cancel(1, fd=0)
