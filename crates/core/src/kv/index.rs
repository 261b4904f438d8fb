//! The key → position index, in native memory: keys live back to back in one arena
//! (`[u32 len][bytes]`), a [`Table`] holds 16-byte entries pointing into it. Overhead per
//! key beyond the key itself: 4 (length) + up to 3 (alignment) + (16 + 1 control byte) /
//! load, 23–46 bytes (39.7 resident per key measured at 1M keys) — no Python
//! object per key. The hash is seeded per store and stable
//! across processes, so the whole index can be written out and read back (see
//! [`Index::to_parts`]) instead of rebuilt key by key.

use super::mapped::{Arr, Grow, Map};
use super::overlay::{self, Shared};
use super::table::{Growth, Prepared, Table};
use foldhash::fast::FixedState;
use std::hash::BuildHasher;
use std::sync::Arc;

/// Where a key's latest record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    /// Value length; `TOMBSTONE` for a delete seen during recovery.
    pub val_len: u32,
    /// Offset of the record (its header) in the segment.
    pub off: u64,
}

pub const TOMBSTONE: u32 = u32::MAX;

impl Loc {
    pub fn is_tombstone(&self) -> bool {
        self.val_len == TOMBSTONE
    }
}

/// 16 bytes: the key's position in the arena (in 4-byte units: arenas up to 16 GiB) and
/// the location with a 32-bit offset (segments are at most 2 GiB). No sequence number:
/// only recovery compares them, and keeps them aside meanwhile (see `Index::seqs`).
/// `repr(C)` without padding: the table is written to disk as raw bytes.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub struct Entry {
    key_at4: u32,
    seg: u32,
    val_len: u32,
    off: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 16);

// SAFETY: Entry is repr(C), four u32s, no padding: all-zero bytes are a valid Entry.
unsafe impl super::table::Zeroed for Entry {}

impl Entry {
    /// `n` zeroed entries (in memory hinted for huge pages, not written twice).
    pub fn zeroed(n: usize) -> Vec<Entry> {
        super::table::zeroed_vec(n)
    }

    fn new(at: usize, loc: Loc) -> Entry {
        let mut e = Entry {
            key_at4: (at / 4) as u32,
            ..Entry::default()
        };
        e.set_loc(loc);
        e
    }
    fn at(&self) -> u64 {
        self.key_at4 as u64 * 4
    }
    fn loc(&self) -> Loc {
        Loc {
            seg: self.seg,
            val_len: self.val_len,
            off: self.off as u64,
        }
    }
    fn set_loc(&mut self, l: Loc) {
        self.seg = l.seg;
        self.val_len = l.val_len;
        self.off = l.off as u32;
    }
}

impl super::table::Slot for Entry {
    fn empty_slots(n: usize) -> Vec<Entry> {
        Entry::zeroed(n)
    }
}

/// A probe's key comparison: does `e` hold `key`?
fn eq_at<'a>(arena: &'a Arena, key: &'a [u8]) -> impl Fn(&Entry) -> bool + 'a {
    move |e| arena.key(e.at()) == key
}

/// What [`Index::put_with`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    Inserted,
    Replaced(Loc),
    /// An entry with a higher sequence number was kept.
    Ignored,
}

/// Drop an overlay table that has merged: off the put path when it is large, or when it
/// is the mapping of a removed shared file (the unmapping frees the file's pages).
fn drop_overlay(old: Table<Entry>) {
    let bytes = if old.is_mapped() {
        usize::MAX
    } else {
        old.memory()
    };
    super::table::drop_in_background(old, bytes);
}

/// Largest arena the 32-bit (4-byte unit) key positions can address.
pub const MAX_ARENA: usize = (u32::MAX as usize) * 4;

/// The parts of an index, as written to and read from a snapshot file.
pub struct Parts<'a> {
    pub seed: u64,
    /// The hash of a fixed key under `seed`: a snapshot written by a build whose hash
    /// function differs is detected and rebuilt, never misread.
    pub check: u64,
    pub ctrl: &'a [u8],
    pub slots: &'a [u8],
    /// The key arena, in two pieces (written one after the other).
    pub arena: [&'a [u8]; 2],
    pub dead: u64,
    /// Full and deleted slots of the table.
    pub items: u64,
    pub deleted: u64,
}

const CHECK_KEY: &[u8] = b"uringkit xkv index";

/// Keys back to back (`[u32 len][bytes]` at 4-byte boundaries): a fixed `base` (mapped
/// from a snapshot, or empty) followed by a growable heap `tail`. Positions run across
/// both.
pub struct Arena {
    base: Arr<u8>,
    tail: Tail,
}

/// The arena's growable part: on the heap, or a fixed-size region of the live overlay
/// file ([`overlay`]) while the overlay lives there.
enum Tail {
    Heap(Grow),
    Shared {
        _map: Arc<Map>,
        ptr: *mut u8,
        len: usize,
        cap: usize,
    },
}

// SAFETY: a Shared tail is memory of a mapping this value keeps alive and no one else
// writes (the overlay hands its tail region out once); accessed like the Vec variant,
// through &self / &mut self.
unsafe impl Send for Tail {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for Tail {}

impl Tail {
    fn as_slice(&self) -> &[u8] {
        match self {
            Tail::Heap(v) => v.as_slice(),
            // SAFETY: ptr..ptr+len lies in the mapping `_map` keeps alive (len <= cap).
            Tail::Shared { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }

    fn len(&self) -> usize {
        match self {
            Tail::Heap(v) => v.len(),
            Tail::Shared { len, .. } => *len,
        }
    }

    fn capacity(&self) -> usize {
        match self {
            Tail::Heap(v) => v.capacity(),
            Tail::Shared { cap, .. } => *cap,
        }
    }

    fn extend(&mut self, b: &[u8]) {
        match self {
            Tail::Heap(v) => v.extend_from_slice(b),
            Tail::Shared { ptr, len, cap, .. } => {
                assert!(*len + b.len() <= *cap, "overlay key space checked before");
                // SAFETY: [len, len + b.len()) lies within cap bytes of the mapping.
                unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ptr.add(*len), b.len()) };
                *len += b.len();
            }
        }
    }

    fn reserve(&mut self, more: usize) {
        if let Tail::Heap(v) = self {
            v.reserve(more);
        }
    }

    fn to_heap(&self) -> Tail {
        Tail::Heap(Grow::from_slice(self.as_slice()))
    }
}

impl Arena {
    fn heap(tail: Grow) -> Arena {
        Arena {
            base: Vec::new().into(),
            tail: Tail::Heap(tail),
        }
    }

    fn len(&self) -> usize {
        self.base.len() + self.tail.len()
    }

