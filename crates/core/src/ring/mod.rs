//! A ring with a slot table: every queued SQE owns the memory it points to until its final
//! completion arrives, whatever its submitter does in the meantime.
//!
//! The SQE's `user_data` is the slot index; the caller's own `user_data` lives in the slot.
//! `K` is the caller's keepalive (Python objects in the bindings, `()` in pure Rust).

pub mod probe;
pub mod register;
pub mod setup;

use crate::op::{IoInfo, Owned};
use io_uring::{cqueue, squeue, types, IoUring};
use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

pub use setup::{RingConfig, SetupError};

/// SQE user_data of ops the ring issues for itself (close-time cancel and drain).
const INTERNAL: u64 = u64::MAX;
const IORING_ENTER_GETEVENTS: u32 = 1;

/// Per-SQE flags users may ask for.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqeOpts {
    pub link: bool,
    pub hardlink: bool,
    pub drain: bool,
    pub async_: bool,
    pub skip_success: bool,
}

impl SqeOpts {
    fn flags(&self) -> squeue::Flags {
        let mut f = squeue::Flags::empty();
        if self.link {
            f |= squeue::Flags::IO_LINK;
        }
        if self.hardlink {
            f |= squeue::Flags::IO_HARDLINK;
        }
        if self.drain {
            f |= squeue::Flags::IO_DRAIN;
        }
        if self.async_ {
            f |= squeue::Flags::ASYNC;
        }
        if self.skip_success {
            f |= squeue::Flags::SKIP_SUCCESS;
        }
        f
    }
}

/// One in-flight operation and everything it needs alive.
pub struct Slot<K> {
    pub user_data: u64,
    pub opcode: u8,
    pub keep: K,
    pub owned: Owned,
    pub io: IoInfo,
    skip_success: bool,
    /// Slots of skip_success ops linked before this one: done once this one is.
    releases: Vec<u32>,
}

impl<K> Slot<K> {
    pub fn new(user_data: u64, opcode: u8, keep: K) -> Self {
        Slot {
            user_data,
            opcode,
            keep,
            owned: Owned::None,
            io: IoInfo::default(),
            skip_success: false,
            releases: Vec::new(),
        }
    }
}

/// A completion, with the slot handed back when it is the op's last one.
pub struct Done<K> {
    pub user_data: u64,
    pub res: i32,
    pub flags: u32,
    pub opcode: u8,
    pub io: IoInfo,
    /// `Some` when no more completions will come for this op (no `IORING_CQE_F_MORE`).
    pub slot: Option<Slot<K>>,
}

impl<K> Done<K> {
    pub fn more(&self) -> bool {
        cqueue::more(self.flags)
    }
    pub fn notif(&self) -> bool {
        cqueue::notif(self.flags)
    }
    pub fn buffer_id(&self) -> Option<u16> {
        cqueue::buffer_select(self.flags)
    }
}

/// Why a wait returned without its completions.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    Ready,
    TimedOut,
    Interrupted,
}

pub struct Ring<K> {
    ring: IoUring,
    cfg: RingConfig,
    slots: Vec<Option<Slot<K>>>,
    free: Vec<u32>,
    /// Slots whose final CQE is still expected.
    in_flight: usize,
    /// skip_success slots not yet known to be done.
    skipped: usize,
    internal: usize,
    /// CQEs taken off the ring early (to make room) and not yet handed out.
    backlog: VecDeque<(u64, i32, u32)>,
    /// The previous SQE carried IO_LINK/HARDLINK: its skip_success slots, waiting for a successor.
    open_chain: Vec<u32>,
    chain_open: bool,
    pub(crate) submits: u64,
    /// Registered personality (credentials) every SQE queued from now on carries; 0: the
    /// submitting task's own.
    personality: u16,
}

impl<K> Ring<K> {
    pub fn new(cfg: RingConfig) -> Result<Self, SetupError> {
        let ring = cfg.build()?;
        Ok(Ring {
            ring,
            cfg,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            skipped: 0,
            internal: 0,
            backlog: VecDeque::new(),
            open_chain: Vec::new(),
            chain_open: false,
            submits: 0,
            personality: 0,
        })
    }

    /// Run the SQEs queued from now on with the credentials registered as `id`
    /// (`io_uring_register_personality`); 0 returns to the submitter's own.
    pub fn set_personality(&mut self, id: u16) {
        self.personality = id;
    }

