//! The live overlay (`OVERLAY`): what changed in the index since the `INDEX` snapshot,
//! kept in a file mapped *shared*, so that it outlives a process that is killed.
//!
//! A store opened from a snapshot uses the snapshot's table in place and puts new and
//! updated keys in a small overlay table (see [`super::index::Index`]). Without this
//! file, the overlay lives on the heap and a killed writer's successor rebuilds it by
//! replaying every record appended since the snapshot (10,000 records: 3.5–5 ms). Here
//! the overlay's arrays, its keys and the list of snapshot slots it erased live in this
//! file's shared mapping — the page cache — and a header says which log position they
//! cover. The next open maps them back and replays only what follows that position.
//!
//! A process can die in the middle of an update. Every update first makes the header's
//! `busy` word odd and makes it even again only once the index matches the log up to the
//! header's position (the records' bytes are in the file by then); an odd `busy` at open
//! means "killed mid-update", and the file is ignored (replay from the snapshot, as
//! without it). The page cache does not survive a crash of the machine, and what the
//! disk holds of this file afterwards is any mix of old and new pages: the header keeps
//! the kernel's boot id, and a file from another boot is ignored too. So is a file made
//! over another snapshot (the snapshot's identity is in the header), of another layout,
//! or whose counts do not match its control bytes.
//!
//! A read-only process never uses the file in place (the writer changes it): it takes
//! a copy ([`copy`]) that counts only if `busy` was even before it and unchanged after
//! it — a seqlock, so the writer orders `busy` and the update's stores with release
//! fences, not compiler fences alone.
//!
//! Layout (little-endian u64 header words, then page-aligned sections, sized per store
//! by [`Layout::for_snapshot`] — 0.12 MiB for a small store, 7.4 MiB at most — and
//! fully allocated with `fallocate`, so that no store into it can fault on a full disk):
//! ```text
//! header  magic+version, snapshot ident, boot id (2 words), busy, active segment,
//!         offset, seq, table items, table deleted, shadows, dead key bytes, key bytes,
//!         erased count, segment count, snapshot arena length, buckets, key capacity
//! segs    SEGS_CAP × (u32 id, u32 0, u64 dead bytes)
//! erased  buckets / 2 × u32: snapshot slots erased, in order
//! ctrl    buckets + 8 control bytes of the overlay table
//! slots   buckets × 16-byte entries
//! keys    key capacity: the keys added since the snapshot (the arena's tail)
//! ```
//! When the overlay outgrows any of these (it is merged into the table at
//! `OVERLAY_MAX` keys anyway), the store goes on with a heap overlay and removes the
//! file: a process killed after that replays from the snapshot again.

use super::index::Entry;
use super::mapped::{Arr, Map};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const FILE: &str = "OVERLAY";
/// (version 4: home slots scaled from the hash, not masked; a file of version 2 or 3
/// is another layout's, not used)
const MAGIC: u64 = u32::from_le_bytes(*b"XVO1") as u64 | (4 << 32);
/// Most buckets an overlay table has: `OVERLAY_MAX` (65,536) keys at 7/8 load leave
/// room for as many erased slots again. A store of fewer keys gets a smaller file.
pub const MAX_BUCKETS: usize = 1 << 17;
const MIN_BUCKETS: usize = 1 << 10;
/// Most bytes of keys a file holds (`[u32 len][key]` at 4-byte boundaries).
pub const MAX_TAIL: usize = 4 << 20;
const MIN_TAIL: usize = 64 << 10;
pub const SEGS_CAP: usize = 1024;
const GROUP: usize = 8;
const PAGE: usize = 4096;

const fn up(x: usize) -> usize {
    x.div_ceil(PAGE) * PAGE
}

/// Where a file's sections lie, from its table's buckets and its key capacity.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Layout {
    pub buckets: usize,
    pub tail_cap: usize,
}

