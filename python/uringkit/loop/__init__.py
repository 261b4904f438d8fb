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
re-arm of the last iteration and waits. `uringkit.aio` (files, `aio.sock_*`) keeps its
own ring on this loop as on any other.

Needs io_uring (PermissionError saying so where it is blocked); `run()` takes the same
arguments as `asyncio.run`. See docs/loop.md for what it measures against asyncio's loop
and uvloop.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from .._native import Ring

__all__ = ["EventLoopPolicy", "UringEventLoop", "UringSelector", "new_event_loop", "run"]

T = TypeVar("T")

_POLLIN = 0x001
_POLLOUT = 0x004
_POLLERR = 0x008
_POLLHUP = 0x010
_ECANCELED = 125
_ENOENT = 2
_EBADFD = 77


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

    def _new_ring(self) -> tuple[Ring, bool]:
        """A ring whose only submitter will be the thread that runs the loop: created
        disabled (SQEs can be queued, nothing submitted) and enabled by the first
        `select`, which makes that thread the single issuer. Kernels before 6.1: a plain
        ring, usable from any thread."""
        try:
            r = Ring(self._entries, single_issuer=True, defer_taskrun=True, disabled=True)
            return r, False
        except OSError:
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
        try:
            done = self._wait(timeout)
        except FileExistsError:  # EEXIST: not the issuer's thread
            self._move_to_this_thread()
            done = self._wait(timeout)
        ready: dict[int, int] = {}
        for c in done:
            where = self._armed.pop(c.user_data, None)
            if where is None:
                continue  # a poll_remove's own completion, or a poll removed meanwhile
            fd, ev = where
            del self._by_fd[where]
            key = self._keys.get(fd)
            if key is None or not key.events & ev:
                continue  # unregistered (or modified) after it fired
            if c.res < 0 and c.res != -_ECANCELED:
                # (EBADF: the fd was closed while registered, as epoll would drop it)
                continue
            if c.res == -_ECANCELED:
                self._arm(fd, ev)
                continue
            ready[fd] = ready.get(fd, 0) | ev
            self._arm(fd, ev)  # level-triggered: asked again on the next select
        return [(self._keys[fd], evs & self._keys[fd].events) for fd, evs in ready.items()]

    def _wait(self, timeout: float | None) -> list[Any]:
        if timeout is not None and timeout <= 0:
            self._ring.submit()  # (the re-arms; a ready fd completes its poll inline)
            return self._ring.completions()
        return self._ring.wait(1, timeout)

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
    """asyncio's selector event loop over `UringSelector`."""

    def __init__(self) -> None:
        super().__init__(UringSelector())


def new_event_loop() -> UringEventLoop:
    """A new loop (PermissionError where io_uring is blocked)."""
    try:
        return UringEventLoop()
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
