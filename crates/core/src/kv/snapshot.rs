//! The index snapshot (`INDEX`): the whole in-memory index written out when a store
//! closes, and mapped back in place by the next open — no read, no copy, no rebuild: a
//! store of a million keys opens as fast as an empty one. Replay then covers only the
//! records appended after it.
//!
//! Layout (little-endian; sections start on 4 KiB boundaries, zero padding between):
//! ```text
//! header: "XVX1" u32 version  u64 seed  u64 check  u64 seq  u32 active  u32 nsegs
//!         u64 active_off  u64 buckets  u64 items  u64 deleted  u64 arena_len  u64 dead
//!         u64 ctrl_off  u64 slots_off  u64 arena_off  u64 file_len
//!         u32 crc(ctrl)  u32 crc(slots)  u32 crc(arena)  u32 0
//!         nsegs × (u32 id, u32 0, u64 size, u64 dead)
//!         u32 crc32c of the header before it
//! ctrl:   buckets + 8 control bytes            (at ctrl_off)
//! slots:  buckets × 16-byte entries, every slot (at slots_off)
//! arena:  the key arena                         (at arena_off)
//! ```
//! The header is checked at open (its CRC, the hash function's check value, every
//! offset and length against the file's size); the sections are used where they lie.
//! Their checksums are verified separately ([`Check`]): before open returns for a small
//! file, in a background thread for a large one (a 1M-key snapshot is ~41 MB; at 56 MB
//! it took 20 ms cached, ~50 ms from the disk), which also maps each chunk it has read into the
//! store's mapping, so that the whole index ends up in memory. A store asks for that verdict before it trusts an "absent" answer, a
//! listing or a compaction; a present key is checked against its record anyway.
//! A snapshot is used only if, besides, every segment it lists is still there with the
//! size it recorded (the one it names active may have grown), and every other segment
//! is newer than its active one. Anything else and the store is rebuilt from hint files
//! and segments, as if there were no snapshot. Snapshots of older layouts are ignored
//! the same way (the next close writes this one).

use super::index::{Entry, Index};
use super::mapped::{Arr, Map};
use super::table::valid_buckets;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const FILE: &str = "INDEX";
const MAGIC: &[u8; 4] = b"XVX1";
const VERSION: u32 = 5;
/// Layouts before this one — 3: 24-byte entries; 4: a power-of-two table whose home
/// slot was the hash's low bits. Their header (the same fields) is read for what it
/// records of the segments; their sections are not used (the next close writes this
/// layout).
const OLDER: [u32; 2] = [3, 4];
/// Bytes per slot of the table.
const ENTRY: u64 = std::mem::size_of::<Entry>() as u64;
/// Control bytes beyond the buckets (the table's mirrored first group).
const GROUP: usize = 8;
/// Bytes of the header before its segment list.
pub(crate) const FIXED: usize = 4 + 4 + 8 * 3 + 4 + 4 + 8 * 6 + 8 * 4 + 4 * 4;
const ALIGN: u64 = 4096;
/// Snapshots up to this size are verified before open returns.
const VERIFY_INLINE: u64 = 4 << 20;

/// A segment as the snapshot saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapSeg {
    pub size: u64,
    pub dead: u64,
    /// tombstone bytes (in the 4 bytes after the id, zero in files written before
    /// uringkit counted them: none known)
    pub tombs: u32,
}

pub struct Snapshot {
    pub index: Index,
    pub seq: u64,
    pub active: u32,
    /// Where replay resumes in the active segment.
    pub active_off: u64,
    pub segs: Vec<(u32, SnapSeg)>,
    /// This snapshot's identity (its header's checksum and sequence number): a live
    /// overlay file names the snapshot it was made over.
    pub ident: u64,
    /// The verdict on the sections' checksums (see the module docs).
    pub check: Arc<Check>,
}

