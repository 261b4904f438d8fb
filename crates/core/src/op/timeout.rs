//! Timeouts: standalone (with an optional completion count) and linked.

use io_uring::{opcode, squeue::Entry, types};

pub fn timespec(seconds: f64) -> types::Timespec {
    let secs = seconds.max(0.0);
    let whole = secs.trunc();
    types::Timespec::new()
        .sec(whole as u64)
        .nsec(((secs - whole) * 1e9) as u32)
}

/// Fires with -ETIME after the duration, or with 0 once `count` other completions arrived.
pub fn timeout(ts: *const types::Timespec, count: u32, absolute: bool) -> Entry {
    let flags = if absolute {
        types::TimeoutFlags::ABS
    } else {
        types::TimeoutFlags::empty()
    };
    opcode::Timeout::new(ts).count(count).flags(flags).build()
}

/// Cancels the previous (linked) SQE if it has not completed in time.
pub fn link_timeout(ts: *const types::Timespec) -> Entry {
    opcode::LinkTimeout::new(ts).build()
}

/// Remove the timeout whose (ring-internal) user_data is `target`: it completes with
/// -ECANCELED, this with 0 (or -ENOENT, -EALREADY).
pub fn timeout_remove(target: u64) -> Entry {
    opcode::TimeoutRemove::new(target).build()
}

/// Re-arm the timeout `target` to fire after `ts` (relative, or absolute with `absolute`).
pub fn timeout_update(target: u64, ts: *const types::Timespec, absolute: bool) -> Entry {
    let flags = if absolute {
        types::TimeoutFlags::ABS
    } else {
        types::TimeoutFlags::empty()
    };
    opcode::TimeoutUpdate::new(target, ts).flags(flags).build()
}
