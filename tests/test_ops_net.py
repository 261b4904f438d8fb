"""Sockets over loopback: socket, connect, accept (+multishot), send/recv, send_zc,
sendmsg/recvmsg, shutdown."""

from __future__ import annotations

import contextlib
import os
import socket

import pytest

from uringkit import Completion, EpollOp, Ring

from conftest import need_ops, wait_all


def test_socket_connect_accept(ring: Ring) -> None:
    need_ops("socket", "connect", "accept")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    try:
        ring.socket(socket.AF_INET, socket.SOCK_STREAM, user_data=1)
        cfd = ring.wait(1)[0].raise_for_error()
        ring.accept(srv, user_data=2)
        ring.connect(cfd, ("127.0.0.1", port), user_data=3)
        got = {c.user_data: c for c in wait_all(ring, 2)}
        assert got[3].res == 0
        afd = got[2].raise_for_error()
        host, peer_port = got[2].result
        assert host == "127.0.0.1"
        with socket.socket(fileno=os.dup(cfd)) as client:
            assert peer_port == client.getsockname()[1]
        os.close(afd)
        os.close(cfd)
    finally:
        srv.close()


def test_connect_refused(ring: Ring) -> None:
    need_ops("connect")
    s = socket.socket()
    tmp = socket.socket()
    tmp.bind(("127.0.0.1", 0))
    port = tmp.getsockname()[1]
    tmp.close()
    ring.connect(s, ("127.0.0.1", port))
    (c,) = ring.wait(1, timeout=5)
    with pytest.raises(ConnectionRefusedError):
        c.raise_for_error()
    s.close()


def test_bad_address(ring: Ring) -> None:
    with pytest.raises(ValueError, match="numeric"):
        ring.connect(0, ("example.invalid", 80))
    with pytest.raises(TypeError, match="address"):
        ring.connect(0, 42)  # type: ignore[arg-type]


def test_multishot_accept(ring: Ring) -> None:
    need_ops("accept")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    clients = []
    try:
        ring.accept(srv, multishot=True, user_data=9)
        ring.submit()
        for _ in range(3):
            clients.append(socket.create_connection(srv.getsockname()))
        done = wait_all(ring, 3)
        assert all(c.user_data == 9 and c.more and c.res > 0 for c in done)
        for c in done:
            os.close(c.res)
        assert ring.in_flight == 1  # still armed
        ring.cancel(9, user_data=10)
        rest = wait_all(ring, 2)
        final = [c for c in rest if c.user_data == 9]
        assert final and not final[0].more and final[0].errno in (125,)  # ECANCELED
        assert ring.in_flight == 0
    finally:
        srv.close()
        for c in clients:
            c.close()


