"""Ring.dispatch: completions resolve their futures in native code (the event-loop hot
path), the rest come back as Completion objects; errors keep their explanation."""

from __future__ import annotations

import asyncio
import contextvars
import errno
import os
import time
from pathlib import Path

import pytest

from uringkit import Completion, Ring


def _random_file(tmp_path: Path, size: int) -> tuple[bytes, int]:
    """`size` random bytes in a file, and a read-only fd of it."""
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)
    return data, os.open(p, os.O_RDONLY)


def test_dispatch_resolves_futures_and_returns_the_rest(tmp_path: Path) -> None:
    data, fd = _random_file(tmp_path, 4096)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        with Ring(64) as ring:
            bufs = {ud: bytearray(100) for ud in range(1, 11)}
            futs: dict[int, asyncio.Future[object]] = {}
            for ud, b in bufs.items():
                ring.read(fd, b, (ud - 1) * 100, user_data=ud)
                futs[ud] = loop.create_future()
            ring.read(987654, bytearray(10), 0, user_data=50)  # EBADF
            futs[50] = loop.create_future()
            futs[3].cancel()  # its task went away: skipped, not an error
            ring.nop(user_data=99)  # not in the dict: returned as a Completion
            all_futs = dict(futs)
            ring.submit()
            rest: list[Completion] = []
            deadline = time.monotonic() + 5
            while (futs or not rest) and time.monotonic() < deadline:
                rest += ring.dispatch(futs)
            assert futs == {} and [c.user_data for c in rest] == [99]
            for ud, b in bufs.items():
                if ud != 3:
                    assert all_futs[ud].result() == 100
                    assert b == data[(ud - 1) * 100 : ud * 100]
            failed = all_futs[50].result()
            assert isinstance(failed, Completion) and failed.res == -errno.EBADF
            assert all_futs[3].cancelled()

    asyncio.run(go())
    os.close(fd)


def test_dispatch_values(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"x" * 300)
    fd = os.open(p, os.O_RDONLY)

    async def go() -> tuple[object, object]:
        loop = asyncio.get_running_loop()
        with Ring(8) as ring:
            ok: asyncio.Future[object] = loop.create_future()
            bad: asyncio.Future[object] = loop.create_future()
            ring.read(fd, bytearray(200), 200, user_data=1)  # 100 bytes before EOF
            ring.read(987654, bytearray(10), 0, user_data=2)
            ring.submit()
            futs = {1: ok, 2: bad}
            while futs:
                ring.dispatch(futs)
            return ok.result(), bad.result()

    short, failed = asyncio.run(go())
    os.close(fd)
    assert short == 100  # plain reads resolve to the int result
    assert isinstance(failed, Completion) and failed.res == -errno.EBADF


def test_read_future_queues_creates_and_submits_early(tmp_path: Path) -> None:
    """Ring.read_future: one call queues the READ, creates the loop's future and files it
    under a user_data of the ring's own range; every `early` queued SQEs are submitted
    at once; dispatch resolves them (errors as the Completion)."""
    data, fd = _random_file(tmp_path, 8192)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        with Ring(64) as ring:
            futs: dict[int, asyncio.Future[object]] = {}
            bufs = [bytearray(512) for _ in range(10)]
            before = ring.submit_calls
            got = [
                ring.read_future(fd, b, 512, i * 512, loop.create_future, futs, 4)
                for i, b in enumerate(bufs)
            ]
            # 10 queued with early=4: two submissions happened, 2 SQEs still pending
            assert ring.submit_calls - before == 2 and ring.pending == 2
            assert len(set(futs)) == 10 and all(ud >= 1 << 62 for ud in futs)
            assert [futs[ud] for ud in sorted(futs)] == got
            bad = ring.read_future(987654, bytearray(8), 8, 0, loop.create_future, futs)  # EBADF
            ring.submit()
            deadline = time.monotonic() + 5
            while futs and time.monotonic() < deadline:
                assert ring.dispatch(futs) == []
            assert [f.result() for f in got] == [512] * 10
            assert b"".join(bufs) == data[: 10 * 512]
            failed = bad.result()
            assert isinstance(failed, Completion) and failed.res == -errno.EBADF

    asyncio.run(go())
    os.close(fd)


