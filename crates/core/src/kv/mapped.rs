//! Arrays that live either on the heap or in a private mapping of a file.
//!
//! The index snapshot (`INDEX`) holds the hash table's arrays exactly as they are in
//! memory, so opening a store maps the file and uses them where they lie: nothing is
//! read or copied up front, pages come in from the page cache as lookups touch them, and
//! the first write to a page copies it (`MAP_PRIVATE`: the file itself never changes).
//! Opening a store of a million keys then costs what opening an empty one does.

use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// A private (copy-on-write) read-write mapping of a whole file, unmapped when the last
/// array using it is dropped.
pub struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the arrays that point into
// it hand out access through `&`/`&mut` like a Vec does, so sharing across threads is
// governed by the borrow rules of their owners.
unsafe impl Send for Map {}
// SAFETY: as above: `Map` itself only exposes `len` and `bytes` (shared reads).
unsafe impl Sync for Map {}

impl Map {
    /// Map `len` bytes of `fd` privately, readable and writable (writes stay in this
    /// process). The caller keeps the file from being truncated while it is mapped (a
    /// store's files are only replaced by rename, never shortened in place).
    pub fn private(fd: i32, len: usize) -> io::Result<Arc<Map>> {
        Self::new(fd, len, libc::MAP_PRIVATE)
    }

    /// Map `len` bytes of `fd` shared, readable and writable: writes go to the page
    /// cache, so they outlive the process (not a crash of the machine). The file must
    /// have all of its blocks allocated (fallocate): a store into a hole on a full disk
    /// would be a SIGBUS.
    pub fn shared(fd: i32, len: usize) -> io::Result<Arc<Map>> {
        Self::new(fd, len, libc::MAP_SHARED)
    }

    fn new(fd: i32, len: usize, flags: i32) -> io::Result<Arc<Map>> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty file"));
        }
        // SAFETY: a fresh mapping of `len` bytes of an open file; the kernel picks the
        // address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(Map {
            ptr: ptr.cast(),
            len,
        }))
    }

    /// The start of the mapping (for arrays the caller lays out itself).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Map the pages of `[off, off + len)` into this mapping (reading what the page
    /// cache lacks), so that lookups there stop faulting — and, since mapped pages are
    /// not dropped from the page cache by `POSIX_FADV_DONTNEED` or light memory
    /// pressure, stay fast. Pages the process already wrote (its private copies) are left
    /// alone. Best effort: where `MADV_POPULATE_READ` (5.14) is missing, every page is
    /// read once instead.
    pub fn populate(&self, off: usize, len: usize) {
        // SAFETY: ptr/len describe this mapping, alive while self is.
        unsafe { populate(self.ptr, self.len, off, len) }
    }

    /// Say that the mapping will be read at random (`MADV_RANDOM`): a page fault reads
    /// that page, not the device's read-ahead window around it (8 MiB on some disks: a
    /// lookup in a cold, mapped hash table would read megabytes per probe).
    pub fn advise_random(&self) {
        // SAFETY: advice on exactly this mapping; it changes read-ahead, never contents.
        unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_RANDOM) };
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped bytes (as this process sees them: its own writes included).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes and lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `private`, no longer referenced
        // (every array pointing into it holds an Arc to it).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A growable byte buffer in an anonymous private mapping of its own: when it grows, the
/// kernel moves its pages (`mremap`), never its bytes. A `Vec` that doubles copies
/// everything it holds whenever glibc serves it from the heap — which it does for
/// anything under its mmap threshold, raised up to 32 MiB as large blocks are freed — so
/// the index's key arena made the put that grew it wait 14 ms at a million 16-byte keys
/// (20 MB copied), twice that at two. Pages past the length are never touched until
/// written.
pub struct Grow {
    ptr: *mut u8,
    len: usize,
    cap: usize,
}

// SAFETY: the mapping is owned by this value alone and accessed through &self/&mut self,
// like a Vec's buffer.
unsafe impl Send for Grow {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for Grow {}

/// A [`Grow`] starts at this many bytes of address space (nothing is touched until
/// written).
const GROW_MIN: usize = 64 << 10;

impl Grow {
    pub fn new() -> Grow {
        Grow {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
            cap: 0,
        }
    }

    pub fn from_slice(b: &[u8]) -> Grow {
        let mut g = Grow::new();
        g.extend_from_slice(b);
        g
    }

