//! `KvStore`: the Python face of `uringkit_core::kv::Store`.

use crate::int;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::path::PathBuf;
use std::sync::Arc;
use uringkit_core::kv::{AutoCompact, Compression, Durability, Listed, Options, Refresh, Store};

/// The store's error as Python's: an OS error (errno kept through any rewording) is
/// `OSError(errno, message)` — its subclass by errno — even an EINVAL; the store's own
/// refusals of bad arguments are ValueError.
fn kv_err(e: std::io::Error) -> PyErr {
    use std::io::ErrorKind as K;
    let os = uringkit_core::text::errno_of(&e);
    let code = os.or(match e.kind() {
        K::NotFound => Some(libc::ENOENT),
        K::WouldBlock => Some(libc::EAGAIN),
        K::StorageFull => Some(libc::ENOSPC),
        K::InvalidData => Some(libc::EIO),
        K::PermissionDenied => Some(libc::EPERM),
        K::AlreadyExists => Some(libc::EEXIST),
        _ => None,
    });
    match (e.kind(), code) {
        (K::InvalidInput, _) if os.is_none() => PyValueError::new_err(e.to_string()),
        (_, Some(code)) => PyOSError::new_err((code, e.to_string())),
        (_, None) => PyOSError::new_err(e.to_string()),
    }
}

fn bytes_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [u8]> {
    match obj.cast::<PyBytes>() {
        Ok(b) => Ok(b.as_bytes()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be bytes, not {}",
            obj.get_type().name()?
        ))),
    }
}

/// (fd, offset, data, last ticket) of a group commit to write: data is bytes, or an
/// AlignedBuffer for an O_DIRECT store.
type LeadTuple<'py> = (i32, u64, Bound<'py, PyAny>, u64);

/// A bytes-like value (bytearray, memoryview, array…) as a new bytes object.
fn value_copy<'py>(obj: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let buf = pyo3::buffer::PyUntypedBuffer::get(&obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "value must be bytes or a bytes-like object (bytearray, memoryview), not {}",
            crate::convert::type_name(&obj)
        ))
    })?;
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("value must be a C-contiguous buffer"));
    }
    // SAFETY: the buffer is C-contiguous and `len_bytes` long, and stays valid while
    // `buf` (holding the exporter's buffer view) lives, which outlasts the copy.
    let bytes = unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) };
    Ok(PyBytes::new(obj.py(), bytes))
}

type HeldOps<'py> = Vec<(Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>)>;

/// `[(key, value_or_None), ...]` with every key and value checked to be bytes.
fn extract_ops<'py>(ops: &Bound<'py, PyAny>) -> PyResult<HeldOps<'py>> {
    let mut held = Vec::with_capacity(ops.len().unwrap_or(0));
    let items = ops.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "ops must be an iterable of (key, value_or_None) pairs, not {}",
            crate::convert::type_name(ops)
        ))
    })?;
    for (i, item) in items.enumerate() {
        // (a wrong op is named by its place: "ops[3]: value must be bytes …")
        held.push(extract_op(item?).map_err(|e| at_op(ops.py(), i, e))?);
    }
    Ok(held)
}

/// One `(key, value_or_None)` op of [`extract_ops`].
#[allow(clippy::type_complexity)]
fn extract_op<'py>(
    item: Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>)> {
    let pairs = || PyTypeError::new_err("batch ops must be (key, value_or_None) pairs");
    // the common case, a 2-tuple, without a generic extraction per op
    let (k, v) = match item.cast::<pyo3::types::PyTuple>() {
        Ok(t) if t.len() == 2 => (t.get_item(0)?, t.get_item(1)?),
        Ok(_) => return Err(pairs()),
        Err(_) => item
            .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()
            .map_err(|_| pairs())?,
    };
    key_arg(&k)?;
    let k = k.cast_into::<PyBytes>().map_err(PyErr::from)?;
    let v = if v.is_none() {
        None
    } else {
        let v = match v.cast_into::<PyBytes>() {
            Ok(b) => b,
            // any other bytes-like value: copied now (a bytearray changed later must
            // not change what is written)
            Err(e) => value_copy(e.into_inner())?,
        };
        if v.as_bytes().len() > uringkit_core::kv::record::MAX_VALUE {
            return Err(PyValueError::new_err(format!(
                "value must be at most 64 MiB (got {} bytes)",
                v.as_bytes().len()
            )));
        }
        Some(v)
    };
    Ok((k, v))
}

