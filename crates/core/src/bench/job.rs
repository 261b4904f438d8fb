//! The job loop: keep `iodepth` I/Os in flight on one engine, batch submissions and
//! completions like fio, time every I/O, account CPU for the whole process.

use super::cpu::{self, Usage};
use super::hist::Hist;
use super::verify;
use crate::buf::AlignedBuf;
use crate::engine::{self, Buffers, Cqe, EngineKind, Io, IoKind};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rw {
    Read,
    Write,
    RandRead,
    RandWrite,
    ReadWrite,
    RandRw,
}

impl Rw {
    pub fn parse(s: &str) -> Option<Rw> {
        Some(match s {
            "read" => Rw::Read,
            "write" => Rw::Write,
            "randread" => Rw::RandRead,
            "randwrite" => Rw::RandWrite,
            "rw" | "readwrite" => Rw::ReadWrite,
            "randrw" => Rw::RandRw,
            _ => return None,
        })
    }
    fn random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite | Rw::RandRw)
    }
    fn reads(self) -> bool {
        !matches!(self, Rw::Write | Rw::RandWrite)
    }
    fn writes(self) -> bool {
        !matches!(self, Rw::Read | Rw::RandRead)
    }
}

#[derive(Clone, Debug)]
pub struct JobSpec {
    pub name: String,
    pub filename: PathBuf,
    pub size: u64,
    pub rw: Rw,
    pub rwmixread: u32,
    pub bs: u32,
    pub iodepth: u32,
    pub iodepth_batch_submit: u32,
    pub iodepth_batch_complete_min: u32,
    /// At most this many completions handled per reap (fio's default: the min); the
    /// rest wait for the next round, as fio leaves them in the CQ ring.
    pub iodepth_batch_complete_max: u32,
    pub direct: bool,
    pub runtime: Option<Duration>,
    pub time_based: bool,
    pub ramp_time: Duration,
    pub fsync: u32,
    pub fdatasync: u32,
    pub engine: EngineKind,
    pub verify: bool,
    pub numjobs: u32,
    pub seed: u64,
    /// fio's offset: the I/O region is [offset, offset + size) of the file.
    pub offset: u64,
    /// fio's io_size: bytes of I/O to do (default: size; more wraps around the region).
    pub io_size: Option<u64>,
    /// fio's number_ios: stop after this many I/Os, whatever else is left.
    pub number_ios: Option<u64>,
    /// fio's rate_iops: issue at most this many I/Os per second (evenly: the n-th I/O
    /// not before n / rate seconds into the job).
    pub rate_iops: Option<u64>,
    /// fio's invalidate=1: the file's pages leave the page cache once it is laid out,
    /// before the job starts (a file the job has just written is not read from memory).
    pub invalidate: bool,
    /// fio's random_distribution: which blocks random I/O picks.
    pub random_distribution: super::dist::Dist,
    /// fio's bssplit: (block size, weight) pairs an I/O's size is drawn from (`bs` is
    /// then the largest; offsets are multiples of the smallest). Empty: every I/O is bs.
    pub bssplit: Vec<(u32, u32)>,
}

#[derive(Clone, Default)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    pub slat: Hist,
    pub clat: Hist,
    pub lat: Hist,
}

impl DirStats {
    fn merge(&mut self, o: &DirStats) {
        self.ios += o.ios;
        self.bytes += o.bytes;
        self.slat.merge(&o.slat);
        self.clat.merge(&o.clat);
        self.lat.merge(&o.lat);
    }
}

#[derive(Clone, Default)]
pub struct JobResult {
    pub read: DirStats,
    pub write: DirStats,
    pub sync: Hist,
    /// Measured window (after ramp), nanoseconds.
    pub elapsed_ns: u64,
    pub usage: Usage,
    pub syscalls: u64,
    pub verified_blocks: u64,
    pub verify_errors: u64,
    pub first_verify_error: Option<String>,
    pub warning: Option<String>,
    /// How the engine was set up (see `Engine::setup`).
    pub setup: Option<String>,
    pub depth: u32,
    /// Per `SAMPLE` window of the measured run: reads, read bytes, writes, write bytes,
    /// window length in ns (fio's bw/iops samples, `bw_avg_time=500`).
    pub samples: Vec<[u64; 5]>,
    /// fio's "IO depths": I/Os submitted while 1, 2, 4, 8, 16, 32, >=64 were in flight.
    pub depth_map: [u64; 7],
    /// fio's "submit" and "complete": system calls handing over / reaping 0, 1-4, 5-8,
    /// 9-16, 17-32, 33-64, >64 I/Os.
    pub submit_map: [u64; 7],
    pub complete_map: [u64; 7],
}

/// fio's sampling window for bandwidth and IOPS.
pub const SAMPLE: Duration = Duration::from_millis(500);

