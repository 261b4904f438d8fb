"""Sockets for asyncio through the event loop's io_uring: `loop.sock_*`'s signatures.

    from uringkit import aio
    conn, addr = await aio.sock_accept(listener)
    data = await aio.sock_recv(conn, 65536)
    await aio.sock_sendall(conn, data)

asyncio's `loop.sock_recv` waits for readiness (epoll) and then calls recv(2) itself;
these submit the RECV/SEND/ACCEPT/CONNECT to the loop's ring (the one `uringkit.aio`'s
files use): everything a loop iteration queues goes to the kernel in one system call,
and completions come back in one reap. A receive first tries a non-blocking `recv` (as
asyncio's does), which answers at once when data is already waiting; sockets where
that keeps finding nothing go to the ring directly (one try in eight). `sock_sendall`
first tries one non-blocking `send`. Where the loop has no ring (io_uring blocked:
the thread backend), they are `loop.sock_*` — the socket is made non-blocking, as
asyncio requires. Blocking and non-blocking sockets both work on the ring.

Cancelling the awaiting task cancels the operation in the kernel; a `sock_sendall`
cancelled midway may have sent part of the data (as asyncio's).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import weakref
from collections.abc import Callable
from typing import Any

from ._backend import RingBackend, _oserror, get_backend

__all__ = [
    "sock_accept",
    "sock_connect",
    "sock_recv",
    "sock_recv_into",
    "sock_recvfrom",
    "sock_recvfrom_into",
    "sock_sendall",
    "sock_sendto",
]


# (plain ints: the socket module's are IntFlag members, and `|` on those runs enum code
# in Python — more than a system call costs)
_DONTWAIT = int(socket.MSG_DONTWAIT)
_NOSIGNAL = int(socket.MSG_NOSIGNAL)
#: receive buffers up to this size are reused (see sock_recv)
_POOLED = 256 * 1024
_pools: weakref.WeakKeyDictionary[RingBackend, dict[int, list[bytearray]]] = (
    weakref.WeakKeyDictionary()
)


def _ring() -> RingBackend | None:
    b = get_backend()
    return b if isinstance(b, RingBackend) else None


def _loop_ready(sock: socket.socket) -> asyncio.AbstractEventLoop:
    sock.setblocking(False)  # loop.sock_* refuse blocking sockets
    return asyncio.get_running_loop()


async def _io(b: RingBackend, queue: Callable[[int], None], what: str) -> int:
    fut = b.fast_future(queue)  # (b.fast_op, one coroutine frame fewer per operation)
    try:
        r = await fut
    except asyncio.CancelledError:
        b.cancel_read(fut)  # the SQE too (its memory stays with the ring)
        raise
    if type(r) is not int:  # the Completion of a failed op
        raise _oserror(r.res, what)
    return r


def _try_now(b: RingBackend, sock: socket.socket) -> bool:
    """Whether to try a receive on `sock` before going to the ring. Data that is
    already waiting (a stream, a pipelined protocol) is one non-blocking `recv` away
    — asyncio's `loop.sock_recv` tries that first too — against a loop iteration for a
    RECV through the ring (~4x the CPU here). Where the data is not there yet (a server
    waiting for its client's next request), the try is a wasted system call: after two
    misses in a row on a socket only one call in eight tries, until one finds data."""
    misses = b.recv_misses.get(sock.fileno(), 0)
    if misses >= 2 and misses % 8:
        b.recv_misses[sock.fileno()] = misses + 1
        return False
    t = sock.gettimeout()
    return t is None or t == 0  # (one with a timeout would wait in recv for it)


_MISSED: Any = object()


def _now(b: RingBackend, sock: socket.socket, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)` — a non-blocking receive on `sock` — if `_try_now` says to try:
    its result, or `_MISSED` (not tried, or nothing was waiting: go to the ring)."""
    if not _try_now(b, sock):
        return _MISSED
    fd = sock.fileno()
    try:
        got = call(*args)
    except (BlockingIOError, InterruptedError):
        b.recv_misses[fd] = b.recv_misses.get(fd, 0) + 1
        return _MISSED
    if fd in b.recv_misses:
        del b.recv_misses[fd]
    return got


async def sock_recv(sock: socket.socket, nbytes: int) -> bytes:
    """Up to `nbytes` bytes from `sock`; b"" once the peer has closed."""
    if nbytes < 0:
        raise ValueError(f"negative buffersize in recv: {nbytes}")
    b = _ring()
    if b is None:
        return await _loop_ready(sock).sock_recv(sock, nbytes)
    if nbytes:
        data = _now(b, sock, sock.recv, nbytes, _DONTWAIT)
        if data is not _MISSED:
            return data  # type: ignore[no-any-return]
    # Receive buffers are reused (per loop, per size): a fresh bytearray would be
    # zero-filled on every call — 64 KiB of memset for a 4 KiB message.
    pool = _pools.setdefault(b, {}).setdefault(nbytes, []) if nbytes <= _POOLED else None
    buf = pool.pop() if pool else bytearray(nbytes)
    fd = sock.fileno()
    # (cancelled: the ring keeps `buf` until the kernel lets go; it is not pooled again)
    n = await _io(b, lambda ud: b.ring.recv(fd, buf, user_data=ud), "recv")
    out = bytes(memoryview(buf)[:n])
    if pool is not None and len(pool) < 64:
        pool.append(buf)
    return out


async def sock_recv_into(sock: socket.socket, buf: Any) -> int:
    """Receive into the writable buffer `buf`; the number of bytes (0 at EOF)."""
    mv = memoryview(buf).cast("B")
    if mv.readonly:
        raise TypeError("sock_recv_into() needs a writable buffer (bytearray, memoryview…)")
    b = _ring()
    if b is None:
        return await _loop_ready(sock).sock_recv_into(sock, mv)
    if len(mv):
        n = _now(b, sock, sock.recv_into, mv, 0, _DONTWAIT)
        if n is not _MISSED:
            return n  # type: ignore[no-any-return]
    fd = sock.fileno()
    return await _io(b, lambda ud: b.ring.recv(fd, mv, user_data=ud), "recv")


async def sock_sendall(sock: socket.socket, data: Any) -> None:
    """Send all of `data` (a bytes-like object), however many sends it takes."""
    b = _ring()
    if b is None:
        await _loop_ready(sock).sock_sendall(sock, data)
        return
    mv = memoryview(data).cast("B")
    fd = sock.fileno()
    # Most sends find room in the socket's buffer: one non-blocking send(2) then, no
    # trip through the ring (asyncio's sock_sendall does the same first).
    try:
        sent = sock.send(mv, _DONTWAIT | _NOSIGNAL)
    except (BlockingIOError, InterruptedError):
        sent = 0
    while sent < len(mv):
        sent += await _io(b, functools.partial(_send, b, fd, mv[sent:]), "send")


def _send(b: RingBackend, fd: int, part: memoryview, ud: int) -> None:
    # MSG_NOSIGNAL: a peer that is gone is an EPIPE here, not a SIGPIPE
    b.ring.send(fd, part, flags=_NOSIGNAL, user_data=ud)


async def sock_accept(sock: socket.socket) -> tuple[socket.socket, Any]:
    """Accept a connection on the listening `sock`: (non-blocking socket, address)."""
    b = _ring()
    if b is None:
        return await _loop_ready(sock).sock_accept(sock)
    fd = sock.fileno()

    def orphan(c: Any) -> None:  # the task was cancelled after the kernel accepted
        if c.res >= 0:
            socket.close(c.res)

    c = await b.op(lambda ud: b.ring.accept(fd, user_data=ud), orphan)
    if c.res < 0:
        raise _oserror(c.res, "accept")
    conn = socket.socket(sock.family, sock.type, sock.proto, fileno=c.res)
    conn.setblocking(False)
    try:
        addr = conn.getpeername()
    except OSError:  # (already reset by the peer: asyncio would report it on first use)
        addr = None
    return conn, addr


async def sock_connect(sock: socket.socket, address: Any) -> None:
    """Connect `sock` to `address` (a host name is resolved first, as asyncio does)."""
    b = _ring()
    if b is None:
        await _loop_ready(sock).sock_connect(sock, address)
        return
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_ip(address[0]):
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            address[0], address[1], family=sock.family, type=sock.type, proto=sock.proto
        )
        if not infos:
            raise OSError(f"cannot resolve {address[0]!r}")
        address = infos[0][4]
    fd = sock.fileno()
    await _io(b, lambda ud: b.ring.connect(fd, address, user_data=ud), "connect")


