//! `Ring`: the Python face of `uringkit_core::Ring`.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use uringkit_core::buf::{BufRing, FixedBuffers};
use uringkit_core::op::{self, FdArg, IoInfo, KStatx, MsgStore, Owned, SockAddr};
use uringkit_core::ring::probe::OPS;
use uringkit_core::ring::register;
use uringkit_core::ring::{self as core_ring, setup::human_bytes, setup::memlock_text};
use uringkit_core::sys::fork;
use uringkit_core::{Done, RingConfig, SetupError, Slot, SqeOpts, WaitOutcome};

use crate::buffers::{Buffer, BufferRing};
use crate::completion::Completion;
use crate::convert::*;
use crate::int;

/// What an in-flight op keeps alive on the Python side.
pub enum Keep {
    None,
    Buf(PyUntypedBuffer),
    Bufs(Vec<PyUntypedBuffer>),
    Obj(Py<PyAny>),
    /// One of the ops of a read_batch/write_batch call: (the shared buffer, batch id).
    Batch(Arc<PyUntypedBuffer>, u64),
    /// A read pool buffer (read_bytes_future).
    Lease(Lease),
}

type CoreRing = uringkit_core::Ring<Keep>;

/// How long close() waits for cancelled ops before giving up (and leaking their memory
/// rather than freeing it under the kernel).
const CLOSE_LIMIT: Duration = Duration::from_secs(10);

fn opts(link: bool, hardlink: bool, drain: bool, async_: bool, skip_success: bool) -> SqeOpts {
    SqeOpts {
        link,
        hardlink,
        drain,
        async_,
        skip_success,
    }
}

fn setup_err(e: SetupError) -> PyErr {
    match e {
        SetupError::Invalid(m) => PyValueError::new_err(m),
        SetupError::Os { errno, message } => os_error(errno, message),
    }
}

fn opcode_of(e: &io_uring::squeue::Entry) -> u8 {
    e.get_opcode() as u8
}

/// An io_uring instance: queue operations, submit them in batches, reap completions.
///
/// Every op method queues one SQE and returns None; `submit()` hands queued SQEs to the
/// kernel, `wait(n)` submits and blocks (GIL released) until `n` completions are ready,
/// `completions()` reaps without blocking. Memory an op uses (bytes, bytearray,
/// memoryview, Buffer) is kept alive until its final completion, whatever Python does
/// with it. A Ring is used from one thread at a time.
#[pyclass(module = "uringkit._native")]
pub struct Ring {
    core: Option<CoreRing>,
    cfg: RingConfig,
    fixed: Option<Arc<FixedBuffers>>,
    buf_rings: HashMap<u16, Py<BufferRing>>,
    files: Option<u32>,
    leaked: bool,
    /// Completions reaped by a wait() that a signal interrupted, handed out next time.
    leftover: Vec<Completion>,
    batches: u64,
    /// user_data of `read_future` reads: a range of its own (bit 62 set), so they never
    /// collide with the caller's numbering.
    fast_ud: u64,
    /// Registered buffers lent to `read_bytes_future` reads.
    read_pool: Option<ReadPool>,
    /// The fork generation and process id at creation: a forked child refuses to use the
    /// ring (its queues are shared with the parent's) and closes only its own fd.
    born: u64,
    opener: u32,
}

/// The read pool: registered buffers, and the indexes of those not lent out.
struct ReadPool {
    bufs: Arc<FixedBuffers>,
    free: Arc<Mutex<Vec<u16>>>,
}

/// One read pool buffer lent to a read in flight: back in the free list when the read's
/// slot is dropped (its completion handled, or the ring closed) — never before.
pub struct Lease {
    bufs: Arc<FixedBuffers>,
    free: Arc<Mutex<Vec<u16>>>,
    index: u16,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut f) = self.free.lock() {
            f.push(self.index);
        }
    }
}

impl Ring {
    fn core(&mut self) -> PyResult<&mut CoreRing> {
        if fork::generation() != self.born {
            return Err(PyRuntimeError::new_err(format!(
                "this Ring was created by process {} and this process is a fork of it: the \
                 ring's queues, its registered files and buffers are the parent's (used \
                 from both, each side would take the other's completions) — create a new \
                 Ring in this process",
                self.opener
            )));
        }
        self.core
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("I/O operation on a closed Ring"))
    }

    /// The ring-internal user_data of the first in-flight op of kind `opcode` queued with
    /// `user_data == target` (what the kernel knows it by); an id no slot has when there is none, so
    /// the kernel answers -ENOENT as it would for an unknown user_data.
    fn target_slot(&mut self, target: u64, opcode: u8) -> PyResult<u64> {
        Ok(self
            .core()?
            .slots_with_user_data_op(target, opcode)
            .first()
            .copied()
            .unwrap_or(u32::MAX as u64 - 1))
    }

    /// Queue `build(id)` for the in-flight op of kind `opcode` queued with `user_data ==
    /// target` (poll_remove, timeout_remove): see [`Self::target_slot`].
    fn queue_on_target(
        &mut self,
        target: u64,
        opcode: u8,
        build: fn(u64) -> io_uring::squeue::Entry,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        let id = self.target_slot(target, opcode)?;
        self.queue_plain(build(id), user_data, o)
    }

    /// Queue one entry; `slot.keep` and `slot.owned` hold everything it points to.
    /// A read into / write from `b` (`what` names it in errors): `(fd, offset, nbytes,
    /// rw_flags)`. One of this ring's registered Buffers goes as READ_FIXED/WRITE_FIXED
    /// (no page pinning); any other buffer is held by the slot until the completion.
    fn queue_rw(
        &mut self,
        read: bool,
        (fd, off, nbytes, rw_flags): (FdArg, u64, Option<usize>, i32),
        b: &Bound<'_, PyAny>,
        what: &str,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        if let Some((fb, len)) = self.own_buffer(b, nbytes, rw_flags)? {
            let (ptr, index) = (fb.get().ptr(), fb.get().index);
            let keep = Keep::Obj(b.clone().unbind());
            return self.queue_fixed(fd, (ptr, len, index), off, read, keep, user_data, o);
        }
        let pb = if read {
            writable_buffer(b, what)?
        } else {
            read_only_buffer(b, what)?
        };
        let len = io_len(pb.len_bytes(), nbytes, what)?;
        let ptr = pb.buf_ptr() as *mut u8;
        let mut slot = Slot::new(user_data, 0, Keep::Buf(pb));
        slot.io = IoInfo::new(raw_of(fd), ptr as u64, len as u64, off);
        let e = if read {
            op::rw::read(fd, ptr, len, off, rw_flags)
        } else {
            op::rw::write(fd, ptr, len, off, rw_flags)
        };
        self.queue(e, slot, o)
    }

    /// An op that points at no memory of ours: nothing to keep alive.
    fn queue_plain(
        &mut self,
        entry: io_uring::squeue::Entry,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        self.queue(entry, Slot::new(user_data, 0, Keep::None), o)
    }

    /// connect / bind of `fd` to `address`; the slot owns the sockaddr.
    fn queue_addr(
        &mut self,
        fd: &Bound<'_, PyAny>,
        address: &Bound<'_, PyAny>,
        user_data: u64,
        o: SqeOpts,
        make: fn(FdArg, &SockAddr) -> io_uring::squeue::Entry,
    ) -> PyResult<()> {
        let fd = fd_arg(fd, "fd")?;
        let sa = Box::new(sockaddr_arg(address)?);
        let e = make(fd, &sa);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Addr(sa);
        self.queue(e, slot, o)
    }

    /// send / send_zc of `data` (or its first `nbytes`); the slot keeps the buffer.
    #[allow(clippy::too_many_arguments)]
    fn queue_send(
        &mut self,
        fd: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        nbytes: Option<usize>,
        flags: i32,
        user_data: u64,
        o: SqeOpts,
        make: fn(FdArg, *const u8, u32, i32) -> io_uring::squeue::Entry,
    ) -> PyResult<()> {
        let fd = fd_arg(fd, "fd")?;
        let pb = read_only_buffer(data, "data")?;
        let len = io_len(pb.len_bytes(), nbytes, "data")?;
        let ptr = pb.buf_ptr() as *const u8;
        let slot = Slot::new(user_data, 0, Keep::Buf(pb));
        self.queue(make(fd, ptr, len, flags), slot, o)
    }

    fn queue(
        &mut self,
        entry: io_uring::squeue::Entry,
        mut slot: Slot<Keep>,
        o: SqeOpts,
    ) -> PyResult<()> {
        slot.opcode = opcode_of(&entry);
        let core = self.core()?;
        // SAFETY: every pointer in `entry` was taken from `slot.keep` (Python buffers held by
        // PyUntypedBuffer, which pins the exporter) or `slot.owned` (heap boxes that do not
        // move), or from registered memory whose Arc the ring and the Buffer object hold.
        unsafe { core.push(entry, slot, o) }.map_err(|e| io_error(e, "queueing an SQE"))
    }

    fn completion(&self, py: Python<'_>, d: Done<Keep>) -> PyResult<Completion> {
        let buffer_id = d.buffer_id();
        if let (Some(bid), Some(g)) = (buffer_id, d.io.buf_group) {
            if let Some(br) = self.buf_rings.get(&g) {
                br.get().taken(bid);
            }
        }
        let name = uringkit_core::ring::probe::op_by_code(d.opcode)
            .map(|o| o.name)
            .unwrap_or("op");
        let mut message = None;
        if d.res == -libc::EINVAL {
            message = op::explain_einval(name, &d.io);
        } else if d.res == -libc::EOPNOTSUPP && self.cfg.iopoll {
            message = Some(format!(
                "{name} on an IOPOLL ring failed with EOPNOTSUPP: polled I/O needs O_DIRECT \
                 on a block device with poll queues (NVMe with poll_queues>0); this device or \
                 filesystem has none — use a ring without iopoll=True"
            ));
        } else if d.res == -libc::ENOBUFS && d.io.buf_group.is_some() {
            message = Some(format!(
                "{name}: no provided buffer left in group {} (ENOBUFS); recycle buffers with \
                 BufferRing.recycle() and queue the op again",
                d.io.buf_group.unwrap_or(0)
            ));
        }
        let mut buffer = None;
        let mut result = None;
        if let Some(slot) = d.slot {
            buffer = match slot.keep {
                Keep::None => None,
                Keep::Buf(b) => b.obj(py).map(|o| o.clone().unbind()),
                Keep::Bufs(v) => {
                    let objs: Vec<Py<PyAny>> = v
                        .iter()
                        .filter_map(|b| b.obj(py).map(|o| o.clone().unbind()))
                        .collect();
                    Some(PyList::new(py, objs)?.into_any().unbind())
                }
                Keep::Obj(o) => Some(o),
                Keep::Batch(b, _) => b.obj(py).map(|o| o.clone().unbind()),
                Keep::Lease(_) => None,
            };
            if d.res >= 0 {
                result = match &slot.owned {
                    Owned::Statx(_, st) => Some(statx_dict(py, st)?.into_any().unbind()),
                    Owned::SigInfo(si) => Some(siginfo_dict(py, si)?.into_any().unbind()),
                    Owned::Fds(f) => Some((f[0], f[1]).into_pyobject(py)?.into_any().unbind()),
                    Owned::Epoll(evs) if slot.opcode == io_uring::opcode::EpollWait::CODE => {
                        let n = (d.res as usize).min(evs.len());
                        // (fields copied out: the struct is packed on x86_64)
                        let pairs = evs[..n].iter().map(|e| {
                            let (data, events) = (e.u64, e.events);
                            (data, events)
                        });
                        Some(PyList::new(py, pairs)?.into_any().unbind())
                    }
                    Owned::Xattr(_, _, v)
                        if slot.opcode == io_uring::opcode::GetXattr::CODE
                            || slot.opcode == io_uring::opcode::FGetXattr::CODE =>
                    {
                        let n = (d.res as usize).min(v.len());
                        Some(pyo3::types::PyBytes::new(py, &v[..n]).into_any().unbind())
                    }
                    Owned::Addr(sa) if slot.opcode == io_uring::opcode::Accept::CODE => {
                        sockaddr_to_py(py, sa)?.map(|a| a.unbind())
                    }
                    Owned::Msg(m) => match &m.addr {
                        Some(sa) if m.hdr.msg_namelen > 0 => {
                            let mut sa2 = (**sa).clone();
                            sa2.len = m.hdr.msg_namelen;
                            sockaddr_to_py(py, &sa2)?.map(|a| a.unbind())
                        }
                        _ => None,
                    },
                    _ => None,
                };
            }
        }
        Ok(Completion {
            user_data: d.user_data,
            res: d.res,
            flags: d.flags,
            opcode: d.opcode,
            buffer_id,
            buffer,
            result,
            message,
        })
    }

    fn convert_all(&self, py: Python<'_>, done: Vec<Done<Keep>>) -> PyResult<Vec<Completion>> {
        let mut v = Vec::with_capacity(done.len());
        for d in done {
            v.push(self.completion(py, d)?);
        }
        Ok(v)
    }

    /// `wait`'s work: submit what is queued, then reap into `out` until it holds at
    /// least `min_complete` completions or `timeout` seconds pass (GIL released while
    /// blocked). With nothing in flight and no `timeout`, it returns at once. An error
    /// (a signal handler's exception, a failed system call) leaves what was reaped in
    /// `out` for the caller to keep.
    fn collect(
        &mut self,
        py: Python<'_>,
        min_complete: usize,
        timeout: Option<f64>,
        out: &mut Vec<Done<Keep>>,
    ) -> PyResult<()> {
        if let Some(t) = timeout {
            if !(t >= 0.0 && t.is_finite()) {
                return Err(PyValueError::new_err(format!(
                    "timeout must be a finite number of seconds >= 0, or None (got {t})"
                )));
            }
        }
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t));
        let core = self.core()?;
        core.submit()
            .map_err(|e| io_error(e, "io_uring_enter (submit)"))?;
        core.reap(out, usize::MAX)
            .map_err(|e| io_error(e, "io_uring_enter (reap)"))?;
        while out.len() < min_complete {
            // Nothing of ours in flight: only a message from another ring (msg_ring) could
            // still arrive — wait for it until the timeout, but never forever.
            if core.holding() == 0 && core.sq_pending() == 0 && deadline.is_none() {
                break;
            }
            let cap = core.cq_entries() as usize;
            let want = (min_complete - out.len()).min(cap).max(1);
            let remaining = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    Some(d - now)
                }
                None => None,
            };
            let c: &CoreRing = core;
            let outcome = py
                .detach(|| c.wait_cqes(want, remaining))
                .map_err(|e| io_error(e, "io_uring_enter (wait)"))?;
            core.reap(out, usize::MAX)
                .map_err(|e| io_error(e, "io_uring_enter (reap)"))?;
            match outcome {
                WaitOutcome::Ready => {}
                WaitOutcome::TimedOut => break,
                WaitOutcome::Interrupted => py.check_signals()?,
            }
        }
        Ok(())
    }

    /// `dispatch`'s work on reaped completions: each final one whose user_data is a key
    /// of `futures` resolves that future (see `dispatch`); the others go to `slow`.
    fn resolve(
        &mut self,
        py: Python<'_>,
        futures: &Bound<'_, pyo3::types::PyDict>,
        wake: Option<&Bound<'_, pyo3::types::PyList>>,
        out: Vec<Done<Keep>>,
        slow: &mut Vec<Completion>,
    ) -> PyResult<()> {
        for d in out {
            // (a provided-buffer completion needs its buffer accounted: the slow path)
            if !d.more() && d.io.buf_group.is_none() && !futures.is_empty() {
                if let Some(fut) = futures.get_item(d.user_data)? {
                    futures.del_item(d.user_data)?;
                    if !fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
                        let set = pyo3::intern!(py, "set_result");
                        if let Some(wake) = wake {
                            take_waiter(py, &fut, wake)?;
                        }
                        if let (
                            true,
                            Some(Slot {
                                keep: Keep::Lease(l),
                                ..
                            }),
                        ) = (d.res >= 0, &d.slot)
                        {
                            let n = (d.res as usize).min(l.bufs.size);
                            // SAFETY: the read completed: the kernel wrote (up to) n bytes
                            // of the leased buffer, which nothing else uses until the lease
                            // is dropped with the slot, after this copy.
                            let data = unsafe {
                                std::slice::from_raw_parts(l.bufs.ptr(l.index as usize), n)
                            };
                            fut.call_method1(set, (pyo3::types::PyBytes::new(py, data),))?;
                        } else if d.res >= 0 {
                            fut.call_method1(set, (d.res,))?;
                        } else {
                            let c = self.completion(py, d)?;
                            fut.call_method1(set, (c,))?;
                        }
                    }
                    continue;
                }
            }
            slow.push(self.completion(py, d)?);
        }
        Ok(())
    }

    fn buffer_ring_group(&self, br: &Bound<'_, BufferRing>) -> PyResult<(u16, usize)> {
        let b = br.get();
        match self.buf_rings.get(&b.group_id) {
            Some(mine) if mine.as_ptr() == br.as_ptr() => Ok((b.group_id, b.size)),
            _ => Err(PyValueError::new_err(
                "buffer_ring was not created by this Ring (use ring.buffer_ring(...))",
            )),
        }
    }

    fn fixed_buffer(&self, buf: &Bound<'_, Buffer>) -> PyResult<()> {
        match &self.fixed {
            Some(p) if Arc::ptr_eq(p, &buf.get().pool) => Ok(()),
            _ => Err(PyValueError::new_err(
                "buf is not registered with this Ring (use a Buffer from ring.register_buffers())",
            )),
        }
    }

    /// Allocate and register `count` buffers of `size` bytes as the ring's one buffer
    /// table (`what` names the caller in errors).
    fn register_fixed(
        &mut self,
        count: usize,
        size: usize,
        what: &str,
    ) -> PyResult<Arc<FixedBuffers>> {
        if self.fixed.is_some() {
            return Err(PyValueError::new_err(
                "buffers are already registered on this ring; call unregister_buffers() first",
            ));
        }
        let pool =
            FixedBuffers::new(count, size).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let core = self.core()?;
        if let Err(e) = pool.register(core.raw()) {
            let bytes = pool.pinned_bytes() as u64;
            return Err(match e.raw_os_error() {
                Some(libc::ENOMEM) => os_error(
                    libc::ENOMEM,
                    format!(
                        "{what}: pinning {} ({count} x {size} bytes) exceeds \
                         RLIMIT_MEMLOCK ({}); the kernel charges registered buffers to the \
                         locked-memory limit. Raise it (`ulimit -l`, LimitMEMLOCK= in systemd, \
                         `--ulimit memlock=-1` in Docker) or register less",
                        human_bytes(bytes),
                        memlock_text()
                    ),
                ),
                _ => io_error(e, what),
            });
        }
        self.fixed = Some(pool.clone());
        Ok(pool)
    }

    /// Cancel everything, wait (GIL released) for the kernel to let go of all memory, then
    /// drop the ring. If the kernel does not finish in time, leak rather than free.
    /// Registered buffers and buffer rings the kernel may still write into: never freed.
    fn forget_registered(&mut self) {
        if let Some(f) = self.fixed.take() {
            std::mem::forget(f);
        }
        for (_, b) in self.buf_rings.drain() {
            std::mem::forget(b);
        }
        self.leaked = true;
    }

    fn shutdown_ring(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(mut core) = self.core.take() else {
            return Ok(());
        };
        if fork::generation() != self.born {
            // A forked child's copy: cancelling "everything in flight" and reaping would
            // cancel the parent's ops and take its completions (the queues are shared).
            // Close this process's fd and keep (leak) the memory: nothing is freed that
            // the parent's kernel requests could be using, nothing is unregistered.
            self.forget_registered();
            core.abandon(|_| true);
            return Ok(());
        }
        let mut sink = Vec::new();
        let res = core.begin_close();
        if matches!(&res, Err(e) if e.raw_os_error() == Some(libc::EEXIST)) {
            // A single-issuer ring closed from another thread: it cannot be driven from
            // here. Close its fd (the kernel cancels the ops); memory an op holds is kept.
            let (n, leaked) = core.abandon(|k| !matches!(k, Keep::None));
            if leaked == 0 && self.fixed.is_none() && self.buf_rings.is_empty() {
                // (polls, nops, timeouts without memory: nothing the kernel could touch)
                return Ok(());
            }
            self.forget_registered();
            let msg = format!(
                "Ring.close() from a thread other than this SINGLE_ISSUER ring's own: {n} \
                 ops in flight were left to the kernel to cancel, and the memory of {leaked} \
                 of them (and any registered buffers) is kept (leaked) since it cannot be \
                 known when the kernel is done with it"
            );
            return PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyResourceWarning>(),
                &std::ffi::CString::new(msg).expect("no NUL"),
                1,
            );
        }
        let deadline = Instant::now() + CLOSE_LIMIT;
        if res.is_ok() {
            while !core.quiescent() && Instant::now() < deadline {
                let c = &core;
                let _ = py.detach(|| c.wait_cqes(1, Some(Duration::from_millis(100))));
                sink.clear();
                if core.reap(&mut sink, usize::MAX).is_err() {
                    break;
                }
            }
        }
        drop(sink);
        if core.quiescent() {
            core.release_all_skipped();
            drop(core);
            Ok(())
        } else {
            let n = core.in_flight();
            // The kernel may still write into memory these ops own: never free it.
            std::mem::forget(core);
            self.forget_registered();
            Err(PyRuntimeError::new_err(format!(
                "Ring.close(): {n} ops did not complete within {}s of being cancelled; their \
                 memory was leaked on purpose instead of being freed under the kernel",
                CLOSE_LIMIT.as_secs()
            )))
        }
    }
}