/// fio's buckets for a batch of I/Os per submit/reap call (io_u_mark_submit /
/// io_u_mark_complete: 0, 1-4, 5-8, 9-16, 17-32, 33-64, more) and for the depth an I/O
/// was submitted at (io_u_mark_depth: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+): the upper
/// limit of each bucket but the last.
const BATCH_LIMITS: [usize; 6] = [0, 4, 8, 16, 32, 64];
const DEPTH_LIMITS: [usize; 6] = [1, 3, 7, 15, 31, 63];

/// The bucket of `n`: the first whose limit it does not exceed, else the last (6).
fn bucket(n: usize, limits: &[usize; 6]) -> usize {
    limits.iter().position(|&l| n <= l).unwrap_or(limits.len())
}

/// Live numbers handed to the progress callback.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    pub ios: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    pub ramping: bool,
}

#[derive(Clone, Copy)]
struct SlotState {
    busy: bool,
    kind: IoKind,
    offset: u64,
    len: u32,
    t_queue: Instant,
    t_submit: Instant,
    /// completions still expected (2 for a write linked to a sync)
    pending: u8,
    /// a sync was queued on this slot after its write (non-linking engines)
    syncing: bool,
    t_sync: Instant,
    counted: bool,
    /// issue a sync (fsync when true) once this write completes (engines without links)
    sync_after: Option<bool>,
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

fn open_file(spec: &JobSpec) -> io::Result<i32> {
    let dir = spec
        .filename
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_else(|| PathBuf::from("."));
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    if !dir.is_dir() {
        return Err(err(
            io::ErrorKind::NotFound,
            format!("directory {} does not exist", dir.display()),
        ));
    }
    let c = std::ffi::CString::new(spec.filename.as_os_str().as_bytes())
        .map_err(|_| err(io::ErrorKind::InvalidInput, "filename contains NUL".into()))?;
    let mut flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC;
    if spec.direct {
        flags |= libc::O_DIRECT;
    }
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if spec.direct && e.raw_os_error() == Some(libc::EINVAL) {
            return Err(err(
                io::ErrorKind::InvalidInput,
                format!(
                    "the filesystem of {} refuses O_DIRECT (EINVAL); use direct=0",
                    dir.display()
                ),
            ));
        }
        let why = crate::text::io_error(&e);
        return Err(crate::text::reword(
            &e,
            format!("cannot open {}: {why}", spec.filename.display()),
        ));
    }
    Ok(fd)
}