impl Layout {
    /// The size for a store whose snapshot holds `keys` keys in `key_bytes` bytes: room
    /// for about as many new keys again, within [1,024 buckets and 64 KiB of keys,
    /// 131,072 and 4 MiB] — 0.12 MiB for a small store, 7.4 MiB from 128K keys up. An
    /// overlay that outgrows its file goes back to the heap (a killed writer is then
    /// replayed from INDEX: a session that doubled a small store).
    pub fn for_snapshot(keys: usize, key_bytes: usize) -> Layout {
        Layout {
            buckets: keys
                .min(MAX_BUCKETS)
                .next_power_of_two()
                .clamp(MIN_BUCKETS, MAX_BUCKETS),
            tail_cap: up(key_bytes.min(MAX_TAIL)).clamp(MIN_TAIL, MAX_TAIL),
        }
    }

    fn valid(&self) -> bool {
        self.buckets.is_power_of_two()
            && (MIN_BUCKETS..=MAX_BUCKETS).contains(&self.buckets)
            && (MIN_TAIL..=MAX_TAIL).contains(&self.tail_cap)
    }

    /// Erased snapshot slots the file can list.
    pub fn erased_cap(&self) -> usize {
        self.buckets / 2
    }
    fn segs_off(&self) -> usize {
        PAGE
    }
    fn erased_off(&self) -> usize {
        up(self.segs_off() + SEGS_CAP * 16)
    }
    fn ctrl_off(&self) -> usize {
        up(self.erased_off() + self.erased_cap() * 4)
    }
    fn slots_off(&self) -> usize {
        up(self.ctrl_off() + self.buckets + GROUP)
    }
    fn tail_off(&self) -> usize {
        up(self.slots_off() + self.buckets * std::mem::size_of::<Entry>())
    }
    pub fn file_len(&self) -> usize {
        up(self.tail_off() + self.tail_cap)
    }
}

/// The header's words (u64 each, in this order from offset 0).
#[derive(Clone, Copy)]
enum W {
    Magic,
    Ident,
    Boot,
    Boot2,
    Busy,
    Active,
    Off,
    Seq,
    Items,
    Deleted,
    Shadows,
    Dead,
    Tail,
    Erased,
    Segs,
    Base,
    Buckets,
    TailCap,
}

/// What an update left behind, written to the header before `busy` goes even.
pub struct Settled {
    /// The log position the index covers: every record before it, none after.
    pub active: u32,
    pub off: u64,
    pub seq: u64,
    pub items: u64,
    pub deleted: u64,
    pub shadows: u64,
    pub dead: u64,
    pub tail_len: u64,
    pub erased: u64,
}

/// A header that passed its checks (what the last update left), with the lists it holds.
pub struct Header {
    pub at: Settled,
    pub base_len: u64,
    pub erased: Vec<u32>,
    pub segs: Vec<(u32, u64)>,
}

/// This boot of the kernel, as two words (`None` where /proc does not say).
/// `URINGKIT_KV_BOOT_ID` stands in for it where set (read at each call): a test that
/// simulates a crash of the machine (a power-cut filesystem) gives the opens after the
/// cut another value, so that they treat the overlay as a reboot's must.
fn boot_id() -> Option<[u64; 2]> {
    if let Some(v) = std::env::var_os("URINGKIT_KV_BOOT_ID") {
        let b = v.as_encoded_bytes();
        // (two FNV-1a hashes of the value: any string names a boot)
        let fnv = |seed: u64| {
            b.iter()
                .fold(seed, |h, &c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3))
        };
        return Some([fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4)]);
    }
    static BOOT: std::sync::OnceLock<Option<[u64; 2]>> = std::sync::OnceLock::new();
    *BOOT.get_or_init(read_boot_id)
}

fn read_boot_id() -> Option<[u64; 2]> {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: String = s.trim().chars().filter(|c| *c != '-').collect();
    let v = u128::from_str_radix(&hex, 16).ok()?;
    Some([(v >> 64) as u64, v as u64])
}

/// The mapped `OVERLAY` file.
pub struct Shared {
    map: Arc<Map>,
    path: PathBuf,
    lay: Layout,
}

impl Shared {
    fn word(&self, w: W) -> &AtomicU64 {
        let i = w as usize;
        // SAFETY: the header page lies inside the mapping (len > PAGE), the mapping is
        // page-aligned so every word is 8-aligned, and it lives as long as self.
        unsafe { &*self.map.as_ptr().add(i * 8).cast::<AtomicU64>() }
    }

    fn get(&self, w: W) -> u64 {
        self.word(w).load(Ordering::Relaxed)
    }

