//! The index snapshot (`INDEX`): the whole in-memory index written out when a store
//! closes, so the next open reads it back in one pass instead of inserting every key
//! again, then replays only the records appended after it.
//!
//! Layout (little-endian, one CRC32C over everything before it):
//! ```text
//! "XVX1" u32 version  u64 seed  u64 check  u64 seq  u32 active  u32 nsegs
//! u64 active_off  u64 ctrl_len  u64 entries_len  u64 arena_len  u64 dead_keys
//! nsegs × (u32 id, u32 0, u64 size, u64 dead)
//! ctrl bytes, the full slots' entries (24 bytes each, in slot order), key arena,
//! u32 crc32c
//! ```
//! Only occupied slots are stored (the table is 44–88 % empty): reading the file back
//! scatters them to the slots the control bytes mark full.
//! A snapshot is trusted only if its CRC holds, its hash function matches this build's,
//! every segment it lists still exists with the size it recorded (the active one may
//! have grown), and every other segment is newer than its active one. Anything else and
//! the store is rebuilt from hint files and segments, as if there were no snapshot.

use super::index::{Entry, Index};
use std::fs;
use std::io::{self, Write};
use std::path::Path;

pub const FILE: &str = "INDEX";
const MAGIC: &[u8; 4] = b"XVX1";
const VERSION: u32 = 2;
/// Control bytes beyond the buckets (the table's mirrored first group).
const GROUP: usize = 8;
const FIXED: usize = 4 + 4 + 8 * 3 + 4 + 4 + 8 * 5;

/// A segment as the snapshot saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapSeg {
    pub size: u64,
    pub dead: u64,
}

pub struct Snapshot {
    pub index: Index,
    pub seq: u64,
    pub active: u32,
    /// Where replay resumes in the active segment.
    pub active_off: u64,
    pub segs: Vec<(u32, SnapSeg)>,
}

