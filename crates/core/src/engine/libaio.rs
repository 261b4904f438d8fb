//! libaio: Linux native AIO through the raw syscalls (io_setup, io_submit, io_getevents,
//! io_destroy). Truly asynchronous only with O_DIRECT; buffered I/O silently completes
//! inside io_submit.

use super::{Buffers, Cqe, Engine, Io, IoKind};
use std::io;

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FSYNC: u16 = 2;
const IOCB_CMD_FDSYNC: u16 = 3;

/// `struct iocb` (little-endian layout of linux/aio_abi.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// `io_getevents` into `events`, retrying EINTR; `timeout` None blocks until `min`.
fn getevents(
    ctx: libc::c_ulong,
    min: usize,
    events: &mut [IoEvent],
    timeout: Option<&libc::timespec>,
) -> io::Result<usize> {
    loop {
        let t = timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: events has room for its length; t is null or a valid timespec.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                ctx,
                min as libc::c_long,
                events.len() as libc::c_long,
                events.as_mut_ptr(),
                t,
            )
        };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

pub struct Libaio {
    ctx: libc::c_ulong,
    fd: i32,
    bufs: Buffers,
    cbs: Box<[Iocb]>,
    kinds: Vec<IoKind>,
    queued: Vec<u32>,
    events: Vec<IoEvent>,
    in_flight: usize,
    syscalls: u64,
    direct: bool,
}

impl Libaio {
    pub fn new(fd: i32, bufs: Buffers, depth: u32, direct: bool) -> io::Result<Self> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into ctx.
        let rc = unsafe { libc::syscall(libc::SYS_io_setup, depth as libc::c_long, &mut ctx) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                let max = std::fs::read_to_string("/proc/sys/fs/aio-max-nr").unwrap_or_default();
                let nr = std::fs::read_to_string("/proc/sys/fs/aio-nr").unwrap_or_default();
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "libaio: io_setup({depth}) failed with EAGAIN: iodepth exceeds what is \
                         left of fs.aio-max-nr ({} in use of {}); lower iodepth or raise \
                         `sysctl fs.aio-max-nr`",
                        nr.trim(),
                        max.trim()
                    ),
                ));
            }
            return Err(e);
        }
        let n = depth.max(1) as usize;
        Ok(Libaio {
            ctx,
            fd,
            bufs,
            cbs: vec![Iocb::default(); n].into_boxed_slice(),
            kinds: vec![IoKind::Read; n],
            queued: Vec::new(),
            events: vec![IoEvent::default(); n],
            in_flight: 0,
            syscalls: 1,
            direct,
        })
    }
}

impl Engine for Libaio {
    fn name(&self) -> &'static str {
        "libaio"
    }
    fn queue(&mut self, io: Io) -> io::Result<()> {
        let s = io.slot as usize;
        // The kernel rejects a sync iocb with any buffer, length or offset set.
        let (op, buf, len, offset) = match io.kind {
            IoKind::Read | IoKind::Write => (
                if io.kind == IoKind::Read {
                    IOCB_CMD_PREAD
                } else {
                    IOCB_CMD_PWRITE
                },
                self.bufs.slot(io.slot) as u64,
                io.len as u64,
                io.offset as i64,
            ),
            IoKind::Sync { full: true } => (IOCB_CMD_FSYNC, 0, 0, 0),
            IoKind::Sync { full: false } => (IOCB_CMD_FDSYNC, 0, 0, 0),
        };
        self.cbs[s] = Iocb {
            aio_data: io.slot as u64,
            aio_lio_opcode: op,
            aio_fildes: self.fd as u32,
            aio_buf: buf,
            aio_nbytes: len,
            aio_offset: offset,
            ..Default::default()
        };
        self.kinds[s] = io.kind;
        self.queued.push(io.slot);
        Ok(())
    }
    fn submit(&mut self) -> io::Result<usize> {
        let mut total = 0;
        while !self.queued.is_empty() {
            let ptrs: Vec<*mut Iocb> = self
                .queued
                .iter()
                .map(|&s| &mut self.cbs[s as usize] as *mut Iocb)
                .collect();
            self.syscalls += 1;
            // SAFETY: the iocbs live in our boxed slice until their events are reaped.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    ptrs.len() as libc::c_long,
                    ptrs.as_ptr(),
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EAGAIN) && total > 0 {
                    break;
                }
                return Err(e);
            }
            let n = rc as usize;
            self.queued.drain(..n);
            self.in_flight += n;
            total += n;
            if n == 0 {
                break;
            }
        }
        Ok(total)
    }
    fn reap(&mut self, min: usize, out: &mut Vec<Cqe>) -> io::Result<()> {
        if self.in_flight == 0 {
            return Ok(());
        }
        let min = min.min(self.in_flight);
        self.syscalls += 1;
        let n = getevents(self.ctx, min, &mut self.events, None)?;
        for ev in &self.events[..n] {
            let slot = ev.data as u32;
            out.push(Cqe {
                slot,
                kind: self.kinds[slot as usize],
                res: ev.res,
            });
        }
        self.in_flight -= n;
        Ok(())
    }
    fn syscalls(&self) -> u64 {
        self.syscalls
    }
    fn async_sync(&self) -> bool {
        true
    }
    fn warning(&self) -> Option<String> {
        (!self.direct).then(|| {
            "libaio with buffered I/O (direct=0) is synchronous: io_submit does the I/O \
             before returning; use direct=1 for real asynchrony"
                .to_string()
        })
    }
}

