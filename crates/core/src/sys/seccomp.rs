//! Really blocking io_uring (or any syscall) in this process with a seccomp filter: how the
//! test suite proves the fallback path, and how users can rehearse a locked-down container.

use std::io;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The three io_uring syscalls.
pub fn io_uring_syscalls() -> [i64; 3] {
    [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ]
}

/// Make every syscall in `nrs` fail with `errno` for this process (all threads created
/// afterwards and, with TSYNC, the current ones) and its children. Irreversible.
pub fn block_syscalls(nrs: &[i64], errno: i32) -> io::Result<()> {
    let arch = if cfg!(target_arch = "x86_64") {
        AUDIT_ARCH_X86_64
    } else if cfg!(target_arch = "aarch64") {
        AUDIT_ARCH_AARCH64
    } else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "seccomp blocking is implemented for x86_64 and aarch64 only",
        ));
    };
    let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    let n = nrs.len();
    let mut prog = vec![
        stmt(ld, 4), // seccomp_data.arch
        jump(jeq, arch, 1, 0),
        stmt(ret, SECCOMP_RET_ALLOW),
        stmt(ld, 0), // seccomp_data.nr
    ];
    for (i, nr) in nrs.iter().enumerate() {
        // jump to the ERRNO return, which sits after the remaining tests and the ALLOW.
        let to_errno = (n - i) as u8;
        prog.push(jump(jeq, *nr as u32, to_errno, 0));
    }
    prog.push(stmt(ret, SECCOMP_RET_ALLOW));
    prog.push(stmt(ret, SECCOMP_RET_ERRNO | (errno as u32 & 0xffff)));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fprog points at `prog`, alive for the duration of the call; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Seccomp mode of this process from /proc/self/status: 0 none, 1 strict, 2 filter.
pub fn seccomp_mode() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}
