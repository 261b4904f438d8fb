//! Python objects over kernel-facing memory: `Fixed`, `Buffer` (registered), `AlignedBuffer`,
//! `BufferRing` (provided buffers) and `BufferView`.

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};
use uringkit_core::buf::{AlignedBuf, BufRing, FixedBuffers};

use crate::int;

/// Fill a Py_buffer over `len` bytes at `ptr`, owned by `owner`.
///
/// # Safety
/// `ptr` must stay valid for `len` bytes while `owner` is alive (the view holds a reference).
unsafe fn fill_view(
    view: *mut ffi::Py_buffer,
    owner: &Bound<'_, PyAny>,
    ptr: *mut u8,
    len: usize,
    readonly: bool,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("View is null"));
    }
    if readonly && (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err("this buffer is read-only"));
    }
    // SAFETY: view is non-null and provided by Python; PyBuffer_FillInfo takes a new
    // reference to owner and fills every field consistently.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(
            view,
            owner.as_ptr(),
            ptr.cast(),
            len as ffi::Py_ssize_t,
            readonly as c_int,
            flags,
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}

/// A registered file: the index into the ring's fixed file table. Pass it wherever an fd
/// is accepted.
#[pyclass(frozen, eq, hash, module = "uringkit._native")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Fixed {
    #[pyo3(get)]
    pub index: u32,
}

#[pymethods]
impl Fixed {
    #[new]
    fn new(#[pyo3(from_py_with = int::u32_index)] index: u32) -> Self {
        Fixed { index }
    }
    fn __repr__(&self) -> String {
        format!("Fixed({})", self.index)
    }
}

/// One registered buffer: page-aligned memory the ring pinned with
/// `IORING_REGISTER_BUFFERS`. Supports the buffer protocol (`memoryview(buf)`), so it can
/// be filled and read like a bytearray, and is what `read_fixed`/`write_fixed` take.
/// It stays valid after the ring closes.
#[pyclass(frozen, module = "uringkit._native")]
pub struct Buffer {
    pub pool: Arc<FixedBuffers>,
    #[pyo3(get)]
    pub index: u16,
}

impl Buffer {
    pub fn ptr(&self) -> *mut u8 {
        self.pool.ptr(self.index as usize)
    }
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.pool.size
    }
    /// The buffer's size in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.pool.size
    }
    /// Address of the first byte (page-aligned).
    #[getter]
    fn address(&self) -> usize {
        self.ptr() as usize
    }
    fn __repr__(&self) -> String {
        format!("Buffer(index={}, size={})", self.index, self.pool.size)
    }
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len) = {
            let b = slf.get();
            (b.ptr(), b.pool.size)
        };
        // SAFETY: the pool (Arc) lives as long as this object, which the view references.
        unsafe { fill_view(view, slf.as_any(), ptr, len, false, flags) }
    }
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// Page-aligned memory for O_DIRECT I/O, independent of any ring
/// (`uringkit.aligned_buffer(size)`). Supports the buffer protocol.
#[pyclass(frozen, module = "uringkit._native")]
pub struct AlignedBuffer {
    pub mem: AlignedBuf,
}

#[pymethods]
impl AlignedBuffer {
    #[new]
    fn new(#[pyo3(from_py_with = int::usize_size)] size: usize) -> PyResult<Self> {
        if size == 0 {
            return Err(PyValueError::new_err("size must be at least 1 byte"));
        }
        Ok(AlignedBuffer {
            mem: AlignedBuf::new(size)
                .map_err(|e| crate::convert::io_error(e, "aligned_buffer"))?,
        })
    }
    fn __len__(&self) -> usize {
        self.mem.len()
    }
    #[getter]
    fn address(&self) -> usize {
        self.mem.as_ptr() as usize
    }
    fn __repr__(&self) -> String {
        format!("AlignedBuffer(size={})", self.mem.len())
    }
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len) = (slf.get().mem.as_ptr(), slf.get().mem.len());
        // SAFETY: the mapping lives as long as this object, which the view references.
        unsafe { fill_view(view, slf.as_any(), ptr, len, false, flags) }
    }
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// A provided-buffer ring (kernel 5.19+): `count` buffers of `size` bytes in buffer group
/// `group_id`. Ops given `buffer_ring=` let the kernel pick a buffer; the completion's
/// `buffer_id` names it. Read it with `view(completion)`, then give it back with
/// `recycle(buffer_id)`. When every buffer is out, ops fail with ENOBUFS (and multishot ops
/// stop); recycle and re-arm to recover.
#[pyclass(frozen, module = "uringkit._native")]
pub struct BufferRing {
    pub inner: Arc<Mutex<BufRing>>,
    #[pyo3(get)]
    pub group_id: u16,
    #[pyo3(get)]
    pub size: usize,
    #[pyo3(get)]
    pub count: u16,
}