fn file_size(fd: i32) -> io::Result<u64> {
    // SAFETY: stat is POD; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open, st is a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// Make sure the file holds `size` bytes of data a read job can read (and, with verify,
/// the verify pattern). Written with the job's own alignment so O_DIRECT works.
pub fn layout(fd: i32, spec: &JobSpec, force_pattern: bool) -> io::Result<()> {
    let have = file_size(fd)?;
    let need_data = spec.rw.reads() || spec.verify;
    let end = spec.offset + spec.size;
    if have >= end && !force_pattern {
        return Ok(());
    }
    if !need_data {
        // SAFETY: fd is open; extending with ftruncate creates a sparse tail.
        if unsafe { libc::ftruncate(fd, end as i64) } != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(());
    }
    let chunk = (1usize << 20).max(spec.bs as usize);
    let chunk = chunk - chunk % spec.bs as usize;
    let buf = AlignedBuf::new(chunk)?;
    let start = if force_pattern {
        spec.offset
    } else {
        have - have % spec.bs as u64
    };
    let mut off = start;
    while off < end {
        let n = chunk.min((end - off) as usize);
        let n = n.div_ceil(spec.bs as usize) * spec.bs as usize;
        // SAFETY: no I/O is in flight on this private buffer.
        let s = unsafe { buf.as_mut_slice() };
        for (i, blk) in s[..n].chunks_mut(spec.bs as usize).enumerate() {
            verify::fill(blk, off + (i * spec.bs as usize) as u64);
        }
        // SAFETY: no I/O is in flight on this private buffer; it holds n valid bytes.
        let data = unsafe { &buf.as_slice()[..n] };
        if let Err(e) = crate::sys::fileio::pwrite_all(fd, data, off) {
            return Err(err(
                e.kind(),
                if e.raw_os_error() == Some(libc::ENOSPC) {
                    format!(
                        "the disk filled up while laying out the {} test file (ENOSPC); \
                         use a smaller size= or another directory",
                        crate::ring::setup::human_bytes(end)
                    )
                } else {
                    format!("laying out the test file: {e}")
                },
            ));
        }
        off += n as u64;
    }
    // SAFETY: fd is open.
    unsafe { libc::fdatasync(fd) };
    Ok(())
}

fn first_block_verifies(fd: i32, spec: &JobSpec) -> bool {
    let Ok(b) = AlignedBuf::new(spec.bs as usize) else {
        return false;
    };
    // SAFETY: b holds bs bytes; fd is open.
    let at = spec.offset;
    let r = unsafe { libc::pread(fd, b.as_ptr().cast(), spec.bs as usize, at as i64) };
    // SAFETY: the read finished.
    r == spec.bs as isize && verify::check(unsafe { b.as_slice() }, at).is_ok()
}

/// Check the spec before touching anything.
pub fn validate(spec: &JobSpec) -> Result<(), String> {
    if spec.bs == 0 {
        return Err("bs must be at least 1".into());
    }
    if spec.size < spec.bs as u64 {
        return Err(format!(
            "size ({}) is smaller than bs ({})",
            spec.size, spec.bs
        ));
    }
    if spec.iodepth == 0 || spec.iodepth > 65536 {
        return Err(format!(
            "iodepth must be between 1 and 65536 (got {})",
            spec.iodepth
        ));
    }
    if spec.verify && spec.bs < 16 {
        return Err("verify=crc32c needs bs of at least 16 bytes".into());
    }
    if spec.rwmixread > 100 {
        return Err("rwmixread must be between 0 and 100".into());
    }
    if spec.io_size == Some(0) || spec.number_ios == Some(0) || spec.rate_iops == Some(0) {
        return Err("io_size, number_ios and rate_iops must be at least 1".into());
    }
    spec.random_distribution.validate()?;
    if !spec.bssplit.is_empty() {
        if spec.verify {
            return Err(
                "bssplit with verify=crc32c is not supported (verify checks blocks \
                        of one size); drop one of them"
                    .into(),
            );
        }
        if spec.bssplit.iter().any(|&(b, _)| b == 0 || b > spec.bs)
            || spec.bssplit.iter().all(|&(_, w)| w == 0)
        {
            return Err("bssplit sizes must be 1 byte to bs, with some weight".into());
        }
    }
    if spec.rate_iops.is_some() && matches!(spec.rw, Rw::ReadWrite | Rw::RandRw) {
        return Err(
            "rate_iops with rw=rw/randrw: fio paces reads and writes separately, which \
             uringkit does not; use a read or a write job"
                .into(),
        );
    }
    if !spec.time_based && spec.runtime.is_none() && spec.size == 0 {
        return Err("size=0 with no runtime: nothing to do".into());
    }
    Ok(())
}

fn check_direct_alignment(fd: i32, spec: &JobSpec) -> io::Result<()> {
    if !spec.direct {
        return Ok(());
    }
    let align = match crate::op::statx_fd(fd, crate::op::STATX_DIOALIGN) {
        Ok(st) if st.stx_mask & crate::op::STATX_DIOALIGN != 0 && st.stx_dio_offset_align > 0 => {
            st.stx_dio_offset_align
        }
        _ => 512,
    };
    if let Some(&(b, _)) = spec
        .bssplit
        .iter()
        .find(|&&(b, _)| !b.is_multiple_of(align))
    {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!(
                "bssplit size {b} is not a multiple of the logical block size ({align} B) \
                 required by O_DIRECT here; use multiples of {align} or direct=0"
            ),
        ));
    }
    if !spec.bs.is_multiple_of(align) {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!(
                "bs={} is not a multiple of the logical block size ({align} B) required by \
                 O_DIRECT here; use bs={} or direct=0",
                spec.bs,
                (spec.bs / align + 1) * align
            ),
        ));
    }
    if !spec.offset.is_multiple_of(align as u64) {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!(
                "offset={} is not a multiple of the logical block size ({align} B) required \
                 by O_DIRECT here; use offset={} or direct=0",
                spec.offset,
                spec.offset - spec.offset % align as u64
            ),
        ));
    }
    Ok(())
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Shared state of a multi-job run (numjobs).
pub struct Shared {
    pub stop: AtomicBool,
    pub ios: AtomicU64,
    pub bytes: AtomicU64,
    pub measuring: AtomicBool,
}