    /// The key stored at `at`; empty if `at` is not inside the arena (only a damaged
    /// snapshot could point there: the lookup then simply does not match).
    fn key(&self, at: u64) -> &[u8] {
        let at = at as usize;
        let (part, at) = match at.checked_sub(self.base.len()) {
            None => (&self.base[..], at),
            Some(t) => (self.tail.as_slice(), t),
        };
        let Some(n) = part.get(at..at + 4) else {
            return &[];
        };
        let n = u32::from_le_bytes(n.try_into().expect("4")) as usize;
        part.get(at + 4..at + 4 + n).unwrap_or(&[])
    }

    fn ptr_at(&self, at: u64) -> *const u8 {
        let at = at as usize;
        match at.checked_sub(self.base.len()) {
            None => self.base.as_ptr().wrapping_add(at),
            Some(t) => self.tail.as_slice().as_ptr().wrapping_add(t),
        }
    }

    /// Append `[u32 len][key]` at a 4-byte boundary; returns its position.
    fn push(&mut self, key: &[u8]) -> usize {
        if self.tail.capacity() - self.tail.len() < key.len() + 7 {
            self.reserve(key.len() + 7);
        }
        let pad = self.len().next_multiple_of(4) - self.len();
        self.tail.extend(&[0; 3][..pad]);
        let at = self.len();
        self.tail.extend(&(key.len() as u32).to_le_bytes());
        self.tail.extend(key);
        at
    }

    /// Room for `more` bytes (a heap tail doubles its mapping when it must: see
    /// [`Grow`] — no bytes are copied).
    fn reserve(&mut self, more: usize) {
        self.tail.reserve(more);
    }

    /// Bytes the arena holds room for without growing.
    fn capacity(&self) -> usize {
        self.base.len()
            + match &self.tail {
                Tail::Heap(v) => v.capacity(),
                Tail::Shared { cap, .. } => *cap,
            }
    }

    fn bytes_used(&self) -> usize {
        self.base.bytes_used()
            + match &self.tail {
                Tail::Heap(v) => v.capacity(),
                Tail::Shared { len, .. } => *len,
            }
    }
}

pub struct Index {
    table: Table<Entry>,
    /// Keys written while `table` is still the mapped snapshot. Writing them there would
    /// copy a page of the mapping on each first write to it (a copy-on-write fault, ~3 µs
    /// here: replaying the 7,000 records a killed writer left after the snapshot cost
    /// 18–25 ms that way); they live here — on the heap, or in the shared `OVERLAY`
    /// file (see `shared`) — until [`Index::merge_overlay`]
    /// (before a snapshot is written, or once it holds `OVERLAY_MAX` keys). An entry here
    /// wins over the table's for the same key (it *shadows* it; both share the key's
    /// arena position): lookups look here first.
    over: Table<Entry>,
    /// Overlay entries that shadow a table entry.
    shadows: usize,
    arena: Arena,
    dead: usize,
    seed: u64,
    hasher: FixedState,
    tombstones: usize,
    /// Arena positions of keys whose entry became a tombstone during recovery (purged by
    /// key afterwards, instead of a pass over the whole table).
    tombstoned: Vec<u64>,
    /// While the table is the mapped snapshot unchanged but for erased entries: the
    /// slots erased, in order (replaying them on the snapshot gives this table back).
    /// `None` once the table was changed otherwise (merged into, rehashed, rebuilt).
    erased: Option<Vec<u32>>,
    /// The live overlay file, while the overlay, its keys and `erased` live there (see
    /// [`overlay`]): every change makes it "busy" until [`Index::settle`].
    shared: Option<Shared>,
    /// During a recovery that compares sequence numbers (segments replayed in an order
    /// that is not the records' — compaction outputs among them): the sequence number
    /// of each entry put with one, by arena position. An entry without one (from a
    /// snapshot, which only ever precedes what is replayed after it) counts as older.
    /// Dropped by [`Index::end_recovery`]: entries keep no sequence number (8 bytes a
    /// slot: 16 MB of a million keys' table).
    seqs: Option<Seqs>,
    /// While the overlay merges into the table a few entries at a time (it reached
    /// [`OVERLAY_MAX`] keys): the next overlay slot to move. Meanwhile puts go to the
    /// table, taking the key's overlay entry along first; nothing new enters the overlay.
    merging: Option<usize>,
    /// The heap key tail the shared overlay's keys will move to when it is detached,
    /// made ahead (see [`Index::prepare_tail`]).
    tail_ahead: Option<Prepared<Grow>>,
    /// While a read-only store with live snapshot views replays what the writer
    /// appended (see `Store::refresh`): each key put or removed, with the entry a lookup
    /// saw before (None: absent or a tombstone), in order. Off (`None`) otherwise.
    pub(crate) journal: Option<Vec<(Vec<u8>, Option<Loc>)>>,
    /// Once a range scan has sorted the keys (`super::order`): the keys inserted since
    /// the scans last took them in, as a key log ([`super::order::log_push`]). Dropped
    /// (`None`: the next scan sorts afresh) past [`added_max`] bytes.
    pub(crate) added: Option<Vec<u8>>,
}

/// Bytes of inserted keys the index logs for range scans, beyond which it stops (8 bytes
/// a key of the index, at least 4 MiB): the next scan sorts every key again instead.
fn added_max(keys: usize) -> usize {
    (4 << 20).max(keys.saturating_mul(8))
}

/// Keys before the overlay reaches [`OVERLAY_MAX`] at which the heap tail it will need is
/// made ahead.
const TAIL_AHEAD: usize = 4096;

/// Overlay slots moved into the table per put while it merges (half of them hold an
/// entry, at most: ~8 keys a put, 8,192 puts for 65,536 keys).
const MERGE_STEP: usize = 16;

/// Sequence numbers kept aside during a recovery (see `Index::seqs`), by arena position.
/// Where keys are short, in an array with a slot per 4-byte unit of the arena: new keys
/// are appended to the arena, so their numbers are written one after the other — a
/// hash map took a cache miss per record (1M records: 95 → 195 ms to rebuild). Where
/// keys are long the array would be mostly holes: a hash map then.
enum Seqs {
    /// `seq + 1` at `at / 4` (0: none)
    Dense(Vec<u64>),
    Sparse(std::collections::HashMap<u64, u64, FixedState>),
}

/// Arena units per key past which [`Seqs::Dense`] turns into [`Seqs::Sparse`]: keys
/// averaging over ~28 bytes (the array's 64 bytes per key would rival the table).
const DENSE_UNITS_PER_KEY: usize = 8;

/// Past this many tombstones, purging passes over the whole table instead.
const TOMBSTONED_MAX: usize = 1 << 16;

/// Invariants: `tombstones` counts the tombstone entries a lookup can see (a shadowed
/// table entry is not one), so the live keys are `table.len() + over.len() - shadows -
/// tombstones`.
///
/// The overlay is merged into the table once it holds this many keys (a long-running
/// store then pays the copy-on-write faults once, in one go, not on every lookup miss).
pub(crate) const OVERLAY_MAX: usize = 1 << 16;

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

/// A seed that differs per store (hash flooding with chosen keys stays impractical).
fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        u64::from_le_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ (std::process::id() as u64) << 32
    }
}

