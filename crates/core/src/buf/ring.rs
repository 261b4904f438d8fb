//! Provided-buffer rings (`IORING_REGISTER_PBUF_RING`, 5.19+): the kernel picks a buffer for
//! each recv/read with `IOSQE_BUFFER_SELECT` and reports its id in the CQE flags. The
//! io-uring crate registers the ring but has no helper for its memory or tail: this is ours.
//!
//! Layout (`struct io_uring_buf_ring`): `entries` slots of 16 bytes
//! `{ addr: u64, len: u32, bid: u16, resv: u16 }`; the `resv` field of slot 0 doubles as
//! the ring's `tail` (offset 14), which the application advances with release ordering.

use super::AlignedBuf;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

pub struct BufRing {
    ring_mem: AlignedBuf,
    bufs: AlignedBuf,
    pub group: u16,
    pub entries: u16,
    pub count: u16,
    pub size: usize,
    tail: u16,
    /// Buffers currently owned by the kernel (in the ring).
    in_ring: Vec<bool>,
}

impl BufRing {
    /// `count` buffers of `size` bytes for buffer group `group`; the ring has the next power
    /// of two of `count` entries.
    pub fn new(group: u16, count: u16, size: usize) -> io::Result<Self> {
        if count == 0 || count > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("count must be between 1 and 32768 (got {count})"),
            ));
        }
        if size == 0 || size > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("size must be between 1 and {} (got {size})", u32::MAX),
            ));
        }
        let entries = count.next_power_of_two();
        let ring_mem = AlignedBuf::new(entries as usize * 16)?;
        let bufs = AlignedBuf::new(size * count as usize)?;
        let mut r = BufRing {
            ring_mem,
            bufs,
            group,
            entries,
            count,
            size,
            tail: 0,
            in_ring: vec![false; count as usize],
        };
        for bid in 0..count {
            r.put(bid);
        }
        r.publish();
        Ok(r)
    }

    pub fn ring_addr(&self) -> u64 {
        self.ring_mem.as_ptr() as u64
    }

    pub fn buf_ptr(&self, bid: u16) -> *mut u8 {
        assert!(bid < self.count);
        // SAFETY: bid < count keeps the offset inside the buffer mapping.
        unsafe { self.bufs.as_ptr().add(bid as usize * self.size) }
    }

    fn tail_atomic(&self) -> &AtomicU16 {
        // SAFETY: offset 14 of the page-aligned ring is the u16 tail; AtomicU16 has the same
        // layout as u16 and the kernel only reads it.
        unsafe { &*(self.ring_mem.as_ptr().add(14) as *const AtomicU16) }
    }

    /// Write buffer `bid` into the next ring slot (not yet visible to the kernel).
    fn put(&mut self, bid: u16) {
        let mask = self.entries - 1;
        let slot = (self.tail & mask) as usize;
        let base = self.ring_mem.as_ptr();
        // SAFETY: slot < entries, so the 16-byte entry is inside the ring mapping. The kernel
        // does not read slots at or beyond the published tail, so writing them is race-free.
        // The tail (bytes 14..16 of slot 0) is left untouched when writing slot 0's fields.
        unsafe {
            let e = base.add(slot * 16);
            std::ptr::write_unaligned(e as *mut u64, self.buf_ptr(bid) as u64);
            std::ptr::write_unaligned(e.add(8) as *mut u32, self.size as u32);
            std::ptr::write_unaligned(e.add(12) as *mut u16, bid);
        }
        self.tail = self.tail.wrapping_add(1);
        self.in_ring[bid as usize] = true;
    }

    fn publish(&self) {
        self.tail_atomic().store(self.tail, Ordering::Release);
    }

    /// Register the ring with the kernel.
    pub fn register(&self, ring: &io_uring::IoUring) -> io::Result<()> {
        // SAFETY: ring_mem stays alive (owned by self) until unregister or ring close; the
        // caller keeps `self` alive at least that long.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.ring_addr(),
                self.entries,
                self.group,
                0,
            )
        }
    }

    /// A completion said the kernel picked `bid`: it is the application's until recycled.
    pub fn taken(&mut self, bid: u16) {
        if let Some(b) = self.in_ring.get_mut(bid as usize) {
            *b = false;
        }
    }

    /// Give buffer `bid` back to the kernel. Returns false if it already is in the ring.
    pub fn recycle(&mut self, bid: u16) -> io::Result<bool> {
        if bid >= self.count {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("buffer_id {bid} is out of range (0..{})", self.count),
            ));
        }
        if self.in_ring[bid as usize] {
            return Ok(false);
        }
        self.put(bid);
        self.publish();
        Ok(true)
    }

    /// Buffers the kernel can still pick.
    pub fn available(&self) -> usize {
        self.in_ring.iter().filter(|b| **b).count()
    }

    /// The bytes of buffer `bid` (first `len`).
    ///
    /// # Safety
    /// The buffer must not be in the kernel's hands (it was reported by a completion and not
    /// recycled since).
    pub unsafe fn data(&self, bid: u16, len: usize) -> &[u8] {
        // SAFETY: bid checked by buf_ptr; len clamped to the buffer size.
        unsafe { std::slice::from_raw_parts(self.buf_ptr(bid), len.min(self.size)) }
    }
}