/// `e` (a TypeError or ValueError about op `i`) with the op's place in front.
fn at_op(py: Python<'_>, i: usize, e: PyErr) -> PyErr {
    let msg = format!("ops[{i}]: {}", e.value(py));
    if e.is_instance_of::<PyTypeError>(py) {
        PyTypeError::new_err(msg)
    } else if e.is_instance_of::<PyValueError>(py) {
        PyValueError::new_err(msg)
    } else {
        e
    }
}

fn op_refs<'a>(held: &'a HeldOps<'_>) -> Vec<(&'a [u8], Option<&'a [u8]>)> {
    held.iter()
        .map(|(k, v)| (k.as_bytes(), v.as_ref().map(|v| v.as_bytes())))
        .collect()
}

/// A key for a lookup: bytes of 1 byte to 64 KiB (the same errors as writes give).
fn key_arg<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    let k = bytes_arg(obj, "key")?;
    if k.is_empty() || k.len() > uringkit_core::kv::record::MAX_KEY {
        return Err(PyValueError::new_err(format!(
            "key must be 1 byte to 64 KiB (got {} bytes)",
            k.len()
        )));
    }
    Ok(k)
}

/// The keys of a multi-key read, each checked as [`key_arg`] does. A single bytes (or
/// str) object is refused by name: iterated, it would read as a list of ints.
fn key_list<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    if keys.is_instance_of::<PyBytes>()
        || keys.is_instance_of::<pyo3::types::PyByteArray>()
        || keys.is_instance_of::<pyo3::types::PyString>()
    {
        return Err(PyTypeError::new_err(format!(
            "keys must be a list of bytes keys, not one {} (for one key: [key])",
            keys.get_type().name()?
        )));
    }
    let mut held = Vec::new();
    for k in keys.try_iter()? {
        let k = k?;
        key_arg(&k)?;
        held.push(k.cast_into::<PyBytes>().map_err(PyErr::from)?);
    }
    Ok(held)
}

/// A multi_get: `keys` (a list of bytes) read by `read` with the GIL released, as a list
/// of bytes or None.
fn multi_read<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
    read: impl FnOnce(&[&[u8]]) -> std::io::Result<Vec<Option<Vec<u8>>>> + Send,
) -> PyResult<Bound<'py, PyList>> {
    let held = key_list(keys)?;
    let refs: Vec<&[u8]> = held.iter().map(|k| k.as_bytes()).collect();
    let vals = py.detach(|| read(&refs)).map_err(kv_err)?;
    let items: Vec<Option<Bound<'py, PyBytes>>> = vals
        .into_iter()
        .map(|v| v.map(|v| PyBytes::new(py, &v)))
        .collect();
    PyList::new(py, items)
}

/// A write that may wait for a group commit, run with the GIL released — first
/// handing the GIL now free to one writer whose commit is done ([`Store::relay_one`]:
/// the one woken ahead of its turn, which takes it at once, while the next is woken):
/// one thread wakes per write, instead of a whole group waking and all but one going
/// back to sleep on the GIL.
fn relayed<T: Send>(
    py: Python<'_>,
    s: &Store,
    write: impl FnOnce() -> std::io::Result<T> + Send,
) -> PyResult<T> {
    py.detach(|| {
        s.relay_one();
        write()
    })
    .map_err(kv_err)
}

/// The native store. Use `uringkit.kv.open()`.
#[pyclass(module = "uringkit._native", frozen)]
pub struct KvStore {
    inner: std::sync::Mutex<Option<Arc<Store>>>,
    /// Read-only: stores a `refresh()` replaced (a compaction since) while snapshot views
    /// of them were open — kept, unchanging, until the last of those views closes.
    retired: std::sync::Mutex<Vec<Arc<Store>>>,
}

