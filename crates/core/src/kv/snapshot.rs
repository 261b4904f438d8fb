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

/// Fill `len` bytes of a fresh vector from `f` at `off`.
fn read_vec<T: Copy>(f: &fs::File, off: u64, count: usize) -> io::Result<Vec<T>> {
    use std::os::fd::AsRawFd;
    let bytes = count * std::mem::size_of::<T>();
    let mut v: Vec<T> = Vec::with_capacity(count);
    let base = v.as_mut_ptr().cast::<u8>();
    super::table::hugepage_hint(base, bytes);
    let mut done = 0usize;
    while done < bytes {
        // SAFETY: `base + done .. base + bytes` lies inside the vector's allocation; the
        // kernel writes plain bytes there and we read it only after it is all written.
        let n = unsafe {
            libc::pread(
                f.as_raw_fd(),
                base.add(done).cast(),
                bytes - done,
                (off + done as u64) as i64,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n as usize;
    }
    // SAFETY: all `bytes` bytes were written by pread, and T (u8 or Entry: integers only,
    // no padding) is valid for any bit pattern.
    unsafe { v.set_len(count) };
    Ok(v)
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is u8 or Entry (integers, no padding): every byte is initialised.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
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

fn read(f: &fs::File) -> io::Result<Option<Snapshot>> {
    let total = f.metadata()?.len();
    if total < FIXED as u64 + 4 {
        return Ok(None);
    }
    let fixed: Vec<u8> = read_vec(f, 0, FIXED)?;
    if &fixed[0..4] != MAGIC || u32_at(&fixed, 4) != VERSION {
        return Ok(None);
    }
    let (seed, check, seq) = (u64_at(&fixed, 8), u64_at(&fixed, 16), u64_at(&fixed, 24));
    let active = u32_at(&fixed, 32);
    let nsegs = u32_at(&fixed, 36) as usize;
    let active_off = u64_at(&fixed, 40);
    let (ctrl_len, entries_len, arena_len, dead) = (
        u64_at(&fixed, 48),
        u64_at(&fixed, 56),
        u64_at(&fixed, 64),
        u64_at(&fixed, 72),
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
    let segtab: Vec<u8> = read_vec(f, FIXED as u64, nsegs * 24)?;
    let ctrl: Vec<u8> = read_vec(f, head_len, ctrl_len as usize)?;
    let entries: Vec<Entry> = read_vec(f, head_len + ctrl_len, entries_len as usize / 24)?;
    let arena: Vec<u8> = read_vec(f, head_len + ctrl_len + entries_len, arena_len as usize)?;
    let stored: Vec<u8> = read_vec(f, total - 4, 4)?;
    let mut crc = 0;
    for part in [&fixed[..], &segtab, &ctrl, as_bytes(&entries), &arena] {
        crc = crc32c::crc32c_append(crc, part);
    }
    if crc != u32_at(&stored, 0) {
        return Ok(None);
    }
    let segs = (0..nsegs)
        .map(|i| {
            let at = i * 24;
            (
                u32_at(&segtab, at),
                SnapSeg {
                    size: u64_at(&segtab, at + 8),
                    dead: u64_at(&segtab, at + 16),
                },
            )
        })
        .collect();
    // scatter the entries to the slots their control bytes mark full
    let buckets = ctrl.len() - GROUP;
    let mut slots = Entry::zeroed(buckets);
    let mut next = entries.iter();
    for (i, &c) in ctrl[..buckets].iter().enumerate() {
        if c < 0x80 {
            let Some(e) = next.next() else {
                return Ok(None); // fewer entries than full slots
            };
            slots[i] = *e;
        }
    }
    if next.next().is_some() {
        return Ok(None);
    }
    drop(entries);
    let Some(index) = Index::from_parts(seed, check, ctrl, slots, arena, dead) else {
        return Ok(None);
    };
    Ok(Some(Snapshot {
        index,
        seq,
        active,
        active_off,
        segs,
    }))
}
