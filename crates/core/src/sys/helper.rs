//! A second core for large batches of page-cache reads.
//!
//! A 4 KiB read that hits the page cache is mostly the kernel copying the page
//! (`copy_to_user` and the page-cache lookup are ~75 % of it): no amount of batching on
//! one thread goes below that. A batch of them can be split between the calling thread
//! and one helper thread, each copying on its own core. The batch is cut into chunks
//! that both threads claim from a shared counter (work sharing): when the helper is busy
//! elsewhere, asleep or descheduled, the caller simply claims every chunk itself, so a
//! batch is never slower than doing it alone by more than one chunk.
//!
//! The helper spins for a short while after each batch (`URINGKIT_READ_HELPER`
//! microseconds, default 200) so that back-to-back batches find it awake, then parks;
//! `URINGKIT_READ_HELPER=0` turns it off, and so does a process allowed fewer than two
//! CPUs. It is respawned in a forked child (threads do not survive fork).

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Batches smaller than this are read by the caller alone.
pub const MIN_BATCH: usize = 16;

/// Reads per chunk claimed at a time: a quarter of the batch, 4 to 16 (64 random 4 KiB
/// page-cache reads: 0.96 µs per read in chunks of 4, 0.85 in 8, 0.79 in 16, here).
fn chunk_for(n: usize) -> usize {
    (n / 4).clamp(4, 16)
}

const IDLE: usize = 0;
const POSTED: usize = 1;
const TAKEN: usize = 2;
const FINISHED: usize = 3;

/// One batch: `n` requests at `reqs`, results to `out`, chunks claimed through `next`.
struct Batch {
    fd: i32,
    reqs: *const (*mut u8, usize, u64),
    n: usize,
    out: *mut i64,
    chunk: usize,
    next: AtomicUsize,
}

impl Batch {
    fn chunks(&self) -> usize {
        self.n.div_ceil(self.chunk)
    }

    /// Claim and read chunks until none is left.
    ///
    /// # Safety
    /// `reqs` and `out` must be valid for `n` elements, and each request's buffer as
    /// [`super::nowait::read_many`] requires, for the whole call.
    unsafe fn work(&self) {
        loop {
            let c = self.next.fetch_add(1, Ordering::Relaxed);
            if c >= self.chunks() {
                return;
            }
            let start = c * self.chunk;
            let len = self.chunk.min(self.n - start);
            // SAFETY: start + len <= n; chunks are claimed once, so no other thread reads
            // these requests' buffers or writes these results.
            let reqs = unsafe { std::slice::from_raw_parts(self.reqs.add(start), len) };
            let res = unsafe { super::nowait::read_many(self.fd, reqs) };
            // SAFETY: as above, out[start..start + len] is this chunk's alone.
            unsafe { std::ptr::copy_nonoverlapping(res.as_ptr(), self.out.add(start), len) };
        }
    }
}

struct Helper {
    pid: u32,
    state: AtomicUsize,
    batch: AtomicPtr<Batch>,
    thread: std::thread::Thread,
    /// One batch at a time: a second caller reads alone.
    busy: Mutex<()>,
}

static HELPER: Mutex<Option<&'static Helper>> = Mutex::new(None);

/// How long the helper spins for the next batch; None: no helper. Decided once per
/// process (reading the CPU count may read cgroup files: not on every batch).
fn spin() -> Option<Duration> {
    static SPIN: OnceLock<Option<Duration>> = OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = match std::env::var("URINGKIT_READ_HELPER") {
            Ok(v) => v.trim().parse::<u64>().ok()?,
            Err(_) => 200,
        };
        if us == 0 {
            return None;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cpus >= 2).then(|| Duration::from_micros(us))
    })
}

fn helper() -> Option<&'static Helper> {
    let spin = spin()?;
    let mut g = HELPER.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some(h) = *g {
        if h.pid == pid {
            return Some(h);
        }
        // a forked child: that thread is gone; the old Helper is leaked (a few bytes)
    }
    let (tx, rx) = std::sync::mpsc::channel::<&'static Helper>();
    let t = std::thread::Builder::new()
        .name("uringkit-read".into())
        .spawn(move || {
            if let Ok(h) = rx.recv() {
                run(h, spin)
            }
        })
        .ok()?;
    let h: &'static Helper = Box::leak(Box::new(Helper {
        pid,
        state: AtomicUsize::new(IDLE),
        batch: AtomicPtr::new(std::ptr::null_mut()),
        thread: t.thread().clone(),
        busy: Mutex::new(()),
    }));
    tx.send(h).ok()?;
    *g = Some(h);
    Some(h)
}