impl BufferRing {
    pub fn taken(&self, bid: u16) {
        if let Ok(mut r) = self.inner.lock() {
            r.taken(bid);
        }
    }
}

impl BufferRing {
    /// `f` over the bytes the kernel wrote into a completion's provided buffer, then the
    /// buffer given back to the kernel (also when `f` fails): what `take` and `take_msg`
    /// share.
    fn consume<R>(
        &self,
        completion: &Bound<'_, crate::completion::Completion>,
        f: impl FnOnce(&[u8]) -> PyResult<R>,
    ) -> PyResult<R> {
        let c = completion.get();
        let Some(bid) = c.buffer_id else {
            return Err(PyValueError::new_err(
                "this completion carries no buffer (no IORING_CQE_F_BUFFER): it failed or \
                 did not use buffer selection",
            ));
        };
        let mut r = self.inner.lock().expect("buffer ring lock");
        if bid >= r.count || c.res < 0 {
            return Err(PyValueError::new_err(format!(
                "buffer_id {bid} out of range, or a failed completion (res {})",
                c.res
            )));
        }
        let len = (c.res as usize).min(r.size);
        // SAFETY: buf_ptr(bid) is the start of buffer `bid` (size bytes) inside the ring's
        // mapping, which `r` (the lock on it) keeps alive; the kernel wrote `len` bytes
        // there and does not touch the buffer until it is recycled below, after `f` (the
        // slice does not outlive this call).
        let s = unsafe { std::slice::from_raw_parts(r.buf_ptr(bid) as *const u8, len) };
        let out = f(s);
        r.recycle(bid)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        out
    }
}

#[pymethods]
impl BufferRing {
    /// The data the kernel put in the completion's buffer: a zero-copy `BufferView`
    /// (use `bytes(view)` to copy). Valid until the buffer is recycled.
    fn view(&self, completion: &Bound<'_, crate::completion::Completion>) -> PyResult<BufferView> {
        let c = completion.get();
        let Some(bid) = c.buffer_id else {
            return Err(PyValueError::new_err(
                "this completion carries no buffer (no IORING_CQE_F_BUFFER): it failed or \
                 did not use buffer selection",
            ));
        };
        if c.res < 0 {
            return Err(PyValueError::new_err(
                "this completion failed; it has no data",
            ));
        }
        let r = self.inner.lock().expect("buffer ring lock");
        if bid >= r.count {
            return Err(PyValueError::new_err(format!(
                "buffer_id {bid} out of range"
            )));
        }
        Ok(BufferView {
            owner: self.inner.clone(),
            ptr: r.buf_ptr(bid) as usize,
            len: (c.res as usize).min(r.size),
            buffer_id: bid,
        })
    }

