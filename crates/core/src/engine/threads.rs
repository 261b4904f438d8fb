//! threads: N workers doing blocking pread/pwrite — what aiofiles, Go's runtime and tokio's
//! spawn_blocking do for files.

use super::{sync_io, Buffers, Cqe, Engine, Io};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

struct Shared {
    work: Mutex<(VecDeque<Io>, bool)>,
    work_cv: Condvar,
    done: Mutex<Vec<Cqe>>,
    done_cv: Condvar,
    syscalls: AtomicU64,
}

pub struct Threads {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    queued: Vec<Io>,
    /// wake-ups we caused (each a potential futex call)
    wakes: u64,
}

impl Threads {
    pub fn new(fd: i32, bufs: Buffers, n: u32) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            work: Mutex::new((VecDeque::new(), false)),
            work_cv: Condvar::new(),
            done: Mutex::new(Vec::new()),
            done_cv: Condvar::new(),
            syscalls: AtomicU64::new(0),
        });
        let mut workers = Vec::new();
        for i in 0..n.max(1) {
            let sh = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("uringkit-io-{i}"))
                .spawn(move || worker(fd, bufs, sh))?;
            workers.push(h);
        }
        Ok(Threads {
            shared,
            workers,
            queued: Vec::new(),
            wakes: 0,
        })
    }
}

fn worker(fd: i32, bufs: Buffers, sh: Arc<Shared>) {
    loop {
        let io = {
            let mut g = sh.work.lock().expect("work lock");
            loop {
                if let Some(io) = g.0.pop_front() {
                    break io;
                }
                if g.1 {
                    return;
                }
                g = sh.work_cv.wait(g).expect("work wait");
            }
        };
        sh.syscalls.fetch_add(1, Ordering::Relaxed);
        let res = sync_io(fd, &bufs, &io);
        let mut d = sh.done.lock().expect("done lock");
        d.push(Cqe {
            slot: io.slot,
            kind: io.kind,
            res,
        });
        drop(d);
        sh.done_cv.notify_one();
    }
}

impl Engine for Threads {
    fn name(&self) -> &'static str {
        "threads"
    }
    fn queue(&mut self, io: Io) -> io::Result<()> {
        self.queued.push(io);
        Ok(())
    }
    fn submit(&mut self) -> io::Result<usize> {
        let n = self.queued.len();
        if n == 0 {
            return Ok(0);
        }
        let mut g = self.shared.work.lock().expect("work lock");
        g.0.extend(self.queued.drain(..));
        drop(g);
        if n == 1 {
            self.shared.work_cv.notify_one();
        } else {
            self.shared.work_cv.notify_all();
        }
        self.wakes += 1;
        Ok(n)
    }
    fn reap(&mut self, min: usize, out: &mut Vec<Cqe>) -> io::Result<()> {
        let mut d = self.shared.done.lock().expect("done lock");
        while d.len() < min {
            d = self.shared.done_cv.wait(d).expect("done wait");
        }
        out.append(&mut d);
        Ok(())
    }
    fn syscalls(&self) -> u64 {
        self.shared.syscalls.load(Ordering::Relaxed) + self.wakes
    }
    fn async_sync(&self) -> bool {
        true
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.shared.work.lock().expect("work lock").1 = true;
        self.shared.work_cv.notify_all();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}
