//! `IORING_OP_NOP`: a round trip through the ring and nothing else.

use io_uring::{opcode, squeue::Entry};

pub fn nop() -> Entry {
    opcode::Nop::new().build()
}
