//! I/O engines for the benchmark job loop: three generations of Linux async I/O behind one
//! trait. Each engine owns nothing but its kernel handles; the job loop owns the file and
//! the buffers (one page-aligned block of `depth` slots of `bs` bytes) and guarantees a
//! slot's buffer is not reused until its completion has been reaped.

pub mod libaio;
pub mod posix_aio;
pub mod psync;
pub mod threads;
pub mod uring;

use std::io;

/// What one I/O does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    /// fdatasync (or fsync when `full`).
    Sync {
        full: bool,
    },
}

/// One request. `slot` indexes the job's buffer slots and comes back in the completion.
#[derive(Clone, Copy, Debug)]
pub struct Io {
    pub slot: u32,
    pub kind: IoKind,
    pub offset: u64,
    pub len: u32,
    /// io_uring: link an fdatasync (fsync when `full`) after this write; the sync's
    /// completion comes back as a separate `Cqe` with `kind: Sync`.
    pub link_sync: Option<bool>,
}

/// One completion.
#[derive(Clone, Copy, Debug)]
pub struct Cqe {
    pub slot: u32,
    pub kind: IoKind,
    /// Bytes transferred, or -errno.
    pub res: i64,
}

/// What every engine can do. `queue` + `submit` may be one step for synchronous engines.
pub trait Engine: Send {
    fn name(&self) -> &'static str;
    /// Accept a request; it starts no later than the next `submit`.
    fn queue(&mut self, io: Io) -> io::Result<()>;
    /// Start what is queued. Returns how many requests were started.
    fn submit(&mut self) -> io::Result<usize>;
    /// Wait until at least `min` completions are available (0: don't block), append them.
    fn reap(&mut self, min: usize, out: &mut Vec<Cqe>) -> io::Result<()>;
    /// System calls this engine made (submission, completion, I/O syscalls).
    fn syscalls(&self) -> u64;
    /// True when a sync can be queued like any other I/O (else the job loop calls
    /// fdatasync itself).
    fn async_sync(&self) -> bool;
    /// Whether this engine links syncs after writes itself (`Io::link_sync`).
    fn links_sync(&self) -> bool {
        false
    }
    /// Whether `reap(min > 0)` also submits what is queued (one system call for both).
    fn waits_submit(&self) -> bool {
        false
    }
    /// How the engine was set up, when that depends on what the kernel accepted (the
    /// io_uring setup flags after fio's fallbacks), for the job's JSON.
    fn setup(&self) -> Option<String> {
        None
    }
    /// A one-line note for the user (e.g. libaio on buffered I/O is synchronous).
    fn warning(&self) -> Option<String> {
        None
    }
}

/// Options of the io_uring engine (fio's names).
#[derive(Clone, Debug, Default)]
pub struct UringOpts {
    pub sqthread_poll: bool,
    pub sqthread_poll_cpu: Option<u32>,
    pub registerfiles: bool,
    pub fixedbufs: bool,
    pub hipri: bool,
    pub nonvectored: bool,
    pub single_issuer: bool,
    pub defer_taskrun: bool,
    pub coop_taskrun: bool,
    /// Use COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN when the kernel has them (what
    /// fio does, falling back the way fio does), unless the task-run flags were chosen
    /// explicitly.
    pub fio_defaults: bool,
}

#[derive(Clone, Debug)]
pub enum EngineKind {
    Psync,
    Threads,
    PosixAio,
    Libaio,
    Uring(UringOpts),
}

impl EngineKind {
    pub fn name(&self) -> &'static str {
        match self {
            EngineKind::Psync => "psync",
            EngineKind::Threads => "threads",
            EngineKind::PosixAio => "posixaio",
            EngineKind::Libaio => "libaio",
            EngineKind::Uring(_) => "io_uring",
        }
    }
}

/// The job's buffer memory, shared read-only as a base pointer.
#[derive(Clone, Copy)]
pub struct Buffers {
    pub base: *mut u8,
    pub bs: usize,
    pub slots: usize,
}

// SAFETY: the pointer is to memory the job owns for the whole run; engines only pass
// slot addresses to the kernel or to their worker threads, one owner per slot at a time.
unsafe impl Send for Buffers {}
// SAFETY: see above.
unsafe impl Sync for Buffers {}

impl Buffers {
    pub fn slot(&self, i: u32) -> *mut u8 {
        assert!((i as usize) < self.slots);
        // SAFETY: i < slots, so the offset stays inside the job's mapping.
        unsafe { self.base.add(i as usize * self.bs) }
    }
}

/// Build an engine for `fd` with `depth` slots.
pub fn build(
    kind: &EngineKind,
    fd: i32,
    bufs: Buffers,
    depth: u32,
    direct: bool,
) -> io::Result<Box<dyn Engine>> {
    Ok(match kind {
        EngineKind::Psync => Box::new(psync::Psync::new(fd, bufs)),
        EngineKind::Threads => Box::new(threads::Threads::new(fd, bufs, depth)?),
        EngineKind::PosixAio => Box::new(posix_aio::PosixAio::new(fd, bufs, depth)),
        EngineKind::Libaio => Box::new(libaio::Libaio::new(fd, bufs, depth, direct)?),
        EngineKind::Uring(o) => Box::new(uring::Uring::new(fd, bufs, depth, o)?),
    })
}

/// pread/pwrite/fdatasync done synchronously; returns bytes or -errno.
pub fn sync_io(fd: i32, bufs: &Buffers, io: &Io) -> i64 {
    // SAFETY: slot memory is bs bytes, io.len <= bs (the job loop guarantees it), and the
    // slot belongs to this request until it completes.
    let r = unsafe {
        match io.kind {
            IoKind::Read => libc::pread(
                fd,
                bufs.slot(io.slot).cast(),
                io.len as usize,
                io.offset as i64,
            ) as i64,
            IoKind::Write => libc::pwrite(
                fd,
                bufs.slot(io.slot).cast(),
                io.len as usize,
                io.offset as i64,
            ) as i64,
            IoKind::Sync { full: true } => libc::fsync(fd) as i64,
            IoKind::Sync { full: false } => libc::fdatasync(fd) as i64,
        }
    };
    if r < 0 {
        -(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        r
    }
}