/// os.waitid's fields from the siginfo a waitid op filled in.
fn siginfo_dict<'py>(py: Python<'py>, si: &libc::siginfo_t) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    // SAFETY: the kernel filled `si` for a SIGCHLD-style event (waitid), where the pid,
    // uid and status union members are the valid ones.
    unsafe {
        d.set_item("si_pid", si.si_pid())?;
        d.set_item("si_uid", si.si_uid())?;
        d.set_item("si_status", si.si_status())?;
    }
    d.set_item("si_signo", si.si_signo)?;
    d.set_item("si_code", si.si_code)?;
    Ok(d)
}

fn statx_dict<'py>(py: Python<'py>, st: &KStatx) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
    let rdev = libc::makedev(st.stx_rdev_major, st.stx_rdev_minor);
    d.set_item("st_mode", st.stx_mode as u32)?;
    d.set_item("st_ino", st.stx_ino)?;
    d.set_item("st_dev", dev)?;
    d.set_item("st_nlink", st.stx_nlink)?;
    d.set_item("st_uid", st.stx_uid)?;
    d.set_item("st_gid", st.stx_gid)?;
    d.set_item("st_size", st.stx_size)?;
    d.set_item("st_atime", st.stx_atime.as_f64())?;
    d.set_item("st_mtime", st.stx_mtime.as_f64())?;
    d.set_item("st_ctime", st.stx_ctime.as_f64())?;
    d.set_item("st_birthtime", st.stx_btime.as_f64())?;
    d.set_item("st_atime_ns", st.stx_atime.as_ns())?;
    d.set_item("st_mtime_ns", st.stx_mtime.as_ns())?;
    d.set_item("st_ctime_ns", st.stx_ctime.as_ns())?;
    d.set_item("st_blksize", st.stx_blksize)?;
    d.set_item("st_blocks", st.stx_blocks)?;
    d.set_item("st_rdev", rdev)?;
    d.set_item("st_attributes", st.stx_attributes)?;
    d.set_item("mask", st.stx_mask)?;
    if st.stx_mask & op::STATX_DIOALIGN != 0 {
        d.set_item("dio_mem_align", st.stx_dio_mem_align)?;
        d.set_item("dio_offset_align", st.stx_dio_offset_align)?;
    }
    Ok(d)
}

static PROBE: OnceLock<Result<Vec<&'static str>, (i32, String)>> = OnceLock::new();

