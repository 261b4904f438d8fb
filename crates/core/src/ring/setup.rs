//! Ring setup: the flags of `io_uring_setup(2)` and the errors it can return, explained.

use std::fmt;
use std::io;

/// The largest SQ size the kernel accepts without `IORING_SETUP_CLAMP` (`IORING_MAX_ENTRIES`).
pub const MAX_ENTRIES: u32 = 32768;

/// Everything `io_uring_setup(2)` can be asked for.
#[derive(Clone, Debug)]
pub struct RingConfig {
    pub entries: u32,
    pub cq_entries: Option<u32>,
    pub sqpoll: bool,
    pub sq_thread_idle_ms: u32,
    pub sq_thread_cpu: Option<u32>,
    pub iopoll: bool,
    pub coop_taskrun: bool,
    pub single_issuer: bool,
    pub defer_taskrun: bool,
    /// `IORING_SETUP_R_DISABLED`: the ring takes no submissions until enabled (the
    /// window in which restrictions can be registered).
    pub disabled: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            entries: 256,
            cq_entries: None,
            sqpoll: false,
            sq_thread_idle_ms: 1000,
            sq_thread_cpu: None,
            iopoll: false,
            coop_taskrun: false,
            single_issuer: false,
            defer_taskrun: false,
            disabled: false,
        }
    }
}

/// A setup failure with the reason a user can act on.
#[derive(Debug)]
pub enum SetupError {
    /// The arguments themselves are wrong; nothing was asked of the kernel.
    Invalid(String),
    /// The kernel refused; `errno` is the raw error, `message` explains it.
    Os { errno: i32, message: String },
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Invalid(m) => f.write_str(m),
            SetupError::Os { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for SetupError {}

impl RingConfig {
    /// Check the arguments before the kernel sees them.
    pub fn validate(&self) -> Result<(), SetupError> {
        if self.entries == 0 || self.entries > MAX_ENTRIES {
            return Err(SetupError::Invalid(format!(
                "entries must be between 1 and {MAX_ENTRIES} (got {}); the kernel rounds it up to a power of two",
                self.entries
            )));
        }
        if let Some(cq) = self.cq_entries {
            if cq < self.entries || cq > 2 * MAX_ENTRIES {
                return Err(SetupError::Invalid(format!(
                    "cq_entries must be between entries ({}) and {} (got {cq})",
                    self.entries,
                    2 * MAX_ENTRIES
                )));
            }
        }
        if self.defer_taskrun && !self.single_issuer {
            return Err(SetupError::Invalid(
                "defer_taskrun=True requires single_issuer=True (the kernel refuses it otherwise)"
                    .into(),
            ));
        }
        if self.defer_taskrun && self.sqpoll {
            return Err(SetupError::Invalid(
                "defer_taskrun=True cannot be combined with sqpoll=True (completions would never be run)"
                    .into(),
            ));
        }
        if self.coop_taskrun && self.sqpoll {
            return Err(SetupError::Invalid(
                "coop_taskrun=True has no meaning with sqpoll=True: the SQPOLL thread runs task work".into(),
            ));
        }
        if self.sq_thread_cpu.is_some() && !self.sqpoll {
            return Err(SetupError::Invalid(
                "sq_thread_cpu only applies with sqpoll=True".into(),
            ));
        }
        Ok(())
    }

    /// Names of the setup flags this config asks for (for messages).
    pub fn flag_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.sqpoll {
            v.push("SQPOLL");
        }
        if self.sq_thread_cpu.is_some() {
            v.push("SQ_AFF");
        }
        if self.iopoll {
            v.push("IOPOLL");
        }
        if self.coop_taskrun {
            v.push("COOP_TASKRUN");
        }
        if self.single_issuer {
            v.push("SINGLE_ISSUER");
        }
        if self.defer_taskrun {
            v.push("DEFER_TASKRUN");
        }
        if self.cq_entries.is_some() {
            v.push("CQSIZE");
        }
        if self.disabled {
            v.push("R_DISABLED");
        }
        v
    }

    pub(crate) fn build(&self) -> Result<io_uring::IoUring, SetupError> {
        self.validate()?;
        let mut b = io_uring::IoUring::builder();
        if let Some(cq) = self.cq_entries {
            b.setup_cqsize(cq);
        }
        if self.sqpoll {
            b.setup_sqpoll(self.sq_thread_idle_ms);
            if let Some(cpu) = self.sq_thread_cpu {
                b.setup_sqpoll_cpu(cpu);
            }
        }
        if self.iopoll {
            b.setup_iopoll();
        }
        if self.coop_taskrun {
            b.setup_coop_taskrun();
            b.setup_taskrun_flag();
        }
        if self.single_issuer {
            b.setup_single_issuer();
        }
        if self.defer_taskrun {
            b.setup_defer_taskrun();
            b.setup_taskrun_flag();
        }
        if self.disabled {
            b.setup_r_disabled();
        }
        b.build(self.entries)
            .map_err(|e| explain_setup_error(self, &e))
    }
}

/// Read a sysctl-ish integer file; `None` when absent or unreadable.
pub fn read_proc_int(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// RLIMIT_MEMLOCK soft limit in bytes (`None` = unlimited).
pub fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; RLIMIT_MEMLOCK is a valid resource.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if rc != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(r.rlim_cur)
    }
}