/// Checks a closed store left unfinished (see [`Check::run`]), in this process.
pub static ABANDONED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The verification of a mapped snapshot's sections: pending until a background thread
/// has read them, then good or damaged.
pub struct Check {
    /// The verdict is in and it is good (read without the lock: the common case).
    good: AtomicBool,
    verdict: Mutex<Option<Result<(), String>>>,
    done: Condvar,
    /// What to verify (None: decided at open) and the process whose thread does it.
    job: Option<Job>,
    pid: u32,
    /// Held by the verifier while it maps a chunk into the store's mapping (it holds the
    /// mapping meanwhile); `released` is set under it when the store closes. After
    /// that the verifier never takes the mapping again, so the closing store unmaps it
    /// itself — not the verifier a moment later, beside the next open (an unmap of a
    /// populated 70 MB index takes the process's memory-map lock for milliseconds: the
    /// next open's own mappings waited behind it, 1–4 ms instead of 0.04).
    gate: Mutex<bool>,
    /// When the check was handed to a verifier, and whether someone waits for its
    /// verdict (see [`Check::settle`]).
    handed: Mutex<Option<Instant>>,
    hurry: AtomicBool,
}

/// How long a verifier lets a check it was handed lie before it starts reading: a store
/// opened only to be closed again (a command line tool's get, a reopen loop) is then
/// never read at all, and the open's caller has the machine to itself for its first
/// steps. Waiting for the verdict ends the delay at once.
const START_AFTER: Duration = Duration::from_millis(2);

struct Job {
    /// the file, removed if damaged — None for a read-only store, which changes nothing
    /// (and whose writer may have put another `INDEX` at that name since)
    path: Option<PathBuf>,
    file: fs::File,
    layout: Layout,
    /// The store's mapping of the file, populated once verified (if still in use).
    map: std::sync::Weak<Map>,
}

impl Check {
    fn new(verdict: Option<Result<(), String>>, job: Option<Job>) -> Arc<Check> {
        Arc::new(Check {
            good: AtomicBool::new(matches!(verdict, Some(Ok(())))),
            verdict: Mutex::new(verdict),
            done: Condvar::new(),
            job,
            pid: std::process::id(),
            gate: Mutex::new(false),
            handed: Mutex::new(None),
            hurry: AtomicBool::new(false),
        })
    }

    /// Before a verifier starts: let the check lie until [`START_AFTER`] has passed
    /// since it was handed over, unless its store closed or someone waits for it.
    fn settle(&self) {
        let since = *self.handed.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = since else { return };
        while since.elapsed() < START_AFTER
            && !self.hurry.load(Ordering::Acquire)
            && !self.is_released()
        {
            std::thread::sleep(Duration::from_micros(250));
        }
    }

    /// The store that asked for this check is closing: the verifier stops at its next
    /// chunk and no longer touches the store's mapping (see `gate`). Returns once a
    /// chunk being mapped in has been.
    pub fn release(&self) {
        *self.gate.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }

