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