#[pymethods]
impl Ring {
    #[new]
    #[pyo3(signature = (entries=256, *, sqpoll=false, sq_thread_idle_ms=1000, sq_thread_cpu=None,
        iopoll=false, coop_taskrun=false, single_issuer=false, defer_taskrun=false, cq_entries=None,
        disabled=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        #[pyo3(from_py_with = int::i64_entries)] entries: i64,
        sqpoll: bool,
        #[pyo3(from_py_with = int::u32_sq_thread_idle_ms)] sq_thread_idle_ms: u32,
        #[pyo3(from_py_with = int::opt_u32_sq_thread_cpu)] sq_thread_cpu: Option<u32>,
        iopoll: bool,
        coop_taskrun: bool,
        single_issuer: bool,
        defer_taskrun: bool,
        #[pyo3(from_py_with = int::opt_i64_cq_entries)] cq_entries: Option<i64>,
        disabled: bool,
    ) -> PyResult<Self> {
        let max = core_ring::setup::MAX_ENTRIES as i64;
        if !(1..=max).contains(&entries) {
            return Err(PyValueError::new_err(format!(
                "entries must be between 1 and {max} (got {entries})"
            )));
        }
        let cq = match cq_entries {
            None => None,
            Some(c) if c >= entries && c <= 2 * max => Some(c as u32),
            Some(c) => {
                return Err(PyValueError::new_err(format!(
                    "cq_entries must be between entries ({entries}) and {} (got {c})",
                    2 * max
                )))
            }
        };
        let cfg = RingConfig {
            entries: entries as u32,
            cq_entries: cq,
            sqpoll,
            sq_thread_idle_ms,
            sq_thread_cpu,
            iopoll,
            coop_taskrun,
            single_issuer,
            defer_taskrun,
            disabled,
        };
        let core = CoreRing::new(cfg.clone()).map_err(setup_err)?;
        Ok(Ring {
            core: Some(core),
            cfg,
            fixed: None,
            buf_rings: HashMap::new(),
            files: None,
            leaked: false,
            leftover: Vec::new(),
            batches: 0,
            fast_ud: 1 << 62,
            read_pool: None,
            born: fork::generation(),
            opener: std::process::id(),
        })
    }

    /// `with ring:` on a closed ring is an error, as `with f:` on a closed file.
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.borrow_mut().core()?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        _args: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<bool> {
        self.shutdown_ring(py)?;
        Ok(false)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.core.is_none()
    }

    /// The ring's file descriptor.
    fn fileno(&mut self) -> PyResult<i32> {
        Ok(self.core()?.fd())
    }

    /// SQ size (a power of two, possibly larger than asked).
    #[getter]
    fn entries(&mut self) -> PyResult<u32> {
        Ok(self.core()?.sq_entries())
    }
    #[getter]
    fn cq_entries(&mut self) -> PyResult<u32> {
        Ok(self.core()?.cq_entries())
    }
    /// Free SQ slots.
    #[getter]
    fn sq_space_left(&mut self) -> PyResult<usize> {
        Ok(self.core()?.sq_space_left())
    }
    /// SQEs queued but not yet handed to the kernel.
    #[getter]
    fn pending(&mut self) -> PyResult<usize> {
        Ok(self.core()?.sq_pending())
    }
    /// Completions ready to be reaped.
    #[getter]
    fn cq_ready(&mut self) -> PyResult<usize> {
        Ok(self.core()?.cq_ready())
    }
    /// Ops whose final completion has not been reaped (skip_success ops excluded).
    #[getter]
    fn in_flight(&mut self) -> PyResult<usize> {
        Ok(self.core()?.in_flight())
    }
    /// io_uring_enter calls made to submit (for measuring batching).
    #[getter]
    fn submit_calls(&mut self) -> PyResult<u64> {
        Ok(self.core()?.submit_calls())
    }
    /// Times the kernel had to park completions because the CQ was full.
    #[getter]
    fn cq_overflow(&mut self) -> PyResult<u32> {
        Ok(self.core()?.cq_overflow_count())
    }

    /// The kernel's IORING_FEAT_* flags for this ring, as lower-case names.
    #[getter]
    fn features<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        let f = self.core()?.features();
        PyFrozenSet::new(py, f)
    }

    /// The setup options this ring was created with.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let c = &self.cfg;
        d.set_item("entries", c.entries)?;
        d.set_item("cq_entries", c.cq_entries)?;
        d.set_item("sqpoll", c.sqpoll)?;
        d.set_item("sq_thread_idle_ms", c.sq_thread_idle_ms)?;
        d.set_item("sq_thread_cpu", c.sq_thread_cpu)?;
        d.set_item("iopoll", c.iopoll)?;
        d.set_item("coop_taskrun", c.coop_taskrun)?;
        d.set_item("single_issuer", c.single_issuer)?;
        d.set_item("defer_taskrun", c.defer_taskrun)?;
        d.set_item("disabled", c.disabled)?;
        Ok(d)
    }

    /// Names of the opcodes this kernel supports (from IORING_REGISTER_PROBE, not from the
    /// version string). Callable on the class: `Ring.probe()`.
    #[staticmethod]
    fn probe<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        let r = PROBE.get_or_init(|| {
            let ring = uringkit_core::Ring::<()>::new(RingConfig {
                entries: 2,
                ..Default::default()
            })
            .map_err(|e| match e {
                SetupError::Invalid(m) => (libc::EINVAL, m),
                SetupError::Os { errno, message } => (errno, message),
            })?;
            ring.probe()
                .map_err(|e| (e.raw_os_error().unwrap_or(libc::EIO), e.to_string()))
        });
        match r {
            Ok(v) => PyFrozenSet::new(py, v.iter()),
            Err((errno, m)) => Err(os_error(*errno, m.clone())),
        }
    }

    /// Hand every queued SQE to the kernel; returns how many it took. The GIL is
    /// released meanwhile: ops that complete inline (page-cache reads, opens, statx…)
    /// run inside this call, and other threads run while they do.
    fn submit(&mut self, py: Python<'_>) -> PyResult<usize> {
        let core = self.core()?;
        py.detach(|| core.submit())
            .map_err(|e| io_error(e, "io_uring_enter (submit)"))
    }

    /// Submit what is queued, then block until at least `min_complete` completions are
    /// ready (or `timeout` seconds pass), with the GIL released. Returns every completion
    /// ready at that point (possibly more than `min_complete`; fewer on timeout). With
    /// nothing in flight and no `timeout` it returns at once (it never waits forever for
    /// completions that cannot come); with a `timeout` it waits that long, for messages
    /// other rings post with `msg_ring`.
    #[pyo3(signature = (min_complete=1, timeout=None))]
    fn wait(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = int::usize_min_complete)] min_complete: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Completion>> {
        let mut all = std::mem::take(&mut self.leftover);
        let mut out: Vec<Done<Keep>> = Vec::new();
        if let Err(e) = self.collect(
            py,
            min_complete.saturating_sub(all.len()),
            timeout,
            &mut out,
        ) {
            // Completions already taken off the ring are not lost: the next
            // wait()/completions()/dispatch() returns them first.
            all.extend(self.convert_all(py, out)?);
            self.leftover = all;
            return Err(e);
        }
        all.extend(self.convert_all(py, out)?);
        Ok(all)
    }

    /// Reap every ready completion without blocking (runs deferred task work when the ring
    /// uses DEFER_TASKRUN or COOP_TASKRUN says some is pending).
    #[pyo3(signature = (max=None))]
    fn completions(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = int::opt_usize_max)] max: Option<usize>,
    ) -> PyResult<Vec<Completion>> {
        let max = max.unwrap_or(usize::MAX);
        let mut all = std::mem::take(&mut self.leftover);
        if all.len() > max {
            self.leftover = all.split_off(max);
            return Ok(all);
        }
        let mut out = Vec::new();
        self.core()?
            .reap(&mut out, max - all.len())
            .map_err(|e| io_error(e, "io_uring_enter (reap)"))?;
        all.extend(self.convert_all(py, out)?);
        Ok(all)
    }

    /// Reap every ready completion without blocking, resolving futures directly: a final
    /// completion whose user_data is a key of `futures` is removed from it and its future
    /// gets `res` (an int) — or the Completion when `res` is negative, so the error keeps
    /// its explanation; futures already done (cancelled) are skipped. The other
    /// completions are returned, as `completions()` would. An event loop's hot path: one
    /// native call per wake-up instead of a Python loop over Completion objects.
    ///
    /// With a list as `wake`, a future whose only done-callback is waiting (the Task that
    /// awaits it) has that callback taken off before its result is set, and
    /// `(callback, future, context)` is appended to `wake` instead of being scheduled
    /// with `loop.call_soon`: the caller — a loop callback, never a running task — runs
    /// them (`context.run(callback, future)`) once this returns. That saves each woken
    /// task a Handle and a trip through the ready queue of asyncio's (Python) loop.
    ///
    /// With `min_complete` > 0 it first does what `wait(min_complete, timeout)` does —
    /// submit, then block (GIL released) until that many completions, resolved here or
    /// returned, are ready or `timeout` passes: an event loop's whole `select` in one
    /// call. If a signal handler raises meanwhile, what was reaped is not lost: its
    /// futures are resolved without `wake` (their callbacks scheduled the usual way),
    /// the other completions returned first by the next call.
    #[pyo3(signature = (futures, wake=None, min_complete=0, timeout=None))]
    fn dispatch(
        &mut self,
        py: Python<'_>,
        futures: &Bound<'_, pyo3::types::PyDict>,
        wake: Option<&Bound<'_, pyo3::types::PyList>>,
        #[pyo3(from_py_with = int::usize_min_complete)] min_complete: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Completion>> {
        let mut slow = std::mem::take(&mut self.leftover);
        let mut out = Vec::new();
        if min_complete > 0 {
            let want = min_complete.saturating_sub(slow.len());
            if let Err(e) = self.collect(py, want, timeout, &mut out) {
                // What was reaped is not lost: its futures resolved the plain way (their
                // callbacks scheduled — the caller will not run a wake list now), the
                // rest handed out first by the next call.
                self.resolve(py, futures, None, out, &mut slow)?;
                self.leftover = slow;
                return Err(e);
            }
        } else {
            self.core()?
                .reap(&mut out, usize::MAX)
                .map_err(|e| io_error(e, "io_uring_enter (reap)"))?;
        }
        self.resolve(py, futures, wake, out, &mut slow)?;
        Ok(slow)
    }

    /// An event loop's fast path for one read, the partner of `dispatch`: queue a READ of
    /// `nbytes` into `buf` at `offset` (READ_FIXED when `buf` is one of this ring's
    /// registered Buffers; user_data from the ring's own range), create a
    /// future by calling `new_future()` (e.g. `loop.create_future`), store it as
    /// `futures[user_data]` and return it.
    /// Whenever `early` SQEs are queued, they are submitted at once (so a wave of reads
    /// reaches the device while the loop is still queueing the rest); otherwise the
    /// caller submits. `dispatch(futures)` later sets the future to the bytes read (or
    /// the Completion of a failed read); to cancel, `cancel(user_data)` with the key.
    #[pyo3(signature = (fd, buf, nbytes, offset, new_future, futures, early=8))]
    #[allow(clippy::too_many_arguments)]
    fn read_future<'py>(
        &mut self,
        fd: &Bound<'py, PyAny>,
        buf: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = int::usize_nbytes)] nbytes: usize,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
        new_future: &Bound<'py, PyAny>,
        futures: &Bound<'py, PyDict>,
        #[pyo3(from_py_with = int::usize_early)] early: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let fut = new_future.call0()?;
        let ud = self.fast_ud;
        if let Ok(fixed) = buf.cast::<Buffer>() {
            // a registered buffer: READ_FIXED (no page pinning per read)
            self.fixed_rw(
                fd,
                fixed,
                offset,
                Some(nbytes),
                true,
                ud,
                SqeOpts::default(),
            )?;
        } else {
            self.read(
                fd,
                Some(buf),
                offset,
                Some(nbytes),
                None,
                false,
                0,
                ud,
                false,
                false,
                false,
                false,
                false,
            )?;
        }
        self.file_future(ud, &fut, futures, early)?;
        Ok(fut)
    }

    /// `read_future`'s partner for a read pool (`register_read_pool`): READ_FIXED of
    /// `nbytes` at `offset` into a pool buffer the ring lends, and dispatch resolves the
    /// future with the bytes read (a new bytes object; fewer than `nbytes` at end of file)
    /// or the Completion of a failed read. The buffer goes back to the pool when the
    /// completion has been handled — also after a cancel. None (nothing queued) when there
    /// is no pool, `nbytes` exceeds its buffer size, or every buffer is lent out.
    #[pyo3(signature = (fd, nbytes, offset, new_future, futures, early=8))]
    #[allow(clippy::too_many_arguments)]
    fn read_bytes_future<'py>(
        &mut self,
        fd: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = int::usize_nbytes)] nbytes: usize,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
        new_future: &Bound<'py, PyAny>,
        futures: &Bound<'py, PyDict>,
        #[pyo3(from_py_with = int::usize_early)] early: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(pool) = &self.read_pool else {
            return Ok(None);
        };
        if nbytes > pool.bufs.size {
            return Ok(None);
        }
        let Some(index) = pool.free.lock().ok().and_then(|mut f| f.pop()) else {
            return Ok(None);
        };
        let lease = Lease {
            bufs: pool.bufs.clone(),
            free: pool.free.clone(),
            index,
        };
        let fd = fd_arg(fd, "fd")?;
        let off = offset_arg(offset)?;
        let fut = new_future.call0()?;
        let ud = self.fast_ud;
        let ptr = lease.bufs.ptr(index as usize);
        let keep = Keep::Lease(lease);
        self.queue_fixed(
            fd,
            (ptr, nbytes, index),
            off,
            true,
            keep,
            ud,
            SqeOpts::default(),
        )?;
        self.file_future(ud, &fut, futures, early)?;
        Ok(Some(fut))
    }

    // ----- ops -------------------------------------------------------------------------

    /// Queue a message to another ring (MSG_RING): a completion with `res` and
    /// `user_data=data` appears in `target` (a Ring, or a ring's fd) without any op of its
    /// own — how one thread wakes another's ring (pass that ring's `fileno()`, taken
    /// before its thread blocks in `wait()`: a Ring in use by another thread cannot be
    /// borrowed). This op completes with 0 here (or -EBADFD / -EOVERFLOW when the target
    /// cannot take it). `data` is at most 2**62 - 1.
    #[pyo3(signature = (target, res=0, *, data=0, user_data=0, link=false, hardlink=false,
        drain=false, async_=false, skip_success=false))]
    #[allow(clippy::too_many_arguments)]
    fn msg_ring(
        mut slf: PyRefMut<'_, Self>,
        target: &Bound<'_, PyAny>,
        res: i32,
        #[pyo3(from_py_with = int::u64_data)] data: u64,
        #[pyo3(from_py_with = int::u64_user_data)] user_data: u64,
        link: bool,
        hardlink: bool,
        drain: bool,
        async_: bool,
        skip_success: bool,
    ) -> PyResult<()> {
        if data > op::msg::MSG_MASK {
            return Err(pyo3::exceptions::PyOverflowError::new_err(format!(
                "data must be between 0 and 2**62 - 1 (got {data}): the top bits mark a \
                 message in the receiving ring"
            )));
        }
        let ring_fd = if target.as_ptr() == slf.as_ptr() {
            slf.core()?.fd()
        } else if let Ok(r) = target.cast::<Ring>() {
            let mut other = r.try_borrow_mut().map_err(|_| {
                PyRuntimeError::new_err(
                    "the target Ring is busy in another thread (e.g. blocked in wait()): pass \
                     its fileno(), taken before that thread started, as target",
                )
            })?;
            other.core()?.fd()
        } else {
            target.extract::<i32>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(
                    "target must be a Ring or a ring's file descriptor (Ring.fileno())",
                )
            })?
        };
        slf.queue(
            op::msg::msg_ring(ring_fd, res, data),
            Slot::new(user_data, 0, Keep::None),
            opts(link, hardlink, drain, async_, skip_success),
        )
    }

    /// Read `len(offsets)` blocks of `size` bytes in one call: block i comes from file
    /// offset `offsets[i]` into `buf[i*size:(i+1)*size]`. All reads are queued, submitted
    /// together and waited for with the GIL released; returns each read's result in
    /// order (bytes read, or -errno). If `buf` is a registered `Buffer`, read_fixed is
    /// used. This is the MultiGet pattern: one round trip for many small reads.
    ///
    /// With `helper=True` (the default), a batch of 16 or more reads of a plain fd (not
    /// `Fixed`, not O_DIRECT) on a ring without SQPOLL/IOPOLL is shared with uringkit's
    /// read helper thread, which reads the page-cache hits of its share on a second
    /// core; anything it could not read whole is redone on this ring, so the results
    /// are the same. `helper=False` (or `URINGKIT_READ_HELPER=0`) keeps every read on
    /// this ring.
    #[pyo3(signature = (fd, buf, offsets, size, *, helper=true))]
    fn read_batch(
        &mut self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, PyAny>,
        offsets: Vec<i64>,
        #[pyo3(from_py_with = int::usize_size)] size: usize,
        helper: bool,
    ) -> PyResult<Vec<i32>> {
        self.batch(py, fd, buf, offsets, size, true, helper)
    }

    /// Write `len(offsets)` blocks of `size` bytes from `buf` (block i to file offset
    /// `offsets[i]`) in one call, GIL released while waiting; returns each result in order.
    #[pyo3(signature = (fd, buf, offsets, size))]
    fn write_batch(
        &mut self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, PyAny>,
        offsets: Vec<i64>,
        #[pyo3(from_py_with = int::usize_size)] size: usize,
    ) -> PyResult<Vec<i32>> {
        self.batch(py, fd, buf, offsets, size, false, false)
    }

    // ----- registration ----------------------------------------------------------------

    /// Register `fds` as the fixed file table (use `Fixed(i)` in place of `fds[i]`);
    /// -1 entries are empty slots.
    fn register_files(&mut self, fds: Vec<i32>) -> PyResult<()> {
        if fds.is_empty() {
            return Err(PyValueError::new_err(
                "register_files needs at least one fd",
            ));
        }
        let n = fds.len() as u32;
        let core = self.core()?;
        core.raw()
            .submitter()
            .register_files(&fds)
            .map_err(|e| register_error(e, "register_files", n))?;
        self.files = Some(n);
        Ok(())
    }

    /// Register an empty fixed file table of `count` slots (fill with update_files, or
    /// openat/socket/accept with `fixed_slot=`).
    fn register_files_sparse(
        &mut self,
        #[pyo3(from_py_with = int::u32_count)] count: u32,
    ) -> PyResult<()> {
        if count == 0 {
            return Err(PyValueError::new_err("count must be at least 1"));
        }
        let core = self.core()?;
        core.raw()
            .submitter()
            .register_files_sparse(count)
            .map_err(|e| register_error(e, "register_files_sparse", count))?;
        self.files = Some(count);
        Ok(())
    }

    /// Replace fixed file slots starting at `offset` with `fds` (-1 clears a slot).
    /// Returns how many slots were updated.
    fn update_files(
        &mut self,
        #[pyo3(from_py_with = int::u32_offset)] offset: u32,
        fds: Vec<i32>,
    ) -> PyResult<usize> {
        let Some(n) = self.files else {
            return Err(PyValueError::new_err(
                "no file table: call register_files or register_files_sparse first",
            ));
        };
        if offset as usize + fds.len() > n as usize {
            return Err(PyValueError::new_err(format!(
                "offset {offset} + {} fds exceeds the table of {n} slots",
                fds.len()
            )));
        }
        let core = self.core()?;
        core.raw()
            .submitter()
            .register_files_update(offset, &fds)
            .map_err(|e| register_error(e, "update_files", n))
    }

    /// Restrict what this ring may do (`IORING_REGISTER_RESTRICTIONS`): only the SQE
    /// opcodes named in `ops` (names as in `Ring.probe()`), only the `io_uring_register`
    /// operations named in `register` (liburing's names: "register_files",
    /// "register_buffers", "register_eventfd", ...), SQEs only with flags among
    /// `allowed_flags` (default: all of "fixed_file", "drain", "link", "hardlink",
    /// "async", "buffer_select", "skip_success") and with every flag in
    /// `required_flags`. Only on a ring created with `disabled=True`, once, before
    /// `enable()`. A refused SQE completes with -EACCES; a refused registration raises
    /// PermissionError.
    #[pyo3(signature = (ops, *, register=Vec::new(), allowed_flags=None, required_flags=Vec::new()))]
    fn restrict(
        &mut self,
        ops: Vec<String>,
        register: Vec<String>,
        allowed_flags: Option<Vec<String>>,
        required_flags: Vec<String>,
    ) -> PyResult<()> {
        let lookup = |names: &[String], table: &[(&str, u8)], what: &str| -> PyResult<Vec<u8>> {
            names
                .iter()
                .map(|n| {
                    table.iter().find(|t| t.0 == n).map(|t| t.1).ok_or_else(|| {
                        let known: Vec<&str> = table.iter().map(|t| t.0).collect();
                        PyValueError::new_err(format!(
                            "{what}: unknown name '{n}' (known: {})",
                            known.join(", ")
                        ))
                    })
                })
                .collect()
        };
        let op_table: Vec<(&str, u8)> = OPS.iter().map(|o| (o.name, o.code)).collect();
        let flags = |v: Vec<u8>| v.into_iter().fold(0u8, |a, f| a | f);
        let r = register::Restrictions {
            ops: lookup(&ops, &op_table, "ops")?,
            register_ops: lookup(&register, register::REGISTER_OPS, "register")?,
            flags_allowed: match allowed_flags {
                None => register::ALL_SQE_FLAGS,
                Some(f) => flags(lookup(&f, register::SQE_FLAGS, "allowed_flags")?),
            },
            flags_required: flags(lookup(
                &required_flags,
                register::SQE_FLAGS,
                "required_flags",
            )?),
        };
        if !self.cfg.disabled {
            return Err(PyRuntimeError::new_err(
                "restrict() needs a ring created with disabled=True (restrictions are set before \
                 the ring takes its first submission)",
            ));
        }
        let core = self.core()?;
        register::restrict(&core.raw().submitter(), &r).map_err(|e| match e.raw_os_error() {
            Some(libc::EBADFD) => os_error(
                libc::EBADFD,
                "restrict: the ring is enabled already; restrictions go before enable()",
            ),
            Some(libc::EBUSY) => os_error(
                libc::EBUSY,
                "restrict: this ring has restrictions already (they can be set once)",
            ),
            _ => io_error(e, "register_restrictions"),
        })
    }

    /// Register the calling thread's current credentials (`io_uring_register_personality`)
    /// and return their id: ops queued while `ring.personality` is that id run with them,
    /// whatever credentials the submitter has by then (a server that drops privileges can
    /// still open what its saved identity may).
    fn register_personality(&mut self) -> PyResult<u16> {
        let core = self.core()?;
        core.raw()
            .submitter()
            .register_personality()
            .map_err(|e| io_error(e, "register_personality"))
    }

    /// Forget a registered personality; ops already queued with it keep it.
    fn unregister_personality(
        &mut self,
        #[pyo3(from_py_with = int::u16_personality)] id: u16,
    ) -> PyResult<()> {
        let core = self.core()?;
        core.raw()
            .submitter()
            .unregister_personality(id)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EINVAL) => os_error(
                    libc::EINVAL,
                    format!("unregister_personality: no personality {id} on this ring"),
                ),
                _ => io_error(e, "unregister_personality"),
            })
    }

    /// The personality (from `register_personality()`) every op queued from now on runs
    /// with; 0 (the default): the submitting thread's own credentials. An id the ring
    /// does not have makes those ops complete with -EINVAL.
    #[getter]
    fn get_personality(&mut self) -> PyResult<u16> {
        Ok(self.core()?.personality())
    }

    #[setter]
    fn set_personality(
        &mut self,
        #[pyo3(from_py_with = int::u16_personality)] id: u16,
    ) -> PyResult<()> {
        self.core()?.set_personality(id);
        Ok(())
    }

    /// Start a ring created with `disabled=True` (`IORING_REGISTER_ENABLE_RINGS`): it
    /// takes submissions from now on, under the restrictions given to `restrict()`.
    fn enable(&mut self) -> PyResult<()> {
        let core = self.core()?;
        register::enable(&core.raw().submitter()).map_err(|e| match e.raw_os_error() {
            Some(libc::EBADFD) => os_error(libc::EBADFD, "enable: the ring is enabled already"),
            _ => io_error(e, "register_enable_rings"),
        })
    }

    /// Cap the io-wq worker threads that run this ring's blocking work
    /// (`IORING_REGISTER_IOWQ_MAX_WORKERS`): `bounded` for regular files and block
    /// devices, `unbounded` for the rest (sockets, pipes); 0 keeps a limit as it is.
    /// Returns the limits in force before, so `ring.iowq_max_workers()` just reads them.
    /// The pool belongs to the thread that submits, so the caps cover all its rings.
    #[pyo3(signature = (bounded=0, unbounded=0))]
    fn iowq_max_workers(
        &mut self,
        #[pyo3(from_py_with = int::u32_bounded)] bounded: u32,
        #[pyo3(from_py_with = int::u32_unbounded)] unbounded: u32,
    ) -> PyResult<(u32, u32)> {
        let core = self.core()?;
        register::iowq_max_workers(&core.raw().submitter(), bounded, unbounded)
            .map_err(|e| io_error(e, "register_iowq_max_workers"))
    }

    /// Run this ring's io-wq workers on `cpus` only (`IORING_REGISTER_IOWQ_AFF`);
    /// `None` gives them back the submitting thread's affinity.
    #[pyo3(signature = (cpus))]
    fn iowq_affinity(&mut self, cpus: Option<Vec<usize>>) -> PyResult<()> {
        if let Some(c) = &cpus {
            if c.is_empty() {
                return Err(PyValueError::new_err(
                    "cpus must name at least one CPU (None resets the affinity)",
                ));
            }
            if let Some(bad) = c.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
                return Err(PyValueError::new_err(format!(
                    "cpus: {bad} is beyond the largest CPU number ({})",
                    libc::CPU_SETSIZE - 1
                )));
            }
        }
        let core = self.core()?;
        register::iowq_affinity(&core.raw().submitter(), cpus.as_deref())
            .map_err(|e| io_error(e, "register_iowq_aff"))
    }

    /// Busy-poll the network queues of this ring's sockets for up to `busy_poll_us`
    /// microseconds while waiting for completions (`IORING_REGISTER_NAPI`, kernel 6.9+;
    /// `prefer_busy_poll`: prefer polling over interrupts). Lowers receive latency at the
    /// price of a busy CPU; only sockets on NAPI-capable devices are polled.
    #[pyo3(signature = (busy_poll_us, *, prefer_busy_poll=false))]
    fn register_napi(
        &mut self,
        #[pyo3(from_py_with = int::u32_busy_poll_us)] busy_poll_us: u32,
        prefer_busy_poll: bool,
    ) -> PyResult<()> {
        let core = self.core()?;
        register::napi(&core.raw().submitter(), busy_poll_us, prefer_busy_poll)
            .map_err(|e| io_error(e, "register_napi"))
    }

    /// Stop NAPI busy polling.
    fn unregister_napi(&mut self) -> PyResult<()> {
        let core = self.core()?;
        register::napi_off(&core.raw().submitter()).map_err(|e| io_error(e, "unregister_napi"))
    }

    /// Have the kernel signal `fd` (an eventfd) whenever a completion is posted: the way an
    /// event loop learns that `completions()` has work (`loop.add_reader(fd, ...)`).
    /// `async_only=True` signals only for ops that did not complete inline.
    #[pyo3(signature = (fd, *, async_only=false))]
    fn register_eventfd(
        &mut self,
        #[pyo3(from_py_with = int::i32_fd)] fd: i32,
        async_only: bool,
    ) -> PyResult<()> {
        let core = self.core()?;
        let sub = core.raw().submitter();
        let r = if async_only {
            sub.register_eventfd_async(fd)
        } else {
            sub.register_eventfd(fd)
        };
        r.map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => os_error(
                libc::EBUSY,
                "register_eventfd: an eventfd is already registered; unregister_eventfd() first",
            ),
            _ => io_error(e, "register_eventfd"),
        })
    }

    /// Stop signalling the registered eventfd.
    fn unregister_eventfd(&mut self) -> PyResult<()> {
        let core = self.core()?;
        core.raw()
            .submitter()
            .unregister_eventfd()
            .map_err(|e| io_error(e, "unregister_eventfd"))
    }

    /// Drop the fixed file table.
    fn unregister_files(&mut self) -> PyResult<()> {
        let core = self.core()?;
        core.raw()
            .submitter()
            .unregister_files()
            .map_err(|e| io_error(e, "unregister_files"))?;
        self.files = None;
        Ok(())
    }

    /// Allocate `count` page-aligned buffers of `size` bytes and register them with the
    /// kernel (pinned memory, charged to RLIMIT_MEMLOCK unless the process has
    /// CAP_IPC_LOCK). Returns them as `Buffer` objects for read_fixed/write_fixed.
    fn register_buffers(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = int::usize_count)] count: usize,
        #[pyo3(from_py_with = int::usize_size)] size: usize,
    ) -> PyResult<Vec<Py<Buffer>>> {
        let pool = self.register_fixed(count, size, "register_buffers")?;
        (0..count)
            .map(|i| {
                Py::new(
                    py,
                    Buffer {
                        pool: pool.clone(),
                        index: i as u16,
                    },
                )
            })
            .collect()
    }

    /// Unregister the fixed buffers (the Buffer objects stay valid as plain memory).
    fn unregister_buffers(&mut self) -> PyResult<()> {
        let has_fixed = self.fixed.is_some();
        let core = self.core()?;
        if core.holding() > 0 && has_fixed {
            return Err(PyValueError::new_err(
                "cannot unregister buffers while ops are in flight; wait for them first",
            ));
        }
        core.raw()
            .submitter()
            .unregister_buffers()
            .map_err(|e| io_error(e, "unregister_buffers"))?;
        self.fixed = None;
        self.read_pool = None;
        Ok(())
    }

    /// Register `count` buffers of `size` bytes as a pool the ring lends to
    /// `read_bytes_future` reads (READ_FIXED: no page pinning per read; page-aligned, so
    /// O_DIRECT-safe). Takes the ring's buffer table: not with `register_buffers`.
    fn register_read_pool(
        &mut self,
        #[pyo3(from_py_with = int::usize_count)] count: usize,
        #[pyo3(from_py_with = int::usize_size)] size: usize,
    ) -> PyResult<()> {
        if count > u16::MAX as usize + 1 {
            return Err(PyValueError::new_err(format!(
                "count must be at most 65536 (got {count})"
            )));
        }
        let bufs = self.register_fixed(count, size, "register_read_pool")?;
        let free = (0..count).rev().map(|i| i as u16).collect();
        self.read_pool = Some(ReadPool {
            bufs,
            free: Arc::new(Mutex::new(free)),
        });
        Ok(())
    }

    /// Buffers of the read pool not lent to a read in flight (None: no pool).
    #[getter]
    fn read_pool_free(&self) -> Option<usize> {
        self.read_pool
            .as_ref()
            .map(|p| p.free.lock().map_or(0, |f| f.len()))
    }

    /// Create and register a provided-buffer ring of `count` buffers of `size` bytes as
    /// buffer group `group_id` (kernel 5.19+). Use it with recv/read `buffer_ring=`.
    fn buffer_ring(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = int::u16_group_id)] group_id: u16,
        #[pyo3(from_py_with = int::u16_count)] count: u16,
        #[pyo3(from_py_with = int::usize_size)] size: usize,
    ) -> PyResult<Py<BufferRing>> {
        if self.buf_rings.contains_key(&group_id) {
            return Err(PyValueError::new_err(format!(
                "buffer group {group_id} already exists on this ring"
            )));
        }
        let br = BufRing::new(group_id, count, size)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let core = self.core()?;
        br.register(core.raw())
            .map_err(|e| {
                match e.raw_os_error() {
            Some(libc::EINVAL) => os_error(
                libc::EINVAL,
                "IORING_REGISTER_PBUF_RING failed (EINVAL): provided-buffer rings need Linux 5.19+",
            ),
            Some(libc::ENOMEM) => os_error(
                libc::ENOMEM,
                format!(
                    "buffer_ring: the kernel could not pin the ring (ENOMEM); RLIMIT_MEMLOCK is {}",
                    memlock_text()
                ),
            ),
            _ => io_error(e, "buffer_ring"),
        }
            })?;
        let obj = Py::new(
            py,
            BufferRing {
                inner: Arc::new(Mutex::new(br)),
                group_id,
                size,
                count,
            },
        )?;
        self.buf_rings.insert(group_id, obj.clone_ref(py));
        Ok(obj)
    }

    fn __repr__(&mut self) -> String {
        match &mut self.core {
            None => "Ring(closed)".to_string(),
            Some(c) => format!(
                "Ring(entries={}, cq_entries={}, in_flight={}, flags={:?})",
                c.sq_entries(),
                c.cq_entries(),
                c.in_flight(),
                self.cfg.flag_names()
            ),
        }
    }
}

