//! Registered ("fixed") buffers: one page-aligned block cut into `count` buffers of `size`
//! bytes, registered with `IORING_REGISTER_BUFFERS` for read_fixed / write_fixed.

use super::AlignedBuf;
use std::io;
use std::sync::Arc;

pub struct FixedBuffers {
    mem: AlignedBuf,
    pub count: usize,
    pub size: usize,
    /// Distance between buffers (size rounded up to a page so each is page-aligned).
    pub stride: usize,
}

impl FixedBuffers {
    pub fn new(count: usize, size: usize) -> io::Result<Arc<Self>> {
        if count == 0 || count > 16384 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("count must be between 1 and 16384 (got {count})"),
            ));
        }
        if size == 0 || size > 1 << 30 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("size must be between 1 byte and 1 GiB (got {size})"),
            ));
        }
        let page = super::page_size();
        let stride = size.div_ceil(page) * page;
        let mem = AlignedBuf::new(stride * count)?;
        Ok(Arc::new(FixedBuffers {
            mem,
            count,
            size,
            stride,
        }))
    }

    pub fn ptr(&self, index: usize) -> *mut u8 {
        assert!(index < self.count);
        // SAFETY: index < count, so the offset stays inside the mapping.
        unsafe { self.mem.as_ptr().add(index * self.stride) }
    }

    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.count)
            .map(|i| libc::iovec {
                iov_base: self.ptr(i).cast(),
                iov_len: self.size,
            })
            .collect()
    }

    /// Bytes the kernel will pin (what counts against RLIMIT_MEMLOCK).
    pub fn pinned_bytes(&self) -> usize {
        self.stride * self.count
    }

    /// Register with a ring.
    pub fn register(&self, ring: &io_uring::IoUring) -> io::Result<()> {
        let iov = self.iovecs();
        // SAFETY: the iovecs point into `mem`, which the caller keeps alive (Arc) for as long
        // as the ring may use them (until unregister or ring close).
        unsafe { ring.submitter().register_buffers(&iov) }
    }
}