impl KvStore {
    /// One key read (plain, or only-if-cached), as bytes or None: the value is copied
    /// once, from where it lies straight into the bytes object.
    fn lookup<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        cached_only: bool,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let s = self.store()?;
        s.get_with(key_arg(key)?, cached_only, |v| PyBytes::new(py, v))
            .map_err(kv_err)
    }

    /// The open store, or why not: closed, or opened by the process this one is a fork
    /// of (RuntimeError: see Store::same_process).
    fn store(&self) -> PyResult<Arc<Store>> {
        let s = self
            .inner
            .lock()
            .expect("kv")
            .clone()
            .ok_or_else(|| PyValueError::new_err("operation on a closed store"))?;
        s.same_process()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(s)
    }
}

#[pymethods]
impl KvStore {
    #[new]
    #[pyo3(signature = (path, *, durability="sync", batch_ms=10, batch_bytes=1<<20, create=true,
        repair=false, segment_size=256<<20, io_uring=true, direct=false, index_snapshot=true,
        warm=true, sqpoll=false, read_only=false, auto_compact=Some(0.5),
        auto_compact_bytes=64<<20, compression=None, compression_level=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        durability: &str,
        #[pyo3(from_py_with = int::u64_batch_ms)] batch_ms: u64,
        #[pyo3(from_py_with = int::u64_batch_bytes)] batch_bytes: u64,
        create: bool,
        repair: bool,
        #[pyo3(from_py_with = int::u64_segment_size)] segment_size: u64,
        io_uring: bool,
        direct: bool,
        index_snapshot: bool,
        warm: bool,
        sqpoll: bool,
        read_only: bool,
        auto_compact: Option<f64>,
        auto_compact_bytes: u64,
        compression: Option<&str>,
        compression_level: Option<i32>,
    ) -> PyResult<Self> {
        match (compression, compression_level) {
            (Some("zstd"), Some(l)) if !uringkit_core::kv::dict::LEVELS.contains(&l) => {
                return Err(PyValueError::new_err(format!(
                    "compression_level={l}: zstd's levels here are 1 to 19 (3 by default: \
                     higher is smaller and slower to write, reads cost the same)"
                )))
            }
            (Some("zstd"), _) | (_, None) => {}
            (other, Some(l)) => {
                let other = other.map_or("None".into(), |o| format!("{o:?}"));
                return Err(PyValueError::new_err(format!(
                    "compression_level={l} with compression={other}: a level is for \
                     compression=\"zstd\" only"
                )));
            }
        }
        let compression = match compression {
            None => Compression::None,
            Some("lz4") => Compression::Lz4,
            Some("zstd") => Compression::Zstd {
                level: compression_level.unwrap_or(uringkit_core::kv::dict::LEVEL),
            },
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "compression={other:?}: use \"zstd\" (with a dictionary trained on the \
                     store's first values: the smallest), \"lz4\" (the fastest) or None"
                )))
            }
        };
        let durability = match durability {
            "sync" => Durability::Sync,
            "batch" => Durability::Batch {
                ms: batch_ms,
                bytes: batch_bytes,
            },
            "none" => Durability::None,
            other => {
                return Err(PyValueError::new_err(format!(
                    "durability={other:?}: use \"sync\", \"batch\" or \"none\""
                )))
            }
        };
        if !(4096..=2 << 30).contains(&segment_size) {
            return Err(PyValueError::new_err(
                "segment_size must be between 4096 and 2 GiB",
            ));
        }
        let auto_compact = match auto_compact {
            None => None,
            Some(r) if r > 0.0 && r <= 1.0 => Some(AutoCompact {
                ratio: r,
                min_bytes: auto_compact_bytes,
            }),
            Some(r) => {
                return Err(PyValueError::new_err(format!(
                    "auto_compact={r}: give the fraction of the sealed segments' bytes that \
                     must be dead before a background compaction starts, above 0 and at \
                     most 1 (0.5 by default), or None to compact only when compact() is \
                     called"
                )))
            }
        };
        let opts = Options {
            durability,
            create,
            repair,
            segment_size,
            use_uring: io_uring,
            direct,
            index_snapshot,
            warm,
            // Python threads hold the GIL whenever they are not waiting: relay wake-ups
            // (see Store::relay_one; URINGKIT_KV_RELAY=0 wakes a whole group at once)
            relay: std::env::var("URINGKIT_KV_RELAY").map_or(true, |v| v != "0"),
            sqpoll,
            read_only,
            auto_compact,
            compression,
        };
        let store = Arc::new(py.detach(|| Store::open(&path, opts)).map_err(kv_err)?);
        Store::start_background(&store);
        Ok(KvStore {
            retired: std::sync::Mutex::new(Vec::new()),
            inner: std::sync::Mutex::new(Some(store)),
        })
    }

    /// Store `value` under `key` (durable on return with durability="sync").
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let s = self.store()?;
        let (k, v) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        // a buffered put that cannot block keeps the GIL (no hand-off between threads)
        if s.write_nonblocking(&[(k, Some(v))], false)
            .map_err(kv_err)?
        {
            return Ok(());
        }
        relayed(py, &s, || s.put(k, v))
    }

    /// The value of `key`, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.lookup(py, key, false)
    }

    /// get(key) if the record is in memory; raises BlockingIOError if reading it would
    /// wait for the disk (read it off the event loop then).
    fn get_cached<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.lookup(py, key, true)
    }

    /// Whether every key's record is in memory (multi_get would not wait for the disk).
    fn all_cached(&self, keys: &Bound<'_, PyAny>) -> PyResult<bool> {
        let s = self.store()?;
        let held = key_list(keys)?;
        let refs: Vec<&[u8]> = held.iter().map(|k| k.as_bytes()).collect();
        Ok(s.all_cached(&refs))
    }

    /// Delete `key`; returns whether it existed.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let s = self.store()?;
        let k = bytes_arg(key, "key")?;
        relayed(py, &s, || s.delete(k))
    }

    /// Values for many keys (None for missing ones), in order.
    fn multi_get<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let s = self.store()?;
        multi_read(py, keys, |refs| s.multi_get(refs))
    }

    /// Apply [(key, value_or_None), ...] atomically. Keys and values are read in place
    /// (no copies) while the GIL is released: they are immutable bytes.
    fn batch(&self, py: Python<'_>, ops: &Bound<'_, PyAny>) -> PyResult<()> {
        let s = self.store()?;
        let held = extract_ops(ops)?;
        let refs = op_refs(&held);
        if s.write_nonblocking(&refs, true).map_err(kv_err)? {
            return Ok(());
        }
        relayed(py, &s, || s.batch(&refs))
    }

    /// Queue ops for writing without waiting (durability="sync": made durable by
    /// `lead_async` + your own write/fdatasync + `finish_async`, or `wait_ticket`);
    /// returns the ticket (0: already written, the other durabilities).
    #[pyo3(signature = (ops, atomic=false))]
    fn enqueue(&self, ops: &Bound<'_, PyAny>, atomic: bool) -> PyResult<u64> {
        let s = self.store()?;
        let held = extract_ops(ops)?;
        s.enqueue(&op_refs(&held), atomic).map_err(kv_err)
    }

    /// Apply ops now if that cannot block (durability none/batch, room in the write
    /// buffer, nothing due); False (nothing done) otherwise — then write them the
    /// blocking way, off the event loop.
    #[pyo3(signature = (ops, atomic=false))]
    fn write_nowait(&self, ops: &Bound<'_, PyAny>, atomic: bool) -> PyResult<bool> {
        let s = self.store()?;
        let held = extract_ops(ops)?;
        s.write_nonblocking(&op_refs(&held), atomic).map_err(kv_err)
    }

    /// `enqueue([(key, value)])` without building the list.
    fn enqueue_put(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<u64> {
        let s = self.store()?;
        let (k, v) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        s.enqueue(&[(k, Some(v))], false).map_err(kv_err)
    }

    /// Lead the group commit of everything queued: (fd, offset, data, last_ticket) to
    /// write then fdatasync, or None (nothing queued, or a thread leads).
    fn lead_async<'py>(&self, py: Python<'py>) -> PyResult<Option<LeadTuple<'py>>> {
        let s = self.store()?;
        let Some(l) = py.detach(|| s.lead_async()).map_err(kv_err)? else {
            return Ok(None);
        };
        // an O_DIRECT store hands over an aligned block image, the others the records
        let data = match l.image {
            Some(mem) => Bound::new(py, crate::buffers::AlignedBuffer { mem })?.into_any(),
            None => PyBytes::new(py, &l.data).into_any(),
        };
        Ok(Some((l.fd, l.off, data, l.last_ticket)))
    }

    /// The leader's write returned `wrote` (bytes or -errno) and its fdatasync `synced`.
    fn finish_async(&self, py: Python<'_>, wrote: i64, synced: i32) -> PyResult<()> {
        let s = self.store()?;
        py.detach(|| s.finish_async(wrote, synced)).map_err(kv_err)
    }

    /// Block (GIL released) until `ticket` is durable, leading a group if nobody is.
    /// How each queued write (`enqueue`'s tickets) went: True written, the OSError it
    /// failed with, or None not done yet.
    fn collect<'py>(&self, py: Python<'py>, tickets: Vec<u64>) -> PyResult<Bound<'py, PyList>> {
        let s = self.store()?;
        let told: Vec<Bound<'py, PyAny>> = s
            .collect(&tickets)
            .into_iter()
            .map(|o| match o {
                Some(Ok(())) => pyo3::types::PyBool::new(py, true).to_owned().into_any(),
                Some(Err(e)) => kv_err(e).into_value(py).into_bound(py).into_any(),
                None => py.None().into_bound(py),
            })
            .collect();
        PyList::new(py, told)
    }

    fn wait_ticket(&self, py: Python<'_>, ticket: u64) -> PyResult<()> {
        let s = self.store()?;
        relayed(py, &s, || s.wait_ticket(ticket))
    }

    fn contains(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let s = self.store()?;
        s.contains(bytes_arg(key, "key")?).map_err(kv_err)
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.store()?.len())
    }

    /// A snapshot of every key.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let s = self.store()?;
        let ks = s.keys().map_err(kv_err)?;
        PyList::new(py, ks.iter().map(|k| PyBytes::new(py, k)))
    }

    /// A scan's snapshot: the keys starting with `prefix` in [start, stop), in key order
    /// (reversed with `reverse`), with where their records are — read later, a chunk at
    /// a time, as they were now ([`KvScan`]).
    #[pyo3(signature = (prefix=None, start=None, stop=None, reverse=false))]
    fn scan(
        slf: &Bound<'_, Self>,
        prefix: Option<Vec<u8>>,
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        reverse: bool,
    ) -> PyResult<KvScan> {
        let py = slf.py();
        let s = slf.get().store()?;
        let pre = prefix.unwrap_or_default();
        let mut items = py
            .detach(|| s.scan(&pre, start.as_deref(), stop.as_deref()))
            .map_err(kv_err)?;
        if reverse {
            items.reverse();
        }
        Ok(KvScan {
            store: slf.clone().unbind(),
            items,
            next: 0,
            ahead: Vec::new(),
        })
    }

    /// A snapshot of every (key, value) pair, values read as the list is built.
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let s = self.store()?;
        let snap = s.snapshot().map_err(kv_err)?;
        let mut out = Vec::with_capacity(snap.len());
        for (i, item) in snap.iter().enumerate() {
            // (the first values are timed: a cold store starts its warm-up, see
            // Store::read_scanned; each value is copied once, into its bytes object)
            let v = s
                .read_scanned_with(item, i < 64, |b| PyBytes::new(py, b))
                .map_err(kv_err)?;
            out.push((PyBytes::new(py, &item.0), v));
        }
        PyList::new(py, out)
    }

    /// A snapshot of every value (in the order of the keys of the same snapshot).
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let s = self.store()?;
        let snap = s.snapshot().map_err(kv_err)?;
        let mut out = Vec::with_capacity(snap.len());
        for (i, item) in snap.iter().enumerate() {
            out.push(
                s.read_scanned_with(item, i < 64, |b| PyBytes::new(py, b))
                    .map_err(kv_err)?,
            );
        }
        PyList::new(py, out)
    }

    /// Rewrite live data into new segments and retire the old ones. Returns
    /// (segments retired, bytes reclaimed).
    fn compact(&self, py: Python<'_>) -> PyResult<(usize, u64)> {
        let s = self.store()?;
        py.detach(|| s.compact()).map_err(kv_err)
    }

    /// Make `path` (a new directory) a copy of the store as it is now: (segments, bytes
    /// hard-linked, bytes copied). See Store::checkpoint.
    fn checkpoint(&self, py: Python<'_>, path: PathBuf) -> PyResult<(usize, u64, u64)> {
        let s = self.store()?;
        py.detach(|| s.checkpoint(&path)).map_err(kv_err)
    }

    /// read_only: take in what the writer appended since (see Store::refresh): (records
    /// read, bytes read, segments rolled over to, reopened). A compaction since makes it
    /// open the store again: the new one replaces this one's (operations running on the
    /// old one finish there).
    fn refresh(&self, py: Python<'_>) -> PyResult<(u64, u64, usize, bool)> {
        let s = self.store()?;
        match py.detach(|| s.refresh()).map_err(kv_err)? {
            Refresh::InPlace(n) => Ok((n.records, n.bytes, n.segments, false)),
            Refresh::Reopened(new) => {
                let mut g = self.inner.lock().expect("kv");
                // (closed, or refreshed by another thread, meanwhile: this one is dropped)
                if g.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, &s)) {
                    *g = Some(Arc::new(*new));
                    if s.views() > 0 {
                        // its snapshots go on reading it as it was
                        self.retired.lock().expect("kv").push(s.clone());
                    }
                }
                Ok((0, 0, 0, true))
            }
        }
    }

    /// Read the segments into the page cache in the background (see Store::warm_up).
    fn warm_up(&self) -> PyResult<bool> {
        Ok(self.store()?.warm_up())
    }

    /// Make everything written so far durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.store()?;
        py.detach(|| s.sync()).map_err(kv_err)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.store()?;
        let d = PyDict::new(py);
        for (k, v) in s.stats() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Verify every live record's CRC: (records checked, list of problems).
    fn check(&self, py: Python<'_>) -> PyResult<(u64, Vec<String>)> {
        let s = self.store()?;
        py.detach(|| s.check()).map_err(kv_err)
    }

    /// What opening found: torn bytes dropped, records replayed, hints used, time.
    fn recovery<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.store()?;
        let r = &s.recovery;
        let d = PyDict::new(py);
        d.set_item("segments", r.segments)?;
        d.set_item("records", r.records)?;
        d.set_item("segments_from_hints", r.from_hints)?;
        d.set_item("from_snapshot", r.from_snapshot)?;
        d.set_item("from_overlay", r.from_overlay)?;
        d.set_item("torn_bytes", r.torn_bytes)?;
        d.set_item("torn_segment", r.torn_segment.clone())?;
        d.set_item("unsynced_cut", r.unsynced_cut.clone())?;
        d.set_item("skipped", r.skipped.clone())?;
        d.set_item("seconds", r.elapsed.as_secs_f64())?;
        Ok(d)
    }

    /// Flush, release the writer lock, close. Idempotent. In a forked child: let go of
    /// this process's copy, writing nothing, without waiting for operations that ran in
    /// threads at the fork (they stayed in the parent; see Store::drop).
    fn close(&self, py: Python<'_>) {
        let s = self.inner.lock().expect("kv").take();
        self.retired.lock().expect("kv").clear();
        py.detach(|| {
            if let Some(s) = s.filter(|s| !s.forked()) {
                // Operations still running in other threads (or the batch flusher) hold
                // the store: wait for them, so that the store is really closed (and its
                // lock released) when close() returns.
                while Arc::strong_count(&s) > 1 {
                    s.relay_all(); // (writers done but waiting their turn go now)
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                drop(s);
            }
        });
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().expect("kv").is_none()
    }
}