impl Ring {
    #[allow(clippy::too_many_arguments)]
    fn batch(
        &mut self,
        py: Python<'_>,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, PyAny>,
        offsets: Vec<i64>,
        size: usize,
        read: bool,
        helper: bool,
    ) -> PyResult<Vec<i32>> {
        let fd = fd_arg(fd, "fd")?;
        let n = offsets.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let size32 =
            u32::try_from(size).map_err(|_| PyValueError::new_err("size must be below 4 GiB"))?;
        if size == 0 {
            return Err(PyValueError::new_err("size must be at least 1 byte"));
        }
        let fixed_index = match buf.cast::<Buffer>() {
            Ok(b) => {
                self.fixed_buffer(b)?;
                Some(b.get().index)
            }
            Err(_) => None,
        };
        let pb = if read {
            writable_buffer(buf, "buf")?
        } else {
            read_only_buffer(buf, "buf")?
        };
        let need = n
            .checked_mul(size)
            .ok_or_else(|| PyValueError::new_err("len(offsets) * size overflows"))?;
        if pb.len_bytes() < need {
            return Err(PyValueError::new_err(format!(
                "buf holds {} bytes but {n} blocks of {size} need {need}",
                pb.len_bytes()
            )));
        }
        let offs: Vec<u64> = offsets
            .iter()
            .map(|&o| offset_arg(o))
            .collect::<PyResult<_>>()?;
        let base = pb.buf_ptr() as *mut u8;
        let shared = Arc::new(pb);
        self.batches += 1;
        let id = self.batches;
        let mut results = vec![i32::MIN; n];
        let mut remaining = n;
        // A large batch of reads of a plain fd on a plain ring is shared with the read
        // helper thread (a second core copying pages; see uringkit_core::sys::helper):
        // this thread queues the chunks it claims on this ring, the helper reads the
        // others on its own without waiting for the disk. What the helper did not read
        // whole (not cached, end of file, an error) is redone here, so results are what
        // this ring alone would give.
        let share_fd = match fd {
            FdArg::Raw(raw)
                if read
                    && helper
                    && n >= uringkit_core::sys::helper::MIN_BATCH
                    && !self.cfg.sqpoll
                    && !self.cfg.iopoll
                    && !is_direct(raw) =>
            {
                Some(raw)
            }
            _ => None,
        };
        let reqs: Vec<(*mut u8, usize, u64)> = match share_fd {
            // SAFETY: i * size + size <= need <= the buffer's length (checked above).
            Some(_) => (0..n)
                .map(|i| (unsafe { base.add(i * size) }, size, offs[i]))
                .collect(),
            None => Vec::new(),
        };
        // SAFETY: every request is a distinct block of `buf`, which `shared` keeps alive
        // (and nothing else uses) until the sharing is finished below — also on an early
        // error return, where dropping it waits for the helper.
        let sharing =
            share_fd.and_then(|raw| unsafe { uringkit_core::sys::helper::share(raw, &reqs) });
        let one = |i: usize| {
            // SAFETY: i * size + size <= need <= the buffer's length (checked above).
            let p = unsafe { base.add(i * size) };
            let e = match (read, fixed_index) {
                (true, None) => op::rw::read(fd, p, size32, offs[i], 0),
                (false, None) => op::rw::write(fd, p, size32, offs[i], 0),
                (true, Some(ix)) => op::rw::read_fixed(fd, p, size32, ix, offs[i]),
                (false, Some(ix)) => op::rw::write_fixed(fd, p, size32, ix, offs[i]),
            };
            let mut slot = Slot::new(i as u64, 0, Keep::Batch(shared.clone(), id));
            slot.io = IoInfo::new(raw_of(fd), p as u64, size as u64, offs[i]);
            (e, slot)
        };
        match sharing {
            Some(s) => {
                while let Some(r) = s.claim() {
                    for i in r {
                        let (e, slot) = one(i);
                        self.queue(e, slot, SqeOpts::default())?;
                    }
                    let core = self.core()?;
                    py.detach(|| core.submit())
                        .map_err(|e| io_error(e, "io_uring_enter (submit)"))?;
                }
                for (i, r) in s.finish().into_iter().enumerate() {
                    if r == size as i64 {
                        results[i] = r as i32;
                        remaining -= 1;
                    } else if r != uringkit_core::sys::helper::CALLERS {
                        let (e, slot) = one(i);
                        self.queue(e, slot, SqeOpts::default())?;
                    }
                }
            }
            None => {
                for i in 0..n {
                    let (e, slot) = one(i);
                    self.queue(e, slot, SqeOpts::default())?;
                }
            }
        }
        drop(shared);
        let mut out: Vec<Done<Keep>> = Vec::with_capacity(n);
        let mut others = Vec::new();
        let core = self.core()?;
        // GIL released: page-cache hits are copied inside this call, and other threads
        // (another ring's batch included) can run meanwhile
        py.detach(|| core.submit())
            .map_err(|e| io_error(e, "io_uring_enter (submit)"))?;
        while remaining > 0 {
            out.clear();
            core.reap(&mut out, usize::MAX)
                .map_err(|e| io_error(e, "io_uring_enter (reap)"))?;
            if out.is_empty() {
                let c: &CoreRing = core;
                let want = remaining.min(c.cq_entries() as usize);
                // An EINTR just loops: the batch's buffer must not be handed back while
                // the kernel uses it, and file I/O finishes promptly. Signals are checked
                // once the batch is done.
                py.detach(|| c.wait_cqes(want, None))
                    .map_err(|e| io_error(e, "io_uring_enter (wait)"))?;
                continue;
            }
            for d in out.drain(..) {
                let mine =
                    matches!(&d.slot, Some(Slot { keep: Keep::Batch(_, b), .. }) if *b == id);
                if mine {
                    results[d.user_data as usize] = d.res;
                    remaining -= 1;
                } else {
                    others.push(d);
                }
            }
        }
        if !others.is_empty() {
            let got = self.convert_all(py, others)?;
            self.leftover.extend(got);
        }
        py.check_signals()?;
        Ok(results)
    }