    /// An empty buffer with room for `cap` bytes, every page of it written once: made
    /// ahead, off a put's path, so that what is then copied in takes no page faults.
    pub fn touched(cap: usize) -> Grow {
        let mut g = Grow::new();
        g.reserve(cap);
        for off in (0..g.cap).step_by(crate::buf::page_size()) {
            // SAFETY: off < cap lies in this value's own mapping, which nothing else
            // reads or writes; zero is what a fresh page holds.
            unsafe { std::ptr::write_volatile(g.ptr.add(off), 0) };
        }
        g
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len lies in the mapping (len <= cap), or len is 0 and ptr is
        // a dangling, well-aligned pointer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Room for `more` bytes past the length: the mapping at least doubles when it must
    /// grow. Out of memory or address space is fatal, as for a `Vec`.
    #[inline]
    pub fn reserve(&mut self, more: usize) {
        let need = self.len.checked_add(more).expect("buffer size overflow");
        if need > self.cap {
            self.grow(need);
        }
    }

    #[cold]
    fn grow(&mut self, need: usize) {
        let page = crate::buf::page_size();
        let cap = need
            .max(self.cap.saturating_mul(2))
            .max(GROW_MIN)
            .next_multiple_of(page);
        let ptr = if self.cap == 0 {
            crate::buf::map_anonymous(cap).map_or(libc::MAP_FAILED, |p| p.as_ptr().cast())
        } else {
            // SAFETY: ptr/cap is this value's own mapping; MAYMOVE may give it another
            // address (nothing points into it across a call that takes &mut self).
            unsafe { libc::mremap(self.ptr.cast(), self.cap, cap, libc::MREMAP_MAYMOVE) }
        };
        if ptr == libc::MAP_FAILED {
            let layout = std::alloc::Layout::from_size_align(cap, page).expect("layout");
            std::alloc::handle_alloc_error(layout);
        }
        self.ptr = ptr.cast();
        self.cap = cap;
    }

    #[inline]
    pub fn extend_from_slice(&mut self, b: &[u8]) {
        self.reserve(b.len());
        // SAFETY: reserve made len + b.len() <= cap bytes of the mapping available; b
        // cannot overlap it (no slice of it outlives a &mut borrow).
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr.add(self.len), b.len()) };
        self.len += b.len();
    }

    /// Give back the address space (and any pages) past the length, to the page.
    pub fn shrink_to_fit(&mut self) {
        let keep = self.len.next_multiple_of(crate::buf::page_size());
        if self.cap == 0 || keep >= self.cap {
            return;
        }
        if keep == 0 {
            *self = Grow::new(); // (the old value's drop unmaps it)
            return;
        }
        // SAFETY: the pages from `keep` to `cap` belong to this mapping and hold no bytes
        // of the buffer (len <= keep).
        unsafe { libc::munmap(self.ptr.add(keep).cast(), self.cap - keep) };
        self.cap = keep;
    }
}

impl Default for Grow {
    fn default() -> Self {
        Grow::new()
    }
}

impl Drop for Grow {
    fn drop(&mut self) {
        if self.cap > 0 {
            // SAFETY: this value's own mapping, no longer used.
            unsafe { libc::munmap(self.ptr.cast(), self.cap) };
        }
    }
}

/// A fixed-length array on the heap or inside a [`Map`].
pub enum Arr<T> {
    Heap(Vec<T>),
    Mapped {
        _map: Arc<Map>,
        ptr: *mut T,
        len: usize,
    },
}

// SAFETY: a Mapped array is exclusively owned memory (no two arrays overlap: `mapped`'s
// contract), accessed through `&self`/`&mut self` exactly like the Vec variant.
unsafe impl<T: Send> Send for Arr<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Sync> Sync for Arr<T> {}

impl<T> Arr<T> {
    /// `len` elements of `map` starting at byte `offset`; `None` if they do not fit or
    /// are misaligned for `T`.
    ///
    /// # Safety
    /// Every bit pattern must be a valid `T` (plain integers, no padding), and no other
    /// array may cover any of these bytes.
    pub unsafe fn mapped(map: &Arc<Map>, offset: usize, len: usize) -> Option<Arr<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        if offset.checked_add(bytes)? > map.len
            || !(map.ptr as usize + offset).is_multiple_of(std::mem::align_of::<T>())
        {
            return None;
        }
        Some(Arr::Mapped {
            _map: map.clone(),
            // SAFETY: offset + bytes <= len: inside the mapping.
            ptr: unsafe { map.ptr.add(offset) }.cast(),
            len,
        })
    }

    /// Bytes of memory behind the array (a Vec's capacity; a mapped array's length).
    pub fn bytes_used(&self) -> usize {
        std::mem::size_of::<T>()
            * match self {
                Arr::Heap(v) => v.capacity(),
                Arr::Mapped { len, .. } => *len,
            }
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, Arr::Mapped { .. })
    }
}