/// The helper thread: wait for a posted batch (spinning for `spin`, then parked), take
/// it, share its chunks, say it finished.
fn run(h: &'static Helper, spin: Duration) -> ! {
    loop {
        let mut since = Instant::now();
        let mut i = 0u32;
        while h.state.load(Ordering::Acquire) != POSTED {
            i = i.wrapping_add(1);
            if i.is_multiple_of(64) && since.elapsed() > spin {
                std::thread::park_timeout(Duration::from_secs(1));
                since = Instant::now();
            } else {
                std::hint::spin_loop();
            }
        }
        if h.state
            .compare_exchange(POSTED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let b = h.batch.load(Ordering::Acquire);
            // SAFETY: a batch's poster does not return (and free it) while the state is
            // TAKEN: it waits for FINISHED, stored below after the last use. (A panic
            // must not leave it waiting: it is caught, and FINISHED stored anyway.)
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*b).work() }));
            h.state.store(FINISHED, Ordering::Release);
        }
    }
}

/// [`super::nowait::read_many`] of a large batch shared with the helper thread (when
/// there is one and it is free): the same results, in order.
///
/// # Safety
/// As [`super::nowait::read_many`]: every buffer valid for its length and not used by
/// anything else until this returns.
pub unsafe fn read_many_shared(fd: i32, reqs: &[(*mut u8, usize, u64)]) -> Vec<i64> {
    let h = if reqs.len() >= MIN_BATCH {
        helper()
    } else {
        None
    };
    let Some(h) = h else {
        // SAFETY: the caller's guarantee.
        return unsafe { super::nowait::read_many(fd, reqs) };
    };
    let Ok(_one) = h.busy.try_lock() else {
        // SAFETY: the caller's guarantee.
        return unsafe { super::nowait::read_many(fd, reqs) };
    };
    let mut out = vec![0i64; reqs.len()];
    let batch = Batch {
        fd,
        reqs: reqs.as_ptr(),
        n: reqs.len(),
        out: out.as_mut_ptr(),
        chunk: chunk_for(reqs.len()),
        next: AtomicUsize::new(0),
    };
    h.batch
        .store(&batch as *const Batch as *mut Batch, Ordering::Release);
    h.state.store(POSTED, Ordering::Release);
    h.thread.unpark();
    // SAFETY: the caller's guarantee covers every request; `out` has n elements.
    unsafe { batch.work() };
    // Every chunk is claimed. If the helper never took the batch, withdraw it;
    // otherwise wait until it is done with its last chunk (and with `batch`).
    if h.state
        .compare_exchange(POSTED, IDLE, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        let mut i = 0u32;
        while h.state.load(Ordering::Acquire) != FINISHED {
            i = i.wrapping_add(1);
            if i.is_multiple_of(1024) {
                std::thread::yield_now(); // the helper may have been descheduled
            } else {
                std::hint::spin_loop();
            }
        }
        h.state.store(IDLE, Ordering::Release);
    }
    h.batch.store(std::ptr::null_mut(), Ordering::Release);
    out
}

#[cfg(test)]
mod tests {
    use crate::sys::nowait::testing::{check_reads, data_file};
    use std::os::fd::AsRawFd;

    #[test]
    fn shared_batches_read_what_one_thread_reads() {
        let (_dir, f, data) = data_file(1_000_000, 253);
        for n in [1u64, 15, 16, 17, 64, 333] {
            for _ in 0..20 {
                let offs: Vec<u64> = (0..n).map(|i| (i * 7919 * 13) % 1_002_000).collect();
                check_reads(super::read_many_shared, f.as_raw_fd(), &data, &offs, 4096);
            }
        }
    }

    #[test]
    fn batches_from_many_threads_at_once() {
        let (_dir, f, data) = data_file(300_000, 241);
        let fd = f.as_raw_fd();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let data = &data;
                s.spawn(move || {
                    for k in 0..50u64 {
                        let offs: Vec<u64> = (0..40u64)
                            .map(|i| (t * 1000 + k * 40 + i) * 512 % 299_000)
                            .collect();
                        check_reads(super::read_many_shared, fd, data, &offs, 512);
                    }
                });
            }
        });
    }
}
