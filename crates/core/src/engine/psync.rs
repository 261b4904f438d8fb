//! psync: blocking pread/pwrite, one at a time (fio's `psync`; the baseline).

use super::{sync_io, Buffers, Cqe, Engine, Io};
use std::io;

pub struct Psync {
    fd: i32,
    bufs: Buffers,
    queued: Vec<Io>,
    done: Vec<Cqe>,
    syscalls: u64,
}

impl Psync {
    pub fn new(fd: i32, bufs: Buffers) -> Self {
        Psync {
            fd,
            bufs,
            queued: Vec::new(),
            done: Vec::new(),
            syscalls: 0,
        }
    }
}

impl Engine for Psync {
    fn name(&self) -> &'static str {
        "psync"
    }
    fn queue(&mut self, io: Io) -> io::Result<()> {
        self.queued.push(io);
        Ok(())
    }
    fn submit(&mut self) -> io::Result<usize> {
        let n = self.queued.len();
        for io in self.queued.drain(..) {
            self.syscalls += 1;
            let res = sync_io(self.fd, &self.bufs, &io);
            self.done.push(Cqe {
                slot: io.slot,
                kind: io.kind,
                res,
            });
        }
        Ok(n)
    }
    fn reap(&mut self, _min: usize, out: &mut Vec<Cqe>) -> io::Result<()> {
        out.append(&mut self.done);
        Ok(())
    }
    fn syscalls(&self) -> u64 {
        self.syscalls
    }
    fn async_sync(&self) -> bool {
        true
    }
}