/// A scan of a store ([`KvStore::scan`]): its keys and where their records were when it
/// was taken; values are read a chunk at a time, as they were then — whatever is written,
/// deleted or compacted meanwhile (the segments it reads stay open while it lives).
#[pyclass(module = "uringkit._native")]
pub struct KvScan {
    store: Py<KvStore>,
    items: Vec<Listed>,
    next: usize,
    /// (key, value) pairs read ahead for `__next__`, in reverse (popped from the end)
    ahead: Vec<Py<PyAny>>,
}

/// Pairs a scan iterated with `__next__` reads at a time.
const SCAN_AHEAD: usize = 1000;

impl KvScan {
    /// The next `n` (key, value) pairs as tuples (none at the end), values read with the
    /// GIL released.
    fn read_pairs(&mut self, py: Python<'_>, n: usize) -> PyResult<Vec<Py<PyAny>>> {
        let s = self.store.get().store()?;
        let end = self.next.saturating_add(n).min(self.items.len());
        let part = &self.items[self.next..end];
        let vals = py.detach(|| s.read_listed(part)).map_err(kv_err)?;
        let mut out = Vec::with_capacity(part.len());
        for ((k, _, _), v) in part.iter().zip(vals) {
            let pair = (PyBytes::new(py, k), PyBytes::new(py, &v));
            out.push(pair.into_pyobject(py)?.into_any().unbind());
        }
        self.next = end;
        Ok(out)
    }
}