/// Run `spec` with `numjobs` threads on the same file. `progress` is called from the
/// calling thread about every `interval`; returning false stops the run early.
pub fn run_jobs(
    spec: &JobSpec,
    interval: Duration,
    progress: &mut dyn FnMut(&Progress) -> bool,
) -> io::Result<JobResult> {
    validate(spec).map_err(|m| err(io::ErrorKind::InvalidInput, m))?;
    // Lay the file out once, before any timing.
    {
        let fd = open_file(spec)?;
        let r = check_direct_alignment(fd, spec).and_then(|_| {
            let force = spec.verify && !spec.rw.writes() && !first_block_verifies(fd, spec);
            layout(fd, spec, force)?;
            if spec.invalidate {
                // SAFETY: fd is ours; written pages must be clean to be dropped.
                unsafe {
                    libc::fdatasync(fd);
                    libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
                }
            }
            Ok(())
        });
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        r?;
    }
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        ios: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        measuring: AtomicBool::new(spec.ramp_time.is_zero()),
    });
    let n = spec.numjobs.max(1);
    let start = Instant::now();
    let u0 = cpu::usage();
    let mut handles = Vec::new();
    for j in 0..n {
        let mut s = spec.clone();
        s.seed = spec.seed.wrapping_add(j as u64 * 0x9E37_79B9);
        let sh = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("uringkit-job-{j}"))
                .spawn(move || run_one(&s, &sh))?,
        );
    }
    // Ramp, then the measured window: reset the CPU snapshot when measuring starts.
    let mut u_start = u0;
    let mut t_measure = start;
    let mut ramping = !spec.ramp_time.is_zero();
    loop {
        if handles.iter().all(|h| h.is_finished()) {
            break;
        }
        std::thread::sleep(interval.min(Duration::from_millis(50)));
        let now = Instant::now();
        if ramping && now - start >= spec.ramp_time {
            ramping = false;
            u_start = cpu::usage();
            t_measure = now;
            shared.ios.store(0, Ordering::Relaxed);
            shared.bytes.store(0, Ordering::Relaxed);
            shared.measuring.store(true, Ordering::Release);
        }
        let p = Progress {
            ios: shared.ios.load(Ordering::Relaxed),
            bytes: shared.bytes.load(Ordering::Relaxed),
            elapsed: now - if ramping { start } else { t_measure },
            ramping,
        };
        if !progress(&p) {
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
    let u1 = cpu::usage();
    let mut total = JobResult::default();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => {
                total.read.merge(&r.read);
                total.write.merge(&r.write);
                total.sync.merge(&r.sync);
                total.elapsed_ns = total.elapsed_ns.max(r.elapsed_ns);
                total.syscalls += r.syscalls;
                total.verified_blocks += r.verified_blocks;
                total.verify_errors += r.verify_errors;
                if total.first_verify_error.is_none() {
                    total.first_verify_error = r.first_verify_error;
                }
                if total.warning.is_none() {
                    total.warning = r.warning;
                }
                if total.setup.is_none() {
                    total.setup = r.setup;
                }
                total.depth = r.depth;
                // group reporting: the jobs' windows, summed window by window
                for (i, w) in r.samples.iter().enumerate() {
                    match total.samples.get_mut(i) {
                        Some(t) => {
                            for k in 0..4 {
                                t[k] += w[k];
                            }
                            t[4] = t[4].max(w[4]);
                        }
                        None => total.samples.push(*w),
                    }
                }
                for k in 0..7 {
                    total.depth_map[k] += r.depth_map[k];
                    total.submit_map[k] += r.submit_map[k];
                    total.complete_map[k] += r.complete_map[k];
                }
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(io::Error::other("a job thread panicked"));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    total.usage = u1 - u_start;
    Ok(total)
}

fn run_one(spec: &JobSpec, shared: &Shared) -> io::Result<JobResult> {
    let fd = open_file(spec)?;
    let r = run_fd(fd, spec, shared);
    // SAFETY: fd is ours; the engine (dropped inside run_fd) no longer uses it.
    unsafe { libc::close(fd) };
    r
}

fn run_fd(fd: i32, spec: &JobSpec, shared: &Shared) -> io::Result<JobResult> {
    let sync_engine = matches!(spec.engine, EngineKind::Psync);
    let depth = if sync_engine { 1 } else { spec.iodepth };
    let bs = spec.bs as usize;
    let mem = AlignedBuf::new(bs * depth as usize)?;
    let bufs = Buffers {
        base: mem.as_ptr(),
        bs,
        slots: depth as usize,
    };
    if !spec.verify {
        // Incompressible data, so writes cost what real data costs.
        let mut x = Rng(spec.seed | 1);
        // SAFETY: no I/O in flight yet.
        for c in unsafe { mem.as_mut_slice() }.chunks_mut(8) {
            let b = x.next().to_le_bytes();
            c.copy_from_slice(&b[..c.len()]);
        }
    }
    let mut eng = engine::build(&spec.engine, fd, bufs, depth, spec.direct)?;
    let mut res = JobResult {
        warning: eng.warning(),
        setup: eng.setup(),
        depth,
        ..Default::default()
    };
    let now = Instant::now();
    let mut slots = vec![
        SlotState {
            busy: false,
            kind: IoKind::Read,
            offset: 0,
            len: 0,
            t_queue: now,
            t_submit: now,
            pending: 0,
            syncing: false,
            t_sync: now,
            counted: false,
            sync_after: None,
        };
        depth as usize
    ];
    let mut free: Vec<u32> = (0..depth).rev().collect();
    let mut rng = Rng(spec.seed | 1);
    // offsets step by `unit`: bs, or with bssplit its smallest size
    let unit = spec
        .bssplit
        .iter()
        .map(|&(b, _)| b)
        .min()
        .unwrap_or(spec.bs) as u64;
    let split_total: u64 = spec.bssplit.iter().map(|&(_, w)| w as u64).sum();
    let blocks = (spec.size / unit).max(1);
    let picker = super::dist::Picker::new(spec.random_distribution, blocks);
    let mut next_seq: u64 = 0;
    let sync_every = if spec.fdatasync > 0 {
        Some((spec.fdatasync, false))
    } else if spec.fsync > 0 {
        Some((spec.fsync, true))
    } else {
        None
    };
    let link_sync = eng.links_sync();
    let mut writes_since_sync = 0u32;
    let mut written = if spec.verify && spec.rw.writes() {
        vec![false; blocks as usize]
    } else {
        Vec::new()
    };
    let batch_submit = spec.iodepth_batch_submit.clamp(1, depth) as usize;
    let batch_complete = spec.iodepth_batch_complete_min.clamp(1, depth) as usize;
    let batch_complete_max =
        (spec.iodepth_batch_complete_max as usize).clamp(batch_complete, depth as usize);
    let io_limit = if spec.time_based {
        u64::MAX
    } else {
        spec.io_size.unwrap_or(spec.size)
    };
    let ios_limit = spec.number_ios.unwrap_or(u64::MAX);
    let mut issued_ios: u64 = 0;
    // fio's rate_iops: the pace, from the job's start (ramp included)
    let t_pace = Instant::now();
    let rate = spec.rate_iops.map(|r| r as f64);
    let mut issued_bytes: u64 = 0;
    let mut measuring = shared.measuring.load(Ordering::Acquire);
    let mut t_start = Instant::now();
    let sys0 = eng.syscalls();
    let mut sys_start = sys0;
    let mut queued: Vec<u32> = Vec::with_capacity(depth as usize);
    let mut cqes: Vec<Cqe> = Vec::with_capacity(depth as usize * 2);
    // completions reaped but not handled yet (beyond iodepth_batch_complete_max)
    let mut backlog: std::collections::VecDeque<Cqe> =
        std::collections::VecDeque::with_capacity(depth as usize * 2);
    let mut in_flight = 0usize;
    let mut verify_buf_errors = 0u64;
    let mut first_verify: Option<String> = None;
    let mut verified = 0u64;
    let mut counter = 0u64;
    let mut t_sample = t_start;
    let mut sample_base = [0u64; 4];
    loop {
        let t_now = Instant::now();
        if !measuring && shared.measuring.load(Ordering::Acquire) {
            measuring = true;
            t_start = t_now;
            sys_start = eng.syscalls();
            res.read = DirStats::default();
            res.write = DirStats::default();
            res.sync = Hist::new();
            res.samples.clear();
            res.depth_map = [0; 7];
            res.submit_map = [0; 7];
            res.complete_map = [0; 7];
            t_sample = t_now;
            sample_base = [0; 4];
        }
        if measuring && t_now - t_sample >= SAMPLE {
            let now4 = [res.read.ios, res.read.bytes, res.write.ios, res.write.bytes];
            let mut w = [0u64; 5];
            for k in 0..4 {
                w[k] = now4[k] - sample_base[k];
            }
            w[4] = (t_now - t_sample).as_nanos() as u64;
            res.samples.push(w);
            sample_base = now4;
            t_sample = t_now;
        }
        let time_up = match spec.runtime {
            Some(rt) => measuring && t_now - t_start >= rt,
            None => false,
        };
        let stopping = time_up
            || shared.stop.load(Ordering::Relaxed)
            || issued_bytes >= io_limit
            || issued_ios >= ios_limit;
        // Fill the queue (no faster than rate_iops allows).
        let allowed = match rate {
            Some(r) => ((t_now - t_pace).as_secs_f64() * r) as u64 + 1,
            None => u64::MAX,
        };
        let mut paced = false;
        if !stopping {
            loop {
                if issued_ios >= allowed {
                    paced = true;
                    break;
                }
                let Some(s) = free.pop() else { break };
                let is_read = match spec.rw {
                    Rw::Read | Rw::RandRead => true,
                    Rw::Write | Rw::RandWrite => false,
                    Rw::ReadWrite | Rw::RandRw => rng.next() % 100 < spec.rwmixread as u64,
                };
                let want = if split_total == 0 {
                    bs as u64
                } else {
                    let mut r = rng.next() % split_total;
                    let mut pick = unit;
                    for &(b, w) in &spec.bssplit {
                        if r < w as u64 {
                            pick = b as u64;
                            break;
                        }
                        r -= w as u64;
                    }
                    pick
                };
                let blk = if spec.rw.random() {
                    picker.pick(rng.next())
                } else {
                    // sequential: the next I/O starts where this one ends
                    let b = next_seq % blocks;
                    next_seq += want.div_ceil(unit);
                    b
                };
                let len = want.min(spec.size - blk * unit) as u32;
                let offset = spec.offset + blk * unit;
                let kind = if is_read { IoKind::Read } else { IoKind::Write };
                if !is_read && spec.verify {
                    // SAFETY: slot s is free: no I/O uses its buffer.
                    let b = unsafe { std::slice::from_raw_parts_mut(bufs.slot(s), len as usize) };
                    verify::fill(b, offset);
                }
                let mut link = None;
                let mut pending = 1;
                let mut sync_after = None;
                if !is_read {
                    if let Some((every, full)) = sync_every {
                        writes_since_sync += 1;
                        if writes_since_sync >= every {
                            writes_since_sync = 0;
                            if link_sync {
                                link = Some(full);
                                pending = 2;
                            } else {
                                sync_after = Some(full);
                            }
                        }
                    }
                }
                let t = Instant::now();
                slots[s as usize] = SlotState {
                    busy: true,
                    kind,
                    offset,
                    len,
                    t_queue: t,
                    t_submit: t,
                    pending,
                    syncing: false,
                    t_sync: t,
                    counted: false,
                    sync_after,
                };
                eng.queue(Io {
                    slot: s,
                    kind,
                    offset,
                    len,
                    link_sync: link,
                })?;
                queued.push(s);
                issued_bytes += len as u64;
                issued_ios += 1;
                if queued.len() >= batch_submit
                    || issued_bytes >= io_limit
                    || issued_ios >= ios_limit
                {
                    break;
                }
            }
        }
        if !queued.is_empty() {
            let t_before = Instant::now();
            // With the queue full, the wait below hands these SQEs to the kernel in the same
            // io_uring_enter (submit + wait in one system call, like fio's engine does).
            // (only when the reap below will really enter the kernel to wait: with
            // completions already in hand it does not, and these must go now)
            let waits = backlog.len() < batch_complete.min(in_flight + queued.len());
            let deferred = eng.waits_submit() && free.is_empty() && waits && !stopping;
            if !deferred {
                eng.submit()?;
            }
            if measuring {
                // (deferred: the wait below hands them over, one call as well)
                res.submit_map[bucket(queued.len(), &BATCH_LIMITS)] += 1;
            }
            let t_after = if sync_engine || deferred {
                t_before
            } else {
                Instant::now()
            };
            for &s in &queued {
                slots[s as usize].t_submit = t_after;
            }
            in_flight += queued.len();
            if measuring {
                res.depth_map[bucket(in_flight, &DEPTH_LIMITS)] += queued.len() as u64;
            }
            queued.clear();
        }
        if in_flight == 0 {
            if stopping || issued_bytes >= io_limit {
                break;
            }
            if let (true, Some(r)) = (paced, rate) {
                // ahead of the pace with nothing in flight: sleep until the next I/O's
                // time (in short steps, so a stop or the runtime is seen in time)
                let next = t_pace + Duration::from_secs_f64(issued_ios as f64 / r);
                let now = Instant::now();
                if next > now {
                    std::thread::sleep((next - now).min(Duration::from_millis(20)));
                }
            }
            continue;
        }
        // Reap: wait for a batch when the queue is full (or we are draining), else poll.
        // Ahead of the pace, wait for the next completion (as fio waits for its I/Os
        // before it sleeps) rather than spin.
        let must_wait = free.is_empty() || stopping || paced;
        let want = if must_wait {
            batch_complete.min(in_flight)
        } else {
            0
        };
        // Handle at most iodepth_batch_complete_max completions (fio's default: one at a
        // time when the min is 1), the rest next round — so the queue refills as fio's
        // does, one I/O per completion, instead of in waves.
        if backlog.len() < want.max(1) {
            cqes.clear();
            eng.reap(want.saturating_sub(backlog.len()), &mut cqes)?;
            if measuring && !(cqes.is_empty() && want == 0) {
                res.complete_map[bucket(cqes.len(), &BATCH_LIMITS)] += 1;
            }
            backlog.extend(cqes.drain(..));
        }
        let t_done = Instant::now();
        let take = backlog.len().min(batch_complete_max);
        for _ in 0..take {
            let c = backlog.pop_front().expect("counted");
            let st = &mut slots[c.slot as usize];
            if !st.busy {
                continue;
            }
            if c.res < 0 {
                let e = io::Error::from_raw_os_error((-c.res) as i32);
                let what = match c.kind {
                    IoKind::Sync { .. } => "fdatasync",
                    _ if st.kind == IoKind::Read => "read",
                    _ => "write",
                };
                let hint = match -c.res as i32 {
                    libc::ENOSPC => " — the disk is full",
                    libc::EOPNOTSUPP if matches!(&spec.engine, EngineKind::Uring(o) if o.hipri) => {
                        " — hipri (IOPOLL) needs a device with poll queues; this one has none"
                    }
                    libc::EINVAL if spec.direct => {
                        " — O_DIRECT alignment: bs and offsets must be multiples of the \
                         logical block size"
                    }
                    _ => "",
                };
                return Err(crate::text::reword(
                    &e,
                    format!(
                        "{} {what} of {} bytes at offset {} failed: {}{hint}",
                        eng.name(),
                        st.len,
                        st.offset,
                        crate::text::io_error(&e)
                    ),
                ));
            }
            let is_sync_cqe = matches!(c.kind, IoKind::Sync { .. }) || st.syncing;
            if is_sync_cqe {
                if measuring {
                    let since = if st.syncing { st.t_sync } else { st.t_submit };
                    res.sync.record((t_done - since).as_nanos() as u64);
                }
            } else if !st.counted {
                st.counted = true;
                let slat = (st.t_submit - st.t_queue).as_nanos() as u64;
                let clat = (t_done - st.t_submit).as_nanos() as u64;
                let lat = (t_done - st.t_queue).as_nanos() as u64;
                let n = c.res as u64;
                if st.kind == IoKind::Read && spec.verify {
                    // SAFETY: the read completed; its slot buffer is ours again.
                    let b =
                        unsafe { std::slice::from_raw_parts(bufs.slot(c.slot), st.len as usize) };
                    verified += 1;
                    if let Err(bad) = verify::check(b, st.offset) {
                        verify_buf_errors += 1;
                        first_verify.get_or_insert_with(|| {
                            format!("block at offset {}: {bad:?}", st.offset)
                        });
                    }
                }
                if st.kind == IoKind::Write && !written.is_empty() {
                    written[((st.offset - spec.offset) / bs as u64) as usize] = true;
                }
                if measuring {
                    let d = if st.kind == IoKind::Read {
                        &mut res.read
                    } else {
                        &mut res.write
                    };
                    d.ios += 1;
                    d.bytes += n;
                    if !sync_engine {
                        d.slat.record(slat);
                    }
                    d.clat.record(clat);
                    d.lat.record(lat);
                    counter += 1;
                    if counter.is_multiple_of(64) {
                        shared.ios.fetch_add(64, Ordering::Relaxed);
                        shared.bytes.fetch_add(64 * n, Ordering::Relaxed);
                    }
                }
                // Short transfers: fio counts what happened; we do the same (the
                // remainder is not resubmitted in a benchmark).
                // A write that reached the sync threshold on an engine without links:
                if st.kind == IoKind::Write {
                    if let Some(full) = st.sync_after.take() {
                        {
                            st.syncing = true;
                            st.t_sync = Instant::now();
                            st.pending = 1;
                            let (slot, off) = (c.slot, st.offset);
                            let sync_io = Io {
                                slot,
                                kind: IoKind::Sync { full },
                                offset: off,
                                len: 0,
                                link_sync: None,
                            };
                            if eng.async_sync() {
                                eng.queue(sync_io)?;
                                queued.push(slot);
                                in_flight -= 1;
                                continue;
                            }
                            let r = engine::sync_io(fd, &bufs, &sync_io);
                            if r < 0 {
                                return Err(io::Error::from_raw_os_error((-r) as i32));
                            }
                            if measuring {
                                res.sync.record(st.t_sync.elapsed().as_nanos() as u64);
                            }
                        }
                    }
                }
            }
            st.pending = st.pending.saturating_sub(1);
            if st.pending == 0 {
                st.busy = false;
                free.push(c.slot);
                in_flight -= 1;
            }
        }
    }
    res.elapsed_ns = (Instant::now() - t_start).as_nanos() as u64;
    res.syscalls = eng.syscalls() - sys_start;
    drop(eng);
    // Read back every written block (seed 002's correctness check).
    if !written.is_empty() {
        let vb = AlignedBuf::new(bs)?;
        for (i, w) in written.iter().enumerate() {
            if !*w {
                continue;
            }
            let rel = i as u64 * bs as u64;
            let len = bs.min((spec.size - rel) as usize);
            let off = spec.offset + rel;
            // SAFETY: no I/O is in flight on vb; it holds bs >= len bytes.
            let r =
                crate::sys::fileio::pread_full(fd, unsafe { &mut vb.as_mut_slice()[..len] }, off)
                    .unwrap_or(0);
            verified += 1;
            // SAFETY: the read finished; nothing else uses vb.
            let data = unsafe { &vb.as_slice()[..len] };
            let bad = if r != len {
                Some(format!("short read-back ({r} of {len} bytes)"))
            } else {
                verify::check(data, off).err().map(|b| format!("{b:?}"))
            };
            if let Some(b) = bad {
                verify_buf_errors += 1;
                first_verify.get_or_insert_with(|| format!("block at offset {off}: {b}"));
            }
        }
    }
    res.verified_blocks = verified;
    res.verify_errors = verify_buf_errors;
    res.first_verify_error = first_verify;
    drop(mem);
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::UringOpts;

    fn spec(dir: &std::path::Path, engine: EngineKind, rw: Rw) -> JobSpec {
        JobSpec {
            offset: 0,
            io_size: None,
            number_ios: None,
            rate_iops: None,
            invalidate: false,
            random_distribution: Default::default(),
            bssplit: Vec::new(),
            name: "t".into(),
            filename: dir.join("f"),
            size: 4 << 20,
            rw,
            rwmixread: 50,
            bs: 4096,
            iodepth: 8,
            iodepth_batch_submit: 1,
            iodepth_batch_complete_min: 1,
            iodepth_batch_complete_max: 1,
            direct: false,
            runtime: None,
            time_based: false,
            ramp_time: Duration::ZERO,
            fsync: 0,
            fdatasync: 0,
            engine,
            verify: true,
            numjobs: 1,
            seed: 7,
        }
    }

    fn engines() -> Vec<EngineKind> {
        let mut v = vec![
            EngineKind::Psync,
            EngineKind::Threads,
            EngineKind::PosixAio,
            EngineKind::Libaio,
        ];
        if crate::Ring::<()>::new(Default::default()).is_ok() {
            v.push(EngineKind::Uring(UringOpts::default()));
            v.push(EngineKind::Uring(UringOpts {
                registerfiles: true,
                fixedbufs: true,
                nonvectored: true,
                ..Default::default()
            }));
        }
        v
    }

    #[test]
    fn every_engine_reads_and_writes_verified() {
        for e in engines() {
            for rw in [Rw::RandWrite, Rw::RandRead, Rw::Write, Rw::RandRw] {
                let d = tempfile::tempdir().unwrap();
                let s = spec(d.path(), e.clone(), rw);
                let r = run_jobs(&s, Duration::from_millis(10), &mut |_| true)
                    .unwrap_or_else(|err| panic!("{e:?} {rw:?}: {err}"));
                let ios = r.read.ios + r.write.ios;
                assert_eq!(ios, 1024, "{e:?} {rw:?}");
                assert_eq!(
                    r.verify_errors, 0,
                    "{e:?} {rw:?}: {:?}",
                    r.first_verify_error
                );
                assert!(r.verified_blocks > 0, "{e:?} {rw:?}");
                assert!(r.syscalls > 0, "{e:?}");
            }
        }
    }

    #[test]
    fn fdatasync_every_write_each_engine() {
        for e in engines() {
            let d = tempfile::tempdir().unwrap();
            let mut s = spec(d.path(), e.clone(), Rw::Write);
            s.size = 256 << 10;
            s.fdatasync = 1;
            let r = run_jobs(&s, Duration::from_millis(10), &mut |_| true).unwrap();
            assert_eq!(r.write.ios, 64, "{e:?}");
            assert_eq!(r.sync.n, 64, "{e:?}: one fdatasync per write");
            assert_eq!(r.verify_errors, 0);
        }
    }

    #[test]
    fn time_based_with_ramp() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec(d.path(), EngineKind::Threads, Rw::RandRead);
        s.time_based = true;
        s.runtime = Some(Duration::from_millis(200));
        s.ramp_time = Duration::from_millis(100);
        s.numjobs = 2;
        let mut calls = 0;
        let r = run_jobs(&s, Duration::from_millis(20), &mut |_| {
            calls += 1;
            true
        })
        .unwrap();
        assert!(r.read.ios > 0 && calls > 0);
        assert!(r.elapsed_ns >= 150_000_000);
    }

    #[test]
    fn fio_buckets() {
        let b = |n| bucket(n, &BATCH_LIMITS);
        assert_eq!([b(0), b(1), b(4), b(5), b(64), b(65)], [0, 1, 1, 2, 5, 6]);
        let d = |n| bucket(n, &DEPTH_LIMITS);
        assert_eq!(
            [d(1), d(2), d(4), d(16), d(63), d(64), d(128)],
            [0, 1, 2, 4, 5, 6, 6]
        );
    }

    #[test]
    fn bad_specs() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec(d.path(), EngineKind::Psync, Rw::Read);
        s.filename = d.path().join("missing-dir").join("f");
        let e = run_jobs(&s, Duration::from_millis(10), &mut |_| true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let mut s = spec(d.path(), EngineKind::Psync, Rw::Read);
        s.bs = 0;
        assert!(run_jobs(&s, Duration::from_millis(10), &mut |_| true).is_err());
    }
}
