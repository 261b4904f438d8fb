//! What can be done inline, without ever blocking, before falling back to an
//! asynchronous path — the same bet io_uring makes with its inline attempt:
//!
//! - many page-cache reads in one system call: a batch of io_uring READs flagged
//!   RWF_NOWAIT on a small per-thread ring. Data in the page cache is copied during the
//!   submit itself (the kernel completes those reads inline); a read that would have to
//!   wait for the disk fails at once with EAGAIN instead of blocking, so the caller can
//!   send it down its asynchronous path. Where io_uring is unavailable, one
//!   `preadv2(RWF_NOWAIT)` per read does the same job;
//! - opening a file whose path is in the dentry cache (`open_cached`), and stat'ing one
//!   on a local filesystem (`stat_cached`): `openat2` with `RESOLVE_CACHED`.

use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;

/// Reads per submission (the ring's size).
const DEPTH: usize = 64;

thread_local! {
    /// None: not tried yet; Some(None): io_uring unavailable on this thread.
    static RING: RefCell<Option<Option<IoUring>>> = const { RefCell::new(None) };
}

fn preadv2_nowait(fd: i32, buf: *mut u8, len: usize, off: u64) -> i64 {
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: iov describes `len` writable bytes the caller vouches for.
    let r = unsafe { libc::preadv2(fd, &iov, 1, off as i64, libc::RWF_NOWAIT) };
    if r < 0 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        r as i64
    }
}

/// Read each `(buf, len, offset)` of `fd` without waiting for the disk; returns, in
/// order, the bytes read (fewer at end of file) or -errno (-EAGAIN: not cached).
///
/// # Safety
/// Every `buf` must be valid for `len` bytes of writes and not used by anything else
/// until this returns (all reads have completed by then).
pub unsafe fn read_many(fd: i32, reqs: &[(*mut u8, usize, u64)]) -> Vec<i64> {
    let mut out = Vec::with_capacity(reqs.len());
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ring = slot.get_or_insert_with(|| IoUring::new(DEPTH as u32).ok());
        let mut broken = false;
        match ring {
            Some(ring) => {
                for chunk in reqs.chunks(DEPTH) {
                    if broken || submit_chunk(ring, fd, chunk, &mut out).is_err() {
                        // the kernel took nothing (ENOMEM, EAGAIN): do it plainly, and
                        // drop this ring below — its queued entries are never submitted
                        broken = true;
                        for &(b, n, o) in chunk {
                            out.push(preadv2_nowait(fd, b, n, o));
                        }
                    }
                }
            }
            None => {
                for &(b, n, o) in reqs {
                    out.push(preadv2_nowait(fd, b, n, o));
                }
            }
        }
        if broken {
            *slot = None; // a fresh ring next time
        }
    });
    out
}

