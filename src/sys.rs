//! Process and kernel facts for `uringkit doctor` and the test suite.

use crate::int;
use pyo3::prelude::*;
use uringkit_core::op::{statx_fd, STATX_DIOALIGN};

/// Running kernel release string (`uname -r`).
#[pyfunction]
fn kernel_release() -> String {
    uringkit_core::sys::kernel_release()
}

/// RLIMIT_MEMLOCK soft limit in bytes, or None when unlimited.
#[pyfunction]
fn memlock_limit() -> Option<u64> {
    uringkit_core::ring::setup::memlock_limit()
}

/// Seccomp mode of this process: 0 none, 1 strict, 2 filter (None if unknown).
#[pyfunction]
fn seccomp_mode() -> Option<u32> {
    uringkit_core::sys::seccomp::seccomp_mode()
}

/// Make io_uring_setup/enter/register fail with `errno` in this process and its children,
/// for good (a seccomp filter, as container runtimes install). For tests and rehearsals:
/// run it in a child process.
#[pyfunction]
#[pyo3(signature = (errno=libc::EPERM))]
fn block_io_uring(errno: i32) -> PyResult<()> {
    uringkit_core::sys::seccomp::block_syscalls(
        &uringkit_core::sys::seccomp::io_uring_syscalls(),
        errno,
    )
    .map_err(|e| crate::convert::io_error(e, "installing the seccomp filter"))
}

/// Same as block_io_uring, for arbitrary syscall numbers.
#[pyfunction]
#[pyo3(signature = (numbers, errno=libc::EPERM))]
fn block_syscalls(numbers: Vec<i64>, errno: i32) -> PyResult<()> {
    uringkit_core::sys::seccomp::block_syscalls(&numbers, errno)
        .map_err(|e| crate::convert::io_error(e, "installing the seccomp filter"))
}

/// O_DIRECT alignment of an open file from statx(STATX_DIOALIGN), as
/// (memory_alignment, offset_alignment), or None when the kernel/filesystem does not say
/// (0, 0 means O_DIRECT is unsupported on this file).
#[pyfunction]
fn dio_alignment(fd: i32) -> PyResult<Option<(u32, u32)>> {
    let st = statx_fd(fd, STATX_DIOALIGN).map_err(|e| crate::convert::io_error(e, "statx"))?;
    if st.stx_mask & STATX_DIOALIGN == 0 {
        return Ok(None);
    }
    Ok(Some((st.stx_dio_mem_align, st.stx_dio_offset_align)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kernel_release, m)?)?;
    m.add_function(wrap_pyfunction!(memlock_limit, m)?)?;
    m.add_function(wrap_pyfunction!(seccomp_mode, m)?)?;
    m.add_function(wrap_pyfunction!(block_io_uring, m)?)?;
    m.add_function(wrap_pyfunction!(block_syscalls, m)?)?;
    m.add_function(wrap_pyfunction!(dio_alignment, m)?)?;
    m.add_function(wrap_pyfunction!(libaio_check, m)?)?;
    m.add_function(wrap_pyfunction!(open_cached, m)?)?;
    m.add_function(wrap_pyfunction!(is_local_fs, m)?)?;
    m.add_function(wrap_pyfunction!(stat_cached, m)?)?;
    m.add_function(wrap_pyfunction!(pread_nowait, m)?)?;
    m.add_function(wrap_pyfunction!(pread_nowait_many, m)?)?;
    m.add_function(wrap_pyfunction!(read_cached_many, m)?)?;
    m.add_function(wrap_pyfunction!(read_helper_chunks, m)?)?;
    Ok(())
}

/// Whether Linux native AIO works here: 0 when io_setup/io_destroy succeed, else the errno.
#[pyfunction]
fn libaio_check() -> i32 {
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: io_setup writes an aio_context_t into `ctx`, which we own.
    let rc = unsafe { libc::syscall(libc::SYS_io_setup, 1 as libc::c_long, &mut ctx) };
    if rc != 0 {
        return std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
    }
    // SAFETY: ctx is the context io_setup just created.
    unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
    0
}

/// `OSError(errno, strerror, path)`, as `os.open`/`os.stat` raise it.
fn path_error(e: std::io::Error, path: &Bound<'_, PyAny>) -> PyErr {
    let code = e.raw_os_error().unwrap_or(libc::EIO);
    pyo3::exceptions::PyOSError::new_err((
        code,
        crate::convert::strerror(code),
        path.clone().unbind(),
    ))
}

