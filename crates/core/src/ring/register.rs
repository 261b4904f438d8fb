//! Ring-wide registrations that decide what a ring may do and where its work runs:
//! restrictions (a sandboxed ring, `IORING_REGISTER_RESTRICTIONS` + `ENABLE_RINGS`), the
//! io-wq worker pool's size and CPU affinity (`IORING_REGISTER_IOWQ_MAX_WORKERS`,
//! `IORING_REGISTER_IOWQ_AFF`), and NAPI busy polling (`IORING_REGISTER_NAPI`).

use io_uring::register::Restriction;
use io_uring::types::Napi;
use io_uring::Submitter;
use std::io;

/// `io_uring_register` opcodes a restricted ring can be allowed, by the names liburing's
/// functions use (kernel ABI numbers). RESTRICTIONS and ENABLE_RINGS themselves are not
/// restrictable: they are how restrictions are set up.
pub const REGISTER_OPS: &[(&str, u8)] = &[
    ("register_buffers", 0),
    ("unregister_buffers", 1),
    ("register_files", 2),
    ("unregister_files", 3),
    ("register_eventfd", 4),
    ("unregister_eventfd", 5),
    ("register_files_update", 6),
    ("register_eventfd_async", 7),
    ("register_probe", 8),
    ("register_personality", 9),
    ("unregister_personality", 10),
    ("register_files2", 13),
    ("register_files_update2", 14),
    ("register_buffers2", 15),
    ("register_buffers_update", 16),
    ("register_iowq_aff", 17),
    ("unregister_iowq_aff", 18),
    ("register_iowq_max_workers", 19),
    ("register_ring_fds", 20),
    ("unregister_ring_fds", 21),
    ("register_pbuf_ring", 22),
    ("unregister_pbuf_ring", 23),
    ("register_sync_cancel", 24),
    ("register_file_alloc_range", 25),
    ("register_pbuf_status", 26),
    ("register_napi", 27),
    ("unregister_napi", 28),
];

/// SQE flags by name (`IOSQE_*`), for restrictions.
pub const SQE_FLAGS: &[(&str, u8)] = &[
    ("fixed_file", 1 << 0),
    ("drain", 1 << 1),
    ("link", 1 << 2),
    ("hardlink", 1 << 3),
    ("async", 1 << 4),
    ("buffer_select", 1 << 5),
    ("skip_success", 1 << 6),
];

/// Every SQE flag uringkit knows.
pub const ALL_SQE_FLAGS: u8 = 0x7f;

/// What a restricted ring may do. An SQE whose opcode is not in `ops`, or whose flags
/// leave `allowed | required` or lack one of `required`, completes with `-EACCES`; an
/// `io_uring_register` call not in `register_ops` fails with `EACCES`.
#[derive(Clone, Debug, Default)]
pub struct Restrictions {
    pub ops: Vec<u8>,
    pub register_ops: Vec<u8>,
    pub flags_allowed: u8,
    pub flags_required: u8,
}

/// Register `r` on a ring created disabled (`IORING_SETUP_R_DISABLED`); once per ring,
/// before [`enable`]. The kernel answers EBADFD on an enabled ring and EBUSY the second
/// time.
pub fn restrict(sub: &Submitter<'_>, r: &Restrictions) -> io::Result<()> {
    let mut v: Vec<Restriction> = r.ops.iter().map(|&op| Restriction::sqe_op(op)).collect();
    v.extend(
        r.register_ops
            .iter()
            .map(|&op| Restriction::register_op(op)),
    );
    v.push(Restriction::sqe_flags_allowed(r.flags_allowed));
    if r.flags_required != 0 {
        v.push(Restriction::sqe_flags_required(r.flags_required));
    }
    sub.register_restrictions(&mut v)
}

/// Start a ring created disabled: from here on it takes submissions (and its restrictions,
/// if any, are fixed).
pub fn enable(sub: &Submitter<'_>) -> io::Result<()> {
    sub.register_enable_rings()
}

/// Cap the io-wq worker threads this ring's work may use (`bounded`: regular-file and
/// block-device work; `unbounded`: the rest, such as sockets); 0 leaves a limit as it is.
/// Returns the limits that were in force before. The pool is the submitting task's, so
/// the caps cover every ring that task uses.
pub fn iowq_max_workers(
    sub: &Submitter<'_>,
    bounded: u32,
    unbounded: u32,
) -> io::Result<(u32, u32)> {
    let mut m = [bounded, unbounded];
    sub.register_iowq_max_workers(&mut m)?;
    Ok((m[0], m[1]))
}

/// Pin the ring's io-wq workers to `cpus`; `None` returns them to the task's affinity.
pub fn iowq_affinity(sub: &Submitter<'_>, cpus: Option<&[usize]>) -> io::Result<()> {
    let Some(cpus) = cpus else {
        return sub.unregister_iowq_aff();
    };
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: c < CPU_SETSIZE, the set's capacity.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    sub.register_iowq_aff(&set)
}

/// Busy-poll the NAPI contexts of this ring's sockets for up to `busy_poll_us` while
/// waiting for completions (`prefer_busy_poll`: also over interrupts), tracking them
/// dynamically. Kernel 6.9+.
pub fn napi(sub: &Submitter<'_>, busy_poll_us: u32, prefer_busy_poll: bool) -> io::Result<()> {
    let mut n = Napi::new()
        .set_busy_poll_timeout(busy_poll_us)
        .set_prefer_busy_poll(prefer_busy_poll);
    sub.register_napi(&mut n)
}

/// Stop NAPI busy polling.
pub fn napi_off(sub: &Submitter<'_>) -> io::Result<()> {
    let mut n = Napi::new();
    sub.unregister_napi(&mut n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_op_names_are_unique() {
        let mut names: Vec<_> = REGISTER_OPS.iter().map(|o| o.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTER_OPS.len());
        let all = SQE_FLAGS.iter().fold(0, |a, f| a | f.1);
        assert_eq!(all, ALL_SQE_FLAGS);
    }
}
