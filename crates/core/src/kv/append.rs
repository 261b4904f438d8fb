//! Appending to the active segment. O_DIRECT appends go through io_uring: WRITE_FIXED from
//! a registered staging buffer to the segment's O_DIRECT descriptor as a registered
//! (fixed) file; they complete inline. A durable append then calls fdatasync itself: an
//! FSYNC through the ring always goes to an io-wq worker, a hop a thread that waits for
//! it pays for nothing. Buffered appends are plain pwrite/fdatasync: io_uring would hand
//! them to a worker thread too (see `Appender::append`). (The async API writes its group
//! commits on the event loop's ring instead — one WRITE linked to one FSYNC, so the loop
//! never blocks: `Store::lead_async`.)

use crate::buf::AlignedBuf;
use io_uring::{opcode, types, IoUring};
use std::io;

const STAGING: usize = 1 << 20;
/// An SQPOLL appender's kernel thread sleeps after this long without a submission (the
/// next append wakes it with one system call).
pub const SQPOLL_IDLE_MS: u32 = 100;
/// The active segment is zero-filled ahead of the writes in steps of this size: appends
/// then land inside the file's size on already-written blocks, so each fdatasync flushes
/// data only — no journal commit for a size or extent change per durable put.
const PREFILL: u64 = 4 << 20;

/// Appends up to this size go through the active segment's writable mapping (where it
/// has one); larger ones with pwrite (see `Appender::append`).
const MAPPED_MAX: usize = 4096;

/// O_DIRECT writes go in whole blocks of this size (at least every device's logical
/// block size and the page size).
const BLOCK: u64 = 4096;

/// O_DIRECT appending: a second descriptor opened with O_DIRECT, and the bytes of the
/// partial block at the end of the data (rewritten, whole, with the next append).
struct Direct {
    fd: i32,
    /// where `tail` starts in the file (a block boundary)
    tail_at: u64,
    tail: Vec<u8>,
    /// an aligned staging buffer when there is no ring (the ring has its own)
    buf: Option<AlignedBuf>,
}

impl Direct {
    fn open(fd: i32) -> io::Result<i32> {
        let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
        // SAFETY: path is a valid C string; the new fd is ours.
        let d = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_DIRECT | libc::O_CLOEXEC,
            )
        };
        if d < 0 {
            let e = io::Error::last_os_error();
            return Err(crate::text::reword(
                &e,
                format!(
                    "direct=True: cannot open the segment with O_DIRECT ({}); this \
                     filesystem may not support direct I/O — open with direct=False",
                    crate::text::io_error(&e)
                ),
            ));
        }
        Ok(d)
    }
}

