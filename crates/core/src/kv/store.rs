//! xkv: an append-only, CRC-checked log of segments with an in-memory index (Bitcask's
//! design), crash-safe recovery, group commit, hint files and online compaction.

use super::append::Appender;
use super::dict::{self, Zstd};
use super::index::{Entry, Index, Loc, Put, OVERLAY_MAX, TOMBSTONE};
use super::mapped;
use super::order::{self, Order, Saved};
use super::overlay;
use super::record::{self, Kind, FLAG_BATCH, FLAG_COMPRESSED, FLAG_LZ4, FLAG_ZSTD, HEADER};
use super::snapshot::{self, SnapSeg};
use crate::sys::fork;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `put` returns once the record is on disk (write linked to fdatasync; concurrent
    /// writers share fdatasyncs).
    Sync,
    /// fdatasync at most every `ms` milliseconds or `bytes` bytes.
    Batch { ms: u64, bytes: u64 },
    /// The OS decides.
    None,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub durability: Durability,
    pub create: bool,
    pub repair: bool,
    pub segment_size: u64,
    pub use_uring: bool,
    /// Append with O_DIRECT (whole 4 KiB blocks, bypassing the page cache).
    pub direct: bool,
    /// Write the index to `INDEX` when closing (and use it when opening).
    pub index_snapshot: bool,
    /// Read a cold store's segments into the page cache in the background once a
    /// multi_get finds values missing from it, when they fit in a quarter of the
    /// memory available (see `Store::warm_up`).
    pub warm: bool,
    /// Relayed wake-ups for durable writers that hold a process-wide lock whenever they
    /// are not waiting (Python's GIL): see [`Store::relay_one`]. Off: a group commit
    /// wakes all of its waiters at once.
    pub relay: bool,
    /// O_DIRECT appends through a ring with a kernel submission-queue polling thread
    /// (IORING_SETUP_SQPOLL): submitting an append is a store to shared memory, no
    /// system call, while the thread is awake (it sleeps after `SQPOLL_IDLE_MS` idle).
    pub sqpoll: bool,
    /// Open without the writer's lock, alongside a live writer or none: the store as it
    /// is at open, nothing in the directory changed (no torn tail cut, no compaction
    /// finished, no `INDEX` written), every write refused.
    pub read_only: bool,
    /// Compact in the background when the sealed segments hold enough dead bytes
    /// (checked each time a segment is sealed; only for stores started with
    /// [`Store::start_background`]). None: only [`Store::compact`] compacts.
    pub auto_compact: Option<AutoCompact>,
    /// How values are compressed (values of 64 bytes or more, when that saves at least
    /// an eighth of them; the others are stored as they are). Reads decompress whatever
    /// a record holds, whatever this says.
    pub compression: Compression,
}

/// [`Options::compression`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    /// each value on its own, LZ4 (fast; little gain on small values)
    Lz4,
    /// zstd at `level` (3: zstd's default; `kv::dict::LEVELS`), against a dictionary
    /// trained on the store's first values (see `kv::dict`): small values that resemble
    /// each other compress as a block would
    Zstd {
        level: i32,
    },
}

/// When a background compaction starts (Bitcask's merge triggers): at least `ratio` of
/// the sealed segments' bytes are dead (overwritten or deleted records) *and* at least
/// `min_bytes` are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoCompact {
    pub ratio: f64,
    pub min_bytes: u64,
}

impl Default for AutoCompact {
    fn default() -> Self {
        AutoCompact {
            ratio: 0.5,
            min_bytes: 64 << 20,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            create: true,
            repair: false,
            segment_size: 256 << 20,
            use_uring: true,
            direct: false,
            index_snapshot: true,
            warm: true,
            relay: false,
            sqpoll: false,
            read_only: false,
            auto_compact: Some(AutoCompact::default()),
            compression: Compression::None,
        }
    }
}

/// A clean close keeps the live overlay rather than writing `INDEX` only while the log
/// appended since `INDEX` is at most about as long as `INDEX` itself, within these
/// bounds: it is what an open after a reboot replays (the overlay is another boot's
/// then) — at most about what rewriting `INDEX` at each close would have cost, paid once
/// per reboot. (Read-only opens copy the overlay instead: [`overlay::copy`].) 4 MiB is
/// ~30,000 small records, 8-10 ms here; 64 MiB ~140 ms.
const KEEP_OVERLAY_LOG: u64 = 4 << 20;
const KEEP_OVERLAY_LOG_MAX: u64 = 64 << 20;

/// Keys the sorted order may hold beyond twice the index's (removed since they were
/// sorted) before a scan sorts them afresh.
const ORDER_STALE_MIN: usize = 1 << 16;

/// Keys a range scan looks up in the index at once (their entries prefetched first).
const WALK_AHEAD: usize = 16;

/// Values compressed ahead of encoding ([`Store::pack`]): per op, the stored bytes and
/// their compression flag, or None (stored as it is); empty without compression. It
/// pins the zstd dictionaries its frames were compressed with until it is dropped —
/// after its records were encoded into the log's buffers or queue (see
/// [`dict::Pin`]).
#[derive(Default)]
struct Packed {
    vals: Vec<Option<(Vec<u8>, u8)>>,
    _pins: Vec<dict::Pin>,
}

impl Packed {
    fn get(&self, i: usize) -> Option<&Option<(Vec<u8>, u8)>> {
        self.vals.get(i)
    }
}

/// What recovery found.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    pub segments: usize,
    pub records: u64,
    pub from_hints: u64,
    /// The index came from the `INDEX` snapshot (only records after it were replayed).
    pub from_snapshot: bool,
    /// ... with the live overlay a killed process left (`OVERLAY`): only records after
    /// what it covered were replayed.
    pub from_overlay: bool,
    pub torn_bytes: u64,
    pub torn_segment: Option<String>,
    /// A crash of the machine tore a segment the log had moved on from (never synced:
    /// durability="none" between syncs): the log was cut at its last whole record —
    /// `(that segment, how many segments after it were emptied)`, their records all
    /// written after the cut and never synced either. The store reopens as it was at
    /// that point, as RocksDB's point-in-time recovery does.
    pub unsynced_cut: Option<(String, usize)>,
    /// (the id of that segment, while the open goes on to the ones after it)
    cut_at: Option<u32>,
    pub skipped: Vec<String>,
    pub elapsed: Duration,
}

/// What [`Store::refresh`] took in, in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// records read (each batch member and COMMIT counts)
    pub records: u64,
    /// bytes of segments read
    pub bytes: u64,
    /// segments the writer rolled over to since
    pub segments: usize,
}

/// The outcome of [`Store::refresh`].
pub enum Refresh {
    InPlace(Refreshed),
    /// A compaction happened since: the store opened again, to use instead.
    Reopened(Box<Store>),
}

/// What a segment's mapping is (see `Segment`'s fields).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mapping {
    Read,
    Mirror,
    Writable,
}

/// How the active segment is written: O_DIRECT with an in-memory mirror, through a
/// writable mapping of the file (`"none"`/`"batch"` where the filesystem allows it), or
/// with pwrite.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ActiveKind {
    Mirrored,
    Mapped,
    Plain,
}

impl ActiveKind {
    /// `mapped_ok`: [`mapped_writes_safe`] for the store's directory.
    fn for_store(mapped_ok: bool, opts: &Options) -> ActiveKind {
        if opts.direct {
            return ActiveKind::Mirrored;
        }
        let off = std::env::var_os("URINGKIT_KV_MAPPED").is_some_and(|v| v == "0");
        if opts.durability == Durability::Sync || off || !mapped_ok {
            return ActiveKind::Plain;
        }
        ActiveKind::Mapped
    }
}

/// Whether stores through a shared mapping of a file in `dir` can be made fault-free by
/// allocating the file's blocks first (fallocate): ext4 and XFS map a store into an
/// allocated (unwritten) extent without allocating anything, tmpfs allocates the pages
/// at fallocate. Elsewhere — btrfs and other copy-on-write filesystems reserve space
/// at the first store into each page and answer a full disk with SIGBUS; network and
/// FUSE filesystems may fail a page's write-back silently — records are written with
/// pwrite. `URINGKIT_KV_MAPPED=1` maps them anywhere (the power-cut tests, on a FUSE
/// filesystem that loses what was not synced; elsewhere a full disk may be SIGBUS).
fn mapped_writes_safe(dir: &Path) -> bool {
    if std::env::var_os("URINGKIT_KV_MAPPED").is_some_and(|v| v == "1") {
        return true;
    }
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const TMPFS: i64 = 0x0102_1994;
    let Ok(c) = cpath(dir) else { return false };
    // SAFETY: statfs of a valid path into a zeroed buffer.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return false;
    }
    matches!(fs.f_type as i64, EXT4 | XFS | TMPFS)
}

pub struct Segment {
    pub fd: i32,
    pub size: AtomicU64,
    /// bytes of records no longer referenced by the index (tombstones apart)
    pub dead: AtomicU64,
    /// bytes of tombstones: never read, but a compaction of only some segments copies
    /// the ones still in force forward (an older segment may hold what they delete)
    pub tombs: AtomicU64,
    /// A shared read-only mapping of the first `map_len` bytes (reads copy from it: no
    /// system call per get). Only offsets the index points to are read, and those are
    /// always written (flushed) before they are indexed as readable.
    map: *const u8,
    map_len: usize,
    /// File offset of the mapping's first byte: 0 for a file mapping; for the in-memory
    /// mirror of an O_DIRECT store's active segment, where the mirror starts.
    map_base: usize,
    /// The mapping is that anonymous mirror (written by the appender).
    mirror: bool,
    /// The mapping is a shared *writable* mapping of the file: the appender of a
    /// `"none"`/`"batch"` store writes records straight into it (into the page cache,
    /// where they survive the process: see `Appender::set_target`).
    writable: bool,
    /// Every record in it was CRC-checked by this process (scanned at open) or written by
    /// it: reads then check only that the record holds the key. Segments known only from
    /// the index snapshot or a hint file have each record's CRC checked the first time
    /// it is read (see `checked`).
    verified: std::sync::atomic::AtomicBool,
    /// For a segment that is not `verified`: one bit per 32 bytes of the file, set once
    /// the record starting there passed its CRC check in this process, so a hot record
    /// is checked once, not on every read (RocksDB checks a block when it is read from
    /// the file, not on every cache hit). A record is at least `HEADER` = 32 bytes long:
    /// no two records share a bit. Allocated on the first check.
    checked: OnceLock<Box<[AtomicU64]>>,
}

// SAFETY: the mapping is shared and lives as long as the Segment; only the appender
// writes it (the mirror, or a writable file mapping), under the store's commit lock,
// and only bytes past every record the index publishes.
unsafe impl Send for Segment {}
// SAFETY: see above; readers only read published records, which nothing writes again.
unsafe impl Sync for Segment {}

impl Segment {
    /// `reserve`: how far the segment may grow (the active one maps its whole capacity).
    /// `None`: no mapping at all — reads use pread (a segment written with O_DIRECT:
    /// direct writes cannot invalidate pages a mapping holds).
    fn new(fd: i32, size: u64, dead: u64, reserve: Option<u64>) -> Arc<Segment> {
        let len = reserve.map(|r| size.max(r) as usize).unwrap_or(0);
        // a shared read-only mapping of the file
        let map = map_or_null(len, libc::PROT_READ, libc::MAP_SHARED, fd);
        advise_random(map, len);
        Self::with_map(fd, size, dead, map, len, 0, Mapping::Read)
    }

    /// An active segment the appender writes through its mapping (shared, read-write,
    /// `reserve` bytes: the segment's capacity). Null mapping (mmap failed): the
    /// appender falls back to pwrite.
    fn writable(fd: i32, size: u64, dead: u64, reserve: u64) -> Arc<Segment> {
        let len = size.max(reserve) as usize;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let map = map_or_null(len, prot, libc::MAP_SHARED, fd);
        advise_random(map, len);
        Self::with_map(fd, size, dead, map, len, 0, Mapping::Writable)
    }

    /// A new active segment: mirrored (O_DIRECT), written through its mapping, or plain.
    fn active(fd: i32, size: u64, dead: u64, reserve: u64, kind: ActiveKind) -> Arc<Segment> {
        match kind {
            ActiveKind::Mirrored => Self::mirrored(fd, size, dead, reserve),
            ActiveKind::Mapped => Self::writable(fd, size, dead, reserve),
            ActiveKind::Plain => Self::new(fd, size, dead, Some(reserve)),
        }
    }

    /// The active segment of an O_DIRECT store: direct writes bypass the page cache, so
    /// the appender also copies everything it appends from `size` on into an anonymous
    /// in-memory mirror, and reads of fresh records come from there — neither the disk
    /// nor a stale page. Records before `size` (written before this open) are read with
    /// pread. No mirror (mmap failed): everything is read with pread.
    fn mirrored(fd: i32, size: u64, dead: u64, reserve: u64) -> Arc<Segment> {
        let base = size as usize;
        let len = (reserve as usize).saturating_sub(base);
        // private anonymous memory, only backed where the appender writes (NORESERVE)
        let map = map_or_null(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        );
        Self::with_map(fd, size, dead, map, len, base, Mapping::Mirror)
    }

    fn with_map(
        fd: i32,
        size: u64,
        dead: u64,
        map: *const u8,
        len: usize,
        base: usize,
        kind: Mapping,
    ) -> Arc<Segment> {
        Arc::new(Segment {
            fd,
            size: AtomicU64::new(size),
            dead: AtomicU64::new(dead),
            tombs: AtomicU64::new(0),
            map,
            map_len: if map.is_null() { 0 } else { len },
            map_base: base,
            mirror: kind == Mapping::Mirror && !map.is_null(),
            writable: kind == Mapping::Writable && !map.is_null(),
            verified: std::sync::atomic::AtomicBool::new(true),
            checked: OnceLock::new(),
        })
    }

    /// Whether the record at `off` needs no CRC check: the whole segment was checked, or
    /// this record was, earlier in this process.
    fn crc_known_good(&self, off: u64) -> bool {
        if self.verified.load(Ordering::Relaxed) {
            return true;
        }
        let bit = off as usize / HEADER;
        self.checked
            .get()
            .and_then(|m| m.get(bit / 64))
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (bit % 64)) != 0)
    }

    /// Remember that the record at `off` passed its CRC check.
    fn mark_crc_good(&self, off: u64) {
        let map = self.checked.get_or_init(|| {
            // the file as far as it is mapped or written (records beyond it are simply
            // checked on every read); zeroed memory from the allocator is lazily backed
            let span =
                (self.map_base + self.map_len).max(self.size.load(Ordering::Relaxed) as usize);
            let words = span.div_ceil(HEADER * 64);
            let zeroed = vec![0u64; words].into_boxed_slice();
            // SAFETY: AtomicU64 has the same size, alignment and bit validity as u64
            // (documented), so a boxed slice of u64 is a valid boxed slice of AtomicU64;
            // the allocation is handed over whole and freed with the same layout.
            unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU64]) }
        });
        let bit = off as usize / HEADER;
        if let Some(w) = map.get(bit / 64) {
            w.fetch_or(1 << (bit % 64), Ordering::Relaxed);
        }
    }

    /// Copy appended bytes (at file offset `off`) into the mirror, if this segment has one
    /// covering them.
    pub(crate) fn mirror_write(&self, off: u64, data: &[u8]) {
        if !self.mirror {
            return;
        }
        self.write_at(off, data);
    }

    /// A writable file mapping (see `writable`): copy `data` into the file at `off`
    /// through it. False (nothing written) when this segment has no such mapping or the
    /// range lies beyond it. The caller makes sure the file covers the range (it was
    /// allocated with fallocate): a store into a page past the end of the file would
    /// raise SIGBUS.
    pub(crate) fn is_writable(&self) -> bool {
        self.writable
    }

    /// Bytes the mapping covers.
    pub(crate) fn map_capacity(&self) -> usize {
        self.map_len
    }

    pub(crate) fn map_write(&self, off: u64, data: &[u8]) -> bool {
        if !self.writable || off as usize + data.len() > self.map_len {
            return false;
        }
        self.write_at(off, data);
        true
    }

    fn write_at(&self, off: u64, data: &[u8]) {
        let Some(rel) = (off as usize).checked_sub(self.map_base) else {
            return;
        };
        // What lies beyond the reserve is not copied: records that end past it are read
        // with pread (`mapped` covers only whole records inside it). The part before
        // it is, always: a write that runs past the reserve (a batch larger than a
        // segment) also holds records that end inside it, and those are read from here
        // — until session 30 the whole write was skipped, and they read as zeros (a CRC
        // error on a direct store's fresh batch).
        if rel >= self.map_len {
            return;
        }
        let n = data.len().min(self.map_len - rel);
        // SAFETY: [rel, rel+n) lies inside our writable mapping (the anonymous mirror,
        // or the file mapping, whose file the appender has extended past it); readers
        // only read records already indexed, which lie before `off` (appends go past
        // every published record), so no reader looks at these bytes while they are
        // written.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.map as *mut u8).add(rel), n) };
    }

    /// Whether [off, off+len) is in the page cache (mincore on the mapping).
    fn resident(&self, off: u64, len: usize) -> bool {
        let Some(_) = self.mapped(off, len) else {
            return false;
        };
        if len == 0 || self.mirror {
            return true;
        }
        let page = 4096usize;
        let start = (off as usize) / page * page;
        let end = off as usize + len;
        let pages = (end - start).div_ceil(page);
        let mut vec = [0u8; 64];
        if pages > vec.len() {
            return false;
        }
        // SAFETY: [start, start + pages*page) lies within the mapping (mapped() checked the
        // range; the mapping length is page-granular); vec has room for `pages` entries.
        let rc = unsafe {
            libc::mincore(
                self.map.add(start) as *mut libc::c_void,
                pages * page,
                vec.as_mut_ptr(),
            )
        };
        rc == 0 && vec[..pages].iter().all(|b| b & 1 == 1)
    }

    /// The bytes at [off, off+len) from the mapping, if mapped there.
    fn mapped(&self, off: u64, len: usize) -> Option<&[u8]> {
        let rel = (off as usize).checked_sub(self.map_base)?;
        let end = rel.checked_add(len)?;
        if self.map.is_null() || end > self.map_len {
            return None;
        }
        // SAFETY: [rel, end) lies inside the mapping, and inside the written part of the
        // file (or of the mirror: the caller reads only indexed records), so no SIGBUS.
        Some(unsafe { std::slice::from_raw_parts(self.map.add(rel), len) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if !self.map.is_null() {
            // SAFETY: map/map_len are what mmap returned; nobody uses them after drop.
            unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
        }
        // SAFETY: fd was opened by us and is closed exactly once.
        unsafe { libc::close(self.fd) };
    }
}

struct State {
    index: Index,
    segs: BTreeMap<u32, Arc<Segment>>,
    active: u32,
    next_id: u32,
    seq: u64,
    /// The live overlay file to create at the first change of the index: (store
    /// directory, identity of the snapshot it goes over). Made on first use, so that
    /// opening (and a session that only reads) costs nothing more.
    overlay_due: Option<(PathBuf, u64)>,
    /// The live snapshot views (`Store::view_open`), by id: what each key changed since
    /// was before. Empty but for them: writes then note nothing.
    views: view::Views,
    next_view: u64,
}

struct Commit {
    pending: Vec<Pending>,
    leader: bool,
    next_ticket: u64,
    done_ticket: u64,
    /// Groups that failed: (first ticket, last ticket, the error), kept while a writer
    /// of one of their tickets may still ask (see `asking`).
    failed: Vec<(u64, u64, io::Error)>,
    /// The tickets whose writers have not yet been told how their write went: a
    /// blocking writer's until it returns, a queued one's (`Store::enqueue`) until
    /// [`Store::collect`]. A failed group is kept while one of them is in its range —
    /// until session 31 only the last 64 failures were, and on a full disk a writer
    /// woken after 64 more groups had failed found none and returned success for a put
    /// never written.
    asking: std::collections::BTreeSet<u64>,
    appender: Option<Appender>,
    write_off: u64,
    unsynced: u64,
    last_sync: Instant,
    /// durability "none"/"batch": records not yet handed to the kernel (they start at
    /// `write_off`; indexed once they are)
    wbuf: Vec<u8>,
    /// the group an event loop is writing (between lead_async and finish_async)
    inflight: Option<Inflight>,
    /// its records, for an O_DIRECT store (the caller writes a block image of them)
    inflight_data: Vec<u8>,
    /// relay mode: writers waiting for their ticket, and writers whose ticket is done
    /// waiting to be released (oldest first; see `Store::relay_one`)
    parked: Vec<Parked>,
    ready: std::collections::VecDeque<Parked>,
    /// relay_one calls since the last group completed that found nobody ready while
    /// writers were parked: such a caller went to sleep without handing the lock on, so
    /// one ready writer goes as soon as the group completes (one, not one per caller:
    /// several would be runnable at once, queueing on the lock again)
    unrelayed: usize,
}

/// A writer parked in relay mode (see [`Store::relay_one`]).
struct Parked {
    ticket: u64,
    thread: std::thread::Thread,
    /// set (before the unpark) when the writer is to go: `GO` (released, or to lead), or
    /// primed: 1 + the `Store::turns` value to wait past before going
    go: Arc<AtomicU64>,
}

/// `Parked::go`: go now.
const GO: u64 = u64::MAX;

impl Parked {
    fn wake(self) {
        self.signal(GO);
    }
    /// Wake the writer to wait, awake, for `Store::turns` to pass `turn`.
    fn prime(self, turn: u64) {
        self.signal(turn + 1);
    }
    fn signal(self, go: u64) {
        self.go.store(go, Ordering::Release);
        self.thread.unpark();
    }
}

/// A copy from a segment's mapping that took longer than this had to fault its page in
/// from the disk: a copy from the page cache takes well under a microsecond (a few with
/// a minor fault), a read of one page from a fast SSD 25 µs or more. (A stall of the
/// machine taken for one costs little: a warm-up of pages mostly cached, or a batch
/// that checks residency first.)
const COLD_READ: Duration = Duration::from_micros(10);

/// How long a relay-mode writer whose ticket is done waits to be released before it
/// goes anyway (a bound for when no other writer comes to release it).
const RELAY_PATIENCE: Duration = Duration::from_millis(2);
/// Relay mode: as long as no more writers than this wait to be released, they all go
/// when their group completes (a small herd costs less than making them wait their turn).
const RELAY_MIN_READY: usize = 8;
/// How many groups in a row a relay-mode writer leads before handing the lead on.
const RELAY_LEAD_ROUNDS: u32 = 8;
/// How long a primed writer (see [`Store::relay_one`]) waits, awake, for the writer
/// running before it to let the lock go, before it goes anyway.
const PRIME_PATIENCE: Duration = Duration::from_micros(100);

struct Inflight {
    group: Vec<Pending>,
    seg_id: u32,
    seg: Arc<Segment>,
    off: u64,
    /// bytes the caller writes (the padded block image for O_DIRECT)
    write_len: u64,
}

/// A group commit for the caller to write at `off` of `fd` (`len` bytes: `data`, or for
/// an O_DIRECT store the block-aligned `image`), then fdatasync.
pub struct Lead {
    pub fd: i32,
    pub off: u64,
    pub len: u64,
    pub data: Vec<u8>,
    pub image: Option<crate::buf::AlignedBuf>,
    pub last_ticket: u64,
}

struct Pending {
    ticket: u64,
    bytes: Vec<u8>,
    updates: Vec<Update>,
}

/// An encoded op: (key length, kind, val_len, offset of the record within the encoded
/// bytes); the key itself is read back from the encoded record (no copy per key).
type Update = (u32, Kind, u32, u64);

/// How to take back a buffered op's index update if writing it fails: where its key is
/// in the write buffer, its length, and the entry it replaced.
/// Records encoded into the write buffer, to index once the kernel has them: where
/// they start in the buffer, their file offset, their updates.
struct Staged {
    from: usize,
    base: u64,
    updates: Vec<Update>,
}

/// A key, where its record is, and the segment holding it (a listing's entry).
pub type Listed = (Vec<u8>, Loc, Arc<Segment>);

pub struct Store {
    dir: PathBuf,
    opts: Options,
    lock_fd: i32,
    state: RwLock<State>,
    commit: Mutex<Commit>,
    commit_cv: Condvar,
    compacting: Mutex<()>,
    /// The keys sorted for range scans, once one has run (see [`super::order`]).
    order: Mutex<Option<Order>>,
    /// The state `ORDER` holds the keys of, while that file is this store's to use (it
    /// held this open's keys, or this store saved it; see [`super::order`]).
    order_file: Mutex<Option<Saved>>,
    /// Scans that sorted every key (the first, or one after the order went stale or its
    /// log was dropped): `stats()["order_sorts"]`.
    order_sorts: AtomicU64,
    /// Its memory, as the last scan left it (for `stats()`, which does not wait for a
    /// scan sorting the keys).
    order_bytes: AtomicU64,
    /// This store, for the threads it starts itself (set by [`Store::start_background`]).
    me: OnceLock<std::sync::Weak<Store>>,
    /// A background compaction's thread is running.
    auto_running: AtomicBool,
    /// Background compactions done, and failed.
    auto_compactions: AtomicU64,
    auto_compact_failures: AtomicU64,
    /// Every compaction that retired segments (background or `compact()`): how many,
    /// the bytes they reclaimed, and how long the last one took (µs).
    compactions: AtomicU64,
    reclaimed_bytes: AtomicU64,
    last_compaction_us: AtomicU64,
    /// bytes compactions have written (their copies): the price of what they reclaimed
    compacted_bytes: AtomicU64,
    /// values written compressed (Options::compress), and the bytes that saved
    compressed_values: AtomicU64,
    compression_saved: AtomicU64,
    /// zstd: decoding (dictionaries loaded from the directory as records name them) and,
    /// with `Compression::Zstd`, encoding (and the dictionary's training)
    zstd: Zstd,
    /// A small ring for multi_get's batched reads of values not in the page cache.
    reader: Mutex<Option<io_uring::IoUring>>,
    /// Bytes of the active segment already handed to the kernel (readers of newer
    /// records flush the write buffer first).
    flushed: AtomicU64,
    /// (active, end, seq) of the snapshot the index was loaded from: closing skips
    /// rewriting an `INDEX` that still describes the store exactly.
    loaded: Option<(u32, u64, u64)>,
    /// The verification of the mapped index snapshot the store opened with: asked before
    /// an "absent" answer, a listing or a compaction is trusted (see snapshot.rs).
    index_check: Option<Arc<snapshot::Check>>,
    /// durable group commits written (each one write + one fdatasync)
    /// The durable mark ([`record::mark`]): how far the active segment is known
    /// fdatasynced. Every record encoded carries it.
    durable: AtomicU64,
    /// durability="none": sealed segments with bytes never fdatasynced (the next sync —
    /// `sync()`, a compaction, a checkpoint, close — syncs them before the active one;
    /// the other durabilities sync a segment when they seal it).
    sealed_unsynced: Mutex<Vec<u32>>,
    group_commits: AtomicU64,
    /// `warm_up` ran (it starts its reading at most once per open).
    warm_started: AtomicBool,
    /// The last multi_get found values missing from the page cache: the next one asks
    /// the kernel about every value first (mincore) instead of copying the first one
    /// from the mapping — a fault that reads the whole read-ahead window around it
    /// before the batch of reads can start (see [`Store::multi_get`]).
    cold_hint: AtomicBool,
    /// `State::overlay_due` is set: the next index change creates the `OVERLAY` file
    /// (system calls that may block), so `write_nonblocking` declines until then.
    overlay_pending: AtomicBool,
    /// ... and started its thread.
    warm_running: AtomicBool,
    /// Set when the store closes: the warm-up thread stops at its next chunk.
    warm_stop: Arc<AtomicBool>,
    /// The warm-up thread, joined at close: it holds the segments (their mappings) it
    /// reads, and one let go after the store closed was unmapped by that thread beside
    /// the next open, which waited for the process's memory-map lock.
    warm_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Segment bytes the warm-up thread has faulted in so far (stats).
    warmed: Arc<AtomicU64>,

    /// How many writers are parked or ready (relay mode), read without the lock by
    /// `relay_one`.
    waiting: AtomicUsize,
    /// Relay mode: how many times a writer let the process-wide lock go on its way in
    /// (`relay_one` calls). A primed writer waits for it to pass the value it was primed
    /// at (see `Store::relay_one`).
    turns: AtomicU64,
    /// Relay mode: 1 + the `turns` value the primed writer waits to pass, 0 when none is.
    primed: AtomicU64,
    /// Relay mode: hand-offs taken by a primed writer (stats: `relay_primed`).
    primed_handoffs: AtomicU64,
    pub recovery: Recovery,
    /// How active segments are written (decided at open).
    active_kind: ActiveKind,
    /// The fork generation ([`fork::generation`]) and the process id when it was opened:
    /// in a forked child the store refuses to work ([`Store::same_process`]).
    born: u64,
    opener: u32,
}

/// `mmap(len, prot, flags, fd, 0)`, or null when `len` is 0 or the mapping fails (the
/// segment is then read with pread).
fn map_or_null(len: usize, prot: i32, flags: i32, fd: i32) -> *const u8 {
    if len == 0 {
        return std::ptr::null();
    }
    // SAFETY: a fresh mapping the kernel places; checked for MAP_FAILED. For a file
    // mapping fd is ours and open; for an anonymous one it is -1.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        std::ptr::null()
    } else {
        p as *const u8
    }
}