    fn vectored(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        offset: i64,
        read: bool,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        let fd = fd_arg(fd, "fd")?;
        let off = offset_arg(offset)?;
        let (bufs, iov) = iovecs(buffers, read)?;
        let (p, n) = (iov.as_ptr(), iov.len() as u32);
        let total: u64 = iov.iter().map(|v| v.iov_len as u64).sum();
        let first = iov.first().map(|v| v.iov_base as u64).unwrap_or(0);
        let mut slot = Slot::new(user_data, 0, Keep::Bufs(bufs));
        slot.owned = Owned::Iovecs(iov);
        slot.io = IoInfo::new(raw_of(fd), first, total, off);
        let e = if read {
            op::rw::readv(fd, p, n, off)
        } else {
            op::rw::writev(fd, p, n, off)
        };
        self.queue(e, slot, o)
    }

    /// READV_FIXED / WRITEV_FIXED over `(start, length)` ranges of a registered Buffer.
    #[allow(clippy::too_many_arguments)]
    fn vectored_fixed(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, Buffer>,
        ranges: &[(usize, usize)],
        offset: i64,
        read: bool,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        let fd = fd_arg(fd, "fd")?;
        let off = offset_arg(offset)?;
        self.fixed_buffer(buf)?;
        let b = buf.get();
        let size = b.pool.size;
        if ranges.is_empty() || ranges.len() > 1024 {
            return Err(PyValueError::new_err(format!(
                "ranges must list 1 to 1024 (start, length) pairs (got {})",
                ranges.len()
            )));
        }
        for (i, &(start, len)) in ranges.iter().enumerate() {
            if start.checked_add(len).is_none_or(|end| end > size) {
                return Err(PyValueError::new_err(format!(
                    "ranges[{i}] = ({start}, {len}) reaches past the end of buf ({size} bytes)"
                )));
            }
        }
        let base = b.ptr();
        let iov: Box<[libc::iovec]> = ranges
            .iter()
            .map(|&(start, len)| libc::iovec {
                // (start + len <= size: checked above)
                iov_base: base.wrapping_add(start).cast(),
                iov_len: len,
            })
            .collect();
        let (p, n) = (iov.as_ptr(), iov.len() as u32);
        let total: u64 = ranges.iter().map(|r| r.1 as u64).sum();
        let mut slot = Slot::new(user_data, 0, Keep::Obj(buf.clone().into_any().unbind()));
        slot.io = IoInfo::new(raw_of(fd), iov[0].iov_base as u64, total, off);
        slot.owned = Owned::Iovecs(iov);
        let e = if read {
            op::rw::readv_fixed(fd, p, n, b.index, off)
        } else {
            op::rw::writev_fixed(fd, p, n, b.index, off)
        };
        self.queue(e, slot, o)
    }

    #[allow(clippy::too_many_arguments)]
    fn fixed_rw(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, Buffer>,
        offset: i64,
        nbytes: Option<usize>,
        read: bool,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        let fd = fd_arg(fd, "fd")?;
        let off = offset_arg(offset)?;
        self.fixed_buffer(buf)?;
        let b = buf.get();
        let len = io_len(b.pool.size, nbytes, "buf")? as usize;
        let keep = Keep::Obj(buf.clone().into_any().unbind());
        self.queue_fixed(fd, (b.ptr(), len, b.index), off, read, keep, user_data, o)
    }

    /// `buf` as one of this ring's registered Buffers (and the length to transfer), when
    /// it is one and no rw_flags ask for what only READ/WRITE take: read() and write()
    /// then queue READ_FIXED/WRITE_FIXED themselves.
    fn own_buffer<'py>(
        &self,
        buf: &Bound<'py, PyAny>,
        nbytes: Option<usize>,
        rw_flags: i32,
    ) -> PyResult<Option<(Bound<'py, Buffer>, usize)>> {
        if rw_flags != 0 {
            return Ok(None);
        }
        match buf.cast::<Buffer>() {
            Ok(fb) if self.fixed_buffer(fb).is_ok() => {
                let len = io_len(fb.get().pool.size, nbytes, "buf")? as usize;
                Ok(Some((fb.clone(), len)))
            }
            _ => Ok(None),
        }
    }

    /// Queue SENDMSG (or SENDMSG_ZC) of `buffers`, optionally to `address`.
    #[allow(clippy::too_many_arguments)]
    fn queue_sendmsg(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        address: Option<&Bound<'_, PyAny>>,
        flags: u32,
        user_data: u64,
        o: SqeOpts,
        zc: bool,
    ) -> PyResult<()> {
        let fd = fd_arg(fd, "fd")?;
        let (bufs, iov) = iovecs(buffers, false)?;
        let addr = address.map(sockaddr_arg).transpose()?.map(Box::new);
        let msg = msg_store(iov, addr);
        let p = &msg.hdr as *const libc::msghdr;
        let mut slot = Slot::new(user_data, 0, Keep::Bufs(bufs));
        slot.owned = Owned::Msg(msg);
        let e = if zc {
            op::net::sendmsg_zc(fd, p, flags)
        } else {
            op::net::sendmsg(fd, p, flags)
        };
        self.queue(e, slot, o)
    }

    /// Queue one of the four xattr ops: by file when `target` is an fd (int, Fixed,
    /// fileno()), else by path; `what` is Ok((value, flags)) for a set (the value
    /// copied), Err(size) for a get into a `size`-byte buffer.
    fn xattr(
        &mut self,
        target: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        what: Result<(&Bound<'_, PyAny>, i32), usize>,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        let by_path = target.is_instance_of::<pyo3::types::PyString>()
            || target.is_instance_of::<pyo3::types::PyBytes>()
            || target.hasattr(pyo3::intern!(target.py(), "__fspath__"))?;
        let (fd, path) = if by_path {
            (None, Some(path_arg(target)?))
        } else {
            (Some(fd_arg(target, "path")?), None)
        };
        let name = path_arg(name).map_err(|_| {
            PyValueError::new_err("name must be a str or bytes attribute name (e.g. 'user.tag')")
        })?;
        let (mut data, flags): (Box<[u8]>, i32) = match what {
            Ok((v, flags)) => {
                let vb = read_only_buffer(v, "value")?;
                // SAFETY: the buffer protocol guarantees len_bytes() readable bytes at
                // buf_ptr() while `vb` (the export) is alive; they are copied at once.
                let bytes = unsafe {
                    std::slice::from_raw_parts(vb.buf_ptr() as *const u8, vb.len_bytes())
                };
                (bytes.into(), flags)
            }
            Err(size) => (vec![0u8; size].into_boxed_slice(), 0),
        };
        let len = u32::try_from(data.len())
            .map_err(|_| PyValueError::new_err("value/size must be below 4 GiB"))?;
        let (np, pp, vp) = (
            name.as_ptr(),
            path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
            data.as_mut_ptr(),
        );
        let e = match (fd, what.is_ok()) {
            (Some(fd), false) => op::xattr::fgetxattr(fd, np, vp, len),
            (Some(fd), true) => op::xattr::fsetxattr(fd, np, vp, len, flags),
            (None, false) => op::xattr::getxattr(pp, np, vp, len),
            (None, true) => op::xattr::setxattr(pp, np, vp, len, flags),
        };
        let mut slot = Slot::new(user_data, 0, Keep::None);
        // (the CStrings and the boxed value do not move when the slot does)
        slot.owned = Owned::Xattr(name, path, data);
        self.queue(e, slot, o)
    }

    /// Queue READ_FIXED/WRITE_FIXED of `len` bytes at `ptr` in registered buffer `index`
    /// (`buf` = (ptr, len, index); len <= the buffer's size, which the kernel limits to
    /// 1 GiB), the memory held by `keep`.
    #[allow(clippy::too_many_arguments)]
    fn queue_fixed(
        &mut self,
        fd: FdArg,
        buf: (*mut u8, usize, u16),
        off: u64,
        read: bool,
        keep: Keep,
        user_data: u64,
        o: SqeOpts,
    ) -> PyResult<()> {
        let (ptr, len, index) = buf;
        let mut slot = Slot::new(user_data, 0, keep);
        slot.io = IoInfo::new(raw_of(fd), ptr as u64, len as u64, off);
        let e = if read {
            op::rw::read_fixed(fd, ptr, len as u32, index, off)
        } else {
            op::rw::write_fixed(fd, ptr, len as u32, index, off)
        };
        self.queue(e, slot, o)
    }

    /// File a fast-path read's future under `ud` and submit once `early` SQEs are queued.
    fn file_future(
        &mut self,
        ud: u64,
        fut: &Bound<'_, PyAny>,
        futures: &Bound<'_, PyDict>,
        early: usize,
    ) -> PyResult<()> {
        self.fast_ud = ud + 1;
        futures.set_item(ud, fut)?;
        let core = self.core()?;
        if core.sq_pending() >= early.max(1) {
            core.submit()
                .map_err(|e| io_error(e, "io_uring_enter (submit)"))?;
        }
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.core.is_some() {
            Python::attach(|py| {
                let _ = self.shutdown_ring(py);
            });
        }
    }
}

// (the defaults in the signatures above are literals so that Python shows them)
const _: () = assert!(op::xattr::XATTR_SIZE_MAX == 65536);
const _: () = assert!(op::futex::FUTEX_BITSET_MATCH_ANY == 4294967295);
// Default futex flags: a 32-bit word, *shared* (not FUTEX2_PRIVATE): on kernels with a
// per-process private futex hash (6.16+), a private wait queued through io_uring while
// the process has one thread stays in the global hash, and once a second thread starts
// private wakes look in the new per-process hash only — the wait is never woken. Shared
// futexes always use the global hash.
const _: () = assert!(op::futex::FUTEX2_SIZE_U32 == 2);

/// The futex word at the start of `buf`: a writable, 4-byte aligned buffer of at least
/// 4 bytes, held (the returned buffer) until the op completes.
fn futex_word(buf: &Bound<'_, PyAny>) -> PyResult<(PyUntypedBuffer, *const u32)> {
    let b = writable_buffer(buf, "buf")?;
    let p = b.buf_ptr() as *const u32;
    if b.len_bytes() < 4 || !(p as usize).is_multiple_of(4) {
        return Err(PyValueError::new_err(
            "buf must be writable memory of at least 4 bytes starting on a 4-byte boundary \
             (the 32-bit futex word; e.g. a bytearray(4) or an mmap)",
        ));
    }
    Ok((b, p))
}

/// Whether `fd` was opened with O_DIRECT (its reads go to the device: nothing for the
/// read helper to copy).
fn is_direct(fd: i32) -> bool {
    // SAFETY: F_GETFL only reads the descriptor's flags; a bad fd gives -1.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl == -1 || fl & libc::O_DIRECT != 0
}

fn raw_of(fd: FdArg) -> Option<i32> {
    match fd {
        FdArg::Raw(r) => Some(r),
        FdArg::Fixed(_) => None,
    }
}

fn check_seconds(s: f64) -> PyResult<()> {
    if s.is_finite() && s >= 0.0 {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "seconds must be a finite number >= 0 (got {s})"
        )))
    }
}

fn iovecs(
    buffers: &Bound<'_, PyAny>,
    writable: bool,
) -> PyResult<(Vec<PyUntypedBuffer>, Box<[libc::iovec]>)> {
    let mut bufs = Vec::new();
    for (i, item) in buffers.try_iter()?.enumerate() {
        let item = item?;
        let what = format!("buffers[{i}]");
        let b = if writable {
            writable_buffer(&item, &what)?
        } else {
            read_only_buffer(&item, &what)?
        };
        bufs.push(b);
    }
    if bufs.is_empty() {
        return Err(PyValueError::new_err("buffers must not be empty"));
    }
    if bufs.len() > 1024 {
        return Err(PyValueError::new_err(format!(
            "at most 1024 buffers per op (IOV_MAX); got {}",
            bufs.len()
        )));
    }
    let iov: Box<[libc::iovec]> = bufs
        .iter()
        .map(|b| libc::iovec {
            iov_base: b.buf_ptr(),
            iov_len: b.len_bytes(),
        })
        .collect();
    Ok((bufs, iov))
}