    pub fn personality(&self) -> u16 {
        self.personality
    }

    pub fn config(&self) -> &RingConfig {
        &self.cfg
    }
    pub fn raw(&self) -> &IoUring {
        &self.ring
    }
    pub fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.ring.as_raw_fd()
    }
    pub fn sq_entries(&self) -> u32 {
        self.ring.params().sq_entries()
    }
    pub fn cq_entries(&self) -> u32 {
        self.ring.params().cq_entries()
    }
    /// Ops whose final completion has not been handed out yet (skip_success ones excluded).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
    /// Ops still holding memory, including skip_success ones whose success posts no CQE.
    pub fn holding(&self) -> usize {
        self.in_flight + self.skipped
    }
    pub fn submit_calls(&self) -> u64 {
        self.submits
    }
    pub fn sq_pending(&mut self) -> usize {
        self.ring.submission().len()
    }
    pub fn sq_space_left(&mut self) -> usize {
        let sq = self.ring.submission();
        sq.capacity() - sq.len()
    }
    pub fn cq_ready(&mut self) -> usize {
        self.backlog.len() + self.ring.completion().len()
    }
    pub fn cq_overflowed(&mut self) -> bool {
        self.ring.submission().cq_overflow()
    }
    pub fn sq_dropped(&mut self) -> u32 {
        self.ring.submission().dropped()
    }
    pub fn cq_overflow_count(&mut self) -> u32 {
        self.ring.completion().overflow()
    }

    /// Supported opcode names.
    pub fn probe(&self) -> io::Result<Vec<&'static str>> {
        probe::supported(&self.ring)
    }

    /// Feature flags the kernel reported at setup.
    pub fn features(&self) -> Vec<&'static str> {
        let p = self.ring.params();
        let all = [
            ("single_mmap", p.is_feature_single_mmap()),
            ("nodrop", p.is_feature_nodrop()),
            ("submit_stable", p.is_feature_submit_stable()),
            ("rw_cur_pos", p.is_feature_rw_cur_pos()),
            ("cur_personality", p.is_feature_cur_personality()),
            ("fast_poll", p.is_feature_fast_poll()),
            ("poll_32bits", p.is_feature_poll_32bits()),
            ("sqpoll_nonfixed", p.is_feature_sqpoll_nonfixed()),
            ("ext_arg", p.is_feature_ext_arg()),
            ("native_workers", p.is_feature_native_workers()),
            ("resource_tagging", p.is_feature_resource_tagging()),
            ("cqe_skip", p.is_feature_skip_cqe_on_success()),
            ("linked_file", p.is_feature_linked_file()),
            ("recvsend_bundle", p.is_feature_recvsend_bundle()),
            ("min_timeout", p.is_feature_min_timeout()),
            ("no_iowait", p.is_feature_no_iowait()),
        ];
        all.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }

    fn alloc(&mut self, slot: Slot<K>) -> u32 {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(slot);
            i
        } else {
            self.slots.push(Some(slot));
            (self.slots.len() - 1) as u32
        }
    }

    fn release(&mut self, idx: u32) -> Option<Slot<K>> {
        let s = self.slots.get_mut(idx as usize)?.take()?;
        self.free.push(idx);
        Some(s)
    }

    /// Queue one SQE whose memory is owned by `slot`. When the SQ is full, what is queued is
    /// submitted first (and, with SQPOLL, we wait for the kernel thread to make room):
    /// nothing is ever dropped.
    ///
    /// # Safety
    /// Every pointer in `entry` must point into memory owned by `slot` (its `keep` or its
    /// `owned`), or into memory that outlives the ring (registered buffers kept by `keep`).
    pub unsafe fn push(
        &mut self,
        entry: squeue::Entry,
        mut slot: Slot<K>,
        opts: SqeOpts,
    ) -> io::Result<()> {
        slot.skip_success = opts.skip_success;
        if self.chain_open {
            slot.releases = std::mem::take(&mut self.open_chain);
        }
        let links = opts.link || opts.hardlink;
        let skip = opts.skip_success;
        let idx = self.alloc(slot);
        let mut entry = entry.user_data(idx as u64).flags(opts.flags());
        if self.personality != 0 {
            entry = entry.personality(self.personality);
        }
        if let Err(e) = self.push_raw(&entry) {
            if let Some(s) = self.release(idx) {
                self.open_chain = s.releases;
            }
            return Err(e);
        }
        if skip {
            self.skipped += 1;
        } else {
            self.in_flight += 1;
        }
        self.chain_open = links;
        if links {
            if skip {
                self.open_chain.push(idx);
            }
        } else if !self.open_chain.is_empty() {
            // A chain ended with a skip_success op: its slots wait for close() or a drain.
            self.open_chain.clear();
        }
        Ok(())
    }

    fn push_raw(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        let mut tries = 0u32;
        loop {
            // SAFETY: the caller of `push` guarantees the entry's memory outlives the op.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            tries += 1;
            self.submit()?;
            if self.ring.submission().is_full() {
                if self.cfg.sqpoll {
                    self.ring.submitter().squeue_wait()?;
                } else if tries > 1000 {
                    return Err(io::Error::other(
                        "submission queue stays full: the kernel is not consuming SQEs",
                    ));
                }
            }
        }
    }

    /// Hand queued SQEs to the kernel. Handles SQPOLL wake-up, CQ overflow (EBUSY) and EINTR.
    pub fn submit(&mut self) -> io::Result<usize> {
        loop {
            self.submits += 1;
            match self.ring.submit() {
                Ok(n) => return Ok(n),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY)
                        || e.raw_os_error() == Some(libc::EAGAIN) =>
                {
                    // The CQ is full (and overflowing): move CQEs aside and try again.
                    if self.stash_cqes() == 0 {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn stash_cqes(&mut self) -> usize {
        let mut n = 0;
        for cqe in self.ring.completion() {
            self.backlog
                .push_back((cqe.user_data(), cqe.result(), cqe.flags()));
            n += 1;
        }
        n
    }

    /// Submit pending SQEs and block until at least `want` CQEs are ready or `timeout`
    /// passes. Takes `&self` so the caller can run it without holding any lock of its own
    /// (the Python bindings release the GIL here). Never processes slots.
    pub fn wait_cqes(&self, want: usize, timeout: Option<Duration>) -> io::Result<WaitOutcome> {
        let sub = self.ring.submitter();
        let res = match timeout {
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                sub.submit_with_args(want, &args)
            }
            None => sub.submit_and_wait(want),
        };
        match res {
            Ok(_) => Ok(WaitOutcome::Ready),
            Err(e) => match e.raw_os_error() {
                Some(libc::ETIME) => Ok(WaitOutcome::TimedOut),
                Some(libc::EINTR) => Ok(WaitOutcome::Interrupted),
                // CQ full: the caller reaps, then waits again.
                Some(libc::EBUSY) => Ok(WaitOutcome::Ready),
                _ => Err(e),
            },
        }
    }

    /// Whether reaping without blocking still needs an `io_uring_enter(GETEVENTS)`:
    /// deferred task work (DEFER_TASKRUN), pending task work flagged by COOP_TASKRUN's
    /// TASKRUN flag, an overflowed CQ, or an IOPOLL ring that must poll.
    fn needs_getevents(&mut self) -> bool {
        if self.in_flight + self.skipped + self.internal == 0 {
            return false;
        }
        let sq = self.ring.submission();
        // (DEFER_TASKRUN rings always set up TASKRUN_FLAG: `taskrun()` covers them)
        self.cfg.iopoll || sq.taskrun() || sq.cq_overflow()
    }

    /// DEFER_TASKRUN: completions are waiting as task work for an enter to post them.
    /// Checked even when CQEs are ready: the kernel signals a registered eventfd only when
    /// that work list goes from empty to non-empty, so a reaper that took the ready CQEs
    /// and left the list would never hear of later completions.
    fn deferred_work(&mut self) -> bool {
        self.cfg.defer_taskrun && self.ring.submission().taskrun()
    }

    fn getevents(&mut self) -> io::Result<()> {
        // An enter that does not wait returns EINTR only with a signal pending, which is
        // delivered on the way out: retrying does not block, and must happen, since
        // deferred work left unrun would keep a DEFER_TASKRUN ring's eventfd quiet.
        for _ in 0..64 {
            // SAFETY: enter with to_submit=0 and min_complete=0 only runs task work / polls.
            let r = unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
            };
            match r {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
                other => return other.map(drop),
            }
        }
        Ok(())
    }

    /// Move every available completion into `out` without blocking (at most `max`).
    /// Runs deferred task work and flushes an overflowed CQ when needed.
    pub fn reap(&mut self, out: &mut Vec<Done<K>>, max: usize) -> io::Result<usize> {
        let start = out.len();
        // (room for what is ready now: a Done is ~200 bytes, regrowing the Vec copies them)
        out.reserve(max.min(self.ring.completion().len() + self.backlog.len()));
        if self.deferred_work()
            || (self.ring.completion().is_empty()
                && self.backlog.is_empty()
                && self.needs_getevents())
        {
            self.getevents()?;
        }
        loop {
            while out.len() - start < max {
                let Some((ud, res, flags)) = self.backlog.pop_front() else {
                    break;
                };
                self.finish(ud, res, flags, out);
            }
            let mut got = 0;
            while out.len() - start < max {
                let next = self.ring.completion().next();
                let Some(cqe) = next else { break };
                got += 1;
                self.finish(cqe.user_data(), cqe.result(), cqe.flags(), out);
            }
            // Completions parked in the kernel's overflow list come back on the next enter.
            if got > 0 && out.len() - start < max && self.ring.submission().cq_overflow() {
                self.getevents()?;
                continue;
            }
            break;
        }
        Ok(out.len() - start)
    }

    fn finish(&mut self, ud: u64, res: i32, flags: u32, out: &mut Vec<Done<K>>) {
        if ud == INTERNAL {
            if !cqueue::more(flags) {
                self.internal = self.internal.saturating_sub(1);
            }
            return;
        }
        if ud >> 62 == crate::op::msg::MSG_TAG >> 62 {
            // posted by another ring (msg_ring): no op of ours, nothing to release
            out.push(Done {
                user_data: ud & crate::op::msg::MSG_MASK,
                res,
                flags,
                opcode: io_uring::opcode::MsgRingData::CODE,
                io: IoInfo::default(),
                slot: None,
            });
            return;
        }
        let idx = ud as u32;
        let more = cqueue::more(flags);
        let (user_data, opcode, io) = match self.slots.get(idx as usize).and_then(|s| s.as_ref()) {
            Some(s) => (s.user_data, s.opcode, s.io),
            None => return,
        };
        let slot = if more {
            None
        } else {
            let s = self.release(idx);
            if let Some(s) = &s {
                if s.skip_success {
                    self.skipped = self.skipped.saturating_sub(1);
                } else {
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
                let mut stack = s.releases.clone();
                while let Some(r) = stack.pop() {
                    if let Some(done) = self.release(r) {
                        self.skipped = self.skipped.saturating_sub(1);
                        stack.extend(done.releases);
                    }
                }
            }
            s
        };
        out.push(Done {
            user_data,
            res,
            flags,
            opcode,
            io,
            slot,
        });
    }

    /// SQE user_data (slot ids) of in-flight ops queued with the caller's `user_data`.
    pub fn slots_with_user_data(&self, user_data: u64) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Some(s) if s.user_data == user_data => Some(i as u64),
                _ => None,
            })
            .collect()
    }

    /// Like [`Self::slots_with_user_data`], only ops with `opcode` (a poll for
    /// poll_remove, a timeout for timeout_remove/update: another op that happens to share
    /// the user_data is not the target).
    pub fn slots_with_user_data_op(&self, user_data: u64, opcode: u8) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Some(s) if s.user_data == user_data && s.opcode == opcode => Some(i as u64),
                _ => None,
            })
            .collect()
    }

    /// Queue an op the ring owns itself (no memory, completion swallowed).
    pub fn push_internal(&mut self, entry: squeue::Entry) -> io::Result<()> {
        self.push_raw(&entry.user_data(INTERNAL))?;
        self.internal += 1;
        Ok(())
    }

    /// Start shutting down: cancel every in-flight op and queue a drain NOP whose completion
    /// proves that everything submitted before it is done (including skip_success ops).
    pub fn begin_close(&mut self) -> io::Result<()> {
        if self.holding() == 0 {
            return Ok(());
        }
        let cancel = crate::op::cancel::cancel_any().user_data(INTERNAL);
        let drain = crate::op::nop::nop()
            .user_data(INTERNAL)
            .flags(squeue::Flags::IO_DRAIN);
        self.push_raw(&cancel)?;
        self.internal += 1;
        self.push_raw(&drain)?;
        self.internal += 1;
        self.submit()?;
        Ok(())
    }

    /// Give up on what is in flight without waiting for it, for a ring this thread may
    /// not drive (a SINGLE_ISSUER ring closed from another thread: every enter fails with
    /// EEXIST). The ring's fd is closed, so the kernel cancels and finishes the ops on its
    /// own. A slot that holds memory the kernel may still read or write (its `owned`, or
    /// its `keep` when `holds(keep)`) is leaked on purpose; the others (a poll, a nop: no
    /// memory) are freed. Returns (ops abandoned, ops whose memory was leaked).
    pub fn abandon(mut self, holds: impl Fn(&K) -> bool) -> (usize, usize) {
        let n = self.in_flight + self.skipped;
        let mut leaked = 0;
        for s in std::mem::take(&mut self.slots).into_iter().flatten() {
            if matches!(s.owned, Owned::None) && !holds(&s.keep) {
                drop(s);
            } else {
                leaked += 1;
                std::mem::forget(s);
            }
        }
        (n, leaked)
    }

    /// True once nothing the kernel could still touch is in flight.
    pub fn quiescent(&self) -> bool {
        self.in_flight == 0 && self.internal == 0
    }

    /// After the drain NOP completed, skip_success slots are known done: drop them.
    pub fn release_all_skipped(&mut self) -> Vec<Slot<K>> {
        let mut v = Vec::new();
        if self.in_flight == 0 && self.internal == 0 {
            for i in 0..self.slots.len() {
                if let Some(s) = self.release(i as u32) {
                    v.push(s);
                }
            }
            self.skipped = 0;
        }
        v
    }

    /// Close everything from pure Rust (the bindings do this in steps with the GIL
    /// released). Returns false if ops were still in flight after `limit`: their memory is
    /// then leaked on purpose rather than freed while the kernel may write into it.
    pub fn close(mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        let mut ok = self.begin_close().is_ok();
        while ok && !self.quiescent() {
            if Instant::now() > deadline {
                ok = false;
                break;
            }
            let _ = self.wait_cqes(1, Some(Duration::from_millis(50)));
            out.clear();
            ok = self.reap(&mut out, usize::MAX).is_ok();
        }
        if ok && self.quiescent() {
            self.release_all_skipped();
            true
        } else {
            std::mem::forget(self);
            false
        }
    }
}

