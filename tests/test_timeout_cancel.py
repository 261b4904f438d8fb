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


def test_timeout_remove(ring: Ring) -> None:
    need_ops("timeout", "timeout_remove")
    ring.timeout(10, user_data=3)
    ring.submit()
    ring.timeout_remove(3, user_data=4)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {3: -errno.ECANCELED, 4: 0}
    ring.timeout_remove(3, user_data=5)  # gone: nothing to remove
    assert ring.wait(1)[0].res == -errno.ENOENT


def test_timeout_update_fires_sooner(ring: Ring) -> None:
    need_ops("timeout", "timeout_remove")
    t = time.monotonic()
    ring.timeout(30, user_data=3)
    ring.submit()
    ring.timeout_update(3, 0.02, user_data=4)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got == {3: -errno.ETIME, 4: 0}
    assert time.monotonic() - t < 5
    with pytest.raises(ValueError, match="seconds"):
        ring.timeout_update(3, -1)


def test_poll_add_oneshot_and_multishot(ring: Ring) -> None:
    """A one-shot poll completes once with the ready events; a multishot one completes
    (more=True) per wake-up until poll_remove, then with -ECANCELED and more=False."""
    import select
    import socket

    need_ops("poll_add", "poll_remove")
    a, b = socket.socketpair()
    try:
        ring.poll_add(a, select.POLLIN, user_data=1)
        assert ring.wait(1, timeout=0.05) == []  # nothing to read yet
        b.send(b"x")
        (c,) = ring.wait(1, timeout=5)
        assert c.user_data == 1 and c.res & select.POLLIN and not c.more
        a.recv(10)

        ring.poll_add(a.fileno(), select.POLLIN, multishot=True, user_data=2)
        ring.submit()
        seen = []
        for i in range(3):
            b.send(b"y")
            (c,) = ring.wait(1, timeout=5)
            assert c.user_data == 2 and c.res & select.POLLIN and c.more, (i, c)
            seen.append(c)
            a.recv(10)
        ring.poll_remove(2, user_data=3)
        got = {c.user_data: c for c in wait_all(ring, 2)}
        assert got[3].res == 0
        assert got[2].res == -errno.ECANCELED and not got[2].more
        ring.poll_remove(2, user_data=4)
        assert ring.wait(1)[0].res == -errno.ENOENT
    finally:
        a.close()
        b.close()


def test_timeout_remove_finds_the_timeout_among_ops_sharing_its_user_data(
    ring: Ring, pipe: tuple[int, int]
) -> None:
    """user_data defaults to 0 for every op: removal targets the timeout, not a read
    that was queued first with the same user_data."""
    need_ops("read", "timeout", "timeout_remove", "cancel")
    ring.read(pipe[0], bytearray(4))  # user_data=0, stays in flight
    ring.timeout(30)  # user_data=0 too
    ring.submit()
    ring.timeout_remove(0, user_data=9)
    got = sorted((c.user_data, c.res) for c in wait_all(ring, 2))
    assert got == [(0, -errno.ECANCELED), (9, 0)]
    ring.cancel(0, user_data=10)  # now the read
    got = sorted((c.user_data, c.res) for c in wait_all(ring, 2))
    assert got == [(0, -errno.ECANCELED), (10, 0)]
