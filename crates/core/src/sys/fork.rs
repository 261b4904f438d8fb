//! Knowing that this process is a fork of the one that opened something.
//!
//! A forked child shares its parent's open file descriptions and `MAP_SHARED` mappings:
//! a store (or ring) opened before `fork()` is, in the child, a second user of the very
//! same files, locks and shared memory — with none of the parent's threads and a copy of
//! its in-memory state frozen at the fork. Used from both sides, they overwrite each
//! other's appends; even the child's `close()` would flush a stale write buffer over the
//! parent's newer records. Things opened before a fork record [`generation`] and refuse to
//! work (or to clean up) once it has changed.
//!
//! `generation()` costs two atomic loads (no `getpid` system call per operation): a
//! `pthread_atfork` child handler, registered on first use, counts forks. A child made
//! with a raw `clone`/`vfork` that does not run the handlers is not seen — such a child
//! execs at once (and `O_CLOEXEC` closes what it inherited).
//!
//! The same handler lets go, in the child, of the locks registered with [`hold_lock`]:
//! an `flock` belongs to the open file description, which the child shares, so without
//! this every child kept the parent's store locked for as long as it lived — the parent
//! could not close and open its own store again while a `multiprocessing` worker ran.
//! The child's descriptor is pointed at `/dev/null` instead (`dup3`, async-signal-safe),
//! so its number stays valid for whoever closes it later. And `fork()` returns in the
//! parent only once the child has done so (a pipe made by the prepare handler, written by
//! the child's, waited for by the parent's, at most [`CHILD_WAIT_MS`]): a parent that
//! closes and reopens its store right after forking never finds it held by a child that
//! has not run yet. Forks made while no lock is held wait for nothing.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

static FORKS: AtomicU64 = AtomicU64::new(0);
static HANDLER: Once = Once::new();

/// How many lock descriptors can be let go of in a child (more stores than this open for
/// writing at once: the newest ones' children keep the lock, as without this module).
const LOCKS: usize = 128;
#[allow(clippy::declare_interior_mutable_const)] // (an array initializer, read once each)
const FREE: AtomicI32 = AtomicI32::new(-1);
static HELD: [AtomicI32; LOCKS] = [FREE; LOCKS];

/// The pipe of the fork under way (read end, write end; -1: none).
static SYNC_R: AtomicI32 = AtomicI32::new(-1);
static SYNC_W: AtomicI32 = AtomicI32::new(-1);

/// How long a parent waits for its child to let go of the locks (a child that never
/// runs its fork handler — it cannot — or a machine overloaded beyond that).
pub const CHILD_WAIT_MS: i32 = 2000;

extern "C" fn before_fork() {
    if !HELD.iter().any(|s| s.load(Ordering::Relaxed) >= 0) {
        return;
    }
    if SYNC_R.load(Ordering::Acquire) >= 0 {
        return; // (another thread's fork is under way: this one waits for nothing)
    }
    let mut p = [-1i32; 2];
    // SAFETY: pipe2 fills the two-int array we own.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    SYNC_W.store(p[1], Ordering::Release);
    SYNC_R.store(p[0], Ordering::Release);
}

extern "C" fn after_fork_in_parent() {
    let (r, w) = (
        SYNC_R.swap(-1, Ordering::AcqRel),
        SYNC_W.swap(-1, Ordering::AcqRel),
    );
    if w >= 0 {
        // (the child has its own copy: the read below ends with its byte, or at EOF once
        // it closed it — or at once if the fork failed and there is no child)
        // SAFETY: ours, from before_fork.
        unsafe { libc::close(w) };
    }
    if r >= 0 {
        let mut pfd = libc::pollfd {
            fd: r,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own; r is ours, closed right after.
        unsafe {
            libc::poll(&mut pfd, 1, CHILD_WAIT_MS);
            libc::close(r);
        }
    }
}

extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    let (r, w) = (
        SYNC_R.swap(-1, Ordering::AcqRel),
        SYNC_W.swap(-1, Ordering::AcqRel),
    );
    release_held();
    // SAFETY: the pipe's ends are this process's copies; one byte from our stack.
    unsafe {
        if r >= 0 {
            libc::close(r);
        }
        if w >= 0 {
            libc::write(w, b"x".as_ptr().cast(), 1);
            libc::close(w);
        }
    }
}

