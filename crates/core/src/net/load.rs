//! A closed-loop echo load generator on one io_uring: `connections` TCP connections, each
//! sending a `size`-byte message and waiting for all of it to come back before sending
//! the next (seed 001 §6's echo benchmark: 64 connections, 4 KiB). Every echo is checked
//! byte for byte against what was sent; latency is measured per request, from the SEND's
//! submission to the last byte received, into an HDR-style histogram.

use crate::bench::hist::Hist;
use io_uring::{opcode, types, IoUring};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub connections: u32,
    pub size: usize,
    /// Measured time.
    pub seconds: f64,
    /// Time run before measuring (connections warm, server caches hot).
    pub warmup: f64,
}

pub struct LoadResult {
    /// Requests (whole echoes) completed in the measured time.
    pub requests: u64,
    pub seconds: f64,
    /// Latency per request in nanoseconds.
    pub latency: Hist,
    /// `io_uring_enter` calls of the generator (its own cost, for context).
    pub enters: u64,
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    sent: usize,
    got: usize,
    start: Instant,
    /// the echo came back whole (and was checked) before the SEND's completion was seen
    echoed: bool,
}

const K_SEND: u64 = 1;
const K_RECV: u64 = 2;

/// Run the load against `addr`; an error if a connection fails, the server closes one,
/// or an echo differs from what was sent (naming the connection and offset).
pub fn run(addr: SocketAddr, cfg: &LoadConfig) -> io::Result<LoadResult> {
    if cfg.connections == 0 || cfg.size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "connections and size must be at least 1",
        ));
    }
    let payload: Vec<u8> = (0..cfg.size).map(|i| (i * 31 + 7) as u8).collect();
    // Declared before the ring: dropped after it (the kernel may write into the
    // connections' buffers until the ring is gone).
    let mut conns: Vec<Conn> = Vec::with_capacity(cfg.connections as usize);
    for _ in 0..cfg.connections {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        conns.push(Conn {
            stream,
            buf: vec![0u8; cfg.size],
            sent: 0,
            got: 0,
            start: Instant::now(),
            echoed: false,
        });
    }
    let mut ring = IoUring::builder()
        .setup_cqsize(cfg.connections.max(64) * 8)
        .build(cfg.connections.max(64).next_power_of_two() * 2)?;
    let mut hist = Hist::new();
    let mut requests = 0u64;
    let mut enters = 0u64;
    let t0 = Instant::now();
    let warm_end = t0 + Duration::from_secs_f64(cfg.warmup);
    let end = warm_end + Duration::from_secs_f64(cfg.seconds);
    let mut measuring = false;
    let mut pending: Vec<io_uring::squeue::Entry> = Vec::new();
    let send = |c: &Conn, i: usize| {
        let fd = types::Fd(c.stream.as_raw_fd());
        let rest = &payload[c.sent..];
        opcode::Send::new(fd, rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data((K_SEND << 32) | i as u64)
    };
    let recv = |c: &mut Conn, i: usize| {
        let fd = types::Fd(c.stream.as_raw_fd());
        let rest = &mut c.buf[c.got..];
        opcode::Recv::new(fd, rest.as_mut_ptr(), rest.len() as u32)
            .build()
            .user_data((K_RECV << 32) | i as u64)
    };
    for (i, c) in conns.iter_mut().enumerate() {
        c.start = Instant::now();
        pending.push(send(c, i));
        pending.push(recv(c, i));
    }
    let mut in_flight = 0usize;
    let mut done: Vec<(u64, i32)> = Vec::new();
    loop {
        {
            let (submitter, mut sq, _) = ring.split();
            for e in pending.drain(..) {
                // SAFETY: the entries point into `payload` and the connections' buffers,
                // declared before the ring and so alive until after it is dropped.
                while unsafe { sq.push(&e) }.is_err() {
                    sq.sync();
                    submitter.submit()?;
                    enters += 1;
                    sq.sync();
                }
                in_flight += 1;
            }
            sq.sync();
        }
        if in_flight == 0 {
            break;
        }
        ring.submit_and_wait(1)?;
        enters += 1;
        done.clear();
        done.extend(
            ring.completion()
                .map(|c: io_uring::cqueue::Entry| (c.user_data(), c.result())),
        );
        let now = Instant::now();
        if !measuring && now >= warm_end {
            measuring = true;
            hist = Hist::new();
            requests = 0;
        }
        let stopping = now >= end;
        for &(u, res) in &done {
            in_flight -= 1;
            let (kind, i) = (u >> 32, (u & 0xffff_ffff) as usize);
            let c = &mut conns[i];
            if res < 0 {
                let e = io::Error::from_raw_os_error(-res);
                let why = crate::text::io_error(&e);
                return Err(crate::text::reword(&e, format!("connection {i}: {why}")));
            }
            if kind == K_SEND {
                c.sent += res as usize;
                if c.sent < cfg.size {
                    pending.push(send(c, i));
                    continue;
                }
                if !c.echoed {
                    continue; // the echo's completion will start the next request
                }
            } else {
                if res == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("connection {i}: the server closed it mid-echo"),
                    ));
                }
                c.got += res as usize;
                if c.got < cfg.size {
                    pending.push(recv(c, i));
                    continue;
                }
                if let Some(off) = c.buf.iter().zip(&payload).position(|(a, b)| a != b) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("connection {i}: the echo differs at byte {off}"),
                    ));
                }
                if measuring && !stopping {
                    hist.record(now.duration_since(c.start).as_nanos() as u64);
                    requests += 1;
                }
                c.echoed = true;
                if c.sent < cfg.size {
                    continue; // (the SEND's completion is still to come: it starts the next)
                }
            }
            // the request is complete both ways: the next one
            if !stopping {
                c.sent = 0;
                c.got = 0;
                c.echoed = false;
                c.start = Instant::now();
                pending.push(send(c, i));
                pending.push(recv(c, i));
            }
        }
    }
    let measured = end.min(Instant::now()).saturating_duration_since(warm_end);
    drop(ring);
    Ok(LoadResult {
        requests,
        seconds: measured.as_secs_f64(),
        latency: hist,
        enters,
    })
}