/// Human form of a byte count: 8 MiB, 64 KiB, 512 B.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The memlock limit as text for messages.
pub fn memlock_text() -> String {
    match memlock_limit() {
        None => "unlimited".to_string(),
        Some(n) => human_bytes(n),
    }
}

fn explain_setup_error(cfg: &RingConfig, e: &io::Error) -> SetupError {
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    let flags = cfg.flag_names();
    let flags_text = if flags.is_empty() {
        "no flags".to_string()
    } else {
        flags.join("|")
    };
    let message = match errno {
        libc::ENOSYS => "io_uring_setup failed with ENOSYS: this kernel has no io_uring \
             (Linux older than 5.1, or built without CONFIG_IO_URING); uringkit falls back to \
             libaio or a thread pool"
            .to_string(),
        libc::EPERM => {
            let disabled = read_proc_int("/proc/sys/kernel/io_uring_disabled");
            let mut m = String::from("io_uring_setup was refused with EPERM: ");
            match disabled {
                Some(2) => m.push_str("kernel.io_uring_disabled=2 disables io_uring for everyone"),
                Some(1) => m.push_str(
                    "kernel.io_uring_disabled=1 allows it only to CAP_SYS_ADMIN or the \
                     kernel.io_uring_group",
                ),
                _ => m.push_str(
                    "a seccomp filter blocks it (Docker's and Podman's default profiles, \
                     gVisor, some CI sandboxes)",
                ),
            }
            if cfg.sqpoll {
                m.push_str(
                    "; SQPOLL also needs CAP_SYS_NICE on kernels before 5.11 — retry with \
                     sqpoll=False",
                );
            }
            m.push_str("; uringkit falls back to libaio or a thread pool");
            m
        }
        libc::ENOMEM => format!(
            "io_uring_setup failed with ENOMEM: the ring's memory ({} entries) does not fit \
             in RLIMIT_MEMLOCK ({}) on this kernel; use fewer entries or raise the limit \
             (`ulimit -l`, LimitMEMLOCK= in systemd, --ulimit memlock= in Docker)",
            cfg.entries,
            memlock_text()
        ),
        libc::EINVAL => format!(
            "io_uring_setup rejected entries={} with flags {flags_text} (EINVAL): this \
             kernel does not support one of these flags or combinations",
            cfg.entries
        ),
        libc::EBUSY if cfg.sq_thread_cpu.is_some() => format!(
            "sq_thread_cpu={:?} is not an online CPU this process may use (EBUSY)",
            cfg.sq_thread_cpu
        ),
        libc::EMFILE | libc::ENFILE => {
            format!(
                "io_uring_setup: out of file descriptors ({})",
                crate::text::io_error(e)
            )
        }
        _ => format!(
            "io_uring_setup failed with flags {flags_text}: {}",
            crate::text::io_error(e)
        ),
    };
    SetupError::Os { errno, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_entries_is_invalid() {
        let c = RingConfig {
            entries: 0,
            ..Default::default()
        };
        assert!(matches!(c.validate(), Err(SetupError::Invalid(m)) if m.contains("entries")));
    }

    #[test]
    fn defer_needs_single_issuer() {
        let c = RingConfig {
            defer_taskrun: true,
            ..Default::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