/// In a child: point every held lock's descriptor at /dev/null.
fn release_held() {
    // (only async-signal-safe calls here: open, dup3, close)
    let mut null = -1;
    for slot in &HELD {
        let fd = slot.swap(-1, Ordering::Relaxed);
        if fd < 0 {
            continue;
        }
        if null < 0 {
            // SAFETY: a NUL-terminated literal path; the fd is ours.
            null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if null < 0 {
                return;
            }
        }
        // SAFETY: both fds are open in this process; dup3 closes `fd`'s reference to the
        // locked file description and makes `fd` a /dev/null descriptor, close-on-exec
        // like the lock's (a child forked to exec a program passes nothing on).
        unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
    }
    if null >= 0 {
        // SAFETY: ours, opened above.
        unsafe { libc::close(null) };
    }
}

fn register() {
    HANDLER.call_once(|| {
        // SAFETY: the three handlers are plain `extern "C" fn`s that live as long as the
        // process (this library is never unloaded: Python does not unload extension
        // modules); they touch only atomics and their own descriptors.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(in_child),
            )
        };
    });
}

/// Forks so far on the way to this process (0 in the process that first asked). Compare
/// it with the value taken when something was opened: different means "a forked child".
pub fn generation() -> u64 {
    register();
    FORKS.load(Ordering::Relaxed)
}

/// Let a forked child drop its reference to `fd` (an `flock`ed descriptor): see the
/// module docs. Call [`release_lock`] before closing `fd`. Returns false when every slot
/// is taken (the children then keep it).
pub fn hold_lock(fd: i32) -> bool {
    register();
    HELD.iter().any(|s| {
        s.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// `fd` is about to be closed: no child should touch it any more.
pub fn release_lock(fd: i32) {
    for s in &HELD {
        if s.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// `fd` refers to the same file as one of the locks held ([`hold_lock`]) by this process:
/// a second open of a store this process has open for writing.
pub fn held_here(fd: i32) -> bool {
    let id = |fd: i32| {
        // SAFETY: libc::stat is plain old data, valid all zero.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat fills the stat struct we own; a bad fd only makes it fail.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    let Some(me) = id(fd) else {
        return false;
    };
    HELD.iter()
        .map(|s| s.load(Ordering::Acquire))
        .any(|h| h >= 0 && h != fd && id(h) == Some(me))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lock a new file, fork a child that waits, close the lock in the parent and try to
    /// take it again: whether that worked, and the child's exit code (bit 0: it saw a new
    /// generation; bit 1: its copy of the lock fd is still open, and close-on-exec).
    fn lock_fork_close_relock(hold: bool) -> (bool, i32) {
        let d = tempfile::tempdir().unwrap();
        let path = std::ffi::CString::new(d.path().join("LOCK").to_str().unwrap()).unwrap();
        let open = || {
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC;
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::open(path.as_ptr(), flags, 0o644) }
        };
        // SAFETY (the libc calls below): fds and the pipe are this test's own.
        unsafe {
            let fd = open();
            assert_eq!(libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB), 0);
            if hold {
                assert!(hold_lock(fd));
            }
            let born = generation();
            // (p: the parent says "go". Nothing says the child runs: fork() returns in
            // the parent once the child's handler let the lock go)
            let mut p = [0i32; 2];
            assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let mut b = 0u8;
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                // the child: plain syscalls only, then _exit
                let code = (generation() != born) as i32
                    | ((libc::fcntl(fd, libc::F_GETFD) == libc::FD_CLOEXEC) as i32) << 1;
                libc::close(p[1]);
                libc::read(p[0], (&mut b as *mut u8).cast(), 1); // (until the parent says)
                libc::_exit(code);
            }
            libc::close(p[0]);
            if hold {
                release_lock(fd);
            }
            libc::close(fd);
            let again = open();
            let relocked = libc::flock(again, libc::LOCK_EX | libc::LOCK_NB) == 0;
            libc::close(again);
            libc::close(p[1]); // (the child goes)
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            assert!(libc::WIFEXITED(status));
            assert_eq!(generation(), born, "the parent's generation changed");
            (relocked, libc::WEXITSTATUS(status))
        }
    }

    #[test]
    fn a_child_sees_a_new_generation_and_lets_a_held_lock_go() {
        assert_eq!(lock_fork_close_relock(true), (true, 0b11));
        // without hold_lock, the child's copy keeps the file locked while it lives
        assert_eq!(lock_fork_close_relock(false), (false, 0b11));
    }
}
