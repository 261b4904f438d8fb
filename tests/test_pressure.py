"""Queue pressure and completion delivery: SQ full, CQ overflow, SQPOLL wake-up,
COOP/DEFER_TASKRUN task work."""

from __future__ import annotations

import os
import time

from uringkit import Ring

from conftest import need_ops, wait_all


def test_sq_full_submits_and_continues() -> None:
    need_ops("nop")
    with Ring(4) as r:
        for i in range(1000):
            r.nop(user_data=i)
        done = wait_all(r, 1000)
        assert sorted(c.user_data for c in done) == list(range(1000))
        assert r.submit_calls >= 1000 // 4


def test_cq_overflow_loses_nothing() -> None:
    need_ops("nop")
    with Ring(4, cq_entries=8) as r:
        for i in range(500):  # 500 completions into an 8-entry CQ, nobody reaping
            r.nop(user_data=i)
        r.submit()
        done = []
        while len(done) < 500:
            got = r.completions()
            if not got:
                got = r.wait(1, timeout=5)
            done += got
        assert sorted(c.user_data for c in done) == list(range(500))


def _poll(r: Ring, n: int, limit: float = 5.0) -> list:  # type: ignore[type-arg]
    """Non-blocking reaping only: what completions() delivers on its own."""
    out: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + limit
    while len(out) < n and time.monotonic() < deadline:
        out += r.completions()
        time.sleep(0.001)
    return out


def test_sqpoll_wakeup_after_idle() -> None:
    need_ops("nop")
    with Ring(8, sqpoll=True, sq_thread_idle_ms=10) as r:
        r.nop(user_data=1)
        r.submit()
        assert len(_poll(r, 1)) == 1
        time.sleep(0.2)  # the SQ thread goes to sleep and sets NEED_WAKEUP
        r.nop(user_data=2)
        r.submit()  # must wake it
        got = _poll(r, 1)
        assert [c.user_data for c in got] == [2]


def test_sqpoll_file_io(rfd: int) -> None:
    need_ops("read")
    with Ring(8, sqpoll=True, sq_thread_idle_ms=10) as r:
        for round_ in range(3):
            bufs = [bytearray(512) for _ in range(20)]
            for i, b in enumerate(bufs):
                r.read(rfd, b, i * 512, user_data=i)
            done = wait_all(r, 20)
            assert all(c.res == 512 for c in done)
            time.sleep(0.05 * round_)


def _taskrun_case(r: Ring) -> None:
    rd, wr = os.pipe()
    try:
        buf = bytearray(8)
        r.read(rd, buf, user_data=1)
        r.submit()
        assert r.completions() == []
        os.write(wr, b"wake")  # completes via task work, which someone must run
        got = _poll(r, 1)
        assert [c.res for c in got] == [4]
        assert bytes(buf[:4]) == b"wake"
    finally:
        os.close(rd)
        os.close(wr)


def test_coop_taskrun_flag_honoured() -> None:
    need_ops("read")
    with Ring(8, coop_taskrun=True) as r:
        _taskrun_case(r)


def test_defer_taskrun_completions_without_wait() -> None:
    need_ops("read")
    with Ring(8, single_issuer=True, defer_taskrun=True) as r:
        _taskrun_case(r)


def test_defer_taskrun_deferred_work_reaped_with_ready_cqes() -> None:
    """A DEFER_TASKRUN ring signals its eventfd only when its list of deferred
    completions goes from empty to non-empty. A reap that takes the CQEs already posted
    must also run that list, or later completions never signal the eventfd again (an
    event loop waiting on it would hang)."""
    need_ops("read", "nop")
    with Ring(8, single_issuer=True, defer_taskrun=True) as r:
        efd = os.eventfd(0, os.EFD_NONBLOCK)
        rd, wr = os.pipe()
        try:
            r.register_eventfd(efd)
            bufs = [bytearray(8), bytearray(8)]
            r.read(rd, bufs[0], user_data=1)
            r.nop(user_data=2)  # posted at submit: a CQE ready next to the deferred work
            r.submit()
            os.write(wr, b"one")  # the read completes as deferred task work
            assert os.eventfd_read(efd) >= 1
            got = r.completions()
            assert sorted(c.user_data for c in got) == [1, 2]
            r.read(rd, bufs[1], user_data=3)
            r.submit()
            os.write(wr, b"two")
            assert os.eventfd_read(efd) >= 1  # BlockingIOError if it was never signalled
            assert [(c.user_data, c.res) for c in r.completions()] == [(3, 3)]
        finally:
            os.close(rd)
            os.close(wr)
            os.close(efd)
