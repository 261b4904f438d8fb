//! Extended attributes: `IORING_OP_GETXATTR`/`SETXATTR` (by path) and
//! `FGETXATTR`/`FSETXATTR` (by file) — getxattr(2)/setxattr(2) through the ring (5.17+).
//! The name, the path and the value buffer live in the op's slot (`Owned::Xattr`).

use super::FdArg;
use crate::with_fd;
use io_uring::{opcode, squeue::Entry};

/// The largest value an attribute may hold (Linux's XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 65536;

pub fn getxattr(
    path: *const libc::c_char,
    name: *const libc::c_char,
    value: *mut u8,
    len: u32,
) -> Entry {
    opcode::GetXattr::new(name, value.cast(), path, len).build()
}

pub fn setxattr(
    path: *const libc::c_char,
    name: *const libc::c_char,
    value: *const u8,
    len: u32,
    flags: i32,
) -> Entry {
    opcode::SetXattr::new(name, value.cast(), path, len)
        .flags(flags)
        .build()
}

pub fn fgetxattr(fd: FdArg, name: *const libc::c_char, value: *mut u8, len: u32) -> Entry {
    with_fd!(fd, |t| opcode::FGetXattr::new(t, name, value.cast(), len)
        .build())
}

pub fn fsetxattr(
    fd: FdArg,
    name: *const libc::c_char,
    value: *const u8,
    len: u32,
    flags: i32,
) -> Entry {
    with_fd!(fd, |t| opcode::FSetXattr::new(t, name, value.cast(), len)
        .flags(flags)
        .build())
}