impl Index {
    pub fn new() -> Self {
        Self::with_seed(random_seed())
    }

    pub fn with_seed(seed: u64) -> Self {
        Index {
            table: Table::new(),
            over: Table::new(),
            shadows: 0,
            // position 0 is never a key: keeps a zeroed entry from looking valid
            arena: Arena::heap(Grow::from_slice(&[0; 4])),
            dead: 0,
            seed,
            hasher: FixedState::with_seed(seed),
            tombstones: 0,
            tombstoned: Vec::new(),
            erased: None,
            shared: None,
            seqs: None,
            merging: None,
            tail_ahead: None,
            journal: None,
            added: None,
        }
    }

    /// The seed of the index's hash (per store, kept across opens by `INDEX`).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The hash `*_hashed` methods take (computing it ahead lets a caller prefetch).
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Prefetch where `hash`'s entry lives: callers applying many keys warm a few keys
    /// ahead, so the table's cache misses overlap instead of queueing one by one.
    pub fn warm(&self, hash: u64) {
        self.table.warm(hash);
    }

    /// Room for `keys` entries and `arena` bytes of keys without rehashing.
    pub fn reserve(&mut self, keys: usize, arena: usize) {
        self.reserve_as(Growth::Double, keys, arena);
    }

    /// [`Index::reserve`] for a rebuild: the table about half full once the keys are in
    /// (see [`Growth::Sparse`]).
    pub fn reserve_for_rebuild(&mut self, keys: usize, arena: usize) {
        self.reserve_as(Growth::Sparse, keys, arena);
    }

    fn reserve_as(&mut self, growth: Growth, keys: usize, arena: usize) {
        self.shared_room(keys, arena, 0);
        let (hasher, ar) = (&self.hasher, &self.arena);
        // (new keys go to the overlay while the table is the mapped snapshot, unless the
        // overlay is merging into it)
        let (t, growth) = match self.table.is_mapped() && self.merging.is_none() {
            true => (&mut self.over, growth),
            // (the table grows in steps: no put waits for a rehash of all of it)
            false if growth == Growth::Double => (&mut self.table, Growth::Steps),
            false => (&mut self.table, growth),
        };
        t.reserve_as(
            growth,
            keys,
            |e| hasher.hash_one(ar.key(e.at())),
            |e| super::table::prefetch(ar.ptr_at(e.at())),
        );
        self.arena.reserve(arena);
    }

    fn key_at(arena: &Arena, at: u64) -> &[u8] {
        arena.key(at)
    }

    /// Live keys (tombstones excluded).
    pub fn len(&self) -> usize {
        self.table.len() + self.over.len() - self.shadows - self.tombstones
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &[u8]) -> Option<Loc> {
        self.get_hashed(key, self.hash(key))
    }

    /// [`Index::get`] with the key's [`Index::hash`] computed by the caller.
    pub fn get_hashed(&self, key: &[u8], h: u64) -> Option<Loc> {
        let arena = &self.arena;
        let eq = |e: &Entry| Self::key_at(arena, e.at()) == key;
        let over = match self.over.is_empty() {
            true => None,
            false => self.over.find(h, eq).map(|i| self.over.get(i).loc()),
        };
        over.or_else(|| self.table.find(h, eq).map(|i| self.table.get(i).loc()))
            .filter(|l| !l.is_tombstone())
    }

    /// Insert or replace. With a sequence number (`seq`) after [`Index::track_seqs`]
    /// (recovery: segments replayed in any order), an existing entry put with a higher
    /// one wins. Returns the replaced location.
    pub fn put(&mut self, key: &[u8], loc: Loc, seq: Option<u64>) -> Option<Loc> {
        match self.put_with(key, loc, seq) {
            Put::Replaced(old) => Some(old),
            Put::Inserted | Put::Ignored => None,
        }
    }

    /// [`Index::put`], saying whether the entry was new, replaced or (`seq`) kept.
    pub fn put_with(&mut self, key: &[u8], loc: Loc, seq: Option<u64>) -> Put {
        let h = self.hash(key);
        self.put_hashed(key, h, loc, seq)
    }

    /// A recovery that replays segments in an order that is not their records' (from
    /// the segments and hint files alone: compaction outputs among them) begins: puts
    /// with a sequence number keep the newest from here on. (After a snapshot, what is
    /// replayed only ever follows it: no need.)
    pub fn track_seqs(&mut self) {
        self.seqs = Some(Seqs::Dense(Vec::new()));
    }

    /// A recovery is over: the sequence numbers it kept aside go (see `seqs`).
    pub fn end_recovery(&mut self) {
        self.seqs = None;
    }

    /// Whether a put with sequence number `seq` over the entry at arena position `at`
    /// loses to it (recovery only).
    fn older(&self, at: u64, seq: Option<u64>) -> bool {
        match (seq, &self.seqs) {
            (Some(seq), Some(Seqs::Dense(v))) => v
                .get((at / 4) as usize)
                .is_some_and(|&s| s > seq.saturating_add(1)),
            (Some(seq), Some(Seqs::Sparse(m))) => m.get(&at).is_some_and(|&s| s > seq),
            _ => false,
        }
    }

    /// Note `seq` as the entry's at arena position `at` (recovery only).
    #[inline(always)]
    fn note_seq(&mut self, at: u64, seq: Option<u64>) {
        // (only while a recovery tracks them: a put's call costs a test, not a call)
        if let (Some(seq), true) = (seq, self.seqs.is_some()) {
            self.note_seq_tracked(at, seq);
        }
    }