pub struct Appender {
    ring: Option<(IoUring, AlignedBuf)>,
    direct: Option<Direct>,
    /// The active segment: with O_DIRECT, its in-memory mirror gets a copy of every
    /// append; when it has a writable file mapping, appends are copied into that mapping
    /// instead of written with pwrite (see `set_active`).
    active: Option<std::sync::Arc<super::store::Segment>>,
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
    /// `direct`: write with O_DIRECT (whole aligned blocks, bypassing the page cache).
    /// `sqpoll` (with `direct` and `want_uring`; ignored otherwise — `Store::open`
    /// refuses that combination): the ring gets a kernel polling thread, and unlike a
    /// plain ring, failing to set it up is an error (it was asked for).
    pub fn new(
        fd: i32,
        want_uring: bool,
        size: u64,
        prefill: bool,
        direct: bool,
        sqpoll: bool,
    ) -> io::Result<Appender> {
        // The ring serves O_DIRECT appends (they complete inline, from the registered
        // staging buffer); buffered ones are plain system calls (see `append`).
        let dfd = if direct {
            Some(Direct::open(fd)?)
        } else {
            None
        };
        let ring = match dfd {
            Some(dfd) if sqpoll && want_uring => match Self::setup(dfd, true) {
                Ok(r) => Some(r),
                Err(e) => {
                    // SAFETY: the O_DIRECT fd was opened above and is not shared yet.
                    unsafe { libc::close(dfd) };
                    return Err(crate::text::reword(
                        &e,
                        format!(
                            "sqpoll=True: the kernel refused an SQPOLL ring ({}); open \
                             without sqpoll (see docs/sqpoll.md)",
                            crate::text::io_error(&e)
                        ),
                    ));
                }
            },
            Some(dfd) if want_uring => Self::setup(dfd, false).ok(),
            _ => None,
        };
        let direct = if let Some(dfd) = dfd {
            Some(Direct {
                fd: dfd,
                tail_at: 0,
                tail: Vec::new(),
                buf: if ring.is_some() {
                    None
                } else {
                    Some(AlignedBuf::new(STAGING)?)
                },
            })
        } else {
            None
        };
        Ok(Appender {
            uring: ring.is_some(),
            ring,
            direct,
            active: None,
            fd,
            syscalls: 0,
            filled: size,
            prefill,
        })
    }

    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The active segment. An O_DIRECT store's mirror receives a copy of each append.
    /// A segment with a writable file mapping (`"none"`/`"batch"` stores) is appended
    /// to *through* it: the records are copied straight into the page cache — no
    /// system call per write, and, unlike records kept in a buffer of the process, they
    /// survive the process being killed (LevelDB's and RocksDB's promise for unsynced
    /// writes: only a crash of the machine loses them). The file is first extended
    /// with fallocate, 4 MiB ahead, so that no store ever lands on a page past its end
    /// (SIGBUS) and a full disk is an ENOSPC from fallocate, before anything is
    /// written, never a fault.
    pub fn set_active(&mut self, seg: Option<std::sync::Arc<super::store::Segment>>) {
        self.active = seg;
    }

    /// Whether appends go through the active segment's writable mapping.
    pub fn mapped(&self) -> bool {
        self.direct.is_none() && self.active.as_ref().is_some_and(|s| s.is_writable())
    }

    /// Whether appending `len` bytes at `off` is a plain copy into the mapping — no
    /// system call (the file space is allocated already), nothing that can block but a
    /// page fault.
    pub fn stores_inline(&self, off: u64, len: usize) -> bool {
        self.mapped() && len <= MAPPED_MAX && off + len as u64 <= self.filled
    }

    /// Make the file cover `[.., end)` with allocated blocks (fallocate, 4 MiB ahead,
    /// never past `cap`): a mapped append may then store into any byte below `end`.
    /// ENOSPC when even `[.., end)` does not fit; EOPNOTSUPP where the filesystem has
    /// no fallocate (the caller then appends with pwrite).
    fn allocate_to(&mut self, end: u64, cap: u64) -> io::Result<()> {
        if end <= self.filled {
            return Ok(());
        }
        let ahead = ((end / PREFILL + 1) * PREFILL).min(cap).max(end);
        let start = self.filled;
        for target in [ahead, end] {
            self.syscalls += 1;
            // SAFETY: fallocate on our open segment fd; mode 0 only allocates blocks and
            // extends the size (the new bytes read as zeros).
            let r = unsafe { libc::fallocate(self.fd, 0, start as i64, (target - start) as i64) };
            if r == 0 {
                self.filled = target;
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOSPC) || target == end {
                return Err(e);
            }
        }
        unreachable!("the loop returns on its last target")
    }

    /// A failed append was cut back to `off` by truncating the file: the file now ends
    /// there (a later mapped append must extend it again before storing past it).
    pub fn truncated(&mut self, off: u64) {
        self.filled = self.filled.min(off);
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
        // (the file may be longer than what was filled this session: a tail of zeros
        // recovery left in place)
        // SAFETY: stat is plain data; fd is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out pointer.
        let len = match unsafe { libc::fstat(self.fd, &mut st) } {
            0 => st.st_size as u64,
            _ => self.filled,
        };
        if self.filled > end || len > end {
            // SAFETY: fd is open for writing.
            unsafe { libc::ftruncate(self.fd, end as i64) };
            self.filled = end;
        }
    }