def test_read_future_into_a_registered_buffer_is_read_fixed(tmp_path: Path) -> None:
    """A Buffer registered with the ring makes read_future queue READ_FIXED (no page
    pinning per read): the data lands in the ring's memory; a Buffer registered with
    another ring is refused with the reason, as read_fixed refuses it."""
    data, fd = _random_file(tmp_path, 8192)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        with Ring(16) as ring, Ring(4) as other:
            bufs = ring.register_buffers(2, 4096)
            futs: dict[int, asyncio.Future[object]] = {}
            got = [
                ring.read_future(fd, b, 4096 - i * 96, i * 4096, loop.create_future, futs)
                for i, b in enumerate(bufs)
            ]
            ring.submit()
            deadline = time.monotonic() + 5
            while futs and time.monotonic() < deadline:
                assert ring.dispatch(futs) == []
            assert [f.result() for f in got] == [4096, 4000]
            assert bytes(bufs[0]) == data[:4096]
            assert bytes(bufs[1])[:4000] == data[4096 : 4096 + 4000]
            foreign = other.register_buffers(1, 4096)[0]
            try:
                ring.read_future(fd, foreign, 4096, 0, loop.create_future, futs)
            except ValueError as e:
                assert "registered" in str(e)
            else:
                raise AssertionError("a foreign Buffer was accepted")
            assert not futs

    asyncio.run(go())
    os.close(fd)


def test_read_bytes_future_lends_pool_buffers(tmp_path: Path) -> None:
    """Ring.read_bytes_future: READ_FIXED into a buffer of the ring's read pool; dispatch
    resolves the future with the bytes read (short at end of file) or the Completion of
    a failed read, and the buffer is back in the pool once the completion is handled.
    None — nothing queued — without a pool, for reads larger than its buffers, or when
    every buffer is lent out."""
    data, fd = _random_file(tmp_path, 10_000)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        with Ring(16) as ring:
            futs: dict[int, asyncio.Future[object]] = {}
            assert ring.read_bytes_future(fd, 100, 0, loop.create_future, futs) is None
            assert ring.read_pool_free is None
            ring.register_read_pool(3, 4096)
            with pytest.raises(ValueError, match="already registered"):
                ring.register_buffers(1, 4096)
            assert ring.read_bytes_future(fd, 4097, 0, loop.create_future, futs) is None
            a = ring.read_bytes_future(fd, 4096, 0, loop.create_future, futs)
            b = ring.read_bytes_future(fd, 4096, 8192, loop.create_future, futs)  # short
            bad = ring.read_bytes_future(987654, 10, 0, loop.create_future, futs)  # EBADF
            assert a is not None and b is not None and bad is not None
            assert ring.read_pool_free == 0
            assert ring.read_bytes_future(fd, 10, 0, loop.create_future, futs) is None
            ring.submit()
            deadline = time.monotonic() + 5
            while futs and time.monotonic() < deadline:
                assert ring.dispatch(futs) == []
            assert a.result() == data[:4096]
            assert b.result() == data[8192:]
            failed = bad.result()
            assert isinstance(failed, Completion) and failed.res == -errno.EBADF
            assert ring.read_pool_free == 3
            # a cancelled read keeps its buffer until its completion arrives
            c = ring.read_bytes_future(fd, 4096, 4096, loop.create_future, futs)
            assert c is not None and ring.read_pool_free == 2
            ud = next(k for k, v in futs.items() if v is c)
            del futs[ud]
            c.cancel()
            ring.submit()
            leftovers = ring.wait(1, timeout=5)
            assert [x.user_data for x in leftovers] == [ud]
            assert ring.read_pool_free == 3

    asyncio.run(go())
    os.close(fd)


