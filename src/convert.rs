//! Conversions between Python values and the core's types, and error mapping.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use uringkit_core::op::{FdArg, SockAddr};

use crate::buffers::Fixed;

/// The name of `obj`'s type, for error messages ("not bytearray").
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// `OSError(errno, message)`; Python picks the subclass (PermissionError, …) from errno.
pub fn os_error(errno: i32, message: impl Into<String>) -> PyErr {
    PyOSError::new_err((errno, message.into()))
}

pub fn io_error(e: std::io::Error, context: &str) -> PyErr {
    match e.raw_os_error() {
        // io_uring_enter answers EBADFD only on a ring set up with R_DISABLED
        Some(libc::EBADFD) if context.starts_with("io_uring_enter") => os_error(
            libc::EBADFD,
            format!(
                "{context}: the ring was created with disabled=True and takes no \
                 submissions until Ring.enable()"
            ),
        ),
        Some(errno) => os_error(errno, format!("{context}: {}", strerror(errno))),
        // (a message of the core's own: its errno, if it had one, is kept beside it)
        None => match uringkit_core::text::errno_of(&e) {
            Some(errno) => os_error(errno, format!("{context}: {e}")),
            None => PyOSError::new_err(format!("{context}: {e}")),
        },
    }
}

pub fn strerror(errno: i32) -> String {
    uringkit_core::text::io_error(&std::io::Error::from_raw_os_error(errno))
}

/// An fd argument: an int, `Fixed(i)`, or any object with `fileno()`.
pub fn fd_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<FdArg> {
    if let Ok(f) = obj.cast::<Fixed>() {
        return Ok(FdArg::Fixed(f.get().index));
    }
    if let Ok(i) = obj.extract::<i32>() {
        if i < 0 {
            return Err(PyValueError::new_err(format!(
                "{what} must be a non-negative file descriptor (got {i})"
            )));
        }
        return Ok(FdArg::Raw(i));
    }
    if let Ok(m) = obj.getattr("fileno") {
        let i: i32 = m.call0()?.extract()?;
        return Ok(FdArg::Raw(i));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be an int file descriptor, Fixed(index) or an object with fileno(), not {}",
        obj.get_type().name()?
    )))
}

/// A buffer the kernel will read from (any contiguous buffer object).
pub fn read_only_buffer(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    let b = PyUntypedBuffer::get(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must support the buffer protocol (bytes, bytearray, memoryview, Buffer), not {}",
            type_name(obj)
        ))
    })?;
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} must be C-contiguous"
        )));
    }
    Ok(b)
}

/// A buffer the kernel will write into.
pub fn writable_buffer(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    let b = read_only_buffer(obj, what)?;
    if b.readonly() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be writable (bytearray, memoryview of one, Buffer, aligned_buffer); \
             {} is read-only",
            obj.get_type().name()?
        )));
    }
    Ok(b)
}

/// Length to transfer: `nbytes` if given (must fit), else the whole buffer.
pub fn io_len(buf_len: usize, nbytes: Option<usize>, what: &str) -> PyResult<u32> {
    let n = match nbytes {
        Some(n) if n > buf_len => {
            return Err(PyValueError::new_err(format!(
                "nbytes={n} is larger than {what} ({buf_len} bytes)"
            )))
        }
        Some(n) => n,
        None => buf_len,
    };
    u32::try_from(n).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} is {n} bytes; one op moves at most 4 GiB - 1 (split it, or use readv/writev)"
        ))
    })
}

/// -1 (or None) means the current file position.
pub fn offset_arg(offset: i64) -> PyResult<u64> {
    if offset == -1 {
        Ok(u64::MAX)
    } else if offset < 0 {
        Err(PyValueError::new_err(format!(
            "offset must be >= 0, or -1 for the current file position (got {offset})"
        )))
    } else {
        Ok(offset as u64)
    }
}

/// A filesystem path (str, bytes or os.PathLike) as a C string.
pub fn path_arg(obj: &Bound<'_, PyAny>) -> PyResult<CString> {
    let py = obj.py();
    let b = if let Ok(b) = obj.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else {
        let os = py.import("os")?;
        let enc = os.call_method1("fsencode", (obj,))?;
        enc.cast::<PyBytes>()?.as_bytes().to_vec()
    };
    CString::new(b).map_err(|_| PyValueError::new_err("path must not contain NUL bytes"))
}

/// A socket address: `(host, port)`, `(host, port, flowinfo, scope_id)`, or a str/bytes
/// AF_UNIX path (a leading NUL byte for the abstract namespace).
pub fn sockaddr_arg(obj: &Bound<'_, PyAny>) -> PyResult<SockAddr> {
    if let Ok(s) = obj.cast::<PyString>() {
        let p = s.to_str()?.as_bytes().to_vec();
        return SockAddr::unix(&p).ok_or_else(|| PyValueError::new_err("AF_UNIX path too long"));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return SockAddr::unix(b.as_bytes())
            .ok_or_else(|| PyValueError::new_err("AF_UNIX path too long"));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        if t.len() >= 2 {
            let host: String = t.get_item(0)?.extract()?;
            let port: u16 = t.get_item(1)?.extract()?;
            let host = if host.is_empty() {
                "0.0.0.0".to_string()
            } else {
                host
            };
            let host = if host == "localhost" {
                "127.0.0.1".to_string()
            } else {
                host
            };
            let ip: std::net::IpAddr = host.parse().map_err(|_| {
                PyValueError::new_err(format!(
                    "address host must be a numeric IPv4/IPv6 address (got {host:?}); resolve \
                     names first with socket.getaddrinfo"
                ))
            })?;
            let mut sa = std::net::SocketAddr::new(ip, port);
            if let (std::net::SocketAddr::V6(v6), 4) = (&mut sa, t.len()) {
                v6.set_flowinfo(t.get_item(2)?.extract()?);
                v6.set_scope_id(t.get_item(3)?.extract()?);
            }
            return Ok(SockAddr::from_std(&sa));
        }
    }
    Err(PyTypeError::new_err(
        "address must be (host, port), (host, port, flowinfo, scope_id) or an AF_UNIX path",
    ))
}

/// A peer address back to Python's socket-module form.
pub fn sockaddr_to_py<'py>(py: Python<'py>, sa: &SockAddr) -> PyResult<Option<Bound<'py, PyAny>>> {
    match sa.to_std() {
        Some(std::net::SocketAddr::V4(a)) => Ok(Some(
            (a.ip().to_string(), a.port()).into_pyobject(py)?.into_any(),
        )),
        Some(std::net::SocketAddr::V6(a)) => Ok(Some(
            (a.ip().to_string(), a.port(), a.flowinfo(), a.scope_id())
                .into_pyobject(py)?
                .into_any(),
        )),
        // AF_UNIX as the socket module gives it: a path as str, an abstract name as
        // bytes, an unnamed sender as None
        None => match sa.unix_name() {
            Some(name) if name.first() == Some(&0) => Ok(Some(PyBytes::new(py, &name).into_any())),
            Some(name) if !name.is_empty() => {
                let os = std::ffi::OsStr::from_bytes(&name);
                Ok(Some(os.into_pyobject(py)?.into_any()))
            }
            _ => Ok(None),
        },
    }
}
