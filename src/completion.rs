//! `Completion`: one CQE as Python sees it.

use pyo3::prelude::*;
use uringkit_core::ring::probe::op_by_code;

const CQE_F_MORE: u32 = 1 << 1;
const CQE_F_SOCK_NONEMPTY: u32 = 1 << 2;
const CQE_F_NOTIF: u32 = 1 << 3;

/// One completion queue entry.
///
/// `res` is the kernel's result: bytes transferred, a new fd, 0, or a negative errno.
/// `more` is True when the op will complete again (multishot, or send_zc before its
/// notification); `notif` marks send_zc's notification that the buffer is free again.
/// `buffer_id` is the provided buffer the kernel picked (buffer selection).
/// `buffer` is the object the op read into or wrote from (kept alive until now);
/// `result` holds decoded output (statx: a dict; accept/recvmsg: the peer address).
#[pyclass(frozen, module = "uringkit._native")]
pub struct Completion {
    #[pyo3(get)]
    pub user_data: u64,
    #[pyo3(get)]
    pub res: i32,
    #[pyo3(get)]
    pub flags: u32,
    pub opcode: u8,
    #[pyo3(get)]
    pub buffer_id: Option<u16>,
    #[pyo3(get)]
    pub buffer: Option<Py<PyAny>>,
    #[pyo3(get)]
    pub result: Option<Py<PyAny>>,
    /// An explanation attached to an error (e.g. O_DIRECT alignment).
    #[pyo3(get)]
    pub message: Option<String>,
}

#[pymethods]
impl Completion {
    #[getter]
    fn more(&self) -> bool {
        self.flags & CQE_F_MORE != 0
    }
    #[getter]
    fn notif(&self) -> bool {
        self.flags & CQE_F_NOTIF != 0
    }
    #[getter]
    fn sock_nonempty(&self) -> bool {
        self.flags & CQE_F_SOCK_NONEMPTY != 0
    }
    /// True when `res >= 0`.
    #[getter]
    fn ok(&self) -> bool {
        self.res >= 0
    }
    /// The op's name ("read", "send_zc", …).
    #[getter]
    fn op(&self) -> &'static str {
        op_by_code(self.opcode).map(|o| o.name).unwrap_or("unknown")
    }
    /// The errno of a failed op, else None.
    #[getter]
    fn errno(&self) -> Option<i32> {
        (self.res < 0).then_some(-self.res)
    }

    /// Raise `OSError(errno, message)` if the op failed; return `res` otherwise.
    fn raise_for_error(&self) -> PyResult<i32> {
        if self.res >= 0 {
            return Ok(self.res);
        }
        let errno = -self.res;
        let msg = match &self.message {
            Some(m) => m.clone(),
            None => format!(
                "{} (user_data={}) failed: {}",
                self.op(),
                self.user_data,
                crate::convert::strerror(errno)
            ),
        };
        Err(crate::convert::os_error(errno, msg))
    }

    fn __repr__(&self) -> String {
        let mut s = format!(
            "Completion(op={}, user_data={}, res={}",
            self.op(),
            self.user_data,
            self.res
        );
        if self.res < 0 {
            s.push_str(&format!(" [{}]", crate::convert::strerror(-self.res)));
        }
        if self.flags != 0 {
            s.push_str(&format!(", flags={:#x}", self.flags));
        }
        if let Some(b) = self.buffer_id {
            s.push_str(&format!(", buffer_id={b}"));
        }
        s.push(')');
        s
    }
}