fn msg_store(iov: Box<[libc::iovec]>, addr: Option<Box<SockAddr>>) -> Box<MsgStore> {
    let mut m = Box::new(MsgStore {
        // SAFETY: msghdr is plain old data; zero means no name, no control, no flags.
        hdr: unsafe { std::mem::zeroed() },
        iov,
        addr,
    });
    m.hdr.msg_iov = m.iov.as_ptr() as *mut libc::iovec;
    m.hdr.msg_iovlen = m.iov.len();
    if let Some(a) = m.addr.as_mut() {
        m.hdr.msg_name = &mut a.storage as *mut _ as *mut libc::c_void;
        m.hdr.msg_namelen = a.len;
    }
    m
}

fn register_error(e: std::io::Error, what: &str, n: u32) -> PyErr {
    match e.raw_os_error() {
        Some(libc::EMFILE) => os_error(
            libc::EMFILE,
            format!("{what}: {n} slots exceed RLIMIT_NOFILE; raise `ulimit -n`"),
        ),
        Some(libc::EBUSY) => os_error(
            libc::EBUSY,
            format!("{what}: a file table is already registered; unregister_files() first"),
        ),
        Some(libc::EBADF) => os_error(
            libc::EBADF,
            format!("{what}: one of the fds is not open (EBADF)"),
        ),
        _ => io_error(e, what),
    }
}

/// Table of every opcode uringkit knows: (name, code, first kernel).
#[pyfunction]
pub fn op_table() -> Vec<(&'static str, u8, &'static str)> {
    OPS.iter().map(|o| (o.name, o.code, o.since)).collect()
}

/// `dispatch`'s direct wake-up: when `fut` has exactly one done-callback, remove it and
/// append `(callback, fut, context)` to `wake` (the caller sets the result next, which
/// then schedules nothing). Any other shape is left to the future's own scheduling.
fn take_waiter(
    py: Python<'_>,
    fut: &Bound<'_, PyAny>,
    wake: &Bound<'_, pyo3::types::PyList>,
) -> PyResult<()> {
    let cbs = fut.getattr(pyo3::intern!(py, "_callbacks"))?;
    let Ok(cbs) = cbs.cast::<pyo3::types::PyList>() else {
        return Ok(()); // None: nobody waits
    };
    if cbs.len() != 1 {
        return Ok(());
    }
    let Ok((cb, ctx)) = cbs
        .get_item(0)?
        .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()
    else {
        return Ok(());
    };
    fut.call_method1(pyo3::intern!(py, "remove_done_callback"), (&cb,))?;
    wake.append((cb, fut, ctx))
}

macro_rules! sqe_op {
    (
        $(#[doc = $doc:literal])*
        fn $name:ident(&mut $self:ident $(, $(#[$pa:meta])* $arg:ident : $ty:ty)* $(,)?)
        signature[$($pos:tt)*][$($kw:tt)*]
        |$ud:ident, $o:ident| $body:expr
    ) => {
        #[pymethods]
        impl Ring {
            $(#[doc = $doc])*
            #[pyo3(signature = ($($pos)* *, $($kw)* $ud=0, link=false, hardlink=false,
                drain=false, async_=false, skip_success=false))]
            #[allow(clippy::too_many_arguments, unused_braces)]
            fn $name(
                &mut $self,
                $($(#[$pa])* $arg: $ty,)*
                #[pyo3(from_py_with = int::u64_user_data)] $ud: u64,
                link: bool,
                hardlink: bool,
                drain: bool,
                async_: bool,
                skip_success: bool,
            ) -> PyResult<()> {
                let $o = opts(link, hardlink, drain, async_, skip_success);
                $body
            }
        }
    };
}

sqe_op! {
    /// Queue a no-op (a pure round trip through the ring).
    fn nop(
        &mut self,
    )
    signature[][]
    |user_data, sqe| {
        self.queue_plain(op::nop::nop(), user_data, sqe)
    }
}

sqe_op! {
    /// Queue a read of up to `nbytes` (default: len(buf)) into `buf` at `offset` (-1: the
    /// current file position). With `buffer_ring=` and no `buf`, the kernel picks a provided
    /// buffer (completion.buffer_id). Result: bytes read (0 at EOF). A `buf` that is one of
    /// this ring's registered Buffers is read with READ_FIXED (as read_fixed would).
    /// `multishot=True` (with `buffer_ring`, kernel 6.7+, on a pipe, socket, eventfd or
    /// tty): one completion (`more=True`) per chunk that arrives, until end of file, an
    /// error, ENOBUFS or cancellation.
    /// `rw_flags`: preadv2's `os.RWF_*` flags (e.g. `RWF_NOWAIT`: EAGAIN instead of
    /// waiting for the disk).
    fn read(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buf: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
        #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
        buffer_ring: Option<&Bound<'_, BufferRing>>,
        multishot: bool,
        #[pyo3(from_py_with = int::i32_rw_flags)] rw_flags: i32,
    )
    signature[fd, buf=None, offset=-1,][nbytes=None, buffer_ring=None, multishot=false, rw_flags=0,]
    |user_data, o| {
        let fd = fd_arg(fd, "fd")?;
        let off = offset_arg(offset)?;
        if multishot && (buffer_ring.is_none() || buf.is_some()) {
            return Err(PyValueError::new_err(
                "multishot=True reads into provided buffers: pass buffer_ring= and no buf",
            ));
        }
        match (buf, buffer_ring) {
            (Some(_), Some(_)) => Err(PyValueError::new_err(
                "pass either buf or buffer_ring, not both",
            )),
            (None, None) => Err(PyValueError::new_err(
                "read needs a buf to read into, or buffer_ring= for a provided buffer",
            )),
            (None, Some(br)) => {
                let (group, size) = self.buffer_ring_group(br)?;
                let len = io_len(size, nbytes, "a provided buffer")?;
                let mut slot = Slot::new(user_data, 0, Keep::None);
                slot.io = IoInfo {
                    buf_group: Some(group),
                    ..IoInfo::new(raw_of(fd), 0, len as u64, off)
                };
                let e = if multishot {
                    op::rw::read_multi(fd, group)
                } else {
                    op::rw::read_select(fd, len, off, group)
                };
                self.queue(e, slot, o)
            }
            (Some(b), None) => {
                let rw = (fd, off, nbytes, rw_flags);
                self.queue_rw(true, rw, b, "buf", user_data, o)
            }
        }
    }
}

sqe_op! {
    /// Queue a write of `data` (or its first `nbytes`) at `offset` (-1: current position,
    /// or the end for O_APPEND). Result: bytes written (may be short). `data` that is one
    /// of this ring's registered Buffers is written with WRITE_FIXED.
    /// `rw_flags`: pwritev2's `os.RWF_*` flags (e.g. `RWF_DSYNC`: durable on completion,
    /// like the write followed by fdatasync, in one SQE).
    fn write(
        &mut self,
        fd: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
        #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
        #[pyo3(from_py_with = int::i32_rw_flags)] rw_flags: i32,
    )
    signature[fd, data, offset=-1,][nbytes=None, rw_flags=0,]
    |user_data, o| {
        let fd = fd_arg(fd, "fd")?;
        let off = offset_arg(offset)?;
        self.queue_rw(false, (fd, off, nbytes, rw_flags), data, "data", user_data, o)
    }
}

sqe_op! {
    /// Queue a vectored read into each of `buffers` in turn (preadv).
    fn readv(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
    )
    signature[fd, buffers, offset=-1,][]
    |user_data, sqe| {
        self.vectored(
            fd,
            buffers,
            offset,
            true,
            user_data,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a vectored write of each of `buffers` in turn (pwritev).
    fn writev(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
    )
    signature[fd, buffers, offset=-1,][]
    |user_data, sqe| {
        self.vectored(
            fd,
            buffers,
            offset,
            false,
            user_data,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a read into a registered Buffer (no per-op page pinning).
    fn read_fixed(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, Buffer>,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
        #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
    )
    signature[fd, buf, offset=-1,][nbytes=None,]
    |user_data, sqe| {
        self.fixed_rw(
            fd,
            buf,
            offset,
            nbytes,
            true,
            user_data,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a write from a registered Buffer.
    fn write_fixed(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buf: &Bound<'_, Buffer>,
        #[pyo3(from_py_with = int::i64_offset)] offset: i64,
        #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
    )
    signature[fd, buf, offset=-1,][nbytes=None,]
    |user_data, sqe| {
        self.fixed_rw(
            fd,
            buf,
            offset,
            nbytes,
            false,
            user_data,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue fsync (or fdatasync with `datasync=True`). Link it after a write for durability.
    fn fsync(
        &mut self,
        fd: &Bound<'_, PyAny>,
        datasync: bool,
    )
    signature[fd,][datasync=false,]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::sync::fsync(fd, datasync), user_data, sqe)
    }
}

sqe_op! {
    /// Queue fallocate(fd, mode, offset, length).
    fn fallocate(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_length)] length: u64,
        #[pyo3(from_py_with = int::u64_offset)] offset: u64,
        #[pyo3(from_py_with = int::i32_mode)] mode: i32,
    )
    signature[fd, length, offset=0,][mode=0,]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::sync::fallocate(fd, offset, length, mode), user_data, sqe)
    }
}

sqe_op! {
    /// Queue openat(dir_fd, path, flags, mode). Result: the new fd (or 0 with
    /// `fixed_slot=`, which installs it straight into the registered file table).
    fn openat(
        &mut self,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
        #[pyo3(from_py_with = int::u32_mode)] mode: u32,
        #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
        #[pyo3(from_py_with = int::opt_u32_fixed_slot)] fixed_slot: Option<u32>,
    )
    signature[path, flags=libc::O_RDONLY | libc::O_CLOEXEC, mode=0o644,][dir_fd=libc::AT_FDCWD, fixed_slot=None,]
    |user_data, sqe| {
        let p = path_arg(path)?;
        let ptr = p.as_ptr();
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Path(p);
        self.queue(
            op::fs::openat(dir_fd, ptr, flags, mode, fixed_slot),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue openat2(2): like `openat`, plus `resolve` — `uringkit.Resolve` flags that
    /// restrict how the path is walked (`Resolve.BENEATH`: never leave `dir_fd`, -EXDEV;
    /// `Resolve.NO_SYMLINKS`: -ELOOP on any symlink; `Resolve.IN_ROOT`: treat `dir_fd` as
    /// `/`) — what a server needs to open user-supplied paths safely. `mode` defaults to
    /// 0o644 with O_CREAT/O_TMPFILE and must be 0 otherwise. Result: the new fd.
    fn openat2(
        &mut self,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
        #[pyo3(from_py_with = int::opt_u32_mode)] mode: Option<u32>,
        #[pyo3(from_py_with = int::u64_resolve)] resolve: u64,
        #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
        #[pyo3(from_py_with = int::opt_u32_fixed_slot)] fixed_slot: Option<u32>,
    )
    signature[path, flags=0o2000000, mode=None,][resolve=0, dir_fd=-100, fixed_slot=None,]
    |user_data, sqe| {
        let creates = flags & (libc::O_CREAT | libc::O_TMPFILE) != 0;
        let mode = mode.unwrap_or(if creates { 0o644 } else { 0 });
        if mode != 0 && !creates {
            return Err(PyValueError::new_err(
                "openat2: mode must be 0 unless flags has O_CREAT or O_TMPFILE",
            ));
        }
        // a fixed file has no close-on-exec flag (the kernel rejects O_CLOEXEC there)
        let flags = if fixed_slot.is_some() {
            flags & !libc::O_CLOEXEC
        } else {
            flags
        };
        let p = path_arg(path)?;
        let how = Box::new(
            io_uring::types::OpenHow::new()
                .flags(flags as u32 as u64)
                .mode(mode as u64)
                .resolve(resolve),
        );
        let e = op::fs::openat2(dir_fd, p.as_ptr(), &*how, fixed_slot);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::PathHow(p, how);
        self.queue(e, slot, sqe)
    }
}

sqe_op! {
    /// `ring.close()`: cancel every op in flight, wait (GIL released) for their completions
    /// so no memory is freed while the kernel may use it, then close the ring. Idempotent.
    ///
    /// `ring.close(fd)`: queue IORING_OP_CLOSE for `fd` (`Fixed(i)` empties a registered
    /// file slot), like every other op.
    fn close(
        &mut self,
        py: Python<'_>,
        fd: Option<&Bound<'_, PyAny>>,
    )
    signature[fd=None,][]
    |user_data, sqe| {
        let Some(fd) = fd else {
            return self.shutdown_ring(py);
        };
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::fs::close(fd), user_data, sqe)
    }
}

sqe_op! {
    /// Queue statx. The completion's `result` is a dict with os.stat_result's field names
    /// (plus dio_mem_align / dio_offset_align when the kernel reports them). To stat an open
    /// fd: `statx("", dir_fd=fd, flags=AT_EMPTY_PATH)`.
    fn statx(
        &mut self,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
        #[pyo3(from_py_with = int::u32_mask)] mask: u32,
    )
    signature[path,][dir_fd=libc::AT_FDCWD, flags=0, mask=0x0fff | 0x2000,]
    |user_data, sqe| {
        let p = path_arg(path)?;
        let mut st = Box::<KStatx>::default();
        let (pp, sp) = (p.as_ptr(), &mut *st as *mut KStatx);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Statx(p, st);
        self.queue(
            op::fs::statx(dir_fd, pp, sp, flags, mask),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue renameat (os.rename / os.replace; `flags` takes RENAME_NOREPLACE etc.).
    fn renameat(
        &mut self,
        old: &Bound<'_, PyAny>,
        new: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_old_dir_fd)] old_dir_fd: i32,
        #[pyo3(from_py_with = int::i32_new_dir_fd)] new_dir_fd: i32,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[old, new,][old_dir_fd=libc::AT_FDCWD, new_dir_fd=libc::AT_FDCWD, flags=0,]
    |user_data, sqe| {
        let (a, b) = (path_arg(old)?, path_arg(new)?);
        let e = op::fs::renameat(old_dir_fd, a.as_ptr(), new_dir_fd, b.as_ptr(), flags);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Paths(a, b);
        self.queue(e, slot, sqe)
    }
}

sqe_op! {
    /// Queue unlinkat (os.unlink; `flags=AT_REMOVEDIR` (0x200) for os.rmdir).
    fn unlinkat(
        &mut self,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
    )
    signature[path,][dir_fd=libc::AT_FDCWD, flags=0,]
    |user_data, sqe| {
        let p = path_arg(path)?;
        let e = op::fs::unlinkat(dir_fd, p.as_ptr(), flags);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Path(p);
        self.queue(e, slot, sqe)
    }
}

sqe_op! {
    /// Queue mkdirat (os.mkdir).
    fn mkdirat(
        &mut self,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u32_mode)] mode: u32,
        #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
    )
    signature[path, mode=0o777,][dir_fd=libc::AT_FDCWD,]
    |user_data, sqe| {
        let p = path_arg(path)?;
        let e = op::fs::mkdirat(dir_fd, p.as_ptr(), mode);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Path(p);
        self.queue(e, slot, sqe)
    }
}

sqe_op! {
    /// Queue symlinkat: create `link_path` pointing at `target` (os.symlink).
    fn symlinkat(
        &mut self,
        target: &Bound<'_, PyAny>,
        link_path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_dir_fd)] dir_fd: i32,
    )
    signature[target, link_path,][dir_fd=libc::AT_FDCWD,]
    |user_data, sqe| {
        let (t, l) = (path_arg(target)?, path_arg(link_path)?);
        let e = op::fs::symlinkat(t.as_ptr(), dir_fd, l.as_ptr());
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Paths(t, l);
        self.queue(e, slot, sqe)
    }
}

sqe_op! {
    /// Queue linkat: a hard link `new` to `old` (os.link).
    fn linkat(
        &mut self,
        old: &Bound<'_, PyAny>,
        new: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_old_dir_fd)] old_dir_fd: i32,
        #[pyo3(from_py_with = int::i32_new_dir_fd)] new_dir_fd: i32,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
    )
    signature[old, new,][old_dir_fd=libc::AT_FDCWD, new_dir_fd=libc::AT_FDCWD, flags=0,]
    |user_data, sqe| {
        let (a, b) = (path_arg(old)?, path_arg(new)?);
        let e = op::fs::linkat(old_dir_fd, a.as_ptr(), new_dir_fd, b.as_ptr(), flags);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Paths(a, b);
        self.queue(e, slot, sqe)
    }
}

sqe_op! {
    /// Queue splice: move `nbytes` from fd_in to fd_out (one must be a pipe). An offset of
    /// -1 uses the descriptor's position (required for the pipe side).
    fn splice(
        &mut self,
        fd_in: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i64_off_in)] off_in: i64,
        fd_out: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i64_off_out)] off_out: i64,
        #[pyo3(from_py_with = int::u32_nbytes)] nbytes: u32,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[fd_in, off_in, fd_out, off_out, nbytes,][flags=0,]
    |user_data, sqe| {
        let (i, o) = (fd_arg(fd_in, "fd_in")?, fd_arg(fd_out, "fd_out")?);
        self.queue_plain(op::splice::splice(i, off_in, o, off_out, nbytes, flags), user_data, sqe)
    }
}