/// Write `INDEX` atomically (temporary file, then rename). The segments it describes must
/// already be durable: a snapshot never points at data the disk might not have.
pub fn write(
    dir: &Path,
    index: &Index,
    seq: u64,
    active: u32,
    active_off: u64,
    segs: &[(u32, SnapSeg)],
) -> io::Result<()> {
    let p = index.to_parts();
    // the occupied slots only, in slot order
    let mut entries = Vec::with_capacity(p.slots.len() / 2);
    for (i, &c) in p.ctrl[..p.ctrl.len() - GROUP].iter().enumerate() {
        if c < 0x80 {
            entries.extend_from_slice(&p.slots[i * 24..i * 24 + 24]);
        }
    }
    let mut head = Vec::with_capacity(FIXED + segs.len() * 24);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    for v in [p.seed, p.check, seq] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.extend_from_slice(&active.to_le_bytes());
    head.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    for v in [
        active_off,
        p.ctrl.len() as u64,
        entries.len() as u64,
        p.arena.len() as u64,
        p.dead,
    ] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    for (id, s) in segs {
        head.extend_from_slice(&id.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        head.extend_from_slice(&s.size.to_le_bytes());
        head.extend_from_slice(&s.dead.to_le_bytes());
    }
    let mut crc = 0;
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    for part in [&head[..], p.ctrl, &entries, p.arena] {
        crc = crc32c::crc32c_append(crc, part);
        f.write_all(part)?;
    }
    f.write_all(&crc.to_le_bytes())?;
    drop(f);
    // No fsync: after a power loss the file is either whole (its CRC holds) or rejected.
    fs::rename(&tmp, dir.join(FILE))
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

/// Read `INDEX` if there is one and it is whole; `Ok(None)` when absent or unusable.
pub fn load(dir: &Path) -> io::Result<Option<Snapshot>> {
    let f = match fs::File::open(dir.join(FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(read(&f).ok().flatten())
}

/// The snapshot file mapped read-only (copy-on-write private mapping, pre-faulted): the
/// arrays are checked and copied or scattered straight from the page cache, with no
/// intermediate buffer.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn new(f: &fs::File, len: usize) -> io::Result<Mapped> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh read-only private mapping of `len` bytes of an open file; the
        // kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped { ptr, len })
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes and lives as long as self. (A
        // writer never changes INDEX in place — it writes a new file and renames it —
        // so the bytes cannot change under us; a truncation by someone else would fault,
        // as it would for any mapped file.)
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`, no longer referenced.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn read(f: &fs::File) -> io::Result<Option<Snapshot>> {
    let total = f.metadata()?.len();
    if total < FIXED as u64 + 4 || total > usize::MAX as u64 {
        return Ok(None);
    }
    let map = Mapped::new(f, total as usize)?;
    let b = map.bytes();
    let fixed = &b[..FIXED];
    if &fixed[0..4] != MAGIC || u32_at(fixed, 4) != VERSION {
        return Ok(None);
    }
    let (seed, check, seq) = (u64_at(fixed, 8), u64_at(fixed, 16), u64_at(fixed, 24));
    let active = u32_at(fixed, 32);
    let nsegs = u32_at(fixed, 36) as usize;
    let active_off = u64_at(fixed, 40);
    let (ctrl_len, entries_len, arena_len, dead) = (
        u64_at(fixed, 48),
        u64_at(fixed, 56),
        u64_at(fixed, 64),
        u64_at(fixed, 72),
    );
    let head_len = FIXED as u64 + nsegs as u64 * 24;
    if head_len
        .checked_add(ctrl_len)
        .and_then(|x| x.checked_add(entries_len))
        .and_then(|x| x.checked_add(arena_len))
        .and_then(|x| x.checked_add(4))
        != Some(total)
        || entries_len % 24 != 0
        || ctrl_len <= GROUP as u64
        || !(ctrl_len - GROUP as u64).is_power_of_two()
        || Index::check_for(seed) != check
    {
        return Ok(None);
    }
    let body = total as usize - 4;
    if crc32c::crc32c(&b[..body]) != u32_at(b, body) {
        return Ok(None);
    }
    let Some((ctrl, slots, arena, segs)) = build(b, head_len, ctrl_len, entries_len, body, nsegs)?
    else {
        return Ok(None);
    };
    Ok(
        Index::from_parts(seed, check, ctrl, slots, arena, dead).map(|index| Snapshot {
            index,
            seq,
            active,
            active_off,
            segs,
        }),
    )
}

type Built = (Vec<u8>, Vec<Entry>, Vec<u8>, Vec<(u32, SnapSeg)>);

/// The table's arrays from the mapped snapshot (sizes already validated against the
/// file's length): `Ok(None)` when the control bytes and the entries disagree.
fn build(
    b: &[u8],
    head_len: u64,
    ctrl_len: u64,
    entries_len: u64,
    body: usize,
    nsegs: usize,
) -> io::Result<Option<Built>> {
    let (head_len, ctrl_len, entries_len) =
        (head_len as usize, ctrl_len as usize, entries_len as usize);
    let segtab = &b[FIXED..head_len];
    let ctrl = b[head_len..head_len + ctrl_len].to_vec();
    let packed = &b[head_len + ctrl_len..head_len + ctrl_len + entries_len];
    let arena = b[head_len + ctrl_len + entries_len..body].to_vec();
    let segs = (0..nsegs)
        .map(|i| {
            let at = i * 24;
            (
                u32_at(segtab, at),
                SnapSeg {
                    size: u64_at(segtab, at + 8),
                    dead: u64_at(segtab, at + 16),
                },
            )
        })
        .collect();
    // Scatter the entries to the slots their control bytes mark full. Branch-free: a
    // table's control bytes are random, so a branch per slot would mispredict half the
    // time; every slot is written (an empty one gets a copy of the next entry, which
    // nothing reads: its control byte says empty).
    let buckets = ctrl_len - GROUP;
    let count = entries_len / 24;
    let full = ctrl[..buckets].iter().filter(|&&c| c < 0x80).count();
    if full != count {
        return Ok(None);
    }
    let mut slots = Entry::zeroed(buckets);
    if count > 0 {
        let src = packed.as_ptr();
        let dst = slots.as_mut_ptr().cast::<u8>();
        let mut j = 0usize;
        for (i, &c) in ctrl[..buckets].iter().enumerate() {
            let from = j.min(count - 1) * 24;
            // SAFETY: `from + 24 <= entries_len` (j is clamped to the last entry) and slot
            // i is inside `slots` (i < buckets); the regions do not overlap (mapping vs
            // heap). Entry is 24 bytes of integers, so any bytes are a valid value.
            unsafe { std::ptr::copy_nonoverlapping(src.add(from), dst.add(i * 24), 24) };
            j += (c < 0x80) as usize;
        }
    }
    Ok(Some((ctrl, slots, arena, segs)))
}
