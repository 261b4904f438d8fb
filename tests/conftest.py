"""Shared fixtures: real rings, real files, real sockets. Nothing is mocked.

A feature the running kernel lacks is skipped with the probe's reason (`need_ops`), never
failed; `test_skips.py` lists what this kernel lacks so a CI log shows it at a glance.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import warnings
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from uringkit import Ring


def _probe() -> frozenset[str] | None:
    try:
        return Ring.probe()
    except OSError:
        return None


PROBED = _probe()

#: the event loops loop-level tests run on (uringkit.loop needs io_uring)
LOOPS = ["asyncio", "uvloop"] + (["uringkit"] if PROBED else [])


def run_on_loop(kind: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """Run `coro` to completion on a new event loop of `kind` (one of LOOPS)."""
    if kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        try:
            return runner.run(coro)
        except BaseException:
            # A failed test leaves transports open; uvloop's close warns about each from
            # a libuv callback, and with those warnings made errors it hangs (seen under
            # pytest): close quietly so the failure is reported instead of a hang.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                runner.close()
            raise
        finally:
            runner.close()
    if kind == "uringkit":
        import uringkit.loop

        return uringkit.loop.run(coro)
    if kind == "uringkit-selector":  # (asyncio's own transports on uringkit.loop)
        import uringkit.loop

        with asyncio.Runner(
            loop_factory=lambda: uringkit.loop.new_event_loop(ring_transports=False)
        ) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


async def read_in_flight(fd: int) -> asyncio.Task[bytes]:
    """A 4-byte uringkit.aio read of `fd` — a FIFO nobody writes to — started on the
    running loop and left in flight on its ring."""
    from uringkit import aio

    f = await aio.open(fd, "rb", closefd=False)
    t = asyncio.ensure_future(f.read(4))
    await asyncio.sleep(0.05)
    return t


def resumed_in_another_thread(
    loop: asyncio.AbstractEventLoop, stuck: asyncio.Task[Any], path: Path
) -> list[Any]:
    """Run `loop` — whose uringkit.aio ring has `stuck` (a read) in flight — from a new
    thread: what awaiting `stuck` raises (the RuntimeError's text) and then what reading
    `path` through uringkit.aio gives, in a list; the loop is closed after. The old
    ring, closed from a thread not its issuer, leaves the read to the kernel and says so
    (a ResourceWarning): the documented behaviour, ignored here."""
    import threading

    from uringkit import aio

    out: list[Any] = []

    async def after() -> None:
        try:
            await asyncio.wait_for(stuck, 5)
        except RuntimeError as e:
            out.append(str(e))
        async with aio.open(path, "rb") as f:
            out.append(await f.read())

    th = threading.Thread(target=loop.run_until_complete, args=(after(),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        th.start()
        th.join(10)
        loop.close()
    return out


@contextlib.contextmanager
def udp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """`with udp_pair() as (a, b):` two UDP sockets bound on 127.0.0.1, non-blocking
    (loop.sock_* require it), closed on the way out."""
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with a, b:
        for s in (a, b):
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        yield a, b


@contextlib.asynccontextmanager
async def connected_pair(
    io: Any,
) -> AsyncIterator[tuple[socket.socket, socket.socket, socket.socket]]:
    """`async with connected_pair(io) as (listener, client, accepted):` TCP sockets on
    127.0.0.1, connected through `io`'s sock_accept/sock_connect — a running loop's, or
    uringkit.aio's. All non-blocking (loop.sock_* require it); the accepted socket's
    address is checked. All three are closed on the way out, failing test or not
    (closing one the test closed already is a no-op)."""
    ls = socket.create_server(("127.0.0.1", 0))
    ls.setblocking(False)
    cl = socket.socket()
    cl.setblocking(False)
    try:
        acc = asyncio.ensure_future(io.sock_accept(ls))
        await io.sock_connect(cl, ls.getsockname())
        conn, addr = await acc
        with conn:
            assert addr == cl.getsockname()
            assert conn.getblocking() is False
            yield ls, cl, conn
    finally:
        cl.close()
        ls.close()


def direct_file(path: Path, data: bytes) -> bytes:
    """Write `data` to `path` and check O_DIRECT works there; skip the test if not."""
    path.write_bytes(data)
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip(f"no O_DIRECT here: {e}")
    return data


def need_ops(*ops: str) -> None:
    """Skip the calling test unless io_uring works and supports every op in `ops`."""
    if PROBED is None:
        pytest.skip("io_uring is unavailable here (io_uring_setup failed)")
    missing = [o for o in ops if o not in PROBED]
    if missing:
        pytest.skip(f"kernel lacks {', '.join(missing)} (IORING_REGISTER_PROBE)")


@pytest.fixture
def ring() -> Iterator[Ring]:
    need_ops("nop")
    r = Ring(64)
    yield r
    r.close()


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(64 * 1024)
    p = tmp_path / "data.bin"
    p.write_bytes(data)
    return p, data


@pytest.fixture
def rfd(data_file: tuple[Path, bytes]) -> Iterator[int]:
    fd = os.open(data_file[0], os.O_RDONLY)
    yield fd
    os.close(fd)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    a = socket.create_connection(srv.getsockname())
    b, _ = srv.accept()
    srv.close()
    yield a, b
    a.close()
    b.close()


def wait_all(ring: Ring, n: int, timeout: float = 5.0) -> list:  # type: ignore[type-arg]
    """Collect exactly n completions (or fail after `timeout`)."""
    out: list = []  # type: ignore[type-arg]
    import time

    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(out)} of {n} completions arrived: {out}"
        out.extend(ring.wait(n - len(out), timeout=left))
    return out


def umount(path: Path) -> None:
    """Unmount a test's small tmpfs. A closed io_uring drops its registered files
    asynchronously, so the first attempts may find the mount busy: retry, then detach."""
    import subprocess
    import time

    for _ in range(50):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
            return
        time.sleep(0.05)
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A real 1 MiB tmpfs (for disk-full tests; another size with indirect
    parametrization, e.g. "10m"); skipped where mounting is not allowed."""

    size = getattr(request, "param", "1m")
    small = tmp_path / "small"
    with _mounted(["-t", "tmpfs", "-o", f"size={size}", "tmpfs"], small, "a small tmpfs"):
        yield small


@contextlib.contextmanager
def _mounted(args: list[str], at: Path, what: str) -> Iterator[None]:
    """`mount ARGS AT` (AT made first) for the block, unmounted after; the test is
    skipped where mounting is not allowed."""
    import subprocess

    at.mkdir()
    m = subprocess.run(["mount", *args, str(at)], capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount {what} here: {m.stderr.strip()}")
    try:
        yield
    finally:
        umount(at)


def evict_file(path: Path) -> None:
    """Write `path` back and drop it from the page cache (its next reads go to the disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def small_ext4(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB ext4 filesystem on a loop device (disk-full tests where O_DIRECT,
    fallocate and delayed allocation behave as on a disk, not as on tmpfs); skipped
    where mkfs.ext4 or loop mounts are not available."""
    import shutil
    import subprocess

    if shutil.which("mkfs.ext4") is None:
        pytest.skip("no mkfs.ext4 here (Debian: e2fsprogs)")
    img = tmp_path / "ext4.img"
    with open(img, "wb") as f:
        f.truncate(4 << 20)
    mkfs = subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True, text=True)
    if mkfs.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {mkfs.stderr.strip()}")
    mnt = tmp_path / "ext4"
    with _mounted(["-o", "loop", str(img)], mnt, "an ext4 image on a loop device"):
        yield mnt
