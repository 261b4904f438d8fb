"""Datagram transports whose receives complete on the loop's ring.

asyncio's datagram transport waits for readiness, then calls `recvfrom` (a system call
per datagram, after the one that waited). This one receives on the loop's ring: UDP
sockets (AF_INET, AF_INET6) keep one multishot RECVMSG armed into provided buffers the
loop's datagram sockets share (64 x 64 KiB + header: any UDP payload fits) — every
datagram that arrives is a completion of the loop's one `io_uring_enter` per iteration,
however many are queued, with no re-arm per datagram; other datagram sockets (AF_UNIX,
whose datagrams may exceed 64 KiB) keep a single RECVMSG in flight into a 256 KiB
buffer of their own, re-armed after each.
Everything else — `sendto` (sent at once, buffered with flow control when the socket is
full), connected sockets, `error_received`, `pause_reading`, `close`, `abort` — is
asyncio's own `_SelectorDatagramTransport`, which this class extends.
"""

from __future__ import annotations

import errno
import os
import socket
from asyncio import selector_events
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._native import BufferRing, Completion
    from . import UringEventLoop

_ECANCELED = errno.ECANCELED
_ENOBUFS = errno.ENOBUFS
_MULTISHOT_FAMILIES = (socket.AF_INET, socket.AF_INET6)

# asyncio's datagram transport, which typeshed does not declare
_Base: Any = selector_events._SelectorDatagramTransport  # type: ignore[attr-defined]


class RingDatagramTransport(_Base):  # type: ignore[misc]
    """A datagram socket's transport on `UringEventLoop` (see the module docs)."""

    def __init__(
        self,
        loop: UringEventLoop,
        sock: Any,
        protocol: Any,
        address: Any = None,
        waiter: Any = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._sel = loop._selector
        self._recv_ud = 0  # the RECVMSG in flight
        self._recv_buf: bytearray | None = None  # the buffer it receives into
        # RECVMSGs cancelled (pause_reading, close) whose completion has not come yet:
        # user_data -> their buffer, which the kernel may still fill
        self._cancelled: dict[int, bytearray] = {}
        # datagrams a cancelled RECVMSG received anyway, while reading was paused
        self._held: list[tuple[bytes, Any]] = []
        # UDP: one multishot RECVMSG into the loop's shared datagram buffers
        self._multishot = sock.family in _MULTISHOT_FAMILIES
        self._br: BufferRing | None = None  # (the buffer ring its completions name)
        super().__init__(loop, sock, protocol, address, waiter, extra)
        self._sel.transports.add(self)

    # ----- reading: a RECVMSG on the ring instead of a reader callback ----------------

    def _add_reader(self, fd: int, callback: Any, *args: Any) -> None:
        # (asyncio's transport calls this to start reading: at creation, on resume)
        if not self.is_reading() or self._conn_lost:
            return
        if self._held:
            self._loop.call_soon(self._deliver_held)  # (first what came while paused)
            return
        self._arm()

    def _deliver_held(self) -> None:
        while self._held and self.is_reading() and not self._conn_lost:
            data, addr = self._held.pop(0)
            self._protocol.datagram_received(data, addr)
        if not self._held and self.is_reading() and not self._conn_lost:
            self._arm()

    def _arm(self) -> None:
        if self._recv_ud:
            return
        sel = self._sel
        try:
            if self._multishot:
                br = sel.datagram_buffers()
                ud = sel.start_op(
                    self._on_message,
                    sel.ring.recvmsg,
                    self._sock_fd,
                    multishot=True,
                    buffer_ring=br,
                )
                self._br = br
            else:
                buf = self._recv_buf
                if buf is None:
                    buf = self._recv_buf = bytearray(self.max_size)
                ud = sel.start_op(self._on_recv, sel.ring.recvmsg, self._sock_fd, [buf])
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on datagram transport")
            return
        self._recv_ud = ud

    def _stop_reading(self) -> None:
        ud = self._recv_ud
        if ud and self._multishot:
            self._recv_ud = 0  # (its late completions still come, to _on_message)
            self._sel.cancel_op(ud)
        elif ud:
            self._recv_ud = 0
            # (the kernel may still write into the buffer: it stays with this op)
            if self._recv_buf is not None:
                self._cancelled[ud] = self._recv_buf
            self._recv_buf = None
            self._sel.cancel_op(ud)

    def _on_message(self, c: Completion) -> None:
        """A completion of the multishot RECVMSG (one datagram each)."""
        ended = not c.more
        if ended and c.user_data == self._recv_ud:
            self._recv_ud = 0
        res = c.res
        if res >= 0 and c.buffer_id is not None:
            data, addr = self._br.take_msg(c)  # type: ignore[union-attr]  # (set with ud)
            if self._conn_lost:
                return
            if not self.is_reading():
                self._held.append((data, addr))  # (paused as it arrived)
                return
            if ended:
                self._arm()
            self._protocol.datagram_received(data, addr)
            return
        if self._conn_lost:
            return
        if res == -_ENOBUFS:
            # every shared buffer was taken (each is given back as its datagram is
            # copied out): the datagrams wait in the socket; ask again next iteration
            self._loop.call_soon(self._add_reader, self._sock_fd, None)
            return
        if res == -_ECANCELED or res >= 0:
            if ended and self.is_reading():
                self._arm()  # (resumed before the cancel landed)
            return
        if ended:
            self._arm()
        self._protocol.error_received(OSError(-res, os.strerror(-res)))

    def _on_recv(self, c: Completion) -> None:
        ud = c.user_data
        if ud == self._recv_ud:
            self._recv_ud = 0
            buf = self._recv_buf
        else:
            buf = self._cancelled.pop(ud, None)
        res = c.res
        if res >= 0 and buf is not None:
            data = bytes(memoryview(buf)[:res])
            if self._conn_lost:
                return
            if not self.is_reading():
                self._held.append((data, c.result))  # (paused as it arrived)
                return
            self._arm()  # the next one first: it goes out with the loop's next enter
            self._protocol.datagram_received(data, c.result)
            return
        if self._conn_lost or res == -_ECANCELED:
            return
        # ECONNREFUSED and friends (a connected socket's ICMP errors): the protocol's
        # error_received, and reading goes on — as asyncio's recvfrom loop does
        exc = OSError(-res, os.strerror(-res))
        self._arm()
        self._protocol.error_received(exc)

    # ----- asyncio's methods that stop its reader ----------------------------------------

    def pause_reading(self) -> None:
        super().pause_reading()
        if self._paused:
            self._stop_reading()

    def close(self) -> None:
        if not self._closing:
            self._stop_reading()
        super().close()

    def _force_close(self, exc: BaseException | None) -> None:
        self._stop_reading()
        self._held.clear()
        super()._force_close(exc)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        self._sel.transports.discard(self)
        super()._call_connection_lost(exc)

    def _ring_lost(self) -> None:
        """The loop moved to a new ring (run from another thread): the RECVMSG in
        flight on the old one is gone; receive on the new one."""
        self._recv_ud = 0
        self._recv_buf = None  # (the old ring's op may still fill the old one)
        self._cancelled.clear()
        if self.is_reading() and not self._conn_lost:
            self._loop.call_soon(self._arm)