/// The kernel's result as an `io::Error` when negative.
pub fn res_error(res: i32) -> Option<io::Error> {
    if res < 0 {
        Some(io::Error::from_raw_os_error(-res))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op;

    fn ring(entries: u32) -> Option<Ring<()>> {
        Ring::new(RingConfig {
            entries,
            ..Default::default()
        })
        .ok()
    }

    #[test]
    fn nop_round_trip() {
        let Some(mut r) = ring(8) else { return };
        // SAFETY: nop has no memory.
        unsafe {
            r.push(op::nop::nop(), Slot::new(42, 0, ()), SqeOpts::default())
                .unwrap()
        };
        assert_eq!(r.in_flight(), 1);
        r.wait_cqes(1, None).unwrap();
        let mut out = Vec::new();
        r.reap(&mut out, usize::MAX).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].user_data, 42);
        assert_eq!(out[0].res, 0);
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn sq_full_is_backpressure_not_loss() {
        let Some(mut r) = ring(4) else { return };
        for i in 0..100u64 {
            // SAFETY: nop has no memory.
            unsafe {
                r.push(op::nop::nop(), Slot::new(i, 0, ()), SqeOpts::default())
                    .unwrap()
            };
        }
        let mut out = Vec::new();
        while out.len() < 100 {
            r.wait_cqes(1, Some(Duration::from_secs(1))).unwrap();
            r.reap(&mut out, usize::MAX).unwrap();
        }
        let mut ids: Vec<_> = out.iter().map(|d| d.user_data).collect();
        ids.sort();
        assert_eq!(ids, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn close_with_timeout_in_flight() {
        let Some(mut r) = ring(8) else { return };
        let ts = Box::new(op::timeout::timespec(30.0));
        let e = op::timeout::timeout(&*ts, 0, false);
        let mut slot = Slot::new(1, 0, ());
        slot.owned = Owned::Timespec(ts);
        // SAFETY: the timespec lives in the slot.
        unsafe { r.push(e, slot, SqeOpts::default()).unwrap() };
        r.submit().unwrap();
        let t = Instant::now();
        assert!(r.close(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
