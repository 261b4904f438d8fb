//! Processes: waitid (kernel 6.7+).

use io_uring::{opcode, squeue::Entry};

/// waitid(2) as an op: completes when a child matching `idtype`/`id` changes state as
/// `options` asks (WEXITED, …), filling `info` — which must stay alive (the slot's
/// `Owned::SigInfo`) until completion.
pub fn waitid(idtype: u32, id: u32, options: i32, info: *mut libc::siginfo_t) -> Entry {
    opcode::WaitId::new(idtype as libc::idtype_t, id as libc::id_t, options)
        .infop(info as *const _)
        .build()
}