fn submit_chunk(
    ring: &mut IoUring,
    fd: i32,
    chunk: &[(*mut u8, usize, u64)],
    out: &mut Vec<i64>,
) -> std::io::Result<()> {
    let base = out.len();
    for (i, &(b, n, o)) in chunk.iter().enumerate() {
        let e = opcode::Read::new(types::Fd(fd), b, n.min(u32::MAX as usize) as u32)
            .offset(o)
            .rw_flags(libc::RWF_NOWAIT)
            .build()
            .user_data(i as u64);
        // SAFETY: the caller guarantees each buffer for the call's duration, and we do
        // not return before every entry's completion has been reaped below.
        unsafe { ring.submission().push(&e) }.map_err(std::io::Error::other)?;
    }
    out.resize(base + chunk.len(), i64::MIN);
    let mut seen = 0;
    let mut submitted = false;
    while seen < chunk.len() {
        let r = if submitted {
            ring.submit_and_wait(1)
        } else {
            ring.submit_and_wait(chunk.len())
        };
        match r {
            Ok(_) => submitted = true,
            // EINTR comes from the wait: the entries were submitted before it
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => submitted = true,
            Err(e) if !submitted => {
                out.truncate(base);
                return Err(e);
            }
            Err(_) => {}
        }
        for c in ring.completion() {
            out[base + c.user_data() as usize] = c.result() as i64;
            seen += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    /// A temporary file of `n` bytes (`i % m` at offset i): its directory (keep it
    /// alive), the open file, and the contents.
    pub fn data_file(n: u32, m: u32) -> (tempfile::TempDir, std::fs::File, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..n).map(|i| (i % m) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        (dir, f, data)
    }

    /// The reader under test: `read_many` or one built on it.
    pub type Reader = unsafe fn(i32, &[(*mut u8, usize, u64)]) -> Vec<i64>;

    /// Read `len` bytes at each of `offs` of `fd` (whose contents are `data`) with
    /// `read`, into fresh buffers, and check every result (short at the end of data).
    pub fn check_reads(read: Reader, fd: i32, data: &[u8], offs: &[u64], len: usize) {
        let mut bufs = vec![vec![0u8; len]; offs.len()];
        let reqs: Vec<(*mut u8, usize, u64)> = bufs
            .iter_mut()
            .zip(offs)
            .map(|(b, &o)| (b.as_mut_ptr(), len, o))
            .collect();
        // SAFETY: every buffer lives in `bufs` until after the call.
        let res = unsafe { read(fd, &reqs) };
        assert_eq!(res.len(), offs.len());
        for ((r, b), &o) in res.iter().zip(&bufs).zip(offs) {
            let o = (o as usize).min(data.len());
            let want = &data[o..(o + len).min(data.len())];
            assert_eq!(*r, want.len() as i64, "offset {o}");
            assert_eq!(&b[..want.len()], want, "offset {o}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cached_reads_and_eof() {
        let (_dir, f, data) = super::testing::data_file(20_000, 251);
        use std::os::fd::AsRawFd;
        let offs: Vec<u64> = (0..100u64).map(|i| (i * 997) % 20_000).collect();
        super::testing::check_reads(super::read_many, f.as_raw_fd(), &data, &offs, 4096);
    }
}

/// What `open_cached` did.
#[derive(Debug, PartialEq, Eq)]
pub enum CachedOpen {
    /// Opened inline: the descriptor (in blocking mode unless `flags` asked otherwise).
    Fd(i32),
    /// Not attempted or it would block: open it asynchronously.
    WouldBlock,
    /// A FIFO: its open waits for the other end (io_uring's inline attempt would not,
    /// as it opens O_NONBLOCK), so open it where blocking is fine — a thread.
    Fifo,
}

fn openat2_cached(dirfd: i32, path: &std::ffi::CStr, flags: i32) -> Result<i32, i32> {
    // SAFETY: open_how is plain old data; all-zero is its "nothing asked" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_CACHED;
    // SAFETY: path is NUL-terminated and how is a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(fd as i32)
    }
}

/// Open `path` only if that cannot block, as io_uring tries inline before handing an
/// OPENAT to a worker: the lookup from the dentry cache alone (`openat2` with
/// `RESOLVE_CACHED`) and the file opened `O_NONBLOCK` (cleared again afterwards unless
/// `flags` asked for it). A first `O_PATH` open (no side effects) checks the type: only
/// regular files and directories are opened here. Creating or truncating opens are never
/// tried, nor is anything where the kernel lacks openat2 (before 5.6; RESOLVE_CACHED
/// since 5.12). Errors such as ENOENT (from a cached negative lookup) are final.
pub fn open_cached(dirfd: i32, path: &std::ffi::CStr, flags: i32) -> std::io::Result<CachedOpen> {
    if flags & (libc::O_CREAT | libc::O_TRUNC | libc::O_TMPFILE) != 0 || !OPENAT2.with(|o| o.get())
    {
        return Ok(CachedOpen::WouldBlock);
    }
    let blocked = |code: i32| -> std::io::Result<CachedOpen> {
        match code {
            libc::EAGAIN => Ok(CachedOpen::WouldBlock),
            libc::ENOSYS | libc::E2BIG => {
                OPENAT2.with(|o| o.set(false));
                Ok(CachedOpen::WouldBlock)
            }
            // EINVAL: an unknown resolve flag (kernel < 5.12) or bad flags; let the
            // regular open decide which
            libc::EINVAL => Ok(CachedOpen::WouldBlock),
            _ => Err(std::io::Error::from_raw_os_error(code)),
        }
    };
    let probe = libc::O_PATH | libc::O_CLOEXEC | (flags & libc::O_NOFOLLOW);
    let pfd = match openat2_cached(dirfd, path, probe) {
        Ok(fd) => fd,
        Err(code) => return blocked(code),
    };
    // SAFETY: stat is plain old data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: pfd is the O_PATH descriptor just opened; st is ours.
    let rc = unsafe { libc::fstat(pfd, &mut st) };
    // SAFETY: closing our own probe descriptor.
    unsafe { libc::close(pfd) };
    if rc != 0 {
        return Ok(CachedOpen::WouldBlock);
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG | libc::S_IFDIR => {}
        libc::S_IFIFO => return Ok(CachedOpen::Fifo),
        _ => return Ok(CachedOpen::WouldBlock),
    }
    let fd = match openat2_cached(dirfd, path, flags | libc::O_NONBLOCK) {
        Ok(fd) => fd,
        Err(code) => return blocked(code),
    };
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: fd is the descriptor openat2 just returned to us.
        let cur = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above; clearing O_NONBLOCK on our own fresh descriptor.
        if cur < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, cur & !libc::O_NONBLOCK) } < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing the descriptor we opened and will not hand out.
            unsafe { libc::close(fd) };
            return Err(e);
        }
    }
    Ok(CachedOpen::Fd(fd))
}

