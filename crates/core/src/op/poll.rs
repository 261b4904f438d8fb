//! Readiness: poll (one-shot or multishot) and its removal.

use super::FdArg;
use crate::with_fd;
use io_uring::{opcode, squeue::Entry};

/// Completes with the ready events (`POLLIN`, `POLLOUT`, …) once `fd` has any of `mask`;
/// `multishot`: once per readiness change until removed or an error.
pub fn poll_add(fd: FdArg, mask: u32, multishot: bool) -> Entry {
    with_fd!(fd, |t| opcode::PollAdd::new(t, mask)
        .multi(multishot)
        .build())
}

/// Remove the poll whose (ring-internal) user_data is `target`.
pub fn poll_remove(target: u64) -> Entry {
    opcode::PollRemove::new(target).build()
}
