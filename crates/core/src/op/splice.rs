//! splice and tee: moving bytes between descriptors without user memory.

use super::FdArg;
use crate::with_fd;
use io_uring::{opcode, squeue::Entry};

/// `off_in`/`off_out` of -1 mean "use and advance the file position" (required for pipes).
pub fn splice(
    fd_in: FdArg,
    off_in: i64,
    fd_out: FdArg,
    off_out: i64,
    len: u32,
    flags: u32,
) -> Entry {
    with_fd!(fd_in, |i| with_fd!(fd_out, |o| opcode::Splice::new(
        i, off_in, o, off_out, len
    )
    .flags(flags)
    .build()))
}

pub fn tee(fd_in: FdArg, fd_out: FdArg, len: u32, flags: u32) -> Entry {
    with_fd!(fd_in, |i| with_fd!(fd_out, |o| opcode::Tee::new(i, o, len)
        .flags(flags)
        .build()))
}
