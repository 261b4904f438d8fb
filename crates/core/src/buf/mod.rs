//! Memory the kernel reads and writes: page-aligned blocks, registered (fixed) buffers and
//! provided-buffer rings.

pub mod aligned;
pub mod fixed;
pub mod ring;

pub use aligned::AlignedBuf;
pub use fixed::FixedBuffers;
pub use ring::BufRing;

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