    /// A ring for O_DIRECT appends to `dfd` (registered as fixed file 0) from a registered
    /// staging buffer.
    fn setup(dfd: i32, sqpoll: bool) -> io::Result<(IoUring, AlignedBuf)> {
        let mut b = IoUring::builder();
        if sqpoll {
            b.setup_sqpoll(SQPOLL_IDLE_MS);
        }
        let ring = b.build(8)?;
        let buf = AlignedBuf::new(STAGING)?;
        let iov = [libc::iovec {
            iov_base: buf.as_ptr().cast(),
            iov_len: STAGING,
        }];
        // SAFETY: the staging buffer lives in the same struct as the ring and is dropped
        // after it (field order of the tuple: ring first).
        unsafe { ring.submitter().register_buffers(&iov)? };
        ring.submitter().register_files(&[dfd])?;
        Ok((ring, buf))
    }

    /// Point the appender at a new active segment.
    pub fn set_fd(&mut self, fd: i32) -> io::Result<()> {
        if let Some(d) = self.direct.as_mut() {
            let nd = Direct::open(fd)?;
            if let Some((ring, _)) = &self.ring {
                if let Err(e) = ring.submitter().register_files_update(0, &[nd]) {
                    // (all or nothing: the appender still writes the old segment)
                    // SAFETY: nd was opened above and is used by nothing else.
                    unsafe { libc::close(nd) };
                    return Err(e);
                }
            }
            // SAFETY: the previous O_DIRECT fd is ours and no write is in flight on it.
            unsafe { libc::close(d.fd) };
            d.fd = nd;
            d.tail_at = 0;
            d.tail.clear();
        }
        self.fd = fd;
        self.filled = 0;
        Ok(())
    }

    /// Write all of `data` at `off`, then (if `sync`) make it durable. Short writes are
    /// resubmitted; any error is returned (the caller truncates the partial tail).
    pub fn append(&mut self, data: &[u8], off: u64, sync: bool) -> io::Result<()> {
        if self.mapped() {
            let seg = self.active.clone().expect("mapped");
            let end = off + data.len() as u64;
            // A large write is cheaper as one pwrite (the kernel copies it page by page)
            // than as stores that fault in each fresh page of the mapping (~1 µs per
            // page on ext4, which also journals each page's first store); it reaches
            // the same page cache, so the process-crash promise is the same.
            if data.len() <= MAPPED_MAX && end as usize <= seg.map_capacity() {
                match self.allocate_to(end, seg.map_capacity() as u64) {
                    Ok(()) => {
                        let copied = seg.map_write(off, data);
                        debug_assert!(copied);
                        return if sync { self.sync() } else { Ok(()) };
                    }
                    // no fallocate here: append with pwrite from now on
                    Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => self.active = None,
                    Err(e) => return Err(e),
                }
            }
        }
        self.prefill_to(off + data.len() as u64);
        if self.direct.is_some() {
            return self.append_direct(data, off, sync);
        }
        // Buffered appends: plain pwrite (and fdatasync when durable) from the caller's
        // memory. Through io_uring a buffered write is handed to a worker thread on ext4
        // (no non-blocking buffered writes there) and every FSYNC always is; a thread
        // that waits for the result anyway pays those hops for nothing. Measured here
        // (1 KB records): one durable put at a time 12.0-12.7K/s through the ring vs
        // 15.0-16.1K/s plain, durable batches of 64 429-515K vs 599-641K puts/s; the
        // 4 KiB-value bulk load 1.3-1.6x slower through the ring.
        self.append_plain(data, off, sync)
    }