#[pymethods]
impl KvScan {
    /// Every key of the scan, in its order. (Not `keys`: the scan is also the iterator
    /// of its pairs, and `dict()` takes anything with a `keys` method for a mapping.)
    fn key_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.items.iter().map(|(k, _, _)| PyBytes::new(py, k)))
    }

    /// The next `n` (key, value) pairs; an empty list at the end. The store must still be
    /// open (ValueError once it is closed).
    fn next_items<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.read_pairs(py, n)?)
    }

    /// The (key, value) pairs one at a time, read SCAN_AHEAD at a time (as `next_items`):
    /// no Python generator between them and the caller.
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.ahead.is_empty() {
            self.ahead = self.read_pairs(py, SCAN_AHEAD)?;
            self.ahead.reverse();
        }
        Ok(self.ahead.pop())
    }
}

/// A snapshot view of a store ([`KvStore::view`]): reads as the store was when it was
/// taken, whatever is written, deleted or compacted since (`Store::view_open`). Ends
/// with `close()`, when it is dropped, or when the store is closed (ValueError then).
#[pyclass(module = "uringkit._native", frozen, subclass)]
pub struct KvView {
    owner: Py<KvStore>,
    /// the store it was taken of (a read-only one a refresh replaced stays in `retired`)
    target: std::sync::Weak<Store>,
    id: u64,
}

