"""Provided buffer rings: the kernel picks the buffer, the CQE names it, ENOBUFS when dry,
recovery after recycling."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from uringkit import Ring

from conftest import need_ops, wait_all


def test_read_with_buffer_select(ring: Ring, rfd: int, data_file: tuple[Path, bytes]) -> None:
    need_ops("read", "provide_buffers")
    br = ring.buffer_ring(1, 4, 1024)
    assert br.available == 4 and br.group_id == 1
    ring.read(rfd, buffer_ring=br, offset=0, user_data=1)
    (c,) = ring.wait(1)
    assert c.res == 1024 and c.buffer_id is not None
    assert bytes(br.view(c)) == data_file[1][:1024]
    assert br.available == 3
    assert br.recycle(c.buffer_id) is True
    assert br.recycle(c.buffer_id) is False
    assert br.available == 4


def test_multishot_recv_enobufs_and_recovery(
    ring: Ring, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    need_ops("recv", "provide_buffers")
    a, b = tcp_pair
    br = ring.buffer_ring(3, 2, 16)
    ring.recv(b, multishot=True, buffer_ring=br, user_data=5)
    ring.submit()
    chunks = []
    for i in range(3):  # three sends, two buffers: the third finds the ring dry
        a.send(bytes([65 + i]) * 16)
        chunks += ring.wait(1, timeout=5)
    while not any(c.errno == errno.ENOBUFS for c in chunks):
        chunks += ring.wait(1, timeout=5)
    data = [bytes(br.view(c)) for c in chunks if c.ok and c.buffer_id is not None]
    assert data[:2] == [b"A" * 16, b"B" * 16]
    last = chunks[-1]
    assert last.errno == errno.ENOBUFS and not last.more
    assert "recycle" in (last.message or "")
    assert br.available == 0
    for c in chunks:
        if c.buffer_id is not None:
            br.recycle(c.buffer_id)
    assert br.available == 2
    # re-arm: the data still in the socket arrives
    ring.recv(b, multishot=True, buffer_ring=br, user_data=6)
    (c,) = ring.wait(1, timeout=5)
    assert c.ok and bytes(br.view(c)) == b"C" * 16
    ring.cancel(6)
    wait_all(ring, 2)


def test_buffer_ring_validation(ring: Ring) -> None:
    need_ops("provide_buffers")
    br = ring.buffer_ring(2, 2, 64)
    with pytest.raises(ValueError, match="already exists"):
        ring.buffer_ring(2, 2, 64)
    with pytest.raises(ValueError, match="out of range"):
        br.recycle(9)
    with pytest.raises(ValueError, match="multishot recv needs buffer_ring"):
        ring.recv(0, bytearray(4), multishot=True)
    with Ring(4) as other, pytest.raises(ValueError, match="not created by this Ring"):
        ring.recv(0, buffer_ring=other.buffer_ring(2, 1, 8))


def test_take_copies_and_gives_the_buffer_back(ring: Ring) -> None:
    """take(c): the completion's bytes, its buffer back in the ring in the same call (the
    receive loop of uringkit.loop's transports); a completion without a buffer is refused."""
    need_ops("read", "provide_buffers", "nop")
    r, w = os.pipe()
    try:
        br = ring.buffer_ring(6, 1, 32)
        for msg in (b"first", b"second, same buffer"):
            os.write(w, msg)
            ring.read(r, buffer_ring=br)
            (c,) = ring.wait(1)
            assert br.available == 0
            assert br.take(c) == msg
            assert br.available == 1  # (else the second read would find the ring dry)
        ring.nop()
        (c,) = ring.wait(1)
        with pytest.raises(ValueError, match="no buffer"):
            br.take(c)
    finally:
        os.close(r)
        os.close(w)


def test_view_of_failed_completion(ring: Ring) -> None:
    need_ops("provide_buffers", "nop")
    br = ring.buffer_ring(4, 1, 8)
    ring.nop()
    (c,) = ring.wait(1)
    with pytest.raises(ValueError, match="no buffer"):
        br.view(c)


