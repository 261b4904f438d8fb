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
//!
//! The helper reads its chunks with [`super::nowait::read_many`] (its own ring, reads
//! that never wait for the disk: a miss comes back as -EAGAIN for the caller to redo).
//! What the caller does with its own chunks is up to it ([`share`] hands them out one
//! at a time): `read_many_shared` reads them the same way, `Ring.read_batch` queues them
//! on the caller's ring.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
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

    /// The next unclaimed chunk, if any (each is handed out once).
    fn claim(&self) -> Option<std::ops::Range<usize>> {
        let c = self.next.fetch_add(1, Ordering::Relaxed);
        if c >= self.chunks() {
            return None;
        }
        let start = c * self.chunk;
        Some(start..self.n.min(start + self.chunk))
    }

    /// The helper's side: claim and read chunks until none is left.
    ///
    /// # Safety
    /// `reqs` and `out` must be valid for `n` elements, and each request's buffer as
    /// [`super::nowait::read_many`] requires, for the whole call.
    unsafe fn work(&self) {
        while let Some(r) = self.claim() {
            // SAFETY: r lies inside 0..n; chunks are claimed once, so no other thread
            // reads these requests' buffers or writes these results.
            let reqs = unsafe { std::slice::from_raw_parts(self.reqs.add(r.start), r.len()) };
            let res = unsafe { super::nowait::read_many(self.fd, reqs) };
            // SAFETY: as above, out[r] is this chunk's alone.
            unsafe { std::ptr::copy_nonoverlapping(res.as_ptr(), self.out.add(r.start), r.len()) };
            CHUNKS.fetch_add(1, Ordering::Relaxed);
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

/// Chunks the helper thread has read, over the life of the process.
static CHUNKS: AtomicU64 = AtomicU64::new(0);

/// How many chunks of shared batches the helper thread has read so far in this process
/// (0 when it never ran): shows whether batches are being shared at all.
pub fn chunks_read() -> u64 {
    CHUNKS.load(Ordering::Relaxed)
}

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

/// A result slot the helper did not fill: the caller claimed that chunk.
pub const CALLERS: i64 = i64::MIN;

/// A batch posted to the helper thread. The caller takes chunks with [`Sharing::claim`]
/// until none is left, then collects the helper's results with [`Sharing::finish`]
/// (dropping it also waits for the helper: the requests' buffers stay the caller's
/// concern until then).
pub struct Sharing<'a> {
    h: &'static Helper,
    batch: Box<Batch>,
    out: Vec<i64>,
    done: bool,
    _one: std::sync::MutexGuard<'static, ()>,
    _reqs: std::marker::PhantomData<&'a [(*mut u8, usize, u64)]>,
}

/// Offer `reqs` (reads of `fd`) to the helper thread. `None` when the batch is small,
/// there is no helper, or it is busy with another caller's batch: the caller then reads
/// everything itself.
///
/// # Safety
/// As [`super::nowait::read_many`] for every request: each buffer valid for its length
/// and used by nothing else until the returned `Sharing` is finished or dropped.
pub unsafe fn share(fd: i32, reqs: &[(*mut u8, usize, u64)]) -> Option<Sharing<'_>> {
    if reqs.len() < MIN_BATCH {
        return None;
    }
    let h = helper()?;
    let one = h.busy.try_lock().ok()?;
    let mut out = vec![CALLERS; reqs.len()];
    let batch = Box::new(Batch {
        fd,
        reqs: reqs.as_ptr(),
        n: reqs.len(),
        out: out.as_mut_ptr(),
        chunk: chunk_for(reqs.len()),
        next: AtomicUsize::new(0),
    });
    h.batch
        .store(&*batch as *const Batch as *mut Batch, Ordering::Release);
    h.state.store(POSTED, Ordering::Release);
    h.thread.unpark();
    Some(Sharing {
        h,
        batch,
        out,
        done: false,
        _one: one,
        _reqs: std::marker::PhantomData,
    })
}

impl Sharing<'_> {
    /// The caller's next chunk (indices into the requests), `None` once all are taken.
    pub fn claim(&self) -> Option<std::ops::Range<usize>> {
        self.batch.claim()
    }

    /// Wait until the helper is done with its last chunk. Returns, per request, what
    /// the helper read (bytes, or -errno: -EAGAIN when the data was not cached), or
    /// [`CALLERS`] for the chunks the caller claimed.
    pub fn finish(mut self) -> Vec<i64> {
        self.wait();
        std::mem::take(&mut self.out)
    }

    fn wait(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        // no chunk may be left for the helper to take after we stop waiting
        while self.batch.claim().is_some() {}
        // If the helper never took the batch, withdraw it; otherwise wait until it is
        // done with its last chunk (and with the batch).
        let h = self.h;
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
    }
}

impl Drop for Sharing<'_> {
    fn drop(&mut self) {
        self.wait();
    }
}

/// [`super::nowait::read_many`] of a large batch shared with the helper thread (when
/// there is one and it is free): the same results, in order.
///
/// # Safety
/// As [`super::nowait::read_many`]: every buffer valid for its length and not used by
/// anything else until this returns.
pub unsafe fn read_many_shared(fd: i32, reqs: &[(*mut u8, usize, u64)]) -> Vec<i64> {
    // SAFETY: the caller's guarantee, for as long as the sharing lives (this call).
    let Some(s) = (unsafe { share(fd, reqs) }) else {
        // SAFETY: the caller's guarantee.
        return unsafe { super::nowait::read_many(fd, reqs) };
    };
    let mut mine = Vec::new();
    while let Some(r) = s.claim() {
        // SAFETY: the caller's guarantee; the helper never takes a claimed chunk.
        let res = unsafe { super::nowait::read_many(fd, &reqs[r.clone()]) };
        mine.push((r, res));
    }
    let mut out = s.finish();
    for (r, res) in mine {
        out[r].copy_from_slice(&res);
    }
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
