//! zstd compression of values, with a dictionary trained on the store's own values
//! (docs/kv-format.md, "Compressed values").
//!
//! Small values compress poorly one at a time: a 550-byte JSON record holds little that
//! repeats within it, while the records repeat each other's field names, vocabulary and
//! layout. A zstd dictionary trained on a sample of them carries that shared part, and
//! each value is compressed against it — RocksDB's `zstd_max_train_bytes`. Here the
//! dictionary is trained on the first values a store compresses (a background thread,
//! once 1,000 values or 1 MiB of them have been seen), written to `DICT-<id>` durably —
//! before any record compressed with it can reach the disk — and used for every value
//! compressed after that. Values compressed before it exists are plain zstd frames.
//! Every frame names its dictionary (zstd's dictionary id, in the frame header), so a
//! reader finds the right one whatever wrote the record, and a frame whose dictionary is
//! missing is reported as such, never decoded against another.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use super::record::{COMPRESS_MIN, MAX_VALUE};

/// The largest dictionary trained (zstd's own default is 110 KB; 16 KiB did as well on
/// 550-byte records: 0.257 of their size against 0.259 with 500 samples).
pub const DICT_SIZE: usize = 16 << 10;
/// zstd's default level (RocksDB's too): `compression_level` changes it.
pub const LEVEL: i32 = 3;
/// The levels `compression_level` takes (zstd's 20-22 need a window larger than a
/// value can use).
pub const LEVELS: std::ops::RangeInclusive<i32> = 1..=19;
/// Training starts once this many values were sampled...
pub const TRAIN_VALUES: usize = 1000;
/// ... or this many bytes of them (the first `SAMPLE_MAX` bytes of each value).
pub const TRAIN_BYTES: usize = 1 << 20;
const SAMPLE_MAX: usize = 16 << 10;
const MAGIC: &[u8; 8] = b"XKVDICT1";
/// magic, u32 dictionary length, u32 CRC32C of the dictionary
const FILE_HEADER: usize = 16;
/// A dictionary retrained by compaction: magic, u32 length, u32 CRC32C of the
/// generation's 8 bytes and the dictionary, u64 generation (the first dictionary a
/// store trains is generation 0, in a version-1 file: readable by older builds).
const MAGIC2: &[u8; 8] = b"XKVDICT2";
const FILE_HEADER2: usize = 24;
/// Compaction retrains only when the new dictionary makes held-out values at least
/// this much smaller (a store whose data stays alike keeps its dictionary).
pub const RETRAIN_GAIN: f64 = 0.10;
/// Writers watch how well the dictionary does on what they write, over windows of this
/// many values (see [`Zstd::compress_pinned`], "drift")...
pub const DRIFT_WINDOW: u64 = 1000;
/// ... and retrain it, on the values they write next, when a window's frames come out
/// this much larger (relative to the values) than in the window they are compared with.
pub const DRIFT: f64 = 0.20;

/// The file a dictionary is kept in, named by its id.
pub fn dict_name(id: u32) -> String {
    format!("DICT-{id:08x}")
}

/// The id a dictionary file's name carries (None: not a dictionary file).
pub fn dict_id_of(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("DICT-")?;
    (hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u32::from_str_radix(hex, 16).ok())
        .flatten()
        .filter(|id| dict_name(*id) == name)
}

/// Every dictionary file in `dir`, by id.
pub fn list(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for e in fs::read_dir(dir)? {
        if let Some(id) = e?.file_name().to_str().and_then(dict_id_of) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Read and check `dir`'s dictionary `id`.
pub fn load(dir: &Path, id: u32) -> Result<Vec<u8>, String> {
    load_gen(dir, id).map(|(d, _)| d)
}

/// [`load`], with the dictionary's generation (0: the first one the store trained).
pub fn load_gen(dir: &Path, id: u32) -> Result<(Vec<u8>, u64), String> {
    let name = dict_name(id);
    let data = match fs::read(dir.join(&name)) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "compressed with the dictionary {name}, which is not in the store's \
                 directory (a copy of the store made without it: copy it over from the \
                 original)"
            ))
        }
        Err(e) => return Err(format!("{name}: {e}")),
    };
    let bad = |why: &str| Err(format!("{name} is damaged ({why})"));
    let (head, gen) = match data.get(..8) {
        Some(m) if m == MAGIC && data.len() >= FILE_HEADER => (FILE_HEADER, None),
        Some(m) if m == MAGIC2 && data.len() >= FILE_HEADER2 => (
            FILE_HEADER2,
            Some(u64::from_le_bytes(data[16..24].try_into().expect("8"))),
        ),
        _ => return bad("not a dictionary file"),
    };
    let len = u32::from_le_bytes(data[8..12].try_into().expect("4")) as usize;
    let crc = u32::from_le_bytes(data[12..16].try_into().expect("4"));
    let dict = &data[head..];
    if dict.len() != len {
        return bad("cut short");
    }
    let sum = match gen {
        None => crc32c::crc32c(dict),
        Some(_) => crc32c::crc32c_append(crc32c::crc32c(&data[16..24]), dict),
    };
    if sum != crc {
        return bad("its checksum fails");
    }
    if zstd_safe::get_dict_id_from_dict(dict).map(|i| i.get()) != Some(id) {
        return bad("its id is not the one its name says");
    }
    Ok((dict.to_vec(), gen.unwrap_or(0)))
}

/// The id of the dictionary a zstd frame was compressed with (0: none, or not a frame).
pub fn frame_dict_id(frame: &[u8]) -> u32 {
    zstd_safe::get_dict_id_from_frame(frame).map_or(0, |i| i.get())
}

/// What a `repair=True` open asks of each zstd record it scans: can its value be read?
/// A frame naming a dictionary that is missing or damaged cannot — it is skipped like a
/// damaged record, with the reason. Each dictionary is loaded and checked once.
pub struct Usable {
    dir: PathBuf,
    seen: RefCell<HashMap<u32, Option<String>>>,
}

impl Usable {
    pub fn new(dir: &Path) -> Self {
        Usable {
            dir: dir.to_path_buf(),
            seen: RefCell::new(HashMap::new()),
        }
    }

