//! Submission queue entries, one builder per kernel concept.
//!
//! Every builder takes raw pointers: the caller (the [`Ring`](crate::ring::Ring)'s slot
//! table) owns the memory and keeps it alive until the completion arrives. Memory that only
//! the kernel needs (timespecs, iovec arrays, paths, socket addresses, msghdrs, statx
//! results) is kept in [`Owned`], whose heap allocations never move while the op is in flight.

pub mod cancel;
pub mod epoll;
pub mod fs;
pub mod futex;
pub mod msg;
pub mod net;
pub mod nop;
pub mod poll;
pub mod process;
pub mod rw;
pub mod splice;
pub mod sync;
pub mod timeout;
pub mod xattr;

use std::ffi::CString;

/// An fd argument: a plain descriptor or an index into the registered file table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdArg {
    Raw(i32),
    Fixed(u32),
}

/// Dispatch an [`FdArg`] to the crate's `Fd`/`Fixed` target types.
#[macro_export]
macro_rules! with_fd {
    ($fd:expr, |$t:ident| $body:expr) => {
        match $fd {
            $crate::op::FdArg::Raw(raw) => {
                let $t = io_uring::types::Fd(raw);
                $body
            }
            $crate::op::FdArg::Fixed(idx) => {
                let $t = io_uring::types::Fixed(idx);
                $body
            }
        }
    };
}

/// `struct statx` as the kernel fills it, including the O_DIRECT alignment fields (6.1+)
/// that libc's definition does not name.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KStatx {
    pub stx_mask: u32,
    pub stx_blksize: u32,
    pub stx_attributes: u64,
    pub stx_nlink: u32,
    pub stx_uid: u32,
    pub stx_gid: u32,
    pub stx_mode: u16,
    pad1: u16,
    pub stx_ino: u64,
    pub stx_size: u64,
    pub stx_blocks: u64,
    pub stx_attributes_mask: u64,
    pub stx_atime: KTimestamp,
    pub stx_btime: KTimestamp,
    pub stx_ctime: KTimestamp,
    pub stx_mtime: KTimestamp,
    pub stx_rdev_major: u32,
    pub stx_rdev_minor: u32,
    pub stx_dev_major: u32,
    pub stx_dev_minor: u32,
    pub stx_mnt_id: u64,
    pub stx_dio_mem_align: u32,
    pub stx_dio_offset_align: u32,
    spare: [u64; 12],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KTimestamp {
    pub tv_sec: i64,
    pub tv_nsec: u32,
    pad: i32,
}

impl KTimestamp {
    pub fn as_f64(&self) -> f64 {
        self.tv_sec as f64 + self.tv_nsec as f64 * 1e-9
    }
    pub fn as_ns(&self) -> i128 {
        self.tv_sec as i128 * 1_000_000_000 + self.tv_nsec as i128
    }
}

impl Default for KStatx {
    fn default() -> Self {
        // SAFETY: KStatx is plain old data; all-zero is a valid value for every field.
        unsafe { std::mem::zeroed() }
    }
}

pub const STATX_DIOALIGN: u32 = 0x2000;

/// `statx(fd, "", AT_EMPTY_PATH, mask)` done synchronously (diagnostics, doctor).
pub fn statx_fd(fd: i32, mask: u32) -> std::io::Result<KStatx> {
    let mut st = KStatx::default();
    // SAFETY: the path is a valid NUL-terminated empty string, `st` is a 256-byte statx
    // buffer we own, and AT_EMPTY_PATH makes the kernel use `fd` itself.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            mask,
            &mut st as *mut KStatx,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(st)
    }
}

/// A socket address the kernel reads from or writes into.
#[derive(Clone)]
pub struct SockAddr {
    pub storage: libc::sockaddr_storage,
    pub len: libc::socklen_t,
}

impl Default for SockAddr {
    fn default() -> Self {
        SockAddr {
            // SAFETY: sockaddr_storage is plain old data; zero is AF_UNSPEC.
            storage: unsafe { std::mem::zeroed() },
            len: std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }
}

impl SockAddr {
    pub fn from_std(addr: &std::net::SocketAddr) -> SockAddr {
        let mut s = SockAddr::default();
        match addr {
            std::net::SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
                unsafe {
                    std::ptr::write(&mut s.storage as *mut _ as *mut libc::sockaddr_in, sin);
                }
                s.len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            std::net::SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
                unsafe {
                    std::ptr::write(&mut s.storage as *mut _ as *mut libc::sockaddr_in6, sin6);
                }
                s.len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            }
        }
        s
    }

