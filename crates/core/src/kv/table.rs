//! An open-addressing hash table in the SwissTable layout (one control byte per slot
//! holding 7 bits of the hash, probed 8 at a time), kept in two flat arrays so that the
//! index can be written to disk and read back as it is — reopening a store then costs a
//! read, not a million inserts.
//!
//! The number of slots is any multiple of 8, not only a power of two: a table sized for
//! a known count (a rebuild, or the copy written out at close) is ~80 % full instead of
//! anywhere between 44 and 88 % — a million keys take 1.25M slots, not 2M (2^21). A
//! hash's home slot is its low 57 bits scaled to the slot count (a multiply, not a
//! mask; the top 7 bits are the control byte's tag, so the two stay independent), and
//! probing wraps around by comparison instead of by masking.
//!
//! The table stores `Copy` values and knows nothing about keys: callers pass the hash
//! and an equality test. Hashes must be stable across processes for a persisted table,
//! so the caller owns the hash function and its seed.
//!
//! The arrays may be mapped from an index snapshot ([`super::mapped::Arr`]): a table
//! read back that way is used in place, and only grows into the heap when it rehashes.

use super::mapped::Arr;

const GROUP: usize = 8;
const EMPTY: u8 = 0xFF;
const DELETED: u8 = 0x80;
const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Slots a table of `buckets` may fill before it grows (7/8 load).
fn capacity(buckets: usize) -> usize {
    if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }
}

/// How a table that must grow for a reservation is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// For the values asked for, and at least twice its size: inserting one at a time
    /// stays amortised O(1).
    Double,
    /// About half full once the values asked for are in, where inserts probe least: for
    /// a table built in one go (a rebuild at open — 1M keys from hint files: 132 ms into
    /// a table 48 % full, 147 ms at 69 %); the table written out later is fitted
    /// ([`Table::fit`]).
    Sparse,
    /// For the values asked for and no more (80 % full): the last values a table takes
    /// before it is written out, which doubling first would have `fit` rehash again.
    Exact,
    /// As [`Growth::Double`], but a table of [`STEPS_MIN`] values or more grows in steps:
    /// the larger table takes the new values at once and the old one's a few at a time,
    /// [`STEP`] of its slots at each later reservation, instead of all of them in one
    /// rehash — which stalled the put that set it off: at 1.8M keys 46 ms for the index
    /// alone, 67–94 ms in a store. Lookups meanwhile probe both tables.
    Steps,
}

/// Tables holding fewer values than this grow at once even with [`Growth::Steps`] (a
/// rehash of 16K values takes ~1.5 ms).
pub const STEPS_MIN: usize = 1 << 14;

/// Slots of the old table moved per value reserved while a table grows in steps: the
/// old table is empty after a 64th as many puts as it has slots, long before the new one
/// (with room for as many values again as the old one held) fills. ~56 values moved per
/// put, 1-2 µs, their cache misses overlapped (16 slots a put cost twice the CPU of a
/// rehash in one go: too few misses in flight, and twice as many puts probing both
/// tables).
pub const STEP: usize = 64;

/// Slots of the old table to move at a reservation of `additional` values while a table
/// grows in steps: [`STEP`] per value for the few values of a put; for a large
/// reservation (a batch) two per value beyond 256, so that it does not move most of the
/// old table at once — a table that runs out of room before the old one is empty moves
/// the rest then ([`Table::finish_growing`]).
fn step_budget(additional: usize) -> usize {
    STEP * additional.clamp(1, 256) + 2 * additional.saturating_sub(256)
}

/// The arrays of the table a table will double into in steps, made ahead on a thread of
/// their own (`uringkit-prep`, see [`Table::prepare`]): EMPTY control bytes, and slots
/// whose every page has been written once.
struct Spare<T> {
    ctrl: Vec<u8>,
    slots: Vec<T>,
}

impl<T: Slot> Spare<T> {
    fn new(buckets: usize) -> Self {
        let ctrl = filled_vec(buckets + GROUP, EMPTY);
        let mut slots = T::empty_slots(buckets);
        // Fresh zeroed memory is not there yet: the kernel backs each page on its first
        // write — in a VM whose host has not backed it either, ~2.5 ms per 2 MiB huge
        // page. Write every page once here, so that the puts that fill the table do not.
        let per_page = (4096 / std::mem::size_of::<T>().max(1)).max(1);
        for i in (0..slots.len()).step_by(per_page) {
            let p: *mut T = &mut slots[i];
            // SAFETY: `p` points at an initialised element this thread owns; writing it
            // its own value changes nothing, and volatile keeps the write (and so the
            // page's first touch) from being optimised away.
            unsafe { std::ptr::write_volatile(p, std::ptr::read(p)) };
        }
        Spare { ctrl, slots }
    }

    fn bytes(&self) -> usize {
        self.ctrl.capacity() + self.slots.capacity() * std::mem::size_of::<T>()
    }
}

/// A value made ahead on a thread of its own (`uringkit-prep`) — memory whose pages a
/// put would otherwise fault in — and picked up once it is there, never waited for on a
/// put's path. (The receiver sits in a Mutex only so that its holder stays Sync; it is
/// reached through `&mut`, never locked.)
pub enum Prepared<T> {
    Coming(std::sync::Mutex<std::sync::mpsc::Receiver<T>>),
    Ready(T),
}

impl<T: Send + 'static> Prepared<T> {
    /// Start making a value with `make`; `None` where no thread can be started.
    pub fn start(make: impl FnOnce() -> T + Send + 'static) -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("uringkit-prep".into())
            .spawn(move || {
                // (nobody waits any more: the value goes with this thread)
                let _ = tx.send(make());
            })
            .ok()?;
        Some(Prepared::Coming(std::sync::Mutex::new(rx)))
    }

    /// Take the value in if it has been made (not yet, or never — a thread that
    /// failed — leaves this as it is).
    pub fn poll(&mut self) {
        if let Prepared::Coming(rx) = self {
            if let Ok(Ok(v)) = rx.get_mut().map(|rx| rx.try_recv()) {
                *self = Prepared::Ready(v);
            }
        }
    }

    /// The value if it has been made.
    pub fn ready(&self) -> Option<&T> {
        match self {
            Prepared::Ready(v) => Some(v),
            Prepared::Coming(_) => None,
        }
    }

    /// The value if it has been made (never waits for it).
    pub fn take(mut self) -> Option<T> {
        self.poll();
        match self {
            Prepared::Ready(v) => Some(v),
            Prepared::Coming(_) => None,
        }
    }

    /// Wait until the value is made (tests); whether it was.
    #[cfg(test)]
    pub fn wait(&mut self) -> bool {
        if let Prepared::Coming(rx) = self {
            match rx.get_mut().map(|rx| rx.recv()) {
                Ok(Ok(v)) => *self = Prepared::Ready(v),
                _ => return false,
            }
        }
        true
    }
}

/// Values moved per round of a rehash (see [`Table::rehash_into`]).
const MOVE_CHUNK: usize = 4096;

/// Whether a table may have `buckets` slots: a whole number of groups, at least one.
pub fn valid_buckets(buckets: usize) -> bool {
    buckets >= GROUP && buckets.is_multiple_of(GROUP)
}

/// The slots a table sized for `items` values gets: 80 % full (room for a quarter as
/// many again before it grows), a whole number of groups.
pub fn buckets_for(items: usize) -> usize {
    (items.max(1).saturating_mul(5) / 4 + 1).next_multiple_of(GROUP)
}