    /// The completion's data as bytes (a copy), its buffer given back to the kernel in
    /// the same call: `bytes(view(c))` then `recycle(c.buffer_id)`, for a receive loop.
    fn take<'py>(
        &self,
        py: Python<'py>,
        completion: &Bound<'py, crate::completion::Completion>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        self.consume(completion, |s| Ok(pyo3::types::PyBytes::new(py, s)))
    }

    /// The data of several completions, in order, as one bytes (one copy), each buffer
    /// given back to the kernel: what `b"".join(take(c) for c in completions)` gives,
    /// without the intermediate copies — a stream receive's chunks of one loop iteration
    /// handed over at once. Every completion must carry a buffer of this ring.
    fn take_all<'py>(
        &self,
        py: Python<'py>,
        completions: Vec<Bound<'py, crate::completion::Completion>>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let mut r = self.inner.lock().expect("buffer ring lock");
        let mut parts: Vec<(u16, usize)> = Vec::with_capacity(completions.len());
        let mut total = 0usize;
        for completion in &completions {
            let c = completion.get();
            let Some(bid) = c.buffer_id else {
                return Err(PyValueError::new_err(
                    "a completion carries no buffer (no IORING_CQE_F_BUFFER): it failed or \
                     did not use buffer selection",
                ));
            };
            if bid >= r.count || c.res < 0 {
                return Err(PyValueError::new_err(format!(
                    "buffer_id {bid} out of range, or a failed completion (res {})",
                    c.res
                )));
            }
            let len = (c.res as usize).min(r.size);
            parts.push((bid, len));
            total += len;
        }
        let out = pyo3::types::PyBytes::new_with(py, total, |dst| {
            let mut at = 0;
            for &(bid, len) in &parts {
                // SAFETY: as in consume(): buffer `bid` lies in the ring's mapping, kept
                // alive by the lock `r`; the kernel wrote `len` bytes there and leaves it
                // alone until it is recycled below.
                let src = unsafe { std::slice::from_raw_parts(r.buf_ptr(bid) as *const u8, len) };
                dst[at..at + len].copy_from_slice(src);
                at += len;
            }
            Ok(())
        })?;
        for &(bid, _) in &parts {
            r.recycle(bid)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        Ok(out)
    }

    /// A multishot recvmsg completion's message as `(payload, address)` (a copy; the
    /// address as the socket module gives it), its buffer given back to the kernel in
    /// the same call. A payload longer than the buffer had room for is truncated.
    fn take_msg<'py>(
        &self,
        py: Python<'py>,
        completion: &Bound<'py, crate::completion::Completion>,
    ) -> PyResult<(Bound<'py, pyo3::types::PyBytes>, Option<Bound<'py, PyAny>>)> {
        self.consume(completion, |s| {
            // SAFETY: msghdr is plain old data; only the two lengths matter to the parser.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_namelen = uringkit_core::op::net::RECVMSG_NAME_LEN as libc::socklen_t;
            let out = io_uring::types::RecvMsgOut::parse(s, &hdr).map_err(|_| {
                PyValueError::new_err(format!(
                    "completion res {} is shorter than a recvmsg header: not a multishot \
                     recvmsg's message",
                    s.len()
                ))
            })?;
            let payload = pyo3::types::PyBytes::new(py, out.payload_data());
            let name = out.name_data();
            let mut sa = uringkit_core::op::SockAddr::default();
            let n = name
                .len()
                .min(std::mem::size_of::<libc::sockaddr_storage>());
            // SAFETY: sockaddr_storage is plain bytes of at least n; copying n of them
            // from the name field fills the address the kernel wrote there.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    name.as_ptr(),
                    &mut sa.storage as *mut _ as *mut u8,
                    n,
                );
            }
            sa.len = n as libc::socklen_t;
            let addr = if n == 0 {
                None
            } else {
                crate::convert::sockaddr_to_py(py, &sa)?
            };
            Ok((payload, addr))
        })
    }

    /// Return buffer `buffer_id` to the kernel. Returns False if it was already there.
    fn recycle(&self, #[pyo3(from_py_with = int::u16_buffer_id)] buffer_id: u16) -> PyResult<bool> {
        let mut r = self.inner.lock().expect("buffer ring lock");
        r.recycle(buffer_id)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// How many buffers the kernel can still pick.
    #[getter]
    fn available(&self) -> usize {
        self.inner.lock().expect("buffer ring lock").available()
    }

    fn __repr__(&self) -> String {
        format!(
            "BufferRing(group_id={}, count={}, size={}, available={})",
            self.group_id,
            self.count,
            self.size,
            self.available()
        )
    }
}

/// Zero-copy view of one provided buffer's data; supports the buffer protocol.
#[pyclass(frozen, module = "uringkit._native")]
pub struct BufferView {
    owner: Arc<Mutex<BufRing>>,
    ptr: usize,
    len: usize,
    #[pyo3(get)]
    buffer_id: u16,
}

#[pymethods]
impl BufferView {
    fn __len__(&self) -> usize {
        self.len
    }
    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        let _keep = &self.owner;
        // SAFETY: ptr/len lie inside the buffer ring's memory, kept alive by `owner`.
        let s = unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) };
        pyo3::types::PyBytes::new(py, s)
    }
    fn __repr__(&self) -> String {
        format!("BufferView(buffer_id={}, len={})", self.buffer_id, self.len)
    }
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len) = (slf.get().ptr as *mut u8, slf.get().len);
        // SAFETY: the ring memory (Arc) lives as long as this object, which the view references.
        unsafe { fill_view(view, slf.as_any(), ptr, len, true, flags) }
    }
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