    #[inline(never)]
    fn note_seq_tracked(&mut self, at: u64, seq: u64) {
        let i = (at / 4) as usize;
        let (units, keys) = (self.arena.len() / 4 + 1, self.table.len() + self.over.len());
        // (the arena's capacity, as far as a dense array is worth it for the keys the
        // table has room for)
        let room = self.table.len() + self.table.room();
        let cap_units = (self.arena.capacity() / 4 + 1).min(DENSE_UNITS_PER_KEY * (room + 4096));
        let hasher = self.hasher;
        let Some(seqs) = self.seqs.as_mut() else {
            return;
        };
        if let Seqs::Dense(v) = seqs {
            if i >= v.len() {
                if units > DENSE_UNITS_PER_KEY * (keys + 4096) {
                    let m = v
                        .iter()
                        .enumerate()
                        .filter(|(_, &s)| s != 0)
                        .map(|(j, &s)| (j as u64 * 4, s - 1));
                    let mut map = std::collections::HashMap::with_hasher(hasher);
                    map.extend(m);
                    *seqs = Seqs::Sparse(map);
                } else {
                    // (to the arena's capacity at once: recovery reserves it ahead)
                    let want = units.max(cap_units).max(i + 1).max(v.len() * 3 / 2);
                    let mut grown: Vec<u64> = super::table::zeroed_vec(want);
                    grown[..v.len()].copy_from_slice(v);
                    *v = grown;
                }
            }
        }
        match seqs {
            Seqs::Dense(v) => v[i] = seq.saturating_add(1),
            Seqs::Sparse(m) => {
                m.insert(at, seq);
            }
        }
    }

    /// [`Index::put_with`] with the key's [`Index::hash`] computed by the caller.
    pub fn put_hashed(&mut self, key: &[u8], h: u64, loc: Loc, seq: Option<u64>) -> Put {
        let put = self.put_hashed_in(key, h, loc, seq);
        if put == Put::Inserted {
            if let Some(log) = &mut self.added {
                super::order::log_push(log, key);
                if log.len() > added_max(self.len()) {
                    self.added = None;
                }
            }
        }
        put
    }

    fn put_hashed_in(&mut self, key: &[u8], h: u64, loc: Loc, seq: Option<u64>) -> Put {
        if self.journal.is_some() {
            self.log_before(key, h);
        }
        if self.merging.is_some() {
            self.merge_step(MERGE_STEP);
            if self.merging.is_some() {
                // the key's overlay entry (if any) goes to the table, then the put
                if let Some(i) = self.over.find(h, eq_at(&self.arena, key)) {
                    self.move_to_table(&[i]);
                }
                return self.put_in(false, key, h, loc, seq);
            }
        }
        if self.table.is_mapped() {
            if self.shared.is_some() {
                self.shared_room(1, key.len(), 0);
                self.begin();
            }
            let put = self.put_over(key, h, loc, seq);
            self.prepare_tail();
            if self.over.len() >= OVERLAY_MAX / 4 {
                // the overlay's new keys (all of those still to come, at worst) will
                // merge into the table: if they will not fit, its doubled arrays are
                // made ahead (see Table::prepare_for)
                let new_keys = self.over.len() - self.shadows + (OVERLAY_MAX - self.over.len());
                self.table.prepare_for(new_keys);
            }
            if self.over.len() >= OVERLAY_MAX {
                // merged a few entries per put from now on: no put waits for all of
                // them (~20-40 ms for 65,536 keys into a million-key table)
                self.detach();
                self.erased = None; // (the table's pages will differ from the snapshot's)
                self.merging = Some(0);
            }
            return put;
        }
        self.put_in(false, key, h, loc, seq)
    }

    /// Move the entries of the next `n` overlay slots into the table (merging).
    fn merge_step(&mut self, n: usize) {
        let Some(from) = self.merging else { return };
        let end = from.saturating_add(n).min(self.over.buckets());
        let full: Vec<usize> = (from..end).filter(|&i| self.over.is_full(i)).collect();
        self.move_to_table(&full);
        self.merging = Some(end);
        if end >= self.over.buckets() {
            debug_assert!(
                self.over.is_empty(),
                "nothing enters the overlay while it merges"
            );
            // the next keys go to an overlay again while the table is still mapped: one
            // with room for all it takes before it merges (doubling its way up would
            // rehash 57,344 keys on the put that crossed 7/8 of 65,536: 2.3 ms)
            let mut over = Table::new();
            if self.table.is_mapped() {
                over.reserve_as(Growth::Exact, OVERLAY_MAX, |_| 0, |_| ());
            }
            drop_overlay(std::mem::replace(&mut self.over, over));
            self.shadows = 0;
            self.merging = None;
        }
    }

    /// Move the overlay entries in `slots` into the table: a shadowed table entry takes
    /// the overlay's location (same key, same arena position), a new key is inserted.
    fn move_to_table(&mut self, slots: &[usize]) {
        let (hasher, arena) = (&self.hasher, &self.arena);
        self.table.reserve_as(
            Growth::Steps,
            slots.len(),
            |e| hasher.hash_one(arena.key(e.at())),
            |e| super::table::prefetch(arena.ptr_at(e.at())),
        );
        for &i in slots {
            let e = *self.over.get(i);
            let key = arena.key(e.at());
            let h = hasher.hash_one(key);
            match self.table.find_or_free(h, eq_at(arena, key)) {
                Err(slot) => self.table.insert_at(slot, h, e),
                Ok(j) => {
                    self.table.get_mut(j).set_loc(e.loc());
                    self.shadows -= 1;
                }
            }
            self.over.erase(i);
        }
    }

    /// A put while the table is the mapped snapshot: into the overlay — updating the
    /// overlay's entry, shadowing the table's, or as a new key.
    fn put_over(&mut self, key: &[u8], h: u64, loc: Loc, seq: Option<u64>) -> Put {
        let arena = &self.arena;
        let eq = |e: &Entry| Self::key_at(arena, e.at()) == key;
        if self.over.find(h, eq).is_none() {
            if let Some(i) = self.table.find(h, eq) {
                let e = *self.table.get(i);
                if self.older(e.at(), seq) {
                    return Put::Ignored;
                }
                self.note_seq(e.at(), seq);
                // shadow it: a new overlay entry at the same arena position
                let (hasher, arena) = (&self.hasher, &self.arena);
                self.over.reserve(
                    1,
                    |x| hasher.hash_one(arena.key(x.at())),
                    |x| super::table::prefetch(arena.ptr_at(x.at())),
                );
                let slot = match self.over.find_or_free(h, eq_at(arena, key)) {
                    Err(slot) => slot,
                    Ok(_) => unreachable!("not in the overlay (checked above)"),
                };
                self.over
                    .insert_at(slot, h, Entry::new(e.at() as usize, loc));
                self.shadows += 1;
                self.count_tombstones(e.loc(), loc, e.at());
                return Put::Replaced(e.loc());
            }
        }
        self.put_in(true, key, h, loc, seq)
    }

