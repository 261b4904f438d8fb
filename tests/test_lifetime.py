"""Memory an in-flight op uses stays alive until its completion, whatever Python does;
closing a ring with ops in flight cancels them and frees nothing early."""

from __future__ import annotations

import gc
import os
import select
import sys
import time

import pytest

from uringkit import Ring

from conftest import need_ops, wait_all


def test_dropped_bytearray_survives(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read")
    r, w = pipe
    buf = bytearray(16)
    before = sys.getrefcount(buf)
    ring.read(r, buf, user_data=1)
    ring.submit()
    assert sys.getrefcount(buf) > before  # the ring holds it
    with pytest.raises(BufferError):
        buf.extend(b"x")  # exported: its memory cannot move while the read is in flight
    del buf
    gc.collect()
    garbage = [bytearray(16) for _ in range(1000)]  # reuse freed memory if it were freed
    os.write(w, b"arrived intact!!")
    (c,) = ring.wait(1, timeout=5)
    assert c.res == 16 and bytes(c.buffer) == b"arrived intact!!"
    del garbage


def test_dropped_memoryview_survives(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("read")
    r, w = pipe
    ring.read(r, memoryview(bytearray(8))[2:], user_data=1)
    gc.collect()
    os.write(w, b"abcdef")
    (c,) = ring.wait(1, timeout=5)
    assert bytes(c.buffer) == b"abcdef"


def test_dropped_bytes_for_write(ring: Ring, pipe: tuple[int, int]) -> None:
    need_ops("write")
    r, w = pipe
    os.set_blocking(w, False)
    filler = b"f" * 65536
    while True:  # fill the pipe so the write has to wait
        try:
            os.write(w, filler)
        except BlockingIOError:
            break
    ring.write(w, b"".join([b"payload-", str(12345).encode()]), user_data=1)
    ring.submit()
    gc.collect()
    drained = b""
    while len(drained) < 65536:
        drained += os.read(r, 65536)
    (c,) = ring.wait(1, timeout=5)
    assert c.res == 13
    rest = b""
    while not rest.endswith(b"payload-12345"):
        rest += os.read(r, 1 << 20)


def test_close_with_ops_in_flight(pipe: tuple[int, int]) -> None:
    need_ops("read", "timeout")
    r, w = pipe
    ring = Ring(8)
    keep = bytearray(8)
    ring.read(r, keep, user_data=1)
    ring.timeout(60, user_data=2)
    ring.submit()
    assert ring.in_flight == 2
    t = time.monotonic()
    ring.close()
    assert time.monotonic() - t < 5
    assert ring.closed
    os.write(w, b"late")  # nobody reads into the freed ring's buffers now
    assert os.read(r, 10) == b"late"
    assert keep == bytearray(8)


def test_single_issuer_ring_closed_from_another_thread(pipe: tuple[int, int]) -> None:
    """A SINGLE_ISSUER ring cannot be driven from another thread (every enter fails with
    EEXIST): closing it there leaves the ops to the kernel to cancel, keeps their memory,
    and says so with a ResourceWarning instead of raising or waiting."""
    import threading

    need_ops("read")
    r, w = pipe
    made: list[Ring] = []
    keep = bytearray(8)

    def owner() -> None:
        ring = Ring(8, single_issuer=True, defer_taskrun=True)
        ring.read(r, keep, user_data=1)
        ring.submit()
        made.append(ring)

    th = threading.Thread(target=owner)
    th.start()
    th.join()
    (ring,) = made
    with pytest.warns(ResourceWarning, match="1 ops in flight were left to the kernel"):
        ring.close()
    assert ring.closed
    os.write(w, b"late")  # the ring's fd is closed: its read was cancelled, not left pending
    assert os.read(r, 10) == b"late"
    assert keep == bytearray(8)


def test_single_issuer_ring_with_only_polls_closed_from_another_thread(
    pipe: tuple[int, int],
) -> None:
    """Closed from another thread with only polls in flight (no memory the kernel could
    touch: what an event loop's selector holds), nothing is leaked and nothing warned."""
    import threading
    import warnings

    need_ops("poll_add")
    r, w = pipe
    made: list[Ring] = []

    def owner() -> None:
        ring = Ring(8, single_issuer=True, defer_taskrun=True)
        ring.poll_add(r, select.POLLIN, user_data=1)
        ring.poll_add(r, select.POLLIN, multishot=True, user_data=2)
        ring.submit()
        made.append(ring)

    th = threading.Thread(target=owner)
    th.start()
    th.join()
    (ring,) = made
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ring.close()
    assert ring.closed
    os.write(w, b"x")
    assert os.read(r, 1) == b"x"


def test_close_with_queued_unsubmitted() -> None:
    need_ops("nop")
    ring = Ring(8)
    for _ in range(5):
        ring.nop()
    ring.close()
    assert ring.closed


def test_garbage_collected_ring_with_ops_in_flight(pipe: tuple[int, int]) -> None:
    need_ops("read")
    ring = Ring(8)
    ring.read(pipe[0], bytearray(8))
    ring.submit()
    del ring
    gc.collect()
    os.write(pipe[1], b"x")
    assert os.read(pipe[0], 1) == b"x"


def test_many_rounds_no_leak(ring: Ring, rfd: int) -> None:
    need_ops("read")
    import resource

    def rss() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    for _ in range(200):
        for i in range(32):
            ring.read(rfd, bytearray(4096), i * 4096)
        wait_all(ring, 32)
    start = rss()
    for _ in range(2000):
        for i in range(32):
            ring.read(rfd, bytearray(4096), i * 4096)
        wait_all(ring, 32)
    assert rss() - start < 50_000  # KiB; 64K ops x 4 KiB would be 256 MiB if leaked