    fn is_released(&self) -> bool {
        *self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Verify now, on this thread; a damaged snapshot is removed (the next open then
    /// rebuilds the index from the segments). `wanted` is asked before each chunk: when
    /// it says no — the store that asked was closed, nobody will read the verdict — the
    /// check stops there, with no verdict and the file left alone (a store reopened in
    /// the same process then opens without the previous verification still reading and
    /// mapping 1 MiB chunks of a file nobody uses beside it).
    fn run(&self, wanted: impl Fn() -> bool) {
        let Some(j) = &self.job else { return };
        // Each chunk the verification reads (sequentially: the kernel reads ahead) is
        // then mapped into the store's mapping, so that the index is in memory and stays
        // there once this is done; lookups meanwhile fault in single pages. (The mapping
        // is looked up per chunk: this thread does not keep a closed store's alive.)
        let mut abandoned = self.is_released() || !wanted();
        let v = match abandoned {
            true => Err(String::new()),
            false => verify(&j.file, j.layout, |off, len| {
                let released = self.gate.lock().unwrap_or_else(|e| e.into_inner());
                if *released || !wanted() {
                    abandoned = true;
                    return false;
                }
                if let Some(m) = j.map.upgrade() {
                    m.populate(off as usize, len);
                }
                true
            }),
        };
        if abandoned {
            ABANDONED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let (Err(_), Some(path)) = (&v, &j.path) {
            let _ = fs::remove_file(path);
        }
        self.good.store(v.is_ok(), Ordering::Release);
        *self.verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        self.done.notify_all();
    }

    /// Wait for the verdict: `Err(what is wrong)` when the snapshot is damaged.
    pub fn wait(&self) -> Result<(), String> {
        if self.good.load(Ordering::Acquire) {
            return Ok(());
        }
        self.hurry.store(true, Ordering::Release);
        if self.pid != std::process::id() && !self.is_done() {
            // a forked child: the verifying thread stayed in the parent
            self.run(|| true);
        }
        let mut g = self.verdict.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = &*g {
                return v.clone();
            }
            g = self.done.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Whether the verdict is in (without waiting).
    pub fn is_done(&self) -> bool {
        if self.good.load(Ordering::Acquire) {
            return true;
        }
        self.verdict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Start verifying, on a verifier thread at low I/O priority (the store's own
    /// reads go first); here if no thread can be started. A no-op when the verdict is in
    /// already (a small snapshot). Called once the store has replayed the records that
    /// follow the snapshot: the replay writes into the mapped table, and every first
    /// write to a page (a copy-on-write fault) costs a TLB shoot-down IPI when another
    /// thread of the process is running — 20–30 ms instead of a few for 7,000 records.
    pub fn start(self: &Arc<Check>) {
        if self.job.is_none() || self.is_done() {
            return;
        }
        *self.handed.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if let Err(me) = verifier::hand_off(self.clone()) {
            me.run(|| true);
        }
    }
}

/// The threads that verify snapshots, fed from one queue. Starting a thread costs
/// 40-60 µs here, a fifth of what the rest of an open after a crash takes, so a thread
/// that finished a check waits a while for the next one (a process reopening stores)
/// before it exits. A store closed and reopened at once finds its previous check still
/// running, about to stop (it was released): its new check waits for that thread rather
/// than starting another one beside it.
mod verifier {
    use super::Check;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Condvar, Mutex, Weak};
    use std::time::Duration;

    /// How long a verifier waits for its next check.
    const IDLE: Duration = Duration::from_secs(10);

    struct Pool {
        queue: VecDeque<Arc<Check>>,
        /// threads waiting for a check
        idle: usize,
        /// the checks being run (weak: `still_wanted` counts the strong references)
        running: Vec<Weak<Check>>,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        queue: VecDeque::new(),
        idle: 0,
        running: Vec::new(),
    });
    static WORK: Condvar = Condvar::new();
    /// The process whose threads these are: a forked child (which has none of them, and
    /// may have inherited the lock held) starts a thread per check instead.
    static OWNER: AtomicU32 = AtomicU32::new(0);

    fn lock() -> std::sync::MutexGuard<'static, Pool> {
        POOL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `check` on a verifier thread; `Err` gives it back when no thread could be
    /// started (the caller then verifies it itself).
    pub fn hand_off(check: Arc<Check>) -> Result<(), Arc<Check>> {
        let pid = std::process::id();
        let owner = match OWNER.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => pid,
            Err(o) => o,
        };
        if owner != pid {
            return spawn(Some(check), false);
        }
        let mut g = lock();
        // (checks whose store closed before they started are dropped: as if abandoned)
        let before = g.queue.len();
        g.queue.retain(|c| !c.is_released());
        let dropped = before - g.queue.len();
        super::ABANDONED.fetch_add(dropped as u64, Ordering::Relaxed);
        g.queue.push_back(check);
        // threads that will be free in a moment: waiting ones, and those whose check's
        // store has been closed (they stop at their next chunk)
        let stopping = g.running.iter().filter(|w| ending(w)).count();
        if g.idle > 0 {
            WORK.notify_one();
            return Ok(());
        }
        if stopping >= g.queue.len() {
            return Ok(());
        }
        let mine = g.queue.pop_back().expect("just pushed");
        drop(g);
        spawn(Some(mine), true)
    }

    /// Whether the check `w` is as good as done: its store closed, or gone.
    fn ending(w: &Weak<Check>) -> bool {
        w.upgrade().is_none_or(|c| c.is_released())
    }

    /// A thread for `first`, which then serves the queue if `serves`.
    fn spawn(first: Option<Arc<Check>>, serves: bool) -> Result<(), Arc<Check>> {
        let mine = first.clone();
        if serves {
            if let Some(c) = &mine {
                lock().running.push(Arc::downgrade(c));
            }
        }
        std::thread::Builder::new()
            .name("uringkit-index".into())
            .spawn(move || {
                // (the store's own reads go first; see background_io)
                crate::sys::fileio::background_io();
                match serves {
                    true => serve(mine),
                    false => {
                        if let Some(c) = mine {
                            c.settle();
                            c.run(|| still_wanted(&c));
                        }
                    }
                }
            })
            .map(|_| ())
            .map_err(|_| {
                if let Some(c) = &first {
                    let me = Arc::downgrade(c);
                    lock().running.retain(|w| !w.ptr_eq(&me));
                }
                first.expect("a check to give back")
            })
    }

    /// Run `first` (listed as running), then queued checks, waiting up to `IDLE` for
    /// each; exit when none comes. Between two checks the thread goes from running to
    /// waiting under one hold of the lock: a check handed off meanwhile finds it one or
    /// the other, never neither (which would start another thread).
    fn serve(first: Option<Arc<Check>>) {
        let mut next = first;
        loop {
            let mut g = match next.take() {
                Some(c) => {
                    c.settle();
                    c.run(|| still_wanted(&c));
                    let me = Arc::downgrade(&c);
                    drop(c);
                    let mut g = lock();
                    g.running.retain(|w| !w.ptr_eq(&me));
                    g
                }
                None => lock(),
            };
            loop {
                if let Some(c) = g.queue.pop_front() {
                    g.running.push(Arc::downgrade(&c));
                    next = Some(c);
                    break;
                }
                g.idle += 1;
                let (back, timeout) = WORK
                    .wait_timeout(g, IDLE)
                    .unwrap_or_else(|e| e.into_inner());
                g = back;
                g.idle -= 1;
                if timeout.timed_out() && g.queue.is_empty() {
                    return;
                }
            }
        }
    }

    /// Whether anyone but the verifier still holds `check` (the store that asked for it:
    /// once it is closed, nobody reads the verdict).
    fn still_wanted(check: &Arc<Check>) -> bool {
        Arc::strong_count(check) > 1
    }
}

fn round_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Write `INDEX` atomically (temporary file, fdatasync, rename). The segments it
/// describes must already be durable: a snapshot never points at data the disk might
/// not have.
pub fn write(dir: &Path, index: &Index, seq: u64, at: &Recorded) -> io::Result<()> {
    write_parts(dir, &index.to_parts(), seq, at)
}

/// [`write`] from the index's parts (a copy of them, taken under the store's locks, can
/// be written after they are released).
pub fn write_parts(
    dir: &Path,
    p: &super::index::Parts<'_>,
    seq: u64,
    at: &Recorded,
) -> io::Result<()> {
    let Recorded {
        active,
        active_off,
        ref segs,
    } = *at;
    let buckets = (p.ctrl.len() - GROUP) as u64;
    let arena_len = (p.arena[0].len() + p.arena[1].len()) as u64;
    let head_len = (FIXED + segs.len() * 24 + 4) as u64;
    let ctrl_off = round_up(head_len);
    let slots_off = round_up(ctrl_off + p.ctrl.len() as u64);
    let arena_off = round_up(slots_off + p.slots.len() as u64);
    let file_len = arena_off + arena_len;
    let crc_arena = crc32c::crc32c_append(crc32c::crc32c(p.arena[0]), p.arena[1]);
    let head = head_bytes(
        [p.seed, p.check, seq],
        active,
        [
            active_off, buckets, p.items, p.deleted, arena_len, p.dead, ctrl_off, slots_off,
            arena_off, file_len,
        ],
        [crc32c::crc32c(p.ctrl), crc32c::crc32c(p.slots), crc_arena],
        segs,
    );
    debug_assert_eq!(head.len() as u64, head_len);
    install(
        dir,
        &[
            (0, &head[..]),
            (ctrl_off, p.ctrl),
            (slots_off, p.slots),
            (arena_off, p.arena[0]),
            (arena_off + p.arena[0].len() as u64, p.arena[1]),
        ],
    )
}

/// Write an `INDEX` of the header alone: what the segments held (sizes, the active
/// one's synced end), no table — for a store that keeps no snapshot, so that a
/// segment cut short or removed outside it is still found at open ([`recorded`]). Its
/// table of 0 buckets is one that [`load`] (of every version) declines: the index is
/// rebuilt from the segments.
pub fn write_segments(dir: &Path, seq: u64, at: &Recorded) -> io::Result<()> {
    let file_len = (FIXED + at.segs.len() * 24 + 4) as u64;
    let mut fields = [0u64; 10];
    fields[0] = at.active_off;
    fields[9] = file_len;
    let head = head_bytes([0, 0, seq], at.active, fields, [0; 3], &at.segs);
    install(dir, &[(0, &head[..])])
}

/// `INDEX`'s header: magic, version, (seed, check, seq), the active segment, the
/// segment count, (active_off, buckets, items, deleted, arena_len, dead, ctrl_off,
/// slots_off, arena_off, file_len), the sections' CRCs, the segments, its own CRC.
fn head_bytes(
    ids: [u64; 3],
    active: u32,
    fields: [u64; 10],
    crcs: [u32; 3],
    segs: &[(u32, SnapSeg)],
) -> Vec<u8> {
    let mut head = Vec::with_capacity(FIXED + segs.len() * 24 + 4);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    for v in ids {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.extend_from_slice(&active.to_le_bytes());
    head.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    for v in fields {
        head.extend_from_slice(&v.to_le_bytes());
    }
    for v in [crcs[0], crcs[1], crcs[2], 0] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    for (id, s) in segs {
        head.extend_from_slice(&id.to_le_bytes());
        head.extend_from_slice(&s.tombs.to_le_bytes());
        head.extend_from_slice(&s.size.to_le_bytes());
        head.extend_from_slice(&s.dead.to_le_bytes());
    }
    let crc = crc32c::crc32c(&head);
    head.extend_from_slice(&crc.to_le_bytes());
    head
}

/// Write `parts` (file offset, bytes; in order, zeros between) to `INDEX` atomically.
fn install(dir: &Path, parts: &[(u64, &[u8])]) -> io::Result<()> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    // Durable before it replaces the old one: open maps it without reading it through,
    // so a file torn by a power loss must not be what the name points at.
    // (a failure — a full disk — removes the partial file: it would hold the space)
    crate::sys::fileio::write_synced(&tmp, parts)
        .and_then(|()| fs::rename(&tmp, dir.join(FILE)))
        .inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
}

/// Remove the snapshot (before anything that would make it stale, such as compaction).
pub fn remove(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Map `INDEX` if there is one whose header holds; `Ok(None)` when absent or unusable.
/// `owner`: the store's writer, which removes it if its verification finds it damaged.
pub fn load(dir: &Path, owner: bool) -> io::Result<Option<Snapshot>> {
    let f = match fs::File::open(dir.join(FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(read(dir, f, owner).ok().flatten())
}

/// Where the sections are, from a header that passed its checks.
#[derive(Clone, Copy)]
struct Layout {
    buckets: u64,
    ctrl_off: u64,
    slots_off: u64,
    arena_off: u64,
    arena_len: u64,
    crcs: [u32; 3],
    items: u64,
    deleted: u64,
}

/// A header that passed its checksum: everything but the sections.
struct Head {
    version: u32,
    seed: u64,
    check_value: u64,
    seq: u64,
    active: u32,
    active_off: u64,
    buckets: u64,
    items: u64,
    deleted: u64,
    arena_len: u64,
    dead: u64,
    ctrl_off: u64,
    slots_off: u64,
    arena_off: u64,
    file_len: u64,
    crcs: [u32; 3],
    head_len: usize,
    ident: u64,
    segs: Vec<(u32, SnapSeg)>,
}

/// The header of `f` (`total` bytes long), if it is this layout's and its checksum holds.
fn read_head(f: &fs::File, total: u64) -> io::Result<Option<Head>> {
    if total < (FIXED + 4) as u64 || total > isize::MAX as u64 {
        return Ok(None);
    }
    // The header with one read (a fault on the mapping would read ahead far more than
    // this when the file is not cached: the rest is left to the pages lookups touch).
    let mut head = vec![0u8; (FIXED + 4 + 64 * 24).min(total as usize)];
    f.read_exact_at(&mut head, 0)?;
    let fixed = &head[..FIXED];
    let version = u32_at(fixed, 4);
    if &fixed[0..4] != MAGIC || (version != VERSION && !OLDER.contains(&version)) {
        return Ok(None);
    }
    let nsegs = u32_at(fixed, 36) as usize;
    let head_len = FIXED + nsegs * 24;
    if nsegs > 1 << 20 || (head_len + 4) as u64 > total {
        return Ok(None);
    }
    if head.len() < head_len + 4 {
        head.resize(head_len + 4, 0);
        f.read_exact_at(&mut head, 0)?;
    }
    let b = &head[..];
    if crc32c::crc32c(&b[..head_len]) != u32_at(b, head_len) {
        return Ok(None);
    }
    let g = |i: usize| u64_at(b, 40 + 8 * i);
    let seq = u64_at(b, 24);
    let segtab = &b[FIXED..head_len];
    let segs = (0..nsegs)
        .map(|i| {
            let at = i * 24;
            (
                u32_at(segtab, at),
                SnapSeg {
                    size: u64_at(segtab, at + 8),
                    dead: u64_at(segtab, at + 16),
                    tombs: u32_at(segtab, at + 4),
                },
            )
        })
        .collect();
    Ok(Some(Head {
        version,
        seed: u64_at(b, 8),
        check_value: u64_at(b, 16),
        seq,
        active: u32_at(b, 32),
        active_off: g(0),
        buckets: g(1),
        items: g(2),
        deleted: g(3),
        arena_len: g(4),
        dead: g(5),
        ctrl_off: g(6),
        slots_off: g(7),
        arena_off: g(8),
        file_len: g(9),
        crcs: [u32_at(b, 120), u32_at(b, 124), u32_at(b, 128)],
        head_len,
        ident: (u32_at(b, head_len) as u64) << 32 ^ seq,
        segs,
    }))
}

/// What the segments held when `INDEX` was written.
pub struct Recorded {
    /// the segment that was being appended to, and how far its records were synced
    pub active: u32,
    pub active_off: u64,
    /// every segment with the size it had
    pub segs: Vec<(u32, SnapSeg)>,
}

/// [`Recorded`] from the header of `INDEX` alone (whose own checksum holds, whatever the
/// state of the sections). `None` when there is no such file or it is not of this layout.
pub fn recorded(dir: &Path) -> io::Result<Option<Recorded>> {
    let f = match fs::File::open(dir.join(FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let total = f.metadata()?.len();
    Ok(read_head(&f, total).ok().flatten().map(|h| Recorded {
        active: h.active,
        active_off: h.active_off,
        segs: h.segs,
    }))
}

fn read(dir: &Path, f: fs::File, owner: bool) -> io::Result<Option<Snapshot>> {
    let total = f.metadata()?.len();
    let Some(h) = read_head(&f, total)?.filter(|h| h.version == VERSION) else {
        return Ok(None);
    };
    let Head {
        version: _,
        seed,
        check_value,
        seq,
        active,
        active_off,
        buckets,
        items,
        deleted,
        arena_len,
        dead,
        ctrl_off,
        slots_off,
        arena_off,
        file_len,
        crcs,
        head_len,
        ident,
        segs,
    } = h;
    let ctrl_len = buckets.checked_add(GROUP as u64);
    let slots_len = buckets.checked_mul(ENTRY);
    let fits = |off: u64, len: Option<u64>| {
        len.and_then(|l| off.checked_add(l))
            .is_some_and(|e| e <= total)
    };
    if file_len != total
        || !usize::try_from(buckets).is_ok_and(valid_buckets)
        || ctrl_off < (head_len + 4) as u64
        || !fits(ctrl_off, ctrl_len)
        || slots_off < ctrl_off + ctrl_len.unwrap_or(u64::MAX)
        || !fits(slots_off, slots_len)
        || arena_off < slots_off + slots_len.unwrap_or(u64::MAX)
        || !fits(arena_off, Some(arena_len))
        || Index::check_for(seed) != check_value
    {
        return Ok(None);
    }
    let map = Map::private(f.as_raw_fd(), total as usize)?;
    // lookups fault in single pages; the verification's sequential reads (below) bring
    // the whole file into the page cache meanwhile
    map.advise_random();
    let lay = Layout {
        buckets,
        ctrl_off,
        slots_off,
        arena_off,
        arena_len,
        crcs,
        items,
        deleted,
    };
    // SAFETY: u8 and Entry (repr(C) integers, no padding) accept any bytes; the three
    // sections do not overlap (each starts after the previous one ends, checked above).
    let arrays = unsafe {
        (
            Arr::<u8>::mapped(&map, ctrl_off as usize, (buckets + GROUP as u64) as usize),
            Arr::<Entry>::mapped(&map, slots_off as usize, buckets as usize),
            Arr::<u8>::mapped(&map, arena_off as usize, arena_len as usize),
        )
    };
    let (Some(ctrl), Some(slots), Some(arena)) = arrays else {
        return Ok(None);
    };
    let check = if total <= VERIFY_INLINE {
        // small: verified before open returns
        Check::new(Some(verify(&f, lay, |_, _| true)), None)
    } else {
        let job = Job {
            path: owner.then(|| dir.join(FILE)),
            file: f,
            layout: lay,
            map: Arc::downgrade(&map),
        };
        // (started by the store once it has replayed what follows the snapshot: see
        // Check::start)
        Check::new(None, Some(job))
    };
    drop(map); // (the arrays keep the mapping)
    Ok(
        Index::from_parts(seed, check_value, ctrl, slots, arena, dead, items, deleted).map(
            |index| Snapshot {
                index,
                seq,
                active,
                active_off,
                segs,
                ident,
                check,
            },
        ),
    )
}

/// The sections' checksums and the control bytes' consistency, read from the file (not
/// from the store's private mapping, which may already hold its own writes) in chunks,
/// so that a verification running in the background does not hold the disk for long.
/// `read(off, len)` is called after each chunk is read.
fn verify(f: &fs::File, l: Layout, mut read: impl FnMut(u64, usize) -> bool) -> Result<(), String> {
    let io = |e: io::Error| format!("it could not be read ({})", crate::text::io_error(&e));
    let mut ctrl = vec![0u8; (l.buckets + GROUP as u64) as usize];
    f.read_exact_at(&mut ctrl, l.ctrl_off).map_err(io)?;
    if !read(l.ctrl_off, ctrl.len()) {
        return Err("the check was abandoned".into());
    }
    let crcs = [
        crc32c::crc32c(&ctrl),
        crc_of(f, l.slots_off, l.buckets * ENTRY, &mut read).map_err(io)?,
        crc_of(f, l.arena_off, l.arena_len, &mut read).map_err(io)?,
    ];
    for ((what, got), want) in ["control bytes", "entries", "keys"]
        .iter()
        .zip(crcs)
        .zip(l.crcs)
    {
        if got != want {
            return Err(format!("its {what} fail their checksum"));
        }
    }
    match super::table::count_ctrl(&ctrl, l.buckets as usize) {
        Some((items, deleted)) if items as u64 == l.items && deleted as u64 == l.deleted => Ok(()),
        _ => Err("its control bytes do not match its counts".into()),
    }
}

/// CRC32C of `len` bytes of `f` at `off`, read 1 MiB at a time (`read` after each).
fn crc_of(
    f: &fs::File,
    mut off: u64,
    len: u64,
    read: &mut impl FnMut(u64, usize) -> bool,
) -> io::Result<u32> {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let (mut crc, end) = (0, off + len);
    while off < end {
        let n = ((end - off) as usize).min(buf.len());
        f.read_exact_at(&mut buf[..n], off)?;
        if !read(off, n) {
            return Err(io::Error::other("the check was abandoned"));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        off += n as u64;
    }
    Ok(crc)
}
