"""Stream-socket transports whose receives complete on the loop's ring.

asyncio's selector transport waits for readiness, then calls `recv` (a system call per
read). This one keeps one multishot RECV armed per connection, with buffers picked by
the kernel from a provided-buffer ring the loop shares between its connections: data
arrives as completions of the loop's one `io_uring_enter` per iteration, and no system
call reads it. Writes on a busy loop (4 or more completions in its last
`io_uring_enter`) are SENDs on the ring, one in flight per connection (what is written
meanwhile waits behind it, in order): they go out with the next `io_uring_enter`, every
connection's in one system call, instead of a `send` call each. On a quiet loop a write
is a `send` at once, as asyncio's (a SEND would cost a loop iteration for its completion
that no other connection shares); what the socket does not take goes on the ring.

Behaviour follows `asyncio.selector_events._SelectorSocketTransport`: the protocol
callbacks, flow control (`pause_writing`/`resume_writing` at the write-buffer limits),
`pause_reading` (no `data_received` until `resume_reading`: what was already received
is held and delivered first), `write_eof`, `close` after the queued data, `abort`,
`BufferedProtocol`, `start_tls` and `sendfile`, and the same errors.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import socket
import warnings
from asyncio import constants, futures, protocols, transports, trsock
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .._native import BufferRing, Completion
    from . import UringEventLoop

logger = logging.getLogger("asyncio")

_ENOBUFS = errno.ENOBUFS
_ECANCELED = errno.ECANCELED
_ENOENT = errno.ENOENT
_EALREADY = errno.EALREADY
_SEND_FLAGS = int(socket.MSG_NOSIGNAL)  # (a plain int: IntFlag operations run enum code)
# completions in the loop's last io_uring_enter from which writes go out as SENDs on the
# ring (batched into the next enter) rather than as a `send` call each
_BUSY = 4


def _os_error(res: int) -> OSError:
    code = -res
    cls: type[OSError] = {
        errno.ECONNRESET: ConnectionResetError,
        errno.EPIPE: BrokenPipeError,
        errno.ECONNABORTED: ConnectionAbortedError,
        errno.ECONNREFUSED: ConnectionRefusedError,
        errno.ETIMEDOUT: TimeoutError,
    }.get(code, OSError)
    return cls(code, os.strerror(code))


# asyncio's private helper that resolves a waiter (typeshed leaves it out)
_set_result_unless_cancelled: Any = futures._set_result_unless_cancelled  # type: ignore[attr-defined]


class RingSocketTransport(transports._FlowControlMixin, transports.Transport):
    """A stream socket's transport on `UringEventLoop` (see the module docs)."""

    if TYPE_CHECKING:  # (what asyncio's classes have and typeshed does not declare)
        _extra: dict[str, Any]
        _high_water: int
        _protocol_paused: bool

        def _maybe_pause_protocol(self) -> None: ...
        def _maybe_resume_protocol(self) -> None: ...

    _start_tls_compatible = True
    _sendfile_compatible = constants._SendfileMode.TRY_NATIVE
    _sock: socket.socket | None = None  # (read by __del__ even if __init__ failed)

    def __init__(
        self,
        loop: UringEventLoop,
        sock: socket.socket,
        protocol: protocols.BaseProtocol,
        waiter: Any = None,
        extra: dict[str, Any] | None = None,
        server: Any = None,
    ) -> None:
        super().__init__(extra, loop)
        self._loop: UringEventLoop = loop
        self._extra["socket"] = trsock.TransportSocket(sock)
        try:
            self._extra["sockname"] = sock.getsockname()
        except OSError:
            self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        self._sock = sock
        self._sock_fd = sock.fileno()
        self._sel = loop._selector
        self._protocol_connected = False
        self._buffered = False
        self.set_protocol(protocol)
        self._server = server
        self._conn_lost = 0
        self._closing = False
        self._paused = False
        self._eof = False
        self._empty_waiter: Any = None
        # receiving: the armed multishot RECV (user_data), data held while paused
        self._recv_ud = 0
        self._br: BufferRing | None = None
        self._held: collections.deque[bytes | None] = collections.deque()  # None: EOF
        # this iteration's receive completions, handed over as one bytes at its end
        # (`flush_received`): a 64 KiB message is four 16 KiB buffers, one data_received
        self._pending: list[Completion] = []
        self._chunk = 0  # the size of a provided buffer (a full one: more may follow)
        self._eof_seen = False
        # sending: the SEND in flight (user_data, its bytes), what waits behind it
        self._send_ud = 0
        self._sending: bytes | memoryview | None = None
        self._queue: collections.deque[bytes | memoryview] = collections.deque()
        self._queued = 0  # bytes written and not yet sent, the SEND in flight included
        if server is not None:
            _attach(server, self)
        cast(Any, loop)._transports[self._sock_fd] = self  # (asyncio's fd-in-use check)
        self._sel.transports.add(self)
        if sock.family != socket.AF_UNIX:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        loop.call_soon(self._protocol.connection_made, self)
        loop.call_soon(self._start_reading)  # (once connection_made has run)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self) -> str:
        info = [self.__class__.__name__]
        if self._sock is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._sock_fd}")
        info.append("read=armed" if self._recv_ud else "read=idle")
        info.append(f"write=<{'sending' if self._send_ud else 'idle'}, bufsize={self._queued}>")
        return "<{}>".format(" ".join(info))

    # ----- protocol ------------------------------------------------------------------

    def set_protocol(self, protocol: protocols.BaseProtocol) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, protocols.BufferedProtocol)
        self._protocol_connected = True

    def get_protocol(self) -> protocols.BaseProtocol:
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return not self._closing and not self._paused

    # ----- reading -------------------------------------------------------------------

    def _start_reading(self) -> None:
        if self._recv_ud or not self.is_reading() or self._eof_seen or self._conn_lost:
            return
        sel = self._sel
        try:
            br = sel.recv_buffers()
            ud = sel.start_op(
                self._on_recv, sel.ring.recv, self._sock_fd, multishot=True, buffer_ring=br
            )
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        self._recv_ud = ud
        self._br = br  # (the buffers this receive's completions name)
        self._chunk = br.size

    def _stop_reading(self) -> None:
        if self._recv_ud:
            self._sel.cancel_op(self._recv_ud)
            self._recv_ud = 0

    def pause_reading(self) -> None:
        if not self.is_reading():
            return
        self._paused = True
        self._stop_reading()
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self) -> None:
        if self._closing or not self._paused:
            return
        self._paused = False
        if self._held:
            self._loop.call_soon(self._deliver_held)
        else:
            self._start_reading()
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def _deliver_held(self) -> None:
        while self._held and self.is_reading() and not self._conn_lost:
            data = self._held.popleft()
            if data is None:
                self._on_eof()
                return
            self._deliver(data)
        if not self._held:
            self._start_reading()

    def _on_recv(self, c: Completion) -> None:
        """A completion of this transport's multishot RECV."""
        res = c.res
        ended = not c.more
        if ended and self._recv_ud == c.user_data:
            self._recv_ud = 0
        if res > 0:
            br: Any = self._br  # (set with _recv_ud)
            if self._conn_lost:
                br.take(c)  # (the buffer goes back)
            elif res < self._chunk and not self._pending:
                # a buffer not filled: what the socket had — the common small read,
                # handed over at once
                data = br.take(c)
                if self._paused or self._held:
                    self._held.append(data)
                else:
                    self._deliver(data)
            else:
                # a full buffer: more of the burst is likely in this iteration's other
                # completions — gathered, handed over as one bytes when a partly filled
                # buffer ends the burst or the iteration's completions are all in
                if not self._pending:
                    self._sel.received.append(self)
                self._pending.append(c)
                if res < self._chunk:
                    self.flush_received()
            if ended and not self._conn_lost:
                self._start_reading()  # (the kernel ended the multishot: re-arm)
            return
        if self._pending:
            self.flush_received()  # (the data before the EOF or error)
        if self._conn_lost:
            return
        if res == 0:
            self._eof_seen = True
            if self._paused or self._held:
                self._held.append(None)
            else:
                self._on_eof()
        elif res == -_ENOBUFS:
            # every buffer was taken (they are given back as their data is copied out):
            # the data waits in the socket; ask again on the next iteration
            self._loop.call_soon(self._start_reading)
        elif res == -_ECANCELED:
            if ended:
                self._start_reading()  # (resumed before the cancel landed: re-arm)
        else:
            self._fatal_error(_os_error(res), "Fatal read error on socket transport")

    def flush_received(self) -> None:
        """Hand over what this iteration's receive completions brought, as one bytes
        (the loop calls it once all of the iteration's completions are in)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        data = self._br.take_all(pending)  # type: ignore[union-attr]  # (set with them)
        if self._conn_lost:
            return
        if self._paused or self._held:
            self._held.append(data)
        else:
            self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        if self._buffered:
            self._deliver_buffered(data)
            return
        try:
            self._protocol.data_received(data)  # type: ignore[attr-defined]
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _deliver_buffered(self, data: bytes) -> None:
        view = memoryview(data)
        proto: Any = self._protocol
        while view and not self._conn_lost:
            try:
                buf = proto.get_buffer(len(view))
                if not len(buf):
                    raise RuntimeError("get_buffer() returned an empty buffer")
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
                return
            dst = memoryview(buf).cast("B")
            n = min(len(dst), len(view))
            dst[:n] = view[:n]
            view = view[n:]
            try:
                proto.buffer_updated(n)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")
                return
            if self._buffered is False or self._protocol is not proto:
                # the protocol was switched (start_tls): the rest goes to the new one
                if view:
                    self._deliver(bytes(view))
                return

    def _on_eof(self) -> None:
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)
        try:
            keep_open = self._protocol.eof_received()  # type: ignore[attr-defined]
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if not keep_open:
            self.close()

    # ----- writing -------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if type(data) is not bytes:
            if not isinstance(data, (bytearray, memoryview)):
                raise TypeError(
                    f"data argument must be a bytes-like object, not {type(data).__name__!r}"
                )
            # (a copy: the kernel reads it later, and the caller may reuse its buffer)
            data = bytes(data)
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to write; sendfile is in progress")
        if not data:
            return
        if self._conn_lost:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if not self._send_ud and self._sel.last_batch < _BUSY:
            # A quiet loop: `send` now. (A SEND on the ring would cost a trip round the
            # loop for its completion: on a busy loop many connections' sends share it
            # and the enter that submits them, on a quiet one a write would pay it alone.)
            try:
                n = self._sock.send(data)  # type: ignore[union-attr]
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on socket transport")
                return
            if n == len(data):
                return
            if n:
                data = memoryview(data)[n:]
        self._queued += len(data)
        if self._send_ud:
            self._queue.append(data)  # (behind the SEND in flight: sent when it is done)
        else:
            self._send(data)  # (on a busy loop: with the other connections' sends)
        if self._queued > self._high_water:
            self._maybe_pause_protocol()

    def _send(self, chunk: bytes | memoryview) -> None:
        """One SEND on the ring (it goes out with the loop's next io_uring_enter, with
        every other connection's: one system call for all of an iteration's writes)."""
        sel = self._sel
        try:
            ud = sel.start_op(self._on_send, sel.ring.send, self._sock_fd, chunk, flags=_SEND_FLAGS)
        except OSError as exc:
            self._fatal_error(exc, "Fatal write error on socket transport")
            return
        self._send_ud = ud
        self._sending = chunk

    def _send_next(self) -> None:
        q = self._queue
        chunk = q.popleft() if len(q) == 1 else b"".join(q)
        q.clear()
        self._send(chunk)

    def _on_send(self, c: Completion) -> None:
        self._send_ud = 0
        chunk, self._sending = self._sending, None
        res = c.res
        if self._conn_lost:
            return
        if res < 0:
            self._queue.clear()
            self._queued = 0
            exc = _os_error(res)
            self._fatal_error(exc, "Fatal write error on socket transport")
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(exc)
            return
        self._queued -= res
        assert chunk is not None
        if res < len(chunk):
            self._queue.appendleft(memoryview(chunk)[res:])  # (a short send: the rest first)
        if self._queue:
            self._send_next()
        if self._protocol_paused:
            self._maybe_resume_protocol()  # (may write more)
        if not self._queued and not self._send_ud:
            if self._empty_waiter is not None:
                self._empty_waiter.set_result(None)
            if self._closing:
                self._call_connection_lost(None)
            elif self._eof:
                self._shutdown_write()

    def _shutdown_write(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_WR)  # type: ignore[union-attr]
        except OSError as exc:
            self._fatal_error(exc, "Fatal write error on socket transport")

    def get_write_buffer_size(self) -> int:
        # (the SEND in flight included: until it completes, the kernel has not taken it —
        # so a write above the high-water mark pauses the protocol until its SEND is done)
        return self._queued

    def write_eof(self) -> None:
        if self._closing or self._eof:
            return
        self._eof = True
        if not self._queued:
            self._shutdown_write()

    def can_write_eof(self) -> bool:
        return True

    # sendfile (asyncio's native path: the socket, once this transport's queue is empty)
    def _make_empty_waiter(self) -> Any:
        if self._empty_waiter is not None:
            raise RuntimeError("Empty waiter is already set")
        self._empty_waiter = self._loop.create_future()
        if not self._queued:
            self._empty_waiter.set_result(None)
        return self._empty_waiter

    def _reset_empty_waiter(self) -> None:
        self._empty_waiter = None

    # ----- closing -------------------------------------------------------------------

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        if not self._queued:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)

    def abort(self) -> None:
        self._force_close(None)

    def _fatal_error(self, exc: BaseException, message: str = "Fatal error on transport") -> None:
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler(
                {
                    "message": message,
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )
        self._force_close(exc)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        if self._queued or self._send_ud:
            self._queue.clear()
            self._queued = 0
            if self._send_ud:
                self._sel.cancel_op(self._send_ud)
        if not self._closing:
            self._closing = True
        self._stop_reading()
        self._held.clear()
        if self._pending:
            pending, self._pending = self._pending, []
            self._br.take_all(pending)  # type: ignore[union-attr]  # (buffers go back)
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        if self._sock is None:
            return
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)  # type: ignore[arg-type]
        finally:
            # (a RECV or SEND still in flight holds the socket open in the kernel until
            # its cancellation lands, in the loop's next io_uring_enter)
            self._sock.close()
            self._sock = None
            self._protocol = None  # type: ignore[assignment]
            self._sel.transports.discard(self)
            server = self._server
            if server is not None:
                _detach(server, self)
                self._server = None
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(ConnectionError("Connection is closed by peer"))

    def _ring_lost(self) -> None:
        """The loop moved to a new ring (run from another thread): what this transport
        had in flight on the old one cannot be followed any more."""
        self._recv_ud = 0
        self._send_ud = 0
        self._pending = []  # (the old ring's buffers)
        self._fatal_error(
            ConnectionAbortedError(
                errno.ECONNABORTED,
                "the event loop moved to another thread with this connection's I/O in "
                "flight on its old ring; run a loop with open connections from one thread",
            )
        )

    def __del__(self, _warn: Any = warnings.warn) -> None:
        if self._sock is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._sock.close()


def _attach(server: Any, transport: RingSocketTransport) -> None:
    try:
        server._attach(transport)  # Python 3.13+: the server tracks its transports
    except TypeError:
        server._attach()


def _detach(server: Any, transport: RingSocketTransport) -> None:
    try:
        server._detach(transport)
    except TypeError:
        server._detach()
