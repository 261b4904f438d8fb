//! Page-aligned anonymous memory (mmap), suitable for O_DIRECT and for registration.

use std::io;
use std::ptr::NonNull;

/// A page-aligned, zero-filled block of memory that never moves.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: AlignedBuf owns its mapping exclusively; the raw pointer is not tied to a thread.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out the pointer; writers synchronize externally (the
// kernel, or Python's buffer protocol under the GIL).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes (at least one page is mapped; the mapping is rounded up to pages).
    pub fn new(len: usize) -> io::Result<Self> {
        let page = super::page_size();
        let map_len = len.max(1).div_ceil(page) * page;
        Ok(AlignedBuf {
            ptr: super::map_anonymous(map_len)?,
            len,
            map_len,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// # Safety
    /// No op in flight may be writing into this memory.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the lifetime of self (caller: no writers).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// # Safety
    /// No op in flight may be reading or writing this memory.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes; the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/map_len are exactly what mmap returned; nothing uses them after drop.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let b = AlignedBuf::new(10000).unwrap();
        assert_eq!(b.as_ptr() as usize % super::super::page_size(), 0);
        // SAFETY: no op uses it.
        assert!(unsafe { b.as_slice() }.iter().all(|&x| x == 0));
    }
}
