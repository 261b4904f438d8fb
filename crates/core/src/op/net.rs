//! Sockets: socket, connect, accept (and multishot), send/recv (and multishot, zero-copy),
//! sendmsg/recvmsg, shutdown.

use super::{FdArg, SockAddr};
use crate::with_fd;
use io_uring::{opcode, squeue::Entry, squeue::Flags, types};

pub fn socket(domain: i32, ty: i32, protocol: i32, slot: Option<u32>) -> Entry {
    let mut o = opcode::Socket::new(domain, ty, protocol);
    if let Some(s) = slot {
        o = o.file_index(types::DestinationSlot::try_from_slot_target(s).ok());
    }
    o.build()
}

/// The entry points into `addr`: keep it alive (the slot's `Owned::Addr`) until completion.
pub fn connect(fd: FdArg, addr: &SockAddr) -> Entry {
    let (p, len) = (&addr.storage as *const _ as *const libc::sockaddr, addr.len);
    with_fd!(fd, |t| opcode::Connect::new(t, p, len).build())
}

/// `addr`: where the kernel stores the peer's address (None for nowhere); keep it alive
/// (the slot's `Owned::Addr`) until completion.
pub fn accept(fd: FdArg, addr: Option<&mut SockAddr>, flags: i32) -> Entry {
    let (p, lp) = match addr {
        None => (std::ptr::null_mut(), std::ptr::null_mut()),
        Some(a) => (
            &mut a.storage as *mut _ as *mut libc::sockaddr,
            &mut a.len as *mut libc::socklen_t,
        ),
    };
    with_fd!(fd, |t| opcode::Accept::new(t, p, lp).flags(flags).build())
}

pub fn accept_multi(fd: FdArg, flags: i32) -> Entry {
    with_fd!(fd, |t| opcode::AcceptMulti::new(t).flags(flags).build())
}

pub fn recv(fd: FdArg, buf: *mut u8, len: u32, flags: i32) -> Entry {
    with_fd!(fd, |t| opcode::Recv::new(t, buf, len).flags(flags).build())
}

pub fn recv_select(fd: FdArg, len: u32, flags: i32, group: u16) -> Entry {
    with_fd!(fd, |t| opcode::Recv::new(t, std::ptr::null_mut(), len)
        .flags(flags)
        .buf_group(group)
        .build()
        .flags(Flags::BUFFER_SELECT))
}

pub fn recv_multi(fd: FdArg, flags: i32, group: u16) -> Entry {
    with_fd!(fd, |t| opcode::RecvMulti::new(t, group)
        .flags(flags)
        .build()
        .flags(Flags::BUFFER_SELECT))
}

pub fn send(fd: FdArg, buf: *const u8, len: u32, flags: i32) -> Entry {
    with_fd!(fd, |t| opcode::Send::new(t, buf, len).flags(flags).build())
}

pub fn send_zc(fd: FdArg, buf: *const u8, len: u32, flags: i32) -> Entry {
    with_fd!(fd, |t| opcode::SendZc::new(t, buf, len)
        .flags(flags)
        .build())
}

pub fn sendmsg(fd: FdArg, msg: *const libc::msghdr, flags: u32) -> Entry {
    with_fd!(fd, |t| opcode::SendMsg::new(t, msg).flags(flags).build())
}

/// sendmsg with zero copy (6.1+): like send_zc, a notification CQE follows.
pub fn sendmsg_zc(fd: FdArg, msg: *const libc::msghdr, flags: u32) -> Entry {
    with_fd!(fd, |t| opcode::SendMsgZc::new(t, msg).flags(flags).build())
}

pub fn recvmsg(fd: FdArg, msg: *mut libc::msghdr, flags: u32) -> Entry {
    with_fd!(fd, |t| opcode::RecvMsg::new(t, msg).flags(flags).build())
}

/// Multishot recvmsg into provided buffers (6.0+): each message lands in a buffer of
/// `group` as an `io_uring_recvmsg_out` header, the name field (`msg_namelen` bytes of
/// `msg`), the control field, then the payload ([`RECVMSG_NAME_LEN`] reserved here).
pub fn recvmsg_multi(fd: FdArg, msg: *const libc::msghdr, flags: u32, group: u16) -> Entry {
    with_fd!(fd, |t| opcode::RecvMsgMulti::new(t, msg, group)
        .flags(flags)
        .build())
}

/// The name field a multishot recvmsg reserves in each buffer: a whole sockaddr_storage.
pub const RECVMSG_NAME_LEN: usize = std::mem::size_of::<libc::sockaddr_storage>();

/// Bytes of each provided buffer a multishot recvmsg uses before the payload.
pub const RECVMSG_OVERHEAD: usize = 16 + RECVMSG_NAME_LEN;

pub fn shutdown(fd: FdArg, how: i32) -> Entry {
    with_fd!(fd, |t| opcode::Shutdown::new(t, how).build())
}

/// bind(2) (kernel 6.11+). The entry points into `addr`: keep it alive (the slot's
/// `Owned::Addr`) until completion.
pub fn bind(fd: FdArg, addr: &SockAddr) -> Entry {
    let (p, len) = (&addr.storage as *const _ as *const libc::sockaddr, addr.len);
    with_fd!(fd, |t| opcode::Bind::new(t, p, len).build())
}

/// listen(2) (kernel 6.11+).
pub fn listen(fd: FdArg, backlog: i32) -> Entry {
    with_fd!(fd, |t| opcode::Listen::new(t, backlog).build())
}
