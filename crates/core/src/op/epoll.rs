//! `IORING_OP_EPOLL_CTL` (5.6) and `IORING_OP_EPOLL_WAIT` (6.15): an epoll set driven
//! through the ring — register interest, and wait for readiness as one more op.
//! The `epoll_event` array lives in the op's slot (`Owned::Epoll`).

use super::FdArg;
use crate::with_fd;
use io_uring::{opcode, squeue::Entry, types};

pub fn epoll_ctl(epfd: FdArg, fd: i32, op: i32, ev: *const libc::epoll_event) -> Entry {
    with_fd!(epfd, |t| opcode::EpollCtl::new(
        t,
        types::Fd(fd),
        op,
        ev.cast()
    )
    .build())
}

/// Wait for up to `max` events of `epfd` into `events`; completes with how many.
pub fn epoll_wait(epfd: FdArg, events: *mut libc::epoll_event, max: u32) -> Entry {
    with_fd!(epfd, |t| opcode::EpollWait::new(t, events.cast(), max)
        .build())
}
