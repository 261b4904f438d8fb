//! Positioned reads and writes that finish the job: short transfers are continued and
//! EINTR is retried, so callers see "all of it", "end of file" or an error.

use std::io;

/// Call `op(done)` (one pread/pwrite of the rest, returning bytes or -1) until `len`
/// bytes moved or it returns 0; EINTR is retried. Returns (bytes moved, calls made).
fn transfer(len: usize, mut op: impl FnMut(usize) -> isize) -> io::Result<(usize, u64)> {
    let (mut done, mut calls) = (0usize, 0u64);
    while done < len {
        calls += 1;
        let r = op(done);
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            break;
        }
        done += r as usize;
    }
    Ok((done, calls))
}

/// Read up to `buf.len()` bytes at `off`; fewer only at end of file. Returns the count.
pub fn pread_full(fd: i32, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let len = buf.len();
    let p = buf.as_mut_ptr();
    // SAFETY: p[done..len] lies inside `buf`, writable for the duration of the call.
    let op = |done: usize| unsafe {
        libc::pread(
            fd,
            p.add(done).cast(),
            len - done,
            (off + done as u64) as i64,
        )
    };
    Ok(transfer(len, op)?.0)
}

/// Write all of `buf` at `off`. Returns how many `pwrite` calls it took.
pub fn pwrite_all(fd: i32, buf: &[u8], off: u64) -> io::Result<u64> {
    let len = buf.len();
    let p = buf.as_ptr();
    // SAFETY: p[done..len] lies inside `buf`, readable for the duration of the call.
    let op = |done: usize| unsafe {
        libc::pwrite(
            fd,
            p.add(done).cast(),
            len - done,
            (off + done as u64) as i64,
        )
    };
    let (done, calls) = transfer(len, op)?;
    if done < len {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the disk accepted no bytes",
        ));
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn roundtrip_and_eof() {
        let f = tempfile::tempfile().unwrap();
        let fd = f.as_raw_fd();
        assert_eq!(pwrite_all(fd, b"hello world", 10).unwrap(), 1);
        let mut b = [0u8; 32];
        assert_eq!(pread_full(fd, &mut b, 10).unwrap(), 11);
        assert_eq!(&b[..11], b"hello world");
        assert_eq!(pread_full(fd, &mut b, 100).unwrap(), 0);
    }
}

/// Writeback of a file being written front to back, started as it grows (RocksDB's
/// `bytes_per_sync`): every `step` bytes the new range is handed to the disk and the
/// range before it waited for, so no more than two ranges are ever dirty. Another
/// writer's fdatasync on the same filesystem then never waits for a journal commit
/// that must flush the whole file first (ext4 orders data before metadata). 1 MiB
/// steps, measured against 256 KiB and 4 MiB (docs/kv-format.md, "Compaction").
#[derive(Default, Clone, Copy, Debug)]
pub struct RangeSync {
    /// writeback started below this offset
    started: u64,
    /// and waited for below this one
    waited: u64,
}

impl RangeSync {
    pub const STEP: u64 = 1 << 20;

    /// The file now holds `end` bytes: start and wait as above once a step has passed.
    /// Best effort (errors are the final fdatasync's to report).
    pub fn advance(&mut self, fd: i32, end: u64) {
        if end < self.started + Self::STEP {
            return;
        }
        // SAFETY: sync_file_range only reads fd and the ranges; both lie inside what
        // was written (a length of 0 would mean "to the end": never passed).
        unsafe {
            libc::sync_file_range(
                fd,
                self.started as i64,
                (end - self.started) as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
            if self.started > self.waited {
                libc::sync_file_range(
                    fd,
                    self.waited as i64,
                    (self.started - self.waited) as i64,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
            }
        }
        (self.waited, self.started) = (self.started, end);
    }
}

/// Create (or truncate) the file at `path` and write `parts` — (offset, bytes), in
/// increasing order; gaps between them are written as zeros — with its writeback
/// started as it grows ([`RangeSync`]), then fdatasync it.
pub fn write_synced(path: &std::path::Path, parts: &[(u64, &[u8])]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::create(path)?;
    let fd = f.as_raw_fd();
    let zeros = [0u8; 4096];
    let (mut at, mut sync) = (0u64, RangeSync::default());
    let mut put = |buf: &[u8], at: &mut u64| -> io::Result<()> {
        for piece in buf.chunks(1 << 20) {
            pwrite_all(fd, piece, *at)?;
            *at += piece.len() as u64;
            sync.advance(fd, *at);
        }
        Ok(())
    };
    for &(off, part) in parts {
        while at < off {
            let n = (off - at).min(zeros.len() as u64) as usize;
            put(&zeros[..n], &mut at)?;
        }
        put(part, &mut at)?;
    }
    f.sync_data()
}

/// Give the calling thread's I/O the lowest best-effort priority (`ioprio_set`,
/// IOPRIO_WHO_PROCESS with tid 0: this thread; class 2 level 7): what a store does in
/// the background — the index check, the warm-up, compactions — then yields to its own
/// reads where the I/O scheduler tells levels apart (BFQ; mq-deadline only tells
/// classes apart). Not the idle class: a steady stream of foreground reads starved it
/// (the index check then never finished, and lookups kept faulting single pages). A
/// hint: where it is refused or ignored, nothing changes.
pub fn background_io() {
    // SAFETY: ioprio_set only changes this thread's I/O priority.
    unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, (2 << 13) | 7) };
}