/// Filesystems that answer stat from memory (no server to ask): ext2/3/4, xfs, btrfs,
/// tmpfs. Elsewhere (NFS, FUSE, CIFS…) a stat may wait for the network.
pub const LOCAL_FS: [i64; 4] = [0xEF53, 0x58465342, 0x9123683E, 0x01021994];

/// `stat` of `path` only if that cannot block: the lookup from the dentry cache alone
/// (an `O_PATH` `openat2` with `RESOLVE_CACHED`, no side effects), then `statx` of that
/// descriptor — answered from memory on local filesystems (`LOCAL_FS`; the answer on
/// others could need a round trip to a server, so those return `Ok(None)`).
/// `Ok(None)`: stat it asynchronously. Errors such as ENOENT are final.
pub fn stat_cached(
    dirfd: i32,
    path: &std::ffi::CStr,
    follow: bool,
    mask: u32,
) -> std::io::Result<Option<crate::op::KStatx>> {
    if !OPENAT2.with(|o| o.get()) {
        return Ok(None);
    }
    let flags = libc::O_PATH | libc::O_CLOEXEC | if follow { 0 } else { libc::O_NOFOLLOW };
    let fd = match openat2_cached(dirfd, path, flags) {
        Ok(fd) => fd,
        Err(libc::EAGAIN) | Err(libc::EINVAL) => return Ok(None),
        Err(libc::ENOSYS) | Err(libc::E2BIG) => {
            OPENAT2.with(|o| o.set(false));
            return Ok(None);
        }
        Err(code) => return Err(std::io::Error::from_raw_os_error(code)),
    };
    let out = (|| {
        // AT_STATX_DONT_SYNC: never ask a server; the answer is only used where the
        // filesystem is local, where it is the same answer.
        let mut st = crate::op::KStatx::default();
        // SAFETY: "" with AT_EMPTY_PATH makes the kernel use fd itself; st is a statx
        // buffer we own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_statx,
                fd,
                c"".as_ptr(),
                libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
                mask,
                &mut st as *mut crate::op::KStatx,
            )
        };
        if rc < 0 {
            return Ok(None);
        }
        Ok(is_local(fd).then_some(st))
    })();
    // SAFETY: closing our own O_PATH descriptor.
    unsafe { libc::close(fd) };
    out
}

/// Whether an open file lives on a local filesystem (`LOCAL_FS`): its stat and close
/// never wait for a server. (One fstatfs each time: a cache by device number could go
/// stale, as anonymous device numbers are reused after an unmount.)
pub fn is_local(fd: i32) -> bool {
    fs_magic(fd).map(|m| LOCAL_FS.contains(&m)).unwrap_or(false)
}

/// The filesystem magic number (`statfs.f_type`) of an open file, e.g. 0xEF53 for ext4.
pub fn fs_magic(fd: i32) -> std::io::Result<i64> {
    // SAFETY: statfs is plain old data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid statfs we own.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

thread_local! {
    /// Whether openat2 exists here (cleared on the first ENOSYS).
    static OPENAT2: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

#[cfg(test)]
mod open_tests {
    use super::{open_cached, CachedOpen};
    use std::ffi::CString;

    #[test]
    fn cached_open_of_an_existing_file() {
        let dir = std::env::temp_dir().join(format!("uk-open-cached-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, b"hi").unwrap();
        let c = CString::new(p.to_str().unwrap()).unwrap();
        // the dentry is hot (just created): opened inline, blocking mode restored
        let CachedOpen::Fd(fd) = open_cached(libc::AT_FDCWD, &c, libc::O_RDONLY).unwrap() else {
            panic!("a just-created file is in the dentry cache");
        };
        // SAFETY: fd is ours.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        assert_eq!(fl & libc::O_NONBLOCK, 0);
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        // creating opens are never attempted inline
        assert_eq!(
            open_cached(libc::AT_FDCWD, &c, libc::O_RDWR | libc::O_CREAT).unwrap(),
            CachedOpen::WouldBlock
        );
        // a FIFO is reported, not opened (its open would not wait for the writer)
        let fifo = CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: fifo is a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(
            open_cached(libc::AT_FDCWD, &fifo, libc::O_RDONLY).unwrap(),
            CachedOpen::Fifo
        );
        // stat from the cache: the same answer as stat(2)
        let st = super::stat_cached(libc::AT_FDCWD, &c, true, 0x0fff)
            .unwrap()
            .expect("a hot local file");
        assert_eq!(st.stx_size, 2);
        // a missing file the dentry cache knows about (a negative dentry, left by the
        // failed lookup just before) is a final answer
        assert!(std::fs::metadata(dir.join("nope")).is_err());
        let missing = CString::new(dir.join("nope").to_str().unwrap()).unwrap();
        let e = open_cached(libc::AT_FDCWD, &missing, libc::O_RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