def test_pipe_read_select(ring: Ring) -> None:
    need_ops("read", "provide_buffers")
    r, w = os.pipe()
    try:
        br = ring.buffer_ring(5, 2, 32)
        os.write(w, b"through a provided buffer")
        ring.read(r, buffer_ring=br)
        (c,) = ring.wait(1)
        assert bytes(br.view(c)) == b"through a provided buffer"
    finally:
        os.close(r)
        os.close(w)


def test_multishot_read_from_a_pipe(ring: Ring, pipe: tuple[int, int]) -> None:
    """read(multishot=True): one completion per chunk written into the pipe, each in a
    provided buffer, then end of file when the writer closes (kernel 6.7+)."""
    need_ops("read_multishot")
    r, w = pipe
    br = ring.buffer_ring(4, 4, 64)
    ring.read(r, buffer_ring=br, multishot=True, user_data=7)
    ring.submit()
    got = []
    for chunk in (b"first", b"second", b"third"):
        os.write(w, chunk)
        (c,) = ring.wait(1, timeout=5)
        assert c.user_data == 7 and c.ok and c.more
        got.append(bytes(br.view(c)))
        br.recycle(c.buffer_id)
    assert got == [b"first", b"second", b"third"]
    os.close(w)
    (c,) = ring.wait(1, timeout=5)
    assert c.res == 0 and not c.more  # end of file ends it
    with pytest.raises(ValueError, match="multishot=True reads into provided buffers"):
        ring.read(r, bytearray(4), multishot=True)


def test_multishot_recvmsg_messages_addresses_and_enobufs(ring: Ring) -> None:
    """recvmsg(multishot=True, buffer_ring=): one completion per datagram; take_msg
    gives (payload, sender) and recycles; a payload longer than the buffer's room is
    truncated; ENOBUFS ends the multishot when every buffer is taken, nothing lost."""
    need_ops("recvmsg", "provide_buffers")
    br = ring.buffer_ring(3, 8, 144 + 512)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with u, v:
        u.bind(("127.0.0.1", 0))
        v.bind(("127.0.0.1", 0))
        ring.recvmsg(u, multishot=True, buffer_ring=br, user_data=9)
        ring.submit()
        msgs = [b"a", b"b" * 100, b"c" * 512, b"d" * 900]
        for m in msgs:
            v.sendto(m, u.getsockname())
        got = []
        while len(got) < 4:
            for c in ring.wait(1, 5.0):
                assert c.user_data == 9 and c.res > 0 and c.more
                got.append(br.take_msg(c))
        assert got == [(m[:512], v.getsockname()) for m in msgs]  # the last one cut
        assert br.available == 8
        # more datagrams than buffers, none taken: ENOBUFS ends the multishot
        for i in range(12):
            v.sendto(b"%d" % i, u.getsockname())
        done = []
        while not done or done[-1].more:
            done += ring.wait(1, 5.0)
        assert done[-1].res == -errno.ENOBUFS and "no provided buffer" in (done[-1].message or "")
        first = [br.take_msg(c)[0] for c in done[:-1]]
        ring.recvmsg(u, multishot=True, buffer_ring=br, user_data=10)  # re-armed
        ring.submit()
        rest: list[bytes] = []
        while len(first) + len(rest) < 12:
            rest += [br.take_msg(c)[0] for c in ring.wait(1, 5.0) if c.res > 0]
        assert first + rest == [b"%d" % i for i in range(12)]
        ring.cancel(10)
        ring.wait(2, 5.0)


def test_recvmsg_buffer_ring_errors(ring: Ring) -> None:
    need_ops("recvmsg", "provide_buffers")
    small = ring.buffer_ring(4, 2, 100)
    big = ring.buffer_ring(5, 2, 4096)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        with pytest.raises(ValueError, match="larger than 144 bytes"):
            ring.recvmsg(u, multishot=True, buffer_ring=small, user_data=1)
        with pytest.raises(ValueError, match="multishot only"):
            ring.recvmsg(u, buffer_ring=big, user_data=1)
        with pytest.raises(ValueError, match="needs buffer_ring"):
            ring.recvmsg(u, [bytearray(10)], multishot=True, user_data=1)
        with pytest.raises(ValueError, match="needs buffers"):
            ring.recvmsg(u, user_data=1)
        ring.nop(user_data=2)
        (c,) = ring.wait(1)
        with pytest.raises(ValueError, match="carries no buffer"):
            big.take_msg(c)