    /// An AF_UNIX address; a leading NUL byte makes it abstract.
    pub fn unix(path: &[u8]) -> Option<SockAddr> {
        let mut s = SockAddr::default();
        // SAFETY: sockaddr_storage is larger than sockaddr_un and suitably aligned; zeroed.
        let un = unsafe { &mut *(&mut s.storage as *mut _ as *mut libc::sockaddr_un) };
        if path.len() >= un.sun_path.len() {
            return None;
        }
        un.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, b) in un.sun_path.iter_mut().zip(path) {
            *d = *b as libc::c_char;
        }
        let base = std::mem::size_of::<libc::sa_family_t>();
        let extra = if path.first() == Some(&0) { 0 } else { 1 };
        s.len = (base + path.len() + extra) as libc::socklen_t;
        Some(s)
    }

    /// An AF_UNIX address's name, as the kernel gave it: the path's bytes (without the
    /// terminating NUL; an abstract name starts with its NUL byte), empty when the
    /// socket is unnamed; None for other families.
    pub fn unix_name(&self) -> Option<Vec<u8>> {
        if self.storage.ss_family as i32 != libc::AF_UNIX {
            return None;
        }
        // SAFETY: family says the storage holds a sockaddr_un (it is large enough).
        let un = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_un) };
        let base = std::mem::size_of::<libc::sa_family_t>();
        let n = (self.len as usize)
            .saturating_sub(base)
            .min(un.sun_path.len());
        let mut name: Vec<u8> = un.sun_path[..n].iter().map(|&c| c as u8).collect();
        if name.first() != Some(&0) {
            // a path: up to its first NUL (the kernel may count the terminator)
            if let Some(end) = name.iter().position(|&b| b == 0) {
                name.truncate(end);
            }
        }
        Some(name)
    }

    /// Back to a std address (inet families only).
    pub fn to_std(&self) -> Option<std::net::SocketAddr> {
        match self.storage.ss_family as i32 {
            libc::AF_INET => {
                // SAFETY: family says the storage holds a sockaddr_in.
                let sin = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(std::net::SocketAddr::new(
                    ip.into(),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                // SAFETY: family says the storage holds a sockaddr_in6.
                let s6 = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(s6.sin6_addr.s6_addr);
                Some(std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                    ip,
                    u16::from_be(s6.sin6_port),
                    s6.sin6_flowinfo,
                    s6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// A msghdr with the iovecs and the address it points to.
pub struct MsgStore {
    pub hdr: libc::msghdr,
    pub iov: Box<[libc::iovec]>,
    pub addr: Option<Box<SockAddr>>,
}

/// Kernel-facing memory an op needs for as long as it is in flight.
#[derive(Default)]
pub enum Owned {
    #[default]
    None,
    Timespec(Box<io_uring::types::Timespec>),
    Iovecs(Box<[libc::iovec]>),
    Path(CString),
    PathHow(CString, Box<io_uring::types::OpenHow>),
    Paths(CString, CString),
    Statx(CString, Box<KStatx>),
    Addr(Box<SockAddr>),
    SigInfo(Box<libc::siginfo_t>),
    Msg(Box<MsgStore>),
    /// An xattr op: its name, the path (None for the f* ops) and the value buffer
    /// (filled by a get, read by a set).
    Xattr(CString, Option<CString>, Box<[u8]>),
    /// A pipe op's two descriptors (read end, write end).
    Fds(Box<[i32; 2]>),
    /// epoll_ctl's event, or the array epoll_wait fills.
    Epoll(Box<[libc::epoll_event]>),
    /// futex_waitv's array of words.
    FutexV(Box<[io_uring::types::FutexWaitV]>),
}

// SAFETY: the raw pointers inside (iovec bases, msghdr fields) point into memory that the
// slot owning this value also owns (or that the caller keeps alive in the slot's keepalive);
// nothing here is tied to a thread, and only the ring that owns the slot touches it.
unsafe impl Send for Owned {}
// SAFETY: see above; shared references never mutate through these pointers.
unsafe impl Sync for Owned {}

/// What a read/write-family op touched, kept for error messages (EINVAL on O_DIRECT).
#[derive(Clone, Copy, Debug, Default)]
pub struct IoInfo {
    pub fd: Option<i32>,
    pub addr: u64,
    pub len: u64,
    pub offset: u64,
    /// Provided-buffer group of a buffer-select op.
    pub buf_group: Option<u16>,
}

impl IoInfo {
    /// A plain read/write's I/O: `len` bytes at `addr`, file offset `offset`.
    pub fn new(fd: Option<i32>, addr: u64, len: u64, offset: u64) -> IoInfo {
        IoInfo {
            fd,
            addr,
            len,
            offset,
            buf_group: None,
        }
    }
}

/// Explain an EINVAL from a read or write: on an O_DIRECT file it is almost always alignment.
pub fn explain_einval(op_name: &str, info: &IoInfo) -> Option<String> {
    let fd = info.fd?;
    // SAFETY: F_GETFL on any integer is harmless; a closed fd just returns -1.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 || fl & libc::O_DIRECT == 0 {
        return None;
    }
    let (mem_align, off_align) = match statx_fd(fd, STATX_DIOALIGN) {
        Ok(st) if st.stx_mask & STATX_DIOALIGN != 0 && st.stx_dio_mem_align > 0 => {
            (st.stx_dio_mem_align as u64, st.stx_dio_offset_align as u64)
        }
        _ => (512, 512),
    };
    let mut bad = Vec::new();
    if !info.addr.is_multiple_of(mem_align) {
        bad.push(format!(
            "buffer address {:#x} is not a multiple of {mem_align}",
            info.addr
        ));
    }
    if !info.len.is_multiple_of(off_align) {
        bad.push(format!(
            "length {} is not a multiple of {off_align}",
            info.len
        ));
    }
    if info.offset != u64::MAX && !info.offset.is_multiple_of(off_align) {
        bad.push(format!(
            "offset {} is not a multiple of {off_align}",
            info.offset
        ));
    }
    let what = if bad.is_empty() {
        format!("check alignment to {off_align} bytes")
    } else {
        bad.join(", ")
    };
    Some(format!(
        "{op_name} on an O_DIRECT file failed with EINVAL: O_DIRECT needs aligned I/O ({what}); \
         use page-aligned memory (Ring.register_buffers, uringkit.aligned_buffer) and \
         block-multiple lengths and offsets"
    ))
}