/// Open `path` inline if that cannot block (path lookup from the dentry cache, the file
/// opened O_NONBLOCK — what io_uring tries inline itself; regular files and directories
/// only): the fd (>= 0); -1 when it would block, when `flags` create or truncate, or when
/// the kernel lacks openat2 with RESOLVE_CACHED (open it asynchronously); -2 for a FIFO
/// (its open waits for the other end: open it on a thread). Failures such as ENOENT
/// raise OSError.
#[pyfunction]
#[pyo3(signature = (path, flags, dir_fd=libc::AT_FDCWD))]
fn open_cached(path: &Bound<'_, PyAny>, flags: i32, dir_fd: i32) -> PyResult<i32> {
    use uringkit_core::sys::nowait::CachedOpen;
    let c = crate::convert::path_arg(path)?;
    match uringkit_core::sys::nowait::open_cached(dir_fd, &c, flags) {
        Ok(CachedOpen::Fd(fd)) => Ok(fd),
        Ok(CachedOpen::WouldBlock) => Ok(-1),
        Ok(CachedOpen::Fifo) => Ok(-2),
        Err(e) => Err(path_error(e, path)),
    }
}

/// Whether an open file lives on a local filesystem (ext2/3/4, xfs, btrfs, tmpfs): its
/// stat and close never wait for a server (NFS, FUSE, CIFS… may).
#[pyfunction]
fn is_local_fs(fd: i32) -> bool {
    uringkit_core::sys::nowait::is_local(fd)
}

/// stat `path` inline if that cannot block (dentry-cache lookup, local filesystem): the
/// 19 values of `os.stat_result` in its order on Linux (mode, ino, dev, nlink, uid, gid,
/// size, integer a/m/ctime, float a/m/ctime, a/m/ctime in ns, blksize, blocks, rdev) —
/// `os.stat_result(t)` makes the result — or None to stat it asynchronously. Failures
/// such as ENOENT raise OSError.
#[pyfunction]
#[pyo3(signature = (path, follow_symlinks=true, dir_fd=libc::AT_FDCWD))]
fn stat_cached<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    follow_symlinks: bool,
    #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
) -> PyResult<Option<Bound<'py, pyo3::types::PyTuple>>> {
    let c = crate::convert::path_arg(path)?;
    // STATX_BASIC_STATS: what os.stat reports
    match uringkit_core::sys::nowait::stat_cached(dir_fd, &c, follow_symlinks, 0x07ff) {
        Ok(Some(st)) => {
            let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
            let rdev = libc::makedev(st.stx_rdev_major, st.stx_rdev_minor);
            let (a, m, ct) = (st.stx_atime, st.stx_mtime, st.stx_ctime);
            let items: [Bound<'py, PyAny>; 19] = [
                (st.stx_mode as u32).into_pyobject(py)?.into_any(),
                st.stx_ino.into_pyobject(py)?.into_any(),
                dev.into_pyobject(py)?.into_any(),
                st.stx_nlink.into_pyobject(py)?.into_any(),
                st.stx_uid.into_pyobject(py)?.into_any(),
                st.stx_gid.into_pyobject(py)?.into_any(),
                st.stx_size.into_pyobject(py)?.into_any(),
                a.tv_sec.into_pyobject(py)?.into_any(),
                m.tv_sec.into_pyobject(py)?.into_any(),
                ct.tv_sec.into_pyobject(py)?.into_any(),
                a.as_f64().into_pyobject(py)?.into_any(),
                m.as_f64().into_pyobject(py)?.into_any(),
                ct.as_f64().into_pyobject(py)?.into_any(),
                a.as_ns().into_pyobject(py)?.into_any(),
                m.as_ns().into_pyobject(py)?.into_any(),
                ct.as_ns().into_pyobject(py)?.into_any(),
                st.stx_blksize.into_pyobject(py)?.into_any(),
                st.stx_blocks.into_pyobject(py)?.into_any(),
                rdev.into_pyobject(py)?.into_any(),
            ];
            Ok(Some(pyo3::types::PyTuple::new(py, items)?))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(path_error(e, path)),
    }
}

const RWF_NOWAIT: i32 = 0x8;

fn preadv2_nowait(fd: i32, buf: *mut u8, len: usize, offset: i64) -> isize {
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: iov describes `len` writable bytes at `buf`, owned by the caller for the call.
    unsafe { libc::preadv2(fd, &iov, 1, offset, RWF_NOWAIT) }
}

/// `preadv2(fd, n, offset, RWF_NOWAIT)`: the bytes if the page cache has them (possibly
/// fewer at end of file), or None when the read would have to wait for the disk. The
/// fast path of `uringkit.aio`: a page-cache hit needs no ring round trip. Never use it on
/// O_DIRECT files (there the read is done synchronously). `offset=-1` reads at the file
/// position.
#[pyfunction]
fn pread_nowait<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = int::i32_fd)] fd: i32,
    #[pyo3(from_py_with = int::usize_n)] n: usize,
    #[pyo3(from_py_with = int::i64_offset)] offset: i64,
) -> PyResult<Option<Bound<'py, pyo3::types::PyBytes>>> {
    let mut got: isize = 0;
    let b = pyo3::types::PyBytes::new_with(py, n, |buf: &mut [u8]| {
        got = preadv2_nowait(fd, buf.as_mut_ptr(), n, offset);
        Ok(())
    })?;
    if got < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(None),
            Some(code) => Err(crate::convert::os_error(
                code,
                crate::convert::strerror(code),
            )),
            None => Ok(None),
        };
    }
    let got = got as usize;
    if got == n {
        Ok(Some(b))
    } else if got == 0 && n > 0 {
        // 0 means end of file: RWF_NOWAIT answers EAGAIN, not 0, for uncached data.
        Ok(Some(pyo3::types::PyBytes::new(py, b"")))
    } else {
        Ok(Some(pyo3::types::PyBytes::new(py, &b.as_bytes()[..got])))
    }
}