/// A hint to bring the cache line at `p` in; never faults, whatever the address.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is only a hint: it does not fault on any address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for transparent huge pages (2 MiB) under a large allocation before it is first
/// written: one page fault per 2 MiB instead of per 4 KiB, and far fewer TLB misses for
/// the random accesses a hash table makes. A hint; ignored where THP is off.
pub fn hugepage_hint(ptr: *const u8, len: usize) {
    const HUGE: usize = 2 << 20;
    if len < 2 * HUGE || std::env::var_os("XKV_NOHUGE").is_some() {
        return;
    }
    let start = (ptr as usize).div_ceil(HUGE) * HUGE;
    let end = (ptr as usize + len) / HUGE * HUGE;
    if end > start {
        // SAFETY: [start, end) lies inside the caller's allocation; MADV_HUGEPAGE only
        // changes how the kernel backs it, never its contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// Hand memory the allocator holds but nobody uses back to the system. glibc keeps
/// freed chunks smaller than its (self-raising) mmap threshold: after a table grows, its
/// old arrays and the copies a growing key arena moved out of would stay resident —
/// 10–16 bytes per key at 100K–1M keys, measured. Called after a large table is freed
/// (rare: once per doubling).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Drop `x`, which holds `bytes` of memory, where no caller waits for it: a large one
/// on a thread of its own (`uringkit-free`). Unmapping the arrays of a table of a few
/// million keys, or a shared file's mapping whose last reference frees the file's pages,
/// takes 0.5–2 ms — the longest put there was once the table's growth was spread out.
/// Smaller ones (and any when no thread can be had) go here and now. Memory of a large
/// table goes back to the system either way (`malloc_trim` on glibc, see
/// [`release_free_memory`]).
pub fn drop_in_background<T: Send + 'static>(x: T, bytes: usize) {
    if bytes < 4 << 20 {
        drop(x);
        if bytes >= 1 << 20 {
            release_free_memory();
        }
        return;
    }
    let job = std::thread::Builder::new()
        .name("uringkit-free".into())
        .spawn(move || {
            drop(x);
            release_free_memory();
        });
    // (a thread that could not be started dropped `x` with its closure, here)
    if job.is_err() {
        release_free_memory();
    }
}

/// What a [`Table`] holds: plain values with an empty default.
pub trait Slot: Copy + Default + Send + 'static {
    /// `n` default values for a new table's slots. The default writes every one; a type
    /// whose default is all zero bytes can hand out fresh zeroed memory instead (a
    /// table's growth then does not write its new slot array twice: once with zeros,
    /// once with the values).
    fn empty_slots(n: usize) -> Vec<Self> {
        filled_vec(n, Self::default())
    }
}

impl Slot for u64 {}

/// Types for which all-zero bytes are a valid value (integers, and `repr(C)` structs of
/// them without padding).
///
/// # Safety
/// An implementing type must accept all-zero bytes as a value.
pub unsafe trait Zeroed: Copy {}

// SAFETY: every bit pattern is a u64.
unsafe impl Zeroed for u64 {}

/// `n` zeroed values in fresh memory hinted for huge pages. Fresh pages from the
/// allocator are already zero, so nothing is written here: the kernel zeroes each page
/// on its first touch, one pass instead of two.
pub fn zeroed_vec<T: Zeroed>(n: usize) -> Vec<T> {
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return Vec::new();
    }
    let layout = std::alloc::Layout::array::<T>(n).expect("array too large");
    // SAFETY: the layout is non-zero-sized (n > 0, T not zero-sized).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    hugepage_hint(ptr.cast(), layout.size());
    // SAFETY: ptr was allocated by the global allocator with the layout of n Ts, all
    // bytes zero — a valid T (`Zeroed`) — so length and capacity n are correct.
    unsafe { Vec::from_raw_parts(ptr, n, n) }
}

/// `n` copies of `fill` in memory hinted for huge pages before it is written.
pub fn filled_vec<T: Copy>(n: usize, fill: T) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    hugepage_hint(v.as_ptr().cast(), n * std::mem::size_of::<T>());
    v.resize(n, fill);
    v
}

fn h2(hash: u64) -> u8 {
    (hash >> 57) as u8
}

/// Bits set (the top bit of each byte) where a byte of `group` may equal `b`. False
/// positives are possible but only on full slots; callers confirm with the key.
fn match_byte(group: u64, b: u8) -> u64 {
    let x = group ^ (LO * b as u64);
    x.wrapping_sub(LO) & !x & HI
}

fn match_empty(group: u64) -> u64 {
    group & (group << 1) & HI
}

fn match_free(group: u64) -> u64 {
    group & HI
}

/// `(full, deleted)` slots of a table's control bytes (`buckets + GROUP` of them), or
/// `None` if they are not a table's: a byte that is no control value, the mirrored group
/// differing from the first, more slots used than the table may fill.
pub fn count_ctrl(ctrl: &[u8], buckets: usize) -> Option<(usize, usize)> {
    if !valid_buckets(buckets) || ctrl.len() != buckets + GROUP {
        return None;
    }
    if ctrl[buckets..] != ctrl[..GROUP] {
        return None;
    }
    let body = &ctrl[..buckets];
    #[cfg(target_arch = "x86_64")]
    let (items, deleted, bad) = {
        // 16 bytes at a time (SSE2, part of every x86-64), the rest (0 or 8 bytes: the
        // buckets are a multiple of 8) eight at a time
        let split = body.len() / 16 * 16;
        let (i, d, b) = count_ctrl_sse2(&body[..split]);
        let (i2, d2, b2) = count_ctrl_swar(&body[split..]);
        (i + i2, d + d2, b || b2)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (items, deleted, bad) = count_ctrl_swar(body);
    (!bad && items + deleted <= capacity(buckets)).then_some((items, deleted))
}

/// [`count_ctrl`]'s counts over `bytes`: (full, deleted, any byte that is no control
/// value), eight bytes at a time, branch-free (a table's control bytes are random): per
/// byte, the top bit says full (clear) or not; the low 7 bits of a byte with the top bit
/// set must be 0 (DELETED) or 0x7F (EMPTY). Counts accumulate per byte lane (0 or 1
/// added per word), summed every 255 words, before a lane could overflow.
fn count_ctrl_swar(bytes: &[u8]) -> (usize, usize, bool) {
    let seven = LO * 0x7F;
    let lanes = |x: u64| {
        let pairs = (x & 0x00FF_00FF_00FF_00FF) + ((x >> 8) & 0x00FF_00FF_00FF_00FF);
        (pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48) as usize
    };
    let (mut items, mut deleted, mut bad) = (0usize, 0usize, 0u64);
    for block in bytes.chunks(GROUP * 255) {
        let (mut full, mut del) = (0u64, 0u64);
        for w in block.chunks_exact(GROUP) {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            let (top, low) = (w & HI, w & !HI);
            let low_nonzero = low.wrapping_add(seven) & HI; // (no carry: 127 + 127 < 256)
            let low_not_7f = (low ^ seven).wrapping_add(seven) & HI;
            full += (!w & HI) >> 7;
            del += (top & !low_nonzero) >> 7;
            bad |= top & low_nonzero & low_not_7f;
        }
        items += lanes(full);
        deleted += lanes(del);
    }
    (items, deleted, bad != 0)
}

/// [`count_ctrl_swar`] 16 bytes at a time (`bytes.len()` a multiple of 16): per byte,
/// full (signed ≥ 0), DELETED or EMPTY compared at once; the counts accumulate per byte
/// lane (subtracting the all-ones masks) and are summed every 255 vectors (`psadbw`).
/// 17.5 µs instead of 21 for the 128 KiB a live overlay's check reads at every reopen
/// after a SIGKILL (15 instructions per 16 bytes: the count is bound by the vector
/// ports, not by memory).
#[cfg(target_arch = "x86_64")]
fn count_ctrl_sse2(bytes: &[u8]) -> (usize, usize, bool) {
    use core::arch::x86_64::*;
    debug_assert_eq!(bytes.len() % 16, 0);
    let (mut items, mut deleted) = (0usize, 0usize);
    // SAFETY: SSE2 is part of the x86-64 baseline, so these instructions exist on every
    // CPU this code runs on; each load reads 16 bytes of a 16-byte chunk of `bytes`
    // (unaligned loads: any address is fine).
    unsafe {
        let zero = _mm_setzero_si128();
        let minus_one = _mm_set1_epi8(-1); // (EMPTY, and "signed > -1": top bit clear)
        let del_v = _mm_set1_epi8(DELETED as i8);
        let mut bad = zero;
        let sum = |acc: __m128i| {
            let s = _mm_sad_epu8(acc, zero);
            (_mm_cvtsi128_si64(s) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s))) as usize
        };
        for block in bytes.chunks(16 * 255) {
            let (mut full, mut del) = (zero, zero);
            for v in block.chunks_exact(16) {
                let v = _mm_loadu_si128(v.as_ptr().cast());
                let f = _mm_cmpgt_epi8(v, minus_one);
                let d = _mm_cmpeq_epi8(v, del_v);
                let e = _mm_cmpeq_epi8(v, minus_one);
                full = _mm_sub_epi8(full, f);
                del = _mm_sub_epi8(del, d);
                // a byte that is none of the three: all ones in `ok`'s complement
                let ok = _mm_or_si128(_mm_or_si128(f, d), e);
                bad = _mm_or_si128(bad, _mm_andnot_si128(ok, minus_one));
            }
            items += sum(full);
            deleted += sum(del);
        }
        (items, deleted, _mm_movemask_epi8(bad) != 0)
    }
}

