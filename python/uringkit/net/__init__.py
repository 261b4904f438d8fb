"""The io_uring network-server pattern (seed 001 §6), measured against asyncio and uvloop.

    from uringkit import net
    with net.EchoServer(("127.0.0.1", 0)) as srv:          # serving on its own thread
        r = net.load(srv.address, connections=64, size=4096, seconds=2)
        print(r["requests_per_s"], r["p99_us"])

`EchoServer` runs one io_uring on a native thread: a multishot ACCEPT installs each
connection as a fixed (direct) file, one multishot RECV per connection fills buffers the
kernel picks from a provided-buffer ring, each buffer is sent back with SEND (or SEND_ZC,
`zero_copy=True`) straight from where it was received and returns to the ring when the
send is done; every completion of one wait is handled as a batch, and the ring runs
with DEFER_TASKRUN + SINGLE_ISSUER where the kernel has them. `load` is a closed-loop
load generator on io_uring (each connection sends a message and waits for all of it to
come back, checking every byte), the measuring side of `uringkit net bench`, which
runs the same load against asyncio's and uvloop's echo servers. See docs/net.md.
"""

from __future__ import annotations

import socket
from types import TracebackType

from .._native import EchoServer as _NativeEcho
from .._native import echo_load

__all__ = ["EchoServer", "load"]

Address = tuple[str, int]


class EchoServer:
    """An io_uring echo server on a native thread, listening on `address`.

    `zero_copy`: send with SEND_ZC (the buffer goes back to the ring on the kernel's
    notification; pays off for large messages on real NICs, rarely on loopback).
    `buffers` x `buffer_size`: the provided-buffer ring (one completion carries at most
    `buffer_size` bytes; when all buffers wait to be sent, a connection's receive pauses
    until one comes back). `max_connections`: fixed-file slots (connections beyond it
    wait in the listen backlog until one closes). `fixed_files=False`: plain descriptors.

    Raises OSError (PermissionError where io_uring is blocked: seccomp, containers,
    `kernel.io_uring_disabled`) if the server cannot start; ValueError for bad sizes.
    Needs kernel 6.0 (multishot RECV with provided buffers).
    """

    def __init__(
        self,
        address: Address = ("127.0.0.1", 0),
        *,
        zero_copy: bool = False,
        buffers: int = 2048,
        buffer_size: int = 4096,
        max_connections: int = 4096,
        fixed_files: bool = True,
        backlog: int = 1024,
    ) -> None:
        self._sock = socket.create_server(address, backlog=backlog)
        try:
            self._srv: _NativeEcho | None = _NativeEcho(
                self._sock.fileno(),
                zero_copy=zero_copy,
                buffers=buffers,
                buffer_size=buffer_size,
                max_connections=max_connections,
                fixed_files=fixed_files,
            )
        except BaseException:
            self._sock.close()
            raise

    @property
    def address(self) -> Address:
        """(host, port) the server listens on."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def running(self) -> bool:
        return self._srv is not None and self._srv.running

    def stats(self) -> dict[str, int]:
        """accepted, closed, bytes, recvs, sends, cqes, enters (io_uring_enter calls),
        enobufs (receives paused for lack of buffers), fixed_files, defer_taskrun."""
        if self._srv is None:
            raise ValueError("the server is closed")
        return dict(self._srv.stats())

    def close(self) -> None:
        """Stop serving (open connections are closed) and close the listening socket.
        Raises the OSError that stopped the server early, if one did."""
        srv, self._srv = self._srv, None
        try:
            if srv is not None:
                srv.stop()
        finally:
            self._sock.close()

    def __enter__(self) -> EchoServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def load(
    address: Address,
    *,
    connections: int = 64,
    size: int = 4096,
    seconds: float = 2.0,
    warmup: float = 0.5,
) -> dict[str, float]:
    """Closed-loop echo load: `connections` TCP connections, each sending `size` bytes
    and waiting for the whole echo (checked byte for byte) before the next, for
    `warmup` + `seconds`. Returns requests, seconds, requests_per_s, mean_us, p50_us,
    p99_us, p999_us, max_us (per-request latency over the measured `seconds`) and enters
    (the generator's own io_uring_enter calls). OSError if a connection fails, the
    server closes one, or an echo differs (naming the connection and the byte)."""
    host, port = address
    return dict(echo_load(host, port, connections, size, seconds, warmup))