def test_send_recv(ring: Ring, tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    need_ops("send", "recv")
    a, b = tcp_pair
    ring.send(a, b"ping" * 100, user_data=1)
    buf = bytearray(4096)
    ring.recv(b, buf, user_data=2)
    got = {c.user_data: c.res for c in wait_all(ring, 2)}
    assert got[1] == 400
    n = got[2]
    data = bytes(buf[:n])
    while len(data) < 400:
        data += b.recv(4096)
    assert data == b"ping" * 100


def _zc_completions(ring: Ring, b: socket.socket) -> tuple[Completion, Completion, bytes]:
    """A zero-copy send's two completions (the send, then its notification), draining
    the receiving socket meanwhile so the send can finish; and what was received."""
    done: list[Completion] = []
    got = b""
    while len(done) < 2:
        done += ring.wait(1, timeout=5)
        with contextlib.suppress(BlockingIOError):
            got += b.recv(1 << 20, socket.MSG_DONTWAIT)
    return done[0], done[1], got


def test_send_zc_notification(ring: Ring, tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    need_ops("send_zc")
    a, b = tcp_pair
    payload = bytearray(os.urandom(64 * 1024))
    ring.send_zc(a, payload, user_data=7)
    del payload  # the ring keeps it alive until the notification
    first, notif, got = _zc_completions(ring, b)
    assert first.user_data == notif.user_data == 7
    assert first.more and first.res > 0 and not first.notif
    assert notif.notif and not notif.more
    assert notif.buffer is not None  # handed back only with the last completion
    while len(got) < first.res:
        got += b.recv(1 << 20)
    assert got == bytes(notif.buffer)[: first.res]
    assert ring.in_flight == 0


def test_sendmsg_recvmsg_udp(ring: Ring) -> None:
    need_ops("sendmsg", "recvmsg")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    try:
        ring.sendmsg(tx, [b"hello ", b"udp"], rx.getsockname(), user_data=1)
        assert ring.wait(1)[0].res == 9
        h, t = bytearray(3), bytearray(10)
        ring.recvmsg(rx, [h, t], user_data=2)
        (c,) = ring.wait(1, timeout=5)
        assert c.res == 9 and bytes(h) == b"hel" and bytes(t[:6]) == b"lo udp"
        assert c.result == tx.getsockname()
    finally:
        rx.close()
        tx.close()


def test_shutdown(ring: Ring, tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    need_ops("shutdown")
    a, b = tcp_pair
    ring.shutdown(a, socket.SHUT_WR)
    assert ring.wait(1)[0].res == 0
    assert b.recv(10) == b""  # EOF


def test_unix_socket_connect(ring: Ring, tmp_path: os.PathLike[str]) -> None:
    need_ops("connect")
    path = os.path.join(str(tmp_path), "s.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    c = socket.socket(socket.AF_UNIX)
    try:
        ring.connect(c, path)
        assert ring.wait(1)[0].res == 0
    finally:
        c.close()
        srv.close()


def test_bind_listen_then_accept(ring: Ring) -> None:
    """A whole server set up through the ring: socket, bind, listen, accept."""
    need_ops("socket", "bind", "listen", "accept")
    ring.socket(socket.AF_INET, socket.SOCK_STREAM, user_data=1)
    sfd = ring.wait(1)[0].raise_for_error()
    srv = socket.socket(fileno=sfd)
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ring.bind(sfd, ("127.0.0.1", 0), user_data=2, link=True)
        ring.listen(sfd, 8, user_data=3)
        got = {c.user_data: c.res for c in wait_all(ring, 2)}
        assert got == {2: 0, 3: 0}
        port = srv.getsockname()[1]
        assert port != 0
        ring.accept(sfd, user_data=4)
        with socket.create_connection(("127.0.0.1", port)):
            (c,) = ring.wait(1, timeout=5)
            os.close(c.raise_for_error())
        ring.bind(sfd, ("127.0.0.1", port), user_data=5)  # already bound
        assert ring.wait(1)[0].res == -22
    finally:
        srv.close()


def test_sendmsg_zc_notification(ring: Ring, tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    """sendmsg_zc gathers its buffers without copying them: the send's completion
    (more=True), then the notification (notif=True) when the kernel lets go of them —
    they are held until then, whatever Python does."""
    need_ops("sendmsg_zc")
    a, b = tcp_pair
    head, body = bytearray(b"head:"), bytearray(os.urandom(32 * 1024))
    want = bytes(head + body)
    ring.sendmsg_zc(a, [head, body], user_data=9)
    del head, body
    first, notif, got = _zc_completions(ring, b)
    assert first.user_data == notif.user_data == 9
    assert first.more and first.res == len(want) and notif.notif and not notif.more
    while len(got) < len(want):
        got += b.recv(1 << 20)
    assert got == want and ring.in_flight == 0


def test_epoll_ctl_and_wait(ring: Ring) -> None:
    """An epoll set driven through the ring: EPOLL_CTL_ADD via epoll_ctl (adding twice
    is EEXIST), then epoll_wait completes once the pipe has data, with (data, events)
    pairs as its result."""
    import errno
    import select

    need_ops("epoll_ctl", "epoll_wait")
    ep = select.epoll()
    r, w = os.pipe()
    try:
        ring.epoll_ctl(ep, EpollOp.ADD, r, select.EPOLLIN, data=77, user_data=1)
        (c,) = wait_all(ring, 1)
        assert c.res == 0
        ring.epoll_ctl(ep.fileno(), EpollOp.ADD, r, select.EPOLLIN, user_data=2)
        (c,) = wait_all(ring, 1)
        assert c.res == -errno.EEXIST
        ring.epoll_wait(ep, 8, user_data=3)
        ring.submit()
        assert ring.wait(1, timeout=0.05) == []  # nothing ready yet
        os.write(w, b"x")
        (c,) = ring.wait(1, timeout=5)
        assert c.res == 1 and c.result == [(77, select.EPOLLIN)]
        with pytest.raises(ValueError, match="maxevents"):
            ring.epoll_wait(ep, 0)
    finally:
        os.close(r)
        os.close(w)
        ep.close()