pub struct Table<T: Copy> {
    /// `buckets + GROUP` bytes: the last GROUP mirror the first so that any position can
    /// load a whole group.
    ctrl: Arr<u8>,
    slots: Arr<T>,
    buckets: usize,
    items: usize,
    growth_left: usize,
    /// While the table grows in steps ([`Growth::Steps`]): the table before, whose
    /// values move here a few at a time. A value is in exactly one of the two (new values
    /// go here only after a probe of both found them absent); slot numbers from
    /// `buckets` on are the old table's (`slot - buckets`).
    old: Option<Box<Draining<T>>>,
    /// The arrays of the table this one will double into, made ahead over its last
    /// puts before it does (see [`Table::prepare`]).
    spare: Option<Prepared<Spare<T>>>,
}

/// The table a table growing in steps moves its values out of.
struct Draining<T: Copy> {
    table: Table<T>,
    /// Slots below this have been moved (or were empty).
    next: usize,
    /// Scratch space of each step (kept: a step per put would allocate twice).
    idx: Vec<usize>,
    hashes: Vec<u64>,
}

impl<T: Slot> Table<T> {
    pub fn new() -> Self {
        Self::with_buckets(8)
    }

    fn with_buckets(buckets: usize) -> Self {
        Self::with_arrays(
            buckets,
            filled_vec(buckets + GROUP, EMPTY),
            T::empty_slots(buckets),
        )
    }

    /// An empty table of `buckets` slots over `ctrl` (`buckets + GROUP` EMPTY bytes) and
    /// `slots` (`buckets` empty ones).
    fn with_arrays(buckets: usize, ctrl: Vec<u8>, slots: Vec<T>) -> Self {
        debug_assert!(valid_buckets(buckets) && ctrl.len() == buckets + GROUP);
        debug_assert_eq!(slots.len(), buckets);
        Table {
            ctrl: ctrl.into(),
            slots: slots.into(),
            buckets,
            items: 0,
            growth_left: capacity(buckets),
            old: None,
            spare: None,
        }
    }

    /// Rebuild from the arrays of [`Table::raw`]; `None` if they are not a consistent
    /// table (the caller then rebuilds from its source of truth).
    pub fn from_raw(ctrl: Arr<u8>, slots: Arr<T>) -> Option<Self> {
        let (items, deleted) = count_ctrl(&ctrl, slots.len())?;
        Self::from_counted(ctrl, slots, items, deleted)
    }

    /// [`Table::from_raw`] with the counts of full and deleted slots given (as recorded
    /// when the table was written out) instead of counted: nothing but the first and
    /// last group of `ctrl` is read here. A table whose control bytes do not match the
    /// counts misbehaves only in which values it finds: probes are bounded, indexing is
    /// checked (see [`count_ctrl`] for verifying them).
    pub fn from_counted(
        ctrl: Arr<u8>,
        slots: Arr<T>,
        items: usize,
        deleted: usize,
    ) -> Option<Self> {
        let buckets = slots.len();
        if !valid_buckets(buckets) || ctrl.len() != buckets + GROUP {
            return None;
        }
        // (the mirrored group is not compared here: that would read the far end of a
        // mapped array, a disk read when the file is not cached; count_ctrl checks it)
        let used = items.checked_add(deleted)?;
        if used > capacity(buckets) {
            return None;
        }
        Some(Table {
            ctrl,
            slots,
            buckets,
            items,
            growth_left: capacity(buckets) - used,
            old: None,
            spare: None,
        })
    }

    /// The control bytes and the slots, for writing the table out. Not while it grows
    /// in steps ([`Table::finish_growing`] first).
    pub fn raw(&self) -> (&[u8], &[T]) {
        assert!(
            self.old.is_none(),
            "finish_growing() before the table's arrays are used"
        );
        (&self.ctrl, &self.slots)
    }

    /// The lengths [`Table::raw`]'s arrays have, or will have once the table has grown.
    pub fn raw_lens(&self) -> (usize, usize) {
        (self.ctrl.len(), self.slots.len())
    }

    /// Where the arrays are (tests: which memory a growth took).
    #[cfg(test)]
    fn raw_ptrs(&self) -> (*const u8, *const T) {
        (self.ctrl.as_ptr(), self.slots.as_ptr())
    }

    /// Whether the table is growing in steps (an old table still holds values).
    pub fn is_growing(&self) -> bool {
        self.old.is_some()
    }

    pub fn len(&self) -> usize {
        self.items + self.old.as_ref().map_or(0, |d| d.table.items)
    }

