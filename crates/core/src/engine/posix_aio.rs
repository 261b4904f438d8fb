//! posixaio: glibc's aio_read/aio_write/aio_fsync, batched with lio_listio, reaped with
//! aio_error/aio_return and aio_suspend. glibc runs these on its own helper threads: a
//! thread pool in disguise (seed 000 §8.3), whose CPU the bench accounts for.

use super::{Buffers, Cqe, Engine, Io, IoKind};
use std::io;

/// How many of the oldest in-flight requests `reap` hands to aio_suspend.
const SUSPEND_ON: usize = 4;

pub struct PosixAio {
    fd: i32,
    bufs: Buffers,
    cbs: Box<[libc::aiocb]>,
    kinds: Vec<IoKind>,
    in_flight: Vec<u32>,
    queued: Vec<u32>,
    calls: u64,
}

// SAFETY: aiocbs hold raw buffer pointers into the job's memory; glibc's helper threads
// use them while in flight, and the engine moves between threads only with the job loop,
// never while another thread uses it.
unsafe impl Send for PosixAio {}

impl PosixAio {
    pub fn new(fd: i32, bufs: Buffers, depth: u32) -> Self {
        let n = (depth as usize).max(1);
        // SAFETY: aiocb is plain old data; zero is its documented initial state.
        let cbs = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        PosixAio {
            fd,
            bufs,
            cbs,
            kinds: vec![IoKind::Read; n],
            in_flight: Vec::new(),
            queued: Vec::new(),
            calls: 0,
        }
    }
}

impl Engine for PosixAio {
    fn name(&self) -> &'static str {
        "posixaio"
    }
    fn queue(&mut self, io: Io) -> io::Result<()> {
        let i = io.slot as usize;
        // SAFETY: zeroing a POD aiocb we own that is not in flight (its slot was reaped).
        let cb = &mut self.cbs[i];
        *cb = unsafe { std::mem::zeroed() };
        cb.aio_fildes = self.fd;
        cb.aio_buf = self.bufs.slot(io.slot).cast();
        cb.aio_nbytes = io.len as usize;
        cb.aio_offset = io.offset as i64;
        cb.aio_sigevent.sigev_notify = libc::SIGEV_NONE;
        cb.aio_lio_opcode = match io.kind {
            IoKind::Read => libc::LIO_READ,
            IoKind::Write => libc::LIO_WRITE,
            IoKind::Sync { .. } => libc::LIO_NOP,
        };
        self.kinds[i] = io.kind;
        if let IoKind::Sync { full } = io.kind {
            self.calls += 1;
            let op = if full { libc::O_SYNC } else { libc::O_DSYNC };
            // SAFETY: cb is ours and stays put (boxed slice) until aio_return.
            if unsafe { libc::aio_fsync(op, cb) } != 0 {
                return Err(io::Error::last_os_error());
            }
            self.in_flight.push(io.slot);
        } else {
            self.queued.push(io.slot);
        }
        Ok(())
    }
    fn submit(&mut self) -> io::Result<usize> {
        let n = self.queued.len();
        if n == 0 {
            return Ok(0);
        }
        let mut list: Vec<*mut libc::aiocb> = self
            .queued
            .iter()
            .map(|&s| &mut self.cbs[s as usize] as *mut libc::aiocb)
            .collect();
        self.calls += 1;
        // SAFETY: every pointer is to an aiocb in our boxed slice, filled and not in flight.
        let rc = unsafe {
            libc::lio_listio(
                libc::LIO_NOWAIT,
                list.as_mut_ptr(),
                list.len() as i32,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EAGAIN) {
                return Err(e);
            }
        }
        self.in_flight.append(&mut self.queued);
        Ok(n)
    }
    fn reap(&mut self, min: usize, out: &mut Vec<Cqe>) -> io::Result<()> {
        let mut got = 0;
        loop {
            let mut i = 0;
            while i < self.in_flight.len() {
                let s = self.in_flight[i];
                let cb = &mut self.cbs[s as usize];
                // SAFETY: cb is an aiocb we submitted.
                let err = unsafe { libc::aio_error(cb) };
                if err == libc::EINPROGRESS {
                    i += 1;
                    continue;
                }
                // SAFETY: the request finished; aio_return reaps it exactly once.
                let ret = unsafe { libc::aio_return(cb) } as i64;
                let res = if err != 0 { -(err as i64) } else { ret };
                out.push(Cqe {
                    slot: s,
                    kind: self.kinds[s as usize],
                    res,
                });
                self.in_flight.remove(i); // (keeps submission order: see below)
                got += 1;
                self.calls += 1; // the helper thread's pread/pwrite/fdatasync
            }
            if got >= min || self.in_flight.is_empty() {
                return Ok(());
            }
            // Wait on the oldest few requests only. glibc runs one descriptor's requests
            // in order on one helper thread, so the oldest finishes first; and
            // aio_suspend finds each listed request by walking that descriptor's queue
            // under glibc's AIO lock — O(n) per entry, O(n²) for the whole list, which
            // at iodepth 128 took 35 % of the job thread and starved the helper thread
            // waiting for that lock (0.66-0.76x fio's IOPS).
            let list: Vec<*const libc::aiocb> = self
                .in_flight
                .iter()
                .take(SUSPEND_ON)
                .map(|&s| &self.cbs[s as usize] as *const libc::aiocb)
                .collect();
            self.calls += 1;
            // SAFETY: list points at in-flight aiocbs; a null timeout waits indefinitely.
            let rc =
                unsafe { libc::aio_suspend(list.as_ptr(), list.len() as i32, std::ptr::null()) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(e);
                }
            }
        }
    }
    fn syscalls(&self) -> u64 {
        // calls into glibc's AIO (each at least one futex or syscall) + one
        // pread/pwrite/fdatasync per I/O on glibc's helper threads.
        self.calls
    }
    fn async_sync(&self) -> bool {
        true
    }
}

impl Drop for PosixAio {
    fn drop(&mut self) {
        for &s in &self.in_flight {
            let cb = &mut self.cbs[s as usize];
            // SAFETY: cancel, then wait until glibc is done with each aiocb before freeing.
            unsafe {
                libc::aio_cancel(self.fd, cb);
                while libc::aio_error(cb) == libc::EINPROGRESS {
                    let l = [cb as *const libc::aiocb];
                    libc::aio_suspend(l.as_ptr(), 1, std::ptr::null());
                }
                libc::aio_return(cb);
            }
        }
    }
}