    /// Why the zstd frame `frame` cannot be decoded for want of its dictionary (None:
    /// it names none, or one that loads and checks).
    pub fn problem(&self, frame: &[u8]) -> Option<String> {
        let id = zstd_safe::get_dict_id_from_frame(frame)?.get();
        self.seen
            .borrow_mut()
            .entry(id)
            .or_insert_with(|| {
                load(&self.dir, id)
                    .err()
                    .map(|e| format!("values that cannot be read: {e}"))
            })
            .clone()
    }
}

/// Write `dict` as `dir`'s dictionary file of generation `gen`, durably: a temporary
/// file, fdatasync, a rename that never replaces, the directory fsynced. Only then may a
/// record use it.
pub fn store(dir: &Path, dict: &[u8], gen: u64) -> io::Result<u32> {
    let id = zstd_safe::get_dict_id_from_dict(dict)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a dictionary without an id"))?
        .get();
    let name = dict_name(id);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    let mut data = Vec::with_capacity(FILE_HEADER2 + dict.len());
    let g = gen.to_le_bytes();
    data.extend_from_slice(if gen == 0 { MAGIC } else { MAGIC2 });
    data.extend_from_slice(&(dict.len() as u32).to_le_bytes());
    match gen {
        0 => data.extend_from_slice(&crc32c::crc32c(dict).to_le_bytes()),
        _ => {
            let crc = crc32c::crc32c_append(crc32c::crc32c(&g), dict);
            data.extend_from_slice(&crc.to_le_bytes());
            data.extend_from_slice(&g);
        }
    }
    data.extend_from_slice(dict);
    let made = f
        .write_all(&data)
        .and_then(|()| f.sync_data())
        .and_then(|()| super::store::rename_noreplace(&tmp, &dir.join(&name)));
    if let Err(e) = made {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    super::store::fsync_dir(dir)?;
    Ok(id)
}

/// Train a dictionary on the samples (`sizes` of them back to back in `data`) and keep
/// it in `dir`: what the background thread does.
fn train(dir: &Path, data: &[u8], sizes: &[usize]) -> Result<Vec<u8>, String> {
    let dict = zstd::dict::from_continuous(data, sizes, DICT_SIZE)
        .map_err(|e| format!("training a dictionary on {} values: {e}", sizes.len()))?;
    store(dir, &dict, 0).map_err(|e| format!("writing the trained dictionary: {e}"))?;
    Ok(dict)
}

/// `sizes` values back to back in `data`, apart.
fn split<'a>(data: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            at += n;
            &data[at - n..at]
        })
        .collect()
}

/// A dictionary trained on every other one of `values` (the first [`SAMPLE_MAX`] bytes
/// of each; those under [`COMPRESS_MIN`] left out) when it compresses the others at
/// least [`RETRAIN_GAIN`] smaller than `cur` does at `level`: the dictionary, and the
/// held-out values' size with `cur` and with it. None: too few values to judge (under a
/// quarter of [`TRAIN_VALUES`]), no such gain, or training failed.
fn better(cur: &CDict, values: &[&[u8]], level: i32) -> Option<(Vec<u8>, usize, usize)> {
    let values: Vec<&[u8]> = values
        .iter()
        .filter(|v| v.len() >= COMPRESS_MIN)
        .map(|v| &v[..v.len().min(SAMPLE_MAX)])
        .collect();
    if values.len() < TRAIN_VALUES / 4 {
        return None;
    }
    let (train_on, held): (Vec<_>, Vec<_>) =
        values.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let sizes: Vec<usize> = train_on.iter().map(|(_, v)| v.len()).collect();
    let data: Vec<u8> = train_on
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .collect();
    let new = zstd::dict::from_continuous(&data, &sizes, DICT_SIZE).ok()?;
    let cand = CDict::try_create(&new, level)?;
    let mut cctx = CCtx::create();
    let mut out = Vec::new();
    let mut size = |cd: &CDict| -> Option<usize> {
        let mut n = 0;
        for (_, v) in &held {
            out.clear();
            out.reserve(zstd_safe::compress_bound(v.len()));
            n += cctx.compress_using_cdict(&mut out, v, cd).ok()?;
        }
        Some(n)
    };
    let (before, after) = (size(cur)?, size(&cand)?);
    (after as f64 <= before as f64 * (1.0 - RETRAIN_GAIN)).then_some((new, before, after))
}

thread_local! {
    /// One decompression context per thread (making one is ~100 KB of allocation).
    static DCTX: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
}