/// RWF_NOWAIT reads of many ranges into consecutive parts of `buf` (range i at the sum of
/// the lengths before it). Returns each result: bytes read (0 = end of file), or -EAGAIN
/// for data not in the page cache (read those through the ring).
#[pyfunction]
fn pread_nowait_many(
    #[pyo3(from_py_with = int::i32_fd)] fd: i32,
    buf: &Bound<'_, PyAny>,
    ranges: Vec<(i64, usize)>,
) -> PyResult<Vec<i64>> {
    let pb = crate::convert::writable_buffer(buf, "buf")?;
    let total: usize = ranges.iter().map(|r| r.1).sum();
    if pb.len_bytes() < total {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "buf holds {} bytes; the ranges need {total}",
            pb.len_bytes()
        )));
    }
    let base = pb.buf_ptr() as *mut u8;
    let mut at = 0usize;
    let mut out = Vec::with_capacity(ranges.len());
    for (off, len) in ranges {
        // SAFETY: at + len <= total <= the buffer's length (checked above).
        let r = preadv2_nowait(fd, unsafe { base.add(at) }, len, off);
        out.push(if r < 0 {
            -(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO) as i64)
        } else {
            r as i64
        });
        at += len;
    }
    Ok(out)
}

/// How many chunks of shared read batches (`Ring.read_batch`, `aio.read_many`) the read
/// helper thread has read in this process: 0 when it never took part.
#[pyfunction]
fn read_helper_chunks() -> u64 {
    uringkit_core::sys::helper::chunks_read()
}

/// Read every `(offset, n)` range of `fd` that the page cache holds, in one system call
/// (a batch of io_uring READs flagged RWF_NOWAIT on a per-thread ring, each straight
/// into its own new bytes object); `preadv2(RWF_NOWAIT)` per range where io_uring is
/// unavailable. Each result is the bytes (fewer than n at end of file — or where the
/// cache held only part) or a negative errno (-EAGAIN: not cached, read it the slow way).
/// Returns `(results, unsettled)`: `unsettled` counts the results that are an errno or
/// a non-empty short read (the caller looks at those; when it is 0 every range came back
/// whole or empty, with no per-range check in Python).
#[pyfunction]
fn read_cached_many<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = int::i32_fd)] fd: i32,
    ranges: Vec<(i64, i64)>,
) -> PyResult<(Bound<'py, pyo3::types::PyList>, usize)> {
    use pyo3::types::PyBytes;
    let mut objs: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(ranges.len());
    let mut reqs: Vec<(*mut u8, usize, u64)> = Vec::with_capacity(ranges.len());
    for (i, &(off, n)) in ranges.iter().enumerate() {
        if off < 0 || n < 0 {
            let (what, v) = if off < 0 {
                ("offset", off)
            } else {
                ("length", n)
            };
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{what} must be >= 0 (got {v}, range {i})"
            )));
        }
        // (n >= 0, and an i64 fits an isize on the 64-bit targets io_uring exists on)
        let n_ssize = n as isize;
        let n = n as usize;
        // SAFETY: PyBytes_FromStringAndSize(NULL, n) returns a new, uninitialised bytes
        // object of n bytes (or NULL with an exception set); nobody else sees it yet.
        let obj = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), n_ssize),
            )?
        }
        .cast_into::<PyBytes>()
        .map_err(PyErr::from)?;
        // SAFETY: the object is a fresh bytes object we own: its buffer is ours to fill
        // before anything else can observe it.
        let p = unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) } as *mut u8;
        reqs.push((p, n, off as u64));
        objs.push(obj);
    }
    // SAFETY: each buffer belongs to a bytes object held in `objs` until after the call.
    // (large batches are shared with a helper thread: a second core copying pages)
    let res = unsafe { uringkit_core::sys::helper::read_many_shared(fd, &reqs) };
    let out = pyo3::types::PyList::empty(py);
    let mut unsettled = 0;
    for ((obj, r), &(_, n, _)) in objs.into_iter().zip(res).zip(&reqs) {
        if r < 0 {
            unsettled += 1;
            out.append(r)?;
        } else if r as usize == n {
            out.append(obj)?;
        } else {
            unsettled += usize::from(r > 0);
            out.append(PyBytes::new(py, &obj.as_bytes()[..r as usize]))?;
        }
    }
    Ok((out, unsettled))
}
