//! `LibaioContext`: Linux native AIO for event loops (O_DIRECT work where io_uring is
//! blocked): completions signal an eventfd, buffers are held until their completion.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use uringkit_core::engine::libaio::EventCtx;

use crate::convert::{io_error, read_only_buffer, writable_buffer};
use crate::int;

#[pyclass(module = "uringkit._native")]
pub struct LibaioContext {
    ctx: Option<EventCtx>,
    efd: i32,
    keep: HashMap<u64, PyUntypedBuffer>,
}

impl LibaioContext {
    fn ctx(&mut self) -> PyResult<&mut EventCtx> {
        self.ctx
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("operation on a closed LibaioContext"))
    }
}

#[pymethods]
impl LibaioContext {
    /// A context for up to `depth` requests in flight; completions signal `eventfd`.
    #[new]
    fn new(depth: u32, eventfd: i32) -> PyResult<Self> {
        let ctx = EventCtx::new(depth, eventfd).map_err(|e| io_error(e, "io_setup"))?;
        Ok(LibaioContext {
            ctx: Some(ctx),
            efd: eventfd,
            keep: HashMap::new(),
        })
    }

    /// Queue a read into `buf` (its first `nbytes`, default all) at `offset`.
    #[pyo3(signature = (fd, buf, offset, user_data, nbytes=None))]
    fn read(
        &mut self,
        #[pyo3(from_py_with = int::i32_fd)] fd: i32,
        buf: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_offset)] offset: u64,
        #[pyo3(from_py_with = int::u64_user_data)] user_data: u64,
        #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
    ) -> PyResult<()> {
        let pb = writable_buffer(buf, "buf")?;
        let len = nbytes.unwrap_or(pb.len_bytes()).min(pb.len_bytes());
        let p = pb.buf_ptr() as *mut u8;
        // SAFETY: `pb` pins the buffer; it is kept in `keep` until the completion is reaped.
        unsafe { self.ctx()?.submit(user_data, fd, false, p, len, offset) }
            .map_err(|e| io_error(e, "io_submit"))?;
        self.keep.insert(user_data, pb);
        Ok(())
    }

    /// Queue a write of `data` at `offset`.
    fn write(
        &mut self,
        #[pyo3(from_py_with = int::i32_fd)] fd: i32,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_offset)] offset: u64,
        #[pyo3(from_py_with = int::u64_user_data)] user_data: u64,
    ) -> PyResult<()> {
        let pb = read_only_buffer(data, "data")?;
        let (p, len) = (pb.buf_ptr() as *mut u8, pb.len_bytes());
        // SAFETY: as in read().
        unsafe { self.ctx()?.submit(user_data, fd, true, p, len, offset) }
            .map_err(|e| io_error(e, "io_submit"))?;
        self.keep.insert(user_data, pb);
        Ok(())
    }

    /// Reap completed requests without blocking: [(user_data, result)], result < 0 is -errno.
    fn completions(&mut self) -> PyResult<Vec<(u64, i64)>> {
        let mut out = Vec::new();
        self.ctx()?
            .reap(&mut out)
            .map_err(|e| io_error(e, "io_getevents"))?;
        for (ud, _) in &out {
            self.keep.remove(ud);
        }
        Ok(out)
    }

    #[getter]
    fn in_flight(&self) -> usize {
        self.ctx.as_ref().map(|c| c.in_flight()).unwrap_or(0)
    }

    #[getter]
    fn eventfd(&self) -> i32 {
        self.efd
    }

    /// Destroy the context (waits for in-flight requests), then release their buffers.
    fn close(&mut self, py: Python<'_>) {
        let ctx = self.ctx.take();
        py.detach(|| drop(ctx));
        self.keep.clear();
    }
}

impl Drop for LibaioContext {
    fn drop(&mut self) {
        self.ctx.take();
    }
}
