"""Ring setup: sizes, flags, validation, monitoring properties, close semantics."""

from __future__ import annotations

import pytest

from uringkit import Ring

from conftest import need_ops


def test_defaults_and_sizes() -> None:
    need_ops("nop")
    with Ring(100) as r:
        assert r.entries == 128  # rounded up to a power of two
        assert r.cq_entries == 256  # CQ = 2 x SQ by default
        assert r.sq_space_left == 128
        assert r.in_flight == 0 and r.pending == 0 and r.cq_ready == 0
        assert "nodrop" in r.features
        assert r.fileno() > 0
        assert r.config["entries"] == 100


def test_cq_entries() -> None:
    need_ops("nop")
    with Ring(8, cq_entries=64) as r:
        assert r.cq_entries == 64


@pytest.mark.parametrize("entries", [0, -1, 32769, 10**9])
def test_bad_entries(entries: int) -> None:
    with pytest.raises(ValueError, match="entries must be between 1 and 32768"):
        Ring(entries)


def test_bad_cq_entries() -> None:
    with pytest.raises(ValueError, match="cq_entries"):
        Ring(64, cq_entries=8)


def test_defer_taskrun_needs_single_issuer() -> None:
    with pytest.raises(ValueError, match="single_issuer"):
        Ring(8, defer_taskrun=True)


def test_sq_thread_cpu_needs_sqpoll() -> None:
    with pytest.raises(ValueError, match="sqpoll"):
        Ring(8, sq_thread_cpu=0)


def test_use_after_close() -> None:
    need_ops("nop")
    r = Ring(8)
    r.close()
    r.close()  # idempotent
    assert r.closed
    with pytest.raises(ValueError, match="closed Ring"):
        r.nop()
    with pytest.raises(ValueError, match="closed Ring"):
        r.wait(1)
    with pytest.raises(ValueError, match="closed Ring"):
        _ = r.in_flight
    assert repr(r) == "Ring(closed)"


def test_context_manager_closes() -> None:
    need_ops("nop")
    with Ring(8) as r:
        r.nop()
    assert r.closed


@pytest.mark.parametrize(
    "flags",
    [
        {"coop_taskrun": True},
        {"single_issuer": True},
        {"single_issuer": True, "defer_taskrun": True},
        {"sqpoll": True, "sq_thread_idle_ms": 50},
        {"sqpoll": True, "sq_thread_cpu": 0},
    ],
)
def test_flag_combinations_work(flags: dict[str, object]) -> None:
    need_ops("nop")
    with Ring(16, **flags) as r:  # type: ignore[arg-type]
        for i in range(40):
            r.nop(user_data=i)
        got = []
        while len(got) < 40:
            got += r.wait(40 - len(got), timeout=5)
        assert sorted(c.user_data for c in got) == list(range(40))


def test_wait_never_hangs_on_nothing() -> None:
    need_ops("nop")
    with Ring(8) as r:
        assert r.wait(5) == []  # nothing in flight: returns at once
        r.nop(user_data=1)
        got = r.wait(5)  # only one can ever arrive
        assert [c.user_data for c in got] == [1]


def test_wait_timeout(pipe: tuple[int, int]) -> None:
    need_ops("read")
    import time

    with Ring(8) as r:
        r.read(pipe[0], bytearray(10))
        t = time.monotonic()
        assert r.wait(1, timeout=0.2) == []
        assert 0.15 < time.monotonic() - t < 2
        with pytest.raises(ValueError, match="timeout"):
            r.wait(1, timeout=-1)


def test_completion_fields() -> None:
    need_ops("nop")
    with Ring(8) as r:
        r.nop(user_data=2**64 - 2)
        (c,) = r.wait(1)
        assert c.user_data == 2**64 - 2
        assert c.res == 0 and c.ok and c.errno is None
        assert c.op == "nop" and not c.more and not c.notif and c.buffer_id is None
        assert c.raise_for_error() == 0
        assert "nop" in repr(c)
