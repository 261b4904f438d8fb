//! fsync / fdatasync and fallocate.

use super::FdArg;
use crate::with_fd;
use io_uring::{opcode, squeue::Entry, types::FsyncFlags};

pub fn fsync(fd: FdArg, datasync: bool) -> Entry {
    let flags = if datasync {
        FsyncFlags::DATASYNC
    } else {
        FsyncFlags::empty()
    };
    with_fd!(fd, |t| opcode::Fsync::new(t).flags(flags).build())
}

pub fn fallocate(fd: FdArg, offset: u64, len: u64, mode: i32) -> Entry {
    with_fd!(fd, |t| opcode::Fallocate::new(t, len)
        .offset(offset)
        .mode(mode)
        .build())
}

/// sync_file_range(2): start (and/or wait for) writeback of `len` bytes at `offset`
/// (`len` 0: to the end of the file) — RocksDB's way to bound dirty pages.
pub fn sync_file_range(fd: FdArg, offset: u64, len: u32, flags: u32) -> Entry {
    with_fd!(fd, |t| opcode::SyncFileRange::new(t, len)
        .offset(offset)
        .flags(flags)
        .build())
}