sqe_op! {
    /// Queue tee: duplicate `nbytes` from one pipe into another without consuming them.
    fn tee(
        &mut self,
        fd_in: &Bound<'_, PyAny>,
        fd_out: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u32_nbytes)] nbytes: u32,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[fd_in, fd_out, nbytes,][flags=0,]
    |user_data, sqe| {
        let (i, o) = (fd_arg(fd_in, "fd_in")?, fd_arg(fd_out, "fd_out")?);
        self.queue_plain(op::splice::tee(i, o, nbytes, flags), user_data, sqe)
    }
}

sqe_op! {
    /// Queue accept on a listening socket. Result: the new connection's fd; single-shot
    /// completions carry the peer address in `result`. `multishot=True` keeps accepting
    /// (completion.more stays True) until cancelled or an error.
    fn accept(
        &mut self,
        fd: &Bound<'_, PyAny>,
        multishot: bool,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
    )
    signature[fd,][multishot=false, flags=libc::SOCK_CLOEXEC,]
    |user_data, o| {
        let fd = fd_arg(fd, "fd")?;
        if multishot {
            return self.queue_plain(op::net::accept_multi(fd, flags), user_data, o);
        }
        let mut sa = Box::<SockAddr>::default();
        let e = op::net::accept(fd, Some(&mut sa), flags);
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Addr(sa);
        self.queue(e, slot, o)
    }
}

sqe_op! {
    /// Queue connect to `address`: (host, port), (host, port, flowinfo, scope_id), or an
    /// AF_UNIX path.
    fn connect(
        &mut self,
        fd: &Bound<'_, PyAny>,
        address: &Bound<'_, PyAny>,
    )
    signature[fd, address,][]
    |user_data, sqe| {
        self.queue_addr(fd, address, user_data, sqe, op::net::connect)
    }
}

sqe_op! {
    /// Queue recv into `buf`, or into a provided buffer with `buffer_ring=`.
    /// `multishot=True` (needs `buffer_ring`) keeps receiving, one completion per chunk,
    /// until EOF (res 0), an error, ENOBUFS or cancellation.
    fn recv(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buf: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
        multishot: bool,
        buffer_ring: Option<&Bound<'_, BufferRing>>,
    )
    signature[fd, buf=None,][nbytes=None, flags=0, multishot=false, buffer_ring=None,]
    |user_data, o| {
        let fd = fd_arg(fd, "fd")?;
        match (buf, buffer_ring) {
            (Some(_), Some(_)) => Err(PyValueError::new_err(
                "pass either buf or buffer_ring, not both",
            )),
            (None, None) => Err(PyValueError::new_err(
                "recv needs a buf, or buffer_ring= for provided buffers",
            )),
            (Some(_), None) if multishot => Err(PyValueError::new_err(
                "multishot recv needs buffer_ring= (each completion gets its own buffer)",
            )),
            (None, Some(br)) => {
                let (group, size) = self.buffer_ring_group(br)?;
                let mut slot = Slot::new(user_data, 0, Keep::None);
                slot.io.buf_group = Some(group);
                let e = if multishot {
                    op::net::recv_multi(fd, flags, group)
                } else {
                    let len = io_len(size, nbytes, "a provided buffer")?;
                    op::net::recv_select(fd, len, flags, group)
                };
                self.queue(e, slot, o)
            }
            (Some(b), None) => {
                let pb = writable_buffer(b, "buf")?;
                let len = io_len(pb.len_bytes(), nbytes, "buf")?;
                let ptr = pb.buf_ptr() as *mut u8;
                self.queue(
                    op::net::recv(fd, ptr, len, flags),
                    Slot::new(user_data, 0, Keep::Buf(pb)),
                    o,
                )
            }
        }
    }
}

/// send and send_zc: the same arguments, a different opcode.
macro_rules! send_op {
    ($(#[doc = $doc:literal])* $name:ident, $opcode:path) => {
        sqe_op! {
            $(#[doc = $doc])*
            fn $name(
                &mut self,
                fd: &Bound<'_, PyAny>,
                data: &Bound<'_, PyAny>,
                #[pyo3(from_py_with = int::opt_usize_nbytes)] nbytes: Option<usize>,
                #[pyo3(from_py_with = int::i32_flags)] flags: i32,
            )
            signature[fd, data,][nbytes=None, flags=0,]
            |user_data, sqe| self.queue_send(fd, data, nbytes, flags, user_data, sqe, $opcode)
        }
    };
}

send_op! {
    /// Queue send of `data`. Result: bytes sent.
    send, op::net::send
}

send_op! {
    /// Queue a zero-copy send. Two completions arrive: the result (`more=True`), then a
    /// notification (`notif=True`) once the kernel no longer reads `data`; the buffer is
    /// held until the notification.
    send_zc, op::net::send_zc
}

sqe_op! {
    /// Queue sendmsg of `buffers` (gathered), optionally to `address` (datagram sockets).
    fn sendmsg(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        address: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[fd, buffers, address=None,][flags=0,]
    |user_data, o| {
        self.queue_sendmsg(fd, buffers, address, flags, user_data, o, false)
    }
}

sqe_op! {
    /// Queue sendmsg with zero copy (`sendmsg` + `send_zc`): the buffers are sent from
    /// where they are; a second completion (`notif=True`) says the kernel is done with
    /// them, and they are held until it arrives. Kernel 6.1+.
    fn sendmsg_zc(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        address: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[fd, buffers, address=None,][flags=0,]
    |user_data, o| {
        self.queue_sendmsg(fd, buffers, address, flags, user_data, o, true)
    }
}

sqe_op! {
    /// Queue recvmsg into `buffers` (scattered). The completion's `result` is the sender's
    /// address for datagram sockets. With `buffer_ring=` (and no `buffers`) the message
    /// goes into a provided buffer instead — read it with `BufferRing.take_msg(c)`, which
    /// gives `(payload, address)`; `multishot=True` (needs `buffer_ring`, 6.0+) keeps
    /// receiving, one completion (`more=True`) per message, until an error, ENOBUFS or
    /// cancellation. Each provided buffer holds a 144-byte header (io_uring_recvmsg_out and
    /// the sender's address) before the payload: a longer payload than the rest of the
    /// buffer is truncated, as recvfrom truncates.
    fn recvmsg(
        &mut self,
        fd: &Bound<'_, PyAny>,
        buffers: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
        multishot: bool,
        buffer_ring: Option<&Bound<'_, BufferRing>>,
    )
    signature[fd, buffers=None,][flags=0, multishot=false, buffer_ring=None,]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        match (buffers, buffer_ring) {
            (Some(_), Some(_)) => Err(PyValueError::new_err(
                "pass either buffers or buffer_ring, not both",
            )),
            (None, None) => Err(PyValueError::new_err(
                "recvmsg needs buffers, or buffer_ring= for provided buffers",
            )),
            (Some(_), None) if multishot => Err(PyValueError::new_err(
                "multishot recvmsg needs buffer_ring= (each message gets its own buffer)",
            )),
            (None, Some(br)) => {
                let (group, size) = self.buffer_ring_group(br)?;
                if size <= op::net::RECVMSG_OVERHEAD {
                    return Err(PyValueError::new_err(format!(
                        "recvmsg into provided buffers needs buffers larger than {} bytes \
                         (the header and address before the payload); this ring's are {size}",
                        op::net::RECVMSG_OVERHEAD
                    )));
                }
                if !multishot {
                    return Err(PyValueError::new_err(
                        "recvmsg with buffer_ring= is multishot only: pass multishot=True \
                         (or buffers for a single message)",
                    ));
                }
                let mut msg = msg_store(Box::new([]), None);
                msg.hdr.msg_namelen = op::net::RECVMSG_NAME_LEN as libc::socklen_t;
                let p = &msg.hdr as *const libc::msghdr;
                let mut slot = Slot::new(user_data, 0, Keep::None);
                slot.io.buf_group = Some(group);
                slot.owned = Owned::Msg(msg);
                self.queue(op::net::recvmsg_multi(fd, p, flags, group), slot, sqe)
            }
            (Some(buffers), None) => {
                let (bufs, iov) = iovecs(buffers, true)?;
                let mut msg = msg_store(iov, Some(Box::default()));
                let p = &mut msg.hdr as *mut libc::msghdr;
                let mut slot = Slot::new(user_data, 0, Keep::Bufs(bufs));
                slot.owned = Owned::Msg(msg);
                self.queue(op::net::recvmsg(fd, p, flags), slot, sqe)
            }
        }
    }
}

sqe_op! {
    /// Queue shutdown(fd, how) (socket.SHUT_RD / SHUT_WR / SHUT_RDWR).
    fn shutdown(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_how)] how: i32,
    )
    signature[fd, how,][]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::net::shutdown(fd, how), user_data, sqe)
    }
}

sqe_op! {
    /// Queue socket(domain, type, protocol). Result: the new fd (or 0 with `fixed_slot=`).
    fn socket(
        &mut self,
        #[pyo3(from_py_with = int::i32_domain)] domain: i32,
        #[pyo3(from_py_with = int::i32_type_)] type_: i32,
        #[pyo3(from_py_with = int::i32_protocol)] protocol: i32,
        #[pyo3(from_py_with = int::opt_u32_fixed_slot)] fixed_slot: Option<u32>,
    )
    signature[domain, type_, protocol=0,][fixed_slot=None,]
    |user_data, sqe| {
        self.queue_plain(op::net::socket(domain, type_, protocol, fixed_slot), user_data, sqe)
    }
}

sqe_op! {
    /// Queue a timeout: completes with -ETIME after `seconds`, or with 0 once `count` other
    /// completions have arrived. `absolute=True` takes CLOCK_MONOTONIC seconds.
    fn timeout(
        &mut self,
        seconds: f64,
        #[pyo3(from_py_with = int::u32_count)] count: u32,
        absolute: bool,
    )
    signature[seconds,][count=0, absolute=false,]
    |user_data, sqe| {
        check_seconds(seconds)?;
        let ts = Box::new(op::timeout::timespec(seconds));
        let p = &*ts as *const io_uring::types::Timespec;
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Timespec(ts);
        self.queue(
            op::timeout::timeout(p, count, absolute),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a linked timeout for the op queued just before (which must have `link=True`):
    /// if that op has not completed after `seconds`, it is cancelled (-ECANCELED) and this
    /// completes with -ETIME; otherwise this completes with -ECANCELED.
    fn link_timeout(
        &mut self,
        seconds: f64,
    )
    signature[seconds,][]
    |user_data, sqe| {
        check_seconds(seconds)?;
        let ts = Box::new(op::timeout::timespec(seconds));
        let p = &*ts as *const io_uring::types::Timespec;
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Timespec(ts);
        self.queue(
            op::timeout::link_timeout(p),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a cancellation of the in-flight op(s) queued with `user_data == target`
    /// (`all=True`: every match), or of ops on `fd=`. Result: 0 when cancelled, -ENOENT when
    /// nothing matched, -EALREADY when the op was already running. The cancelled op still
    /// completes (usually -ECANCELED) and keeps its memory until then.
    fn cancel(
        &mut self,
        #[pyo3(from_py_with = int::opt_u64_target)] target: Option<u64>,
        fd: Option<&Bound<'_, PyAny>>,
        all: bool,
    )
    signature[target=None,][fd=None, all=false,]
    |user_data, o| {
        match (target, fd) {
            (Some(_), Some(_)) | (None, None) => Err(PyValueError::new_err(
                "cancel needs exactly one of: target (a user_data) or fd=",
            )),
            (None, Some(f)) => {
                let f = fd_arg(f, "fd")?;
                self.queue_plain(op::cancel::cancel_fd(f, all), user_data, o)
            }
            (Some(t), None) => {
                let mut ids = self.core()?.slots_with_user_data(t);
                if !all {
                    ids.truncate(1);
                }
                // No match: target an id no slot has, so the kernel answers -ENOENT.
                let last = ids.pop().unwrap_or(u32::MAX as u64 - 1);
                for id in ids {
                    self.core()?
                        .push_internal(op::cancel::cancel_user_data(id, false))
                        .map_err(|e| io_error(e, "queueing a cancel"))?;
                }
                self.queue_plain(op::cancel::cancel_user_data(last, false), user_data, o)
            }
        }
    }
}

sqe_op! {
    /// Queue a poll for readiness of `fd`: `mask` is `select.POLLIN | select.POLLOUT | …`
    /// (default POLLIN). Result: the ready events. `multishot=True`: one completion
    /// (`more=True`) per readiness change, until `poll_remove`, `cancel` or an error.
    fn poll_add(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u32_mask)] mask: u32,
        multishot: bool,
    )
    signature[fd, mask=1,][multishot=false,]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::poll::poll_add(fd, mask, multishot), user_data, sqe)
    }
}