    /// Insert or replace in the table (`over`: in the overlay).
    fn put_in(&mut self, over: bool, key: &[u8], h: u64, loc: Loc, seq: Option<u64>) -> Put {
        let (hasher, arena) = (&self.hasher, &self.arena);
        let t = if over {
            &mut self.over
        } else {
            &mut self.table
        };
        // before probing: the free slot found below stays valid
        t.reserve_as(
            if over { Growth::Double } else { Growth::Steps },
            1,
            |e| hasher.hash_one(arena.key(e.at())),
            |e| super::table::prefetch(arena.ptr_at(e.at())),
        );
        // one probe: find the key or the slot to put it in
        match t.find_or_free(h, |e| Self::key_at(arena, e.at()) == key) {
            Ok(i) => self.update(over, i, loc, seq),
            Err(slot) => {
                let at = self.arena.push(key);
                self.note_seq(at as u64, seq);
                if loc.is_tombstone() {
                    self.tombstones += 1;
                    self.note_tombstone(at as u64);
                }
                let t = if over {
                    &mut self.over
                } else {
                    &mut self.table
                };
                t.insert_at(slot, h, Entry::new(at, loc));
                Put::Inserted
            }
        }
    }

    /// Point the entry in `slot` (of the overlay if `over`) at `loc`.
    fn update(&mut self, over: bool, slot: usize, loc: Loc, seq: Option<u64>) -> Put {
        let at = {
            let t = if over { &self.over } else { &self.table };
            t.get(slot).at()
        };
        if self.older(at, seq) {
            return Put::Ignored;
        }
        self.note_seq(at, seq);
        let t = if over {
            &mut self.over
        } else {
            &mut self.table
        };
        let e = t.get_mut(slot);
        let old = e.loc();
        let at = e.at();
        e.set_loc(loc);
        self.count_tombstones(old, loc, at);
        Put::Replaced(old)
    }

    /// The visible entry of the key at arena position `at` went from `old` to `new`.
    fn count_tombstones(&mut self, old: Loc, new: Loc, at: u64) {
        if old.is_tombstone() && !new.is_tombstone() {
            self.tombstones -= 1;
        } else if !old.is_tombstone() && new.is_tombstone() {
            self.tombstones += 1;
            self.note_tombstone(at);
        }
    }

    /// Move the overlay's keys into the table (copying the mapped pages they land on, or
    /// growing the table onto the heap when it has no room left for them).
    pub fn merge_overlay(&mut self) {
        self.merge_overlay_with(Growth::Double);
    }

    /// Merge the overlay and size the table for its keys (see [`Table::fit`]): for an
    /// index about to be written out. Returns whether the table was rehashed.
    pub fn merge_and_fit(&mut self) -> bool {
        self.merge_overlay_with(Growth::Exact);
        self.fit_table()
    }

    /// Merge the whole overlay into the table at once, growing it as `growth` says if it
    /// must; the table is whole afterwards (not growing in steps: its arrays can be
    /// written out).
    fn merge_overlay_with(&mut self, growth: Growth) {
        self.merging = None; // (all of it now)
        self.detach();
        let (hasher, arena) = (&self.hasher, &self.arena);
        let rehash = |e: &Entry| hasher.hash_one(arena.key(e.at()));
        let warm = |e: &Entry| super::table::prefetch(arena.ptr_at(e.at()));
        self.table.finish_growing(rehash, warm);
        if self.over.is_empty() {
            return;
        }
        self.erased = None; // (the table's pages now differ from the snapshot's)
        let over = std::mem::take(&mut self.over);
        self.table
            .reserve_as(growth, over.len() - self.shadows, rehash, warm);
        for e in over.iter() {
            let key = arena.key(e.at());
            let h = hasher.hash_one(key);
            match self.table.find_or_free(h, eq_at(arena, key)) {
                Err(slot) => self.table.insert_at(slot, h, *e),
                // a shadowed entry takes the overlay's location (same key, same position)
                Ok(i) => self.table.get_mut(i).set_loc(e.loc()),
            }
        }
        drop_overlay(over);
        self.shadows = 0;
    }

    /// Rehash the table to the size its keys need (see [`Table::fit`]) before it is
    /// written out; the overlay must have been merged. Returns whether it rehashed.
    fn fit_table(&mut self) -> bool {
        debug_assert!(self.over.is_empty());
        let (hasher, arena) = (&self.hasher, &self.arena);
        let moved = self.table.fit(
            |e| hasher.hash_one(arena.key(e.at())),
            |e| super::table::prefetch(arena.ptr_at(e.at())),
        );
        if moved {
            self.erased = None; // (the table is no longer the snapshot's)
        }
        moved
    }

    /// Remove a key; returns its location if it was live.
    pub fn remove(&mut self, key: &[u8]) -> Option<Loc> {
        self.remove_hashed(key, self.hash(key))
    }

    /// [`Index::remove`] with the key's [`Index::hash`] computed by the caller.
    pub fn remove_hashed(&mut self, key: &[u8], h: u64) -> Option<Loc> {
        if self.journal.is_some() {
            self.log_before(key, h);
        }
        if self.shared.is_some() {
            self.shared_room(0, 0, 1);
            self.begin();
        }
        let arena = &self.arena;
        let eq = |e: &Entry| Self::key_at(arena, e.at()) == key;
        let in_table = self.table.find(h, eq);
        let loc = match self.over.find(h, eq) {
            Some(i) => {
                let loc = self.over.get(i).loc();
                self.over.erase(i);
                if let Some(j) = in_table {
                    self.erase_in_table(j); // the entry it shadowed goes too
                    self.shadows -= 1;
                }
                loc
            }
            None => {
                let j = in_table?;
                let loc = self.table.get(j).loc();
                self.erase_in_table(j);
                loc
            }
        };
        self.dead += 4 + key.len();
        if loc.is_tombstone() {
            self.tombstones -= 1;
            None
        } else {
            Some(loc)
        }
    }

    /// Note in the journal what a lookup of `key` sees before it changes.
    fn log_before(&mut self, key: &[u8], h: u64) {
        let before = self.visible(key, h).filter(|l| !l.is_tombstone());
        if let Some(j) = self.journal.as_mut() {
            j.push((key.to_vec(), before));
        }
    }

    /// The entry a lookup of `key` sees (tombstones included): the overlay's, else the
    /// table's.
    fn visible(&self, key: &[u8], h: u64) -> Option<Loc> {
        let arena = &self.arena;
        match self.over.find(h, eq_at(arena, key)) {
            Some(i) => Some(self.over.get(i).loc()),
            None => self
                .table
                .find(h, eq_at(arena, key))
                .map(|i| self.table.get(i).loc()),
        }
    }

    fn note_tombstone(&mut self, at: u64) {
        if self.tombstoned.len() <= TOMBSTONED_MAX {
            self.tombstoned.push(at);
        }
    }

