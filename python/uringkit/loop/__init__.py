"""An asyncio event loop that waits on io_uring instead of epoll.

    import uringkit.loop
    uringkit.loop.run(main())                  # as uvloop.run / asyncio.run
    loop = uringkit.loop.new_event_loop()      # or a loop object
    asyncio.set_event_loop_policy(uringkit.loop.EventLoopPolicy())

It is asyncio's own `SelectorEventLoop` — every transport, protocol, stream, subprocess,
signal and `sock_*` call behaves as asyncio's — over `UringSelector`, a
`selectors.BaseSelector` whose readiness comes from io_uring: each registered event is a
one-shot POLL_ADD, re-armed after it fires (one-shot, so that readiness is level-
triggered as with epoll: a socket still readable after its callback read part of the
data fires again), and `select(timeout)` is one `io_uring_enter` that submits every
re-arm of the last iteration and waits. Stream connections (TCP, Unix) get a
`RingSocketTransport` where the kernel has multishot receives into provided buffers
(6.0): their data arrives as completions of that same `io_uring_enter`, with no readiness
poll and no `recv` call (`ring_transports=False` or `URINGKIT_LOOP_TRANSPORT=selector`:
asyncio's own transports). `uringkit.aio` (files, `aio.sock_*`) queues its operations
on this loop's ring: they go out, and their completions come back, in that same
`io_uring_enter`.

Needs io_uring (PermissionError saying so where it is blocked); `run()` takes the same
arguments as `asyncio.run`. See docs/loop.md for what it measures against asyncio's loop
and uvloop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import selectors
import socket
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .._native import BufferRing, Completion, Ring
from ..aio import _backend as _aio_backend
from ..aio import sock as aio_sock

if TYPE_CHECKING:
    from ..aio._backend import RingBackend

__all__ = ["EventLoopPolicy", "UringEventLoop", "UringSelector", "new_event_loop", "run"]

T = TypeVar("T")

_POLLIN = 0x001
_POLLOUT = 0x004
_POLLERR = 0x008
_POLLHUP = 0x010
_ECANCELED = 125
_ENOENT = 2
_EBADFD = 77
# the provided buffers a loop's stream receives share: 256 x 16 KiB
RECV_BUFFERS = 256
RECV_SIZE = 16 << 10
# the provided buffers a loop's UDP receives share: 64, each a multishot recvmsg header
# (144 bytes: io_uring_recvmsg_out and the sender's address) and 64 KiB, more than any
# UDP payload (65,507 bytes over IPv4, 65,527 over IPv6)
DATAGRAM_BUFFERS = 64
DATAGRAM_SIZE = 144 + (64 << 10)
# what select returns when no registered fd is ready (never modified: asyncio only
# iterates over it)
_NO_EVENTS: list[tuple[selectors.SelectorKey, int]] = []


class _Map(Mapping[Any, selectors.SelectorKey]):
    def __init__(self, sel: UringSelector) -> None:
        self._sel = sel

    def __len__(self) -> int:
        return len(self._sel._keys)

    def __getitem__(self, fileobj: Any) -> selectors.SelectorKey:
        fd = self._sel._fileobj_lookup(fileobj)
        try:
            return self._sel._keys[fd]
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None

    def __iter__(self) -> Any:
        return iter(self._sel._keys)


class UringSelector(selectors.BaseSelector):
    """A selector on io_uring: one-shot POLL_ADD per registered (fd, event), re-armed
    after each firing while registered; `select` submits and waits in one call."""

    def __init__(self, entries: int = 1024) -> None:
        self._entries = entries
        self._ring, self._enabled = self._new_ring()
        self._keys: dict[int, selectors.SelectorKey] = {}
        # user_data -> (fd, event) of each armed poll; (fd, event) -> user_data
        self._armed: dict[int, tuple[int, int]] = {}
        self._by_fd: dict[tuple[int, int], int] = {}
        self._next_ud = 1
        self._map = _Map(self)
        # completion-based I/O (the loop's stream transports): user_data -> handler, and
        # the completions select() reaped for them, run by the loop after it
        self._ops: dict[int, Callable[[Completion], None]] = {}
        self.completed: list[tuple[Callable[[Completion], None], Completion]] = []
        # ring transports with receive completions to hand over once the iteration's
        # completions have all run (RingSocketTransport.flush_received)
        self.received: list[Any] = []
        self._recv_br: BufferRing | None = None
        self._dgram_br: BufferRing | None = None
        self._recv_gid = 0
        self._ring_moved = False  # (set once the ring moved to another thread)
        self.last_batch = 0  # completions the last select reaped (how busy the loop is)
        self.selects = 0  # select calls (each one io_uring_enter, on a shared ring too)
        # uringkit.aio's backend when it shares this ring (see share_ring): the
        # completions of its ops that select reaped, and the tasks its native dispatch
        # took off resolved futures — both for the loop's completions callback
        self.aio: RingBackend | None = None
        self.aio_done: list[Completion] = []
        self.woken: list[Any] = []
        self.transports: weakref.WeakSet[Any] = weakref.WeakSet()

    def _new_ring(self) -> tuple[Ring, bool]:
        """A ring whose only submitter will be the thread that runs the loop: created
        disabled (SQEs can be queued, nothing submitted) and enabled by the first
        `select`, which makes that thread the single issuer. Kernels before 6.1: a plain
        ring, usable from any thread."""
        try:
            r = Ring(self._entries, single_issuer=True, defer_taskrun=True, disabled=True)
            self.single_issuer = True
            return r, False
        except OSError:
            self.single_issuer = False
            return Ring(self._entries), True

    def _move_to_this_thread(self) -> None:
        """The loop now runs in another thread than the ring's issuer (a loop created
        or first run elsewhere): a new ring here, every registered event armed on it."""
        old = self._ring
        self._ring, self._enabled = self._new_ring()
        if not self._enabled:
            self._ring.enable()
            self._enabled = True
        self._armed.clear()
        self._by_fd.clear()
        for fd, key in self._keys.items():
            for ev in (selectors.EVENT_READ, selectors.EVENT_WRITE):
                if key.events & ev:
                    self._arm(fd, ev)
        # Completion-based transports had their receives (and maybe sends) in flight on
        # the old ring, which this thread cannot drive: they are aborted, saying why.
        self._ops.clear()
        self._recv_br = None
        self._dgram_br = None
        self._ring_moved = True
        if self.aio is not None:
            self.aio.ring_moved(self._ring)
            self.aio_done.clear()
        for t in list(self.transports):
            t._ring_lost()
        # (closing it from here may be refused — not its issuer: the kernel tears it down
        # with its last reference, cancelling its polls, when the object goes)
        with contextlib.suppress(OSError):
            old.close()

    # ----- selectors API -------------------------------------------------------------

    def _fileobj_lookup(self, fileobj: Any) -> int:
        if isinstance(fileobj, int):
            fd = fileobj
        else:
            try:
                fd = int(fileobj.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fileobj!r}") from None
        if fd < 0:
            raise ValueError(f"Invalid file descriptor: {fd}")
        return fd

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        if not events or events & ~(selectors.EVENT_READ | selectors.EVENT_WRITE):
            raise ValueError(f"Invalid events: {events!r}")
        fd = self._fileobj_lookup(fileobj)
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} (FD {fd}) is already registered")
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        for ev in (selectors.EVENT_READ, selectors.EVENT_WRITE):
            if events & ev:
                self._arm(fd, ev)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = self._fileobj_lookup(fileobj)
        try:
            key = self._keys.pop(fd)
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None
        for ev in (selectors.EVENT_READ, selectors.EVENT_WRITE):
            self._disarm(fd, ev)
        return key

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = self._fileobj_lookup(fileobj)
        try:
            old = self._keys[fd]
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None
        if not events or events & ~(selectors.EVENT_READ | selectors.EVENT_WRITE):
            raise ValueError(f"Invalid events: {events!r}")
        key = old._replace(events=events, data=data)
        self._keys[fd] = key
        for ev in (selectors.EVENT_READ, selectors.EVENT_WRITE):
            if events & ev and not old.events & ev:
                self._arm(fd, ev)
            elif old.events & ev and not events & ev:
                self._disarm(fd, ev)
        return key

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if not self._enabled:
            self._ring.enable()  # this thread becomes the ring's single issuer
            self._enabled = True
        aio = self.aio
        try:
            if aio is not None:
                # (one native call reaps, resolving uringkit.aio's fast futures)
                wake = self.woken if _aio_backend.DIRECT_WAKE else None
                aio.unsubmitted = 0  # (this enter submits them)
                if timeout is None or timeout > 0:
                    done = self._ring.dispatch(aio.fast, wake, 1, timeout)
                else:
                    self._ring.submit()
                    done = self._ring.dispatch(aio.fast, wake)
            elif timeout is None or timeout > 0:
                done = self._ring.wait(1, timeout)
            else:
                done = self._poll_now()
        except FileExistsError:  # EEXIST: not the issuer's thread
            self._move_to_this_thread()
            # (no wait: the move may have scheduled callbacks — aborted transports)
            done = self._poll_now()
        self.last_batch = len(done)
        self.selects += 1
        # (the loop's hot path, run once per iteration: no allocation beyond what it
        # returns; an iteration of ring transport completions alone returns a shared
        # empty list)
        ready: dict[int, int] | None = None
        armed, ops, completed = self._armed, self._ops, self.completed
        for c in done:
            ud = c.user_data
            h = ops.get(ud)
            if h is not None:
                if not c.more:
                    del ops[ud]
                completed.append((h, c))
                continue
            where = armed.pop(ud, None)
            if where is None:
                if aio is not None and ud:
                    self.aio_done.append(c)  # (uringkit.aio's; 0: a cancel's own)
                continue  # (else a poll_remove's or cancel's own completion)
            fd, ev = where
            del self._by_fd[where]
            key = self._keys.get(fd)
            if key is None or not key.events & ev:
                continue  # unregistered (or modified) after it fired
            res = c.res
            if res < 0:
                if res == -_ECANCELED:
                    self._arm(fd, ev)
                # (else EBADF: the fd was closed while registered, as epoll would drop it)
                continue
            if ready is None:
                ready = {}
            ready[fd] = ready.get(fd, 0) | ev
            self._arm(fd, ev)  # level-triggered: asked again on the next select
        if ready is None:
            return _NO_EVENTS
        keys = self._keys
        return [(keys[fd], evs & keys[fd].events) for fd, evs in ready.items()]

    # ----- completion-based I/O (RingSocketTransport) ----------------------------------

    @property
    def ring(self) -> Ring:
        return self._ring

    def new_op(self, handler: Callable[[Completion], None]) -> int:
        """A user_data for an op whose completions go to `handler` (after select)."""
        ud = self._next_ud
        self._next_ud = ud + 1
        self._ops[ud] = handler
        return ud

    def start_op(
        self,
        handler: Callable[[Completion], None],
        queue: Callable[..., None],
        *args: Any,
        **kw: Any,
    ) -> int:
        """Queue one op for `handler` — `queue(*args, user_data=ud, **kw)`, a Ring method —
        and return its user_data; if queueing raises, the op is forgotten (no handler
        left waiting for a completion that will never come) and the error goes on."""
        ud = self.new_op(handler)
        try:
            queue(*args, user_data=ud, **kw)
        except BaseException:
            self.forget_op(ud)
            raise
        return ud

    def forget_op(self, ud: int) -> None:
        self._ops.pop(ud, None)

    def cancel_op(self, ud: int) -> None:
        """Cancel an op in flight; its handler still gets its last completion."""
        if ud in self._ops:
            self._ring.cancel(ud, user_data=0)

    def recv_buffers(self) -> BufferRing:
        """The provided-buffer ring the loop's receives share (made at first use)."""
        br = self._recv_br
        if br is None:
            if not self._enabled:
                self._ring.enable()
                self._enabled = True
            self._recv_gid += 1  # (a new group per ring: an old one may be registered)
            br = self._recv_br = self._ring.buffer_ring(self._recv_gid, RECV_BUFFERS, RECV_SIZE)
        return br

    def share_ring(self, backend: RingBackend) -> Ring:
        """uringkit.aio's backend for this loop asks to queue its operations on this
        ring: select then submits them with the loop's own and reaps their completions
        in the same `io_uring_enter` (no eventfd, no second ring). Returns the ring."""
        if not self._enabled:
            self._ring.enable()
            self._enabled = True
        self.aio = backend
        return self._ring

    def unshare_ring(self, backend: RingBackend) -> None:
        if self.aio is backend:
            self.aio = None
            self.aio_done.clear()

    def datagram_buffers(self) -> BufferRing:
        """The provided-buffer ring the loop's UDP receives share (made at first use):
        64 buffers, each room for any UDP payload after multishot recvmsg's header."""
        br = self._dgram_br
        if br is None:
            if not self._enabled:
                self._ring.enable()
                self._enabled = True
            self._recv_gid += 1  # (group ids shared with the stream receives')
            br = self._dgram_br = self._ring.buffer_ring(
                self._recv_gid, DATAGRAM_BUFFERS, DATAGRAM_SIZE
            )
        return br

    def _poll_now(self) -> list[Any]:
        """select(0): submit the re-arms (a ready fd completes its poll inline) and
        reap what is there, without waiting."""
        self._ring.submit()
        return self._ring.completions()

    def close(self) -> None:
        self._keys.clear()
        self._armed.clear()
        self._by_fd.clear()
        self._ring.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._map

    # ----- polls ---------------------------------------------------------------------

    def _arm(self, fd: int, ev: int) -> None:
        ud = self._next_ud
        self._next_ud = ud + 1
        mask = _POLLIN if ev == selectors.EVENT_READ else _POLLOUT
        try:
            self._ring.poll_add(fd, mask, user_data=ud)
        except OSError as e:
            # a full SQ is submitted at once, which a ring not enabled yet refuses
            # (EBADFD): enable it here (a later select from another thread moves it)
            if e.errno != _EBADFD or self._enabled:
                raise
            self._ring.enable()
            self._enabled = True
            self._ring.poll_add(fd, mask, user_data=ud)
        self._armed[ud] = (fd, ev)
        self._by_fd[(fd, ev)] = ud

    def _disarm(self, fd: int, ev: int) -> None:
        ud = self._by_fd.pop((fd, ev), None)
        if ud is not None:
            del self._armed[ud]
            self._ring.poll_remove(ud, user_data=0)


class UringEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector event loop over `UringSelector`, whose stream sockets (TCP,
    Unix) receive through the ring (`RingSocketTransport`) where the kernel has
    multishot receives with provided buffers (6.0); `URINGKIT_LOOP_TRANSPORT=selector`
    keeps asyncio's own transports."""

    _selector: UringSelector

    def __init__(self, *, ring_transports: bool | None = None) -> None:
        super().__init__(UringSelector())
        want = _ring_transports_wanted() if ring_transports is None else ring_transports
        if want and not _ring_transports_supported():
            raise OSError(
                "ring_transports=True: this kernel lacks multishot receives into provided "
                "buffers (Linux 6.0+)"
            )
        self._ring_io = want
        self._completions_handle = asyncio.Handle(self._run_completions, (), self, None)

    def _make_socket_transport(
        self,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        waiter: Any = None,
        *,
        extra: dict[str, Any] | None = None,
        server: Any = None,
    ) -> asyncio.Transport:
        if self._ring_io and sock.type == socket.SOCK_STREAM:
            from ._transport import RingSocketTransport

            return RingSocketTransport(self, sock, protocol, waiter, extra, server)
        return super()._make_socket_transport(  # type: ignore[misc,no-any-return]
            sock, protocol, waiter, extra=extra, server=server
        )

    def _make_datagram_transport(
        self,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        address: Any = None,
        waiter: Any = None,
        extra: dict[str, Any] | None = None,
    ) -> asyncio.DatagramTransport:
        if self._ring_io:
            from ._datagram import RingDatagramTransport

            return RingDatagramTransport(self, sock, protocol, address, waiter, extra)
        return super()._make_datagram_transport(  # type: ignore[misc,no-any-return]
            sock, protocol, address, waiter, extra
        )

    # ----- loop.sock_*: the operations themselves on io_uring ---------------------------
    # asyncio's wait for readiness, then call recv/send/accept/connect themselves; these
    # submit the operation (uringkit.aio.sock_*, on the loop's uringkit.aio ring), with
    # asyncio's checks first. Where uringkit.aio has no ring (forced to threads), asyncio's.

    def _sock_check(self, sock: socket.socket) -> bool:
        """asyncio's checks on a sock_* argument; whether the ring takes the call."""
        if type(sock) is not socket.socket:  # (the plain one is no SSLSocket)
            _check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:  # type: ignore[attr-defined]
            raise ValueError("the socket must be non-blocking")
        fd = sock.fileno()
        if fd in self._transports:  # type: ignore[attr-defined]
            self._ensure_fd_no_transport(fd)  # type: ignore[attr-defined]
        # (uringkit.aio on this loop shares its ring once it exists)
        return self._selector.aio is not None or aio_sock._ring() is not None

    async def sock_recv(self, sock: socket.socket, n: int) -> bytes:
        if not self._sock_check(sock):
            return await super().sock_recv(sock, n)
        return await aio_sock.sock_recv(sock, n)

    async def sock_recv_into(self, sock: socket.socket, buf: Any) -> int:
        if not self._sock_check(sock):
            return await super().sock_recv_into(sock, buf)
        return await aio_sock.sock_recv_into(sock, buf)

    async def sock_sendall(self, sock: socket.socket, data: Any) -> None:
        if not self._sock_check(sock):
            await super().sock_sendall(sock, data)
        else:
            await aio_sock.sock_sendall(sock, data)

    async def sock_recvfrom(self, sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
        if not self._sock_check(sock):
            return await super().sock_recvfrom(sock, bufsize)
        return await aio_sock.sock_recvfrom(sock, bufsize)

    async def sock_recvfrom_into(
        self, sock: socket.socket, buf: Any, nbytes: int = 0
    ) -> tuple[int, Any]:
        if not self._sock_check(sock):
            return await super().sock_recvfrom_into(sock, buf, nbytes)
        return await aio_sock.sock_recvfrom_into(sock, buf, nbytes)

    async def sock_sendto(self, sock: socket.socket, data: Any, address: Any) -> int:
        if not self._sock_check(sock):
            return await super().sock_sendto(sock, data, address)
        return await aio_sock.sock_sendto(sock, data, address)

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, Any]:
        if not self._sock_check(sock):
            return await super().sock_accept(sock)
        return await aio_sock.sock_accept(sock)

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        if not self._sock_check(sock):
            await super().sock_connect(sock, address)
        else:
            await aio_sock.sock_connect(sock, address)

    def _process_events(self, event_list: list[Any]) -> None:
        if event_list:
            super()._process_events(event_list)  # type: ignore[misc]
        sel = self._selector
        if sel.completed or sel.aio_done or sel.woken:
            if not self._ready and not self._debug:  # type: ignore[attr-defined]
                # Nothing is ready before them: run them now — the ready queue would
                # run them first anyway, before this iteration's due timers, which are
                # queued after this returns (a quiet loop's one connection saves a trip
                # through the queue per wake-up).
                self._run_completions()
            else:
                # the ring's completions of this iteration, run in one callback after
                # what was ready before (one Handle, made once: its context is the
                # loop's creator's, as a reader callback's is the context it was added in)
                self._ready.append(self._completions_handle)  # type: ignore[attr-defined]

    def _run_completions(self) -> None:
        sel = self._selector
        if sel.completed:
            done, sel.completed = sel.completed, []
            for i, (handler, c) in enumerate(done):
                try:
                    handler(c)
                except (SystemExit, KeyboardInterrupt):
                    # leaving the loop: the rest run on its next iteration (dropping one
                    # would leave its transport waiting for a completion already reaped)
                    sel.completed[:0] = done[i + 1 :]
                    self._ready.append(self._completions_handle)  # type: ignore[attr-defined]
                    raise
                except BaseException as exc:
                    self.call_exception_handler(
                        {
                            "message": f"Exception in completion handler {handler!r}",
                            "exception": exc,
                        }
                    )
            while sel.received:
                received, sel.received = sel.received, []
                for i, t in enumerate(received):
                    try:
                        t.flush_received()
                    except (SystemExit, KeyboardInterrupt):
                        sel.received[:0] = received[i + 1 :]  # (on the next iteration)
                        self._ready.append(self._completions_handle)  # type: ignore[attr-defined]
                        raise
                    except BaseException as exc:
                        self.call_exception_handler(
                            {"message": f"Exception delivering to {t!r}", "exception": exc}
                        )
        if sel.aio_done or sel.woken:
            # uringkit.aio's: futures resolved (the tasks awaiting them resume here, as
            # they would in its eventfd reader on another loop)
            aio_done, sel.aio_done = sel.aio_done, []
            wake, sel.woken = sel.woken, []
            aio = sel.aio
            if aio_done and aio is not None:
                aio.complete(aio_done, wake if _aio_backend.DIRECT_WAKE else None)
            if wake:
                _aio_backend._run_woken(self, wake)


