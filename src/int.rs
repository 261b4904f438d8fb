//! Integer arguments whose errors name the argument and its range.
//!
//! PyO3 puts an argument's name only into `TypeError`s; an out-of-range int comes out as
//! a bare `OverflowError("can't convert negative int to unsigned")`. Each function here
//! extracts one argument (`#[pyo3(from_py_with = int::u64_user_data)]`) and turns an
//! overflow into `OverflowError("user_data must be between 0 and 2**64 - 1 (got -1)")`.

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;

use uringkit_core::text::int_bound as bound;

/// The error for argument `name`: out of range (`range`: "between 0 and 2**64 - 1"), or
/// not an int at all.
fn named(obj: &Bound<'_, PyAny>, name: &str, range: &str, e: PyErr) -> PyErr {
    let py = obj.py();
    if e.is_instance_of::<PyOverflowError>(py) {
        let got = obj.str().map(|s| s.to_string()).unwrap_or_default();
        PyOverflowError::new_err(format!("{name} must be {range} (got {got})"))
    } else if e.is_instance_of::<PyTypeError>(py) {
        let ty = crate::convert::type_name(obj);
        PyTypeError::new_err(format!("{name} must be an int, not {ty}"))
    } else {
        e
    }
}

fn between(lo: i128, hi: i128) -> String {
    format!("between {} and {}", bound(lo), bound(hi))
}

/// `fn_name => "python_name": type` (the range in the message is the type's), or
/// `... = "range text"` where only part of the type's range is valid.
macro_rules! int_args {
    ($($f:ident => $name:literal : $t:ty $(= $range:literal)?),* $(,)?) => {$(
        pub fn $f(obj: &Bound<'_, PyAny>) -> PyResult<$t> {
            obj.extract::<$t>().map_err(|e| {
                #[allow(unused_mut, unused_assignments)]
                let mut range = between(<$t>::MIN as i128, <$t>::MAX as i128);
                $(range = $range.to_string();)?
                named(obj, $name, &range, e)
            })
        }
    )*};
}

macro_rules! opt_int_args {
    ($($f:ident => $name:literal : $t:ty),* $(,)?) => {$(
        pub fn $f(obj: &Bound<'_, PyAny>) -> PyResult<Option<$t>> {
            if obj.is_none() {
                return Ok(None);
            }
            obj.extract::<$t>()
                .map(Some)
                .map_err(|e| named(obj, $name, &between(<$t>::MIN as i128, <$t>::MAX as i128), e))
        }
    )*};
}

int_args! {
    u64_batch_ms => "batch_ms": u64,
    u32_bounded => "bounded": u32,
    u16_personality => "personality": u16,
    u32_unbounded => "unbounded": u32,
    u32_busy_poll_us => "busy_poll_us": u32,
    u64_batch_bytes => "batch_bytes": u64,
    u64_segment_size => "segment_size": u64,
    i32_fd => "fd": i32,
    u64_offset => "offset": u64,
    u64_user_data => "user_data": u64,
    i64_entries => "entries": i64 = "between 1 and 32768",
    u32_sq_thread_idle_ms => "sq_thread_idle_ms": u32,
    usize_min_complete => "min_complete": usize,
    usize_nbytes => "nbytes": usize,
    i64_offset => "offset": i64 = "between 0 and 2**63 - 1, or -1 for the current file position",
    usize_early => "early": usize,
    i32_rw_flags => "rw_flags": i32,
    u64_length => "length": u64,
    i32_mode => "mode": i32,
    i32_flags => "flags": i32,
    u32_mode => "mode": u32,
    i32_dir_fd => "dir_fd": i32,
    u32_mask => "mask": u32,
    i32_old_dir_fd => "old_dir_fd": i32,
    i32_new_dir_fd => "new_dir_fd": i32,
    u32_flags => "flags": u32,
    i64_off_in => "off_in": i64,
    i64_off_out => "off_out": i64,
    u32_nbytes => "nbytes": u32,
    i32_how => "how": i32,
    i32_domain => "domain": i32,
    i32_type_ => "type_": i32,
    i32_protocol => "protocol": i32,
    u32_count => "count": u32,
    usize_size => "size": usize,
    usize_count => "count": usize,
    u16_group_id => "group_id": u16,
    u16_count => "count": u16,
    usize_n => "n": usize,
    u32_index => "index": u32,
    u16_buffer_id => "buffer_id": u16,
    u32_offset => "offset": u32,
    u32_length => "length": u32 = "between 0 and 2**32 - 1 (0: to the end of the file)",
    i64_length => "length": i64 = "between 0 and 2**63 - 1 (0: to the end of the file)",
    i32_advice => "advice": i32,
    i32_backlog => "backlog": i32,
    u64_target => "target": u64,
    u64_resolve => "resolve": u64,
    u64_data => "data": u64,
    u32_idtype => "idtype": u32,
    u32_id => "id": u32,
    i32_options => "options": i32,
    u64_val => "val": u64,
    u64_count => "count": u64,
    u64_mask => "mask": u64,
    u32_futex_flags => "futex_flags": u32,
    i32_op => "op": i32,
    u32_events => "events": u32,
    u32_maxevents => "maxevents": u32,
}

opt_int_args! {
    opt_usize_nbytes => "nbytes": usize,
    opt_usize_length => "length": usize,
    opt_u64_data => "data": u64,
    opt_u32_sq_thread_cpu => "sq_thread_cpu": u32,
    opt_i64_cq_entries => "cq_entries": i64,
    opt_u32_fixed_slot => "fixed_slot": u32,
    opt_u64_target => "target": u64,
    opt_usize_max => "max": usize,
    opt_u32_mode => "mode": u32,
}