    /// Drop tombstones (after recovery) and compact the key arena if it is mostly garbage.
    pub fn purge_tombstones(&mut self) {
        let noted = std::mem::take(&mut self.tombstoned);
        if self.tombstones > 0 && noted.len() <= TOMBSTONED_MAX {
            // by key: a replay after a snapshot touches only what it replayed
            for at in noted {
                let key = self.arena.key(at).to_vec();
                let h = self.hash(&key);
                if self.visible(&key, h).is_some_and(|l| l.is_tombstone()) {
                    self.remove_hashed(&key, h); // (and the entry it shadows, if any)
                }
            }
        }
        if self.tombstones > 0 {
            self.merge_overlay(); // (a pass over the table alone then sees every entry)
            self.erased = None;
            let arena = &self.arena;
            let mut dead = 0;
            self.table.retain(|e| {
                if e.loc().is_tombstone() {
                    dead += 4 + Self::key_at(arena, e.at()).len();
                    false
                } else {
                    true
                }
            });
            self.dead += dead;
            self.tombstones = 0;
        }
        if self.dead > self.arena.len() / 2 && self.dead > 1 << 20 {
            self.rebuild_arena();
        }
    }

    /// Whether the arena can take `more` bytes of keys (16 GiB of keys at most).
    pub fn has_room(&self, more: usize) -> bool {
        self.arena.len() + more + 8 < MAX_ARENA
    }

    fn rebuild_arena(&mut self) {
        let mut tail = Grow::new();
        tail.reserve(self.arena.len() - self.dead);
        tail.extend_from_slice(&[0; 4]);
        let mut arena = Arena::heap(tail);
        self.merge_overlay();
        self.erased = None;
        for e in self.table.iter_mut() {
            let at = arena.push(self.arena.key(e.at()));
            e.key_at4 = (at / 4) as u32;
        }
        self.arena = arena;
        self.dead = 0;
    }

    /// Slots of the table (not counting the overlay's).
    pub fn memory_buckets(&self) -> usize {
        self.table.buckets()
    }

    /// Give back memory reserved beyond what the index holds (after recovery).
    pub fn shrink(&mut self) {
        if let Tail::Heap(v) = &mut self.arena.tail {
            v.shrink_to_fit();
        }
    }