    /// Slots holding a deleted marker (they count against the load until a rehash).
    pub fn deleted(&self) -> usize {
        capacity(self.buckets()) - self.growth_left - self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// How many values fit before the table must grow (while it grows in steps: once
    /// the old table's values have moved in too).
    pub fn room(&self) -> usize {
        let pending = self.old.as_ref().map_or(0, |d| d.table.items);
        self.growth_left.saturating_sub(pending)
    }

    /// Whether `slot` holds a value.
    pub fn is_full(&self, slot: usize) -> bool {
        match (slot.checked_sub(self.buckets), &self.old) {
            (Some(j), Some(d)) => d.table.is_full(j),
            (Some(_), None) => false,
            (None, _) => self.ctrl.get(slot).is_some_and(|&c| c < 0x80),
        }
    }

    fn group(&self, pos: usize) -> u64 {
        u64::from_le_bytes(self.ctrl[pos..pos + GROUP].try_into().expect("group"))
    }

    fn set_ctrl(&mut self, i: usize, c: u8) {
        self.ctrl[i] = c;
        if i < GROUP {
            self.ctrl[self.buckets + i] = c; // the mirrored first group
        }
    }

    /// Where `hash`'s probe starts: its low 57 bits as a fraction of the slot count.
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash << 7) * self.buckets as u128) >> 64) as usize
    }

    /// `pos` (< 2 × buckets) taken back into the table.
    #[inline(always)]
    fn wrap(&self, pos: usize) -> usize {
        if pos >= self.buckets {
            pos - self.buckets
        } else {
            pos
        }
    }

    /// The next group of a probe: triangular steps (1, 2, 3… groups on), wrapping around.
    /// Over a power-of-two slot count these visit every group; over another count they
    /// may come back to one, so after as many steps as there are groups a probe ends in
    /// a scan of the whole table ([`Table::scan`]) — which no table at most 7/8 full
    /// reaches in practice (every group on the way without an empty slot).
    #[inline(always)]
    fn step(&self, pos: usize, stride: usize) -> usize {
        let p = self.wrap(pos + stride);
        if p < self.buckets {
            p
        } else {
            p % self.buckets // (a stride longer than the table: a long probe of a small one)
        }
    }

    /// Whether a probe that has taken steps of up to `stride` has visited as many groups
    /// as the table has.
    fn probed_all(&self, stride: usize) -> bool {
        stride > self.buckets
    }

    /// The last resort of a probe that found no empty slot on its way: every slot in
    /// order, `Ok` where `eq` holds, else `Err` with the first free one (`None`: no slot
    /// is free — control bytes that are not a valid table's, a damaged snapshot).
    fn scan(&self, tag: u8, mut eq: impl FnMut(&T) -> bool) -> Result<usize, Option<usize>> {
        let mut free = None;
        for i in 0..self.buckets {
            let c = self.ctrl[i];
            if c == tag && eq(&self.slots[i]) {
                return Ok(i);
            }
            if free.is_none() && c & 0x80 != 0 {
                free = Some(i);
            }
        }
        Err(free)
    }

    /// The slot holding a value for which `eq` is true.
    pub fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<usize> {
        self.find_or_free(hash, eq).ok()
    }

    /// `Ok(slot)` where `eq` holds, or `Err(slot)` where a new value for `hash` goes. The
    /// caller must have made room with [`Table::reserve`] before inserting there.
    #[inline]
    pub fn find_or_free(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Result<usize, usize> {
        let here = self.probe(hash, &mut eq);
        match (here, &self.old) {
            (Err(free), Some(d)) => match d.table.probe(hash, &mut eq) {
                Ok(j) => Ok(self.buckets + j),
                Err(_) => Err(free),
            },
            _ => here,
        }
    }

    /// [`Table::find_or_free`] in this table's own arrays (not the old table's).
    #[inline]
    fn probe<F: FnMut(&T) -> bool>(&self, hash: u64, eq: &mut F) -> Result<usize, usize> {
        let tag = h2(hash);
        let mut pos = self.home(hash);
        let mut stride = 0;
        let mut free = None;
        loop {
            let g = self.group(pos);
            let mut m = match_byte(g, tag);
            while m != 0 {
                let i = self.wrap(pos + (m.trailing_zeros() / 8) as usize);
                if eq(&self.slots[i]) {
                    return Ok(i);
                }
                m &= m - 1;
            }
            if free.is_none() {
                let f = match_free(g);
                if f != 0 {
                    free = Some(self.wrap(pos + (f.trailing_zeros() / 8) as usize));
                }
            }
            if match_empty(g) != 0 {
                return Err(free.expect("a group with an empty slot has a free slot"));
            }
            stride += GROUP;
            if self.probed_all(stride) {
                // no empty slot met: the probe may have come back to groups it saw, so
                // the whole table is looked at (a value put in after such a probe went
                // where this finds it: the first free slot on the path, or the scan's)
                return match self.scan(tag, &mut *eq) {
                    Ok(i) => Ok(i),
                    Err(f) => match free.or(f) {
                        Some(f) => Err(f),
                        None => panic!("hash table control bytes damaged: no free slot"),
                    },
                };
            }
            pos = self.step(pos, stride);
        }
    }

    /// The first free slot on `hash`'s probe path (for values known to be absent).
    fn free_slot(&self, hash: u64) -> usize {
        let mut pos = self.home(hash);
        let mut stride = 0;
        loop {
            let f = match_free(self.group(pos));
            if f != 0 {
                return self.wrap(pos + (f.trailing_zeros() / 8) as usize);
            }
            stride += GROUP;
            if self.probed_all(stride) {
                return self
                    .scan(0x80, |_| false)
                    .err()
                    .flatten()
                    .expect("a free slot");
            }
            pos = self.step(pos, stride);
        }
    }

    /// Put `value` in a slot returned by [`Table::find_or_free`].
    pub fn insert_at(&mut self, slot: usize, hash: u64, value: T) {
        debug_assert!(slot < self.buckets && self.ctrl[slot] & 0x80 != 0);
        if self.ctrl[slot] == EMPTY {
            assert!(self.growth_left > 0, "reserve before inserting");
            self.growth_left -= 1;
        }
        self.set_ctrl(slot, h2(hash));
        self.slots[slot] = value;
        self.items += 1;
    }

    pub fn erase(&mut self, slot: usize) {
        if let Some(j) = slot.checked_sub(self.buckets) {
            let d = self.old.as_mut().expect("a slot of the old table");
            return d.table.erase(j);
        }
        debug_assert!(self.ctrl[slot] < 0x80);
        self.set_ctrl(slot, DELETED);
        // (saturating: control bytes of a damaged snapshot may hold more values than
        // its recorded count; its checksum check reports it, the table must not panic)
        self.items = self.items.saturating_sub(1);
    }

    pub fn get(&self, slot: usize) -> &T {
        match slot.checked_sub(self.buckets) {
            Some(j) => {
                &self
                    .old
                    .as_ref()
                    .expect("a slot of the old table")
                    .table
                    .slots[j]
            }
            None => &self.slots[slot],
        }
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut T {
        match slot.checked_sub(self.buckets) {
            Some(j) => {
                &mut self
                    .old
                    .as_mut()
                    .expect("a slot of the old table")
                    .table
                    .slots[j]
            }
            None => &mut self.slots[slot],
        }
    }

    /// Make room for `additional` more values; `rehash` recomputes a stored value's hash
    /// and `warm` may prefetch what `rehash` will read (the rehash runs a few values
    /// ahead of its prefetches: a key store read at random costs a cache miss per value).
    pub fn reserve(&mut self, additional: usize, rehash: impl Fn(&T) -> u64, warm: impl Fn(&T)) {
        self.reserve_as(Growth::Double, additional, rehash, warm);
    }

    /// [`Table::reserve`], growing as `growth` says when it must.
    pub fn reserve_as(
        &mut self,
        growth: Growth,
        additional: usize,
        rehash: impl Fn(&T) -> u64,
        warm: impl Fn(&T),
    ) {
        if self.old.is_some() {
            if growth == Growth::Steps && additional <= self.room() {
                self.move_old(step_budget(additional), &rehash, &warm);
                return;
            }
            self.finish_growing(&rehash, &warm);
        }
        if additional <= self.growth_left {
            if growth == Growth::Steps {
                self.prepare();
            }
            return;
        }
        let want = buckets_for(self.items + additional);
        let buckets = match growth {
            // only deleted markers to clear: rehash in place size
            Growth::Double | Growth::Steps if want <= self.buckets() => self.buckets(),
            Growth::Double | Growth::Steps => want.max(self.buckets() * 2),
            Growth::Sparse => (want / 5 * 8).next_multiple_of(GROUP).max(want),
            Growth::Exact => want,
        };
        // (arrays still being made are dropped by their thread when it finds nobody
        // waits for them any more)
        let spare = self.spare.take().and_then(Prepared::take);
        if growth == Growth::Steps && self.items >= STEPS_MIN && buckets > self.buckets() {
            let new = match spare {
                Some(s) if s.slots.len() == buckets => Self::with_arrays(buckets, s.ctrl, s.slots),
                other => {
                    if let Some(s) = other {
                        let bytes = s.bytes();
                        drop_in_background(s, bytes);
                    }
                    Self::with_buckets(buckets)
                }
            };
            let old = std::mem::replace(self, new);
            self.old = Some(Box::new(Draining {
                table: old,
                next: 0,
                idx: Vec::with_capacity(STEP * 2),
                hashes: Vec::with_capacity(STEP * 2),
            }));
            self.move_old(step_budget(additional), &rehash, &warm);
        } else {
            self.rehash_into(buckets, rehash, warm);
        }
    }

    /// Over the last sixteenth of a table's room before it doubles in steps, have the
    /// doubled table's arrays made on a thread of their own, every page of them written
    /// once: the put that starts the growth finds them ready instead of allocating them
    /// (4 MB of control bytes at 2M keys, ~1 ms), and the puts that move the old table's
    /// values into them do not take their page faults — a few ms per 2 MiB huge page of
    /// fresh memory in a VM, 30–50 puts over 1 ms in 2M puts before. Arrays not ready
    /// when the growth starts are not waited for (the growth allocates its own), nor
    /// made where no thread can be started.
    fn prepare(&mut self) {
        let near = self.growth_left <= capacity(self.buckets) / 16;
        self.prepare_if(near);
    }

    /// [`Table::prepare`] for values that will come in at once: have the doubled
    /// table's arrays made now if `additional` more values would not fit — an overlay
    /// of new keys that will merge into this (mapped) table, whose own puts never bring
    /// it near its last sixteenth. Without them, the merge's puts took the growth's
    /// fresh pages: 25 puts of 4.4 ms each (a 2.47M-key store reopened, the merge of
    /// its 65,536-key overlay doubling the table).
    pub fn prepare_for(&mut self, additional: usize) {
        let short = self.old.is_none() && additional > self.growth_left;
        self.prepare_if(short);
    }

    fn prepare_if(&mut self, due: bool) {
        if let Some(spare) = &mut self.spare {
            spare.poll(); // (made: kept here, counted in `memory()`)
            return;
        }
        if self.items < STEPS_MIN || !due {
            return;
        }
        let buckets = self.buckets * 2;
        self.spare = Prepared::start(move || Spare::<T>::new(buckets));
    }

    /// Move what is left of the old table of a table growing in steps (nothing to do
    /// otherwise): before its arrays are used whole ([`Table::raw`]).
    pub fn finish_growing(&mut self, rehash: impl Fn(&T) -> u64, warm: impl Fn(&T)) {
        self.move_old(usize::MAX, &rehash, &warm);
    }

    /// Move the values of the next `budget` slots of the old table into this one (a
    /// table growing in steps); drop the old table once it is empty.
    fn move_old(&mut self, budget: usize, rehash: &impl Fn(&T) -> u64, warm: &impl Fn(&T)) {
        let Some(mut d) = self.old.take() else {
            return;
        };
        let end = d.next.saturating_add(budget).min(d.table.buckets);
        let (mut idx, mut hashes) = (std::mem::take(&mut d.idx), std::mem::take(&mut d.hashes));
        while d.next < end {
            let stop = end.min(d.next + MOVE_CHUNK);
            idx.clear();
            idx.extend((d.next..stop).filter(|&i| d.table.ctrl[i] < 0x80));
            self.take_values(&d.table, &idx, &mut hashes, rehash, warm);
            for &i in &idx {
                d.table.erase(i);
            }
            d.next = stop;
        }
        (d.idx, d.hashes) = (idx, hashes);
        // (every slot looked at ends it too: a damaged snapshot's count may be off)
        if d.table.items > 0 && d.next < d.table.buckets {
            self.old = Some(d);
            return;
        }
        let freed = d.table.memory();
        drop_in_background(d, freed);
    }

    /// Rehash into a table sized for the values it holds ([`buckets_for`]: 80 % full)
    /// when it has over a quarter more slots than that — a table grown by doubling is
    /// 44–88 % full — clearing deleted markers on the way (and ending a growth in steps).
    /// For a table about to be written out (`INDEX`): a million keys in 1.25M slots
    /// instead of 2M, 21 MB of table instead of 34. Returns whether it rehashed.
    pub fn fit(&mut self, rehash: impl Fn(&T) -> u64, warm: impl Fn(&T)) -> bool {
        let want = buckets_for(self.len());
        // (and one in its last sixteenth too, as full as a table gets before it doubles:
        // written out that way, the next open's first merge of new keys would double
        // it at once, with no arrays made ahead)
        let near_full = self.growth_left <= capacity(self.buckets) / 16;
        if self.old.is_none() && self.buckets() <= want + want / 4 && !near_full {
            return false;
        }
        self.rehash_into(want, rehash, warm);
        true
    }

    /// Put the values in `src`'s slots `idx` into this table, which has room for them
    /// and holds none of them. The keys' hashes are computed a few values ahead of their
    /// placement, with prefetches (`warm` for what `rehash` reads, then each home group):
    /// a key store read at random costs a cache miss per value, overlapped this way.
    fn take_values(
        &mut self,
        src: &Table<T>,
        idx: &[usize],
        hashes: &mut Vec<u64>,
        rehash: &impl Fn(&T) -> u64,
        warm: &impl Fn(&T),
    ) {
        const AHEAD: usize = 16;
        hashes.clear();
        for &i in idx.iter().take(AHEAD) {
            warm(&src.slots[i]);
        }
        for (j, &i) in idx.iter().enumerate() {
            if let Some(&k) = idx.get(j + AHEAD) {
                warm(&src.slots[k]);
            }
            hashes.push(rehash(&src.slots[i]));
        }
        for &h in hashes.iter().take(AHEAD) {
            self.warm_own(h);
        }
        for (j, (&i, &h)) in idx.iter().zip(hashes.iter()).enumerate() {
            if let Some(&ha) = hashes.get(j + AHEAD) {
                self.warm_own(ha);
            }
            let s = self.free_slot(h);
            self.insert_at(s, h, src.slots[i]);
        }
    }

    /// Move every value into a new table of `buckets` slots (room for all of them).
    fn rehash_into(&mut self, buckets: usize, rehash: impl Fn(&T) -> u64, warm: impl Fn(&T)) {
        debug_assert!(self.len() <= capacity(buckets));
        // In chunks, so that the temporaries stay small: whole-table index and hash
        // arrays (12 bytes per value) would be freed just after the new table was
        // allocated — megabytes the allocator keeps but nobody uses (resident memory
        // well beyond the index's own).
        let mut new = Self::with_buckets(buckets);
        let mut idx: Vec<usize> = Vec::with_capacity(MOVE_CHUNK);
        let mut hashes: Vec<u64> = Vec::with_capacity(MOVE_CHUNK);
        let old = self.old.take();
        for part in std::iter::once(&*self).chain(old.as_ref().map(|d| &d.table)) {
            let mut full = part.own_slots();
            loop {
                idx.clear();
                idx.extend(full.by_ref().take(MOVE_CHUNK));
                if idx.is_empty() {
                    break;
                }
                new.take_values(part, &idx, &mut hashes, &rehash, &warm);
            }
        }
        let old = std::mem::replace(self, new);
        let freed = old.memory() + old.old.as_ref().map_or(0, |d| d.table.memory());
        drop(old);
        if freed >= 1 << 20 {
            release_free_memory();
        }
    }

    /// Prefetch the group and slot where a value hashed to `hash` would be found.
    pub fn warm(&self, hash: u64) {
        self.warm_own(hash);
        if let Some(d) = &self.old {
            d.table.warm_own(hash);
        }
    }

    fn warm_own(&self, hash: u64) {
        let home = self.home(hash);
        prefetch(self.ctrl.as_ptr().wrapping_add(home));
        prefetch(self.slots.as_ptr().wrapping_add(home));
    }

    /// Slots of every value (the old table's too, while the table grows in steps).
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        let old = self.old.as_ref().map(|d| &d.table);
        let at = self.buckets;
        self.own_slots().chain(
            old.into_iter()
                .flat_map(move |t| t.own_slots().map(move |j| at + j)),
        )
    }

    /// Slots of this table's own arrays that hold a value.
    fn own_slots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.buckets()).filter(|&i| self.ctrl[i] < 0x80)
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots().map(|i| self.get(i))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        fn own<'a, T>(ctrl: &'a [u8], slots: &'a mut [T]) -> impl Iterator<Item = &'a mut T> {
            slots
                .iter_mut()
                .zip(ctrl.iter())
                .filter(|(_, &c)| c < 0x80)
                .map(|(v, _)| v)
        }
        let rest = self
            .old
            .as_mut()
            .map(|d| own(&d.table.ctrl, &mut d.table.slots));
        own(&self.ctrl, &mut self.slots).chain(rest.into_iter().flatten())
    }

    /// Keep only values for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.retain_own(&mut keep);
        if let Some(d) = &mut self.old {
            d.table.retain_own(&mut keep);
        }
    }

    fn retain_own(&mut self, keep: &mut dyn FnMut(&T) -> bool) {
        for i in 0..self.buckets() {
            if self.ctrl[i] < 0x80 && !keep(&self.slots[i]) {
                self.erase(i);
            }
        }
    }

    /// Bytes of memory the arrays use (the old table's too, while it grows in steps).
    pub fn memory(&self) -> usize {
        let old = self.old.as_ref().map_or(0, |d| d.table.memory());
        let spare = match &self.spare {
            Some(p) => p.ready().map_or(0, Spare::bytes),
            None => 0,
        };
        self.ctrl.bytes_used() + self.slots.bytes_used() + old + spare
    }

    /// Whether the arrays are still those of a mapped snapshot.
    pub fn is_mapped(&self) -> bool {
        self.ctrl.is_mapped()
    }
}

