//! Messages between rings: MSG_RING posts a completion into another ring.

use io_uring::{opcode, squeue::Entry, types};

/// Tag of a completion that another ring posted into this one with `msg_ring`: the top
/// two bits are `10` (slot ids stay below 2^32; the ring's internal ops use all ones).
pub const MSG_TAG: u64 = 2 << 62;
/// The part of a message's user_data that carries the sender's value.
pub const MSG_MASK: u64 = (1 << 62) - 1;

/// Post a completion with `res` and user_data `MSG_TAG | data` into the ring `ring_fd`.
pub fn msg_ring(ring_fd: i32, res: i32, data: u64) -> Entry {
    opcode::MsgRingData::new(types::Fd(ring_fd), res, MSG_TAG | (data & MSG_MASK), None).build()
}