    /// Every live key and its location (arbitrary order).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Loc)> {
        let arena = &self.arena;
        let (over, hasher, shadows) = (&self.over, &self.hasher, self.shadows);
        self.table
            .iter()
            .filter(move |e| {
                // a table entry the overlay shadows is listed through the overlay's
                shadows == 0 || {
                    let key = arena.key(e.at());
                    over.find(hasher.hash_one(key), eq_at(arena, key)).is_none()
                }
            })
            .chain(self.over.iter())
            .filter(|e| !e.loc().is_tombstone())
            .map(move |e| (Self::key_at(arena, e.at()), e.loc()))
    }

    /// Bytes of native memory the index uses (table + arena).
    pub fn memory(&self) -> usize {
        self.table.memory() + self.over.memory() + self.arena.bytes_used()
    }

    /// Whether the table is growing in steps or the overlay merging into it (lookups
    /// probe two tables meanwhile).
    pub fn is_growing(&self) -> bool {
        self.table.is_growing() || self.merging.is_some()
    }

    /// Whether the table is still the one mapped from a snapshot (not yet rehashed).
    pub fn is_mapped(&self) -> bool {
        self.table.is_mapped()
    }

    /// Erase the table's entry in `slot`, noting it while the table is the snapshot's.
    fn erase_in_table(&mut self, slot: usize) {
        self.table.erase(slot);
        if let Some(list) = &mut self.erased {
            list.push(slot as u32);
            if let Some(sh) = &self.shared {
                sh.set_erased(list.len() - 1, slot as u32);
            }
        }
    }

    /// Bytes of keys that came with the snapshot.
    pub fn base_len(&self) -> u64 {
        self.arena.base.len() as u64
    }

    /// Whether the overlay lives in the shared file.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// With a shared overlay: make sure the file has room for `keys` more keys of
    /// `bytes` bytes and `erasures` erased slots — or go back to the heap.
    fn shared_room(&mut self, keys: usize, bytes: usize, erasures: usize) {
        if self.shared.is_some() {
            let tail = self.arena.tail.capacity() - self.arena.tail.len();
            let erased = self.erased.as_ref().map_or(usize::MAX, |e| e.len());
            let cap = self
                .shared
                .as_ref()
                .map_or(0, |sh| sh.layout().erased_cap());
            if keys > self.over.room()
                || bytes.saturating_add(keys * 7) > tail
                || erased.saturating_add(erasures) > cap
            {
                self.detach();
            }
        }
    }

    /// A change begins (the shared file stops describing the index until `settle`).
    fn begin(&self) {
        if let Some(sh) = &self.shared {
            sh.begin();
        }
    }

    /// Stop keeping the overlay in the shared file and remove the file. The overlay's
    /// table stays where it is, in the file's mapping (which outlives the file's name),
    /// until it merges into the table or grows into the heap: copying it out made the
    /// put that started a merge wait 1.5–1.9 ms for its 2 MB, most of it the page faults
    /// of fresh memory. Its key tail moves to the heap, where it can grow.
    pub fn detach(&mut self) {
        let Some(sh) = self.shared.take() else { return };
        let tail = match self.tail_ahead.take().and_then(Prepared::take) {
            Some(mut g) => {
                g.extend_from_slice(self.arena.tail.as_slice());
                Tail::Heap(g)
            }
            None => self.arena.tail.to_heap(),
        };
        let old = std::mem::replace(&mut self.arena.tail, tail);
        sh.remove();
        // (the file's pages go with the mapping's last reference — the overlay's table
        // when it is dropped, see drop_overlay: off a put's path)
        drop(old);
    }

    /// With a shared overlay nearly full (its keys, or its key tail): have the heap tail
    /// it will move to made ahead, every page written once, so that the put that
    /// detaches it copies the keys (1.3 MB for 65,536 16-byte keys) into memory that is
    /// there — the page faults of fresh memory made that copy take ~1 ms.
    fn prepare_tail(&mut self) {
        if self.shared.is_none() || self.tail_ahead.is_some() {
            return;
        }
        let (len, cap) = (self.arena.tail.len(), self.arena.tail.capacity());
        if self.over.len() + TAIL_AHEAD >= OVERLAY_MAX || len >= cap / 16 * 15 {
            self.tail_ahead = Prepared::start(move || Grow::touched(cap));
        }
    }

    /// Wait until the heap tail [`Index::prepare_tail`] asked for is made (tests);
    /// whether one was asked for and made.
    #[cfg(test)]
    pub fn wait_tail_ahead(&mut self) -> bool {
        self.tail_ahead.as_mut().is_some_and(Prepared::wait)
    }

    /// With a shared overlay: the index now matches the log up to (`active`, `off`), with
    /// sequence numbers up to `seq`; `segs`: every segment's dead bytes.
    pub fn settle(
        &mut self,
        (active, off, seq): (u32, u64, u64),
        segs: impl ExactSizeIterator<Item = (u32, u64)>,
    ) {
        let Some(sh) = &self.shared else { return };
        if segs.len() > overlay::SEGS_CAP || self.tombstones > 0 {
            self.detach();
            return;
        }
        let s = overlay::Settled {
            active,
            off,
            seq,
            items: self.over.len() as u64,
            deleted: self.over.deleted() as u64,
            shadows: self.shadows as u64,
            dead: self.dead as u64,
            tail_len: self.arena.tail.len() as u64,
            erased: self.erased.as_ref().map_or(0, |e| e.len()) as u64,
        };
        sh.settle(&s, segs);
    }

    /// Move the overlay (and the erased slots) into the fresh shared file `sh`. Only for
    /// an index whose table is the snapshot's (but for erased slots); false (nothing
    /// changed) otherwise or when the overlay does not fit.
    pub fn attach(&mut self, sh: Shared) -> bool {
        let Some(erased) = &self.erased else {
            return false;
        };
        let (_, _, tail_cap) = sh.tail();
        if !self.table.is_mapped()
            || self.shared.is_some()
            || self.tombstones > 0
            || self.over.len() * 8 > sh.layout().buckets * 7
            || self.arena.tail.len() > tail_cap
            || erased.len() > sh.layout().erased_cap()
        {
            return false;
        }
        sh.begin();
        let (ctrl, slots) = sh.table_arrays();
        let mut over = Table::from_counted(ctrl, slots, 0, 0).expect("an empty table");
        for e in self.over.iter() {
            let key = self.arena.key(e.at());
            let h = self.hasher.hash_one(key);
            match over.find_or_free(h, |_| false) {
                Err(slot) => over.insert_at(slot, h, *e),
                Ok(_) => unreachable!("no entry matches"),
            }
        }
        for (n, &slot) in erased.iter().enumerate() {
            sh.set_erased(n, slot);
        }
        let (map, ptr, cap) = sh.tail();
        let mut tail = Tail::Shared {
            _map: map,
            ptr,
            len: 0,
            cap,
        };
        tail.extend(self.arena.tail.as_slice());
        self.arena.tail = tail;
        self.over = over;
        self.shared = Some(sh);
        true
    }

    /// Take back the overlay a killed process left in `sh` (header `h`) on this index,
    /// fresh from its snapshot. False (nothing changed) if they do not fit together.
    pub fn restore(&mut self, sh: Shared, h: &overlay::Header) -> bool {
        if !self.restorable(h) {
            return false;
        }
        let (ctrl, slots) = sh.table_arrays();
        let (map, ptr, cap) = sh.tail();
        let Ok(tail_len) = usize::try_from(h.at.tail_len) else {
            return false;
        };
        let tail = Tail::Shared {
            _map: map,
            ptr,
            len: tail_len.min(cap),
            cap,
        };
        if !self.restore_from(ctrl, slots, tail, h) {
            return false;
        }
        self.shared = Some(sh);
        true
    }

    /// [`Index::restore`] from a copy of a writer's overlay ([`overlay::copy`]), for a
    /// read-only store: the overlay then lives on the heap, as the store's own.
    pub fn restore_copied(&mut self, c: overlay::Copied, h: &overlay::Header) -> bool {
        if !self.restorable(h) || c.tail.len() as u64 != h.at.tail_len {
            return false;
        }
        let tail = Tail::Heap(Grow::from_slice(&c.tail));
        self.restore_from(c.ctrl.into(), c.slots.into(), tail, h)
    }

    /// Whether an overlay with header `h` fits this index: one fresh from its snapshot
    /// (nothing changed yet), the same key arena, erased slots that hold entries of the
    /// snapshot, each listed once.
    fn restorable(&self, h: &overlay::Header) -> bool {
        let fresh = self.table.is_mapped()
            && self.over.is_empty()
            && self.arena.tail.len() == 0
            && self.shared.is_none()
            && self.erased.as_ref().is_some_and(|e| e.is_empty());
        if !fresh || h.base_len != self.arena.base.len() as u64 {
            return false;
        }
        // every erased slot must hold an entry of the snapshot, and be erased once
        let buckets = self.table.buckets();
        let mut seen = h.erased.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != h.erased.len()
            || !h
                .erased
                .iter()
                .all(|&s| (s as usize) < buckets && self.table.is_full(s as usize))
        {
            return false;
        }
        true
    }

    /// Take the overlay's table and key tail in (see [`Index::restore`]).
    fn restore_from(
        &mut self,
        ctrl: Arr<u8>,
        slots: Arr<Entry>,
        tail: Tail,
        h: &overlay::Header,
    ) -> bool {
        let (Ok(items), Ok(deleted)) = (usize::try_from(h.at.items), usize::try_from(h.at.deleted))
        else {
            return false;
        };
        let Some(over) = Table::from_counted(ctrl, slots, items, deleted) else {
            return false;
        };
        if h.at.shadows as usize > over.len() {
            return false;
        }
        for &s in &h.erased {
            self.table.erase(s as usize);
        }
        self.erased = Some(h.erased.clone());
        self.arena.tail = tail;
        self.over = over;
        self.shadows = h.at.shadows as usize;
        self.dead = h.at.dead as usize;
        true
    }

    /// The index as flat byte arrays, for a snapshot file. Tombstones must have been
    /// purged (they only exist during recovery).
    /// The sizes of [`Index::to_parts`]'s ctrl, slots and arena (both pieces), as of now.
    /// (A guess while an overlay is still to be merged: the table grows then.)
    pub fn part_sizes(&self) -> [usize; 3] {
        let (ctrl, slots) = self.table.raw_lens();
        let arena = self.arena.base.len() + self.arena.tail.as_slice().len();
        [ctrl, slots * std::mem::size_of::<Entry>(), arena]
    }

    /// The table's slots (every one, empty ones included), as [`Index::to_parts`] gives
    /// them in bytes.
    pub fn entries(&self) -> &[Entry] {
        self.table.raw().1
    }

    pub fn to_parts(&self) -> Parts<'_> {
        debug_assert_eq!(self.tombstones, 0);
        assert!(
            self.over.is_empty(),
            "merge_overlay() before writing the index out"
        );
        let (ctrl, slots) = self.table.raw();
        // SAFETY: Entry is repr(C), 16 bytes without padding, made of integers: every
        // byte of the slice is initialised, and u8 has no alignment requirement.
        let slots = unsafe {
            std::slice::from_raw_parts(slots.as_ptr().cast::<u8>(), std::mem::size_of_val(slots))
        };
        Parts {
            seed: self.seed,
            check: self.hash(CHECK_KEY),
            ctrl,
            slots,
            arena: [&self.arena.base, self.arena.tail.as_slice()],
            dead: self.dead as u64,
            items: self.table.len() as u64,
            deleted: self.table.deleted() as u64,
        }
    }

    /// The check value [`Parts::check`] must have for `seed` in this build.
    pub fn check_for(seed: u64) -> u64 {
        FixedState::with_seed(seed).hash_one(CHECK_KEY)
    }

    /// The index over snapshot arrays, used where they are (mapped: nothing is read but
    /// the ends of `ctrl`). `items`/`deleted` are the table's counts as written; `None`
    /// when anything checkable is inconsistent (the caller then rebuilds from the
    /// segments). Entries and keys are not checked here (that would read the whole file,
    /// the cost a mapped snapshot exists to avoid): whoever trusts a lookup's "absent"
    /// verifies the file's checksums first ([`super::table::count_ctrl`] for `ctrl`), a
    /// found entry is checked against its record by the store, and a position outside
    /// the arena reads as an empty key.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        seed: u64,
        check: u64,
        ctrl: Arr<u8>,
        slots: Arr<Entry>,
        arena: Arr<u8>,
        dead: u64,
        items: u64,
        deleted: u64,
    ) -> Option<Index> {
        if Self::check_for(seed) != check || arena.len() < 4 {
            return None;
        }
        let table = Table::from_counted(
            ctrl,
            slots,
            usize::try_from(items).ok()?,
            usize::try_from(deleted).ok()?,
        )?;
        Some(Index {
            table,
            over: Table::new(),
            shadows: 0,
            arena: Arena {
                base: arena,
                tail: Tail::Heap(Grow::new()),
            },
            dead: dead as usize,
            seed,
            hasher: FixedState::with_seed(seed),
            tombstones: 0,
            tombstoned: Vec::new(),
            erased: Some(Vec::new()),
            shared: None,
            seqs: None,
            merging: None,
            tail_ahead: None,
            journal: None,
            added: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A location whose offset stands for a sequence number.
    fn loc(seq: u64) -> Loc {
        Loc {
            seg: 1,
            val_len: 3,
            off: seq * 10,
        }
    }

    #[test]
    fn put_get_remove() {
        let mut ix = Index::new();
        assert!(ix.put(b"a", loc(1), None).is_none());
        assert_eq!(ix.get(b"a"), Some(loc(1)));
        assert_eq!(ix.put(b"a", loc(2), None), Some(loc(1)));
        assert_eq!(ix.get(b"a"), Some(loc(2)));
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.remove(b"a"), Some(loc(2)));
        assert_eq!(ix.get(b"a"), None);
        assert!(ix.is_empty());
    }

    #[test]
    fn recovery_keeps_the_newest_whatever_the_order() {
        let mut ix = Index::new();
        ix.track_seqs();
        // an entry put without a sequence number (a snapshot's) counts as older
        ix.put(b"s", loc(1), None);
        assert_eq!(ix.put(b"s", loc(2), Some(2)), Some(loc(1)));
        // replayed out of order (a compaction output read after newer segments)
        assert!(ix.put(b"a", loc(7), Some(7)).is_none());
        assert_eq!(ix.put_with(b"a", loc(3), Some(3)), Put::Ignored);
        assert_eq!(ix.put(b"a", loc(9), Some(9)), Some(loc(7)));
        assert_eq!(ix.get(b"a"), Some(loc(9)));
        // also across a rehash (the numbers are kept by arena position, not by slot)
        for i in 0..10_000u64 {
            ix.put(&i.to_le_bytes(), loc(i + 100), Some(i + 100));
        }
        assert_eq!(ix.put_with(b"a", loc(8), Some(8)), Put::Ignored);
        assert_eq!(
            ix.put_with(&5u64.to_le_bytes(), loc(1), Some(1)),
            Put::Ignored
        );
        ix.end_recovery();
        assert!(ix.seqs.is_none());
        // afterwards: plain puts, the last one wins
        assert_eq!(ix.put(b"a", loc(8), None), Some(loc(9)));
    }

    #[test]
    fn long_keys_keep_their_numbers_in_a_map() {
        let mut ix = Index::new();
        ix.track_seqs();
        let key = |i: u64| i.to_le_bytes().repeat(25); // 200 bytes: 51 arena units
        for i in 0..10_000u64 {
            ix.put(&key(i), loc(i + 100), Some(i + 100));
        }
        assert!(matches!(ix.seqs, Some(Seqs::Sparse(_))));
        for i in (0..10_000u64).step_by(97) {
            assert_eq!(ix.put_with(&key(i), loc(i), Some(i)), Put::Ignored);
            assert_eq!(
                ix.put(&key(i), loc(i + 200_000), Some(i + 200_000)),
                Some(loc(i + 100))
            );
        }
        // short keys: the array
        let mut ix = Index::new();
        ix.track_seqs();
        for i in 0..10_000u64 {
            ix.put(&i.to_le_bytes(), loc(i + 100), Some(i + 100));
        }
        assert!(matches!(ix.seqs, Some(Seqs::Dense(_))));
        assert_eq!(
            ix.put_with(&7u64.to_le_bytes(), loc(1), Some(1)),
            Put::Ignored
        );
    }

    #[test]
    fn tombstones_hide_and_purge() {
        let mut ix = Index::new();
        ix.track_seqs();
        ix.put(b"k", loc(5), Some(5));
        let t = Loc {
            val_len: TOMBSTONE,
            ..loc(6)
        };
        ix.put(b"k", t, Some(6));
        ix.put(b"k", loc(4), Some(4)); // an older put replayed later stays dead
        assert_eq!(ix.get(b"k"), None);
        assert_eq!(ix.len(), 0);
        ix.purge_tombstones();
        assert_eq!(ix.iter().count(), 0);
    }

    #[test]
    fn many_keys() {
        let mut ix = Index::new();
        for i in 0..100_000u64 {
            ix.put(&i.to_le_bytes(), loc(i), None);
        }
        assert_eq!(ix.len(), 100_000);
        for i in (0..100_000u64).step_by(7) {
            assert_eq!(ix.get(&i.to_le_bytes()).unwrap().off, i * 10);
        }
        let per_key = ix.memory() as f64 / 100_000.0 - 8.0;
        assert!(per_key < 64.0, "{per_key} bytes of overhead per key");
    }
}