/// Say that a segment's file mapping (`map`, `len` bytes; null: none) is read at
/// random (`MADV_RANDOM`): a get whose record is not in the page cache faults in that
/// page, not the device's read-ahead window around it — 8 MiB on some disks (this
/// machine's virtio disk), 128 KiB by default, megabytes read and cached per cold get,
/// and on a store larger than memory, other data evicted for them (RocksDB opens its
/// files with `POSIX_FADV_RANDOM` for the same reason). What reads a segment from end to
/// end asks for its pages ahead itself: the warm-up (`read_in`), compaction (sequential
/// advice while it scans), the replay at open (its own populated mapping).
fn advise_random(map: *const u8, len: usize) {
    advise(map, len, libc::MADV_RANDOM);
}

/// `madvise(map, len, advice)` for read-ahead advice on (the start of) a segment's
/// mapping; nothing for a null one.
fn advise(map: *const u8, len: usize, advice: i32) {
    if !map.is_null() && len > 0 {
        // SAFETY: advice on the first `len` bytes of a live mapping (callers pass a
        // length within it); read-ahead advice changes how pages are read, never
        // their contents.
        unsafe { libc::madvise(map as *mut libc::c_void, len, advice) };
    }
}

/// Start reading `[off, off + len)` of `fd` into the page cache (`POSIX_FADV_WILLNEED`:
/// the reads are queued, not waited for). Nothing to do for an empty range. Asked for in
/// 128 KiB pieces: the kernel reads no more per call than the device's read-ahead
/// window or its largest request (`force_page_cache_ra`) — 128 KiB on many disks — and
/// a segment's mapping, read at random (`advise_random`), would then fault the rest of
/// the range in one page at a time.
fn will_need(fd: i32, off: usize, len: usize) {
    const PIECE: usize = 128 << 10;
    for at in (off..off + len).step_by(PIECE) {
        let n = PIECE.min(off + len - at);
        // SAFETY: advice on an open fd; it only starts reads into the page cache.
        unsafe { libc::posix_fadvise(fd, at as i64, n as i64, libc::POSIX_FADV_WILLNEED) };
    }
}

/// Read `[0, end)` of the segment `s` (within its file mapping and its file) into the
/// page cache and the mapping, 4 MiB at a time: the reads of the next `AHEAD` chunks
/// are queued (`will_need`) while this one is mapped in (`MADV_POPULATE_READ`) — a
/// steady stream for the disk, whatever its read-ahead window. `each` gets every
/// chunk's length once it is in; false from it stops the reading (returned).
///
/// (Four chunks ahead rather than one: a cold store's multi_gets, which this warm-up
/// serves, 345–395K keys/s against 293–372K, LMDB alternating at 260–290K —
/// `benches/kv_cold.py`, session 29; eight or sixteen ahead did no better.)
fn read_in(s: &Segment, end: usize, mut each: impl FnMut(usize) -> bool) -> bool {
    const CHUNK: usize = 4 << 20;
    const AHEAD: usize = 4;
    if s.map.is_null() || s.map_base != 0 {
        return true;
    }
    let end = end.min(s.map_len);
    will_need(s.fd, 0, (CHUNK * AHEAD).min(end));
    for off in (0..end).step_by(CHUNK) {
        let next = off + CHUNK * AHEAD;
        will_need(s.fd, next, CHUNK.min(end.saturating_sub(next)));
        // SAFETY: [0, end) lies within the segment's live file mapping (the caller holds
        // the segment) and within its file.
        unsafe { mapped::populate(s.map, end, off, CHUNK) };
        if !each(CHUNK.min(end - off)) {
            return false;
        }
    }
    true
}

/// `lseek(fd, from, whence)` for SEEK_DATA/SEEK_HOLE: Ok(None) when there is no data
/// from `from` on (ENXIO); an error where the filesystem cannot say.
fn seek_region(fd: i32, from: u64, whence: i32) -> io::Result<Option<u64>> {
    // SAFETY: lseek on an open fd only moves its offset (nothing else here uses it: all
    // reads and writes of segments are positioned).
    let r = unsafe { libc::lseek(fd, from as i64, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        _ => Err(e),
    }
}

/// Bytes from `end` up to and including the file's last non-zero byte before `size` (0:
/// nothing but zeros). Only the file's data regions are read (SEEK_DATA/SEEK_HOLE): the
/// range an appender allocated ahead with fallocate and never wrote is a hole there and
/// costs nothing — reading it through a mapping would make the kernel create and zero a
/// page-cache page for each of its pages (4 MiB: ~1,000 pages) just to find zeros.
fn garbage_after(fd: i32, end: u64, size: u64) -> io::Result<u64> {
    let mut last: Option<u64> = None;
    let mut pos = end;
    let mut buf = vec![0u8; 1 << 16];
    while pos < size {
        // (a filesystem that cannot tell holes: all of it is data)
        let d = match seek_region(fd, pos, libc::SEEK_DATA) {
            Ok(None) => break,
            Ok(Some(d)) => d,
            Err(_) => pos,
        };
        if d >= size {
            break;
        }
        let h = match seek_region(fd, d, libc::SEEK_HOLE) {
            Ok(Some(h)) => h.min(size),
            _ => size,
        };
        let mut at = d;
        while at < h {
            let n = buf.len().min((h - at) as usize);
            let got = pread_exact(fd, &mut buf[..n], at)?;
            if let Some(p) = last_nonzero(&buf[..got]) {
                last = Some(at + p as u64);
            }
            if got < n {
                break;
            }
            at += n as u64;
        }
        pos = h.max(pos + 1);
    }
    Ok(last.map(|p| p + 1 - end).unwrap_or(0))
}

/// Index of the last non-zero byte (whole 4 KiB blocks tested a word at a time first).
fn last_nonzero(b: &[u8]) -> Option<usize> {
    let mut hi = b.len();
    while hi > 0 {
        let lo = hi.saturating_sub(4096);
        let block = &b[lo..hi];
        let words = block.chunks_exact(8);
        let rest = words.remainder().iter().fold(0u8, |a, &x| a | x);
        let any = words.fold(0u64, |a, w| {
            a | u64::from_ne_bytes(w.try_into().expect("8"))
        });
        if any != 0 || rest != 0 {
            return block.iter().rposition(|&x| x != 0).map(|p| lo + p);
        }
        hi = lo;
    }
    None
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| err(io::ErrorKind::InvalidInput, "path contains NUL".into()))
}

/// A writer's live overlay, for an open to take back: mapped (the writer's own open,
/// after a kill or a clean close) or copied (a read-only open).
enum Left {
    Shared(overlay::Shared, overlay::Header),
    Copied(overlay::Copied, overlay::Header),
}

impl Left {
    fn header(&self) -> &overlay::Header {
        match self {
            Left::Shared(_, h) | Left::Copied(_, h) => h,
        }
    }

    /// Put it in `index` (fresh from its snapshot); its header if that worked.
    fn restore_into(self, index: &mut Index) -> Option<overlay::Header> {
        let (ok, h) = match self {
            Left::Shared(sh, h) => (index.restore(sh, &h), h),
            Left::Copied(c, h) => (index.restore_copied(c, &h), h),
        };
        ok.then_some(h)
    }
}

fn open_fd(p: &Path, flags: i32) -> io::Result<i32> {
    let c = cpath(p)?;
    // SAFETY: c is a valid path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(reword(&e, format!("{}: {}", p.display(), plain(&e))));
    }
    Ok(fd)
}

use crate::text::{io_error as plain, reword};

/// Rename `from` to `to` unless `to` exists (renameat2 RENAME_NOREPLACE; where the
/// filesystem lacks it, a check then a plain rename — a directory made at `to` in between
/// would be replaced only if empty).
pub(super) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| err(io::ErrorKind::InvalidInput, "a path with a NUL byte".into()))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that live across the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(e);
    }
    if to.symlink_metadata().is_ok() {
        return Err(io::ErrorKind::AlreadyExists.into());
    }
    fs::rename(from, to)
}

pub(super) fn fsync_dir(dir: &Path) -> io::Result<()> {
    let fd = open_fd(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    // SAFETY: fd is ours.
    let r = unsafe { libc::fsync(fd) };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub use crate::sys::fileio::pread_full as pread_exact;

/// Copy the first `len` bytes of `fd` to a new file `to`, durably (copy_file_range:
/// in-kernel, or shared extents where the filesystem can; pread/write where it cannot).
/// Fewer bytes than `len` there is an error: the file was cut short meanwhile.
fn copy_prefix(fd: i32, to: &Path, len: u64) -> io::Result<()> {
    let out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    let mut done = 0u64;
    while done < len {
        let (mut off_in, mut off_out) = (done as i64, done as i64);
        let want = (len - done).min(1 << 30) as usize;
        // SAFETY: both fds are open (fd for reading, out for writing); the offsets are
        // valid out pointers.
        let n = unsafe {
            libc::copy_file_range(fd, &mut off_in, out.as_raw_fd(), &mut off_out, want, 0)
        };
        let n = match n {
            n if n > 0 => n as u64,
            0 => break,
            _ => {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => {
                        let mut buf = vec![0u8; want.min(1 << 20)];
                        let got = pread_exact(fd, &mut buf, done)?;
                        out.write_all_at(&buf[..got], done)?;
                        if got == 0 {
                            break;
                        }
                        got as u64
                    }
                    _ => return Err(e),
                }
            }
        };
        done += n;
    }
    if done < len {
        return Err(err(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: its source was cut short while being copied",
                to.display()
            ),
        ));
    }
    out.sync_all()
}

/// A read-only private mapping of a whole file, unmapped on drop.
struct ReadMap {
    ptr: *const u8,
    len: usize,
    /// or a copy of the file's first bytes, read with pread (see [`ReadMap::copied`])
    copy: Vec<u8>,
}

impl ReadMap {
    /// Map `len` bytes of `fd`. `from`: only bytes from there on will be read — the
    /// mapping is populated (read ahead in one go) from that page on, not before it, up
    /// to `until`.
    fn new(fd: i32, len: usize, from: usize, until: usize) -> io::Result<ReadMap> {
        if len == 0 {
            return Ok(Self::copied(fd, 0, 0));
        }
        let whole = from == 0 && until >= len;
        // SAFETY: mapping `len` bytes of an open fd read-only; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                if whole {
                    libc::MAP_PRIVATE | libc::MAP_POPULATE
                } else {
                    libc::MAP_PRIVATE
                },
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if !whole {
            let start = from / 4096 * 4096;
            let stop = until.min(len);
            if start < stop {
                // SAFETY: [start, stop) lies inside the mapping just made; WILLNEED only
                // starts read-ahead.
                unsafe {
                    libc::madvise(
                        p.cast::<u8>().add(start).cast(),
                        stop - start,
                        libc::MADV_WILLNEED,
                    )
                };
            }
        }
        Ok(ReadMap {
            ptr: p as *const u8,
            len,
            copy: Vec::new(),
        })
    }

    /// The first `len` bytes of `fd` — read with pread from `from` on (as many as there
    /// are), zeros before it (never read): for a file another process may cut shorter
    /// meanwhile — a live writer's active segment, whose zero tail it cuts when it
    /// moves on — where a mapping would raise SIGBUS.
    fn copied(fd: i32, from: usize, len: usize) -> ReadMap {
        // (zeroed memory from the allocator: the pages before `from` are never touched)
        let mut copy = vec![0u8; len];
        let from = from.min(len);
        let n = pread_exact(fd, &mut copy[from..], from as u64).unwrap_or(0);
        copy.truncate(from + n);
        ReadMap {
            ptr: std::ptr::null(),
            len: 0,
            copy,
        }
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &self.copy;
        }
        // SAFETY: ptr maps exactly len readable bytes for as long as self lives; the file is
        // not truncated while it is mapped (recovery truncates only after unmapping).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ReadMap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: exactly what mmap returned.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        }
    }
}

/// `k` starts with `prefix` and lies in [start, stop) (a scan's bounds).
fn in_range(k: &[u8], prefix: &[u8], start: Option<&[u8]>, stop: Option<&[u8]>) -> bool {
    k.starts_with(prefix) && start.is_none_or(|a| k >= a) && stop.is_none_or(|b| k < b)
}

/// LEB128: seven bits a byte, low first, the high bit set on all but the last.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at the start of `r`, which moves past it (None: cut short, or over 64 bits).
fn varint(r: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in r.iter().enumerate().take(10) {
        v |= ((b & 0x7f) as u64).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            *r = &r[i + 1..];
            return Some(v);
        }
    }
    None
}

fn seg_name(id: u32) -> String {
    format!("{id:08}.seg")
}
fn hint_name(id: u32) -> String {
    format!("{id:08}.hint")
}
const COMPACT_MARKER: &str = "COMPACTED";

/// A record found by recovery: (key, kind, value length, (segment, offset, seq, size)).
type Replayed<'a> = (&'a [u8], Kind, u32, (u32, u64, u64, u64));

/// A compaction output being written: (id, fd, size, index entries for its hint file).
/// (id, fd, size, records: key, where, sequence number)
type NewSeg = (u32, i32, u64, Vec<(Vec<u8>, Loc, u64)>);

/// What a compaction has written so far: finished new segments, the one being filled,
/// and the encoding buffer.
#[derive(Default)]
struct CompactOut {
    new_segs: Vec<NewSeg>,
    cur: Option<NewSeg>,
    buf: Vec<u8>,
    /// `cur`'s writeback, started as it grows (a durable put waited 75-87 ms behind
    /// one fdatasync of 100+ MB of copies at the end of step 2)
    sync: crate::sys::fileio::RangeSync,
    /// copy the tombstones still in force too (not every sealed segment is compacted)
    carry: bool,
    /// the zstd dictionaries the copies' frames name
    dicts: std::collections::BTreeSet<u32>,
}

/// Per segment, what replay found: bytes of superseded records and of tombstones.
#[derive(Default, Clone, Copy)]
struct Waste {
    dead: u64,
    tombs: u64,
}

impl Waste {
    fn dead(dead: u64) -> Waste {
        Waste { dead, tombs: 0 }
    }
}

type Wastes = BTreeMap<u32, Waste>;

/// Keys a compaction checks against the index, or repoints, per hold of the state lock.
const PER_HOLD: usize = 1024;

/// A segment for [`Store::replay`] to read, from `from`.
#[derive(Clone, Copy)]
struct Scan<'a> {
    id: u32,
    fd: i32,
    from: u64,
    /// the segment being appended to: a bad record at its end is a torn tail
    newest: bool,
    repair: bool,
    /// a killed writer's live overlay covers the segment up to `from`
    zeros_end_it: bool,
    /// the length below which its records were synced (INDEX recorded it)
    synced: u64,
    /// leave the file as it is (a torn tail is not cut: a live writer may be writing it)
    read_only: bool,
    /// repair=True: zstd records whose dictionary is missing or damaged are skipped
    dicts: Option<&'a dict::Usable>,
    /// An older segment of the log (not a compaction output): the segments appended to
    /// after it (ids, ascending). A bad record it ends with is a torn tail too when no
    /// record of theirs says it was synced — durability="none" leaves a sealed segment
    /// unsynced until the next sync, and a crash of the machine may tear it.
    later: Option<&'a [u32]>,
}

