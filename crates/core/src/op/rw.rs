//! Reads and writes: plain, vectored, fixed-buffer and buffer-select forms.

use super::FdArg;
use crate::with_fd;
use io_uring::{opcode, squeue::Entry};

/// `offset == u64::MAX` means "the file's current position" (IORING_FEAT_RW_CUR_POS).
/// `rw_flags`: preadv2's RWF_* flags (RWF_NOWAIT, RWF_HIPRI, …), 0 for none.
pub fn read(fd: FdArg, buf: *mut u8, len: u32, offset: u64, rw_flags: i32) -> Entry {
    with_fd!(fd, |t| opcode::Read::new(t, buf, len)
        .offset(offset)
        .rw_flags(rw_flags)
        .build())
}

/// A read whose buffer the kernel picks from provided-buffer group `group`.
pub fn read_select(fd: FdArg, len: u32, offset: u64, group: u16) -> Entry {
    with_fd!(fd, |t| opcode::Read::new(t, std::ptr::null_mut(), len)
        .offset(offset)
        .buf_group(group)
        .build()
        .flags(io_uring::squeue::Flags::BUFFER_SELECT))
}

/// Multishot read (kernel 6.7+) of a pollable file (pipe, socket, eventfd, tty): one
/// completion per chunk, each in a buffer from provided-buffer group `group`, until end
/// of file, an error, ENOBUFS or cancellation. (The kernel takes each chunk's size from
/// the buffer: the SQE's length must be 0.)
pub fn read_multi(fd: FdArg, group: u16) -> Entry {
    with_fd!(fd, |t| opcode::ReadMulti::new(t, 0, group)
        .build()
        .flags(io_uring::squeue::Flags::BUFFER_SELECT))
}

/// `rw_flags`: pwritev2's RWF_* flags (RWF_DSYNC: the write is durable like a write
/// followed by fdatasync, in one SQE; RWF_APPEND, …), 0 for none.
pub fn write(fd: FdArg, buf: *const u8, len: u32, offset: u64, rw_flags: i32) -> Entry {
    with_fd!(fd, |t| opcode::Write::new(t, buf, len)
        .offset(offset)
        .rw_flags(rw_flags)
        .build())
}

pub fn readv(fd: FdArg, iov: *const libc::iovec, n: u32, offset: u64) -> Entry {
    with_fd!(fd, |t| opcode::Readv::new(t, iov, n).offset(offset).build())
}

pub fn writev(fd: FdArg, iov: *const libc::iovec, n: u32, offset: u64) -> Entry {
    with_fd!(fd, |t| opcode::Writev::new(t, iov, n)
        .offset(offset)
        .build())
}

/// `preadv2` into iovecs that all lie inside registered buffer `index` (6.15+).
pub fn readv_fixed(fd: FdArg, iov: *const libc::iovec, n: u32, index: u16, offset: u64) -> Entry {
    with_fd!(fd, |t| opcode::ReadvFixed::new(t, iov, n, index)
        .offset(offset)
        .build())
}

/// `pwritev2` from iovecs that all lie inside registered buffer `index` (6.15+).
pub fn writev_fixed(fd: FdArg, iov: *const libc::iovec, n: u32, index: u16, offset: u64) -> Entry {
    with_fd!(fd, |t| opcode::WritevFixed::new(t, iov, n, index)
        .offset(offset)
        .build())
}

pub fn read_fixed(fd: FdArg, buf: *mut u8, len: u32, index: u16, offset: u64) -> Entry {
    with_fd!(fd, |t| opcode::ReadFixed::new(t, buf, len, index)
        .offset(offset)
        .build())
}

pub fn write_fixed(fd: FdArg, buf: *const u8, len: u32, index: u16, offset: u64) -> Entry {
    with_fd!(fd, |t| opcode::WriteFixed::new(t, buf, len, index)
        .offset(offset)
        .build())
}