sqe_op! {
    /// Queue the removal of the poll queued with `user_data == target`. Result: 0, or
    /// -ENOENT (no such poll) / -EALREADY; the poll itself completes with -ECANCELED.
    fn poll_remove(
        &mut self,
        #[pyo3(from_py_with = int::u64_target)] target: u64,
    )
    signature[target,][]
    |user_data, sqe| {
        self.queue_on_target(
            target,
            io_uring::opcode::PollAdd::CODE,
            op::poll::poll_remove,
            user_data,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue sync_file_range(2) over `length` bytes at `offset` (`length=0`: to the end
    /// of the file). `flags`: 1 WAIT_BEFORE | 2 WRITE | 4 WAIT_AFTER (default 2: start
    /// writeback without waiting — how RocksDB bounds a file's dirty pages).
    fn sync_file_range(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u32_length)] length: u32,
        #[pyo3(from_py_with = int::u64_offset)] offset: u64,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[fd, length=0, offset=0,][flags=2,]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::sync::sync_file_range(fd, offset, length, flags), user_data, sqe)
    }
}

sqe_op! {
    /// Queue posix_fadvise(2): `advice` is one of `os.POSIX_FADV_*` for `length` bytes at
    /// `offset` (`length=0`: to the end of the file).
    fn fadvise(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_offset)] offset: u64,
        #[pyo3(from_py_with = int::i64_length)] length: i64,
        #[pyo3(from_py_with = int::i32_advice)] advice: i32,
    )
    signature[fd, offset, length, advice,][]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::fs::fadvise(fd, offset, length, advice), user_data, sqe)
    }
}

sqe_op! {
    /// Queue madvise(2) on the memory of `buf` (a buffer-protocol object: mmap,
    /// AlignedBuffer…; its start must be page-aligned) — `length` bytes, default all.
    /// `buf` is kept alive until the completion.
    fn madvise(
        &mut self,
        buf: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_advice)] advice: i32,
        #[pyo3(from_py_with = int::opt_usize_length)] length: Option<usize>,
    )
    signature[buf, advice,][length=None,]
    |user_data, sqe| {
        let b = read_only_buffer(buf, "buf")?;
        let len = io_len(b.len_bytes(), length, "buf")? as usize;
        let ptr = b.buf_ptr() as *const u8;
        if !(ptr as usize).is_multiple_of(uringkit_core::buf::page_size()) {
            return Err(PyValueError::new_err(
                "madvise: buf must start on a page boundary (use an mmap or an \
                 AlignedBuffer)",
            ));
        }
        self.queue(
            op::fs::madvise(ptr, len, advice),
            Slot::new(user_data, 0, Keep::Buf(b)),
            sqe,
        )
    }
}

sqe_op! {
    /// Queue getxattr(2) of attribute `name` of `path` — a path, or an open file (int
    /// fd, `Fixed`, or an object with fileno()) for fgetxattr, as os.getxattr takes
    /// either. The completion's `res` is the value's length and `result` the value
    /// (bytes); `size` bounds it (-ERANGE if larger; Linux caps values at 64 KiB).
    fn getxattr(
        &mut self,
        path: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::usize_size)] size: usize,
    )
    signature[path, name,][size=65536,]
    |user_data, o| {
        self.xattr(path, name, Err(size), user_data, o)
    }
}

sqe_op! {
    /// Queue setxattr(2): set attribute `name` of `path` (a path or an open file, as
    /// os.setxattr) to `value` (bytes-like, copied); `flags` takes os.XATTR_CREATE /
    /// os.XATTR_REPLACE.
    fn setxattr(
        &mut self,
        path: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_flags)] flags: i32,
    )
    signature[path, name, value,][flags=0,]
    |user_data, o| {
        self.xattr(path, name, Ok((value, flags)), user_data, o)
    }
}

sqe_op! {
    /// Queue a futex2 wait on the 32-bit word at the start of `buf` (a writable buffer,
    /// 4-byte aligned, kept alive until the completion): it completes with 0 once woken
    /// (futex_wake, or FUTEX_WAKE from any thread), or -EAGAIN at once if the word is not
    /// `val`. Kernel 6.7+ (`"futex_wait" in Ring.probe()`). `futex_flags` defaults to a
    /// shared 32-bit futex (2): 130 (FUTEX2_PRIVATE) is faster, but on 6.16+ kernels a
    /// private wait queued while the process has a single thread is never woken once a
    /// second thread starts (a kernel bug); wait and wake must use the same flags.
    fn futex_wait(
        &mut self,
        buf: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_val)] val: u64,
        #[pyo3(from_py_with = int::u64_mask)] mask: u64,
        #[pyo3(from_py_with = int::u32_futex_flags)] futex_flags: u32,
    )
    signature[buf, val,][mask=4294967295, futex_flags=2,]
    |user_data, sqe| {
        let (b, word) = futex_word(buf)?;
        self.queue(
            op::futex::wait(word, val, mask, futex_flags),
            Slot::new(user_data, 0, Keep::Buf(b)),
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a futex2 wake of up to `count` waiters of the word at the start of `buf`;
    /// the completion's `res` is how many were woken.
    fn futex_wake(
        &mut self,
        buf: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_count)] count: u64,
        #[pyo3(from_py_with = int::u64_mask)] mask: u64,
        #[pyo3(from_py_with = int::u32_futex_flags)] futex_flags: u32,
    )
    signature[buf, count=1,][mask=4294967295, futex_flags=2,]
    |user_data, sqe| {
        let (b, word) = futex_word(buf)?;
        self.queue(
            op::futex::wake(word, count, mask, futex_flags),
            Slot::new(user_data, 0, Keep::Buf(b)),
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a futex2 wait on several words at once (futex_waitv(2)): `futexes` is a list
    /// of `(buf, val)`, each `buf` as for futex_wait (kept alive until the completion).
    /// It completes with the index of the word that was woken, or -EAGAIN at once if a
    /// word already differs from its `val`. At most 128 words. Kernel 6.7+
    /// (`"futex_waitv" in Ring.probe()`).
    fn futex_waitv(
        &mut self,
        futexes: Vec<(Bound<'_, PyAny>, u64)>,
        #[pyo3(from_py_with = int::u32_futex_flags)] futex_flags: u32,
    )
    signature[futexes,][futex_flags=2,]
    |user_data, sqe| {
        if futexes.is_empty() || futexes.len() > 128 {
            return Err(PyValueError::new_err(format!(
                "futexes must list 1 to 128 (buf, val) pairs (got {})",
                futexes.len()
            )));
        }
        let mut bufs = Vec::with_capacity(futexes.len());
        let mut v = Vec::with_capacity(futexes.len());
        for (buf, val) in &futexes {
            let (b, word) = futex_word(buf)?;
            v.push(op::futex::waitv_entry(word, *val, futex_flags));
            bufs.push(b);
        }
        let v: Box<[io_uring::types::FutexWaitV]> = v.into();
        let (p, n) = (v.as_ptr(), v.len() as u32);
        let mut slot = Slot::new(user_data, 0, Keep::Bufs(bufs));
        slot.owned = Owned::FutexV(v);
        self.queue(
            op::futex::waitv(p, n),
            slot,
            sqe,
        )
    }
}

/// readv_fixed / writev_fixed: the same op but for its direction.
macro_rules! vectored_fixed_op {
    ($(#[doc = $doc:literal])* $name:ident, $read:literal) => {
        sqe_op! {
            $(#[doc = $doc])*
            fn $name(
                &mut self,
                fd: &Bound<'_, PyAny>,
                buf: &Bound<'_, Buffer>,
                ranges: Vec<(usize, usize)>,
                #[pyo3(from_py_with = int::i64_offset)] offset: i64,
            )
            signature[fd, buf, ranges, offset=-1,][]
            |user_data, o| self.vectored_fixed(fd, buf, &ranges, offset, $read, user_data, o)
        }
    };
}

vectored_fixed_op! {
    /// Queue a vectored read (preadv2) into parts of one registered Buffer: `ranges` is
    /// a list of `(start, length)` within `buf`, filled in order from `offset` (-1: the
    /// file position). `res` is the bytes read. Kernel 6.15+ (`"readv_fixed" in
    /// Ring.probe()`).
    readv_fixed, true
}

vectored_fixed_op! {
    /// Queue a vectored write (pwritev2) from parts of one registered Buffer: `ranges`
    /// as for readv_fixed. Kernel 6.15+.
    writev_fixed, false
}

sqe_op! {
    /// Queue epoll_ctl(2) on the epoll set `epfd` (e.g. `select.epoll().fileno()`):
    /// `op` is uringkit.EpollOp.ADD/MOD/DEL, `events` a mask of select.EPOLLIN… and
    /// `data` what epoll_wait reports for `fd` (default: `fd`).
    fn epoll_ctl(
        &mut self,
        epfd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_op)] op: i32,
        #[pyo3(from_py_with = int::i32_fd)] fd: i32,
        #[pyo3(from_py_with = int::u32_events)] events: u32,
        #[pyo3(from_py_with = int::opt_u64_data)] data: Option<u64>,
    )
    signature[epfd, op, fd, events=0,][data=None,]
    |user_data, sqe| {
        let epfd = fd_arg(epfd, "epfd")?;
        let ev: Box<[libc::epoll_event]> = Box::new([libc::epoll_event {
            events,
            u64: data.unwrap_or(fd as u64),
        }]);
        let p = ev.as_ptr();
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Epoll(ev);
        self.queue(
            op::epoll::epoll_ctl(epfd, fd, op, p),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue epoll_wait(2) on `epfd` (kernel 6.15+: `"epoll_wait" in Ring.probe()`): it
    /// completes when events are ready; `res` is how many and `result` a list of
    /// `(data, events)` pairs.
    fn epoll_wait(
        &mut self,
        epfd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u32_maxevents)] maxevents: u32,
    )
    signature[epfd, maxevents=64,][]
    |user_data, sqe| {
        if maxevents == 0 || maxevents > 65536 {
            return Err(PyValueError::new_err(format!(
                "maxevents must be between 1 and 65536 (got {maxevents})"
            )));
        }
        let epfd = fd_arg(epfd, "epfd")?;
        let mut evs: Box<[libc::epoll_event]> =
            vec![libc::epoll_event { events: 0, u64: 0 }; maxevents as usize].into_boxed_slice();
        let p = evs.as_mut_ptr();
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Epoll(evs);
        self.queue(
            op::epoll::epoll_wait(epfd, p, maxevents),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue pipe2(2) (kernel 6.16+: `"pipe" in Ring.probe()`): the completion's
    /// `result` is `(read_fd, write_fd)`, `res` 0. `flags` takes os.O_CLOEXEC,
    /// os.O_NONBLOCK, os.O_DIRECT (the descriptors are yours to close).
    fn pipe(
        &mut self,
        #[pyo3(from_py_with = int::u32_flags)] flags: u32,
    )
    signature[][flags=0,]
    |user_data, sqe| {
        let mut fds = Box::new([-1i32; 2]);
        let p = fds.as_mut_ptr();
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Fds(fds);
        self.queue(
            op::fs::pipe(p, flags),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue ftruncate(2) of `fd` to `length` bytes (kernel 6.9+: check `"ftruncate" in
    /// Ring.probe()`).
    fn ftruncate(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::u64_length)] length: u64,
    )
    signature[fd, length,][]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::fs::ftruncate(fd, length), user_data, sqe)
    }
}

sqe_op! {
    /// Queue bind(2) of socket `fd` to `address` (as `connect` takes it); kernel 6.11+.
    fn bind(
        &mut self,
        fd: &Bound<'_, PyAny>,
        address: &Bound<'_, PyAny>,
    )
    signature[fd, address,][]
    |user_data, sqe| {
        self.queue_addr(fd, address, user_data, sqe, op::net::bind)
    }
}

sqe_op! {
    /// Queue listen(2) on socket `fd` (kernel 6.11+).
    fn listen(
        &mut self,
        fd: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = int::i32_backlog)] backlog: i32,
    )
    signature[fd, backlog=128,][]
    |user_data, sqe| {
        let fd = fd_arg(fd, "fd")?;
        self.queue_plain(op::net::listen(fd, backlog), user_data, sqe)
    }
}

sqe_op! {
    /// Queue the removal of the timeout queued with `user_data == target`: it completes
    /// with -ECANCELED, this with 0 (or -ENOENT / -EALREADY).
    fn timeout_remove(
        &mut self,
        #[pyo3(from_py_with = int::u64_target)] target: u64,
    )
    signature[target,][]
    |user_data, sqe| {
        self.queue_on_target(
            target,
            io_uring::opcode::Timeout::CODE,
            op::timeout::timeout_remove,
            user_data,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue a new expiry for the timeout queued with `user_data == target`: `seconds`
    /// from now (or an absolute CLOCK_MONOTONIC time with `absolute=True`).
    fn timeout_update(
        &mut self,
        #[pyo3(from_py_with = int::u64_target)] target: u64,
        seconds: f64,
        absolute: bool,
    )
    signature[target, seconds,][absolute=false,]
    |user_data, sqe| {
        check_seconds(seconds)?;
        let id = self.target_slot(target, io_uring::opcode::Timeout::CODE)?;
        let ts = Box::new(op::timeout::timespec(seconds));
        let p = &*ts as *const io_uring::types::Timespec;
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::Timespec(ts);
        self.queue(
            op::timeout::timeout_update(id, p, absolute),
            slot,
            sqe,
        )
    }
}

sqe_op! {
    /// Queue waitid(2) (kernel 6.7+): completes with 0 when a child matching `idtype` /
    /// `id` (`os.P_PID`, `os.P_PGID`, `os.P_ALL`, `os.P_PIDFD`) changes state as `options`
    /// asks (`os.WEXITED`, `os.WSTOPPED`, … | `os.WNOWAIT`); `completion.result` then has
    /// os.waitid's fields: `si_pid, si_uid, si_signo, si_status, si_code`.
    fn waitid(
        &mut self,
        #[pyo3(from_py_with = int::u32_idtype)] idtype: u32,
        #[pyo3(from_py_with = int::u32_id)] id: u32,
        #[pyo3(from_py_with = int::i32_options)] options: i32,
    )
    signature[idtype, id, options,][]
    |user_data, sqe| {
        // SAFETY: siginfo_t is plain old data; all-zero is a valid (empty) value.
        let mut info: Box<libc::siginfo_t> = Box::new(unsafe { std::mem::zeroed() });
        let p = &mut *info as *mut libc::siginfo_t;
        let mut slot = Slot::new(user_data, 0, Keep::None);
        slot.owned = Owned::SigInfo(info);
        self.queue(
            op::process::waitid(idtype, id, options, p),
            slot,
            sqe,
        )
    }
}