impl<T> Deref for Arr<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Arr::Heap(v) => v,
            // SAFETY: `mapped` checked bounds and alignment; the Arc keeps the mapping.
            Arr::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl<T> DerefMut for Arr<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Arr::Heap(v) => v,
            // SAFETY: as in deref; the mapping is writable (private: the file is not
            // changed) and this array is the only one covering these bytes.
            Arr::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
        }
    }
}

impl<T> From<Vec<T>> for Arr<T> {
    fn from(v: Vec<T>) -> Self {
        Arr::Heap(v)
    }
}

/// Fault the pages of `[off, off + len)` of the mapping `base .. base + map_len` in
/// (reading what the page cache lacks) with one `MADV_POPULATE_READ` (5.14); where that
/// is missing, by reading one byte per page. Ranges past the end are clipped.
///
/// # Safety
/// `base` must be the start of a live, page-aligned, readable mapping of `map_len` bytes
/// whose pages can all be read without a SIGBUS (the file is not shorter than it).
pub unsafe fn populate(base: *const u8, map_len: usize, off: usize, len: usize) {
    const MADV_POPULATE_READ: i32 = 22;
    let start = off / 4096 * 4096;
    let end = off.saturating_add(len).min(map_len);
    if start >= end {
        return;
    }
    // SAFETY: [start, end) lies inside the mapping (start is page-aligned, like the
    // mapping); POPULATE_READ only faults pages in.
    let p = unsafe { base.add(start) };
    if unsafe { libc::madvise(p as *mut libc::c_void, end - start, MADV_POPULATE_READ) } == 0
        || io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
    {
        return; // done, or failed for a reason touching the pages would not fix
    }
    for at in (start..end).step_by(4096) {
        // SAFETY: at < map_len: inside the mapping; a volatile read faults the page in.
        unsafe { std::ptr::read_volatile(base.add(at)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn private_writes_do_not_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        drop(f);
        let f = std::fs::File::open(&p).unwrap();
        let map = Map::private(f.as_raw_fd(), 8192).unwrap();
        // SAFETY: u8/u64 accept any bits; the two arrays do not overlap.
        let mut a: Arr<u8> = unsafe { Arr::mapped(&map, 0, 4096) }.unwrap();
        let b: Arr<u64> = unsafe { Arr::mapped(&map, 4096, 512) }.unwrap();
        assert!(unsafe { Arr::<u64>::mapped(&map, 3, 1) }.is_none()); // misaligned
        assert!(unsafe { Arr::<u64>::mapped(&map, 4096, 513) }.is_none()); // too long
        drop(map);
        a[0] = 1;
        assert_eq!(a[..2], [1, 7]);
        assert_eq!(b[511], u64::from_ne_bytes([7; 8]));
        assert!(a.is_mapped() && b.bytes_used() == 4096);
        drop((a, b));
        assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 8192]);
    }

    #[test]
    fn a_growing_buffer_keeps_its_bytes_and_gives_back_its_tail() {
        let mut g = Grow::new();
        assert!(g.is_empty() && g.capacity() == 0 && g.as_slice().is_empty());
        g.shrink_to_fit(); // (nothing mapped yet)
        let mut want = Vec::new();
        let mut caps = std::collections::BTreeSet::new();
        for i in 0..300_000u32 {
            let piece = i.to_le_bytes();
            g.extend_from_slice(&piece[..(i % 4 + 1) as usize]);
            want.extend_from_slice(&piece[..(i % 4 + 1) as usize]);
            caps.insert(g.capacity());
        }
        assert_eq!(g.as_slice(), &want[..]);
        assert!(caps.len() >= 4, "grew {} times", caps.len());
        assert!(caps.iter().all(|c| c % 4096 == 0 && *c >= GROW_MIN));
        g.reserve(10 << 20);
        assert!(g.capacity() >= want.len() + (10 << 20));
        assert_eq!(g.as_slice(), &want[..]);
        g.shrink_to_fit();
        assert_eq!(g.capacity(), want.len().next_multiple_of(4096));
        g.extend_from_slice(b"more");
        assert_eq!(&g.as_slice()[want.len()..], b"more");
        let copy = Grow::from_slice(g.as_slice());
        assert_eq!(copy.as_slice(), g.as_slice());
        let mut empty = Grow::from_slice(&[]);
        empty.shrink_to_fit();
        assert!(empty.is_empty());
    }
}