def test_dispatch_hands_back_the_single_waiter_to_run(tmp_path: Path) -> None:
    """With a `wake` list: a future with exactly one done-callback gets its result, loses
    the callback to the list (nothing is scheduled through the loop); futures with no or
    several callbacks, and cancelled ones, keep asyncio's own scheduling."""
    data, fd = _random_file(tmp_path, 4096)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, object]] = []
        with Ring(64) as ring:
            futs: dict[int, asyncio.Future[object]] = {}
            for ud in (1, 2, 3, 4):
                ring.read(fd, bytearray(10), 0, user_data=ud)
                futs[ud] = loop.create_future()
            futs[1].add_done_callback(lambda f: seen.append(("one", f.result())))
            futs[2].add_done_callback(lambda f: seen.append(("two-a", f.result())))
            futs[2].add_done_callback(lambda f: seen.append(("two-b", f.result())))
            futs[4].add_done_callback(lambda f: seen.append(("cancelled", None)))
            futs[4].cancel()
            all_futs = dict(futs)
            ring.submit()
            wake: list[object] = []
            deadline = time.monotonic() + 5
            while futs and time.monotonic() < deadline:
                assert ring.dispatch(futs, wake) == []
            assert all(f.done() for f in all_futs.values())
            # only future 1 had a single waiter: handed back, not scheduled
            assert len(wake) == 1
            cb, fut, ctx = wake[0]  # type: ignore[misc]
            assert fut is all_futs[1] and isinstance(ctx, contextvars.Context)
            await asyncio.sleep(0)  # the loop runs what was scheduled: 2's two, 4's
            assert sorted(k for k, _ in seen) == ["cancelled", "two-a", "two-b"]
            ctx.run(cb, fut)
            assert ("one", 10) in seen and all_futs[3].result() == 10

    asyncio.run(go())
    os.close(fd)


