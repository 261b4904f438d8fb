//! Path and descriptor operations: openat, close, statx.

use super::{FdArg, KStatx};
use crate::with_fd;
use io_uring::{opcode, squeue::Entry, types};

/// `slot`: install the new fd directly into the fixed file table at this index. A fixed
/// file has no close-on-exec flag: O_CLOEXEC (which the kernel rejects there) is dropped.
pub fn openat(
    dirfd: i32,
    path: *const libc::c_char,
    flags: i32,
    mode: u32,
    slot: Option<u32>,
) -> Entry {
    let flags = if slot.is_some() {
        flags & !libc::O_CLOEXEC
    } else {
        flags
    };
    let mut o = opcode::OpenAt::new(types::Fd(dirfd), path)
        .flags(flags)
        .mode(mode);
    if let Some(s) = slot {
        o = o.file_index(types::DestinationSlot::try_from_slot_target(s).ok());
    }
    o.build()
}

/// openat2(2): `how` (flags, mode, RESOLVE_* restrictions on how the path is walked)
/// must stay alive — the slot's `Owned::PathHow` — until completion.
pub fn openat2(
    dirfd: i32,
    path: *const libc::c_char,
    how: *const types::OpenHow,
    slot: Option<u32>,
) -> Entry {
    let mut o = opcode::OpenAt2::new(types::Fd(dirfd), path, how);
    if let Some(s) = slot {
        o = o.file_index(types::DestinationSlot::try_from_slot_target(s).ok());
    }
    o.build()
}

pub fn close(fd: FdArg) -> Entry {
    with_fd!(fd, |t| opcode::Close::new(t).build())
}

pub fn statx(
    dirfd: i32,
    path: *const libc::c_char,
    out: *mut KStatx,
    flags: i32,
    mask: u32,
) -> Entry {
    opcode::Statx::new(types::Fd(dirfd), path, out.cast())
        .flags(flags)
        .mask(mask)
        .build()
}

pub fn renameat(
    olddir: i32,
    old: *const libc::c_char,
    newdir: i32,
    new: *const libc::c_char,
    flags: u32,
) -> Entry {
    opcode::RenameAt::new(types::Fd(olddir), old, types::Fd(newdir), new)
        .flags(flags)
        .build()
}

pub fn unlinkat(dirfd: i32, path: *const libc::c_char, flags: i32) -> Entry {
    opcode::UnlinkAt::new(types::Fd(dirfd), path)
        .flags(flags)
        .build()
}

pub fn mkdirat(dirfd: i32, path: *const libc::c_char, mode: u32) -> Entry {
    opcode::MkDirAt::new(types::Fd(dirfd), path)
        .mode(mode)
        .build()
}

pub fn symlinkat(target: *const libc::c_char, newdir: i32, link: *const libc::c_char) -> Entry {
    opcode::SymlinkAt::new(types::Fd(newdir), target, link).build()
}

pub fn linkat(
    olddir: i32,
    old: *const libc::c_char,
    newdir: i32,
    new: *const libc::c_char,
    flags: i32,
) -> Entry {
    opcode::LinkAt::new(types::Fd(olddir), old, types::Fd(newdir), new)
        .flags(flags)
        .build()
}

/// posix_fadvise(2) on `len` bytes at `offset` (`len` 0: to the end of the file).
pub fn fadvise(fd: FdArg, offset: u64, len: i64, advice: i32) -> Entry {
    with_fd!(fd, |t| opcode::Fadvise::new(t, len as libc::off_t, advice)
        .offset(offset)
        .build())
}

/// ftruncate(2) to `len` bytes (kernel 6.9+).
pub fn ftruncate(fd: FdArg, len: u64) -> Entry {
    with_fd!(fd, |t| opcode::Ftruncate::new(t, len).build())
}

/// madvise(2) of `len` bytes at `addr` (page-aligned; kernel 5.6+).
pub fn madvise(addr: *const u8, len: usize, advice: i32) -> Entry {
    opcode::Madvise::new(addr.cast(), len as libc::off_t, advice).build()
}

/// pipe2(2) (kernel 6.16+): the two descriptors are written to `fds`.
pub fn pipe(fds: *mut i32, flags: u32) -> Entry {
    opcode::Pipe::new(fds).flags(flags).build()
}
