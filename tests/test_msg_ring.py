"""MSG_RING: one ring posts a completion into another (cross-thread wake-ups)."""

from __future__ import annotations

import threading
import time

import pytest

from uringkit import Ring

from conftest import need_ops


def test_message_arrives_in_the_other_ring(ring: Ring) -> None:
    need_ops("msg_ring")
    with Ring(8) as other:
        ring.msg_ring(other, 7, data=99, user_data=1)
        ring.msg_ring(other.fileno(), -5, data=2**62 - 1, user_data=2)
        sent = {c.user_data: c.res for c in ring.wait(2, timeout=5)}
        assert sent == {1: 0, 2: 0}
        got = {c.user_data: c.res for c in other.wait(2, timeout=5)}
        assert got == {99: 7, 2**62 - 1: -5}
        assert other.in_flight == 0


def test_message_to_itself(ring: Ring) -> None:
    need_ops("msg_ring")
    ring.msg_ring(ring, 3, data=5, user_data=1)
    got = {c.user_data: c.res for c in ring.wait(2, timeout=5)}
    assert got == {1: 0, 5: 3}


def test_wait_with_nothing_in_flight_waits_for_messages(ring: Ring) -> None:
    """A ring with nothing of its own in flight blocks in wait(timeout=…) until another
    thread's ring posts to it; without a timeout it returns at once (nothing could come
    from its own ops)."""
    need_ops("msg_ring")
    with Ring(8) as receiver:
        assert receiver.wait(1) == []
        t0 = time.monotonic()
        assert receiver.wait(1, timeout=0.05) == []
        assert time.monotonic() - t0 >= 0.04

        fd = receiver.fileno()  # (the Ring object is busy in wait() meanwhile)

        busy: list[str] = []

        def send() -> None:
            time.sleep(0.1)
            try:
                ring.msg_ring(receiver)
            except RuntimeError as e:
                busy.append(str(e))
            ring.msg_ring(fd, 1, data=42)
            ring.wait(1, timeout=5)

        th = threading.Thread(target=send)
        th.start()
        t0 = time.monotonic()
        (c,) = receiver.wait(1, timeout=10)
        th.join()
        assert c.user_data == 42 and c.res == 1
        assert 0.05 < time.monotonic() - t0 < 9
        assert busy and "busy in another thread" in busy[0]


def test_bad_arguments(ring: Ring) -> None:
    with pytest.raises(OverflowError, match="data must be between 0 and 2\\*\\*62 - 1"):
        ring.msg_ring(ring, data=2**62)
    with pytest.raises(TypeError, match="target must be a Ring"):
        ring.msg_ring("ring")  # type: ignore[arg-type]