impl<T: Slot> Default for Table<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A xorshift64 generator from `seed` (non-zero): the tests' random operations.
    pub(crate) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    fn hash(k: u64) -> u64 {
        // a deliberately weak hash: many shared low bits stress probing and tags
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k << 3)
    }

    fn put(t: &mut Table<u64>, k: u64) -> bool {
        t.reserve(1, |v| hash(*v), |_| ());
        match t.find_or_free(hash(k), |v| *v == k) {
            Ok(_) => false,
            Err(s) => {
                t.insert_at(s, hash(k), k);
                true
            }
        }
    }

    #[test]
    fn insert_find_erase_and_reuse() {
        let mut t: Table<u64> = Table::new();
        for k in 0..10_000 {
            assert!(put(&mut t, k));
        }
        assert!(!put(&mut t, 77));
        assert_eq!(t.len(), 10_000);
        for k in (0..10_000).step_by(2) {
            let s = t.find(hash(k), |v| *v == k).expect("present");
            t.erase(s);
        }
        assert_eq!(t.len(), 5_000);
        for k in 0..10_000 {
            assert_eq!(t.find(hash(k), |v| *v == k).is_some(), k % 2 == 1, "{k}");
        }
        // churn: deleted markers are reused or cleared by an in-place rehash
        for round in 0..20u64 {
            for k in 0..5_000 {
                let k = 1_000_000 * (round + 1) + k;
                assert!(put(&mut t, k));
                let s = t.find(hash(k), |v| *v == k).expect("just put");
                t.erase(s);
            }
        }
        assert_eq!(t.len(), 5_000);
        assert!(t.buckets() <= 16_384, "churn must not grow the table");
        let mut seen: Vec<u64> = t.iter().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10_000).filter(|k| k % 2 == 1).collect::<Vec<_>>());
    }

    #[test]
    fn tables_of_any_whole_number_of_groups() {
        // sized for a count: not a power of two, probes wrap by comparison
        for n in [1usize, 7, 100, 1_000, 12_345] {
            let mut t: Table<u64> = Table::new();
            t.reserve(n, |v| hash(*v), |_| ());
            let b = t.buckets();
            assert!(valid_buckets(b) && t.room() >= n);
            if n > 7 {
                assert_eq!(b, buckets_for(n)); // (7 fit the first 8 slots)
            }
            for k in 0..n as u64 {
                assert!(put(&mut t, k));
            }
            assert_eq!(t.buckets(), b, "{n} keys fit without growing");
            for k in 0..n as u64 {
                assert!(t.find(hash(k), |v| *v == k).is_some(), "{n}: {k}");
            }
            assert!(t.find(hash(u64::MAX), |v| *v == u64::MAX).is_none());
            // grown past it (doubling from there), then erased and put back
            for k in n as u64..3 * n as u64 + 50 {
                assert!(put(&mut t, k));
            }
            for k in (0..3 * n as u64 + 50).step_by(3) {
                let s = t.find(hash(k), |v| *v == k).expect("present");
                t.erase(s);
            }
            for k in 0..3 * n as u64 + 50 {
                assert_eq!(
                    t.find(hash(k), |v| *v == k).is_some(),
                    k % 3 != 0,
                    "{n}: {k}"
                );
            }
            // the control bytes count as a table's (the mirrored first group included)
            let (c, _) = t.raw();
            assert_eq!(count_ctrl(c, t.buckets()), Some((t.len(), t.deleted())));
        }
    }

    #[test]
    fn random_operations_match_a_model() {
        // puts, erases, reservations of any size (tables of any whole number of groups),
        // fits and round trips through the raw arrays, against a HashSet
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let mut t: Table<u64> = Table::new();
        let mut model = std::collections::HashSet::new();
        for step in 0..60_000u32 {
            let r = next();
            let k = next() % 5_000; // (a small key space: erases and re-puts meet)
            match r % 100 {
                0..=59 => assert_eq!(put(&mut t, k), model.insert(k), "step {step}"),
                60..=89 => {
                    let s = t.find(hash(k), |v| *v == k);
                    assert_eq!(s.is_some(), model.remove(&k), "step {step}");
                    if let Some(s) = s {
                        t.erase(s);
                    }
                }
                90..=94 => t.reserve((next() % 3_000) as usize, |v| hash(*v), |_| ()),
                95..=97 => {
                    t.fit(|v| hash(*v), |_| ());
                }
                _ => {
                    let (c, s) = t.raw();
                    t = Table::from_raw(c.to_vec().into(), s.to_vec().into()).expect("raw");
                }
            }
            assert!(valid_buckets(t.buckets()) && t.len() == model.len());
        }
        for k in 0..5_000 {
            assert_eq!(
                t.find(hash(k), |v| *v == k).is_some(),
                model.contains(&k),
                "{k}"
            );
        }
        let mut seen: Vec<u64> = t.iter().copied().collect();
        let mut want: Vec<u64> = model.into_iter().collect();
        seen.sort_unstable();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn growing_in_steps_matches_a_model() {
        // a table of more than STEPS_MIN values grows in steps: puts, erases, updates of
        // values still in the old table, listings and fits meanwhile, against a HashMap
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        // values: key in the high 32 bits, a version in the low ones
        let key = |v: u64| v >> 32;
        let h = |v: &u64| hash(key(*v));
        let mut t: Table<u64> = Table::new();
        let mut model = std::collections::HashMap::new();
        let (mut grew, mut updated_old, mut erased_old) = (0, 0, 0);
        for step in 0..400_000u64 {
            let r = next() % 100;
            let k = next() % 150_000;
            let was = t.is_growing();
            if r < 70 {
                t.reserve_as(Growth::Steps, 1, h, |_| ());
                if !was && t.is_growing() {
                    grew += 1;
                    // the put that set the growth off moved only a few values
                    assert!(t.old.as_ref().unwrap().table.items > STEPS_MIN / 2);
                }
                let v = k << 32 | (step & 0xFFFF_FFFF);
                match t.find_or_free(hash(k), |e| key(*e) == k) {
                    Ok(i) => {
                        updated_old += usize::from(i >= t.buckets());
                        *t.get_mut(i) = v;
                    }
                    Err(i) => t.insert_at(i, hash(k), v),
                }
                model.insert(k, v);
            } else if r < 90 {
                let s = t.find(hash(k), |e| key(*e) == k);
                assert_eq!(s.map(|i| *t.get(i)), model.remove(&k), "step {step}");
                if let Some(i) = s {
                    erased_old += usize::from(i >= t.buckets());
                    t.erase(i);
                }
            } else if r < 99 {
                let s = t.find(hash(k), |e| key(*e) == k);
                assert_eq!(s.map(|i| *t.get(i)), model.get(&k).copied(), "step {step}");
            } else if step % 7_000 == 0 {
                let mut seen: Vec<u64> = t.iter().copied().collect();
                let mut want: Vec<u64> = model.values().copied().collect();
                seen.sort_unstable();
                want.sort_unstable();
                assert_eq!(seen, want, "step {step}");
            }
            assert_eq!(t.len(), model.len(), "step {step}");
        }
        assert!(grew >= 2, "grew in steps {grew} times");
        assert!(
            updated_old > 0 && erased_old > 0,
            "{updated_old} {erased_old}"
        );
        // a table growing in steps is made whole before its arrays are used
        while !t.is_growing() {
            let k = 1_000_000 + next() % 1_000_000;
            t.reserve_as(Growth::Steps, 1, h, |_| ());
            if let Err(i) = t.find_or_free(hash(k), |e| key(*e) == k) {
                t.insert_at(i, hash(k), k << 32);
                model.insert(k, k << 32);
            }
        }
        let mut retained = model.clone();
        retained.retain(|k, _| k % 3 != 0);
        t.retain(|v| key(*v) % 3 != 0);
        assert_eq!(t.len(), retained.len());
        for v in t.iter_mut() {
            *v += 1;
        }
        assert!(t.fit(h, |_| ()), "fit ends the growth");
        assert!(!t.is_growing());
        let (c, s) = t.raw();
        let back = Table::from_raw(c.to_vec().into(), s.to_vec().into()).expect("whole");
        assert_eq!(back.len(), retained.len());
        for (k, v) in retained {
            let i = back.find(hash(k), |e| key(*e) == k).expect("present");
            assert_eq!(*back.get(i), v + 1);
        }
    }

    #[test]
    fn the_doubled_tables_arrays_are_made_ahead() {
        let mut t: Table<u64> = Table::new();
        let mut k = 0u64;
        let mut put = |t: &mut Table<u64>| {
            t.reserve_as(Growth::Steps, 1, |v| hash(*v), |_| ());
            let s = t.find_or_free(hash(k), |v| *v == k).expect_err("new");
            t.insert_at(s, hash(k), k);
            k += 1;
        };
        while t.len() < STEPS_MIN || t.is_growing() {
            put(&mut t);
        }
        // up to the put before the growth: the doubled table's arrays are made ahead
        let b = t.buckets();
        while t.room() > 1 {
            put(&mut t);
        }
        put(&mut t);
        let ahead = t.spare.as_mut().expect("asked for");
        assert!(ahead.wait(), "made ahead");
        let spare = ahead.ready().expect("made");
        assert_eq!(spare.ctrl.len(), 2 * b + GROUP);
        assert!(spare.ctrl.iter().all(|&c| c == EMPTY));
        assert!(spare.slots.len() == 2 * b && spare.slots.iter().all(|&v| v == 0));
        let (ctrl_at, slots_at) = (spare.ctrl.as_ptr(), spare.slots.as_ptr());
        put(&mut t); // the growth: the new table is made of them
        assert!(t.is_growing() && t.spare.is_none() && t.buckets() == 2 * b);
        assert_eq!(t.raw_ptrs(), (ctrl_at, slots_at));
        while t.is_growing() {
            put(&mut t);
        }
        assert!((0..k).all(|v| t.find(hash(v), |x| *x == v).is_some()));
    }

    #[test]
    fn arrays_for_values_coming_at_once_are_made_ahead_and_fit_leaves_room() {
        // a table well short of its last sixteenth: `prepare` asks for nothing
        let mut t: Table<u64> = Table::new();
        t.reserve_as(Growth::Exact, 40_000, |v| hash(*v), |_| ());
        for k in 0..STEPS_MIN as u64 + 1_000 {
            assert!(put(&mut t, k));
        }
        let (b, room) = (t.buckets(), t.room());
        assert!(room > capacity(b) / 16, "{room} of {b}");
        t.prepare_for(room); // (fits: nothing made)
        assert!(t.spare.is_none());
        // more than fits (an overlay of new keys to merge): the doubled arrays are made
        t.prepare_for(room + 1);
        let ahead = t.spare.as_mut().expect("asked for");
        assert!(ahead.wait(), "made ahead");
        let at = ahead.ready().expect("made").slots.as_ptr();
        t.reserve_as(Growth::Steps, room + 1, |v| hash(*v), |_| ());
        assert_eq!(t.buckets(), 2 * b); // (made of them; moving as many as it takes)
        assert_eq!(t.raw_ptrs().1, at);
        t.finish_growing(|v| hash(*v), |_| ());
        // filled into its last sixteenth, then fitted (as before a snapshot is written):
        // rehashed to 80 % full, room left for the next open's first keys
        while t.room() > capacity(t.buckets()) / 16 {
            let k = t.len() as u64;
            assert!(put(&mut t, k));
        }
        assert!(t.fit(|v| hash(*v), |_| ()));
        assert_eq!(t.buckets(), buckets_for(t.len()));
        assert!(t.room() > capacity(t.buckets()) / 16);
        assert!((0..t.len() as u64).all(|v| t.find(hash(v), |x| *x == v).is_some()));
        // and a fitted table is left alone
        assert!(!t.fit(|v| hash(*v), |_| ()));
    }

    #[test]
    fn a_rebuild_reserves_a_half_full_table_and_fit_packs_it() {
        let mut t: Table<u64> = Table::new();
        t.reserve_as(Growth::Sparse, 10_000, |v| hash(*v), |_| ());
        let b = t.buckets();
        assert!(
            valid_buckets(b) && (19_000..=21_000).contains(&b),
            "{b} slots"
        );
        for k in 0..10_000 {
            assert!(put(&mut t, k));
        }
        assert_eq!(t.buckets(), b, "no growth on the way");
        assert!(t.fit(|v| hash(*v), |_| ()));
        assert_eq!(t.buckets(), buckets_for(10_000));
        assert!((0..10_000).all(|k| t.find(hash(k), |v| *v == k).is_some()));
    }

    #[test]
    fn fit_shrinks_a_table_that_grew_by_doubling() {
        let mut t: Table<u64> = Table::new();
        for k in 0..1_000 {
            put(&mut t, k); // one at a time: 8, 16, … 2,048 slots (49 % full)
        }
        for k in 0..100 {
            let s = t.find(hash(k), |v| *v == k).expect("present");
            t.erase(s);
        }
        assert_eq!(t.buckets(), 2_048);
        assert!(t.fit(|v| hash(*v), |_| ()));
        assert_eq!(
            (t.buckets(), t.len(), t.deleted()),
            (buckets_for(900), 900, 0)
        );
        for k in 0..1_000 {
            assert_eq!(t.find(hash(k), |v| *v == k).is_some(), k >= 100, "{k}");
        }
        assert!(!t.fit(|v| hash(*v), |_| ()), "already fitted");
        let (c, s) = t.raw();
        let back = Table::from_raw(c.to_vec().into(), s.to_vec().into()).expect("consistent");
        assert!((100..1_000).all(|k| back.find(hash(k), |v| *v == k).is_some()));
    }

    #[test]
    fn a_probe_that_meets_no_empty_slot_scans_the_table() {
        // 24 slots (3 groups), 21 used (the most a table may), the empty ones at 21-23.
        // A probe from home slot 0-2 covers slots home..home+16 and then comes back to
        // its start (triangular steps over 3 groups): it never meets an empty slot, nor
        // slot 18 — the scan must find what is there.
        let home = |h: u64| ((u128::from(h << 7) * 24) >> 64) as usize;
        let mut near = (0u64..).filter(|&k| home(hash(k)) <= 2);
        let (v, absent) = (near.next().expect("a key"), near.next().expect("another"));
        let mut ctrl = vec![0x11u8; 24 + GROUP];
        let mut slots: Vec<u64> = (0..24).map(|i| 1_000_000 + i).collect();
        ctrl[3] = DELETED;
        ctrl[18] = h2(hash(v));
        slots[18] = v;
        for c in &mut ctrl[21..24] {
            *c = EMPTY;
        }
        let mirror: Vec<u8> = ctrl[..GROUP].to_vec();
        ctrl[24..].copy_from_slice(&mirror);
        assert_eq!(count_ctrl(&ctrl, 24), Some((20, 1)));
        let t = Table::from_counted(ctrl.into(), slots.into(), 20, 1).expect("counts fit");
        assert_eq!(t.home(hash(v)), home(hash(v)));
        assert_eq!(t.find(hash(v), |x| *x == v), Some(18));
        // absent: the first free slot on the probe's path
        assert_eq!(t.find_or_free(hash(absent), |x| *x == absent), Err(3));
    }

    #[test]
    fn damaged_control_bytes_never_hang_a_lookup() {
        // no empty slot anywhere (only deleted markers): a valid table never looks like
        // this, a damaged snapshot could; probing stops after visiting every group
        let t: Table<u64> = Table::from_counted(
            vec![DELETED; 64 + GROUP].into(),
            vec![0u64; 64].into(),
            0,
            0,
        )
        .expect("counts are only checked against the capacity");
        for k in 0..100 {
            assert!(t.find(hash(k), |v| *v == k).is_none());
            assert!(t.find_or_free(hash(k), |v| *v == k).is_err()); // a deleted slot is free
        }
        assert!(count_ctrl(&[DELETED; 64 + GROUP], 64).is_none());
    }

    #[test]
    fn control_byte_counts_match_a_byte_by_byte_count() {
        // every byte value at every position of a group, among full/empty/deleted ones
        let base: Vec<u8> = (0..64).map(|i| [EMPTY, DELETED, 5, 0x7F][i % 4]).collect();
        for v in 0..=255u8 {
            for at in 0..GROUP {
                let mut ctrl = base.clone();
                ctrl[at] = v;
                ctrl.extend_from_within(..GROUP);
                let naive = {
                    let b = &ctrl[..64];
                    let items = b.iter().filter(|&&c| c < 0x80).count();
                    let deleted = b.iter().filter(|&&c| c == DELETED).count();
                    let bad = b.iter().any(|&c| c > DELETED && c != EMPTY);
                    (!bad && items + deleted <= capacity(64)).then_some((items, deleted))
                };
                assert_eq!(count_ctrl(&ctrl, 64), naive, "byte {v:#x} at {at}");
            }
        }
        // small tables: a remainder of 8 bytes past the 16-byte vectors, or none at all
        for n in [8usize, 16, 32, 64] {
            for seed in 0..50u8 {
                let mut ctrl: Vec<u8> = (0..n)
                    .map(|i| [EMPTY, DELETED, (i as u8 ^ seed) & 0x7F][(i + seed as usize) % 3])
                    .collect();
                if seed % 10 == 9 {
                    ctrl[seed as usize % n] = 0x90; // no control byte
                }
                ctrl.extend_from_within(..GROUP);
                let b = &ctrl[..n];
                let items = b.iter().filter(|&&c| c < 0x80).count();
                let deleted = b.iter().filter(|&&c| c == DELETED).count();
                let bad = b.iter().any(|&c| c > DELETED && c != EMPTY);
                let naive = (!bad && items + deleted <= capacity(n)).then_some((items, deleted));
                assert_eq!(count_ctrl(&ctrl, n), naive, "{n} buckets, seed {seed}");
            }
        }
        // a large table (counts summed over many 255-word blocks)
        let n = 1 << 16;
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let mut ctrl: Vec<u8> = (0..n)
            .map(|_| {
                let x = next();
                [EMPTY, EMPTY, DELETED, (x >> 40) as u8 & 0x7F][(x & 3) as usize]
            })
            .collect();
        ctrl.extend_from_within(..GROUP);
        let items = ctrl[..n].iter().filter(|&&c| c < 0x80).count();
        let deleted = ctrl[..n].iter().filter(|&&c| c == DELETED).count();
        assert_eq!(count_ctrl(&ctrl, n), Some((items, deleted)));
    }

    #[test]
    fn raw_round_trip_and_rejects_garbage() {
        let mut t: Table<u64> = Table::new();
        for k in 0..1000 {
            put(&mut t, k);
        }
        let (c, s) = t.raw();
        let back = Table::from_raw(c.to_vec().into(), s.to_vec().into()).expect("consistent");
        assert_eq!(back.len(), 1000);
        for k in 0..1000 {
            assert!(back.find(hash(k), |v| *v == k).is_some());
        }
        let mut bad = c.to_vec();
        bad[0] = 0x90; // not a valid control byte
        bad[t.buckets()] = 0x90;
        assert!(Table::from_raw(bad.into(), s.to_vec().into()).is_none());
        assert!(Table::<u64>::from_raw(c[1..].to_vec().into(), s.to_vec().into()).is_none());
    }
}
