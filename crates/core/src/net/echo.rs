//! An echo server on one io_uring (seed 001 §6's server pattern): a multishot ACCEPT that
//! installs each connection as a fixed (direct) file, one multishot RECV per connection
//! into a provided-buffer ring, SEND (or SEND_ZC) straight from the buffer the kernel
//! filled, the buffer handed back to the ring once the send is done, and every
//! completion of one wait handled as a batch before the next `io_uring_enter`.
//!
//! The ring is set up with `SINGLE_ISSUER | DEFER_TASKRUN` where the kernel has them
//! (6.1): completions are produced only when this thread asks (in its one
//! `io_uring_enter` per loop), not by interrupting it. Where fixed files cannot be
//! registered, accepted sockets are plain descriptors.
//!
//! Per connection at most one send is in flight (two sends on one TCP socket may
//! complete out of order when one has to wait for buffer space, which would reorder the
//! echo); further received buffers queue behind it. A connection whose multishot RECV
//! ran out of buffers (`ENOBUFS`) is re-armed when a buffer comes back.

use crate::buf::ring::BufRing;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// How the server runs (see `EchoServer` in the Python API for the meaning).
#[derive(Clone, Debug)]
pub struct EchoConfig {
    /// SEND_ZC instead of SEND (the buffer returns to the ring on the notification).
    pub zero_copy: bool,
    /// Buffers in the provided-buffer ring.
    pub buffers: u16,
    /// Bytes per buffer (one RECV completion carries at most this much).
    pub buffer_size: usize,
    /// Fixed-file slots (at most this many connections at once with fixed files).
    pub max_connections: u32,
    /// Install accepted sockets as fixed files (falls back to plain fds if refused).
    pub fixed_files: bool,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            zero_copy: false,
            buffers: 2048,
            buffer_size: 4096,
            max_connections: 4096,
            fixed_files: true,
        }
    }
}

/// Counters the server thread updates and anyone may read.
#[derive(Default, Debug)]
pub struct EchoStats {
    pub accepted: AtomicU64,
    pub closed: AtomicU64,
    pub bytes: AtomicU64,
    pub recvs: AtomicU64,
    pub sends: AtomicU64,
    pub cqes: AtomicU64,
    pub enters: AtomicU64,
    pub enobufs: AtomicU64,
    /// 1 when accepted sockets are fixed files, 0 when plain descriptors.
    pub fixed_files: AtomicU64,
    /// 1 when the ring runs with DEFER_TASKRUN.
    pub defer_taskrun: AtomicU64,
}

const GROUP: u16 = 0x7E;
const K_ACCEPT: u64 = 1;
const K_RECV: u64 = 2;
const K_SEND: u64 = 3;
const K_CLOSE: u64 = 4;
const K_STOP: u64 = 5;

fn ud(kind: u64, bid: u16, conn: u32) -> u64 {
    (kind << 60) | ((bid as u64) << 32) | conn as u64
}

fn split_ud(u: u64) -> (u64, u16, u32) {
    (u >> 60, (u >> 32) as u16, u as u32)
}

#[derive(Default)]
struct Conn {
    /// received buffers waiting to be echoed: (bid, sent so far, length)
    queue: VecDeque<(u16, usize, usize)>,
    sending: bool,
    /// the peer closed (or an error): close once the queue is empty
    closing: bool,
    /// close submitted: ignore anything else for this connection
    closed: bool,
}

/// The server's state inside its thread.
struct Server<'a> {
    cfg: &'a EchoConfig,
    stats: &'a EchoStats,
    bufs: &'a mut BufRing,
    fixed: bool,
    listen_fd: i32,
    conns: HashMap<u32, Conn>,
    /// connections whose multishot RECV stopped for lack of buffers
    starved: Vec<u32>,
    /// zero copy: notifications still to come per buffer, and whether its data is sent
    zc_notifs: Vec<u16>,
    zc_sent: Vec<bool>,
    sqes: Vec<squeue::Entry>,
    stop: bool,
    /// the accept ran out of descriptors or fixed slots: re-armed at the next close
    accept_paused: bool,
}

