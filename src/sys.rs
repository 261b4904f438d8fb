//! Process and kernel facts for `uringkit doctor` and the test suite.

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
