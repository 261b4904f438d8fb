//! `IORING_OP_FUTEX_WAIT` / `FUTEX_WAKE` / `FUTEX_WAITV` (6.7+): futex2 waits and
//! wake-ups as ring ops, so a thread can wait for a futex word and its I/O in the same
//! `io_uring_enter`.

use io_uring::{opcode, squeue::Entry, types};

/// futex2 flags: the word is 32 bits.
pub const FUTEX2_SIZE_U32: u32 = 0x02;
/// futex2 flags: the futex is private to this process (no shared-memory lookup).
pub const FUTEX2_PRIVATE: u32 = 128;
/// Wake or wait on every bit of the mask.
pub const FUTEX_BITSET_MATCH_ANY: u64 = 0xffff_ffff;

/// Wait while `*word == val` (completes with 0 when woken, -EAGAIN if the word already
/// differs).
pub fn wait(word: *const u32, val: u64, mask: u64, flags: u32) -> Entry {
    opcode::FutexWait::new(word, val, mask, flags).build()
}

/// Wake up to `count` waiters of `word` (completes with how many were woken).
pub fn wake(word: *const u32, count: u64, mask: u64, flags: u32) -> Entry {
    opcode::FutexWake::new(word, count, mask, flags).build()
}

/// Wait on several words at once (`futex_waitv(2)`): completes with the index of the
/// word that was woken, or -EAGAIN at once if one already differs from its value.
/// `v` must stay valid until the completion.
pub fn waitv(v: *const types::FutexWaitV, n: u32) -> Entry {
    opcode::FutexWaitV::new(v, n).build()
}

/// One entry of a [`waitv`] array.
pub fn waitv_entry(word: *const u32, val: u64, flags: u32) -> types::FutexWaitV {
    types::FutexWaitV::new()
        .val(val)
        .uaddr(word as u64)
        .flags(flags)
}