@pytest.mark.parametrize("direct_wake", ["0", "1"])
def test_tasks_woken_by_the_ring_keep_context_and_identity(
    tmp_path: Path, direct_wake: str
) -> None:
    """A task resumed inside the loop's wake-up (URINGKIT_DIRECT_WAKE, the default) sees
    its own contextvars and is asyncio's current task, as when resumed from the ready
    queue; cancelling one mid-read still cancels only that one."""
    import subprocess
    import sys

    data, fd = _random_file(tmp_path, 1 << 20)
    os.close(fd)
    code = f"""
import asyncio, contextvars, sys
from uringkit import aio
var = contextvars.ContextVar("var")
async def reader(f, i):
    var.set(i)
    me = asyncio.current_task()
    got = []
    for k in range(40):
        got.append(await f.read_at(4096, ((i * 40 + k) % 256) * 4096))
        assert var.get() == i and asyncio.current_task() is me, "context or task lost"
    return got
async def main():
    f = await aio.open({str(tmp_path / "f")!r}, "rb", direct=True)
    tasks = [asyncio.create_task(reader(f, i)) for i in range(32)]
    await asyncio.sleep(0)
    tasks[5].cancel()
    res = await asyncio.gather(*tasks, return_exceptions=True)
    await f.close()
    assert isinstance(res[5], asyncio.CancelledError), res[5]
    data = open({str(tmp_path / "f")!r}, "rb").read()
    for i, got in enumerate(res):
        if i != 5:
            assert got == [data[((i*40+k)%256)*4096:][:4096] for k in range(40)]
    print("ok")
asyncio.run(main())
"""
    env = {**os.environ, "URINGKIT_DIRECT_WAKE": direct_wake}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if "EINVAL" in r.stderr and "O_DIRECT" in r.stderr:
        pytest.skip("no O_DIRECT on this filesystem")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_system_exit_in_a_woken_task_strands_no_other_task(tmp_path: Path) -> None:
    """A task resumed inside the reap that raises SystemExit leaves the loop; the tasks
    of the same reap not resumed yet go back to the ready queue, so a program that
    catches it and runs the loop on sees them finish (instead of waiting forever for
    wake-ups that were taken off their futures)."""
    import subprocess
    import sys

    data, fd = _random_file(tmp_path, 1 << 20)
    os.close(fd)
    code = f"""
import asyncio, sys
from uringkit import aio
async def reader(f, i, stop):
    for k in range(40):
        await f.read_at(4096, ((i * 7 + k) % 256) * 4096)
        if stop and k == 3:
            sys.exit(7)
    return i
loop = asyncio.new_event_loop()
f = loop.run_until_complete(aio.open({str(tmp_path / "f")!r}, "rb", direct=True))
tasks = [loop.create_task(reader(f, i, i == 5)) for i in range(32)]
try:
    loop.run_until_complete(asyncio.gather(*tasks))
except SystemExit:
    pass
others = asyncio.gather(*(t for i, t in enumerate(tasks) if i != 5))
got = loop.run_until_complete(asyncio.wait_for(others, 20))
assert got == [i for i in range(32) if i != 5], got
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if "EINVAL" in r.stderr and "O_DIRECT" in r.stderr:
        pytest.skip("no O_DIRECT on this filesystem")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_dispatch_waits_like_wait() -> None:
    """min_complete > 0: submit, block until that many completions (resolved or
    returned) are ready or the timeout passes — an event loop's select in one call."""

    async def go() -> None:
        loop = asyncio.get_running_loop()
        with Ring(8) as ring:
            fut = loop.create_future()
            ring.timeout(0.05, user_data=1)  # resolves fut (-ETIME: the Completion)
            ring.nop(user_data=2)  # returned
            t = time.monotonic()
            rest = ring.dispatch({1: fut}, None, 2, 5.0)
            assert time.monotonic() - t >= 0.04  # it waited for the timeout's completion
            assert [c.user_data for c in rest] == [2]
            assert fut.result().res == -errno.ETIME
            t = time.monotonic()
            assert ring.dispatch({}, None, 1, 0.05) == []  # nothing came: the timeout
            assert time.monotonic() - t >= 0.04
            with pytest.raises(ValueError, match="timeout must be"):
                ring.dispatch({}, None, 1, -1.0)

    asyncio.run(go())


def test_dispatch_interrupted_by_a_raising_signal_handler_loses_nothing() -> None:
    """A signal handler that raises while dispatch waits: what was already reaped is
    not lost — its futures resolved the plain way (callbacks scheduled, nothing added
    to the wake list the caller will not run now), the other completions handed out
    first by the next call."""
    import signal

    class Alarm(Exception):
        pass

    def raise_alarm(*_: object) -> None:
        raise Alarm

    async def go() -> None:
        loop = asyncio.get_running_loop()
        woke: list[object] = []

        async def waiter(f: asyncio.Future[object]) -> None:
            woke.append(await f)

        with Ring(8) as ring:
            fut = loop.create_future()
            task = asyncio.ensure_future(waiter(fut))
            await asyncio.sleep(0)  # (the task now waits on fut)
            ring.nop(user_data=1)  # completes at once: resolved
            ring.nop(user_data=2)  # completes at once: returned
            ring.timeout(10, user_data=3)  # what dispatch is left waiting for
            wake: list[object] = []
            old = signal.signal(signal.SIGALRM, raise_alarm)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            try:
                with pytest.raises(Alarm):
                    ring.dispatch({1: fut}, wake, 3, 5.0)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
            assert fut.result() == 0 and wake == []
            await task  # its callback was scheduled: it runs
            assert woke == [0]
            assert [c.user_data for c in ring.dispatch({})] == [2]
            ring.cancel(3)
            ring.wait(2, 5.0)

    asyncio.run(go())
