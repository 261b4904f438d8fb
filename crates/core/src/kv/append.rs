//! Appending to the active segment: through io_uring with a registered staging buffer and
//! the segment as a registered (fixed) file, each chunk's write linked to an fdatasync when
//! the store is durable; plain pwrite/fdatasync where io_uring is unavailable.

use crate::buf::AlignedBuf;
use io_uring::{opcode, squeue, types, IoUring};
use std::io;

const STAGING: usize = 1 << 20;
/// The active segment is zero-filled ahead of the writes in steps of this size: appends
/// then land inside the file's size on already-written blocks, so each fdatasync flushes
/// data only — no journal commit for a size or extent change per durable put.
const PREFILL: u64 = 4 << 20;

pub struct Appender {
    ring: Option<(IoUring, AlignedBuf)>,
    fd: i32,
    pub uring: bool,
    pub syscalls: u64,
    /// Bytes of the file known to be written (zeros or data); appends below it need no
    /// metadata update.
    filled: u64,
    prefill: bool,
}

impl Appender {
    /// `size`: the file's current (recovered) size. `prefill`: zero-fill ahead (worth it
    /// for durable appends only: non-durable ones never wait for an fdatasync).
    pub fn new(fd: i32, want_uring: bool, size: u64, prefill: bool) -> Appender {
        let ring = if want_uring {
            Self::setup(fd).ok()
        } else {
            None
        };
        Appender {
            uring: ring.is_some(),
            ring,
            fd,
            syscalls: 0,
            filled: size,
            prefill,
        }
    }

    /// Zero-fill the file up to past `end` (one fdatasync per 4 MiB). If the disk cannot
    /// take it, stop pre-filling and append plainly.
    pub fn prefill_to(&mut self, end: u64) {
        if !self.prefill || end <= self.filled {
            return;
        }
        let start = self.filled;
        let target = (end / PREFILL + 1) * PREFILL;
        let zeros = vec![0u8; 1 << 20];
        let mut at = start;
        let mut ok = true;
        while at < target {
            let n = zeros.len().min((target - at) as usize);
            if crate::sys::fileio::pwrite_all(self.fd, &zeros[..n], at).is_err() {
                ok = false;
                break;
            }
            at += n as u64;
        }
        // SAFETY: fd is open.
        if ok && unsafe { libc::fdatasync(self.fd) } == 0 {
            self.syscalls += 1 + (target - start).div_ceil(1 << 20);
            self.filled = target;
        } else {
            // (a full disk, typically): cut the zeros back off and append plainly
            // SAFETY: fd is open for writing.
            unsafe { libc::ftruncate(self.fd, start as i64) };
            self.prefill = false;
        }
    }

    /// The segment is done (rolled or closed): drop the zero-filled tail beyond `end`.
    pub fn seal(&mut self, end: u64) {
        if self.filled > end {
            // SAFETY: fd is open for writing.
            unsafe { libc::ftruncate(self.fd, end as i64) };
            self.filled = end;
        }
    }

    fn setup(fd: i32) -> io::Result<(IoUring, AlignedBuf)> {
        let ring = IoUring::builder().build(8)?;
        let buf = AlignedBuf::new(STAGING)?;
        let iov = [libc::iovec {
            iov_base: buf.as_ptr().cast(),
            iov_len: STAGING,
        }];
        // SAFETY: the staging buffer lives in the same struct as the ring and is dropped
        // after it (field order of the tuple: ring first).
        unsafe { ring.submitter().register_buffers(&iov)? };
        ring.submitter().register_files(&[fd])?;
        Ok((ring, buf))
    }

    /// Point the appender at a new active segment.
    pub fn set_fd(&mut self, fd: i32) -> io::Result<()> {
        self.fd = fd;
        self.filled = 0;
        if let Some((ring, _)) = &self.ring {
            ring.submitter().register_files_update(0, &[fd])?;
        }
        Ok(())
    }

    /// Write all of `data` at `off`, then (if `sync`) make it durable. Short writes are
    /// resubmitted; any error is returned (the caller truncates the partial tail).
    pub fn append(&mut self, data: &[u8], off: u64, sync: bool) -> io::Result<()> {
        self.prefill_to(off + data.len() as u64);
        let Some((ring, buf)) = self.ring.as_mut() else {
            return self.append_plain(data, off, sync);
        };
        let mut done = 0usize;
        while done < data.len() {
            let n = (data.len() - done).min(STAGING);
            // SAFETY: no write is in flight on the staging buffer (we wait for each).
            unsafe { buf.as_mut_slice()[..n].copy_from_slice(&data[done..done + n]) };
            let last = done + n == data.len();
            let w = opcode::WriteFixed::new(types::Fixed(0), buf.as_ptr(), n as u32, 0)
                .offset(off + done as u64)
                .build()
                .user_data(1);
            let link_sync = sync && last;
            let w = if link_sync {
                w.flags(squeue::Flags::IO_LINK)
            } else {
                w
            };
            // SAFETY: the entry points into the registered staging buffer, alive and unused
            // until we have reaped this write's completion below.
            unsafe {
                ring.submission().push(&w).map_err(io::Error::other)?;
                if link_sync {
                    let s = opcode::Fsync::new(types::Fixed(0))
                        .flags(types::FsyncFlags::DATASYNC)
                        .build()
                        .user_data(2);
                    ring.submission().push(&s).map_err(io::Error::other)?;
                }
            }
            let want = if link_sync { 2 } else { 1 };
            self.syscalls += 1;
            ring.submit_and_wait(want)?;
            let mut wrote: i32 = -1;
            let mut synced: i32 = 0;
            let mut seen = 0;
            while seen < want {
                let cqes: Vec<(u64, i32)> = ring
                    .completion()
                    .map(|c| (c.user_data(), c.result()))
                    .collect();
                if cqes.is_empty() {
                    self.syscalls += 1;
                    ring.submit_and_wait(1)?;
                    continue;
                }
                for (ud, res) in cqes {
                    seen += 1;
                    if ud == 1 {
                        wrote = res;
                    } else {
                        synced = res;
                    }
                }
            }
            if wrote < 0 {
                return Err(io::Error::from_raw_os_error(-wrote));
            }
            if (wrote as usize) < n {
                // A short write cancels the linked sync: write the rest (with a new sync).
                if wrote == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the disk accepted no bytes",
                    ));
                }
                done += wrote as usize;
                continue;
            }
            if synced < 0 {
                return Err(io::Error::from_raw_os_error(-synced));
            }
            done += n;
        }
        Ok(())
    }

    fn append_plain(&mut self, data: &[u8], off: u64, sync: bool) -> io::Result<()> {
        self.syscalls += crate::sys::fileio::pwrite_all(self.fd, data, off)?;
        if sync {
            self.sync()?;
        }
        Ok(())
    }

    pub fn sync(&mut self) -> io::Result<()> {
        self.syscalls += 1;
        // SAFETY: fd is open.
        if unsafe { libc::fdatasync(self.fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