impl Store {
    pub fn open(dir: &Path, opts: Options) -> io::Result<Store> {
        if !opts.read_only {
            return Self::open_once(dir, opts);
        }
        // A live writer's compaction may delete a segment between the listing and its
        // opening (once open, an unlinked file stays readable): list again.
        let mut tries = 0;
        loop {
            match Self::open_once(dir, opts.clone()) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 8 && dir.exists() => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1 << tries.min(5)));
                }
                r => return r,
            }
        }
    }

    fn open_once(dir: &Path, opts: Options) -> io::Result<Store> {
        let t0 = Instant::now();
        if opts.segment_size < 4096 || opts.segment_size > 2 << 30 {
            return Err(err(
                io::ErrorKind::InvalidInput,
                format!(
                    "segment_size must be between 4 KiB and 2 GiB (got {})",
                    opts.segment_size
                ),
            ));
        }
        if opts.sqpoll && !(opts.direct && opts.use_uring) {
            return Err(err(
                io::ErrorKind::InvalidInput,
                "sqpoll=True needs direct=True and io_uring=True: only O_DIRECT appends go \
                 through a ring (buffered ones are plain system calls)"
                    .into(),
            ));
        }
        if opts.read_only && opts.repair {
            return Err(err(
                io::ErrorKind::InvalidInput,
                "repair=True rewrites the store: it needs the writer's open, not \
                 read_only=True"
                    .into(),
            ));
        }
        let ro = opts.read_only;
        // (opening LOCK is also how a missing directory is found: one path walk less)
        let lock_path = dir.join("LOCK");
        let lock_fd = match ro {
            // (read-only: no lock taken, nothing created; the fd held is the directory's)
            true => open_fd(dir, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => err(
                    io::ErrorKind::NotFound,
                    format!(
                        "{}: no such store (read_only=True creates nothing)",
                        dir.display()
                    ),
                ),
                _ => e,
            }),
            false => open_fd(&lock_path, libc::O_RDWR | libc::O_CREAT),
        };
        let lock_fd = match lock_fd {
            Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.exists() && !ro => {
                if !opts.create {
                    return Err(err(
                        io::ErrorKind::NotFound,
                        format!("{}: no such store (open with create=True)", dir.display()),
                    ));
                }
                fs::create_dir_all(dir).map_err(|e| {
                    let why = plain(&e);
                    err(
                        e.kind(),
                        format!("{}: cannot create the store: {why}", dir.display()),
                    )
                })?;
                open_fd(&lock_path, libc::O_RDWR | libc::O_CREAT)?
            }
            Err(e) if crate::text::errno_of(&e) == Some(libc::ENOTDIR) => {
                return Err(reword(
                    &e,
                    format!(
                        "{}: not a directory — a store is a directory (kv.open creates it); \
                         this path, or a parent of it, is a file",
                        dir.display()
                    ),
                ))
            }
            r => r?,
        };
        let mapped_ok = mapped_writes_safe(dir);
        let kind = ActiveKind::for_store(mapped_ok, &opts);
        // SAFETY: flock on our fd; the lock dies with the process.
        if !ro && unsafe { libc::flock(lock_fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let here = fork::held_here(lock_fd);
            // SAFETY: fd is ours.
            unsafe { libc::close(lock_fd) };
            if here {
                return Err(err(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is already open for writing in this process (a kv.open() of it \
                         not closed yet): use that one — it is thread-safe — or close it \
                         first; only one writer at a time",
                        dir.display()
                    ),
                ));
            }
            return Err(err(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} is open for writing by another process (its LOCK is held); only one \
                     writer at a time — the lock is released when that process exits",
                    dir.display()
                ),
            ));
        }
        // Closes the lock (and any segment fd opened so far) if opening fails.
        struct Guard(Vec<i32>);
        impl Drop for Guard {
            fn drop(&mut self) {
                for fd in &self.0 {
                    // SAFETY: fds we opened and nobody else owns yet.
                    unsafe { libc::close(*fd) };
                }
            }
        }
        let mut guard = Guard(vec![lock_fd]);
        let mut rec = Recovery::default();
        // (the listing says whether a compaction is to be finished and which segments
        // have hint files: no lookup of each name that may not exist)
        let mut names = Self::list_dir(dir)?;
        // (read-only: the segments a committed compaction retired are left out, not
        // deleted — the writer finishes that)
        let mut retired: Vec<u32> = Vec::new();
        if names.iter().any(|n| n == COMPACT_MARKER) {
            match ro {
                true => {
                    let text = fs::read_to_string(dir.join(COMPACT_MARKER));
                    retired = Self::compaction_retired(&text.unwrap_or_default());
                }
                false => {
                    Self::finish_compaction(dir)?;
                    names = Self::list_dir(dir)?;
                }
            }
        }
        let has_overlay = names.iter().any(|n| n == overlay::FILE);
        let dict_ids: Vec<u32> = names.iter().filter_map(|n| dict::dict_id_of(n)).collect();
        let mut ids: Vec<u32> = Vec::new();
        let mut hints: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
        for name in &names {
            if let Some(id) = name.strip_suffix(".seg").and_then(|s| s.parse().ok()) {
                if !retired.contains(&id) {
                    ids.push(id);
                }
            }
            if let Some(id) = name.strip_suffix(".hint").and_then(|s| s.parse().ok()) {
                if *name == hint_name(id) {
                    hints.insert(id);
                }
            }
            if name.ends_with(".tmp") && !ro {
                let _ = fs::remove_file(dir.join(name));
            }
        }
        ids.sort_unstable();
        // A hint file without its segment: a compaction interrupted between writing the
        // hint and renaming the segment into place (the `.tmp` went above). Removed, so
        // that a later segment given that id is not mistaken for a compaction output.
        let orphans: Vec<u32> = hints
            .iter()
            .copied()
            .filter(|id| ids.binary_search(id).is_err())
            .collect();
        for id in orphans {
            hints.remove(&id);
            if !ro {
                let _ = fs::remove_file(dir.join(hint_name(id)));
            }
        }
        let hinted = |id: u32| hints.contains(&id);
        // The segment that was being appended to: the newest one without a hint file
        // (compaction outputs carry hints and may have higher ids).
        let newest = ids.iter().rev().copied().find(|&id| !hinted(id));
        let mut sizes: BTreeMap<u32, u64> = BTreeMap::new();
        for &id in &ids {
            sizes.insert(id, fs::metadata(dir.join(seg_name(id)))?.len());
        }
        // repair rescans everything: the snapshot may point at the damage
        let snap = match opts.repair || !opts.index_snapshot {
            true => None,
            // (read-only: a damaged one is not removed)
            false => snapshot::load(dir, !ro)?,
        };
        // How long each segment was when INDEX was written (its header has a checksum of
        // its own, whatever the state of the rest): a segment shorter than that, or gone,
        // lost records that were written and synced before the store was closed.
        let recorded = match &snap {
            Some(s) => Some(snapshot::Recorded {
                active: s.active,
                active_off: s.active_off,
                segs: s.segs.clone(),
            }),
            // (also from an INDEX not loaded: turned off, damaged, or the header alone
            // that a store without snapshots writes)
            None => snapshot::recorded(dir)?,
        };
        let mut cut: Vec<(u32, String)> = Vec::new();
        // per segment: the length below which its records were complete and synced
        let mut synced: BTreeMap<u32, u64> = BTreeMap::new();
        // (an INDEX older than a compaction — put back from a copy — is not a record of
        // anything: compaction removes INDEX before it starts, and its outputs, which
        // carry hint files, are then segments INDEX does not list)
        let stale = |segs: &[(u32, SnapSeg)]| hints.iter().any(|h| !segs.iter().any(|s| s.0 == *h));
        if let Some(r) = recorded.as_ref().filter(|r| !stale(&r.segs)) {
            // (a segment a committed compaction retired is not missing: read-only opens
            // leave it out instead of finishing the compaction)
            for (id, s) in r.segs.iter().filter(|s| !retired.contains(&s.0)) {
                let want = if *id == r.active {
                    r.active_off
                } else {
                    s.size
                };
                synced.insert(*id, want);
                Self::note_cut(dir, *id, want, sizes.get(id).copied(), "INDEX", &mut cut);
            }
        }
        let snap = snap.filter(|s| {
            // (a small snapshot was verified already: a damaged one is not used)
            Self::snapshot_fits(s, &sizes) && !(s.check.is_done() && s.check.wait().is_err())
        });
        let index_check = snap.as_ref().map(|s| s.check.clone());
        // The live overlay goes in a shared mapping of a file: only where mapped stores
        // are safe (see mapped_writes_safe), and not when the snapshot is not used.
        // (URINGKIT_KV_OVERLAY=0 keeps it on the heap)
        // (read-only: never — OVERLAY belongs to the live writer, who changes it in place)
        let shareable = snap.is_some()
            && !ro
            && opts.index_snapshot
            && std::env::var_os("URINGKIT_KV_OVERLAY").is_none_or(|v| v != "0")
            && mapped_ok;
        let ident = snap.as_ref().map(|s| s.ident);
        // dead bytes per segment: from the snapshot, plus what replay finds superseded
        let mut dead: Wastes = BTreeMap::new();
        let mut known: BTreeMap<u32, u64> = BTreeMap::new();
        let mut loaded = None;
        let (mut index, resume, mut seq) = match snap {
            Some(sn) => {
                rec.from_snapshot = true;
                loaded = Some((sn.active, sn.active_off, sn.seq));
                for (id, ss) in &sn.segs {
                    dead.insert(
                        *id,
                        Waste {
                            dead: ss.dead,
                            tombs: ss.tombs as u64,
                        },
                    );
                    if *id != sn.active {
                        known.insert(*id, ss.size);
                    }
                }
                // What a killed writer's index covered, from its live overlay: replay
                // resumes where that ends (each segment before it is complete).
                // (the listing says whether there is one: no failed open per reopen)
                // A read-only open copies the overlay of a writer — closed, or live in
                // another process — and uses the copy as its own heap overlay: copying
                // the table (3 MB at most) is cheaper than replaying the log since INDEX
                // from ~100 records up (1M keys: 0.57 ms against 0.8 ms for 101 records,
                // 8 ms for 25,250; `/tmp/w/rocopy.py`).
                let left = match (shareable, ro) {
                    _ if !has_overlay => None,
                    (true, _) => {
                        overlay::Shared::open(dir, sn.ident).map(|(sh, h)| Left::Shared(sh, h))
                    }
                    (false, true) => overlay::copy(dir, sn.ident).map(|(c, h)| Left::Copied(c, h)),
                    (false, false) => None,
                };
                let mut index = sn.index;
                let mut resume = (sn.active, sn.active_off);
                let mut seq = sn.seq;
                let fits = |h: &overlay::Header| {
                    h.at.active >= sn.active
                        && sizes.get(&h.at.active).is_some_and(|&n| n >= h.at.off)
                        && h.segs.iter().all(|(id, _)| sizes.contains_key(id))
                };
                let taken = left
                    .filter(|l| fits(l.header()))
                    .and_then(|l| l.restore_into(&mut index));
                if let Some(h) = taken {
                    let at = (h.at.active, h.at.off);
                    rec.from_overlay = true;
                    loaded = None;
                    known = sizes.range(..at.0).map(|(i, n)| (*i, *n)).collect();
                    // (tombstone bytes are not in the overlay: counted as none)
                    dead = h.segs.iter().map(|&(i, d)| (i, Waste::dead(d))).collect();
                    resume = at;
                    seq = seq.max(h.at.seq);
                }
                (index, Some(resume), seq)
            }
            None => {
                let mut index = Index::new();
                // Reserve for the worst case (small records) so recovery never rehashes.
                let total: u64 = sizes.values().sum();
                index.reserve_for_rebuild((total / 160) as usize, (total / 8) as usize);
                // (compaction outputs hold copies older than records of lower segments)
                index.track_seqs();
                (index, None, 0)
            }
        };
        // The hint files that will be read (a snapshot in use covers their segments):
        // each also says how long its segment was written.
        let mut hint_files: BTreeMap<u32, (Vec<u8>, u64)> = BTreeMap::new();
        for &id in &ids {
            if !hinted(id) || known.contains_key(&id) || resume.is_some_and(|r| r.0 == id) {
                continue;
            }
            if let Some((data, len)) = Self::read_hint(dir, id) {
                let now = sizes.get(&id).copied();
                Self::note_cut(dir, id, len, now, "its hint file", &mut cut);
                synced.entry(id).or_insert(len);
                hint_files.insert(id, (data, len));
            }
        }
        if !cut.is_empty() {
            let what: Vec<String> = cut.iter().map(|c| c.1.clone()).collect();
            if !opts.repair {
                return Err(err(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} — the files were changed outside uringkit; open with \
                         repair=True to keep what is left (what the missing bytes held is \
                         lost)",
                        what.join("; ")
                    ),
                ));
            }
            // accepted: INDEX and the hint files that recorded the lost lengths would
            // report them again at the next open (this one rebuilds without them)
            snapshot::remove(dir)?;
            for (id, _) in &cut {
                let _ = fs::remove_file(dir.join(hint_name(*id)));
            }
            fsync_dir(dir)?;
            rec.skipped.extend(what);
        }
        let mut raw: Vec<(u32, i32, u64, bool)> = Vec::new();
        let dicts = opts.repair.then(|| dict::Usable::new(dir));
        let log: Vec<u32> = ids.iter().copied().filter(|&id| !hinted(id)).collect();
        for &id in &ids {
            let path = dir.join(seg_name(id));
            let fd = open_fd(&path, if ro { libc::O_RDONLY } else { libc::O_RDWR })?;
            guard.0.push(fd);
            let is_newest = Some(id) == newest;
            if rec.cut_at.is_some_and(|at| id > at) && !hinted(id) {
                // after a cut of the log in an older segment: written later, never synced
                let size = sizes.get(&id).copied().unwrap_or(0);
                let gone = garbage_after(fd, 0, size)?;
                rec.torn_bytes += gone;
                if let Some(c) = rec.unsynced_cut.as_mut() {
                    c.1 += 1;
                }
                if !ro && size > 0 {
                    // SAFETY: fd is open for writing.
                    if unsafe { libc::ftruncate(fd, 0) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // SAFETY: fd is open.
                    unsafe { libc::fdatasync(fd) };
                }
                let size = if ro { size } else { 0 };
                raw.push((id, fd, size, true));
                continue;
            }
            let mut scanned = false;
            let scan = Scan {
                id,
                fd,
                from: 0,
                newest: is_newest,
                repair: opts.repair,
                zeros_end_it: false,
                synced: synced.get(&id).copied().unwrap_or(0),
                read_only: opts.read_only,
                dicts: dicts.as_ref(),
                later: {
                    let after = &log[log.partition_point(|&l| l <= id)..];
                    // (INDEX recording a later segment with records: it was written
                    // after this one was sealed, and synced every segment first)
                    let indexed = after.iter().any(|t| synced.get(t).is_some_and(|&n| n > 0));
                    (!hinted(id) && !is_newest && !indexed).then_some(after)
                },
            };
            let skipped = rec.skipped.len();
            let (size, s) = if let Some(&size) = known.get(&id) {
                (size, 0)
            } else if let Some((_, from)) = resume.filter(|r| r.0 == id) {
                let r = Scan {
                    from,
                    zeros_end_it: rec.from_overlay,
                    ..scan
                };
                Self::replay(&path, r, &mut index, &mut rec, &mut dead)?
            } else if let Some(r) = hint_files
                .remove(&id)
                .filter(|h| !opts.repair && sizes.get(&id) == Some(&h.1))
                .and_then(|(data, _)| Self::load_hint(&data, id, &mut index, &mut dead))
            {
                // (repair reads the records themselves: a hint may point at the damage)
                rec.from_hints += 1;
                r
            } else {
                scanned = true;
                let r = Self::replay(&path, scan, &mut index, &mut rec, &mut dead)?;
                if rec.skipped.len() > skipped && hinted(id) {
                    // its hint lists what repair just skipped
                    let _ = fs::remove_file(dir.join(hint_name(id)));
                }
                r
            };
            seq = seq.max(s);
            raw.push((id, fd, size, scanned));
        }
        if opts.repair && !rec.skipped.is_empty() {
            // an INDEX from before points at what was skipped: gone before anything else
            // can open the store (the close writes a new one)
            snapshot::remove(dir)?;
            fsync_dir(dir)?;
        }
        index.purge_tombstones();
        index.end_recovery();
        index.shrink();
        if !index.is_shared() && !ro && has_overlay {
            overlay::remove(dir); // (one left by a killed writer and not used is stale)
        }
        let overlay_due = match (shareable, ident, index.is_shared()) {
            (true, Some(ident), false) => Some((dir.to_path_buf(), ident)),
            _ => None,
        };
        let overlay_pending = overlay_due.is_some();
        rec.segments = raw.len();
        guard.0.clear(); // from here on, Segment owns each fd
        let mut segs: BTreeMap<u32, Arc<Segment>> = raw
            .into_iter()
            .map(|(id, fd, size, scanned)| {
                let w = dead.get(&id).copied().unwrap_or_default();
                let d = w.dead.min(size);
                let seg = match (Some(id) == newest, ro) {
                    (true, false) => Segment::active(fd, size, d, opts.segment_size, kind),
                    // read-only: a live writer may cut a failed write off the end of the
                    // segment it appends to; read with pread, where that is an error
                    // rather than a SIGBUS through a mapping
                    (true, true) => Segment::new(fd, size, d, None),
                    (false, _) => Segment::new(fd, size, d, Some(0)),
                };
                seg.verified.store(scanned, Ordering::Relaxed);
                seg.tombs.store(w.tombs.min(size - d), Ordering::Relaxed);
                (id, seg)
            })
            .collect();
        let max_id = ids.last().copied().unwrap_or(0);
        let active = match newest {
            Some(id) if id == max_id => id,
            // (read-only: no segment is created; the newest stands for the active one)
            _ if ro && !segs.is_empty() => newest.unwrap_or(max_id),
            _ if ro => {
                guard.0.push(lock_fd);
                return Err(err(
                    io::ErrorKind::NotFound,
                    format!("{}: not an xkv store (no segment files)", dir.display()),
                ));
            }
            _ => {
                let id = max_id + 1;
                let fd = match open_fd(&dir.join(seg_name(id)), libc::O_RDWR | libc::O_CREAT) {
                    Ok(fd) => fd,
                    Err(e) => {
                        guard.0.push(lock_fd);
                        return Err(e);
                    }
                };
                let seg = Segment::active(fd, 0, 0, opts.segment_size, kind);
                segs.insert(id, seg);
                fsync_dir(dir)?;
                id
            }
        };
        let act = segs[&active].clone();
        let act_size0 = act.size.load(Ordering::Relaxed);
        let appender = match ro {
            true => None, // (read-only: nothing appends)
            false => match Appender::new(
                act.fd,
                opts.use_uring,
                act_size0,
                opts.durability == Durability::Sync,
                opts.direct,
                opts.sqpoll,
            ) {
                Ok(mut a) => {
                    if kind != ActiveKind::Plain {
                        a.set_active(Some(act.clone()));
                    }
                    Some(a)
                }
                Err(e) => {
                    guard.0.push(lock_fd);
                    return Err(e);
                }
            },
        };
        let dead_of = |(id, s): (&u32, &Arc<Segment>)| (*id, s.dead.load(Ordering::Relaxed));
        index.settle((active, act_size0, seq), segs.iter().map(dead_of));
        rec.elapsed = t0.elapsed();
        let next_id = segs.keys().last().copied().unwrap_or(0) + 1;
        let act_size = act.size.load(Ordering::Relaxed);
        // (what INDEX recorded of the active segment was synced before it was written)
        let durable = match synced.get(&active) {
            Some(&n) => record::mark(active, n.min(act_size)),
            None => 0,
        };
        // Every zstd dictionary, loaded now (see Zstd::with_known): the writer's from the
        // listing above (it alone adds or removes them). A read-only open lists them
        // after its replay: every record it read names one there — unless a compaction
        // of the writer removed it since, which it does only after removing the
        // segments whose records named it: then one of ours is gone, and the open
        // starts over (Store::open retries on NotFound).
        let level = match opts.compression {
            Compression::Zstd { level } if !ro => Some(level),
            _ => None,
        };
        let mut dict_ids = dict_ids;
        if ro {
            let now = match Self::list_dir(dir) {
                Ok(now) => now,
                Err(e) => {
                    guard.0.push(lock_fd);
                    return Err(e);
                }
            };
            dict_ids = now.iter().filter_map(|n| dict::dict_id_of(n)).collect();
            if let Some(id) = segs.keys().find(|id| !now.contains(&seg_name(**id))) {
                guard.0.push(lock_fd);
                return Err(err(
                    io::ErrorKind::NotFound,
                    format!("{}: removed while opening", seg_name(*id)),
                ));
            }
        }
        let zstd = Zstd::with_known(dir, level, Some(dict_ids));
        // After the replay (see Check::start) and after this open's own mappings: the
        // verifier maps the index in as it reads it, and a mapping made meanwhile waits
        // for each of those.
        if let Some(c) = &index_check {
            c.start();
        }
        let born = fork::generation();
        if !ro {
            // (a forked child lets the lock go: see sys/fork.rs)
            fork::hold_lock(lock_fd);
        }
        // the keys in order as the last close left them, if this is the state it left
        // (from here on the index logs its inserts, as after a scan sorted them)
        let now = Saved {
            seed: index.seed(),
            seq,
            keys: index.len() as u64,
        };
        // (not after a recovery that dropped anything: its state is not one a close
        // left, whatever its numbers say)
        let whole = rec.torn_bytes == 0 && rec.unsynced_cut.is_none() && rec.skipped.is_empty();
        let order_saved = (whole && order::saved_matches(dir, now)).then_some(now);
        if order_saved.is_some() {
            index.added = Some(Vec::new());
        } else if !ro && dir.join(order::FILE).exists() {
            // another state's: gone for good before anything is written on top
            let _ = fs::remove_file(dir.join(order::FILE));
            let _ = fsync_dir(dir);
        }
        if !ro {
            // (what a close killed while saving the order left)
            let _ = fs::remove_file(dir.join(order::TMP));
        }
        Ok(Store {
            dir: dir.to_path_buf(),
            lock_fd,
            state: RwLock::new(State {
                index,
                segs,
                active,
                next_id,
                seq,
                overlay_due,
                views: view::Views::default(),
                next_view: 1,
            }),
            commit: Mutex::new(Commit {
                pending: Vec::new(),
                leader: false,
                next_ticket: 0,
                done_ticket: 0,
                failed: Vec::new(),
                asking: std::collections::BTreeSet::new(),
                appender,
                write_off: act_size,
                unsynced: 0,
                last_sync: Instant::now(),
                wbuf: Vec::new(),
                inflight: None,
                inflight_data: Vec::new(),
                parked: Vec::new(),
                ready: std::collections::VecDeque::new(),
                unrelayed: 0,
            }),
            flushed: AtomicU64::new(if ro { u64::MAX } else { act_size }),
            loaded,
            index_check,
            group_commits: AtomicU64::new(0),
            durable: AtomicU64::new(durable),
            sealed_unsynced: Mutex::new(Vec::new()),
            warm_started: AtomicBool::new(false),
            cold_hint: AtomicBool::new(false),
            overlay_pending: AtomicBool::new(overlay_pending),
            warm_running: AtomicBool::new(false),
            warm_stop: Arc::new(AtomicBool::new(false)),
            warm_thread: Mutex::new(None),
            warmed: Arc::new(AtomicU64::new(0)),
            waiting: AtomicUsize::new(0),
            turns: AtomicU64::new(0),
            primed: AtomicU64::new(0),
            primed_handoffs: AtomicU64::new(0),
            commit_cv: Condvar::new(),
            compacting: Mutex::new(()),
            order: Mutex::new(None),
            order_file: Mutex::new(order_saved),
            order_bytes: AtomicU64::new(0),
            order_sorts: AtomicU64::new(0),
            me: OnceLock::new(),
            auto_running: AtomicBool::new(false),
            auto_compactions: AtomicU64::new(0),
            auto_compact_failures: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            reclaimed_bytes: AtomicU64::new(0),
            last_compaction_us: AtomicU64::new(0),
            compacted_bytes: AtomicU64::new(0),
            compressed_values: AtomicU64::new(0),
            compression_saved: AtomicU64::new(0),
            zstd,
            reader: Mutex::new(None),
            recovery: rec,
            active_kind: kind,
            born,
            opener: std::process::id(),
            opts,
        })
    }

    /// A crash after a compaction wrote its marker: delete the segments it superseded.
    /// The names of the entries of `dir`.
    fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in fs::read_dir(dir)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    /// The segments a committed compaction retired (`text`: its marker lists them).
    fn compaction_retired(text: &str) -> Vec<u32> {
        text.split_whitespace()
            .filter_map(|s| s.parse::<u32>().ok())
            .collect()
    }

    fn finish_compaction(dir: &Path) -> io::Result<()> {
        let m = dir.join(COMPACT_MARKER);
        let Ok(text) = fs::read_to_string(&m) else {
            return Ok(());
        };
        for id in Self::compaction_retired(&text) {
            let _ = fs::remove_file(dir.join(seg_name(id)));
            let _ = fs::remove_file(dir.join(hint_name(id)));
        }
        fsync_dir(dir)?;
        fs::remove_file(&m)?;
        fsync_dir(dir)
    }

    /// Whether a snapshot still describes the segments on disk: each segment it lists is
    /// there with the size it recorded (the active one may have grown since), and every
    /// other segment is newer than its active one (appended after it was taken).
    fn snapshot_fits(sn: &snapshot::Snapshot, sizes: &BTreeMap<u32, u64>) -> bool {
        let listed: BTreeMap<u32, u64> = sn.segs.iter().map(|(i, s)| (*i, s.size)).collect();
        listed.contains_key(&sn.active)
            && listed.iter().all(|(id, size)| match sizes.get(id) {
                Some(now) if *id == sn.active => *now >= sn.active_off,
                Some(now) => now == size,
                None => false,
            })
            && sizes
                .keys()
                .all(|id| listed.contains_key(id) || *id > sn.active)
    }

    /// A segment recorded (by `source`: INDEX or its hint file) as `want` bytes long that
    /// is now `now` bytes long (`None`: gone): what is missing, for `cut`.
    fn note_cut(
        dir: &Path,
        id: u32,
        want: u64,
        now: Option<u64>,
        source: &str,
        cut: &mut Vec<(u32, String)>,
    ) {
        let path = dir.join(seg_name(id));
        let what = match now {
            Some(n) if n >= want => return,
            Some(n) => format!(
                "{}: cut short at offset {n}: {source} recorded {want} bytes of records \
                 there, {} of them are missing",
                path.display(),
                want - n
            ),
            None => format!(
                "{}: missing, with the {want} bytes of records {source} recorded in it",
                path.display()
            ),
        };
        if !cut.iter().any(|c| c.0 == id) {
            cut.push((id, what));
        }
    }

    /// Scan a segment from offset `from`, apply committed records to the index, count
    /// superseded records in `dead`. `seg` = (id, fd, from, newest, repair,
    /// zeros_end_it, synced): below `synced` the records were complete and synced when
    /// INDEX or a hint file was written, so a bad one there is damage even in the newest
    /// segment, not a torn tail. Returns (valid size, max seq).
    fn replay(
        path: &Path,
        seg: Scan,
        index: &mut Index,
        rec: &mut Recovery,
        dead: &mut Wastes,
    ) -> io::Result<(u64, u64)> {
        let Scan {
            id,
            fd,
            from,
            newest,
            repair,
            zeros_end_it,
            synced,
            read_only,
            dicts,
            later,
        } = seg;
        // SAFETY: stat is POD.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out pointer.
        unsafe { libc::fstat(fd, &mut st) };
        let size = st.st_size as u64;
        // how long the segment was sealed (an older segment of the log, rolled past
        // since session 33): records ending short of it lost their tail to a crash
        let sealed = match later {
            Some(l) => Self::sealed_length(path, id, l)?,
            None => None,
        };
        if from >= size {
            // nothing after what the snapshot covers (a clean reopen): nothing to map
            // (or an older segment that came back empty)
            if let Some((l, later)) = sealed.filter(|&l| size < l).zip(later) {
                if Self::lost_tail(path, id, size, l, synced, later, repair, rec)? {
                    rec.cut_at = Some(id);
                    rec.unsynced_cut = Some((path.display().to_string(), 0));
                }
            }
            return Ok((from, 0));
        }
        if zeros_end_it && newest {
            // A killed writer's live overlay was taken back: what it covers ends at
            // `from`. When nothing was begun after it (the writer died between writes:
            // the file ends there, or the zeros of space allocated ahead follow), there
            // is nothing to replay and nothing to cut (the zero tail stays, as below) —
            // known from one small read, without mapping the segment (mapping it,
            // faulting a page in and unmapping it took 40-80 µs of a ~450 µs reopen).
            let mut head = [0u8; HEADER];
            let n = match from < size {
                true => pread_exact(fd, &mut head, from)?,
                false => 0,
            };
            if head[..n].iter().all(|&b| b == 0) {
                return Ok((from, 0));
            }
        }
        // Parse the segment in place through a read-only mapping (no copy of the file).
        // (from > 0: only the tail after the index snapshot is read, not the whole file)
        // (read ahead only up to the first hole: past it lies what the appender allocated
        // and never wrote, if anything)
        // The first hole from `from` on. The mapping is never read in a hole: on tmpfs
        // a read fault there allocates a page, and on a full tmpfs that is SIGBUS
        // (found by `uringkit kv stress` on a small tmpfs, session 30). Normally only
        // space allocated ahead and never written follows it (zeros: no record), and
        // what is mapped ends there; a file with data after a hole (written by
        // something else, or a bug) is read with pread instead, which reads holes as
        // zeros, so that the rules below judge it whole, as they always did.
        let hole = match seek_region(fd, from, libc::SEEK_HOLE) {
            Ok(Some(h)) => h.min(size),
            _ => size,
        };
        let data_after_hole = hole < size
            && matches!(seek_region(fd, hole, libc::SEEK_DATA), Ok(Some(d)) if d < size);
        let until = if zeros_end_it {
            from // (few records, if any, follow a live overlay: no read-ahead)
        } else {
            hole
        };
        let map = match (read_only && newest, data_after_hole) {
            (_, true) => ReadMap::copied(fd, from as usize, size as usize),
            (true, false) => ReadMap::copied(fd, from as usize, until as usize),
            (false, false) => ReadMap::new(fd, size as usize, from as usize, until as usize)?,
        };
        let data: &[u8] = map.bytes();
        let data = match data_after_hole {
            true => data,
            false => &data[..data.len().min(hole as usize)],
        };
        let mut off = from as usize;
        let mut max_seq = 0u64;
        // (record offset, kind, val_len, seq, record size, key length): keys stay in the map
        let mut batch: Vec<(usize, Kind, u32, u64, u64, usize)> = Vec::new();
        let mut batch_start: Option<usize> = None;
        let mut good_end = off;
        // an older segment's records end here, and so does the log (see below)
        let mut cut_here = false;
        // damage found short of the length the segment was sealed at (reported there)
        let mut short_seen = false;
        // repair: records skipped for an unreadable dictionary, by reason: (count, bytes,
        // first offset, last offset) — one report each, not one per record
        let mut undecodable: BTreeMap<String, (u64, u64, usize, usize)> = BTreeMap::new();
        // single records waiting to be indexed (in order, a chunk at a time)
        let mut ready: Vec<Replayed> = Vec::with_capacity(256);
        if index.is_mapped() {
            // The tail after a snapshot goes to the index's overlay: count its records
            // first (headers only) so that the overlay is sized once instead of doubling
            // its way up, rehashing every key it holds each time.
            index.reserve(Self::count_records(&data[off..]).min(OVERLAY_MAX), 0);
        }
        while off < data.len() {
            let bad = match record::parse_header(&data[off..]) {
                Ok(h) => {
                    let total = h.total();
                    if off + total > data.len() {
                        Some("short record".to_string())
                    } else if record::check(&data[off..off + total]).is_err() {
                        Some("bad CRC".to_string())
                    } else if let Some(why) =
                        dicts.filter(|_| h.flags & FLAG_ZSTD != 0).and_then(|d| {
                            d.problem(&data[off + HEADER + h.key_len as usize..off + total])
                        })
                    {
                        // repair: a sound record whose value cannot be decompressed (its
                        // dictionary is missing or damaged) is lost like a damaged one —
                        // skipped whole (a batch it belongs to is then incomplete and
                        // dropped at its COMMIT), never taken for a torn tail
                        dead.entry(id).or_default().dead += total as u64;
                        max_seq = max_seq.max(h.seq); // (never reused by a later write)
                        let u = undecodable.entry(why).or_insert((0, 0, off, off));
                        (u.0, u.1, u.3) = (u.0 + 1, u.1 + total as u64, off);
                        if batch_start.is_none() {
                            good_end = off + total;
                        }
                        off += total;
                        None
                    } else {
                        let key = &data[off + HEADER..off + HEADER + h.key_len as usize];
                        max_seq = max_seq.max(h.seq);
                        rec.records += 1;
                        match h.kind {
                            Kind::Commit => {
                                Self::apply_all(index, &ready, dead);
                                ready.clear();
                                // All of the batch or none of it: its COMMIT counts its
                                // records, which share its sequence number. Fewer, or
                                // records of another batch before them, happen only where
                                // repair skipped damage: what is incomplete is dropped.
                                let mut drop = Vec::new();
                                if batch.len() != h.val_len as usize
                                    || batch.iter().any(|b| b.3 != h.seq)
                                {
                                    if !repair {
                                        return Err(err(
                                            io::ErrorKind::InvalidData,
                                            format!(
                                                "{}: corrupt batch: its COMMIT at offset {off} \
                                                 counts {} records of sequence {}, {} precede \
                                                 it; open with repair=True to drop it",
                                                path.display(),
                                                h.val_len,
                                                h.seq,
                                                batch.len()
                                            ),
                                        ));
                                    }
                                    let (this, other): (Vec<_>, Vec<_>) =
                                        batch.drain(..).partition(|b| b.3 == h.seq);
                                    for (seq, part) in [(None, other), (Some(h.seq), this)] {
                                        match part.len() == h.val_len as usize && seq.is_some() {
                                            true => batch = part,
                                            false => drop.push((seq, part)),
                                        }
                                    }
                                }
                                for (seq, part) in drop.into_iter().filter(|d| !d.1.is_empty()) {
                                    let lost: u64 = part.iter().map(|b| b.4).sum();
                                    dead.entry(id).or_default().dead += lost;
                                    let (what, at) = match seq {
                                        Some(q) => (
                                            format!(
                                                "sequence {q}: {} of its {} records",
                                                part.len(),
                                                h.val_len
                                            ),
                                            off,
                                        ),
                                        None => (
                                            format!("{} records without their COMMIT", part.len()),
                                            part[0].0,
                                        ),
                                    };
                                    rec.skipped.push(format!(
                                        "{}: dropped an incomplete batch at offset {at} ({what}, \
                                         {lost} bytes)",
                                        path.display(),
                                    ));
                                }
                                let items: Vec<Replayed> = batch
                                    .drain(..)
                                    .map(|(o, kind, vl, s, t, kl)| {
                                        let k = &data[o + HEADER..o + HEADER + kl];
                                        (k, kind, vl, (id, o as u64, s, t))
                                    })
                                    .collect();
                                Self::apply_all(index, &items, dead);
                                dead.entry(id).or_default().dead += total as u64;
                                batch_start = None;
                                good_end = off + total;
                            }
                            kind if h.flags & FLAG_BATCH != 0 => {
                                batch_start.get_or_insert(off);
                                let b = (off, kind, h.val_len, h.seq, total as u64);
                                batch.push((b.0, b.1, b.2, b.3, b.4, h.key_len as usize));
                            }
                            kind => {
                                let r = (id, off as u64, h.seq, total as u64);
                                ready.push((key, kind, h.val_len, r));
                                if ready.len() == 256 {
                                    Self::apply_all(index, &ready, dead);
                                    ready.clear();
                                }
                                good_end = off + total;
                            }
                        }
                        off += total;
                        None
                    }
                }
                Err(record::Bad::Short) => Some("short record".to_string()),
                Err(e) => Some(format!("{e:?}")),
            };
            if let Some(mut why) = bad {
                // torn tail: truncated below. In an older segment only a tail of zeros
                // is not corruption: the appender's pre-fill or fallocate, whose cut at
                // the roll a crash of the machine undid. Not torn either: bytes below
                // what INDEX recorded as synced, or what a later record says was synced
                // when it was written (its durable mark) — that is damage.
                // (an older segment's zero tail is known first: judging it torn would
                // read every later segment)
                // (zeros where the next segment's seal record says records were: the
                // pages of a tail a crash lost)
                let short = sealed.is_some_and(|l| (off as u64) < l);
                let zeros = later.is_some() && !short && garbage_after(fd, off as u64, size)? == 0;
                let torn = !zeros
                    && (newest || later.is_some())
                    && off as u64 >= synced
                    && match Self::synced_claim(data, off, id) {
                        Some((at, n)) => {
                            why += &format!(
                                ": not a torn tail, the record at offset {at} says the \
                                 first {n} bytes were synced"
                            );
                            false
                        }
                        None => match later {
                            Some(l) => match Self::synced_later(path, id, off as u64, l)? {
                                Some(claim) => {
                                    why += &format!(": not a torn tail, {claim}");
                                    false
                                }
                                None => true,
                            },
                            None => true,
                        },
                    };
                if short && !torn {
                    short_seen = true;
                    why += &format!(
                        "; the segment after it says it was sealed at {} bytes",
                        sealed.unwrap_or(0)
                    );
                }
                if torn || zeros || (!short && garbage_after(fd, off as u64, size)? == 0) {
                    // An older segment torn (no later record says it was synced) is
                    // where the log ends. (One that ends in zeros is not: they are the
                    // space allocated ahead as often as pages a crash lost — a store
                    // closed, or synced, then its cut at the roll undone — and cutting
                    // there would drop what a sync made durable after it.)
                    cut_here = torn && !newest;
                    break;
                }
                if !repair {
                    return Err(err(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: corrupt record at offset {off} ({why}); open with \
                             repair=True to skip it (what it held is lost)",
                            path.display()
                        ),
                    ));
                }
                // resync: the next offset where a valid record starts
                let start = off;
                off += 1;
                while off + HEADER <= data.len() {
                    if let Ok(h) = record::parse_header(&data[off..]) {
                        let t = h.total();
                        if off + t <= data.len() && record::check(&data[off..off + t]).is_ok() {
                            break;
                        }
                    }
                    off += 1;
                }
                dead.entry(id).or_default().dead += (off.min(data.len()) - start) as u64;
                rec.skipped.push(format!(
                    "{}: skipped {} bytes at offset {start} ({why})",
                    path.display(),
                    off.min(data.len()) - start
                ));
                if off + HEADER > data.len() {
                    off = data.len();
                }
            }
        }
        Self::apply_all(index, &ready, dead);
        drop(ready);
        if let Some((l, later)) = sealed.zip(later) {
            // the records run to the file's end (or to a hole), short of the length
            // it was sealed at: the file came back shorter than it was written
            let at = data.len() as u64;
            if !cut_here && !short_seen && off >= data.len() && at < l {
                cut_here = Self::lost_tail(path, id, at, l, synced, later, repair, rec)?;
            }
        }
        for (why, (n, bytes, first, last)) in undecodable {
            rec.skipped.push(match n {
                1 => format!(
                    "{}: skipped the record at offset {first} ({bytes} bytes): {why}",
                    path.display()
                ),
                _ => format!(
                    "{}: skipped {n} records at offsets {first} to {last} ({bytes} bytes): \
                     {why}",
                    path.display()
                ),
            });
        }
        // An incomplete batch or a torn record at the end of the newest segment never
        // happened: cut the file back to the last complete record.
        let end = if batch_start.is_some() || off < data.len() {
            good_end
        } else {
            data.len()
        };
        if !newest {
            // an unfinished batch in an older segment: its records never happened
            dead.entry(id).or_default().dead += batch.iter().map(|b| b.4).sum::<u64>();
        }
        // Replay stopped on zeros: no record was begun there. After a process was killed
        // (`zeros_end_it`: its live overlay was taken back, so this is the same boot and
        // it died outside an update), nothing lies beyond either: records are written
        // front to back, and a torn one starts with its header.
        let stopped_on_zeros = data[end..].iter().take(HEADER).all(|&b| b == 0);
        drop(map); // unmap before truncating the file under it
                   // The newest segment's tail of zeros (space the appender allocated ahead and
                   // never wrote) stays: the appender writes over it (cutting it costs a journal
                   // update, ~1 ms, and the appender would allocate it again); closing cuts it.
        let keep = read_only
            || newest
                && ((zeros_end_it && stopped_on_zeros)
                    || garbage_after(fd, end as u64, size)? == 0);
        if (end as u64) < size && !keep {
            // A zero-filled tail is the appender's pre-fill or fallocate (a crash before
            // it was cut off), not a torn write: only non-zero bytes beyond the last
            // record count as torn.
            let garbage = garbage_after(fd, end as u64, size)?;
            if garbage > 0 {
                rec.torn_bytes += garbage;
                rec.torn_segment = Some(path.display().to_string());
            }

            // SAFETY: fd is open for writing.
            if unsafe { libc::ftruncate(fd, end as i64) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // Torn bytes that came back after another crash would be cut again, with
            // another warning: make the cut durable. A zero tail that came back is cut
            // silently — no fdatasync (a journal commit, ~1 ms) for it.
            if garbage > 0 {
                // SAFETY: fd is open.
                unsafe { libc::fdatasync(fd) };
            }
        }
        if cut_here {
            // the log ends in an older segment: the open empties the later ones (a
            // read-only one leaves them, and reads none of their records)
            rec.cut_at = Some(id);
            rec.unsynced_cut = Some((path.display().to_string(), 0));
            if read_only {
                rec.torn_bytes += garbage_after(fd, end as u64, size)?;
            }
        }
        Ok((end as u64, max_seq))
    }

    /// How long segment `id` was when the log rolled past it, as the seal record that
    /// starts the next segment of the log says ([`record::encode_seal`]). None when no
    /// seal record names it: a store written before session 33, a segment whose seal
    /// record could not be written, or a partial compaction removed it.
    fn sealed_length(path: &Path, id: u32, later: &[u32]) -> io::Result<Option<u64>> {
        let Some(&next) = later.first() else {
            return Ok(None);
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let f = match fs::File::open(dir.join(seg_name(next))) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut head = [0u8; record::SEAL_LEN];
        let n = pread_exact(f.as_raw_fd(), &mut head, 0)?;
        Ok(record::parse_seal(&head[..n])
            .filter(|&(prev, _)| prev == id)
            .map(|(_, len)| len))
    }

    /// Older segment `id` holds records up to `at`, short of the length `sealed` it was
    /// sealed at: the crash of a machine lost its tail (pages never written back, or a
    /// size never made durable). True when nothing says those bytes were synced — the
    /// log then ends here, as at a torn record — and otherwise the loss is damage: an
    /// error naming what says so, or with `repair` a report of the bytes lost.
    #[allow(clippy::too_many_arguments)]
    fn lost_tail(
        path: &Path,
        id: u32,
        at: u64,
        sealed: u64,
        synced: u64,
        later: &[u32],
        repair: bool,
        rec: &mut Recovery,
    ) -> io::Result<bool> {
        let claim = match at < synced {
            true => Some(format!("INDEX recorded its first {synced} bytes as synced")),
            false => Self::synced_later(path, id, at, later)?,
        };
        let Some(claim) = claim else {
            return Ok(true);
        };
        let what = format!(
            "{}: its records end at offset {at}, but the segment after it says it was \
             sealed at {sealed} bytes: {} bytes lost ({claim})",
            path.display(),
            sealed - at
        );
        if !repair {
            return Err(err(
                io::ErrorKind::InvalidData,
                format!("{what}; open with repair=True to go on without them"),
            ));
        }
        rec.skipped.push(what);
        Ok(false)
    }

    /// A record in one of the segments `later` (appended to after segment `id`) that
    /// says the bytes of segment `id` at `bad` were synced: its mark names `id` synced
    /// past them, or a later segment — a sync after `id` was sealed, which synced it
    /// whole (since session 32; before, "batch" and "none" left it unsynced, and such a
    /// store's damage still reads as damage). None where none says so.
    fn synced_later(path: &Path, id: u32, bad: u64, later: &[u32]) -> io::Result<Option<String>> {
        let dir = path.parent().unwrap_or(Path::new("."));
        for &t in later {
            let data = match fs::read(dir.join(seg_name(t))) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let claim =
                Self::first_record(&data, 0, |h| h.synced_in(id) > bad || h.synced_after(id));
            if let Some((at, h)) = claim {
                return Ok(Some(format!(
                    "the record at offset {at} of {} says it was synced ({})",
                    seg_name(t),
                    match h.synced_in(id) {
                        0 => "a later segment was synced after it".to_string(),
                        n => format!("its first {n} bytes"),
                    }
                )));
            }
        }
        Ok(None)
    }

    /// The first valid record at or after `from` in `data` for which `f` holds (its
    /// offset and header); bad bytes are skipped to the next place a header could start.
    fn first_record(
        data: &[u8],
        from: usize,
        f: impl Fn(&record::Header) -> bool,
    ) -> Option<(usize, record::Header)> {
        let magic = record::MAGIC.to_le_bytes();
        let mut p = from;
        while p + HEADER <= data.len() {
            // (skip to the next place a header's magic could be: zeros go by fast)
            match data[p + 4..].windows(2).position(|w| w == magic) {
                Some(i) => p += i,
                None => return None,
            }
            if p + HEADER > data.len() {
                return None;
            }
            let rec = record::parse_header(&data[p..])
                .ok()
                .map(|h| (h, h.total()))
                .filter(|(_, t)| p + t <= data.len() && record::check(&data[p..p + t]).is_ok());
            match rec {
                Some((h, _)) if f(&h) => return Some((p, h)),
                Some((_, t)) => p += t,
                None => p += 1,
            }
        }
        None
    }

    /// The first valid record of segment `id` after the bad bytes at `bad` whose durable
    /// mark says they were synced before it was written (its offset, and the mark): it
    /// makes them damage, not a write a crash tore. None where no record says so.
    fn synced_claim(data: &[u8], bad: usize, id: u32) -> Option<(usize, u64)> {
        Self::first_record(data, bad + 1, |h| h.synced_in(id) > bad as u64)
            .map(|(p, h)| (p, h.synced_in(id)))
    }

    /// Index replayed records in order, hashing them all first and warming the table a
    /// few records ahead (their cache misses overlap).
    fn apply_all(index: &mut Index, items: &[Replayed], dead: &mut Wastes) {
        const AHEAD: usize = 8;
        index.reserve(items.len(), 0);
        let hashes: Vec<u64> = items.iter().map(|it| index.hash(it.0)).collect();
        for (j, &(key, kind, val_len, r)) in items.iter().enumerate() {
            if let Some(&ha) = hashes.get(j + AHEAD) {
                index.warm(ha);
            }
            Self::apply(index, key, hashes[j], kind, val_len, r, dead);
        }
    }

    /// How many whole records `data` starts with (by their headers alone).
    fn count_records(data: &[u8]) -> usize {
        let (mut n, mut off) = (0, 0);
        while let Ok(h) = record::parse_header(&data[off..]) {
            off += h.total();
            if off > data.len() {
                break;
            }
            n += 1;
        }
        n
    }

    /// Index one replayed record; `r` = (segment, offset, seq, record size).
    fn apply(
        index: &mut Index,
        key: &[u8],
        hash: u64,
        kind: Kind,
        val_len: u32,
        r: (u32, u64, u64, u64),
        dead: &mut Wastes,
    ) {
        let (seg, off, seq, size) = r;
        let loc = Loc {
            seg,
            val_len: if kind == Kind::Delete {
                TOMBSTONE
            } else {
                val_len
            },
            off,
        };
        match index.put_hashed(key, hash, loc, Some(seq)) {
            Put::Ignored => dead.entry(seg).or_default().dead += size,
            r => {
                if let Put::Replaced(old) = r {
                    let w = dead.entry(old.seg).or_default();
                    if old.is_tombstone() {
                        // a tombstone superseded: garbage, no longer one to carry
                        let n = (HEADER + key.len()) as u64;
                        w.tombs = w.tombs.saturating_sub(n);
                        w.dead += n;
                    } else {
                        w.dead += (HEADER + key.len() + old.val_len as usize) as u64;
                    }
                }
                if kind == Kind::Delete {
                    // (never read; a compaction of only some segments copies it forward)
                    dead.entry(seg).or_default().tombs += size;
                }
            }
        }
    }

    /// A hint file whose magic and checksum hold, and the segment length it records.
    fn read_hint(dir: &Path, id: u32) -> Option<(Vec<u8>, u64)> {
        let data = fs::read(dir.join(hint_name(id))).ok()?;
        if data.len() < 20 || !matches!(&data[0..4], b"XVH1" | b"XVH2" | b"XVH3") {
            return None;
        }
        let body = &data[..data.len() - 4];
        let crc = u32::from_le_bytes(data[data.len() - 4..].try_into().ok()?);
        if crc32c::crc32c(body) != crc {
            return None;
        }
        let seg_size = u64::from_le_bytes(body[4..12].try_into().ok()?);
        Some((data, seg_size))
    }

    /// Index segment `id` from its hint file (`data`, from [`Self::read_hint`], whose
    /// segment length the caller has checked). Returns (segment size, max seq).
    fn load_hint(data: &[u8], id: u32, index: &mut Index, dead: &mut Wastes) -> Option<(u64, u64)> {
        let body = &data[..data.len() - 4];
        // (versions 2 and 3 list tombstones too: value length TOMBSTONE)
        let tombstones = data[3] != b'1';
        let seg_size = u64::from_le_bytes(body[4..12].try_into().ok()?);
        let count = u32::from_le_bytes(body[12..16].try_into().ok()?) as usize;
        let mut at = 16usize;
        let mut max_seq = 0;
        let mut entries = Vec::with_capacity(count.min(body.len() / 3));
        let (mut next_off, mut prev_seq) = (0u64, 0u64);
        for _ in 0..count {
            let (key_len, val_len, off, seq, head) = match data[3] {
                b'3' => {
                    // varints: key length, value length + 1 (0: a tombstone), the seq's
                    // zigzag delta from the entry before; the offset follows from the
                    // records before it (a compaction writes them back to back from 0)
                    let mut r = &body[at..];
                    let key_len = usize::try_from(varint(&mut r)?)
                        .ok()
                        .filter(|&n| n <= record::MAX_KEY)?;
                    let val_len = match varint(&mut r)? {
                        0 => TOMBSTONE,
                        v if v - 1 <= record::MAX_VALUE as u64 => (v - 1) as u32,
                        _ => return None,
                    };
                    let z = varint(&mut r)?;
                    let seq = prev_seq.wrapping_add(((z >> 1) as i64 ^ -((z & 1) as i64)) as u64);
                    let rec = HEADER
                        + key_len
                        + if val_len == TOMBSTONE {
                            0
                        } else {
                            val_len as usize
                        };
                    let off = next_off;
                    next_off += rec as u64;
                    prev_seq = seq;
                    (key_len, val_len, off, seq, body.len() - at - r.len())
                }
                _ => {
                    let e = body.get(at..at + 24)?;
                    let key_len = u32::from_le_bytes(e[0..4].try_into().ok()?) as usize;
                    let val_len = u32::from_le_bytes(e[4..8].try_into().ok()?);
                    let off = u64::from_le_bytes(e[8..16].try_into().ok()?);
                    let seq = u64::from_le_bytes(e[16..24].try_into().ok()?);
                    (key_len, val_len, off, seq, 24)
                }
            };
            let key = body.get(at + head..at + head + key_len)?;
            entries.push((
                key,
                Loc {
                    seg: id,
                    val_len,
                    off,
                },
                seq,
            ));
            max_seq = max_seq.max(seq);
            at += head + key_len;
        }
        if at != body.len() || (data[3] == b'3' && next_off != seg_size) {
            return None; // (not what a compaction wrote: the segment is read instead)
        }
        let items: Vec<Replayed> = entries
            .into_iter()
            .map(|(k, l, seq)| {
                if tombstones && l.is_tombstone() {
                    let size = (HEADER + k.len()) as u64;
                    return (k, Kind::Delete, 0, (id, l.off, seq, size));
                }
                let size = (HEADER + k.len() + l.val_len as usize) as u64;
                (k, Kind::Put, l.val_len, (id, l.off, seq, size))
            })
            .collect();
        Self::apply_all(index, &items, dead);
        Some((seg_size, max_seq))
    }

    /// The hint file of compaction output `id` (`size` bytes; `entries`: its records
    /// in order, back to back from offset 0), version 3: varints, offsets implied (see
    /// docs/kv-format.md; older versions ignore it and read the segment's records).
    fn write_hint(&self, id: u32, size: u64, entries: &[(Vec<u8>, Loc, u64)]) -> io::Result<()> {
        let mut b = Vec::with_capacity(20 + entries.iter().map(|e| e.0.len() + 8).sum::<usize>());
        b.extend_from_slice(b"XVH3");
        b.extend_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        let mut prev_seq = 0u64;
        for (k, l, seq) in entries {
            put_varint(&mut b, k.len() as u64);
            put_varint(
                &mut b,
                if l.is_tombstone() {
                    0
                } else {
                    l.val_len as u64 + 1
                },
            );
            let d = seq.wrapping_sub(prev_seq) as i64;
            put_varint(&mut b, ((d << 1) ^ (d >> 63)) as u64);
            prev_seq = *seq;
            b.extend_from_slice(k);
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let tmp = self.dir.join(format!("{}.tmp", hint_name(id)));
        crate::sys::fileio::write_synced(&tmp, &[(0, &b)])
            .and_then(|()| fs::rename(&tmp, self.dir.join(hint_name(id))))
            .inspect_err(|_| {
                let _ = fs::remove_file(&tmp);
            })?;
        Ok(())
    }

    // ----- writes ----------------------------------------------------------------------

    fn check_kv(key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
        if key.is_empty() || key.len() > record::MAX_KEY {
            return Err(err(
                io::ErrorKind::InvalidInput,
                format!("key must be 1 byte to 64 KiB (got {} bytes)", key.len()),
            ));
        }
        if let Some(v) = value {
            if v.len() > record::MAX_VALUE {
                return Err(err(
                    io::ErrorKind::InvalidInput,
                    format!("value must be at most 64 MiB (got {} bytes)", v.len()),
                ));
            }
        }
        Ok(())
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.write(&[(key, Some(value))], false)
    }

    pub fn delete(&self, key: &[u8]) -> io::Result<bool> {
        let existed = self.contains(key)?;
        self.write(&[(key, None)], false)?;
        Ok(existed)
    }

    /// Apply every op atomically: all of them become visible (and durable) or none.
    pub fn batch(&self, ops: &[(&[u8], Option<&[u8]>)]) -> io::Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        self.write(ops, ops.len() > 1)
    }

    fn write(&self, ops: &[(&[u8], Option<&[u8]>)], atomic: bool) -> io::Result<()> {
        self.writable("writing")?;
        let packed = self.pack(ops);
        if self.opts.durability != Durability::Sync {
            return self.write_buffered(ops, &packed, atomic);
        }
        self.commit(ops, &packed, atomic)
    }

    /// The values of `ops` compressed (Options::compression), before any lock is taken:
    /// each writer thread compresses its own values, in parallel with the others and
    /// with the group commit's write and fdatasync (RocksDB compresses in its flush and
    /// compaction threads, never under its write lock). Empty without compression; an
    /// entry is None for a value stored as it is.
    fn pack(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Packed {
        let mut pins: Vec<dict::Pin> = Vec::new();
        let mut one = |v: &[u8]| match self.opts.compression {
            _ if v.len() > record::MAX_VALUE => None, // (refused when encoded)
            Compression::None => None,
            Compression::Lz4 => record::compress(v).map(|c| (c, FLAG_LZ4)),
            Compression::Zstd { .. } => {
                let (c, pin) = self.zstd.compress_pinned(v)?;
                if let Some(p) = pin.filter(|p| !pins.iter().any(|q| Arc::ptr_eq(p, q))) {
                    pins.push(p);
                }
                Some((c, FLAG_ZSTD))
            }
        };
        let vals = match self.opts.compression {
            Compression::None => Vec::new(),
            _ => ops.iter().map(|(_, v)| v.and_then(&mut one)).collect(),
        };
        Packed { vals, _pins: pins }
    }

    /// Bytes `ops` take encoded (with a COMMIT record, whether or not one is written).
    fn encoded_len(ops: &[(&[u8], Option<&[u8]>)]) -> usize {
        ops.iter()
            .map(|(k, v)| HEADER + k.len() + v.map(|v| v.len()).unwrap_or(0))
            .sum::<usize>()
            + HEADER
    }

    /// Check and encode ops as one pending write with the next sequence number.
    fn encode(
        &self,
        ops: &[(&[u8], Option<&[u8]>)],
        packed: &Packed,
        atomic: bool,
    ) -> io::Result<Pending> {
        let mut bytes = Vec::with_capacity(Self::encoded_len(ops));
        let (_, updates) = self.encode_into(&mut bytes, ops, packed, atomic)?;
        Ok(Pending {
            ticket: 0,
            bytes,
            updates,
        })
    }

    /// Check ops and append them to `out` encoded, with the next sequence number (record
    /// offsets in the updates count from where they started in `out`), each value as
    /// [`Store::pack`] compressed it. Nothing is appended if a check fails.
    fn encode_into(
        &self,
        out: &mut Vec<u8>,
        ops: &[(&[u8], Option<&[u8]>)],
        packed: &Packed,
        atomic: bool,
    ) -> io::Result<(u64, Vec<Update>)> {
        self.writable("writing")?;
        for (i, (k, v)) in ops.iter().enumerate() {
            // (a batch names the op: "ops[3]: key must be …")
            Self::check_kv(k, *v).map_err(|e| match ops.len() {
                1 => e,
                _ => err(e.kind(), format!("ops[{i}]: {e}")),
            })?;
        }
        let key_bytes: usize = ops.iter().map(|(k, _)| k.len() + 8).sum();
        if !self.state.read().expect("state").index.has_room(key_bytes) {
            return Err(err(
                io::ErrorKind::OutOfMemory,
                "the index holds 16 GiB of keys, its limit: compact() to reclaim deleted keys"
                    .into(),
            ));
        }
        let seq = {
            let mut st = self.state.write().expect("state");
            st.seq += 1;
            st.seq
        };
        out.reserve(Self::encoded_len(ops));
        let start = out.len();
        let mut updates = Vec::with_capacity(ops.len());
        let flags = if atomic { FLAG_BATCH } else { 0 };
        // what is known durable now (records land after it, in that segment or a later
        // one, where the mark says nothing): tells damage from a torn tail at open
        let mark = self.durable.load(Ordering::Acquire);
        for (i, (k, v)) in ops.iter().enumerate() {
            let at = (out.len() - start) as u64;
            match v {
                Some(v) => {
                    let (stored, fl) = match packed.get(i).and_then(Option::as_ref) {
                        Some((c, how)) => {
                            self.compressed_values.fetch_add(1, Ordering::Relaxed);
                            let saved = (v.len() - c.len()) as u64;
                            self.compression_saved.fetch_add(saved, Ordering::Relaxed);
                            (c.as_slice(), flags | how)
                        }
                        None => (*v, flags),
                    };
                    record::encode(out, Kind::Put, fl, seq, k, stored, mark);
                    updates.push((k.len() as u32, Kind::Put, stored.len() as u32, at));
                }
                None => {
                    record::encode(out, Kind::Delete, flags, seq, k, b"", mark);
                    updates.push((k.len() as u32, Kind::Delete, 0, at));
                }
            }
        }
        if atomic {
            record::encode_commit(out, seq, ops.len() as u32, mark);
        }
        Ok((seq, updates))
    }

    /// Group commit: one writer (the leader) writes everyone's pending records with one
    /// write and one fdatasync; the others wait for their ticket.
    fn commit(
        &self,
        ops: &[(&[u8], Option<&[u8]>)],
        packed: &Packed,
        atomic: bool,
    ) -> io::Result<()> {
        let mut c = self.commit.lock().expect("commit");
        // Encoded under the commit lock, which orders the log: records reach it in
        // sequence-number order. (Numbered before the lock, a put of a key could take
        // its number, a delete of it the next and be queued first: the live index then
        // showed the put, the next open — where the higher number wins — the delete.)
        let mut p = self.encode(ops, packed, atomic)?;
        c.next_ticket += 1;
        let ticket = c.next_ticket;
        p.ticket = ticket;
        c.pending.push(p);
        c.asking.insert(ticket);
        self.wait_locked(c, ticket, true)
    }

    /// Wait until `ticket` is written (leading a group commit if nobody is).
    /// `claim`: the caller is the writer of `ticket` (registered in `Commit::asking`),
    /// told here how its write went — not a waiter for a queued write (`wait_ticket`),
    /// whose writers learn it from [`Store::collect`].
    fn wait_locked<'a>(
        &'a self,
        mut c: std::sync::MutexGuard<'a, Commit>,
        ticket: u64,
        claim: bool,
    ) -> io::Result<()> {
        // groups this writer has led (relay mode: it leads the next while writers keep
        // coming, up to RELAY_LEAD_ROUNDS, instead of becoming a second runnable writer)
        let mut led = 0;
        loop {
            if c.done_ticket >= ticket {
                if claim {
                    c.asking.remove(&ticket);
                }
                if let Some(e) = Self::failure_of(&c, ticket) {
                    // (each writer of the group gets it, errno kept: a full disk is
                    // ENOSPC to the caller)
                    return Err(e);
                }
                if !self.opts.relay || led == 0 || c.pending.is_empty() || c.leader {
                    return Ok(());
                }
                // Relay mode, after leading, with writers queued meanwhile. When writers
                // are backed up (some wait to be released: another writer is running),
                // lead their group too, or after enough rounds hand the lead to one of
                // them and wait to be released like the others — rather than become a
                // second runnable writer. Otherwise hand the lead on and go.
                if c.ready.is_empty() {
                    self.hand_lead(&mut c);
                    return Ok(());
                }
                if led >= RELAY_LEAD_ROUNDS {
                    self.hand_lead(&mut c);
                    let go = self.park(&mut c, ticket, true);
                    drop(c);
                    self.wait_parked(&go, ticket);
                    return Ok(());
                }
            }
            if !c.leader {
                led += 1;
                c = self.lead_group(c, ticket);
                continue;
            }
            if !self.opts.relay {
                c = self.commit_cv.wait(c).expect("commit wait");
                continue;
            }
            let go = self.park(&mut c, ticket, false);
            drop(c);
            self.wait_parked(&go, ticket);
            c = self.commit.lock().expect("commit");
        }
    }

    /// Write (and, as the durability says, sync) everything queued as one group, as its
    /// leader; returns with the lock held again and the group settled.
    fn lead_group<'a>(
        &'a self,
        mut c: std::sync::MutexGuard<'a, Commit>,
        ticket: u64,
    ) -> std::sync::MutexGuard<'a, Commit> {
        c.leader = true;
        let group = std::mem::take(&mut c.pending);
        let mut app = c.appender.take().expect("appender");
        let off = c.write_off;
        let now = Instant::now();
        let total: u64 = group.iter().map(|g| g.bytes.len() as u64).sum();
        let sync = match self.opts.durability {
            Durability::Sync => true,
            Durability::None => false,
            Durability::Batch { ms, bytes } => {
                now.duration_since(c.last_sync) >= Duration::from_millis(ms)
                    || c.unsynced + total >= bytes
            }
        };
        drop(c);
        let mut new_off = off;
        let res = self.write_group(&group, &mut app, &mut new_off, sync);
        let mut c = self.commit.lock().expect("commit");
        c.appender = Some(app);
        let first = group.first().map(|g| g.ticket).unwrap_or(ticket);
        let last = group.last().map(|g| g.ticket).unwrap_or(ticket);
        // (also when the write failed: after a roll the next group goes to the new
        // segment's start — before session 30 it went on at the old segment's length,
        // leaving a hole in front of it that a reopen read as a torn tail, dropping what
        // followed; found by `uringkit kv stress` on a full disk)
        c.write_off = new_off;
        self.flushed.store(new_off, Ordering::Release);
        match res {
            Ok(()) => {
                if sync {
                    self.group_commits.fetch_add(1, Ordering::Relaxed);
                }
                if sync {
                    c.unsynced = 0;
                    c.last_sync = now;
                } else {
                    c.unsynced += total;
                }
            }
            Err(e) => Self::record_failure(&mut c, first, last, &e),
        }
        c.done_ticket = c.done_ticket.max(last);
        c.leader = false;
        self.commit_cv.notify_all();
        self.ready_parked(&mut c);
        // (relay mode: this writer leads the next group itself, or hands the lead on)
        c
    }

    /// Relay mode: a parked writer to go on waiting for its ticket (`done`: it is done;
    /// the writer waits for its release), parked until `go` is set.
    fn park(&self, c: &mut Commit, ticket: u64, done: bool) -> Arc<AtomicU64> {
        let go = Arc::new(AtomicU64::new(0));
        let p = Parked {
            ticket,
            thread: std::thread::current(),
            go: go.clone(),
        };
        if done {
            c.ready.push_back(p);
        } else {
            c.parked.push(p);
        }
        self.note_waiting(c);
        go
    }

    /// Relay mode: sleep until released (`go`), or — when nobody releases this writer —
    /// until its ticket is done and `RELAY_PATIENCE` has passed, or nobody leads.
    fn wait_parked(&self, go: &Arc<AtomicU64>, ticket: u64) {
        loop {
            std::thread::park_timeout(RELAY_PATIENCE);
            match go.load(Ordering::Acquire) {
                0 => {}
                GO => return,
                primed => return self.wait_turn(primed - 1),
            }
            let mut c = self.commit.lock().expect("commit");
            if c.done_ticket >= ticket || !c.leader {
                let mine = |p: &Parked| Arc::ptr_eq(&p.go, go);
                c.parked.retain(|p| !mine(p));
                c.ready.retain(|p| !mine(p));
                self.note_waiting(&c);
                return;
            }
        }
    }

    /// Relay mode, a primed writer: wait awake until a writer lets the lock go after
    /// turn `turn` (then it is free for this one), at most `PRIME_PATIENCE`.
    ///
    /// It yields its CPU at every look rather than spinning between looks: the writer it
    /// waits for, or a leader back from its fdatasync, is often runnable on this very
    /// CPU, and a spin only delays it. (64 writer threads, alternating runs: 78–80K
    /// durable puts/s against 72–73K when it spun 64 times between yields, and less CPU
    /// per put; no change with 4 or 16.)
    fn wait_turn(&self, turn: u64) {
        let start = Instant::now();
        while self.turns.load(Ordering::Acquire) <= turn {
            if start.elapsed() >= PRIME_PATIENCE {
                // nobody came: no longer primed (unless a newer writer is already)
                let _ =
                    self.primed
                        .compare_exchange(turn + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
                return;
            }
            // (another thread of this CPU — a leader back from its fdatasync — may run)
            std::thread::yield_now();
        }
    }

    /// Relay mode: wake one writer still waiting for its ticket to lead the group queued.
    fn hand_lead(&self, c: &mut Commit) {
        if let Some(i) = (0..c.parked.len()).min_by_key(|&i| c.parked[i].ticket) {
            c.parked.swap_remove(i).wake();
        }
        self.note_waiting(c);
    }

    /// Relay mode: writers parked for a ticket now done wait to be released instead.
    ///
    /// Who goes at once: every ready writer when nothing was queued while the group was
    /// written (nobody is writing: the writers are busy elsewhere, or few) or when no
    /// more than `RELAY_MIN_READY` are ready (a small herd costs less than the wait);
    /// otherwise one, if a writer came along meanwhile and found nobody to release.
    fn ready_parked(&self, c: &mut Commit) {
        if !c.parked.is_empty() {
            let done = c.done_ticket;
            let (mut now_ready, waiting): (Vec<Parked>, Vec<Parked>) =
                c.parked.drain(..).partition(|p| p.ticket <= done);
            now_ready.sort_unstable_by_key(|p| p.ticket);
            c.ready.extend(now_ready);
            c.parked = waiting;
        }
        let relay = !c.pending.is_empty() && c.ready.len() > RELAY_MIN_READY;
        let go = match relay {
            false => c.ready.len(),
            true => c.unrelayed.min(1).min(c.ready.len()),
        };
        c.unrelayed = 0;
        for p in c.ready.drain(..go).collect::<Vec<_>>() {
            p.wake();
        }
        self.note_waiting(c);
    }

    /// Relay mode: publish how many writers wait (for `relay_one`'s check without the lock).
    fn note_waiting(&self, c: &Commit) {
        let n = c.parked.len() + c.ready.len();
        self.waiting.store(n, Ordering::Relaxed);
    }

    // ----- group commit driven by an event loop ----------------------------------------

    /// Queue ops for writing without waiting; returns their ticket. With
    /// durability="sync" the caller then either drives the write itself
    /// ([`Store::lead_async`], its own I/O, [`Store::finish_async`]) or blocks in
    /// [`Store::wait_ticket`]; with the other durabilities the ops are written (buffered)
    /// before this returns, and the ticket is 0.
    pub fn enqueue(&self, ops: &[(&[u8], Option<&[u8]>)], atomic: bool) -> io::Result<u64> {
        self.writable("writing")?;
        if ops.is_empty() {
            return Ok(0);
        }
        let packed = self.pack(ops);
        if self.opts.durability != Durability::Sync {
            self.write_buffered(ops, &packed, atomic && ops.len() > 1)?;
            return Ok(0);
        }
        // (numbered under the lock that orders the log: see Store::commit)
        let mut c = self.commit.lock().expect("commit");
        let mut p = self.encode(ops, &packed, atomic && ops.len() > 1)?;
        c.next_ticket += 1;
        let ticket = c.next_ticket;
        p.ticket = ticket;
        c.pending.push(p);
        c.asking.insert(ticket); // (told by Store::collect)
        Ok(ticket)
    }

    /// Block until `ticket` is durable (leading a group commit if nobody is).
    pub fn wait_ticket(&self, ticket: u64) -> io::Result<()> {
        let c = self.commit.lock().expect("commit");
        self.wait_locked(c, ticket, false)
    }

    /// How each write queued with [`Store::enqueue`] as `tickets` went, once they are
    /// done (after [`Store::wait_ticket`] of the last, or [`Store::finish_async`]):
    /// `Some(Ok(()))` written, `Some(Err(..))` failed, None not done yet. Every ticket
    /// given is asked about for the last time (one not done yet is given up on: its
    /// writer is told the flush failed, and asks no more). The writes of one event
    /// loop may land in several groups — a thread's leader takes what is queued when
    /// it leads — so each is told its own group's outcome.
    pub fn collect(&self, tickets: &[u64]) -> Vec<Option<io::Result<()>>> {
        let mut c = self.commit.lock().expect("commit");
        let out = tickets
            .iter()
            .map(|&t| (c.done_ticket >= t).then(|| Self::failure_of(&c, t).map_or(Ok(()), Err)))
            .collect::<Vec<_>>();
        for t in tickets {
            c.asking.remove(t);
        }
        out
    }

    /// The error of the failed group `ticket` was in, if it failed.
    fn failure_of(c: &Commit, ticket: u64) -> Option<io::Error> {
        c.failed
            .iter()
            .find(|(a, b, _)| *a <= ticket && ticket <= *b)
            .map(|(_, _, e)| reword(e, e.to_string()))
    }

    /// Become the group-commit leader for everything queued, if nobody leads: returns
    /// where the caller must write `data` (then fdatasync `fd`) before calling
    /// [`Store::finish_async`]. `None`: nothing queued, a thread is leading (its group
    /// includes what was queued), or the store appends with O_DIRECT:
    /// [`Store::wait_ticket`] then waits for (or writes) the group.
    pub fn lead_async(&self) -> io::Result<Option<Lead>> {
        let mut c = self.commit.lock().expect("commit");
        if c.leader || c.pending.is_empty() {
            return Ok(None);
        }
        let group = std::mem::take(&mut c.pending);
        let first = group.first().map(|g| g.ticket).unwrap_or(0);
        let last = group.last().map(|g| g.ticket).unwrap_or(0);
        let total: u64 = group.iter().map(|g| g.bytes.len() as u64).sum();
        let mut off = c.write_off;
        let (mut seg_id, mut seg) = {
            let st = self.state.read().expect("state");
            (st.active, st.segs[&st.active].clone())
        };
        let mut app = c.appender.take().expect("appender");
        if off > 0 && off + total > self.opts.segment_size {
            match self.roll(&mut app, off) {
                Ok((id, s, start)) => {
                    (seg_id, seg, off) = (id, s, start);
                    c.write_off = start;
                }
                Err(e) => {
                    c.appender = Some(app);
                    Self::record_failure(&mut c, first, last, &e);
                    self.settle(&mut c, last);
                    return Err(e);
                }
            }
        }
        // the zero pre-fill (rare: every 4 MiB) is written here; the group's own write
        // and fdatasync are the caller's
        app.prefill_to(off + total);
        let mut data = Vec::with_capacity(total as usize);
        for g in &group {
            data.extend_from_slice(&g.bytes);
        }
        // O_DIRECT: the caller writes the zero-padded block image to the direct fd
        let image = match app.direct_fd() {
            Some(dfd) => match app.direct_image(&data, off) {
                Ok((start, img)) => Some((dfd, start, img)),
                Err(e) => {
                    c.appender = Some(app);
                    Self::record_failure(&mut c, first, last, &e);
                    self.settle(&mut c, last);
                    return Err(e);
                }
            },
            None => None,
        };
        c.appender = Some(app);
        c.leader = true;
        let lead = match image {
            Some((dfd, start, img)) => Lead {
                fd: dfd,
                off: start,
                len: img.len() as u64,
                data: Vec::new(),
                image: Some(img),
                last_ticket: last,
            },
            None => Lead {
                fd: seg.fd,
                off,
                len: total,
                data: Vec::new(),
                image: None,
                last_ticket: last,
            },
        };
        let lead = if lead.image.is_none() {
            Lead { data, ..lead }
        } else {
            c.inflight_data = data; // kept for the mirror and the next partial block
            lead
        };
        c.inflight = Some(Inflight {
            group,
            seg_id,
            seg,
            off,
            write_len: lead.len,
        });
        Ok(Some(lead))
    }

    /// The leader's write and fdatasync completed with these results (bytes written or
    /// -errno; 0 or -errno): index the group and release its waiters, or report the
    /// failure to all of them (the segment is cut back to where the group began).
    pub fn finish_async(&self, wrote: i64, synced: i32) -> io::Result<()> {
        let mut c = self.commit.lock().expect("commit");
        let inf = c.inflight.take().expect("finish_async without lead_async");
        let total: u64 = inf.group.iter().map(|g| g.bytes.len() as u64).sum();
        let direct_data = std::mem::take(&mut c.inflight_data);
        let short_direct = self.opts.direct && wrote >= 0 && (wrote as u64) < inf.write_len;
        let mut res = if wrote < 0 {
            Err(io::Error::from_raw_os_error(-wrote as i32))
        } else if synced < 0 && wrote as u64 >= inf.write_len {
            Err(io::Error::from_raw_os_error(-synced))
        } else {
            Ok(())
        };
        if self.opts.direct {
            let app = c.appender.as_mut().expect("appender");
            app.direct_finished(&direct_data, inf.off, res.is_ok() && !short_direct);
            if short_direct {
                // The disk filled up part of the way (its linked fdatasync was
                // cancelled): write the group again here, where a short write is
                // resubmitted for the rest — it lands, or fails saying why (ENOSPC).
                res = app.append(&direct_data, inf.off, true);
            }
        } else if res.is_ok() && (wrote as u64) < total {
            // a short write (its linked fdatasync was cancelled): finish it here
            let mut rest = Vec::new();
            for g in &inf.group {
                rest.extend_from_slice(&g.bytes);
            }
            let app = c.appender.as_mut().expect("appender");
            res = app.append(&rest[wrote as usize..], inf.off + wrote as u64, true);
        }
        let first = inf.group.first().map(|g| g.ticket).unwrap_or(0);
        let last = inf.group.last().map(|g| g.ticket).unwrap_or(0);
        match &res {
            Ok(()) => {
                let mut st = self.state.write().expect("state");
                let mut base = inf.off;
                for g in &inf.group {
                    Self::index_updates(&mut st, inf.seg_id, base, g);
                    base += g.bytes.len() as u64;
                }
                Self::settle_overlay(&mut st, base);
                inf.seg.size.store(inf.off + total, Ordering::Relaxed);
                drop(st);
                c.write_off = inf.off + total;
                self.flushed.store(c.write_off, Ordering::Release);
                self.note_synced(inf.seg_id, c.write_off);
                c.unsynced = 0;
                c.last_sync = Instant::now();
                self.group_commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                // SAFETY: the segment's fd is open for writing.
                unsafe { libc::ftruncate(inf.seg.fd, inf.off as i64) };
                Self::record_failure(&mut c, first, last, e);
            }
        }
        self.settle(&mut c, last);
        res
    }

    /// Tickets `first..=last` failed with `e`: their writers get the error. Failures
    /// no writer still asks about go.
    fn record_failure(c: &mut Commit, first: u64, last: u64, e: &io::Error) {
        let msg = format!("write failed: {}", plain(e));
        c.failed.push((first, last, reword(e, msg)));
        let Commit { failed, asking, .. } = c;
        failed.retain(|(a, b, _)| asking.range(*a..=*b).next().is_some());
    }

    /// A group is done (written or failed) up to ticket `last`: release the writer role
    /// and wake everyone waiting for their ticket.
    fn settle(&self, c: &mut Commit, last: u64) {
        c.done_ticket = c.done_ticket.max(last);
        c.leader = false;
        self.commit_cv.notify_all();
        // (relay mode: done writers wait for their release; one that still waits leads
        // whatever was queued meanwhile)
        self.ready_parked(c);
        if !c.pending.is_empty() {
            self.hand_lead(c);
        }
    }

    /// Relay mode ([`Options::relay`]): call it when about to wait in the store, having
    /// let the process-wide lock (Python's GIL) go. Writers whose group commit is done
    /// are released one at a time, oldest first, each taking the lock its releaser let
    /// go — instead of every writer of a group waking at once and all but one going back
    /// to sleep on the lock: one wake-up per write instead of two.
    ///
    /// And the wake-up is taken off the critical path: the writer that goes next is
    /// woken ahead (*primed*) and waits awake (spinning, yielding its CPU to other
    /// threads) until the writer now running lets the lock go on its own way in — the
    /// primed writer then takes it at once, while the one that let it go primes the next.
    /// Without priming, every hand-off waited a whole wake-up of a sleeping thread
    /// (~5 µs on a VM) with the lock free and nobody running. A primed writer that
    /// nobody relieves within `PRIME_PATIENCE` goes anyway; a parked writer nobody
    /// releases goes on its own after `RELAY_PATIENCE`.
    pub fn relay_one(&self) {
        let turn = self.turns.fetch_add(1, Ordering::AcqRel) + 1;
        // a primed writer (waiting for a turn before this one) now takes the lock
        let primed = self.primed.swap(0, Ordering::AcqRel) != 0;
        if primed {
            self.primed_handoffs.fetch_add(1, Ordering::Relaxed);
        }
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut c = self.commit.lock().expect("commit");
        let now = if primed { None } else { c.ready.pop_front() };
        if !primed && now.is_none() && !c.parked.is_empty() {
            c.unrelayed += 1; // (see Commit::unrelayed)
        }
        let next = c.ready.pop_front();
        if next.is_some() {
            self.primed.store(turn + 1, Ordering::Release);
        }
        self.note_waiting(&c);
        drop(c);
        if let Some(p) = now {
            p.wake();
        }
        if let Some(p) = next {
            p.prime(turn);
        }
    }

    /// Relay mode: release every writer whose group is done (when the store is being
    /// closed, nobody should wait for a turn).
    pub fn relay_all(&self) {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut c = self.commit.lock().expect("commit");
        let ready: Vec<Parked> = c.ready.drain(..).collect();
        self.note_waiting(&c);
        drop(c);
        for p in ready {
            p.wake();
        }
    }

    /// With a live overlay file: say that the index now matches the active segment up to
    /// `off` (every record indexed is in the file, and no record there is left out).
    fn settle_overlay(st: &mut State, off: u64) {
        let State {
            index,
            segs,
            active,
            seq,
            ..
        } = st;
        let dead_of = |(id, s): (&u32, &Arc<Segment>)| (*id, s.dead.load(Ordering::Relaxed));
        index.settle((*active, off, *seq), segs.iter().map(dead_of));
    }

    /// Point the index at a pending write's records (written at `base` in segment `seg`),
    /// counting what they replace as dead.
    fn index_updates(st: &mut State, seg: u32, base: u64, p: &Pending) {
        Self::index_records(st, (seg, base), &p.bytes, &p.updates);
    }

    /// Point the index at encoded records `bytes` (with their `updates`), written at
    /// `base` in segment `seg`, counting what they replace as dead.
    fn index_records(st: &mut State, (seg, base): (u32, u64), bytes: &[u8], updates: &[Update]) {
        // Hash every key first, then apply them warming the table a few keys ahead: a
        // batch's random table accesses overlap instead of waiting one by one.
        const AHEAD: usize = 8;
        let key = |u: &Update| {
            let ks = u.3 as usize + HEADER;
            &bytes[ks..ks + u.0 as usize]
        };
        if let Some((dir, ident)) = st.overlay_due.take() {
            // best effort: without it, a killed writer's successor replays from INDEX
            let (keys, base) = (st.index.len(), st.index.base_len());
            let lay = overlay::Layout::for_snapshot(keys, base as usize);
            if let Ok(sh) = overlay::Shared::create(&dir, ident, base, lay) {
                if !st.index.attach(sh) {
                    overlay::remove(&dir);
                }
            }
        }
        let puts = updates.iter().filter(|u| u.1 != Kind::Delete).count();
        st.index.reserve(puts, 0); // no rehash mid-batch: warmed addresses stay valid
        let hashes: Vec<u64> = updates.iter().map(|u| st.index.hash(key(u))).collect();
        let mut tombs = 0u64;
        for (j, u) in updates.iter().enumerate() {
            if let Some(&ha) = hashes.get(j + AHEAD) {
                st.index.warm(ha);
            }
            let (k, (_, kind, vl, at)) = (key(u), u);
            let loc = Loc {
                seg,
                val_len: *vl,
                off: base + at,
            };
            let old = if *kind == Kind::Delete {
                st.index.remove_hashed(k, hashes[j])
            } else {
                match st.index.put_hashed(k, hashes[j], loc, None) {
                    Put::Replaced(o) => Some(o),
                    _ => None,
                }
            };
            if !st.views.is_empty() {
                Self::note_views(st, k, old);
            }
            if let Some(o) = old {
                let dead = (HEADER + k.len() + o.val_len as usize) as u64;
                if let Some(s) = st.segs.get(&o.seg) {
                    s.dead.fetch_add(dead, Ordering::Relaxed);
                }
            }
            if *kind == Kind::Delete {
                tombs += (HEADER + k.len()) as u64;
            }
        }
        if tombs > 0 {
            if let Some(s) = st.segs.get(&seg) {
                s.tombs.fetch_add(tombs, Ordering::Relaxed);
            }
        }
    }

    /// durability "none"/"batch": apply ops only if that cannot block — they go through
    /// the active segment's writable mapping into file space already allocated (no
    /// system call), no sync or segment roll is due, and nobody holds the writer lock.
    /// Returns false (nothing done) otherwise: the caller then takes the normal path
    /// (for Python: with the GIL released). Lets many threads put without a GIL hand-off
    /// per put, and an event loop put without leaving its thread.
    pub fn write_nonblocking(
        &self,
        ops: &[(&[u8], Option<&[u8]>)],
        atomic: bool,
    ) -> io::Result<bool> {
        self.writable("writing")?;
        if self.opts.durability == Durability::Sync || ops.is_empty() {
            return Ok(false);
        }
        let len = Self::encoded_len(ops);
        if self.opts.compression != Compression::None && len > 64 << 10 {
            // (compressing that much is worth releasing the GIL for: the normal path)
            return Ok(false);
        }
        let Ok(mut c) = self.commit.try_lock() else {
            return Ok(false);
        };
        let end = c.write_off + c.wbuf.len() as u64;
        let due = match self.opts.durability {
            Durability::Batch { ms, bytes } => {
                c.last_sync.elapsed() >= Duration::from_millis(ms)
                    || c.unsynced + (c.wbuf.len() + len) as u64 >= bytes
            }
            _ => false,
        };
        // Only a store into allocated, mapped file space cannot block (beyond a page
        // fault): a pwrite, a fallocate or a sync goes the normal way.
        let mapped_room = c
            .appender
            .as_ref()
            .is_some_and(|a| a.stores_inline(end, len));
        if c.leader
            || due
            || !mapped_room
            || end + len as u64 > self.opts.segment_size
            || self.overlay_pending.load(Ordering::Relaxed)
        {
            return Ok(false);
        }
        // (compressed under the lock here: the caller holds the GIL, so no other
        // Python thread would have compressed meanwhile anyway)
        let packed = self.pack(ops);
        let staged = self.stage_locked(&mut c, ops, &packed, atomic && ops.len() > 1)?;
        self.flush_staged(&mut c, false, Some(staged))?;
        Ok(true)
    }

    /// Encode ops straight into the write buffer (at the file offsets where it will be
    /// written); [`Store::flush_staged`] indexes them once the kernel has them.
    fn stage_locked(
        &self,
        c: &mut Commit,
        ops: &[(&[u8], Option<&[u8]>)],
        packed: &Packed,
        atomic: bool,
    ) -> io::Result<Staged> {
        let from = c.wbuf.len();
        let base = c.write_off + from as u64;
        let (_, updates) = self.encode_into(&mut c.wbuf, ops, packed, atomic)?;
        Ok(Staged {
            from,
            base,
            updates,
        })
    }

    /// durability "none"/"batch": records are encoded into the write buffer, handed to
    /// the kernel (through the segment's mapping, or with pwrite), then indexed, before
    /// this returns; an fdatasync follows when one is due.
    fn write_buffered(
        &self,
        ops: &[(&[u8], Option<&[u8]>)],
        packed: &Packed,
        atomic: bool,
    ) -> io::Result<()> {
        let mut c = self.idle_commit();
        let end = c.write_off + c.wbuf.len() as u64;
        // (with the COMMIT record counted whether or not it is written: a segment may
        // roll 32 bytes early, never late)
        if end > 0 && end + Self::encoded_len(ops) as u64 > self.opts.segment_size {
            self.flush_locked(&mut c, false)?;
            let seal_at = c.write_off;
            let mut app = c.appender.take().expect("appender");
            let r = self.roll(&mut app, seal_at);
            c.appender = Some(app);
            let (.., start) = r?;
            c.write_off = start;
            self.flushed.store(start, Ordering::Release);
        }
        let staged = self.stage_locked(&mut c, ops, packed, atomic)?;
        let due = match self.opts.durability {
            Durability::Batch { ms, bytes } => {
                c.last_sync.elapsed() >= Duration::from_millis(ms)
                    || c.unsynced + c.wbuf.len() as u64 >= bytes
            }
            _ => false,
        };
        // Every write goes to the kernel before it returns (into the page cache through
        // the segment's mapping, or with pwrite): a process that dies loses nothing it
        // was told is written — LevelDB's and RocksDB's promise for unsynced writes.
        self.flush_staged(&mut c, due, Some(staged))
    }

    /// Hand the write buffer to the kernel (and fdatasync if `sync`).
    fn flush_locked(&self, c: &mut Commit, sync: bool) -> io::Result<()> {
        self.flush_staged(c, sync, None)
    }

    /// [`Store::flush_locked`], then index `staged` (records in the buffer). The index
    /// changes only once the records are in the file: a process killed in between left
    /// an index that matches the log (a live overlay stays usable), and a failed write
    /// has nothing to take back — the file is cut back to where it began.
    fn flush_staged(&self, c: &mut Commit, sync: bool, staged: Option<Staged>) -> io::Result<()> {
        if sync {
            self.sync_sealed()?;
        }
        if c.wbuf.is_empty() {
            if sync {
                if let Some(a) = c.appender.as_mut() {
                    a.sync()?;
                }
                let active = self.state.read().expect("state").active;
                self.note_synced(active, c.write_off);
                c.unsynced = 0;
                c.last_sync = Instant::now();
            }
            return Ok(());
        }
        let off = c.write_off;
        let data = std::mem::take(&mut c.wbuf);
        let app = c.appender.as_mut().expect("appender");
        match app.append(&data, off, sync) {
            Ok(()) => {
                c.write_off += data.len() as u64;
                self.flushed.store(c.write_off, Ordering::Release);
                {
                    let mut st = self.state.write().expect("state");
                    st.segs[&st.active]
                        .size
                        .store(c.write_off, Ordering::Relaxed);
                    if let Some(s) = &staged {
                        // (index_records creates the OVERLAY file if it is due)
                        self.overlay_pending.store(false, Ordering::Relaxed);
                        let at = (st.active, s.base);
                        Self::index_records(&mut st, at, &data[s.from..], &s.updates);
                    }
                    Self::settle_overlay(&mut st, c.write_off);
                    if sync {
                        self.note_synced(st.active, c.write_off);
                    }
                }
                if sync {
                    c.unsynced = 0;
                    c.last_sync = Instant::now();
                } else {
                    c.unsynced += data.len() as u64;
                }
                // (the buffer is kept for the next records: no 1 MiB allocation per flush)
                let mut data = data;
                data.clear();
                c.wbuf = data;
                Ok(())
            }
            Err(e) => {
                let st = self.state.read().expect("state");
                let fd = st.segs[&st.active].fd;
                drop(st);
                // SAFETY: fd is the active segment, open for writing.
                unsafe { libc::ftruncate(fd, off as i64) };
                app.truncated(off);
                // (nothing was indexed: the buffer's records are simply dropped)
                let mut data = data;
                data.clear();
                c.wbuf = data;
                let hint = if e.raw_os_error() == Some(libc::ENOSPC) {
                    " (the disk is full; this write was not stored, the store is still readable)"
                } else {
                    ""
                };
                Err(reword(&e, format!("{}{hint}", plain(&e))))
            }
        }
    }

    /// Write a group to the active segment at `*off` (rolling it when full: `*off`
    /// becomes 0, in the new segment), then index it; `*off` ends where the next group
    /// goes — after this one, or where this one began if it failed (the file cut back
    /// there).
    fn write_group(
        &self,
        group: &[Pending],
        app: &mut Appender,
        off_io: &mut u64,
        sync: bool,
    ) -> io::Result<()> {
        let mut off = *off_io;
        let total: u64 = group.iter().map(|g| g.bytes.len() as u64).sum();
        let (mut seg_id, mut seg) = {
            let st = self.state.read().expect("state");
            (st.active, st.segs[&st.active].clone())
        };
        if off > 0 && off + total > self.opts.segment_size {
            let (id, s, start) = self.roll(app, off)?;
            seg_id = id;
            seg = s;
            off = start;
            *off_io = start;
        }
        let mut buf = Vec::with_capacity(total as usize);
        for g in group {
            buf.extend_from_slice(&g.bytes);
        }
        let res = if sync { self.sync_sealed() } else { Ok(()) };
        let res = res.and_then(|()| app.append(&buf, off, sync));
        if res.is_ok() && sync {
            self.note_synced(seg_id, off + total);
        }
        if let Err(e) = res {
            // Whatever part reached the file is garbage: cut it off again.
            // SAFETY: seg.fd is open for writing.
            unsafe { libc::ftruncate(seg.fd, off as i64) };
            app.truncated(off);
            let hint = if e.raw_os_error() == Some(libc::ENOSPC) {
                " (the disk is full; the store is still readable)"
            } else {
                ""
            };
            return Err(reword(&e, format!("{}{hint}", plain(&e))));
        }
        let mut st = self.state.write().expect("state");
        let mut base = off;
        for g in group {
            Self::index_updates(&mut st, seg_id, base, g);
            base += g.bytes.len() as u64;
        }
        Self::settle_overlay(&mut st, base);
        seg.size.store(off + total, Ordering::Relaxed);
        *off_io = off + total;
        Ok(())
    }

    /// Start a new active segment (the old one becomes immutable). What can fail —
    /// making the file, syncing the directory, pointing the appender at it — happens
    /// before the store switches to it: an error leaves the old segment active (sealed:
    /// its zero tail cut, which the appender allocates again), so the caller's offset
    /// in it stays right, and no new file behind.
    ///
    /// A sealed segment with bytes never synced is synced here (durability "batch":
    /// at most its batch of bytes; "sync": none, normally) — or, with "none", by the
    /// next sync of any kind ([`Store::sync_sealed`]). Until session 32 nothing synced
    /// it: a `sync()` (or batch's periodic one) made only the new active segment
    /// durable, and a crash of the machine lost what the sealed one's tail held.
    ///
    /// Returns the new segment, and the offset its records start at: after its seal
    /// record ([`record::encode_seal`]), which recovery checks the old one against.
    fn roll(&self, app: &mut Appender, seal_at: u64) -> io::Result<(u32, Arc<Segment>, u64)> {
        app.seal(seal_at);
        let old = self.state.read().expect("state").active;
        if seal_at > 0 && self.durable.load(Ordering::Acquire) < record::mark(old, seal_at) {
            if self.opts.durability == Durability::None {
                let mut later = self.sealed_unsynced.lock().expect("sealed_unsynced");
                if !later.contains(&old) {
                    later.push(old);
                }
            } else {
                app.sync()?;
                self.note_synced(old, seal_at);
            }
        }
        let id = {
            let mut st = self.state.write().expect("state");
            st.next_id += 1;
            st.next_id - 1
        };
        let path = self.dir.join(seg_name(id));
        let fd = open_fd(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL)?;
        if let Err(e) = fsync_dir(&self.dir).and_then(|()| app.set_fd(fd)) {
            // SAFETY: fd was opened above and is used by nothing else (set_fd changes
            // nothing when it fails).
            unsafe { libc::close(fd) };
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let mut st = self.state.write().expect("state");
        let seg = if self.opts.direct {
            // The sealed segment's mirror goes (when its last reader lets go): from now
            // on it is read through a plain file mapping — nothing writes it any more.
            let old_id = st.active;
            if let Some(old) = st.segs.get(&old_id).cloned() {
                if old.mirror {
                    // SAFETY: dup of an fd we own; the copy is owned by the new Segment.
                    let fd2 = unsafe { libc::fcntl(old.fd, libc::F_DUPFD_CLOEXEC, 0) };
                    if fd2 >= 0 {
                        let size = old.size.load(Ordering::Relaxed);
                        let dead = old.dead.load(Ordering::Relaxed);
                        let sealed = Segment::new(fd2, size, dead, Some(0));
                        let v = old.verified.load(Ordering::Relaxed);
                        sealed.verified.store(v, Ordering::Relaxed);
                        st.segs.insert(old_id, sealed);
                    }
                }
            }
            Segment::mirrored(fd, 0, 0, self.opts.segment_size)
        } else {
            Segment::active(fd, 0, 0, self.opts.segment_size, self.active_kind)
        };
        st.segs.insert(id, seg.clone());
        st.active = id;
        drop(st);
        if self.active_kind != ActiveKind::Plain {
            app.set_active(Some(seg.clone()));
        }
        // The new segment starts with its seal record: how long the old one was. A
        // write that fails here (a full disk) leaves the segment without one — recovery
        // then knows less, as for a store written before session 33 — and the caller's
        // own write meets the same error.
        let mut rec = Vec::with_capacity(record::SEAL_LEN);
        record::encode_seal(&mut rec, old, seal_at, self.durable.load(Ordering::Acquire));
        let start = match app.write_head(&rec) {
            Ok(()) => {
                seg.dead.fetch_add(rec.len() as u64, Ordering::Relaxed);
                seg.size.store(rec.len() as u64, Ordering::Relaxed);
                rec.len() as u64
            }
            Err(_) => {
                // SAFETY: fd is the new segment's, open for writing.
                unsafe { libc::ftruncate(fd, 0) };
                app.truncated(0);
                0
            }
        };
        self.maybe_auto_compact();
        Ok((id, seg, start))
    }

    /// An error for `what` (a write) on a store opened read-only.
    fn writable(&self, what: &str) -> io::Result<()> {
        self.same_process()?;
        match self.opts.read_only {
            true => Err(err(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{}: {what} needs the writer's open — this one is read_only=True",
                    self.dir.display()
                ),
            )),
            false => Ok(()),
        }
    }

    /// This process is a fork of the one that opened the store.
    pub fn forked(&self) -> bool {
        fork::generation() != self.born
    }

    /// An error in a forked child: the store belongs to the process that opened it.
    pub fn same_process(&self) -> io::Result<()> {
        if !self.forked() {
            return Ok(());
        }
        Err(err(
            io::ErrorKind::Other,
            format!(
                "{}: this store was opened by process {} and this process is a fork of it; \
                 a store serves only the process that opened it (used from both, they would \
                 overwrite each other's records) — open the store again in this process, \
                 with read_only=True while the parent keeps writing",
                self.dir.display(),
                self.opener
            ),
        ))
    }

    /// durability="none": fdatasync the sealed segments [`Store::roll`] left unsynced
    /// (those a compaction removed meanwhile are gone: its outputs were synced).
    fn sync_sealed(&self) -> io::Result<()> {
        let mut later = self.sealed_unsynced.lock().expect("sealed_unsynced");
        while let Some(&id) = later.last() {
            let seg = self.state.read().expect("state").segs.get(&id).cloned();
            if let Some(seg) = seg {
                // SAFETY: the Segment (held above) owns its fd, open until it drops.
                if unsafe { libc::fdatasync(seg.fd) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            later.pop();
        }
        Ok(())
    }

    /// Segment `seg` is fdatasynced up to `end`: records encoded from now on say so.
    fn note_synced(&self, seg: u32, end: u64) {
        self.durable
            .fetch_max(record::mark(seg, end), Ordering::AcqRel);
    }

    /// Make everything written so far durable (for durability="none"/"batch").
    pub fn sync(&self) -> io::Result<()> {
        self.writable("sync()")?;
        self.flushed_commit(true).map(drop)
    }

    /// durability="batch": a thread that makes the store durable every `ms` even when no
    /// write comes along to do it, so the loss window after a crash is bounded by time,
    /// not by the next write. It holds only a weak reference: it ends with the store.
    /// Start what a store shared by threads does by itself: the periodic fdatasync of
    /// `durability="batch"` and compactions in the background ([`Options::auto_compact`]).
    pub fn start_background(store: &Arc<Store>) {
        let _ = store.me.set(Arc::downgrade(store));
        Self::start_flusher(store);
    }

    pub fn start_flusher(store: &Arc<Store>) {
        let Durability::Batch { ms, .. } = store.opts.durability else {
            return;
        };
        let weak = Arc::downgrade(store);
        let period = Duration::from_millis(ms.max(1));
        let _ = std::thread::Builder::new()
            .name("xkv-flusher".into())
            .spawn(move || loop {
                std::thread::sleep(period);
                let Some(s) = weak.upgrade() else { return };
                s.sync_if_due(period);
            });
    }

    /// Sync if something is unsynced and the last sync is at least `period` old.
    fn sync_if_due(&self, period: Duration) {
        let Ok(mut c) = self.commit.try_lock() else {
            return; // a writer is busy: it checks the deadline itself
        };
        if c.leader || (c.unsynced == 0 && c.wbuf.is_empty()) {
            return;
        }
        if c.last_sync.elapsed() >= period {
            // a failure here is reported to the next writer or sync() as well
            let _ = self.flush_locked(&mut c, true);
        }
    }

    /// Make buffered records readable from the file (not necessarily durable).
    fn flush(&self) -> io::Result<()> {
        self.flushed_commit(false).map(drop)
    }

    /// The commit lock, once no group leader is writing (its write and fdatasync run
    /// with the lock released).
    fn idle_commit(&self) -> std::sync::MutexGuard<'_, Commit> {
        let mut c = self.commit.lock().expect("commit");
        while c.leader {
            c = self.commit_cv.wait(c).expect("commit wait");
        }
        c
    }

    /// [`Store::idle_commit`] with everything buffered handed to the kernel (and
    /// fdatasynced with `sync`): `write_off` is then where the active segment's records
    /// end, each of them indexed.
    fn flushed_commit(&self, sync: bool) -> io::Result<std::sync::MutexGuard<'_, Commit>> {
        let mut c = self.idle_commit();
        self.flush_locked(&mut c, sync)?;
        Ok(c)
    }

    /// Readers call this before reading a record that may still be in the write buffer.
    fn ensure_flushed(&self, loc: Loc, active: u32, klen: usize) -> io::Result<()> {
        if loc.seg == active
            && loc.off + (HEADER + klen) as u64 + loc.val_len as u64
                > self.flushed.load(Ordering::Acquire)
        {
            self.flush()?;
        }
        Ok(())
    }

    // ----- reads -----------------------------------------------------------------------

    /// The value of `key`'s record at `loc`, after checking the whole record's CRC and
    /// that it holds `key` (RocksDB's verify_checksums on every read: a damaged or
    /// misdirected record is an error, never served).
    fn read_value(&self, seg: &Segment, loc: Loc, key: &[u8]) -> io::Result<Vec<u8>> {
        self.read_value_with(seg, loc, key, <[u8]>::to_vec)
    }

    /// [`Store::read_value`], handing the value to `f` where it lies (the mapping, or a
    /// buffer read with pread): one copy fewer when `f` makes the caller's own object.
    fn read_value_with<R>(
        &self,
        seg: &Segment,
        loc: Loc,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let total = HEADER + key.len() + loc.val_len as usize;
        if let Some(rec) = seg.mapped(loc.off, total) {
            Self::verify(seg, rec, loc, key)?;
            return self.with_value(rec, loc, key, f);
        }
        let mut v = vec![0u8; total];
        let n = pread_exact(seg.fd, &mut v, loc.off)?;
        if n != v.len() {
            return Err(err(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "segment {} truncated under a live record at offset {}",
                    seg_name(loc.seg),
                    loc.off
                ),
            ));
        }
        Self::verify(seg, &v, loc, key)?;
        self.with_value(&v, loc, key, f)
    }

    /// `f` of the value record `rec` (checked) holds: its bytes where they lie, or —
    /// stored compressed — decompressed.
    fn with_value<R>(
        &self,
        rec: &[u8],
        loc: Loc,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let stored = &rec[HEADER + key.len()..];
        if rec[8] & FLAG_COMPRESSED == 0 {
            return Ok(f(stored));
        }
        let v = self.unpack(rec[8], stored).map_err(|why| {
            err(
                io::ErrorKind::InvalidData,
                format!("{} offset {}: {why}", seg_name(loc.seg), loc.off),
            )
        })?;
        Ok(f(&v))
    }

    /// The value a record with the compression flag(s) `flags` stores as `stored`.
    fn unpack(&self, flags: u8, stored: &[u8]) -> Result<Vec<u8>, String> {
        match flags & FLAG_ZSTD {
            0 => record::decompress(stored),
            _ => self.zstd.decompress(stored),
        }
    }

    fn verify(seg: &Segment, rec: &[u8], loc: Loc, key: &[u8]) -> io::Result<()> {
        let holds_key = rec.get(HEADER..HEADER + key.len()) == Some(key);
        if holds_key && seg.crc_known_good(loc.off) {
            return Ok(());
        }
        if holds_key && record::check(rec).is_ok() {
            seg.mark_crc_good(loc.off);
            return Ok(());
        }
        Err(err(
            io::ErrorKind::InvalidData,
            format!(
                "{}: the record at offset {} fails its CRC (the file is damaged); \
                 `uringkit kv check` lists every damaged record, and opening with \
                 repair=True rebuilds the index without them",
                seg_name(loc.seg),
                loc.off
            ),
        ))
    }

    pub fn get(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.get_with(key, false, <[u8]>::to_vec)
    }

    /// [`Store::get`] only if it cannot wait for the disk: `Err(WouldBlock)` when the
    /// record is not in memory (page cache or the direct mirror) — an event loop then
    /// reads it off the loop instead of stalling every task on a page fault.
    pub fn get_cached(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.get_with(key, true, <[u8]>::to_vec)
    }

    /// The value of `key` handed to `f` where it lies (usually the segment's mapping), so
    /// the caller copies it once, into its own object. `cached_only`: as
    /// [`Store::get_cached`].
    pub fn get_with<R>(
        &self,
        key: &[u8],
        cached_only: bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<Option<R>> {
        if cached_only && !self.index_verdict_in() {
            // Just opened on a mapped snapshot that is still being verified (and read
            // in): a lookup may fault its pages from the disk, and an absent key waits
            // for the verdict — not for an event loop to wait on.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let (loc, seg, active) = {
            let st = self.state.read().expect("state");
            match st.index.get(key) {
                None => {
                    drop(st);
                    self.index_trusted()?;
                    return Ok(None);
                }
                Some(l) => (l, st.segs[&l.seg].clone(), st.active),
            }
        };
        self.read_at(key, loc, &seg, active, cached_only, f)
    }

    /// The value of `key`'s record at `loc` in `seg` (`active`: the active segment's id
    /// when `loc` was looked up), handed to `f`: see [`Store::get_with`].
    fn read_at<R>(
        &self,
        key: &[u8],
        loc: Loc,
        seg: &Segment,
        active: u32,
        cached_only: bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<Option<R>> {
        self.ensure_flushed(loc, active, key.len())?;
        let total = HEADER + key.len() + loc.val_len as usize;
        if cached_only && !seg.resident(loc.off, total) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.read_value_with(seg, loc, key, f).map(Some)
    }

    /// Whether every present key's record is in memory (see [`Store::get_cached`]).
    pub fn all_cached(&self, keys: &[&[u8]]) -> bool {
        if !self.index_verdict_in() {
            return false; // (see get_cached)
        }
        let st = self.state.read().expect("state");
        keys.iter().all(|k| match st.index.get(k) {
            None => true,
            Some(l) => {
                let total = HEADER + k.len() + l.val_len as usize;
                st.segs[&l.seg].resident(l.off, total)
            }
        })
    }

    /// A multi_get found the store cold (a value had to come from the disk): read the
    /// segments into the page cache in the background — once per open, and only when
    /// they fit in a quarter of the memory available, so that caching them whole evicts
    /// nothing that matters. LMDB gets the same from the kernel's read-around on its
    /// mapped file (8 MiB per fault on this machine's disk); xkv's lookups read exact
    /// records (its maps are read at random: `advise_random`), so without this a cold
    /// store warms one 4 KiB page per miss. The thread reads the segments in 4 MiB at
    /// a time (`read_in`) at best-effort I/O priority 7, oldest segment first, and
    /// stops when the store closes. (Gets do not start it: reading each get's page is
    /// faster for them than waiting behind a warm-up's reads.)
    /// `Options::warm = false` turns the automatic start off; `warm_up` itself always
    /// tries. True when a warm-up runs or ran in this open; false when the segments do
    /// not fit the budget (or there is nothing to read).
    pub fn warm_up(&self) -> bool {
        if self.warm_started.swap(true, Ordering::Relaxed) {
            return self.warm_running.load(Ordering::Relaxed);
        }
        let segs: Vec<Arc<Segment>> = {
            let st = self.state.read().expect("state");
            st.segs
                .values()
                .filter(|s| !s.mirror && !s.map.is_null())
                .cloned()
                .collect()
        };
        let total: u64 = segs.iter().map(|s| s.map_len as u64).sum();
        if total == 0 || total > mem_available().unwrap_or(0) / 4 {
            return false;
        }
        let stop = self.warm_stop.clone();
        let warmed = self.warmed.clone();
        // (a failed spawn leaves the store as cold as it was: nothing else to do)
        let spawned = std::thread::Builder::new()
            .name("uringkit-warm".into())
            .spawn(move || {
                // (as the index check: the store's own reads go first, background_io)
                crate::sys::fileio::background_io();
                for s in segs {
                    // (by value: a segment compaction retired meanwhile is released as soon
                    // as it has been read, not when the whole warm-up ends)
                    // Only what the file holds now: the active segment's mapping covers
                    // its whole capacity, and a page wholly past the end of the file
                    // cannot be read. Files are never truncated while mapped.
                    // SAFETY: fstat of the segment's open fd into a zeroed stat buffer.
                    let mut st: libc::stat = unsafe { std::mem::zeroed() };
                    if unsafe { libc::fstat(s.fd, &mut st) } != 0 {
                        continue;
                    }
                    // (and only the records: the active segment of a "none"/"batch" store
                    // is allocated up to 4 MiB past them)
                    let data = s.size.load(Ordering::Relaxed) as usize;
                    let end = s.map_len.min(st.st_size.max(0) as usize).min(data);
                    let more = read_in(&s, end, |n| {
                        warmed.fetch_add(n as u64, Ordering::Relaxed);
                        !stop.load(Ordering::Relaxed)
                    });
                    if !more {
                        return;
                    }
                }
            });
        self.warm_running.store(spawned.is_ok(), Ordering::Relaxed);
        let ok = spawned.is_ok();
        if let Ok(h) = spawned {
            *self.warm_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        }
        ok
    }

    /// multi_get's trigger: a value had to come from the disk.
    fn warm_up_auto(&self) {
        if self.opts.warm && !self.warm_started.load(Ordering::Relaxed) {
            self.warm_up();
        }
    }

    /// Values for many keys (None for missing), read in one batch.
    pub fn multi_get(&self, keys: &[&[u8]]) -> io::Result<Vec<Option<Vec<u8>>>> {
        if self.opts.durability != Durability::Sync {
            self.flush()?;
        }
        let found: Vec<Option<(Loc, Arc<Segment>)>> = {
            let st = self.state.read().expect("state");
            keys.iter()
                .map(|k| st.index.get(k).map(|l| (l, st.segs[&l.seg].clone())))
                .collect()
        };
        if found.iter().any(Option::is_none) {
            self.index_trusted()?;
        }
        self.read_found(keys, found)
    }

    /// The values of the entries of a listing ([`Store::scan`]): what they held when it
    /// was taken, read as [`Store::multi_get`] reads (copies from the page cache, one
    /// batch of reads for the rest). Segments a compaction retired since are still read:
    /// the listing keeps them open.
    pub fn read_listed(&self, items: &[Listed]) -> io::Result<Vec<Vec<u8>>> {
        let keys: Vec<&[u8]> = items.iter().map(|(k, _, _)| k.as_slice()).collect();
        let found = items
            .iter()
            .map(|(_, l, s)| Some((*l, s.clone())))
            .collect();
        let vals = self.read_found(&keys, found)?;
        Ok(vals.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Read the values of `keys` found at the given places (None: no such key).
    fn read_found(
        &self,
        keys: &[&[u8]],
        found: Vec<Option<(Loc, Arc<Segment>)>>,
    ) -> io::Result<Vec<Option<Vec<u8>>>> {
        // Values in the page cache are copied from the mapping; the others are read by
        // one batch of io_uring reads, all in flight at once (RocksDB's MultiGet on
        // io_uring): a cold multi_get costs about one disk latency, not one per key.
        let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(keys.len());
        let mut cold: Vec<(usize, Loc, Arc<Segment>, u64)> = Vec::new();
        let was_cold = self.cold_hint.load(Ordering::Relaxed);
        let mut cold_seen = was_cold;
        for (i, (k, f)) in keys.iter().zip(found).enumerate() {
            match f {
                None => out.push(None),
                Some((l, s)) => {
                    let at = l.off + (HEADER + k.len()) as u64;
                    if !cold_seen {
                        // Optimistic: copy from the mapping. A copy that took long may have
                        // faulted its page in from the disk: the remaining keys are checked
                        // first (a stall of the machine costs only those checks: the store
                        // counts as cold only once a value is found not in memory).
                        let t = Instant::now();
                        out.push(Some(self.read_value(&s, l, k)?));
                        cold_seen = t.elapsed() > COLD_READ;
                    } else if s.resident(at, l.val_len as usize) {
                        out.push(Some(self.read_value(&s, l, k)?));
                    } else {
                        out.push(None);
                        cold.push((i, l, s, at));
                    }
                }
            }
        }
        // (cold: a value was not in memory — the next batches check first, and the
        // warm-up starts)
        let now_cold = !cold.is_empty();
        if now_cold {
            self.warm_up_auto();
        }
        if now_cold != was_cold {
            self.cold_hint.store(now_cold, Ordering::Relaxed);
        }
        if !cold.is_empty() {
            self.read_batch(&mut out, &cold, keys)?;
        }
        Ok(out)
    }

    fn read_batch(
        &self,
        out: &mut [Option<Vec<u8>>],
        cold: &[(usize, Loc, Arc<Segment>, u64)],
        keys: &[&[u8]],
    ) -> io::Result<()> {
        // whole records: the CRC is checked before a value is returned
        let mut bufs: Vec<Vec<u8>> = cold
            .iter()
            .map(|c| vec![0u8; HEADER + keys[c.0].len() + c.1.val_len as usize])
            .collect();
        let mut done = vec![false; cold.len()];
        let mut guard = self.reader.lock().expect("reader");
        if guard.is_none() && self.opts.use_uring {
            *guard = io_uring::IoUring::new(256).ok();
            if let Some(r) = guard.as_ref() {
                // Buffered reads of uncached data run on io-wq workers, by default at most
                // one per CPU: allow enough of them to keep a whole batch in flight.
                let mut max = [128u32, 128u32];
                let _ = r.submitter().register_iowq_max_workers(&mut max);
            }
        }
        if let Some(ring) = guard.as_mut() {
            for chunk in (0..cold.len()).collect::<Vec<_>>().chunks(128) {
                for &j in chunk {
                    let (_, l, seg, _) = &cold[j];
                    let e = io_uring::opcode::Read::new(
                        io_uring::types::Fd(seg.fd),
                        bufs[j].as_mut_ptr(),
                        bufs[j].len() as u32,
                    )
                    .offset(l.off)
                    .build()
                    .user_data(j as u64);
                    // SAFETY: bufs[j] is not touched (or moved) until every completion of
                    // this chunk has been reaped below; seg (and its fd) is kept alive by
                    // the Arc in `cold`.
                    unsafe { ring.submission().push(&e) }.map_err(io::Error::other)?;
                }
                ring.submit_and_wait(chunk.len())?;
                let mut seen = 0;
                while seen < chunk.len() {
                    let got: Vec<(u64, i32)> = ring
                        .completion()
                        .map(|c| (c.user_data(), c.result()))
                        .collect();
                    if got.is_empty() {
                        ring.submit_and_wait(1)?;
                        continue;
                    }
                    for (j, res) in got {
                        seen += 1;
                        let j = j as usize;
                        done[j] = res >= 0 && res as usize == bufs[j].len();
                    }
                }
            }
        }
        drop(guard);
        for (j, (i, l, seg, _)) in cold.iter().enumerate() {
            let key = keys[*i];
            out[*i] = Some(if done[j] {
                let mut v = std::mem::take(&mut bufs[j]);
                Self::verify(seg, &v, *l, key)?;
                if v[8] & FLAG_COMPRESSED != 0 {
                    self.with_value(&v, *l, key, <[u8]>::to_vec)?
                } else {
                    v.drain(..HEADER + key.len());
                    v
                }
            } else {
                // no ring here, or a short read: the plain way
                self.read_value(seg, *l, key)?
            });
        }
        Ok(())
    }

    pub fn contains(&self, key: &[u8]) -> io::Result<bool> {
        let found = self.state.read().expect("state").index.get(key).is_some();
        if !found {
            self.index_trusted()?;
        }
        Ok(found)
    }

    /// Whether [`Store::index_trusted`] would answer without waiting.
    pub fn index_verdict_in(&self) -> bool {
        self.index_check.as_ref().is_none_or(|c| c.is_done())
    }

    /// Ok once the mapped index snapshot this store opened with has been verified (at
    /// once when it was small or already checked; otherwise this waits for the thread
    /// verifying it, 10–20 ms for a million keys); an error naming the damage if it is
    /// not intact — it has then been removed, and reopening rebuilds the index.
    pub fn index_trusted(&self) -> io::Result<()> {
        let Some(c) = &self.index_check else {
            return Ok(());
        };
        c.wait().map_err(|why| {
            err(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the index snapshot (INDEX) this store was opened with is damaged: \
                     {why}. It has been removed; close and reopen the store to rebuild the \
                     index from the segments (no data is lost: the records are intact)",
                    self.dir.display()
                ),
            )
        })
    }

    pub fn len(&self) -> usize {
        self.state.read().expect("state").index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the keys.
    pub fn keys(&self) -> io::Result<Vec<Vec<u8>>> {
        self.index_trusted()?;
        let st = self.state.read().expect("state");
        Ok(st.index.iter().map(|(k, _)| k.to_vec()).collect())
    }

    /// The keys starting with `prefix` in [start, stop), sorted, with where their records
    /// are and the segments holding them: a snapshot whose values
    /// [`Store::read_listed`] reads later as they were now. A bounded scan (a prefix, a
    /// start or a stop) walks the keys in order from its first one ([`super::order`]);
    /// an unbounded one does too once a bounded one has sorted them, and otherwise sorts
    /// what it lists without keeping the order.
    pub fn scan(
        &self,
        prefix: &[u8],
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
    ) -> io::Result<Vec<Listed>> {
        self.index_trusted()?;
        self.flush_for_scan()?;
        let bounded = !prefix.is_empty() || start.is_some() || stop.is_some();
        let mut order = self.order.lock().expect("order");
        if order.is_none() && !bounded {
            let mut ls: Vec<Listed> = {
                let st = self.state.read().expect("state");
                st.index
                    .iter()
                    .map(|(k, l)| (k.to_vec(), l, st.segs[&l.seg].clone()))
                    .collect()
            };
            ls.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return Ok(ls);
        }
        let o = self.order_caught_up(&mut order);
        let st = self.state.read().expect("state");
        let mut ls = Vec::new();
        Self::walk_range(&st, o, prefix, start, stop, |k, l| {
            ls.push((k.to_vec(), l, st.segs[&l.seg].clone()));
            true
        });
        Ok(ls)
    }

    /// The sorted keys, brought up to date with the index's: sorted afresh when there
    /// are none yet, the index stopped logging its inserts (or is a new one), or most of
    /// them are gone; otherwise the keys the index logged since are taken in. (Keys it
    /// inserts after that are read from its log by the scan, see [`Store::walk_range`];
    /// leaving up to 3,000 there to take in later made a put-then-scan loop 3× slower:
    /// each scan filtered them all, 40-130 µs.)
    fn order_caught_up<'a>(&self, order: &'a mut Option<Order>) -> &'a Order {
        let (logging, logged, keys) = {
            let st = self.state.read().expect("state");
            let logged = st.index.added.as_ref().map_or(0, Vec::len);
            (st.index.added.is_some(), logged, st.index.len())
        };
        if order.is_none() && logging {
            // the order the last close saved, if it is this open's
            let saved = *self.order_file.lock().expect("order");
            *order = saved.and_then(|then| Order::load(&self.dir, then));
        }
        let stale = order
            .as_ref()
            .is_none_or(|o| o.len() > keys.saturating_mul(2) + ORDER_STALE_MIN);
        if !logging || stale {
            // the index logs its inserts from here on (a key it inserts meanwhile may
            // then be in both: the walk lists it once), then every key it has is sorted
            self.state.write().expect("state").index.added = Some(Vec::new());
            let log = {
                let st = self.state.read().expect("state");
                let mut log = Vec::with_capacity(st.index.len() * 24);
                for (k, _) in st.index.iter() {
                    order::log_push(&mut log, k);
                }
                log
            };
            let o = order.insert(Order::from_log(&log));
            self.order_bytes.store(o.memory() as u64, Ordering::Relaxed);
            self.order_sorts.fetch_add(1, Ordering::Relaxed);
            return o;
        }
        let o = order.get_or_insert_with(Order::default);
        if logged > 0 {
            let log = self
                .state
                .write()
                .expect("state")
                .index
                .added
                .as_mut()
                .map(std::mem::take);
            if let Some(log) = log {
                o.absorb(&log);
                self.order_bytes.store(o.memory() as u64, Ordering::Relaxed);
            }
        }
        o
    }

    /// Call `f` with each live key in range, ascending, and its location (until it
    /// returns false): the keys of `o` and of the index's log of keys not taken in yet,
    /// each looked up in the index.
    fn walk_range(
        st: &State,
        o: &Order,
        prefix: &[u8],
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        mut f: impl FnMut(&[u8], Loc) -> bool,
    ) {
        let mut extra: Vec<&[u8]> = st
            .index
            .added
            .as_deref()
            .map(|log| {
                order::log_keys(log)
                    .filter(|k| in_range(k, prefix, start, stop))
                    .collect()
            })
            .unwrap_or_default();
        extra.sort_unstable();
        extra.dedup();
        // (every key with the prefix is at least the prefix: the walk starts at the
        // larger of the two bounds, and ends at the first key past either)
        let lower = start.map_or(prefix, |a| a.max(prefix));
        let mut keys = o
            .walk(lower, &extra)
            .take_while(|k| k.starts_with(prefix) && stop.is_none_or(|b| *k < b))
            .peekable();
        // looked up WALK_AHEAD at a time, each one's table entry prefetched first: the
        // lookups' cache misses overlap (one at a time they were ~70 % of a scan)
        let mut chunk: Vec<(&[u8], u64)> = Vec::with_capacity(WALK_AHEAD);
        while keys.peek().is_some() {
            chunk.clear();
            chunk.extend(keys.by_ref().take(WALK_AHEAD).map(|k| {
                let h = st.index.hash(k);
                st.index.warm(h);
                (k, h)
            }));
            for &(k, h) in &chunk {
                if let Some(l) = st.index.get_hashed(k, h) {
                    if !f(k, l) {
                        return;
                    }
                }
            }
        }
    }

    /// Before listing records whose values are read later: the write buffer's records
    /// go to the file (they are read from there).
    fn flush_for_scan(&self) -> io::Result<()> {
        if self.opts.durability != Durability::Sync {
            self.flush()?;
        }
        Ok(())
    }

    /// A snapshot of (key, location) pairs: values are read lazily by the caller.
    pub fn snapshot(&self) -> io::Result<Vec<Listed>> {
        self.index_trusted()?;
        if self.opts.durability != Durability::Sync {
            let _ = self.flush();
        }
        let st = self.state.read().expect("state");
        Ok(st
            .index
            .iter()
            .map(|(k, l)| (k.to_vec(), l, st.segs[&l.seg].clone()))
            .collect())
    }

    /// The value of one record of a snapshot that is read whole (`items()`), copied from
    /// the mapping. `probe`: first ask whether the record is in memory (`mincore`) — one
    /// that is not starts the warm-up, as a cold multi_get does (the segments' maps are
    /// read at random, one page per fault: the whole of a cold 1M-key store read so took
    /// 3.6 s). A scan probes its first few values.
    pub fn read_scanned(&self, item: &Listed, probe: bool) -> io::Result<Vec<u8>> {
        self.read_scanned_with(item, probe, <[u8]>::to_vec)
    }

    /// [`Store::read_scanned`], handing the value to `f` where it lies (one copy fewer
    /// when `f` makes the caller's own object).
    pub fn read_scanned_with<R>(
        &self,
        item: &Listed,
        probe: bool,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let (k, l, seg) = item;
        if probe && !seg.resident(l.off, HEADER + k.len() + l.val_len as usize) {
            self.warm_up_auto();
        }
        self.read_value_with(seg, *l, k, f)
    }

    // ----- catching up (read-only) -----------------------------------------------------

    /// Read-only: take in what the writer appended since this store was opened or last
    /// refreshed (RocksDB's `TryCatchUpWithPrimary`). Records the writer appended to the
    /// segment this store read last, and segments it rolled over to since, are replayed
    /// in place; where reading stops is where the next refresh starts (a record or a
    /// batch still being written is taken in once it is whole). A compaction since
    /// (segments gone, or new ones with hint files) cannot be followed that way: the
    /// store is opened again ([`Refresh::Reopened`], the new store to use instead).
    /// The writer's own open: InvalidInput (a writer always sees its own writes).
    pub fn refresh(&self) -> io::Result<Refresh> {
        if !self.opts.read_only {
            return Err(err(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: refresh() is for read_only=True opens — the writer's open always \
                     sees its own writes",
                    self.dir.display()
                ),
            ));
        }
        match self.catch_up() {
            Ok(Some(r)) => Ok(Refresh::InPlace(r)),
            // (NotFound: a segment removed under the catch-up — a compaction ran)
            Ok(None) => self.reopened(),
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.dir.exists() => self.reopened(),
            Err(e) => Err(e),
        }
    }

    /// [`Store::refresh`] after a compaction: the store opened again, holding on to the
    /// dictionaries this one loaded (the writer may have removed one that records this
    /// store's iterators and snapshots still read are compressed with).
    fn reopened(&self) -> io::Result<Refresh> {
        let s = Store::open(&self.dir, self.opts.clone())?;
        s.zstd.inherit(&self.zstd);
        Ok(Refresh::Reopened(Box::new(s)))
    }

    /// [`Store::refresh`] in place; None where a compaction happened since.
    fn catch_up(&self) -> io::Result<Option<Refreshed>> {
        let names = Self::list_dir(&self.dir)?;
        let mut st = self.state.write().expect("state");
        let mut listed: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
        let mut hinted: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
        for name in &names {
            if let Some(id) = name.strip_suffix(".seg").and_then(|s| s.parse().ok()) {
                listed.insert(id);
            }
            if let Some(id) = name.strip_suffix(".hint").and_then(|s| s.parse().ok()) {
                hinted.insert(id);
            }
        }
        let retired = match names.iter().any(|n| n == COMPACT_MARKER) {
            true => Self::compaction_retired(
                &fs::read_to_string(self.dir.join(COMPACT_MARKER)).unwrap_or_default(),
            ),
            false => Vec::new(),
        };
        // a compaction since: one of ours retired or gone, or an output (with its hint)
        let ours_gone = st
            .segs
            .keys()
            .any(|id| !listed.contains(id) || retired.contains(id));
        // (compaction outputs this store has, with their hints, may lie above the active)
        let new: Vec<u32> = listed
            .range(st.active + 1..)
            .copied()
            .filter(|id| !st.segs.contains_key(id))
            .collect();
        if ours_gone || new.iter().any(|id| hinted.contains(id)) {
            return Ok(None);
        }
        let mut rec = Recovery::default();
        let mut dead: Wastes = BTreeMap::new();
        let mut out = Refreshed::default();
        // the segment read last, from where reading stopped, then each newer one
        let mut todo: Vec<u32> = vec![st.active];
        todo.extend(&new);
        if !st.views.is_empty() {
            // (what the records replayed replace, for the snapshot views: below)
            st.index.journal = Some(Vec::new());
        }
        let last = *todo.last().expect("the active segment");
        let mut opened: Vec<(u32, i32)> = Vec::new();
        let result = (|| -> io::Result<()> {
            for id in &todo {
                let path = self.dir.join(seg_name(*id));
                let (fd, from) = match st.segs.get(id) {
                    Some(s) => (s.fd, s.size.load(Ordering::Relaxed)),
                    None => {
                        let fd = open_fd(&path, libc::O_RDONLY)?;
                        opened.push((*id, fd));
                        (fd, 0)
                    }
                };
                // (read like the newest segment of a read-only open: copied with pread —
                // the writer cuts the zero tail of a segment when it rolls)
                let scan = Scan {
                    id: *id,
                    fd,
                    from,
                    newest: true,
                    repair: false,
                    zeros_end_it: false,
                    synced: 0,
                    read_only: true,
                    dicts: None,
                    later: None,
                };
                let (end, seq) = Self::replay(&path, scan, &mut st.index, &mut rec, &mut dead)?;
                st.seq = st.seq.max(seq);
                out.bytes += end.saturating_sub(from);
                if *id != last {
                    // a segment the writer has moved on from holds nothing but whole
                    // records: anything else after where reading stopped is damage
                    let size = fs::metadata(&path)?.len();
                    if garbage_after(fd, end, size)? > 0 {
                        return Err(err(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: corrupt record at offset {end} (the writer has moved \
                                 on to a newer segment); reopen the store to see the \
                                 damage reported, or repair it with the writer's open",
                                path.display()
                            ),
                        ));
                    }
                }
                match st.segs.get(id) {
                    Some(s) => s.size.store(end, Ordering::Relaxed),
                    None => {
                        let fd = opened.pop().expect("opened above").1;
                        let w = dead.remove(id).unwrap_or_default();
                        // (read with pread: see the read-only open's newest segment)
                        let seg = Segment::new(fd, end, w.dead.min(end), None);
                        seg.tombs.store(w.tombs, Ordering::Relaxed);
                        st.segs.insert(*id, seg);
                        out.segments += 1;
                    }
                }
                // (a failure in a later segment leaves what came before it taken in)
                st.active = *id;
                st.next_id = st.next_id.max(*id + 1);
            }
            Ok(())
        })();
        for (_, fd) in opened {
            // SAFETY: opened above and not handed to a Segment.
            unsafe { libc::close(fd) };
        }
        for (id, w) in dead {
            if let Some(s) = st.segs.get(&id) {
                s.dead.fetch_add(w.dead, Ordering::Relaxed);
                s.tombs.fetch_add(w.tombs, Ordering::Relaxed);
            }
        }
        if let Some(journal) = st.index.journal.take() {
            for (k, before) in journal {
                Self::note_views(&mut st, &k, before);
            }
        }
        st.index.purge_tombstones();
        st.index.end_recovery();
        result?;
        out.records = rec.records;
        if rec.records > 0 {
            // the dictionaries the new records may name, loaded now (as at open: see
            // open_once); one of our segments gone since means a compaction may have
            // removed one of them: reopen
            let now = Self::list_dir(&self.dir)?;
            let ids: Vec<u32> = now.iter().filter_map(|n| dict::dict_id_of(n)).collect();
            self.zstd.load_all(&ids);
            if st.segs.keys().any(|id| !now.contains(&seg_name(*id))) {
                return Ok(None);
            }
        }
        Ok(Some(out))
    }

    // ----- checkpoints -----------------------------------------------------------------

    /// Make `dest` (a new directory) a store holding what this one holds now (RocksDB's
    /// checkpoint, LMDB's copy): sealed segments and hint files are hard-linked where
    /// the filesystem allows (they never change again), copied otherwise; the active
    /// segment is copied up to what was written (a writer's: flushed and fdatasynced
    /// first). `INDEX`'s header lists what was taken, so that a damaged copy is found when
    /// it is opened; the index itself is rebuilt there from hints and segments. Works on
    /// a read-only store too (the store as that open saw it). Returns (segments, bytes
    /// linked, bytes copied).
    pub fn checkpoint(&self, dest: &Path) -> io::Result<(usize, u64, u64)> {
        // (no compaction of this store retires a segment while it is being linked)
        let _only_one = self.compacting.lock().expect("compacting");
        let (seq, at, segs) = {
            // The commit lock is held until the segments are listed: released between
            // taking the end and reading the state, a writer could roll the active
            // segment, and `end` was then recorded for the new, shorter one (a copy cut
            // short: seen once in a fresh-clone CI run of test_checkpoint_while_writing).
            let c = match self.opts.read_only {
                true => None,
                false => Some(self.flushed_commit(true)?),
            };
            let st = self.state.read().expect("state");
            let end = match &c {
                Some(c) => c.write_off,
                None => st.segs[&st.active].size.load(Ordering::Relaxed),
            };
            // (every segment fdatasynced: what INDEX records must be on the disk)
            let at = Self::synced_segments(&st, end)?;
            (st.seq, at, st.segs.clone())
        };
        if dest.symlink_metadata().is_ok() {
            return Err(err(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{}: it exists (a checkpoint goes to a new directory)",
                    dest.display()
                ),
            ));
        }
        // Made under a temporary name beside `dest` and renamed to it once whole: a
        // crash or an error (a full disk) never leaves a partial copy under the name —
        // one that would open as a store missing data. An error removes it.
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_else(|| "checkpoint".into());
        let tmp = dest.with_file_name(format!(".{name}.xkv-checkpoint-{}", std::process::id()));
        fs::create_dir(&tmp).map_err(|e| {
            let why = plain(&e);
            reword(&e, format!("checkpoint to {}: {why}", dest.display()))
        })?;
        let made = self
            .checkpoint_into(&tmp, &at, &segs, seq)
            .and_then(|r| rename_noreplace(&tmp, dest).map(|()| r));
        let (linked, copied) = match made {
            Ok(r) => r,
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return Err(reword(
                    &e,
                    format!(
                        "checkpoint to {}: {} (nothing was left there)",
                        dest.display(),
                        plain(&e)
                    ),
                ));
            }
        };
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir(parent)?;
        }
        Ok((at.segs.len(), linked, copied))
    }

    /// [`Store::checkpoint`]'s copy into the new directory `dest`: (linked, copied) bytes.
    fn checkpoint_into(
        &self,
        dest: &Path,
        at: &snapshot::Recorded,
        segs: &BTreeMap<u32, Arc<Segment>>,
        seq: u64,
    ) -> io::Result<(u64, u64)> {
        let (mut linked, mut copied) = (0u64, 0u64);
        for (id, s) in &at.segs {
            let seg = &segs[id];
            let name = seg_name(*id);
            // (a read-only store's writer may have compacted it away since: the open fd
            // still reads it)
            let link =
                *id != at.active && fs::hard_link(self.dir.join(&name), dest.join(&name)).is_ok();
            match link {
                true => linked += s.size,
                false => {
                    copy_prefix(seg.fd, &dest.join(&name), s.size)?;
                    copied += s.size;
                }
            }
            let hint = hint_name(*id);
            if self.dir.join(&hint).exists()
                && fs::hard_link(self.dir.join(&hint), dest.join(&hint)).is_err()
            {
                if let Ok(data) = fs::read(self.dir.join(&hint)) {
                    fs::write(dest.join(&hint), data)?;
                    fs::File::open(dest.join(&hint))?.sync_all()?;
                }
            }
        }
        // (every dictionary a copied record names was in the directory, durably, before
        // that record was written: listed now, after the segments' ends were taken)
        super::dict::copy_all(&self.dir, dest)?;
        if self.opts.read_only {
            // (and those the writer removed since this store read records naming them)
            self.zstd.copy_loaded(dest)?;
        }
        snapshot::write_segments(dest, seq, at)?;
        fsync_dir(dest)?;
        Ok((linked, copied))
    }

    // ----- compaction ------------------------------------------------------------------

    /// Rewrite the live records of every immutable segment into new segments with hint
    /// files, then retire the old ones atomically (a marker file lists them; a crash at any
    /// point leaves either the old set or the new set readable). Reads and writes go on.
    pub fn compact(&self) -> io::Result<(usize, u64)> {
        self.writable("compact()")?;
        // live records are what the index lists: it must be whole
        self.index_trusted()?;
        let _only_one = self.compacting.lock().expect("compacting");
        self.compact_locked(None)
    }

    /// The sealed segments' reclaimable bytes (dead records and tombstones) and bytes.
    fn sealed_dead(&self) -> (u64, u64) {
        let st = self.state.read().expect("state");
        st.segs
            .iter()
            .filter(|(id, _)| **id != st.active)
            .fold((0, 0), |(d, n), (_, s)| {
                let size = s.size.load(Ordering::Relaxed);
                let dead = s.dead.load(Ordering::Relaxed) + s.tombs.load(Ordering::Relaxed);
                (d + dead.min(size), n + size)
            })
    }

    /// What [`Options::auto_compact`]'s trigger calls for now: `Some(None)` every
    /// segment (with a roll, as `compact()`), `Some(Some(ids))` those segments only.
    ///
    /// The sealed segments at least `ratio` dead (tombstones apart: a compaction of
    /// some segments copies them on) are compacted once their dead bytes reach
    /// `min_bytes`, with the small segments earlier compactions left (Bitcask's
    /// `frag_threshold` and `small_file_threshold`). The store is compacted whole
    /// (which drops the tombstones) when the sealed segments' tombstones reach
    /// `min_bytes` and `ratio` of their live bytes (deletes of keys never written again,
    /// a queue's: carried on by every compaction of some segments, they would pile up),
    /// or when they hold `ratio` of dead bytes and tombstones in all, no segment dead
    /// enough alone.
    fn compaction_plan(&self) -> Option<Option<Vec<u32>>> {
        let a = self.opts.auto_compact?;
        let floor = a.min_bytes.max(1);
        let small = self.opts.segment_size / 8;
        let st = self.state.read().expect("state");
        let sealed = || st.segs.iter().filter(|(id, _)| **id != st.active);
        let (mut chosen, mut chosen_dead, mut smalls) = (Vec::new(), 0u64, Vec::new());
        let (mut tombs, mut live) = (0u64, 0u64);
        for (id, s) in sealed() {
            let size = s.size.load(Ordering::Relaxed);
            let dead = s.dead.load(Ordering::Relaxed).min(size);
            let t = s.tombs.load(Ordering::Relaxed).min(size - dead);
            tombs += t;
            live += size - dead - t;
            if size > 0 && dead as f64 >= a.ratio * size as f64 {
                chosen.push(*id);
                chosen_dead += dead;
            } else if size < small {
                smalls.push(*id);
            }
        }
        if tombs >= floor && tombs as f64 >= a.ratio * live as f64 {
            return Some(None);
        }
        if chosen_dead >= floor {
            chosen.extend(smalls);
            chosen.sort_unstable();
            return Some(Some(chosen));
        }
        drop(st);
        let (dead, total) = self.sealed_dead();
        (total > 0 && dead >= floor && dead as f64 >= a.ratio * total as f64).then_some(None)
    }

    /// A segment was sealed: start a background compaction if one is due (and none runs).
    fn maybe_auto_compact(&self) {
        if self.opts.read_only || self.compaction_plan().is_none() {
            return;
        }
        let Some(weak) = self.me.get().cloned() else {
            return;
        };
        if self.auto_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("xkv-compact".into())
            .spawn(move || {
                // (as the index check and the warm-up: gets and multi_gets go first)
                crate::sys::fileio::background_io();
                // (a store closed meanwhile: nothing to do)
                if let Some(s) = weak.upgrade() {
                    s.auto_compact();
                    s.auto_running.store(false, Ordering::Release);
                }
            });
        if spawned.is_err() {
            self.auto_running.store(false, Ordering::Release);
        }
    }

    /// The background compaction: checked again once no other one runs (a compaction
    /// that just ran — this one's trigger may have been its own sealing roll — leaves
    /// nothing to do).
    fn auto_compact(&self) {
        let _only_one = self.compacting.lock().expect("compacting");
        let Some(plan) = self.compaction_plan() else {
            return;
        };
        if self.index_trusted().is_err() {
            return;
        }
        match self.compact_locked(plan.as_deref()) {
            Ok(_) => self.auto_compactions.fetch_add(1, Ordering::Relaxed),
            // (the next sealed segment tries again; compact() reports the error)
            Err(_) => self.auto_compact_failures.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// [`Store::compact`] (`only`: those sealed segments; `None`: all, after a roll),
    /// with the compaction lock held.
    fn compact_locked(&self, only: Option<&[u32]>) -> io::Result<(usize, u64)> {
        let t = Instant::now();
        let r = self.compact_steps(only);
        if let Ok((n, freed, wrote)) = r {
            if n > 0 {
                self.compactions.fetch_add(1, Ordering::Relaxed);
                self.reclaimed_bytes.fetch_add(freed, Ordering::Relaxed);
                self.compacted_bytes.fetch_add(wrote, Ordering::Relaxed);
                let us = t.elapsed().as_micros() as u64;
                self.last_compaction_us.store(us, Ordering::Relaxed);
            }
        }
        r.map(|(n, freed, _)| (n, freed))
    }

    /// [`Store::compact_locked`]'s steps: (segments retired, bytes reclaimed, bytes
    /// written).
    fn compact_steps(&self, only: Option<&[u32]>) -> io::Result<(usize, u64, u64)> {
        // the index snapshot names the segments about to be retired: drop it first (and
        // the live overlay made over it)
        {
            let mut st = self.state.write().expect("state");
            st.index.detach();
            st.overlay_due = None;
            self.overlay_pending.store(false, Ordering::Relaxed);
        }
        snapshot::remove(&self.dir)?;
        fsync_dir(&self.dir)?;
        // 1. make every current segment immutable (sealing syncs the active segment under
        //    the commit lock: 81 ms of writers waiting after 185 MB of durability="none"
        //    puts, when not synced ahead)
        //    (only some segments: sealed ones, the active one is left alone)
        //    A compaction of every segment also finds which zstd dictionaries no record
        //    may name once it is done (removed at the end): any but the one in use, that
        //    no value compressed before it was replaced still pins, and that no record
        //    queued for writing names — every other record naming it is in a segment
        //    sealed here, and the copies are checked apart (step 6).
        let mut unnamed: Vec<u32> = Vec::new();
        if only.is_none() {
            let dicts = dict::list(&self.dir).unwrap_or_default();
            self.presync_active();
            let mut c = self.flushed_commit(true)?;
            if !dicts.is_empty() {
                let mut queued = std::collections::BTreeSet::new();
                for p in &c.pending {
                    Self::dicts_named(&p.bytes, &mut queued);
                }
                unnamed = self.zstd.unpinned(&dicts);
                unnamed.retain(|d| !queued.contains(d));
            }
            let seal_at = c.write_off;
            let mut app = c.appender.take().expect("appender");
            let r = self.roll(&mut app, seal_at);
            c.appender = Some(app);
            // (a failed roll changed nothing: the old segment is still the active one)
            let (.., start) = r?;
            c.write_off = start;
            self.flushed.store(start, Ordering::Release);
        }
        let (old, segs, whole) = {
            let st = self.state.read().expect("state");
            let sealed = st.segs.keys().copied().filter(|&id| id != st.active);
            let old: Vec<u32> = match only {
                None => sealed.collect(),
                Some(ids) => sealed.filter(|id| ids.contains(id)).collect(),
            };
            // Every sealed segment: no older record is left anywhere for a tombstone to
            // hide, so none is copied (the active segment holds only newer writes).
            // Otherwise the tombstones still in force go on into the copies.
            let whole = st.segs.len() - 1 == old.len();
            (old, st.segs.clone(), whole)
        };
        if old.is_empty() {
            return Ok((0, 0, 0));
        }
        let before: u64 = old
            .iter()
            .map(|id| segs[id].size.load(Ordering::Relaxed))
            .sum();
        if self.zstd.wants_samples() {
            // compression="zstd" and no dictionary yet: trained first, on these
            // segments' values, so that every value copied below is compressed with it
            let values = self.sample_values(&old, &segs, dict::TRAIN_VALUES)?;
            self.zstd.train_now(values.iter().map(Vec::as_slice));
        } else if only.is_none() && matches!(self.opts.compression, Compression::Zstd { .. }) {
            // every segment compacted: a dictionary that no longer fits what the store
            // holds is retrained on it (kept only if it does markedly better on values
            // it was not trained on), and every value copied below goes to the new one
            let values = self.sample_values(&old, &segs, 2 * dict::TRAIN_VALUES)?;
            self.zstd.retrain(&values);
        }
        // 2. copy live records into new segments (same seq), with hint files
        let mut out = CompactOut {
            carry: !whole,
            ..Default::default()
        };
        let copied = self.copy_live(&old, &segs, &mut out);
        let mut new_segs = std::mem::take(&mut out.new_segs);
        new_segs.extend(out.cur.take());
        if matches!(copied, Ok(false)) {
            // Damage (kept by a repair=True open) stopped the scan of a segment, and the
            // index lists no tombstones to copy on past it: compact every segment
            // instead, which needs none.
            self.discard_copies(&new_segs);
            return self.compact_steps(None);
        }
        let copied = copied.map(|_| ());
        // A record left behind as superseded was superseded by a write that may not be
        // synced yet (durability "none"/"batch"): the log is made durable before the
        // old segments go, or a crash of the machine that lost that write would bring
        // back an older value, or none — a state the store never had. (Until session
        // 32 it could: found by the power-cut tests, `benches/kv_crash.py --power`.)
        let copied = match self.opts.durability {
            Durability::Sync => copied,
            _ => copied.and_then(|()| self.flushed_commit(true).map(drop)),
        };
        // 3. the marker makes the swap atomic: from here on, the old segments are gone
        let marker = self.dir.join(COMPACT_MARKER);
        let tmp = self.dir.join(format!("{COMPACT_MARKER}.tmp"));
        let list: Vec<String> = old.iter().map(|i| i.to_string()).collect();
        let committed = copied
            .and_then(|()| self.seal_copies(&new_segs))
            .and_then(|()| {
                fs::write(&tmp, list.join("\n"))?;
                fs::File::open(&tmp)?.sync_all()?;
                fs::rename(&tmp, &marker)
            });
        if let Err(e) = committed {
            // Before the commit point (a full disk, most likely): the copies belong to
            // nobody — their files go, or a compaction retried at every sealed segment
            // would leave one more set on a disk already full, and two fds each time.
            self.discard_copies(&new_segs);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        fsync_dir(&self.dir)?;
        // 4. point the index at the copies (unless a newer write moved the key meanwhile)
        let after: u64 = new_segs.iter().map(|s| s.2).sum();
        // (in chunks, the state lock released between them: each key is moved on its
        // own — only if it is still where it was copied from — and readers find it in
        // either place meanwhile, since the old segments stay in the map until all are
        // done; one lock hold over a million keys stalled every reader and writer for
        // 0.4-0.8 s)
        {
            let mut st = self.state.write().expect("state");
            for (id, fd, size, entries) in &new_segs {
                let seg = Segment::new(*fd, *size, 0, Some(0));
                let tombs = entries.iter().filter(|(_, l, _)| l.is_tombstone());
                let tombs: usize = tombs.map(|(k, _, _)| HEADER + k.len()).sum();
                seg.tombs.store(tombs as u64, Ordering::Relaxed);
                st.segs.insert(*id, seg);
            }
        }
        for (id, _, _, entries) in &new_segs {
            for chunk in entries.chunks(PER_HOLD) {
                // (a lock released and taken straight back would go to this thread
                // again, ahead of the woken waiters: a moment for them first)
                std::thread::sleep(Duration::from_micros(20));
                let mut st = self.state.write().expect("state");
                let mut stale = 0;
                for (k, l, _) in chunk.iter().filter(|(_, l, _)| !l.is_tombstone()) {
                    match st.index.get(k) {
                        // Still where it was copied from: a key only ever leaves the
                        // sealed segments being compacted (writes go to the active one,
                        // a delete drops it), so one still in them is the record copied.
                        Some(cur) if old.contains(&cur.seg) => {
                            st.index.put(k, *l, None);
                        }
                        // (written again or deleted since it was copied: the copy is dead)
                        _ => stale += HEADER + k.len() + l.val_len as usize,
                    }
                }
                if let Some(s) = st.segs.get(id) {
                    s.dead.fetch_add(stale as u64, Ordering::Relaxed);
                }
            }
        }
        {
            let mut st = self.state.write().expect("state");
            for id in &old {
                st.segs.remove(id); // fds close when the last reader drops its Arc
            }
        }
        Self::finish_compaction(&self.dir)?;
        // 5. a new INDEX (step 1 removed the one that named the retired segments): a
        //    writer killed from here on reopens by mapping it, not by loading every hint
        //    file into a new index (~0.35 s per million keys). Best effort: without it
        //    the next open is slower, never wrong.
        if self.opts.index_snapshot {
            let _ = self.snapshot_online();
        }
        // 6. the dictionaries no record names any more go (after the segments naming
        //    them: a read-only follower that finds one gone finds those gone too, and
        //    reopens). This process keeps them loaded: a reader still holding a retired
        //    segment decodes its records. Best effort: one left behind is only 16 KiB.
        let mut removed = false;
        for d in unnamed.iter().filter(|d| !out.dicts.contains(d)) {
            removed |= fs::remove_file(self.dir.join(dict::dict_name(*d))).is_ok();
        }
        if removed {
            let _ = fsync_dir(&self.dir);
        }
        Ok((old.len(), before.saturating_sub(after), after))
    }

    /// Add the zstd dictionaries the encoded records `bytes` name to `out`.
    fn dicts_named(bytes: &[u8], out: &mut std::collections::BTreeSet<u32>) {
        let mut off = 0;
        while let Ok(h) = record::parse_header(&bytes[off.min(bytes.len())..]) {
            let end = off + h.total();
            if end > bytes.len() {
                break;
            }
            if h.flags & FLAG_ZSTD != 0 {
                out.insert(dict::frame_dict_id(
                    &bytes[off + HEADER + h.key_len as usize..end],
                ));
            }
            off = end;
        }
    }

    /// Compaction's step 2: every live record of the segments `old` into `out` (see
    /// [`Store::scan_live`]). False: damage stopped a scan where tombstones were to be
    /// carried (`out.carry`), which the index cannot list: nothing complete was made.
    fn copy_live(
        &self,
        old: &[u32],
        segs: &BTreeMap<u32, Arc<Segment>>,
        out: &mut CompactOut,
    ) -> io::Result<bool> {
        // The live records are found by reading the sealed segments themselves, each
        // record checked against the index 1,024 at a time under a short read lock:
        // complete, since a key only ever moves out of a sealed segment (writes go to
        // the active one), so a record not live when checked never becomes live again.
        // Listing the index instead held the state lock over the whole table (~0.3 s
        // per million keys, every writer waiting). A record that cannot be parsed (a
        // store opened with repair=True keeps its damaged bytes) stops the scan there:
        // the rest of that segment and the segments after it (`old` is in id order)
        // are listed from the index.
        let mut stopped = None;
        for id in old {
            if let Some(at) = self.scan_live(*id, &segs[id], out)? {
                stopped = Some((*id, at));
                break;
            }
        }
        if stopped.is_some() && out.carry {
            return Ok(false);
        }
        if let Some((bad, at)) = stopped {
            // what the scan has not covered: the rest of that segment and those after it
            let todo =
                |l: &Loc| old.contains(&l.seg) && (l.seg > bad || (l.seg == bad && l.off >= at));
            let (keys, live) = {
                let st = self.state.read().expect("state");
                // (keys copied back to back, no allocation per key)
                let mut keys: Vec<u8> = Vec::new();
                let mut live: Vec<(usize, usize, Loc)> = Vec::new();
                for (k, l) in st.index.iter().filter(|(_, l)| todo(l)) {
                    live.push((keys.len(), k.len(), l));
                    keys.extend_from_slice(k);
                }
                (keys, live)
            };
            for &(at, n, l) in &live {
                let k = &keys[at..at + n];
                let seg = &segs[&l.seg];
                let v = self.read_value(seg, l, k)?; // (decompressed, its CRC checked)
                                                     // (the copy keeps the record's sequence number: from its header)
                let mut head = [0u8; HEADER];
                pread_exact(seg.fd, &mut head, l.off)?;
                let seq = record::parse_header(&head).map_or(0, |h| h.seq);
                let (v, flags) = self.recompressed(0, &v);
                self.compact_emit(out, k, Some(&v), flags, seq)?;
            }
        }
        Ok(true)
    }

    /// The copies made durable under their own names, each with its hint file.
    fn seal_copies(&self, new_segs: &[NewSeg]) -> io::Result<()> {
        for (id, fd, size, entries) in new_segs {
            // SAFETY: fd is open.
            if unsafe { libc::fdatasync(*fd) } != 0 {
                return Err(io::Error::last_os_error());
            }
            self.write_hint(*id, *size, entries)?;
            fs::rename(
                self.dir.join(format!("{}.tmp", seg_name(*id))),
                self.dir.join(seg_name(*id)),
            )?;
        }
        fsync_dir(&self.dir)
    }

    /// A compaction that failed before its commit point: its copies' fds closed, their
    /// files (under either name) and hint files removed. Best effort.
    fn discard_copies(&self, new_segs: &[NewSeg]) {
        for (id, fd, _, _) in new_segs {
            // SAFETY: the copy's own fd, used by nothing else, closed once.
            unsafe { libc::close(*fd) };
            for name in [
                format!("{}.tmp", seg_name(*id)),
                seg_name(*id),
                hint_name(*id),
                format!("{}.tmp", hint_name(*id)),
            ] {
                let _ = fs::remove_file(self.dir.join(name));
            }
        }
        let _ = fsync_dir(&self.dir);
    }

    /// Compaction's step 2 for one sealed segment: every record the index still points
    /// to is copied out (see [`Store::compact_emit`]). `Some(offset)`: a record there
    /// cannot be parsed (damage kept by a repair=True open) — the records before it are
    /// done, the caller lists the rest from the index.
    fn scan_live(&self, id: u32, seg: &Segment, out: &mut CompactOut) -> io::Result<Option<u64>> {
        Self::with_sealed_bytes(seg, |data| self.scan_live_in(id, data, out))?
    }

    /// `f` of every byte of the sealed segment `seg`: through the segment's own mapping
    /// when it covers them (no mapping made and unmade: munmap of a populated 256 MiB
    /// takes the process's mmap lock for writing, and every thread's page fault waits
    /// meanwhile), else a mapping made for the call. A sealed segment is never cut while
    /// open, so neither mapping can fault past the end.
    fn with_sealed_bytes<R>(seg: &Segment, f: impl FnOnce(&[u8]) -> R) -> io::Result<R> {
        let size = seg.size.load(Ordering::Acquire) as usize;
        if let Some(own) = seg.mapped(0, size) {
            // Read from end to end: the kernel's sequential read-ahead while `f` runs,
            // streaming ahead of it (the mapping is read at random otherwise,
            // advise_random; reading the whole segment in first would hold all of it in
            // memory at once, and a segment evicted before the scan reached it was read
            // again one page at a time).
            advise(seg.map, size, libc::MADV_SEQUENTIAL);
            let r = f(own);
            advise(seg.map, size, libc::MADV_RANDOM);
            return Ok(r);
        }
        let map = ReadMap::new(seg.fd, size, 0, size)?;
        Ok(f(map.bytes()))
    }

    /// [`Store::scan_live`] over the segment's bytes, `data`.
    fn scan_live_in(&self, id: u32, data: &[u8], out: &mut CompactOut) -> io::Result<Option<u64>> {
        // (offset, header) of the PUT records waiting to be checked against the index
        let mut todo: Vec<(usize, record::Header)> = Vec::with_capacity(PER_HOLD);
        let mut live: Vec<bool> = Vec::with_capacity(PER_HOLD);
        let (mut off, mut stop) = (0usize, None);
        loop {
            let end = off >= data.len();
            if !end {
                match record::parse_header(&data[off..]) {
                    Ok(h)
                        if off + h.total() <= data.len()
                            && record::check(&data[off..off + h.total()]).is_ok() =>
                    {
                        if h.kind == Kind::Put || (h.kind == Kind::Delete && out.carry) {
                            todo.push((off, h));
                        }
                        off += h.total();
                    }
                    _ => stop = Some(off as u64),
                }
            }
            if todo.len() == PER_HOLD || end || stop.is_some() {
                {
                    // (a read lock per 1,024 lookups: writers wait for one chunk at most)
                    let st = self.state.read().expect("state");
                    live.clear();
                    live.extend(todo.iter().map(|&(o, h)| {
                        let k = &data[o + HEADER..o + HEADER + h.key_len as usize];
                        match st.index.get(k) {
                            // a tombstone is in force while its key is absent (one
                            // written again later is newer than it: it goes)
                            None => h.kind == Kind::Delete,
                            Some(l) => {
                                h.kind == Kind::Put
                                    && (l.seg, l.off, l.val_len) == (id, o as u64, h.val_len)
                            }
                        }
                    }));
                }
                for (&(o, h), _) in todo.iter().zip(&live).filter(|(_, l)| **l) {
                    let k = o + HEADER..o + HEADER + h.key_len as usize;
                    let v = k.end..k.end + h.val_len as usize;
                    if h.kind != Kind::Put {
                        self.compact_emit(out, &data[k], None, 0, h.seq)?;
                        continue;
                    }
                    let (v, flags) = self.recompressed(h.flags & FLAG_COMPRESSED, &data[v]);
                    self.compact_emit(out, &data[k], Some(&v), flags, h.seq)?;
                }
                todo.clear();
            }
            if end || stop.is_some() {
                return Ok(stop);
            }
        }
    }

    /// Up to `want` values of segments `old` to train a zstd dictionary on (a share of
    /// each segment's, spread over it — its first ones would be its oldest, and a
    /// compaction's outputs lie in the order it copied them — up to what training
    /// takes; decompressed where compressed).
    fn sample_values(
        &self,
        old: &[u32],
        segs: &BTreeMap<u32, Arc<Segment>>,
        want: usize,
    ) -> io::Result<Vec<Vec<u8>>> {
        let mut values: Vec<Vec<u8>> = Vec::new();
        let mut bytes = 0;
        let per_seg = want.div_ceil(old.len()).max(64);
        for id in old {
            Self::with_sealed_bytes(&segs[id], |data| {
                // (live values only: what the compaction is about to write — a store whose
                // values drifted holds the old kind's, overwritten, in the same segments)
                let live = |o: usize, h: &record::Header| {
                    let k = &data[o + HEADER..o + HEADER + h.key_len as usize];
                    let st = self.state.read().expect("state");
                    st.index
                        .get(k)
                        .is_some_and(|l| (l.seg, l.off, l.val_len) == (*id, o as u64, h.val_len))
                };
                let stride = (Self::count_records(data) / per_seg).max(1);
                let (mut off, mut taken, mut nth, mut due) = (0, 0, 0usize, false);
                while let Ok(h) = record::parse_header(&data[off.min(data.len())..]) {
                    let end = off + h.total();
                    if end > data.len() || taken >= per_seg {
                        break;
                    }
                    due |= nth % stride == 0;
                    nth += 1;
                    if due
                        && h.kind == Kind::Put
                        && h.val_len as usize >= record::COMPRESS_MIN
                        && live(off, &h)
                    {
                        due = false;
                        let v = &data[off + HEADER + h.key_len as usize..end];
                        let v = match h.flags & FLAG_COMPRESSED {
                            0 => Some(v.to_vec()),
                            f => self.unpack(f, v).ok(),
                        };
                        if let Some(v) = v {
                            bytes += v.len().min(16 << 10);
                            values.push(v);
                            taken += 1;
                        }
                    }
                    off = end;
                }
            })?;
            if values.len() >= want || bytes >= dict::TRAIN_BYTES * want / dict::TRAIN_VALUES {
                break;
            }
        }
        Ok(values)
    }

    /// A live value as compaction writes it (`stored` with the compression flags
    /// `flags`): in the store's compression, as RocksDB's compactions write their output
    /// in the current one — a store opened with `compression="zstd"` is converted as it
    /// is compacted (values written plainly or with LZ4 before, or as plain zstd frames
    /// before the dictionary was trained, are compressed against the dictionary). Opened
    /// without compression, values are copied as they are stored (a `compact` from the
    /// CLI never inflates a compressed store), and so is anything already in the form
    /// asked for — or that does not decompress (its dictionary missing: copied on as
    /// it is, as unreadable as before, rather than stopping every compaction).
    fn recompressed<'a>(&self, flags: u8, stored: &'a [u8]) -> (std::borrow::Cow<'a, [u8]>, u8) {
        use std::borrow::Cow;
        let current = match self.opts.compression {
            Compression::None => true,
            Compression::Lz4 => flags == FLAG_LZ4,
            Compression::Zstd { .. } => {
                flags == FLAG_ZSTD && self.zstd.frame_dict(stored) == self.zstd.status().0
            }
        };
        let plain = match flags {
            _ if current => return (Cow::Borrowed(stored), flags),
            0 => Cow::Borrowed(stored),
            _ => match self.unpack(flags, stored) {
                Ok(v) => Cow::Owned(v),
                Err(_) => return (Cow::Borrowed(stored), flags),
            },
        };
        let packed = match self.opts.compression {
            Compression::Lz4 => record::compress(&plain).map(|c| (c, FLAG_LZ4)),
            Compression::Zstd { .. } => self.zstd.compress_copy(&plain).map(|c| (c, FLAG_ZSTD)),
            Compression::None => None,
        };
        match packed {
            Some((c, how)) => (Cow::Owned(c), how),
            None => (plain, 0),
        }
    }

    /// Append one live record (`None`: a tombstone in force) to the compaction's current
    /// new segment (a new one, under a `.tmp` name, when it would pass the segment size).
    fn compact_emit(
        &self,
        out: &mut CompactOut,
        k: &[u8],
        v: Option<&[u8]>,
        flags: u8,
        seq: u64,
    ) -> io::Result<()> {
        out.buf.clear();
        if let Some(v) = v.filter(|_| flags & FLAG_ZSTD != 0) {
            out.dicts.insert(dict::frame_dict_id(v));
        }
        match v {
            Some(v) => record::encode(&mut out.buf, Kind::Put, flags, seq, k, v, 0),
            None => record::encode(&mut out.buf, Kind::Delete, 0, seq, k, b"", 0),
        }
        let len = out.buf.len() as u64;
        let need_new = match &out.cur {
            None => true,
            Some((_, _, size, _)) => size + len > self.opts.segment_size,
        };
        if need_new {
            out.new_segs.extend(out.cur.take());
            let id = {
                let mut st = self.state.write().expect("state");
                st.next_id += 1;
                st.next_id - 1
            };
            // written under a .tmp name: a crash mid-compaction leaves only files that
            // the next open deletes
            let fd = open_fd(
                &self.dir.join(format!("{}.tmp", seg_name(id))),
                libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
            )?;
            out.cur = Some((id, fd, 0, Vec::new()));
            out.sync = Default::default();
        }
        let (id, fd, size, entries) = out.cur.as_mut().expect("segment");
        crate::sys::fileio::pwrite_all(*fd, &out.buf, *size)?;
        let loc = Loc {
            seg: *id,
            val_len: v.map_or(TOMBSTONE, |v| v.len() as u32),
            off: *size,
        };
        entries.push((k.to_vec(), loc, seq));
        *size += len;
        out.sync.advance(*fd, *size);
        Ok(())
    }

    /// Most of what the active segment holds unsynced goes to the disk now, with writers
    /// going on: an fdatasync made next under the commit lock then has little to write.
    fn presync_active(&self) {
        let act = {
            let st = self.state.read().expect("state");
            st.segs.get(&st.active).cloned()
        };
        if let Some(a) = act {
            // SAFETY: the segment's fd stays open while its Arc is held.
            unsafe { libc::fdatasync(a.fd) };
        }
    }

    /// Write `INDEX` while the store stays open: everything written so far is flushed,
    /// fdatasynced and indexed (writers wait meanwhile), the index is copied, and the
    /// copy is written after the locks are released — writers pause for the last
    /// fdatasync and the copy (~90 ms for a million 16-byte keys here), not for the
    /// file's writing (~0.5 s). What is appended later lies
    /// after the `active_off` it records: the next open replays it. Only under the
    /// compaction lock (no compaction retires a segment it lists before it is written).
    fn snapshot_online(&self) -> io::Result<()> {
        self.index_trusted()?;
        // (~60 MB written during a compaction of 1M keys took 136 ms to sync under the
        // lock below)
        self.presync_active();
        // The copies' memory is allocated and touched before the locks (page faults on
        // ~60 MB for a million keys were half of the writers' wait), with room for
        // what the index grows by until then.
        let sizes = self.state.read().expect("state").index.part_sizes();
        let room = |n: usize| n + n / 8 + 4096;
        let [mut ctrl, _, mut arena] = sizes.map(|n| {
            let mut v = vec![1u8; room(n)];
            v.clear();
            v
        });
        let mut slots = vec![Entry::default(); room(sizes[1]) / std::mem::size_of::<Entry>()];
        slots.clear();
        let (p, seq, at) = {
            let c = self.flushed_commit(true)?;
            let end = c.write_off;
            // (the commit lock keeps writers from the index: once the overlay is merged,
            // the copy needs only a read lock — gets go on meanwhile; under the write
            // lock they waited 34-48 ms for a copy of a million keys)
            self.state.write().expect("state").index.merge_overlay();
            let st = self.state.read().expect("state");
            let at = Self::synced_segments(&st, end)?;
            let p = st.index.to_parts();
            ctrl.extend_from_slice(p.ctrl);
            slots.extend_from_slice(st.index.entries());
            arena.extend_from_slice(p.arena[0]);
            arena.extend_from_slice(p.arena[1]);
            let meta = (p.seed, p.check, p.dead, p.items, p.deleted);
            (meta, st.seq, at)
        };
        // the copy, sized for its keys as at close (a table that grew by doubling can be
        // under half full) — outside the locks: nobody waits for the rehash
        let (seed, check, dead, items, deleted) = p;
        let mut copy = Index::from_parts(
            seed,
            check,
            ctrl.into(),
            slots.into(),
            arena.into(),
            dead,
            items,
            deleted,
        )
        .expect("a copy of a consistent index");
        copy.merge_and_fit(); // (nothing to merge: the copy has no overlay)
        snapshot::write_parts(&self.dir, &copy.to_parts(), seq, &at)
    }

    // ----- introspection ---------------------------------------------------------------

    pub fn stats(&self) -> Vec<(String, u64)> {
        let (dict_id, dict_failed) = self.zstd.status();
        let drift = self.zstd.drift_retrains();
        let (uring, syscalls, mapped, unsynced) = {
            let c = self.commit.lock().expect("commit");
            let a = c.appender.as_ref();
            (
                a.map(|a| a.uring as u64).unwrap_or(0),
                a.map(|a| a.syscalls).unwrap_or(0),
                a.map(|a| a.mapped() as u64).unwrap_or(0),
                c.unsynced,
            )
        };
        let sealed_dead = self.sealed_dead().0; // (before the state lock below: not held twice)
        let st = self.state.read().expect("state");
        let size: u64 = st
            .segs
            .values()
            .map(|s| s.size.load(Ordering::Relaxed))
            .sum();
        let dead: u64 = st
            .segs
            .values()
            .map(|s| s.dead.load(Ordering::Relaxed))
            .sum();
        let tombs: u64 = st
            .segs
            .values()
            .map(|s| s.tombs.load(Ordering::Relaxed))
            .sum();
        let (views, noted) = Self::view_counts(&st);
        vec![
            ("keys".into(), st.index.len() as u64),
            // snapshot views open, and the keys they noted (changed since taken)
            ("snapshots".into(), views as u64),
            ("snapshot_keys".into(), noted as u64),
            ("segments".into(), st.segs.len() as u64),
            ("active_segment".into(), st.active as u64),
            ("bytes_on_disk".into(), size),
            ("dead_bytes".into(), dead),
            // tombstones' bytes (a compaction of every segment drops them)
            ("tombstone_bytes".into(), tombs),
            ("index_bytes".into(), st.index.memory() as u64),
            // the keys sorted for range scans, once one has run (kv/order.rs)
            (
                "order_bytes".into(),
                self.order_bytes.load(Ordering::Relaxed),
            ),
            // scans that sorted every key (ORDER, saved at close, spares the next open's)
            (
                "order_sorts".into(),
                self.order_sorts.load(Ordering::Relaxed),
            ),
            // 1 while the table is still the mapped snapshot (not yet grown into the heap)
            ("index_mapped".into(), st.index.is_mapped() as u64),
            // 1 while the table doubles in steps or the overlay merges into it
            ("index_growing".into(), st.index.is_growing() as u64),
            // 1 once the snapshot's checksums are verified (or there was none to verify)
            ("index_verified".into(), self.index_verdict_in() as u64),
            ("seq".into(), st.seq),
            // segment bytes read in by the background warm-up (Store::warm_up)
            ("warmed_bytes".into(), self.warmed.load(Ordering::Relaxed)),
            ("io_uring".into(), uring),
            ("direct".into(), self.opts.direct as u64),
            ("write_syscalls".into(), syscalls),
            // 1 when appends are copied into the active segment's shared mapping
            ("mapped_writes".into(), mapped),
            // 1 while the index's overlay lives in the shared OVERLAY file (a killed
            // process's successor then replays nothing it covers)
            ("live_overlay".into(), st.index.is_shared() as u64),
            // written (in the page cache) but not yet fdatasynced: what a crash of the
            // machine could lose ("none"/"batch"); a crash of the process loses nothing
            ("unsynced_bytes".into(), unsynced),
            (
                "group_commits".into(),
                self.group_commits.load(Ordering::Relaxed),
            ),
            // threads' durable writes handed the GIL to a writer woken ahead of its turn
            // (Store::relay_one)
            (
                "relay_primed".into(),
                self.primed_handoffs.load(Ordering::Relaxed),
            ),
            // background compactions (Options::auto_compact) done / failed, and the
            // sealed segments' dead bytes that trigger them
            (
                "auto_compactions".into(),
                self.auto_compactions.load(Ordering::Relaxed),
            ),
            (
                "auto_compact_failures".into(),
                self.auto_compact_failures.load(Ordering::Relaxed),
            ),
            // 1 while a background compaction runs (RocksDB's num-running-compactions)
            (
                "compaction_running".into(),
                self.auto_running.load(Ordering::Acquire) as u64,
            ),
            ("sealed_dead_bytes".into(), sealed_dead),
            // every compaction that retired segments, what they reclaimed in all, and
            // how long the last one took
            (
                "compactions".into(),
                self.compactions.load(Ordering::Relaxed),
            ),
            (
                "reclaimed_bytes".into(),
                self.reclaimed_bytes.load(Ordering::Relaxed),
            ),
            // what they wrote (their copies): divided by what the store was given, the
            // compactions' write amplification
            (
                "compacted_bytes".into(),
                self.compacted_bytes.load(Ordering::Relaxed),
            ),
            // (compress=True: values written compressed since the open, bytes saved)
            (
                "compressed_values".into(),
                self.compressed_values.load(Ordering::Relaxed),
            ),
            (
                "compression_saved_bytes".into(),
                self.compression_saved.load(Ordering::Relaxed),
            ),
            // (compression="zstd": the dictionary values are compressed with, 0 while
            // none is trained; 1 when training failed — values then use plain zstd; an
            // open that does not compress: the store's newest dictionary)
            ("compression_dictionary".into(), dict_id as u64),
            (
                "compression_dictionary_failed".into(),
                dict_failed.is_some() as u64,
            ),
            // (how many times the dictionary was retrained — by a compaction, or for
            // writes that drifted — over the store's life)
            (
                "compression_dictionary_generation".into(),
                self.zstd.generation(),
            ),
            // (this open: the writers' values drifted from what the dictionary does
            // well, a retraining ran on the next ones, and of those, the dictionaries
            // kept — a retraining that does not gain 10 % changes nothing)
            ("compression_drift_retrainings".into(), drift.0),
            ("compression_drift_retrained".into(), drift.1),
            (
                "last_compaction_ms".into(),
                self.last_compaction_us.load(Ordering::Relaxed) / 1000,
            ),
        ]
    }

    /// Verify every live record's CRC; returns (records checked, problems).
    pub fn check(&self) -> io::Result<(u64, Vec<String>)> {
        let snap = self.snapshot()?;
        let mut bad = Vec::new();
        for (k, l, seg) in &snap {
            let mut rec = vec![0u8; HEADER + k.len() + l.val_len as usize];
            let n = pread_exact(seg.fd, &mut rec, l.off)?;
            if n != rec.len() || record::check(&rec).is_err() {
                bad.push(format!(
                    "segment {} offset {}: key {:?} fails its CRC",
                    l.seg,
                    l.off,
                    String::from_utf8_lossy(k)
                ));
            } else if rec[8] & FLAG_COMPRESSED != 0 {
                if let Err(why) = self.unpack(rec[8], &rec[HEADER + k.len()..]) {
                    bad.push(format!(
                        "segment {} offset {}: key {:?}: {why}",
                        l.seg,
                        l.off,
                        String::from_utf8_lossy(k)
                    ));
                }
            }
        }
        Ok((snap.len() as u64, bad))
    }

    /// Write the index snapshot describing every segment, the active one up to `end`.
    /// Only when nothing is in flight (closing): the index must match the files exactly.
    fn write_snapshot(&self, end: u64) -> io::Result<()> {
        {
            let st = self.state.read().expect("state");
            if self.loaded == Some((st.active, end, st.seq))
                && self.dir.join(snapshot::FILE).exists()
            {
                // nothing happened since it was read (and if its verification is still
                // running, it goes on; a damaged file is removed by it)
                return Ok(());
            }
        }
        // an index that came from a damaged snapshot is not written out again
        self.index_trusted()?;
        // keys added since the snapshot was mapped join its table (the file holds one);
        // the write lock keeps new ones out until the file is written (at close, nobody
        // else holds the store anyway)
        let mut st = self.state.write().expect("state");
        // a table that grew by doubling can be under half full: the file gets one sized
        // for its keys (1M keys: INDEX 41 MB instead of 56, less to write now and to
        // read after the next boot); the overlay's keys joining it do not double it first
        st.index.merge_and_fit();
        let at = Self::synced_segments(&st, end)?;
        snapshot::write(&self.dir, &st.index, st.seq, &at)
    }

    /// Close without writing `INDEX`: a store opened from it whose changes are all in the
    /// live overlay file (`OVERLAY`: at most 65,536 keys, then they join the table and
    /// `INDEX` is written), and whose log since `INDEX` is at most about `INDEX`'s size
    /// ([`KEEP_OVERLAY_LOG`] to [`KEEP_OVERLAY_LOG_MAX`]), leaves both, settled at `end` with every segment fdatasynced
    /// — the next open takes the overlay back as it does a killed writer's (0.3 ms)
    /// instead of this close rewriting the whole table (72 MB and 80-120 ms for a
    /// million keys, after one put). After a reboot the overlay is not trusted and the
    /// records since `INDEX` are replayed (at most [`KEEP_OVERLAY_LOG_MAX`]). False: the
    /// snapshot is to be written as before.
    fn close_keeping_overlay(&self, end: u64) -> bool {
        // (not waiting for INDEX's verdict: nothing is written from it here — the next
        // open checks it again, as after a killed writer — and a close waiting ~20 ms
        // for a million keys' check would be most of the close)
        let live = |st: &State| st.index.is_mapped() && st.index.is_shared();
        if !self.state.read().is_ok_and(|st| live(&st)) {
            return false;
        }
        let Ok(Some(at)) = snapshot::recorded(&self.dir) else {
            return false;
        };
        let Ok(mut st) = self.state.write() else {
            return false;
        };
        // The log since INDEX stays short too: it is what an open that cannot take the
        // overlay back (after a reboot) replays — keys rewritten over and over keep the
        // overlay small while the log grows.
        let since: u64 = (st.segs.range(at.active..))
            .map(|(id, seg)| {
                let size = match *id == st.active {
                    true => end,
                    false => seg.size.load(Ordering::Relaxed),
                };
                match *id == at.active {
                    true => size.saturating_sub(at.active_off),
                    false => size,
                }
            })
            .sum();
        let index_bytes: u64 = st.index.part_sizes().iter().map(|&n| n as u64).sum();
        if !live(&st) || since > index_bytes.clamp(KEEP_OVERLAY_LOG, KEEP_OVERLAY_LOG_MAX) {
            return false;
        }
        Self::settle_overlay(&mut st, end);
        // (settling lets the file go when the overlay cannot say it all: tombstones,
        // too many segments)
        st.index.is_shared() && Self::synced_segments(&st, end).is_ok()
    }

    /// At close: write the keys in order to `ORDER` for the next open ([`super::order`])
    /// when there is an order that has every key — one a scan made or read, or the one
    /// this open found saved, with the keys inserted since — or remove an `ORDER` left
    /// by another state. Best effort: without the file the next scan sorts.
    fn save_order(&self) {
        let (Ok(mut order), Ok(mut file)) = (self.order.lock(), self.order_file.lock()) else {
            return;
        };
        let Ok(st) = self.state.read() else { return };
        let now = Saved {
            seed: st.index.seed(),
            seq: st.seq,
            keys: st.index.len() as u64,
        };
        let path = self.dir.join(order::FILE);
        if !self.opts.index_snapshot {
            // (without INDEX the next open draws a new hash seed: no state would match)
            let _ = fs::remove_file(&path);
            return;
        }
        let Some(log) = st.index.added.as_ref() else {
            // (the index stopped logging: no order has every key)
            let _ = fs::remove_file(&path);
            return;
        };
        if *file == Some(now) {
            return; // (the file holds this state's keys already: nothing changed)
        }
        if order.is_none() {
            *order = file.and_then(|then| Order::load(&self.dir, then));
        }
        *file = None;
        match order.as_mut() {
            Some(o) => {
                o.absorb(log);
                match o.save(&self.dir, now) {
                    Ok(()) => *file = Some(now),
                    Err(_) => {
                        let _ = fs::remove_file(&path);
                    }
                }
            }
            None => {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// A store that keeps no index snapshot still records, at close, what its segments
    /// hold (`INDEX` of the header alone): a segment cut short or removed outside the
    /// store is then an error at the next open, not keys gone without a word.
    fn write_segment_list(&self, end: u64) -> io::Result<()> {
        let st = self.state.read().expect("state");
        let at = Self::synced_segments(&st, end)?;
        snapshot::write_segments(&self.dir, st.seq, &at)
    }

    /// What INDEX is to record now: every segment with its size (the active one's: `end`),
    /// each fdatasynced first — what INDEX records must never be more than the disk has
    /// (cheap for segments already synced).
    fn synced_segments(st: &State, end: u64) -> io::Result<snapshot::Recorded> {
        let mut segs = Vec::with_capacity(st.segs.len());
        for (id, seg) in &st.segs {
            // SAFETY: seg.fd is open.
            if unsafe { libc::fdatasync(seg.fd) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let size = if *id == st.active {
                end
            } else {
                seg.size.load(Ordering::Relaxed)
            };
            let dead = seg.dead.load(Ordering::Relaxed);
            // (a segment is at most 2 GiB)
            let tombs = seg.tombs.load(Ordering::Relaxed).min(u32::MAX as u64) as u32;
            segs.push((*id, SnapSeg { size, dead, tombs }));
        }
        Ok(snapshot::Recorded {
            active: st.active,
            active_off: end,
            segs,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.forked() {
            // A forked child's copy: its write buffer, index and segment sizes are the
            // parent's as they were at the fork, its mappings of the active segment and
            // of OVERLAY are the parent's own pages. Flushing, sealing or writing INDEX
            // from here would overwrite what the parent wrote since: only let go of the
            // descriptors (the lock's is /dev/null by now, see sys/fork.rs).
            // SAFETY: lock_fd is this process's copy; closing it touches nothing else.
            unsafe { libc::close(self.lock_fd) };
            return;
        }
        self.warm_stop.store(true, Ordering::Relaxed);
        // (it stops at its next 4 MiB chunk: the segments are then the store's alone,
        // unmapped as it closes)
        let warm = self.warm_thread.lock().map(|mut h| h.take());
        if let Ok(Some(h)) = warm {
            let _ = h.join();
        }
        // (read-only: nothing to flush, write or remove)
        if let Some(mut c) = self.commit.lock().ok().filter(|_| !self.opts.read_only) {
            let flushed = self.flush_locked(&mut c, true).is_ok();
            let end = c.write_off;
            if let Some(a) = c.appender.as_mut() {
                a.seal(end);
            }
            c.appender = None;
            let mut kept = false;
            if flushed && self.opts.index_snapshot {
                kept = self.close_keeping_overlay(end);
                if !kept {
                    // best effort: without a snapshot the next open rebuilds the index
                    let _ = self.write_snapshot(end);
                }
            } else if !self.opts.index_snapshot {
                // an older snapshot would go stale as the store changes: replaced by
                // the list of segments alone (or dropped, if that cannot be written)
                if !flushed || self.write_segment_list(end).is_err() {
                    let _ = snapshot::remove(&self.dir);
                }
            }
            if flushed {
                self.save_order();
            }
            if let (false, Ok(mut st)) = (kept, self.state.write()) {
                st.index.detach(); // (a closed store's overlay is in INDEX, if anywhere)
            }
        }
        fork::release_lock(self.lock_fd);
        // SAFETY: lock_fd is ours; closing releases the flock.
        unsafe { libc::close(self.lock_fd) };
        // (the verifier lets go of the index's mapping: it is unmapped as this returns)
        if let Some(c) = &self.index_check {
            c.release();
        }
    }
}

#[cfg(test)]
mod tests;
mod view;