def _check_ssl_socket(sock: Any) -> None:
    """asyncio's refusal of an SSLSocket in loop.sock_* (a TypeError)."""
    import ssl

    if isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


def _ring_transports_wanted() -> bool:
    """The default: stream transports receive through the ring unless the environment
    says `URINGKIT_LOOP_TRANSPORT=selector` or this kernel cannot."""
    if os.environ.get("URINGKIT_LOOP_TRANSPORT", "ring") == "selector":
        return False
    return _ring_transports_supported()


@functools.cache
def _ring_transports_supported() -> bool:
    """Multishot receives into provided buffers work here (probed once per process)."""
    from ..doctor import _multishot_recv

    return _multishot_recv()[0]


def new_event_loop(*, ring_transports: bool | None = None) -> UringEventLoop:
    """A new loop (PermissionError where io_uring is blocked). `ring_transports`:
    stream sockets receive through the ring (the default where the kernel can) or, if
    False, through asyncio's own transports (readiness polls, then `recv`)."""
    try:
        return UringEventLoop(ring_transports=ring_transports)
    except PermissionError as e:
        raise PermissionError(
            e.errno,
            f"uringkit.loop needs io_uring, which is blocked here ({e.strerror}): use "
            "asyncio's own loop (see `uringkit doctor` and docs/containers.md)",
        ) from e


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """`asyncio.set_event_loop_policy(uringkit.loop.EventLoopPolicy())`."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return new_event_loop()


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """`asyncio.run(main)` on a `UringEventLoop`."""
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)