    /// Write `data` at the start of a fresh segment (its seal record) as it is: no
    /// space allocated or zero-filled ahead, no fdatasync. The writes after it do
    /// that as they come; a segment nothing else is written to (a compaction's roll,
    /// then a close) stays `data` long.
    pub fn write_head(&mut self, data: &[u8]) -> io::Result<()> {
        if self.direct.is_some() {
            return self.append_direct(data, 0, false);
        }
        self.append_plain(data, 0, false)?;
        // (what a zero-fill or allocation ahead starts from: never over it)
        self.filled = self.filled.max(data.len() as u64);
        Ok(())
    }

    /// O_DIRECT: rewrite the partial block at `off` with the new data after it, in whole
    /// blocks (zero padded), from the aligned staging buffer — through the ring when there
    /// is one. The file's size then runs ahead of the data to the block boundary; that
    /// zero tail is cut off when the segment is sealed, and recovery ignores it.
    /// O_DIRECT: make sure the partial block before `off` is known (re-read it after a
    /// reopen or a failed write); returns the block boundary it starts at.
    fn direct_tail(&mut self, off: u64) -> io::Result<u64> {
        let d = self.direct.as_mut().expect("direct");
        let start = off - off % BLOCK;
        let prefix = (off - start) as usize;
        if d.tail_at != start || d.tail.len() != prefix {
            d.tail = vec![0u8; prefix];
            let n = crate::sys::fileio::pread_full(self.fd, &mut d.tail, start)?;
            if n != prefix {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment shorter than its data",
                ));
            }
            d.tail_at = start;
        }
        Ok(start)
    }

    /// O_DIRECT: `data` (at `off`) is on disk — keep the new partial block for the next
    /// append, copy it into the mirror, note how far the file is written.
    fn direct_done(&mut self, data: &[u8], off: u64) {
        if let Some(m) = &self.active {
            m.mirror_write(off, data);
        }
        let d = self.direct.as_mut().expect("direct");
        let start = d.tail_at;
        let end = off + data.len() as u64;
        let new_start = end - end % BLOCK;
        let from = (new_start - start) as usize;
        let mut tail = vec![0u8; d.tail.len() + data.len() - from];
        fill_image(&mut tail, from, &d.tail, data);
        d.tail = tail;
        d.tail_at = new_start;
        self.filled = self.filled.max(end.div_ceil(BLOCK) * BLOCK);
    }

    /// O_DIRECT, for a write an event loop does itself: the whole zero-padded block image
    /// of `data` appended at `off`, and the file offset it goes to. Call
    /// [`Appender::direct_finished`] with the outcome.
    pub fn direct_image(&mut self, data: &[u8], off: u64) -> io::Result<(u64, AlignedBuf)> {
        let start = self.direct_tail(off)?;
        let d = self.direct.as_ref().expect("direct");
        let total = d.tail.len() + data.len();
        let padded = (total as u64).div_ceil(BLOCK) * BLOCK;
        let img = AlignedBuf::new(padded as usize)?;
        // SAFETY: a fresh buffer nobody else sees yet.
        let buf = unsafe { img.as_mut_slice() };
        fill_image(&mut buf[..total], 0, &d.tail, data);
        buf[total..].fill(0);
        Ok((start, img))
    }

    /// The outcome of a [`Appender::direct_image`] write (and its fdatasync).
    pub fn direct_finished(&mut self, data: &[u8], off: u64, ok: bool) {
        if ok {
            self.direct_done(data, off);
        } else if let Some(d) = self.direct.as_mut() {
            d.tail_at = u64::MAX; // unknown now: read back before the next append
        }
    }

    /// The O_DIRECT descriptor (for writes done elsewhere), if this appender has one.
    pub fn direct_fd(&self) -> Option<i32> {
        self.direct.as_ref().map(|d| d.fd)
    }

    fn append_direct(&mut self, data: &[u8], off: u64, sync: bool) -> io::Result<()> {
        let start = self.direct_tail(off)?;
        let d = self.direct.as_mut().expect("direct");
        let total = d.tail.len() + data.len();
        let fill = |dst: &mut [u8], from: usize, tail: &[u8]| fill_image(dst, from, tail, data);
        let mut pos = 0usize;
        while pos < total {
            let n = (total - pos).min(STAGING);
            let padded = (n as u64).div_ceil(BLOCK) * BLOCK;
            let at = start + pos as u64;
            let ptr = {
                let staging = match (&self.ring, &d.buf) {
                    (Some((_, b)), _) | (None, Some(b)) => b,
                    (None, None) => unreachable!("direct mode always has a staging buffer"),
                };
                // SAFETY: nothing is in flight on the staging buffer (each write is
                // waited for), and it is STAGING bytes long, padded <= STAGING.
                let buf = unsafe { &mut staging.as_mut_slice()[..padded as usize] };
                fill(&mut buf[..n], pos, &d.tail);
                buf[n..].fill(0);
                staging.as_ptr()
            };
            // A short write (the disk filled up part of the way) is resubmitted for the
            // rest, still block-aligned: what stops it then says why (ENOSPC), where
            // "short write" said nothing a caller could act on.
            let mut done = 0u64;
            while done < padded {
                // SAFETY: done < padded <= STAGING: inside the staging buffer.
                let p = unsafe { ptr.add(done as usize) };
                let len = padded - done;
                let res = match self.ring.as_mut() {
                    Some((ring, _)) => {
                        // (fixed file 0 is d.fd: registered at setup and on each set_fd)
                        let w = opcode::WriteFixed::new(types::Fixed(0), p, len as u32, 0)
                            .offset(at + done)
                            .build()
                            .user_data(3);
                        // SAFETY: the entry points into the registered staging buffer,
                        // which is not touched until the completion is reaped below.
                        unsafe { ring.submission().push(&w).map_err(io::Error::other)? };
                        self.syscalls += 1;
                        ring.submit_and_wait(1)?;
                        let c = ring.completion().next();
                        c.map(|c| c.result() as isize)
                            .unwrap_or(-libc::EIO as isize)
                    }
                    None => {
                        self.syscalls += 1;
                        // SAFETY: p/len describe the rest of the aligned staging buffer.
                        unsafe { libc::pwrite(d.fd, p.cast(), len as usize, (at + done) as i64) }
                    }
                };
                if res < 0 {
                    let e = if self.ring.is_some() {
                        io::Error::from_raw_os_error(-res as i32)
                    } else {
                        io::Error::last_os_error()
                    };
                    d.tail_at = u64::MAX; // unknown now: read back before the next append
                    return Err(e);
                }
                if res == 0 || !(res as u64).is_multiple_of(BLOCK) {
                    d.tail_at = u64::MAX;
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "short O_DIRECT write ({} of {padded} bytes)",
                            done + res as u64
                        ),
                    ));
                }
                done += res as u64;
            }
            pos += n;
        }
        self.direct_done(data, off);
        if sync {
            self.sync()?;
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

impl Drop for Appender {
    fn drop(&mut self) {
        if let Some(d) = &self.direct {
            // SAFETY: the O_DIRECT fd is ours; nothing is in flight on it.
            unsafe { libc::close(d.fd) };
        }
    }
}

/// Bytes `from..from + dst.len()` of the image `tail ++ data` (an O_DIRECT append: the
/// partial block already on disk, then the new bytes) into `dst`.
fn fill_image(dst: &mut [u8], from: usize, tail: &[u8], data: &[u8]) {
    let mut i = 0;
    while i < dst.len() {
        let at = from + i;
        if at < tail.len() {
            let n = (tail.len() - at).min(dst.len() - i);
            dst[i..i + n].copy_from_slice(&tail[at..at + n]);
            i += n;
        } else {
            let at = at - tail.len();
            let n = (data.len() - at).min(dst.len() - i);
            dst[i..i + n].copy_from_slice(&data[at..at + n]);
            i += n;
        }
    }
}
