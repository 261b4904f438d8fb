//! Whole-process CPU accounting: getrusage(RUSAGE_SELF) sums every thread of the process —
//! worker threads, glibc's POSIX AIO helpers, and io_uring's SQPOLL (`iou-sqp-*`) and
//! io-wq (`iou-wrk-*`) threads, which belong to the process's thread group since 5.12.

#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub user_ns: u64,
    pub sys_ns: u64,
    pub vol_ctx: u64,
    pub invol_ctx: u64,
    pub minflt: u64,
    pub majflt: u64,
}

fn tv_ns(t: libc::timeval) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000
}

pub fn usage() -> Usage {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    Usage {
        user_ns: tv_ns(r.ru_utime),
        sys_ns: tv_ns(r.ru_stime),
        vol_ctx: r.ru_nvcsw as u64,
        invol_ctx: r.ru_nivcsw as u64,
        minflt: r.ru_minflt as u64,
        majflt: r.ru_majflt as u64,
    }
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, o: Usage) -> Usage {
        Usage {
            user_ns: self.user_ns.saturating_sub(o.user_ns),
            sys_ns: self.sys_ns.saturating_sub(o.sys_ns),
            vol_ctx: self.vol_ctx.saturating_sub(o.vol_ctx),
            invol_ctx: self.invol_ctx.saturating_sub(o.invol_ctx),
            minflt: self.minflt.saturating_sub(o.minflt),
            majflt: self.majflt.saturating_sub(o.majflt),
        }
    }
}
