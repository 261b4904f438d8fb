//! Cancellation: by user_data, by fd, or everything.

use super::FdArg;
use io_uring::{opcode, squeue::Entry, types::CancelBuilder};

pub fn cancel_user_data(target: u64, all: bool) -> Entry {
    let b = CancelBuilder::user_data(target);
    opcode::AsyncCancel2::new(if all { b.all() } else { b }).build()
}

pub fn cancel_fd(fd: FdArg, all: bool) -> Entry {
    let b = match fd {
        FdArg::Raw(r) => CancelBuilder::fd(io_uring::types::Fd(r)),
        FdArg::Fixed(i) => CancelBuilder::fd(io_uring::types::Fixed(i)),
    };
    opcode::AsyncCancel2::new(if all { b.all() } else { b }).build()
}

pub fn cancel_any() -> Entry {
    opcode::AsyncCancel2::new(CancelBuilder::any()).build()
}
