//! Memory the kernel reads and writes: page-aligned blocks, registered (fixed) buffers and
//! provided-buffer rings.

pub mod aligned;
pub mod fixed;
pub mod ring;

pub use aligned::AlignedBuf;
pub use fixed::FixedBuffers;
pub use ring::BufRing;

/// `len` bytes (> 0, a whole number of pages) of fresh private anonymous memory, zero
/// and not backed until touched; the caller unmaps it (`munmap`).
pub fn map_anonymous(len: usize) -> std::io::Result<std::ptr::NonNull<u8>> {
    // SAFETY: an anonymous private mapping with no address hint; checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(std::ptr::NonNull::new(p.cast()).expect("mmap returned null"))
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}