async def _msg(b: RingBackend, queue: Callable[[int], None], what: str) -> Any:
    """One RECVMSG/SENDMSG through the ring: its Completion (`res`, and `result`: the
    sender's address of a datagram)."""
    c = await b.op(queue)
    if c.res < 0:
        raise _oserror(c.res, what)
    return c


async def sock_recvfrom(sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
    """A datagram from `sock` and its sender's address (`loop.sock_recvfrom`): up to
    `bufsize` bytes of it, the rest of a longer datagram discarded (as recvfrom does)."""
    if bufsize < 0:
        raise ValueError(f"negative buffersize in recvfrom: {bufsize}")
    b = _ring()
    if b is None:
        return await _loop_ready(sock).sock_recvfrom(sock, bufsize)
    got = _now(b, sock, sock.recvfrom, bufsize, _DONTWAIT)
    if got is not _MISSED:
        return got  # type: ignore[no-any-return]
    buf = bytearray(bufsize)
    fd = sock.fileno()
    c = await _msg(b, lambda ud: b.ring.recvmsg(fd, [buf], user_data=ud), "recvfrom")
    return bytes(memoryview(buf)[: c.res]), c.result


async def sock_recvfrom_into(sock: socket.socket, buf: Any, nbytes: int = 0) -> tuple[int, Any]:
    """Receive a datagram into the writable buffer `buf` (at most `nbytes` bytes of it;
    0: all of `buf`): (bytes received, sender's address) (`loop.sock_recvfrom_into`)."""
    mv = memoryview(buf).cast("B")
    if mv.readonly:
        raise TypeError("sock_recvfrom_into() needs a writable buffer (bytearray, memoryview…)")
    if nbytes < 0:
        raise ValueError(f"negative buffersize in recvfrom_into: {nbytes}")
    if nbytes > len(mv):
        raise ValueError("nbytes is greater than the length of the buffer")
    if not nbytes:
        nbytes = len(mv)
    b = _ring()
    if b is None:
        return await _loop_ready(sock).sock_recvfrom_into(sock, mv, nbytes)
    got = _now(b, sock, sock.recvfrom_into, mv, nbytes, _DONTWAIT)
    if got is not _MISSED:
        return got  # type: ignore[no-any-return]
    fd = sock.fileno()
    part = mv[:nbytes]
    c = await _msg(b, lambda ud: b.ring.recvmsg(fd, [part], user_data=ud), "recvfrom")
    return c.res, c.result


async def sock_sendto(sock: socket.socket, data: Any, address: Any) -> int:
    """Send the datagram `data` to `address` (`loop.sock_sendto`): the bytes sent. A
    host name is resolved first, without blocking the loop."""
    b = _ring()
    if b is None:
        return await _loop_ready(sock).sock_sendto(sock, data, address)
    if (
        sock.family in (socket.AF_INET, socket.AF_INET6)
        and isinstance(address, tuple)
        and address
        and isinstance(address[0], str)
        and address[0] not in ("", "localhost")
        and not _is_ip(address[0])
    ):
        infos = await asyncio.get_running_loop().getaddrinfo(
            address[0], address[1], family=sock.family, type=sock.type, proto=sock.proto
        )
        if not infos:
            raise OSError(f"cannot resolve {address[0]!r}")
        address = infos[0][4]
    try:
        return sock.sendto(data, _DONTWAIT | _NOSIGNAL, address)
    except (BlockingIOError, InterruptedError):
        pass
    fd = sock.fileno()
    mv = memoryview(data).cast("B")
    return await _io(
        b,
        lambda ud: b.ring.sendmsg(fd, [mv], address, flags=_NOSIGNAL, user_data=ud),
        "sendto",
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