impl Drop for Libaio {
    fn drop(&mut self) {
        // io_destroy waits for in-flight requests before returning.
        // SAFETY: ctx came from io_setup and is destroyed once.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.ctx);
        }
    }
}

const IOCB_FLAG_RESFD: u32 = 1;

/// A libaio context for event loops: each request signals an eventfd when it completes
/// (`IOCB_FLAG_RESFD`), completions are reaped without blocking. The caller keeps each
/// request's buffer alive until its completion is reaped (or `destroy` returns).
pub struct EventCtx {
    ctx: libc::c_ulong,
    efd: i32,
    cbs: std::collections::HashMap<u64, Box<Iocb>>,
    events: Vec<IoEvent>,
}

// SAFETY: the context id and eventfd are plain handles; the boxed iocbs are only touched
// by the owner (and read by the kernel while in flight).
unsafe impl Send for EventCtx {}

impl EventCtx {
    pub fn new(depth: u32, efd: i32) -> io::Result<EventCtx> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into ctx.
        if unsafe { libc::syscall(libc::SYS_io_setup, depth as libc::c_long, &mut ctx) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventCtx {
            ctx,
            efd,
            cbs: std::collections::HashMap::new(),
            events: vec![IoEvent::default(); depth.max(1) as usize],
        })
    }

    /// Submit one read (`write == false`) or write of `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid for `len` bytes until this request's completion is reaped.
    pub unsafe fn submit(
        &mut self,
        data: u64,
        fd: i32,
        write: bool,
        buf: *mut u8,
        len: usize,
        off: u64,
    ) -> io::Result<()> {
        let mut cb = Box::new(Iocb {
            aio_data: data,
            aio_lio_opcode: if write {
                IOCB_CMD_PWRITE
            } else {
                IOCB_CMD_PREAD
            },
            aio_fildes: fd as u32,
            aio_buf: buf as u64,
            aio_nbytes: len as u64,
            aio_offset: off as i64,
            aio_flags: IOCB_FLAG_RESFD,
            aio_resfd: self.efd as u32,
            ..Default::default()
        });
        let p: *mut Iocb = &mut *cb;
        let ptrs = [p];
        // SAFETY: the iocb is boxed (stable address) and kept in `cbs` until reaped.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                self.ctx,
                1 as libc::c_long,
                ptrs.as_ptr(),
            )
        };
        if rc != 1 {
            return Err(if rc < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::from_raw_os_error(libc::EAGAIN)
            });
        }
        self.cbs.insert(data, cb);
        Ok(())
    }

    /// Completed requests as (data, result) without blocking.
    pub fn reap(&mut self, out: &mut Vec<(u64, i64)>) -> io::Result<()> {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        loop {
            let n = getevents(self.ctx, 0, &mut self.events, Some(&zero))?;
            for ev in &self.events[..n] {
                self.cbs.remove(&ev.data);
                out.push((ev.data, ev.res));
            }
            if n < self.events.len() {
                return Ok(());
            }
        }
    }

    pub fn in_flight(&self) -> usize {
        self.cbs.len()
    }
}

impl Drop for EventCtx {
    fn drop(&mut self) {
        // io_destroy cancels what it can and waits for the rest before returning, so the
        // buffers the caller still holds are no longer used afterwards.
        // SAFETY: ctx came from io_setup and is destroyed once.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.ctx);
        }
    }
}
