"""The GIL is released while a ring waits in the kernel."""

from __future__ import annotations

import os
import threading
import time

from uringkit import Ring

from conftest import need_ops


def test_wait_releases_gil(pipe: tuple[int, int]) -> None:
    need_ops("read")
    r, w = pipe
    with Ring(8) as ring:
        ring.read(r, bytearray(4))
        result: list[object] = []
        t = threading.Thread(target=lambda: result.extend(ring.wait(1, timeout=10)))
        t.start()
        time.sleep(0.05)
        # If the waiting thread held the GIL, this loop could not run.
        n = 0
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            n += 1
        assert n > 1000
        assert t.is_alive() and not result
        os.write(w, b"done")
        t.join(10)
        assert len(result) == 1


def test_wait_is_interruptible(pipe: tuple[int, int]) -> None:
    need_ops("read")
    import signal

    r, _ = pipe
    fired: list[int] = []

    class Stop(Exception):
        pass

    def handler(signum: int, frame: object) -> None:
        fired.append(signum)
        raise Stop

    old = signal.signal(signal.SIGALRM, handler)
    try:
        with Ring(8) as ring:
            ring.read(r, bytearray(4))
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            t = time.monotonic()
            try:
                ring.wait(1, timeout=10)
                raise AssertionError("wait was not interrupted")
            except Stop:
                pass
            assert time.monotonic() - t < 5 and fired
            assert ring.in_flight == 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