impl KvView {
    fn target(&self) -> PyResult<Arc<Store>> {
        self.owner.get().store()?; // (closed, or a fork's: say so)
        self.target
            .upgrade()
            .ok_or_else(|| PyValueError::new_err("operation on a closed store"))
    }

    fn end(&self) {
        // (in a forked child the store is the parent's, frozen at the fork — its locks
        // maybe held by a thread that is not there: nothing to let go)
        if let Some(s) = self.target.upgrade().filter(|s| !s.forked()) {
            if s.view_close(self.id) == Some(0) {
                let mut r = self.owner.get().retired.lock().expect("kv");
                r.retain(|x| !Arc::ptr_eq(x, &s));
            }
        }
    }
}

impl Drop for KvView {
    fn drop(&mut self) {
        self.end();
    }
}

#[pymethods]
impl KvView {
    /// A view of `store` as it is now (`uringkit.kv.Snapshot` subclasses this).
    #[new]
    fn new(store: &Bound<'_, KvStore>) -> PyResult<Self> {
        let s = store.get().store()?;
        // (the GIL is let go only when the open's index check may still be running)
        let id = match s.index_verdict_in() {
            true => s.view_open(),
            false => store.py().detach(|| s.view_open()),
        }
        .map_err(kv_err)?;
        Ok(KvView {
            owner: store.clone().unbind(),
            target: Arc::downgrade(&s),
            id,
        })
    }

