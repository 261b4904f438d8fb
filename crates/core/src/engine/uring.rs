//! io_uring engine with fio's options: sqthread_poll (+cpu), registerfiles, fixedbufs,
//! hipri (IOPOLL), nonvectored, plus single_issuer, defer_taskrun, coop_taskrun.
//!
//! It enters the kernel itself (not through the crate's submit helpers) so that every
//! `io_uring_enter` is counted, the SQPOLL wake-up is done only when the kernel thread
//! sleeps, and GETEVENTS is passed whenever task work or an overflow is pending.

use super::{Buffers, Cqe, Engine, Io, IoKind, UringOpts};
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::sync::atomic;

const SYNC_BIT: u64 = 1 << 32;
const ENTER_GETEVENTS: u32 = 1;
const ENTER_SQ_WAKEUP: u32 = 2;

pub struct Uring {
    ring: IoUring,
    fd: i32,
    bufs: Buffers,
    iovecs: Box<[libc::iovec]>,
    opts: UringOpts,
    syscalls: u64,
    queued: usize,
}

// SAFETY: the iovecs point into the job's buffer memory (see `Buffers`); the engine is
// moved to its job thread once and used only there.
unsafe impl Send for Uring {}

impl Uring {
    pub fn new(fd: i32, bufs: Buffers, depth: u32, o: &UringOpts) -> io::Result<Self> {
        if o.fio_defaults {
            // fio's io_uring engine asks for COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN
            // and retries without DEFER_TASKRUN + SINGLE_ISSUER (SQPOLL refuses them, so
            // do older kernels), then without COOP_TASKRUN: the same ladder here.
            let ladder = [(true, true), (true, false), (false, false)];
            for (coop, defer) in ladder {
                if defer && o.sqthread_poll {
                    continue;
                }
                let tuned = UringOpts {
                    coop_taskrun: coop,
                    single_issuer: defer,
                    defer_taskrun: defer,
                    fio_defaults: false,
                    ..o.clone()
                };
                if let Ok(u) = Self::new(fd, bufs, depth, &tuned) {
                    return Ok(u);
                }
            }
        }
        let mut b = IoUring::builder();
        if o.sqthread_poll {
            b.setup_sqpoll(1000);
            if let Some(cpu) = o.sqthread_poll_cpu {
                b.setup_sqpoll_cpu(cpu);
            }
        }
        if o.hipri {
            b.setup_iopoll();
        }
        if o.coop_taskrun {
            b.setup_coop_taskrun();
            b.setup_taskrun_flag();
        }
        if o.single_issuer || o.defer_taskrun {
            b.setup_single_issuer();
        }
        if o.defer_taskrun {
            b.setup_defer_taskrun();
            b.setup_taskrun_flag();
        }
        // Two SQEs per slot when a write is linked to its fdatasync.
        let entries = (depth.max(1) * 2).next_power_of_two();
        b.setup_cqsize(entries * 2);
        let ring = b.build(entries).map_err(|e| {
            let why = crate::text::io_error(&e);
            crate::text::reword(
                &e,
                format!("io_uring_setup({entries}) with {o:?} failed: {why}"),
            )
        })?;
        let iovecs: Box<[libc::iovec]> = (0..bufs.slots as u32)
            .map(|i| libc::iovec {
                iov_base: bufs.slot(i).cast(),
                iov_len: bufs.bs,
            })
            .collect();
        let mut syscalls = 1;
        if o.registerfiles {
            syscalls += 1;
            ring.submitter().register_files(&[fd])?;
        }
        if o.fixedbufs {
            syscalls += 1;
            // SAFETY: the iovecs point into the job's buffer memory, which outlives the
            // engine (the job drops the engine before the buffers).
            unsafe { ring.submitter().register_buffers(&iovecs) }.map_err(|e| {
                if e.raw_os_error() == Some(libc::ENOMEM) {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "fixedbufs: registering {} exceeds RLIMIT_MEMLOCK ({}); lower \
                             iodepth or bs, or raise `ulimit -l`",
                            crate::ring::setup::human_bytes((bufs.slots * bufs.bs) as u64),
                            crate::ring::setup::memlock_text()
                        ),
                    )
                } else {
                    e
                }
            })?;
        }
        Ok(Uring {
            ring,
            fd,
            bufs,
            iovecs,
            opts: o.clone(),
            syscalls,
            queued: 0,
        })
    }

    fn entry(&self, io: &Io) -> squeue::Entry {
        let buf = self.bufs.slot(io.slot);
        let iov = &self.iovecs[io.slot as usize] as *const libc::iovec;
        macro_rules! target {
            (|$t:ident| $e:expr) => {
                if self.opts.registerfiles {
                    let $t = types::Fixed(0);
                    $e
                } else {
                    let $t = types::Fd(self.fd);
                    $e
                }
            };
        }
        let idx = io.slot as u16;
        let e = match io.kind {
            IoKind::Read if self.opts.fixedbufs => {
                target!(|t| opcode::ReadFixed::new(t, buf, io.len, idx)
                    .offset(io.offset)
                    .build())
            }
            IoKind::Write if self.opts.fixedbufs => {
                target!(|t| opcode::WriteFixed::new(t, buf, io.len, idx)
                    .offset(io.offset)
                    .build())
            }
            IoKind::Read if self.opts.nonvectored => {
                target!(|t| opcode::Read::new(t, buf, io.len).offset(io.offset).build())
            }
            IoKind::Write if self.opts.nonvectored => {
                target!(|t| opcode::Write::new(t, buf, io.len).offset(io.offset).build())
            }
            IoKind::Read => {
                target!(|t| opcode::Readv::new(t, iov, 1).offset(io.offset).build())
            }
            IoKind::Write => {
                target!(|t| opcode::Writev::new(t, iov, 1).offset(io.offset).build())
            }
            IoKind::Sync { full } => {
                let f = if full {
                    types::FsyncFlags::empty()
                } else {
                    types::FsyncFlags::DATASYNC
                };
                target!(|t| opcode::Fsync::new(t).flags(f).build())
            }
        };
        let ud = match io.kind {
            IoKind::Sync { .. } => SYNC_BIT | io.slot as u64,
            _ => io.slot as u64,
        };
        e.user_data(ud)
    }

    fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entry points into the job's slot buffer / iovec, both alive and
            // owned by this request until its completion is reaped.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                self.queued += 1;
                return Ok(());
            }
            self.enter(0, false)?;
        }
    }

    fn drain(&mut self, out: &mut Vec<Cqe>) -> usize {
        let mut n = 0;
        for c in self.ring.completion() {
            let ud = c.user_data();
            let kind = if ud & SYNC_BIT != 0 {
                IoKind::Sync { full: false }
            } else {
                IoKind::Read
            };
            out.push(Cqe {
                slot: (ud & 0xffff_ffff) as u32,
                kind,
                res: c.result() as i64,
            });
            n += 1;
        }
        n
    }

    /// Submit what is queued and optionally wait for `min` completions, with exactly the
    /// flags needed, counting real system calls.
    fn enter(&mut self, min: usize, force_getevents: bool) -> io::Result<usize> {
        let (to_submit, need_wakeup, overflow, taskrun) = {
            let mut sq = self.ring.submission();
            sq.sync();
            atomic::fence(atomic::Ordering::SeqCst);
            (sq.len(), sq.need_wakeup(), sq.cq_overflow(), sq.taskrun())
        };
        let mut flags = 0;
        if min > 0
            || force_getevents
            || self.opts.hipri
            || overflow
            || taskrun
            || self.opts.defer_taskrun
        {
            flags |= ENTER_GETEVENTS;
        }
        let submit_n = if self.opts.sqthread_poll {
            if need_wakeup {
                flags |= ENTER_SQ_WAKEUP;
            }
            0
        } else {
            to_submit
        };
        self.queued = 0;
        if flags == 0 && submit_n == 0 {
            return Ok(to_submit);
        }
        loop {
            self.syscalls += 1;
            // SAFETY: plain io_uring_enter on our ring; no argument struct.
            let r = unsafe {
                self.ring.submitter().enter::<libc::sigset_t>(
                    submit_n as u32,
                    min as u32,
                    flags,
                    None,
                )
            };
            match r {
                Ok(n) => {
                    return Ok(if self.opts.sqthread_poll {
                        to_submit
                    } else {
                        n
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Engine for Uring {
    fn name(&self) -> &'static str {
        "io_uring"
    }
    fn queue(&mut self, io: Io) -> io::Result<()> {
        let mut e = self.entry(&io);
        if let Some(full) = io.link_sync {
            e = e.flags(squeue::Flags::IO_LINK);
            self.push(&e)?;
            let s = self.entry(&Io {
                kind: IoKind::Sync { full },
                link_sync: None,
                ..io
            });
            return self.push(&s);
        }
        self.push(&e)
    }
    fn submit(&mut self) -> io::Result<usize> {
        if self.queued == 0 && !self.opts.hipri {
            return Ok(0);
        }
        self.enter(0, false)
    }
    fn reap(&mut self, min: usize, out: &mut Vec<Cqe>) -> io::Result<()> {
        let mut got = self.drain(out);
        if self.queued > 0 {
            // SQEs the job loop left for this call: submit them, waiting in the same enter
            // if completions are still needed.
            let want = min.saturating_sub(got);
            self.enter(want, want > 0)?;
            got += self.drain(out);
        } else if got == 0 && min == 0 && (self.opts.defer_taskrun || self.opts.hipri) {
            // Deferred task work and polled completions only appear after an enter.
            self.enter(0, true)?;
            got += self.drain(out);
        }
        while got < min {
            self.enter(min - got, true)?;
            got += self.drain(out);
        }
        Ok(())
    }
    fn syscalls(&self) -> u64 {
        self.syscalls
    }
    fn async_sync(&self) -> bool {
        true
    }
    fn links_sync(&self) -> bool {
        true
    }
    fn waits_submit(&self) -> bool {
        !self.opts.sqthread_poll
    }
    fn setup(&self) -> Option<String> {
        let o = &self.opts;
        let flags = [
            (o.sqthread_poll, "SQPOLL"),
            (o.hipri, "IOPOLL"),
            (o.coop_taskrun, "COOP_TASKRUN"),
            (o.single_issuer || o.defer_taskrun, "SINGLE_ISSUER"),
            (o.defer_taskrun, "DEFER_TASKRUN"),
            (o.registerfiles, "registered file"),
            (o.fixedbufs, "registered buffers"),
        ];
        let on: Vec<&str> = flags.iter().filter(|f| f.0).map(|f| f.1).collect();
        Some(if on.is_empty() {
            "plain ring".into()
        } else {
            on.join(" | ")
        })
    }
}