    fn set(&self, w: W, v: u64) {
        self.word(w).store(v, Ordering::Relaxed)
    }

    /// A new, empty overlay over the snapshot `ident` (whose key arena is `base_len`
    /// bytes), replacing any file there. Fails where the file cannot be fully allocated
    /// (a full disk, a filesystem without fallocate) or the boot id is unknown: the
    /// store then keeps its overlay on the heap.
    pub fn create(dir: &Path, ident: u64, base_len: u64, lay: Layout) -> io::Result<Shared> {
        assert!(lay.valid(), "{lay:?}");
        let boot = boot_id().ok_or_else(|| io::Error::other("no boot id"))?;
        let path = dir.join(FILE);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
        // SAFETY: c is a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is ours; fallocate allocates blocks (reads stay zero).
        let r = match unsafe { libc::fallocate(fd, 0, 0, lay.file_len() as i64) } {
            0 => Map::shared(fd, lay.file_len()),
            _ => Err(io::Error::last_os_error()),
        };
        // SAFETY: fd is ours (the mapping keeps the file).
        unsafe { libc::close(fd) };
        let map = match r {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        // a fault reads (or, here, zero-fills) one page, not the device's read-ahead
        // window around it (8 MiB on some disks: ~3 ms for the first touch)
        map.advise_random();
        let sh = Shared { map, path, lay };
        // SAFETY: the control bytes lie inside the mapping (the file's length covers them).
        unsafe {
            std::ptr::write_bytes(
                sh.map.as_ptr().add(lay.ctrl_off()),
                0xFF,
                lay.buckets + GROUP,
            );
        }
        sh.set(W::Busy, 1); // (odd until the first update is settled)
        sh.set(W::Ident, ident);
        sh.set(W::Boot, boot[0]);
        sh.set(W::Boot2, boot[1]);
        sh.set(W::Base, base_len);
        sh.set(W::Buckets, lay.buckets as u64);
        sh.set(W::TailCap, lay.tail_cap as u64);
        sh.word(W::Magic).store(MAGIC, Ordering::Release);
        Ok(sh)
    }

    /// The overlay a killed process left over the snapshot `ident`, if it is one this
    /// process may trust (see the module docs); `None` otherwise.
    pub fn open(dir: &Path, ident: u64) -> Option<(Shared, Header)> {
        Self::load(dir, ident, true).map(|(sh, h, _)| (sh, h))
    }

    /// [`Shared::open`]; `writable` false maps the file privately from a read-only
    /// descriptor (nothing is ever written through it: it reads the page cache, which a
    /// live writer may be changing — see [`copy`]). Also returns the `busy` word as it
    /// was read before anything else.
    fn load(dir: &Path, ident: u64, writable: bool) -> Option<(Shared, Header, u64)> {
        let path = dir.join(FILE);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(&path)
            .ok()?;
        let len = f.metadata().ok()?.len();
        let most = Layout {
            buckets: MAX_BUCKETS,
            tail_cap: MAX_TAIL,
        };
        if len < PAGE as u64 || len > most.file_len() as u64 {
            return None;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let map = match writable {
            true => Map::shared(fd, len as usize),
            false => Map::private(fd, len as usize),
        }
        .ok()?;
        drop(f);
        map.advise_random();
        // (the layout is read from the header, then checked against the file's size)
        let mut sh = Shared {
            map,
            path,
            lay: Layout {
                buckets: 0,
                tail_cap: 0,
            },
        };
        // (first: a reader beside a live writer compares it with what it is at the end)
        let busy = sh.word(W::Busy).load(Ordering::Acquire);
        sh.lay = Layout {
            buckets: usize::try_from(sh.get(W::Buckets)).ok()?,
            tail_cap: usize::try_from(sh.get(W::TailCap)).ok()?,
        };
        if !sh.lay.valid() || sh.lay.file_len() as u64 != len {
            return None;
        }
        let lay = sh.lay;
        let boot = boot_id()?;
        let ok = sh.get(W::Magic) == MAGIC
            && sh.get(W::Ident) == ident
            && [sh.get(W::Boot), sh.get(W::Boot2)] == boot
            && busy & 1 == 0;
        if !ok {
            return None;
        }
        let (items, deleted) = (sh.get(W::Items), sh.get(W::Deleted));
        let (tail_len, nerased, nsegs) = (sh.get(W::Tail), sh.get(W::Erased), sh.get(W::Segs));
        if tail_len > lay.tail_cap as u64
            || nerased > lay.erased_cap() as u64
            || nsegs > SEGS_CAP as u64
        {
            return None;
        }
        // the control bytes must be a table's, with the counts the header gives (mapped
        // in one call first: 32 page faults one by one cost more than the count)
        sh.map.populate(lay.ctrl_off(), lay.buckets + GROUP);
        let ctrl = sh.bytes(lay.ctrl_off(), lay.buckets + GROUP);
        match super::table::count_ctrl(ctrl, lay.buckets) {
            Some((i, d)) if i as u64 == items && d as u64 == deleted => {}
            _ => return None,
        }
        let erased = sh.bytes(lay.erased_off(), nerased as usize * 4);
        let erased = erased
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
            .collect();
        let segs = sh.bytes(lay.segs_off(), nsegs as usize * 16);
        let segs = segs
            .chunks_exact(16)
            .map(|b| {
                let id = u32::from_le_bytes(b[..4].try_into().expect("4"));
                (id, u64::from_le_bytes(b[8..].try_into().expect("8")))
            })
            .collect();
        let h = Header {
            at: Settled {
                active: sh.get(W::Active) as u32,
                off: sh.get(W::Off),
                seq: sh.get(W::Seq),
                items,
                deleted,
                shadows: sh.get(W::Shadows),
                dead: sh.get(W::Dead),
                tail_len,
                erased: nerased,
            },
            base_len: sh.get(W::Base),
            erased,
            segs,
        };
        Some((sh, h, busy))
    }

    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(off + len <= self.lay.file_len());
        // SAFETY: inside the mapping (checked), which lives as long as self.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) }
    }

    /// The overlay table's arrays, in the file. Call once per `Shared`: the arrays
    /// write through to the file, and two arrays over the same bytes would alias.
    pub fn table_arrays(&self) -> (Arr<u8>, Arr<Entry>) {
        // SAFETY: u8 and Entry (repr(C) integers) accept any bytes; the two ranges do
        // not overlap each other or anything else handed out (the key tail, the header).
        unsafe {
            (
                Arr::mapped(&self.map, self.lay.ctrl_off(), self.lay.buckets + GROUP)
                    .expect("ctrl fits"),
                Arr::mapped(&self.map, self.lay.slots_off(), self.lay.buckets).expect("slots fit"),
            )
        }
    }

    /// The file's layout.
    /// Bytes of the file's mapping.
    pub fn mapped_bytes(&self) -> usize {
        self.map.len()
    }

    pub fn layout(&self) -> Layout {
        self.lay
    }

    /// The key tail's memory: (mapping, start, capacity).
    pub fn tail(&self) -> (Arc<Map>, *mut u8, usize) {
        // SAFETY: tail_off + tail_cap <= len: inside the mapping.
        let p = unsafe { self.map.as_ptr().add(self.lay.tail_off()) };
        (self.map.clone(), p, self.lay.tail_cap)
    }

    /// An update begins: until [`Shared::settle`], the file does not describe the index.
    pub fn begin(&self) {
        let b = self.word(W::Busy);
        let v = b.load(Ordering::Relaxed);
        if v & 1 == 0 {
            b.store(v + 1, Ordering::Relaxed);
            // No store of the update may be emitted before this one. For a killed
            // process only the order of this thread's own stores matters (it stops
            // between two instructions; every store before that reaches the page
            // cache); a read-only process copying the file meanwhile ([`copy`]) must
            // also see them in this order: a release fence — no instruction on x86,
            // whose stores are seen in program order, a barrier on ARM.
            std::sync::atomic::fence(Ordering::Release);
        }
    }

    /// Record the `n`-th erased snapshot slot.
    pub fn set_erased(&self, n: usize, slot: u32) {
        assert!(n < self.lay.erased_cap());
        // SAFETY: erased_off + 4n + 4 <= ctrl_off: inside the mapping, 4-aligned, only
        // written here (under the index's &mut).
        unsafe {
            self.map
                .as_ptr()
                .add(self.lay.erased_off() + 4 * n)
                .cast::<u32>()
                .write(slot.to_le())
        };
    }

    /// The index now matches the log up to `s`'s position: say so (and how many dead
    /// bytes each segment holds, `segs`: at most `SEGS_CAP`).
    pub fn settle(&self, s: &Settled, segs: impl Iterator<Item = (u32, u64)>) {
        let mut n = 0;
        for (id, dead) in segs.take(SEGS_CAP) {
            // SAFETY: segs_off + 16n + 16 <= erased_off: inside the mapping, 8-aligned.
            unsafe {
                let p = self.map.as_ptr().add(self.lay.segs_off() + 16 * n);
                p.cast::<u64>().write(id as u64);
                p.add(8).cast::<u64>().write(dead);
            }
            n += 1;
        }
        for (w, v) in [
            (W::Active, s.active as u64),
            (W::Off, s.off),
            (W::Seq, s.seq),
            (W::Items, s.items),
            (W::Deleted, s.deleted),
            (W::Shadows, s.shadows),
            (W::Dead, s.dead),
            (W::Tail, s.tail_len),
            (W::Erased, s.erased),
            (W::Segs, n as u64),
        ] {
            self.set(w, v);
        }
        let b = self.word(W::Busy);
        let v = b.load(Ordering::Relaxed);
        if v & 1 == 1 {
            // every store above (and the update's) is seen before this one
            b.store(v + 1, Ordering::Release);
        }
    }

    /// Stop using the file: it is never trusted again (its `busy` stays odd) and removed.
    pub fn remove(self) {
        self.begin();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A copy of the overlay a writer keeps (see [`copy`]).
pub struct Copied {
    pub ctrl: Vec<u8>,
    pub slots: Vec<Entry>,
    /// the keys added since the snapshot (the used part of the key tail)
    pub tail: Vec<u8>,
}

/// A consistent copy of the overlay over the snapshot `ident` that a writer — closed,
/// or live in another process — keeps, for a read-only open: it then replays only the
/// records after the position the copy covers, not every one since `INDEX`. A seqlock
/// read: the copy counts if `busy` was even before it and unchanged after it (the
/// writer makes it odd before an update touches the file and even once it is settled,
/// each with release ordering); `None` if the file is not one to trust (see the module
/// docs) or changed meanwhile — the caller replays from the snapshot, as without it.
pub fn copy(dir: &Path, ident: u64) -> Option<(Copied, Header)> {
    let (sh, h, busy) = Shared::load(dir, ident, false)?;
    let lay = sh.lay;
    let tail_len = usize::try_from(h.at.tail_len).ok()?;
    sh.map
        .populate(lay.slots_off(), lay.buckets * std::mem::size_of::<Entry>());
    let ctrl = sh.bytes(lay.ctrl_off(), lay.buckets + GROUP).to_vec();
    let mut slots = vec![Entry::default(); lay.buckets];
    // SAFETY: the slots section lies inside the mapping (the layout was checked against
    // the file's length), Entry is repr(C) integers that accept any bytes, and the
    // destination holds exactly `buckets` entries. The bytes may change while they are
    // copied (the writer is another process, invisible to the compiler): whether they
    // did is checked below, and a copy that saw a change is thrown away.
    unsafe {
        std::ptr::copy_nonoverlapping(
            sh.map.as_ptr().add(lay.slots_off()).cast::<Entry>(),
            slots.as_mut_ptr(),
            lay.buckets,
        )
    };
    let tail = sh.bytes(lay.tail_off(), tail_len).to_vec();
    // everything above was read before `busy` is read again
    std::sync::atomic::fence(Ordering::Acquire);
    if sh.word(W::Busy).load(Ordering::Relaxed) != busy {
        return None;
    }
    // (checked again on the copy: the mapped control bytes may have changed under the
    // first count)
    match super::table::count_ctrl(&ctrl, lay.buckets) {
        Some((i, d)) if i as u64 == h.at.items && d as u64 == h.at.deleted => {}
        _ => return None,
    }
    Some((Copied { ctrl, slots, tail }, h))
}

/// Remove a stale `OVERLAY` (one nobody maps).
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(FILE));
}