    /// The value `key` had when the view was taken, or `default`.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let s = self.target()?;
        let k = key_arg(key)?;
        let v = s
            .view_get_with(self.id, k, false, |v| PyBytes::new(py, v))
            .map_err(kv_err)?;
        Ok(v.map(Bound::into_any).or(default))
    }

    /// get(key) if the record is in memory; BlockingIOError if reading it would wait for
    /// the disk.
    fn get_cached<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let s = self.target()?;
        s.view_get_with(self.id, key_arg(key)?, true, |v| PyBytes::new(py, v))
            .map_err(kv_err)
    }

    /// The values of `keys` when the view was taken (None: absent), read in one batch.
    fn multi_get<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let s = self.target()?;
        let id = self.id;
        multi_read(py, keys, |refs| s.view_multi_get(id, refs))
    }

    /// Whether `key` was in the store (False for anything but non-empty bytes, as
    /// `key in db`).
    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let s = self.target()?;
        match key.cast::<PyBytes>() {
            Ok(k) if !k.as_bytes().is_empty() => {
                s.view_contains(self.id, k.as_bytes()).map_err(kv_err)
            }
            _ => Ok(false),
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        self.target()?.view_len(self.id).map_err(kv_err)
    }

    /// The next page of a forward scan of the view: at most `n` of its keys that start
    /// with `prefix`, lie in [start, stop) and come after `after` (the last key of the
    /// page before), ascending — (key, value) pairs, or keys (`include_value=False`).
    /// What `iterator()` reads a page at a time (Store::view_page).
    #[pyo3(signature = (prefix, start, stop, after, n, include_value))]
    #[allow(clippy::too_many_arguments)]
    fn page<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<Vec<u8>>,
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        after: Option<Vec<u8>>,
        n: usize,
        include_value: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let s = self.target()?;
        let pre = prefix.unwrap_or_default();
        let id = self.id;
        let items = py
            .detach(|| {
                s.view_page(
                    id,
                    &pre,
                    start.as_deref(),
                    stop.as_deref(),
                    after.as_deref(),
                    n,
                )
            })
            .map_err(kv_err)?;
        if !include_value {
            return PyList::new(py, items.iter().map(|(k, _, _)| PyBytes::new(py, k)));
        }
        let vals = py.detach(|| s.read_listed(&items)).map_err(kv_err)?;
        let pairs = items
            .iter()
            .zip(vals)
            .map(|((k, _, _), v)| (PyBytes::new(py, k), PyBytes::new(py, &v)));
        PyList::new(py, pairs)
    }

    /// [`KvStore::scan`] as of the view.
    #[pyo3(signature = (prefix=None, start=None, stop=None, reverse=false))]
    fn scan(
        &self,
        py: Python<'_>,
        prefix: Option<Vec<u8>>,
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        reverse: bool,
    ) -> PyResult<KvScan> {
        let s = self.target()?;
        let pre = prefix.unwrap_or_default();
        let id = self.id;
        let mut items = py
            .detach(|| s.view_scan(id, &pre, start.as_deref(), stop.as_deref()))
            .map_err(kv_err)?;
        if reverse {
            items.reverse();
        }
        Ok(KvScan {
            store: self.owner.clone_ref(py),
            items,
            next: 0,
            ahead: Vec::new(),
        })
    }

    /// End the view (what it held is let go). Idempotent.
    fn close(&self) {
        self.end();
    }

    /// Whether the view has ended (closed, or its store closed).
    #[getter]
    fn closed(&self) -> bool {
        match self.target.upgrade() {
            Some(s) => self.owner.get().store().is_err() || !s.view_is_open(self.id),
            None => true,
        }
    }
}