struct Encoder {
    /// the dictionary values are compressed with, and its id
    dict: Option<(u32, Arc<CDict<'static>>)>,
    /// its generation (retrained by compaction or for drifting writes: one more than
    /// the one it replaced)
    gen: u64,
    /// values sampled for training, back to back, and their sizes (None: not sampling —
    /// a dictionary exists and does as well as it did, is being trained, or training
    /// failed)
    samples: Option<(Vec<u8>, Vec<usize>)>,
    training: Option<JoinHandle<Trained>>,
    failed: Option<String>,
    /// what the writers' frames came to, relative to their values, in the window the
    /// current dictionary is held to (None: not measured yet — a new dictionary's first
    /// window sets it)
    baseline: Option<f64>,
    /// times writers found the values drifting and retrained, and of those, the new
    /// dictionaries kept (`stats()`)
    drift_retrains: (u64, u64),
    /// dictionaries retraining replaced in this open: a value compressed with one holds
    /// a strong reference ([`Pin`]) until it is encoded into the log's buffers
    retired: Vec<(u32, Weak<CDict<'static>>)>,
}

/// What the background thread made of its samples.
enum Trained {
    /// The store's first dictionary (written to the directory), or why not.
    First(Result<Vec<u8>, String>),
    /// Writers found their values drifting: a dictionary of this generation, written
    /// to the directory because it did [`RETRAIN_GAIN`] better than the current one on
    /// held-out values (None: it did not, or training failed; nothing changes).
    Next(Option<(Vec<u8>, u64)>),
}

/// What writers' frames come to relative to their values, with the dictionary `id` —
/// counted outside the encoder's lock, judged under it once a window is full (see
/// [`Zstd::compress_pinned`]).
#[derive(Default)]
struct Watch {
    id: AtomicU32,
    values: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// What a compressed value holds on to until its record is encoded: the dictionary it
/// was compressed with, which is then never removed from under it (compaction removes
/// a replaced dictionary only when no value still pins it and no record names it).
pub type Pin = Arc<CDict<'static>>;

#[derive(Clone)]
struct Loaded {
    dd: Arc<DDict<'static>>,
    raw: Arc<[u8]>,
    gen: u64,
}

impl Loaded {
    fn new(d: &[u8], gen: u64) -> Self {
        Loaded {
            dd: Arc::new(DDict::create(d)),
            raw: d.into(),
            gen,
        }
    }
}

/// A store's zstd codec: decoding always (records say how they were written), encoding
/// when the store was opened with `compression="zstd"`.
pub struct Zstd {
    dir: PathBuf,
    enc: Option<Mutex<Encoder>>,
    /// compression contexts not in use (one is made when none is free)
    cctxs: Mutex<Vec<CCtx<'static>>>,
    /// every dictionary loaded (by id): for decoding, and its bytes and generation for
    /// a checkpoint of a store whose writer has removed it since (see `copy_loaded`)
    dec: RwLock<HashMap<u32, Loaded>>,
    /// the fork generation it was made in (a forked child never joins the trainer)
    born: u64,
    /// the compression level (a dictionary is prepared for it)
    level: i32,
    /// the writers' frames with the current dictionary
    watch: Watch,
}

impl Zstd {
    /// The codec of the store in `dir`; `encode`: compress values at this level (with
    /// the dictionary found in `dir`, or one trained on the values to come). `known`:
    /// the dictionaries in `dir`, when the caller just listed it (None: listed here).
    pub fn new(dir: &Path, encode: Option<i32>) -> Self {
        Self::with_known(dir, encode, None)
    }

    /// [`Zstd::new`] with the ids of the dictionaries the directory holds.
    pub fn with_known(dir: &Path, encode: Option<i32>, known: Option<Vec<u32>>) -> Self {
        let mut z = Zstd {
            dir: dir.to_path_buf(),
            enc: None,
            level: encode.unwrap_or(LEVEL),
            cctxs: Mutex::new(Vec::new()),
            dec: RwLock::new(HashMap::new()),
            born: crate::sys::fork::generation(),
            watch: Watch::default(),
        };
        // Every dictionary there is loaded now, not when a frame first names it: a
        // compaction of the writer may remove one that no record names any more while a
        // reader (this process's, or a read-only follower's) still reads a record of the
        // segments it retired (see Store::open_once).
        let ids = known.unwrap_or_else(|| list(dir).unwrap_or_default());
        let mut gens = Vec::new();
        for &id in &ids {
            if let Ok((d, g)) = load_gen(dir, id) {
                z.dec.write().expect("dicts").insert(id, Loaded::new(&d, g));
                gens.push((g, id, d));
            }
        }
        if encode.is_none() {
            return z;
        }
        // the newest valid dictionary there: the highest generation (compaction
        // retrains), then the highest id (a second generation-0 one is trained only when
        // the first was found damaged)
        let found = gens.into_iter().max_by_key(|(g, id, _)| (*g, *id));
        let mut enc = Encoder {
            dict: None,
            gen: 0,
            samples: Some((Vec::new(), Vec::new())),
            training: None,
            failed: None,
            retired: Vec::new(),
            baseline: None,
            drift_retrains: (0, 0),
        };
        if let Some((gen, id, d)) = found {
            if let Some(cd) = CDict::try_create(&d, z.level) {
                z.watch.id.store(id, Ordering::Relaxed);
                enc.dict = Some((id, Arc::new(cd)));
                enc.gen = gen;
                enc.samples = None;
            }
        }
        z.enc = Some(Mutex::new(enc));
        z
    }

    /// Load the dictionaries `ids` (the directory's) not loaded yet (a damaged one is
    /// left to the frames that name it: their reads report it).
    pub fn load_all(&self, ids: &[u32]) {
        for &id in ids {
            if self.dec.read().expect("dicts").contains_key(&id) {
                continue;
            }
            if let Ok((d, g)) = load_gen(&self.dir, id) {
                let l = Loaded::new(&d, g);
                self.dec.write().expect("dicts").entry(id).or_insert(l);
            }
        }
    }

    /// Take every dictionary `from` has loaded that this codec has not: a read-only
    /// store reopened by a refresh, whose iterators and snapshots taken before go on
    /// reading records of the old one — compressed maybe with a dictionary the writer
    /// has removed from the directory since.
    pub fn inherit(&self, from: &Zstd) {
        let theirs: Vec<(u32, Loaded)> = {
            let dec = from.dec.read().expect("dicts");
            dec.iter().map(|(id, l)| (*id, l.clone())).collect()
        };
        let mut dec = self.dec.write().expect("dicts");
        for (id, l) in theirs {
            dec.entry(id).or_insert(l);
        }
    }

    /// Write into the store directory `to` every dictionary this codec has loaded that
    /// `to` lacks — after [`copy_all`], for a checkpoint of a read-only store whose
    /// writer removed one its segments name since it was read.
    pub fn copy_loaded(&self, to: &Path) -> io::Result<()> {
        let loaded: Vec<(u32, Arc<[u8]>, u64)> = {
            let dec = self.dec.read().expect("dicts");
            dec.iter()
                .map(|(id, l)| (*id, l.raw.clone(), l.gen))
                .collect()
        };
        for (id, raw, gen) in loaded {
            if !to.join(dict_name(id)).exists() {
                store(to, &raw, gen)?;
            }
        }
        Ok(())
    }

    /// `value` as a zstd frame, or None when that would not save an eighth of it (or
    /// it is shorter than [`COMPRESS_MIN`], or this codec does not compress).
    pub fn compress(&self, value: &[u8]) -> Option<Vec<u8>> {
        self.compress_pinned(value).map(|(f, _)| f)
    }

    /// A value compaction copies, as a zstd frame (or None, as [`Zstd::compress`]): not
    /// a writer's — neither sampled for training nor counted in the drift watch (old
    /// values rewritten against a dictionary retrained for newer ones would look like
    /// drift).
    pub fn compress_copy(&self, value: &[u8]) -> Option<Vec<u8>> {
        self.enc.as_ref()?;
        if value.len() < COMPRESS_MIN {
            return None;
        }
        let dict = self.current();
        self.encode(value, dict.as_ref().map(|d| &d.1))
            .and_then(|(f, _)| f)
    }

    /// [`Zstd::compress`], with the dictionary the frame was compressed with: to hold
    /// until the record is encoded (see [`Pin`]).
    ///
    /// A writer's value: sampled while there is no dictionary yet (the first 1,000 train
    /// one), and, once there is, counted in the *drift watch* — its frame's size
    /// against its own, whether or not the frame is kept. Each window of
    /// [`DRIFT_WINDOW`] values is compared with the first window the dictionary had
    /// (or the last one that set off a retraining); one whose frames come out
    /// [`DRIFT`] larger starts a retraining on the values written next, in the
    /// background, kept only when it pays as much as compaction's does — so a store
    /// whose writes change kind gets a dictionary for them without waiting for a
    /// compaction of every segment.
    pub fn compress_pinned(&self, value: &[u8]) -> Option<(Vec<u8>, Option<Pin>)> {
        let enc = self.enc.as_ref()?;
        if value.len() < COMPRESS_MIN {
            return None;
        }
        let dict = {
            let mut e = enc.lock().expect("zstd encoder");
            self.take_trained(&mut e);
            self.judge_window(&mut e);
            self.sample(&mut e, value);
            e.dict.clone()
        };
        let (out, size) = self.encode(value, dict.as_ref().map(|d| &d.1))?;
        if let Some((id, _)) = dict {
            let w = &self.watch;
            if w.id.load(Ordering::Relaxed) == id {
                w.bytes_in.fetch_add(value.len() as u64, Ordering::Relaxed);
                w.bytes_out.fetch_add(size as u64, Ordering::Relaxed);
                w.values.fetch_add(1, Ordering::Release);
            }
        }
        out.map(|f| (f, dict.map(|d| d.1)))
    }

    /// The dictionary in use (and its id), if any.
    fn current(&self) -> Option<(u32, Pin)> {
        let enc = self.enc.as_ref()?;
        let mut e = enc.lock().expect("zstd encoder");
        self.take_trained(&mut e);
        e.dict.clone()
    }

    /// `value` compressed (with `dict`, or at the level without one), on a context of
    /// the pool, outside the encoder's lock: writer threads compress side by side, with
    /// as many contexts as ever did at once. The frame (None when it would not save an
    /// eighth of the value) and its size either way; None when zstd failed.
    fn encode(&self, value: &[u8], dict: Option<&Pin>) -> Option<(Option<Vec<u8>>, usize)> {
        let pooled = self.cctxs.lock().expect("zstd contexts").pop();
        let mut cctx = pooled.unwrap_or_else(CCtx::create);
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(value.len()));
        let done = match dict {
            Some(cd) => cctx.compress_using_cdict(&mut out, value, cd),
            None => cctx.compress(&mut out, value, self.level),
        };
        self.cctxs.lock().expect("zstd contexts").push(cctx);
        done.ok()?;
        let n = out.len();
        Some(((n <= value.len() - value.len() / 8).then_some(out), n))
    }

    /// The drift watch (see [`Zstd::compress_pinned`]): once a window of writers'
    /// values is counted, compare it with the baseline and start sampling for a
    /// retraining when it drifted.
    fn judge_window(&self, e: &mut Encoder) {
        let w = &self.watch;
        if w.values.load(Ordering::Acquire) < DRIFT_WINDOW {
            return;
        }
        let n = w.values.swap(0, Ordering::AcqRel);
        let bytes_in = w.bytes_in.swap(0, Ordering::Relaxed);
        let bytes_out = w.bytes_out.swap(0, Ordering::Relaxed);
        if n == 0 || bytes_in == 0 || e.dict.is_none() {
            return;
        }
        let ratio = bytes_out as f64 / bytes_in as f64;
        match e.baseline {
            None => e.baseline = Some(ratio),
            Some(b) if ratio > b * (1.0 + DRIFT) => {
                if e.samples.is_none() && e.training.is_none() {
                    // held to this window from now on, whatever the retraining gives:
                    // values that no dictionary does better with are not retrained for
                    // again until they drift further
                    e.baseline = Some(ratio);
                    e.samples = Some((Vec::new(), Vec::new()));
                }
            }
            Some(_) => {}
        }
    }

    /// Which of the dictionaries `ids` no value may still be compressed with: neither
    /// the one in use nor one that a value compressed before it was replaced still pins.
    /// (Called under the store's commit lock, after every buffered record was written:
    /// with the records in the queue checked apart, what this returns is named only by
    /// records already in the segments.)
    pub fn unpinned(&self, ids: &[u32]) -> Vec<u32> {
        let Some(enc) = &self.enc else {
            return ids.to_vec(); // (a reader's open compresses nothing)
        };
        let mut e = enc.lock().expect("zstd encoder");
        self.take_trained(&mut e);
        e.retired.retain(|(_, w)| w.strong_count() > 0);
        let current = e.dict.as_ref().map(|d| d.0);
        let pinned: Vec<u32> = e.retired.iter().map(|r| r.0).collect();
        ids.iter()
            .copied()
            .filter(|id| Some(*id) != current && !pinned.contains(id))
            .collect()
    }

    /// Sample a writer's value, while sampling: for the first dictionary (1,000 values
    /// or 1 MiB), or for a retraining (twice that: half to train on, half held out).
    fn sample(&self, e: &mut Encoder, value: &[u8]) {
        let Some((data, sizes)) = &mut e.samples else {
            return;
        };
        let n = value.len().min(SAMPLE_MAX);
        data.extend_from_slice(&value[..n]);
        sizes.push(n);
        let want = if e.dict.is_some() { 2 } else { 1 };
        if sizes.len() < want * TRAIN_VALUES && data.len() < want * TRAIN_BYTES {
            return;
        }
        let (data, sizes) = e.samples.take().expect("sampling");
        let dir = self.dir.clone();
        let spawned = match e.dict.clone() {
            None => std::thread::Builder::new()
                .name("uringkit-dict".into())
                .spawn(move || Trained::First(train(&dir, &data, &sizes))),
            Some((_, cur)) => {
                let (gen, level) = (e.gen + 1, self.level);
                std::thread::Builder::new()
                    .name("uringkit-dict".into())
                    .spawn(move || {
                        let values = split(&data, &sizes);
                        Trained::Next(
                            better(&cur, &values, level)
                                .and_then(|(d, _, _)| store(&dir, &d, gen).ok().map(|_| (d, gen))),
                        )
                    })
            }
        };
        match spawned {
            Ok(h) => e.training = Some(h),
            Err(err) if e.dict.is_none() => {
                e.failed = Some(format!("starting the training thread: {err}"))
            }
            Err(_) => {} // (a retraining is an optimisation: the next drift tries again)
        }
    }

    /// Start using the dictionary the background thread trained, once it is done.
    fn take_trained(&self, e: &mut Encoder) {
        if !e.training.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        let done = e.training.take().expect("training").join();
        match done {
            Ok(Trained::First(r)) => self.install(e, r),
            Err(_) if e.dict.is_none() => {
                self.install(e, Err("the training thread panicked".into()))
            }
            Ok(Trained::Next(Some((d, gen)))) => {
                e.drift_retrains.0 += 1;
                if self.adopt(e, &d, gen) {
                    e.drift_retrains.1 += 1;
                }
            }
            Ok(Trained::Next(None)) | Err(_) => e.drift_retrains.0 += 1,
        }
    }

    fn install(&self, e: &mut Encoder, trained: Result<Vec<u8>, String>) {
        let d = match trained {
            Ok(d) => d,
            Err(why) => {
                e.failed = Some(why);
                return;
            }
        };
        if !self.adopt(e, &d, 0) {
            e.failed = Some("zstd refused the trained dictionary".into());
        }
    }

    /// Compress with `d` (generation `gen`, already in the directory) from now on; the
    /// dictionary it replaces is retired (see [`Pin`]). False: zstd refused it.
    fn adopt(&self, e: &mut Encoder, d: &[u8], gen: u64) -> bool {
        let (Some(id), Some(cd)) = (
            zstd_safe::get_dict_id_from_dict(d),
            CDict::try_create(d, self.level),
        ) else {
            return false;
        };
        let id = id.get();
        self.dec
            .write()
            .expect("dicts")
            .insert(id, Loaded::new(d, gen));
        if let Some((old, cd)) = e.dict.replace((id, Arc::new(cd))) {
            e.retired.push((old, Arc::downgrade(&cd)));
        }
        e.gen = e.gen.max(gen);
        // a new window for the new dictionary, measured from its first values
        e.baseline = None;
        self.watch.id.store(id, Ordering::Relaxed);
        self.watch.values.store(0, Ordering::Relaxed);
        self.watch.bytes_in.store(0, Ordering::Relaxed);
        self.watch.bytes_out.store(0, Ordering::Relaxed);
        true
    }

    /// Whether this codec compresses and still wants samples to train its first
    /// dictionary on (none trained, none in training, no failure).
    pub fn wants_samples(&self) -> bool {
        self.enc.as_ref().is_some_and(|enc| {
            let e = enc.lock().expect("zstd encoder");
            e.dict.is_none() && e.samples.is_some() && e.training.is_none()
        })
    }

    /// Train the dictionary now, on `values` (and what writers sampled so far), on the
    /// calling thread — compaction's: a store opened with `compression="zstd"` then
    /// compacts every value against the dictionary, not only those after the first
    /// 1,000. Nothing when a dictionary exists, is being trained (waited for) or
    /// failed, or when there are fewer than a quarter of the samples training wants.
    pub fn train_now<'v>(&self, values: impl Iterator<Item = &'v [u8]>) {
        let Some(enc) = &self.enc else {
            return;
        };
        let (mut data, mut sizes) = {
            let mut e = enc.lock().expect("zstd encoder");
            let first = if e.dict.is_none() {
                e.samples.take()
            } else {
                None
            };
            match first {
                Some(s) => s,
                None => {
                    drop(e);
                    self.settle();
                    return;
                }
            }
        };
        for v in values.filter(|v| v.len() >= COMPRESS_MIN) {
            let n = v.len().min(SAMPLE_MAX);
            data.extend_from_slice(&v[..n]);
            sizes.push(n);
            if sizes.len() >= TRAIN_VALUES || data.len() >= TRAIN_BYTES {
                break;
            }
        }
        if sizes.len() < TRAIN_VALUES / 4 && data.len() < TRAIN_BYTES / 4 {
            // too few to train on (a small store): the writers go on sampling
            let mut e = enc.lock().expect("zstd encoder");
            if e.dict.is_none() && e.training.is_none() && e.failed.is_none() {
                e.samples = Some((data, sizes));
            }
            return;
        }
        // (writers meanwhile compress without a dictionary, and sample nothing)
        let trained = train(&self.dir, &data, &sizes);
        self.install(&mut enc.lock().expect("zstd encoder"), trained);
    }

    /// Compaction's retraining: train a dictionary on `values` (half of them; the other
    /// half held out) and, when it compresses the held-out half at least
    /// [`RETRAIN_GAIN`] smaller than the current one does, keep it (durably, as the next
    /// generation) and compress with it from now on — RocksDB trains a dictionary per
    /// compaction output; a store whose values drift away from what its dictionary was
    /// trained on gets one for what it holds now. Returns (current size, retrained size)
    /// of the held-out values when it was worth it, None otherwise (no dictionary yet,
    /// too few values, no gain, or training failed: nothing changes). A retraining the
    /// writers started is waited for first (its dictionary is then the current one).
    pub fn retrain(&self, values: &[Vec<u8>]) -> Option<(usize, usize)> {
        let enc = self.enc.as_ref()?;
        self.settle();
        let (cur, gen) = {
            let e = enc.lock().expect("zstd encoder");
            (e.dict.as_ref()?.1.clone(), e.gen)
        };
        let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let (new, before, after) = better(&cur, &values, self.level)?;
        // written before any value can be compressed with it
        store(&self.dir, &new, gen + 1).ok()?;
        self.adopt(&mut enc.lock().expect("zstd encoder"), &new, gen + 1)
            .then_some((before, after))
    }
    /// Wait for a dictionary being trained and start using it (compaction, tests). The
    /// encoder is not held while waiting: writers go on compressing meanwhile.
    pub fn settle(&self) {
        let Some(enc) = &self.enc else {
            return;
        };
        loop {
            let mut e = enc.lock().expect("zstd encoder");
            if e.training.as_ref().is_none_or(|h| h.is_finished()) {
                self.take_trained(&mut e);
                return;
            }
            drop(e);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The id of the dictionary values are compressed with now (0: none yet), and why
    /// training failed, if it did (`stats()`).
    /// (An open that does not compress — read-only, or without `compression="zstd"` —
    /// reports the newest dictionary it has loaded: the one a zstd writer uses.)
    pub fn status(&self) -> (u32, Option<String>) {
        match &self.enc {
            None => (self.newest_loaded().1, None),
            Some(enc) => {
                let mut e = enc.lock().expect("zstd encoder");
                self.take_trained(&mut e);
                (e.dict.as_ref().map_or(0, |d| d.0), e.failed.clone())
            }
        }
    }

    /// The current dictionary's generation: how many times compaction retrained it.
    pub fn generation(&self) -> u64 {
        match &self.enc {
            None => self.newest_loaded().0,
            Some(enc) => enc.lock().expect("zstd encoder").gen,
        }
    }

    /// Retrainings the writers' drift watch started in this open (see
    /// [`Zstd::compress_pinned`]), and of those, the dictionaries kept.
    pub fn drift_retrains(&self) -> (u64, u64) {
        self.enc.as_ref().map_or((0, 0), |enc| {
            let mut e = enc.lock().expect("zstd encoder");
            self.take_trained(&mut e);
            e.drift_retrains
        })
    }

    /// (generation, id) of the newest dictionary loaded ((0, 0): none).
    fn newest_loaded(&self) -> (u64, u32) {
        let dec = self.dec.read().expect("dicts");
        dec.iter()
            .map(|(id, l)| (l.gen, *id))
            .max()
            .unwrap_or((0, 0))
    }

    /// The id of the dictionary a zstd frame was compressed with (0: none).
    pub fn frame_dict(&self, frame: &[u8]) -> u32 {
        frame_dict_id(frame)
    }

    /// The dictionary `id`, loaded from the store's directory the first time.
    fn ddict(&self, id: u32) -> Result<Arc<DDict<'static>>, String> {
        if let Some(l) = self.dec.read().expect("dicts").get(&id) {
            return Ok(l.dd.clone());
        }
        let (d, g) = load_gen(&self.dir, id)?;
        let mut dec = self.dec.write().expect("dicts");
        Ok(dec.entry(id).or_insert(Loaded::new(&d, g)).dd.clone())
    }

    /// The value a zstd-compressed record stores as `stored` (after its CRC held: a
    /// failure is damage the CRC could not see, a missing dictionary, or a bug).
    pub fn decompress(&self, stored: &[u8]) -> Result<Vec<u8>, String> {
        let n = match zstd_safe::get_frame_content_size(stored) {
            Ok(Some(n)) if n <= MAX_VALUE as u64 => n as usize,
            Ok(Some(n)) => {
                return Err(format!(
                    "a compressed value says it holds {n} bytes (> 64 MiB)"
                ))
            }
            Ok(None) => return Err("a zstd frame without its content size".into()),
            Err(_) => return Err("a compressed value that is not a zstd frame".into()),
        };
        let dict = match zstd_safe::get_dict_id_from_frame(stored) {
            Some(id) => Some(self.ddict(id.get())?),
            None => None,
        };
        let mut out = Vec::with_capacity(n);
        let done = DCTX.with(|d| {
            let mut d = d.borrow_mut();
            match &dict {
                Some(dd) => d.decompress_using_ddict(&mut out, stored, dd),
                None => d.decompress(&mut out, stored),
            }
        });
        match done {
            Ok(_) if out.len() == n => Ok(out),
            Ok(_) => Err(format!(
                "a compressed value of {n} bytes gave {}",
                out.len()
            )),
            Err(code) => Err(format!(
                "a compressed value does not decompress: {}",
                zstd_safe::get_error_name(code)
            )),
        }
    }
}

impl Drop for Zstd {
    fn drop(&mut self) {
        // A trainer still running writes its file and is waited for (a directory
        // removed right after close must not get a DICT file back). Not in a forked
        // child: the thread is the parent's.
        if crate::sys::fork::generation() != self.born {
            return;
        }
        if let Some(h) = self
            .enc
            .as_mut()
            .and_then(|e| e.get_mut().ok()?.training.take())
        {
            let _ = h.join();
        }
    }
}

/// Copy every dictionary file of `from` into `to` (hard links where possible), durably.
pub fn copy_all(from: &Path, to: &Path) -> io::Result<()> {
    for id in list(from)? {
        let name = dict_name(id);
        if fs::hard_link(from.join(&name), to.join(&name)).is_err() {
            fs::copy(from.join(&name), to.join(&name))?;
            fs::File::open(to.join(&name))?.sync_all()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(i: usize) -> Vec<u8> {
        const W: [&str; 8] = [
            "alpha", "bravo", "charlie", "delta", "echo", "golf", "kilo", "lima",
        ];
        let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            W[(x % 8) as usize]
        };
        let bio: Vec<&str> = (0..20).map(|_| next()).collect();
        format!(
            "{{\"id\": {i}, \"name\": \"{} {}\", \"email\": \"{}@example.com\", \"bio\": \"{}\"}}",
            next(),
            next(),
            next(),
            bio.join(" ")
        )
        .into_bytes()
    }

    #[test]
    fn names() {
        assert_eq!(dict_name(0xabc), "DICT-00000abc");
        assert_eq!(dict_id_of("DICT-00000abc"), Some(0xabc));
        for bad in [
            "DICT-abc",
            "DICT-00000ABC",
            "DICT-00000abc.tmp",
            "DICT-0000000g",
            "x",
        ] {
            assert_eq!(dict_id_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn trains_a_dictionary_and_every_frame_decodes() {
        let d = tempfile::tempdir().unwrap();
        let z = Zstd::new(d.path(), Some(LEVEL));
        let mut frames = Vec::new();
        for i in 0..TRAIN_VALUES * 2 {
            let v = doc(i);
            frames.push((z.compress(&v).expect("compressible"), v));
            if i == TRAIN_VALUES {
                z.settle();
            }
        }
        let (id, failed) = z.status();
        assert!(id != 0 && failed.is_none(), "{id} {failed:?}");
        assert_eq!(list(d.path()).unwrap(), vec![id]);
        let first = zstd_safe::get_dict_id_from_frame(&frames[0].0);
        let last = zstd_safe::get_dict_id_from_frame(&frames.last().unwrap().0);
        assert_eq!((first, last.map(|i| i.get())), (None, Some(id)));
        let plain: usize = frames[..100].iter().map(|f| f.0.len()).sum();
        let with: usize = frames[frames.len() - 100..].iter().map(|f| f.0.len()).sum();
        assert!(
            with * 3 < plain * 2,
            "the dictionary helps: {with} vs {plain}"
        );
        // a reader that never encoded loads the dictionary from the directory
        let r = Zstd::new(d.path(), None);
        for (f, v) in &frames {
            assert_eq!(&r.decompress(f).unwrap(), v);
        }
        // a writer reopened uses the dictionary it finds, and trains no other
        let w = Zstd::new(d.path(), Some(LEVEL));
        assert_eq!(w.status().0, id);
        let f = w.compress(&doc(7)).unwrap();
        assert_eq!(
            zstd_safe::get_dict_id_from_frame(&f).map(|i| i.get()),
            Some(id)
        );
        // the dictionary missing, damaged or misnamed: an error naming it, no guess
        let path = d.path().join(dict_name(id));
        let good = fs::read(&path).unwrap();
        let last = &frames.last().unwrap().0;
        fs::remove_file(&path).unwrap();
        let e = Zstd::new(d.path(), None).decompress(last).unwrap_err();
        assert!(
            e.contains(&dict_name(id)) && e.contains("not in the store"),
            "{e}"
        );
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        fs::write(&path, &bad).unwrap();
        let e = Zstd::new(d.path(), None).decompress(last).unwrap_err();
        assert!(e.contains("damaged"), "{e}");
        assert_eq!(
            Zstd::new(d.path(), Some(LEVEL)).status().0,
            0,
            "a damaged one is not used"
        );
        fs::write(&path, &good).unwrap();
        assert!(Zstd::new(d.path(), None).decompress(last).is_ok());
    }

    /// A log line: nothing like `doc`'s JSON (a store whose values drifted).
    fn line(i: usize) -> Vec<u8> {
        let x = (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
        format!(
            "2026-12-03T12:{:02}:{:02}Z WARN [billing] request_id={x:016x} \
             path=/api/v2/billing/items/{} status=200 latency_ms={}.{:02}",
            x % 60,
            (x >> 8) % 60,
            (x >> 16) % 1_000_000,
            (x >> 40) % 100,
            (x >> 48) % 100,
        )
        .into_bytes()
    }

    #[test]
    fn retraining_keeps_a_new_dictionary_only_when_it_pays() {
        let d = tempfile::tempdir().unwrap();
        let z = Zstd::new(d.path(), Some(LEVEL));
        z.train_now(
            (0..TRAIN_VALUES)
                .map(doc)
                .collect::<Vec<_>>()
                .iter()
                .map(|v| &v[..]),
        );
        let (first, _) = z.status();
        assert!(first > 0 && z.generation() == 0);
        // values like the ones it was trained on: no gain, nothing changes
        let same: Vec<Vec<u8>> = (5000..5000 + 2 * TRAIN_VALUES).map(doc).collect();
        assert_eq!(z.retrain(&same), None);
        assert_eq!((z.status().0, z.generation()), (first, 0));
        assert_eq!(list(d.path()).unwrap(), vec![first]);
        // too few values to judge: nothing either
        let lines: Vec<Vec<u8>> = (0..2 * TRAIN_VALUES).map(line).collect();
        assert_eq!(z.retrain(&lines[..TRAIN_VALUES / 8]), None);
        // values that drifted: a new dictionary, generation 1, written before use
        let early = z.compress(&doc(1)).unwrap();
        let (_, pin) = z.compress_pinned(&doc(2)).unwrap();
        assert_eq!(z.unpinned(&[first, 7]), vec![7], "the one in use");
        let (before, after) = z.retrain(&lines).expect("retrained");
        assert!(after < before * 9 / 10, "{before} -> {after}");
        let (second, _) = z.status();
        assert!(second != first && z.generation() == 1);
        // the replaced one stays pinned while a value compressed with it is unwritten
        assert_eq!(z.unpinned(&[first, second]), vec![]);
        drop(pin);
        assert_eq!(z.unpinned(&[first, second]), vec![first]);
        assert_eq!(load_gen(d.path(), second).unwrap().1, 1);
        assert_eq!(load_gen(d.path(), first).unwrap().1, 0);
        let f = z.compress(&line(99_999)).unwrap();
        assert_eq!(z.frame_dict(&f), second);
        // every frame decodes, whichever dictionary it names, in a fresh reader
        let r = Zstd::new(d.path(), None);
        assert_eq!(r.decompress(&f).unwrap(), line(99_999));
        assert_eq!(r.frame_dict(&early), first);
        assert_eq!(r.decompress(&early).unwrap(), doc(1));
        // a writer reopened takes the newest generation (whatever the ids' order)
        let w = Zstd::new(d.path(), Some(LEVEL));
        assert_eq!((w.status().0, w.generation()), (second, 1));
        // a retrained dictionary's file is checked like the first one's
        let path = d.path().join(dict_name(second));
        let mut bad = fs::read(&path).unwrap();
        bad[20] ^= 1; // (the generation)
        fs::write(&path, &bad).unwrap();
        assert!(load(d.path(), second).unwrap_err().contains("checksum"));
        assert_eq!(Zstd::new(d.path(), Some(LEVEL)).status().0, first);
    }

    /// A trained codec: gen 0 on `doc`s.
    fn trained_on_docs(dir: &Path) -> Zstd {
        let z = Zstd::new(dir, Some(LEVEL));
        let docs: Vec<Vec<u8>> = (0..TRAIN_VALUES).map(doc).collect();
        z.train_now(docs.iter().map(|v| &v[..]));
        assert!(z.status().0 > 0 && z.generation() == 0);
        z
    }

    #[test]
    fn writers_retrain_when_their_values_drift() {
        let d = tempfile::tempdir().unwrap();
        let z = trained_on_docs(d.path());
        let (first, _) = z.status();
        // values like the dictionary's, windows and windows of them: nothing happens
        let docs: Vec<Vec<u8>> = (0..4 * DRIFT_WINDOW as usize)
            .map(|i| z.compress(&doc(10_000 + i)).unwrap())
            .collect();
        z.settle();
        assert_eq!((z.drift_retrains(), z.generation()), ((0, 0), 0));
        // log lines: the next window is judged drifted, the 2,000 lines after it
        // retrain in the background, and the new dictionary is kept
        let mut frames = Vec::new();
        for i in 0..DRIFT_WINDOW as usize + 2 * TRAIN_VALUES + 1 {
            frames.push((z.compress_pinned(&line(i)).map(|f| f.0), line(i)));
        }
        z.settle();
        assert_eq!((z.drift_retrains(), z.generation()), ((1, 1), 1));
        let (second, _) = z.status();
        assert!(second != first);
        assert_eq!(load_gen(d.path(), second).unwrap().1, 1);
        let with_first: usize = frames[..200]
            .iter()
            .map(|f| f.0.as_ref().map_or(f.1.len(), Vec::len))
            .sum();
        // (a window of them: what the new dictionary is held to)
        let now: Vec<Vec<u8>> = (0..DRIFT_WINDOW as usize + 1)
            .map(|i| z.compress(&line(i)).unwrap())
            .collect();
        assert!(now.iter().all(|f| z.frame_dict(f) == second));
        let with_second: usize = now[..200].iter().map(Vec::len).sum();
        assert!(
            with_second * 10 < with_first * 9,
            "{with_second} vs {with_first}"
        );
        // every frame decodes in a fresh reader, whichever dictionary it names
        let r = Zstd::new(d.path(), None);
        for f in docs.iter().chain(&now) {
            r.decompress(f).unwrap();
        }
        for (f, v) in &frames {
            if let Some(f) = f {
                assert_eq!(&r.decompress(f).unwrap(), v);
            }
        }
        // the replaced dictionary is free once no value pins it
        assert_eq!(z.unpinned(&[first, second]), vec![first]);
        // values no dictionary helps (random bytes): one retraining, nothing kept, and
        // no retraining again while they stay that way
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut noise = || -> Vec<u8> {
            (0..40)
                .flat_map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()
                })
                .collect()
        };
        for _ in 0..3 * (DRIFT_WINDOW as usize + 2 * TRAIN_VALUES) {
            assert_eq!(z.compress(&noise()), None, "incompressible");
        }
        z.settle();
        assert_eq!(
            (z.drift_retrains(), z.generation(), z.status().0),
            ((2, 1), 1, second)
        );
        // a writer reopened takes the retrained dictionary
        assert_eq!(Zstd::new(d.path(), Some(LEVEL)).status().0, second);
    }

    #[test]
    fn values_compaction_copies_are_not_watched_for_drift() {
        let d = tempfile::tempdir().unwrap();
        let z = trained_on_docs(d.path());
        for i in 0..=DRIFT_WINDOW as usize {
            z.compress(&doc(i)).unwrap(); // (the writers' window: what drift is against)
        }
        for i in 0..3 * (DRIFT_WINDOW as usize + 2 * TRAIN_VALUES) {
            let _ = z.compress_copy(&line(i)); // (too little gain against the JSON one)
        }
        z.settle();
        assert_eq!((z.drift_retrains(), z.generation()), ((0, 0), 0));
        assert_eq!(list(d.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_dictionary_that_cannot_be_written_is_not_used() {
        // (the directory gone: writing DICT fails, as on a full disk)
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("gone");
        fs::create_dir(&gone).unwrap();
        let z = Zstd::new(&gone, Some(LEVEL));
        fs::remove_dir(&gone).unwrap();
        for i in 0..TRAIN_VALUES + 1 {
            z.compress(&doc(i)).expect("compressible");
        }
        z.settle();
        let (id, failed) = z.status();
        assert_eq!(id, 0);
        assert!(failed.unwrap().contains("writing the trained dictionary"));
        let f = z.compress(&doc(5)).unwrap();
        assert_eq!(
            zstd_safe::get_dict_id_from_frame(&f),
            None,
            "plain zstd goes on"
        );
        assert_eq!(z.decompress(&f).unwrap(), doc(5));
    }

    #[test]
    fn bad_frames_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let z = Zstd::new(d.path(), None);
        assert_eq!(z.compress(&doc(1)), None, "a reader does not compress");
        for bad in [&b""[..], b"abc", &[0x28, 0xb5, 0x2f, 0xfd, 0, 0]] {
            assert!(z.decompress(bad).is_err());
        }
        let w = Zstd::new(d.path(), Some(LEVEL));
        let v = doc(3).repeat(4);
        let mut f = w.compress(&v).unwrap();
        assert_eq!(z.decompress(&f).unwrap(), v);
        let n = f.len();
        f[n / 2] ^= 0x55;
        assert!(z.decompress(&f).map(|x| x != v).unwrap_or(true));
        assert_eq!(w.compress(&[9u8; COMPRESS_MIN - 1]), None);
    }
}