impl Server<'_> {
    fn target(&self, conn: u32) -> Target {
        if self.fixed {
            Target::Fixed(types::Fixed(conn))
        } else {
            Target::Fd(types::Fd(conn as i32))
        }
    }

    fn arm_accept(&mut self) {
        // (a direct descriptor has no close-on-exec flag: the kernel refuses SOCK_CLOEXEC
        // for one with EINVAL)
        let flags = if self.fixed { 0 } else { libc::SOCK_CLOEXEC };
        let e = opcode::AcceptMulti::new(types::Fd(self.listen_fd))
            .allocate_file_index(self.fixed)
            .flags(flags)
            .build();
        self.sqes.push(e.user_data(ud(K_ACCEPT, 0, 0)));
    }

    fn arm_recv(&mut self, conn: u32) {
        let e = match self.target(conn) {
            Target::Fixed(f) => opcode::RecvMulti::new(f, GROUP).build(),
            Target::Fd(f) => opcode::RecvMulti::new(f, GROUP).build(),
        };
        self.sqes.push(e.user_data(ud(K_RECV, 0, conn)));
    }

    /// Send the rest of the connection's first queued buffer.
    fn send_front(&mut self, conn: u32) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(&(bid, done, len)) = c.queue.front() else {
            c.sending = false;
            return;
        };
        c.sending = true;
        // SAFETY: bid was handed to us by a RECV completion and is not recycled until
        // its send (and, with zero copy, the kernel's notification) completes.
        let p = unsafe { self.bufs.buf_ptr(bid).add(done) };
        let n = (len - done) as u32;
        let t = self.target(conn);
        // (MSG_NOSIGNAL: a peer that is gone is an EPIPE for this connection, not a
        // SIGPIPE for the process)
        let fl = libc::MSG_NOSIGNAL;
        let e = match (self.cfg.zero_copy, t) {
            (true, Target::Fixed(f)) => opcode::SendZc::new(f, p, n).flags(fl).build(),
            (true, Target::Fd(f)) => opcode::SendZc::new(f, p, n).flags(fl).build(),
            (false, Target::Fixed(f)) => opcode::Send::new(f, p, n).flags(fl).build(),
            (false, Target::Fd(f)) => opcode::Send::new(f, p, n).flags(fl).build(),
        };
        if self.cfg.zero_copy {
            self.zc_notifs[bid as usize] += 1;
        }
        self.sqes.push(e.user_data(ud(K_SEND, bid, conn)));
    }

    /// Give a buffer back to the ring, and re-arm the receives it may unblock.
    fn recycle(&mut self, bid: u16) {
        let _ = self.bufs.recycle(bid);
        for conn in std::mem::take(&mut self.starved) {
            if self
                .conns
                .get(&conn)
                .is_some_and(|c| !c.closing && !c.closed)
            {
                self.arm_recv(conn);
            }
        }
    }

    /// Whether a zero-copy buffer can go back: all of it sent, every notification in.
    fn zc_release(&mut self, bid: u16) {
        let i = bid as usize;
        if self.zc_sent[i] && self.zc_notifs[i] == 0 {
            self.zc_sent[i] = false;
            self.recycle(bid);
        }
    }

    fn close(&mut self, conn: u32) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.closed {
            return;
        }
        c.closed = true;
        // buffers still queued go back (the peer is gone)
        let queued: Vec<u16> = c.queue.drain(..).map(|q| q.0).collect();
        for bid in queued {
            if self.cfg.zero_copy {
                self.zc_sent[bid as usize] = true;
                self.zc_release(bid);
            } else {
                self.recycle(bid);
            }
        }
        let e = if self.fixed {
            opcode::Close::new(types::Fixed(conn)).build()
        } else {
            opcode::Close::new(types::Fd(conn as i32)).build()
        };
        self.sqes.push(e.user_data(ud(K_CLOSE, 0, conn)));
    }

    /// Close once nothing is left to send.
    fn maybe_close(&mut self, conn: u32) {
        if self
            .conns
            .get(&conn)
            .is_some_and(|c| c.closing && !c.sending && c.queue.is_empty())
        {
            self.close(conn);
        }
    }

    fn handle(&mut self, user_data: u64, res: i32, flags: u32) -> io::Result<()> {
        let (kind, bid, conn) = split_ud(user_data);
        match kind {
            K_ACCEPT => {
                let out_of_fds = res == -libc::ENFILE || res == -libc::EMFILE;
                if res >= 0 {
                    self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let c = res as u32;
                    self.conns.insert(c, Conn::default());
                    self.arm_recv(c);
                } else if !out_of_fds
                    && res != -libc::ECANCELED
                    && res != -libc::ECONNABORTED
                    && res != -libc::EINTR
                {
                    return Err(io::Error::from_raw_os_error(-res));
                }
                if !cqueue::more(flags) && !self.stop {
                    if out_of_fds {
                        // (re-arming now would fail at once, in a loop: wait for a close)
                        self.accept_paused = true;
                    } else {
                        self.arm_accept();
                    }
                }
            }
            K_RECV => {
                let live = self.conns.get(&conn).is_some_and(|c| !c.closed);
                if res > 0 {
                    let bid = cqueue::buffer_select(flags).expect("RECV with a buffer");
                    self.bufs.taken(bid);
                    if !live {
                        self.recycle(bid);
                        return Ok(());
                    }
                    self.stats.recvs.fetch_add(1, Ordering::Relaxed);
                    self.stats.bytes.fetch_add(res as u64, Ordering::Relaxed);
                    let c = self.conns.get_mut(&conn).expect("live");
                    c.queue.push_back((bid, 0, res as usize));
                    if !c.sending {
                        self.send_front(conn);
                    }
                    if !cqueue::more(flags) {
                        self.arm_recv(conn);
                    }
                } else if res == -libc::ENOBUFS {
                    self.stats.enobufs.fetch_add(1, Ordering::Relaxed);
                    if live {
                        self.starved.push(conn);
                    }
                } else if live {
                    // 0: the peer closed; an error: drop the connection
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.closing = true;
                    }
                    self.maybe_close(conn);
                }
            }
            K_SEND => {
                if self.cfg.zero_copy && cqueue::notif(flags) {
                    self.zc_notifs[bid as usize] -= 1;
                    self.zc_release(bid);
                    return Ok(());
                }
                if self.cfg.zero_copy && !cqueue::more(flags) {
                    // no notification will follow this one
                    self.zc_notifs[bid as usize] -= 1;
                }
                self.stats.sends.fetch_add(1, Ordering::Relaxed);
                let Some(c) = self.conns.get_mut(&conn) else {
                    return Ok(());
                };
                if c.closed {
                    // the buffer already went back at close (zero copy: on its notif)
                    return Ok(());
                }
                if res < 0 {
                    c.closing = true;
                    c.sending = false;
                    self.close(conn);
                    return Ok(());
                }
                let front = c.queue.front_mut().expect("a send in flight");
                front.1 += res as usize;
                if front.1 < front.2 {
                    self.send_front(conn); // short send: the rest
                    return Ok(());
                }
                let (bid, _, _) = c.queue.pop_front().expect("front");
                if self.cfg.zero_copy {
                    self.zc_sent[bid as usize] = true;
                    self.zc_release(bid);
                } else {
                    self.recycle(bid);
                }
                self.send_front(conn);
                self.maybe_close(conn);
            }
            K_CLOSE => {
                self.conns.remove(&conn);
                self.stats.closed.fetch_add(1, Ordering::Relaxed);
                if self.accept_paused && !self.stop {
                    self.accept_paused = false;
                    self.arm_accept();
                }
            }
            K_STOP => self.stop = true,
            _ => {}
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Target {
    Fixed(types::Fixed),
    Fd(types::Fd),
}

/// A ring for the server: DEFER_TASKRUN + SINGLE_ISSUER where the kernel has them
/// (6.1), else COOP_TASKRUN (5.19), else plain. Returns the ring and whether
/// DEFER_TASKRUN is on.
fn setup(entries: u32) -> io::Result<(IoUring, bool)> {
    let cq = entries * 8;
    if let Ok(r) = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(cq)
        .build(entries)
    {
        return Ok((r, true));
    }
    if let Ok(r) = IoUring::builder()
        .setup_coop_taskrun()
        .setup_cqsize(cq)
        .build(entries)
    {
        return Ok((r, false));
    }
    Ok((IoUring::builder().setup_cqsize(cq).build(entries)?, false))
}

/// Serve echo on the listening socket `listen_fd` until `stop_fd` (an eventfd) becomes
/// readable; `ready` is called once the ring is set up and the accept is armed. Returns
/// when stopped; errors that stop the server are returned (a ring that cannot be set up
/// — io_uring blocked —, a failed registration of the buffer ring, an accept error other
/// than running out of descriptors).
pub fn serve(
    listen_fd: i32,
    stop_fd: i32,
    cfg: &EchoConfig,
    stats: &EchoStats,
    ready: impl FnOnce(),
) -> io::Result<()> {
    // Declared before the ring, so dropped after it on every return: the kernel may
    // write into them until the ring is gone (dropping it cancels what is in flight).
    let mut stop_buf = [0u8; 8];
    let mut bufs = BufRing::new(GROUP, cfg.buffers, cfg.buffer_size)?;
    let (mut ring, defer) = setup(1024)?;
    stats.defer_taskrun.store(defer as u64, Ordering::Relaxed);
    let fixed = cfg.fixed_files
        && ring
            .submitter()
            .register_files_sparse(cfg.max_connections)
            .is_ok();
    stats.fixed_files.store(fixed as u64, Ordering::Relaxed);
    bufs.register(&ring)?;
    let n = cfg.buffers as usize;
    let mut s = Server {
        cfg,
        stats,
        bufs: &mut bufs,
        fixed,
        listen_fd,
        conns: HashMap::new(),
        starved: Vec::new(),
        zc_notifs: vec![0; n],
        zc_sent: vec![false; n],
        sqes: Vec::with_capacity(256),
        stop: false,
        accept_paused: false,
    };
    let stop_sqe = opcode::Read::new(types::Fd(stop_fd), stop_buf.as_mut_ptr(), 8)
        .build()
        .user_data(ud(K_STOP, 0, 0));
    s.sqes.push(stop_sqe);
    s.arm_accept();
    let mut ready = Some(ready);
    let mut done: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
    while !s.stop {
        {
            let (submitter, mut sq, _) = ring.split();
            for e in s.sqes.drain(..) {
                // SAFETY: every buffer an entry points to lives in `bufs` or
                // `stop_buf`, both declared before the ring and so dropped after it
                // (dropping the ring cancels whatever is still in flight).
                while unsafe { sq.push(&e) }.is_err() {
                    sq.sync();
                    submitter.submit()?;
                    stats.enters.fetch_add(1, Ordering::Relaxed);
                    sq.sync();
                }
            }
            sq.sync();
        }
        if let Some(r) = ready.take() {
            // the accept and the stop read go in with the first submission: from here
            // on connections are taken
            ring.submit()?;
            r();
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => return Err(e),
        }
        stats.enters.fetch_add(1, Ordering::Relaxed);
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        stats.cqes.fetch_add(done.len() as u64, Ordering::Relaxed);
        for &(u, r, f) in &done {
            s.handle(u, r, f)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    struct Running {
        addr: std::net::SocketAddr,
        stop_fd: i32,
        thread: Option<std::thread::JoinHandle<io::Result<()>>>,
        stats: Arc<EchoStats>,
        _listener: TcpListener,
    }

    impl Running {
        fn stop(mut self) -> Arc<EchoStats> {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writing 8 bytes to our eventfd.
            unsafe { libc::write(self.stop_fd, one.as_ptr().cast(), 8) };
            self.thread.take().unwrap().join().unwrap().unwrap();
            // SAFETY: our eventfd, no longer used by the server.
            unsafe { libc::close(self.stop_fd) };
            self.stats.clone()
        }
    }

    /// None where io_uring (or what the server needs of it) is not available.
    fn start(cfg: EchoConfig) -> Option<Running> {
        if IoUring::new(2).is_err() || crate::sys::kernel_version() < (6, 0) {
            eprintln!("skipped: io_uring with multishot recv (6.0) is not available");
            return None;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // SAFETY: a fresh eventfd, ours.
        let stop_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(stop_fd >= 0);
        let stats = Arc::new(EchoStats::default());
        let (fd, st) = (listener.as_raw_fd(), stats.clone());
        let thread = std::thread::spawn(move || serve(fd, stop_fd, &cfg, &st, || {}));
        Some(Running {
            addr,
            stop_fd,
            thread: Some(thread),
            stats,
            _listener: listener,
        })
    }

    fn echo_once(addr: std::net::SocketAddr, msg: &[u8]) {
        let mut s = TcpStream::connect(addr).unwrap();
        // (a server that died must fail the test, not hang it)
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut w = s.try_clone().unwrap();
        let m = msg.to_vec();
        let writer = std::thread::spawn(move || w.write_all(&m).unwrap());
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).unwrap();
        writer.join().unwrap();
        assert_eq!(back, msg);
    }

    fn echo_many(cfg: EchoConfig) -> Arc<EchoStats> {
        let Some(r) = start(cfg) else {
            return Arc::new(EchoStats::default());
        };
        let addr = r.addr;
        let clients: Vec<_> = (0..16)
            .map(|t| {
                std::thread::spawn(move || {
                    for size in [1usize, 100, 4096, 4097, 70_000, 300_000] {
                        let msg: Vec<u8> = (0..size).map(|i| (i * 7 + t) as u8).collect();
                        echo_once(addr, &msg);
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        let stats = r.stop();
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 16 * 6);
        stats
    }

    #[test]
    fn echoes_every_byte_in_order() {
        let s = echo_many(EchoConfig::default());
        let b = s.bytes.load(Ordering::Relaxed);
        assert!(b == 0 || b == 16 * (1 + 100 + 4096 + 4097 + 70_000 + 300_000));
    }

    #[test]
    fn echoes_with_zero_copy_sends() {
        echo_many(EchoConfig {
            zero_copy: true,
            ..Default::default()
        });
    }

    #[test]
    fn few_buffers_starve_and_recover() {
        // 4 buffers of 512 bytes for 16 connections pushing 300 KB: receives run out
        // of buffers (ENOBUFS ends their multishot) and are re-armed as buffers return
        let s = echo_many(EchoConfig {
            buffers: 4,
            buffer_size: 512,
            ..Default::default()
        });
        if s.accepted.load(Ordering::Relaxed) > 0 {
            assert!(s.enobufs.load(Ordering::Relaxed) > 0);
        }
    }

    #[test]
    fn plain_descriptors_without_fixed_files() {
        let s = echo_many(EchoConfig {
            fixed_files: false,
            ..Default::default()
        });
        assert_eq!(s.fixed_files.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_load_generator_checks_echoes() {
        let Some(r) = start(EchoConfig::default()) else {
            return;
        };
        let cfg = crate::net::load::LoadConfig {
            connections: 8,
            size: 4096,
            seconds: 0.2,
            warmup: 0.05,
        };
        let out = crate::net::load::run(r.addr, &cfg).unwrap();
        assert!(out.requests > 0 && out.latency.n == out.requests);
        let stats = r.stop();
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 8);
    }
}
