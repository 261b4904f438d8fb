//! `EchoServer` and `echo_load`: the Python face of `uringkit_core::net`.

use crate::convert::io_error;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use uringkit_core::net::{echo, load};

/// The native io_uring echo server, serving a listening socket on a thread of its own.
#[pyclass(module = "uringkit._native")]
pub struct EchoServer {
    stop_fd: i32,
    thread: Option<JoinHandle<io::Result<()>>>,
    stats: Arc<echo::EchoStats>,
}

impl EchoServer {
    /// Signal the server thread and wait for it; its error, if it failed.
    fn halt(&mut self) -> io::Result<()> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        let one = 1u64.to_ne_bytes();
        // SAFETY: 8 bytes to our eventfd, open until Drop.
        unsafe { libc::write(self.stop_fd, one.as_ptr().cast(), 8) };
        t.join()
            .unwrap_or_else(|_| Err(io::Error::other("the echo server thread panicked")))
    }
}

#[pymethods]
impl EchoServer {
    #[new]
    #[pyo3(signature = (fd, zero_copy=false, buffers=2048, buffer_size=4096, max_connections=4096, fixed_files=true))]
    fn new(
        py: Python<'_>,
        fd: i32,
        zero_copy: bool,
        buffers: u32,
        buffer_size: usize,
        max_connections: u32,
        fixed_files: bool,
    ) -> PyResult<Self> {
        if !(1..=32768).contains(&buffers) {
            return Err(PyValueError::new_err(format!(
                "buffers must be between 1 and 32768 (got {buffers})"
            )));
        }
        if !(1..=(1 << 30)).contains(&buffer_size) {
            return Err(PyValueError::new_err(format!(
                "buffer_size must be between 1 and 1 GiB (got {buffer_size})"
            )));
        }
        if max_connections == 0 {
            return Err(PyValueError::new_err("max_connections must be at least 1"));
        }
        let cfg = echo::EchoConfig {
            zero_copy,
            buffers: buffers as u16,
            buffer_size,
            max_connections,
            fixed_files,
        };
        // SAFETY: a fresh eventfd, owned by this object.
        let stop_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if stop_fd < 0 {
            return Err(io_error(io::Error::last_os_error(), "eventfd"));
        }
        let stats = Arc::new(echo::EchoStats::default());
        let st = stats.clone();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("uringkit-echo".into())
            .spawn(move || {
                echo::serve(fd, stop_fd, &cfg, &st, move || {
                    let _ = tx.send(());
                })
            });
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                // SAFETY: our eventfd, never shared.
                unsafe { libc::close(stop_fd) };
                return Err(io_error(e, "starting the server thread"));
            }
        };
        let mut server = EchoServer {
            stop_fd,
            thread: Some(thread),
            stats,
        };
        // Ready, or the thread ended first (its sender dropped): raise what stopped it.
        if py.detach(move || rx.recv()).is_err() {
            let e = server
                .halt()
                .err()
                .unwrap_or_else(|| io::Error::other("the server stopped at once"));
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::ENOSYS) => {
                    " (io_uring is blocked here: see `uringkit doctor` and docs/containers.md)"
                }
                _ => "",
            };
            return Err(io_error(e, &format!("echo server{hint}")));
        }
        Ok(server)
    }

    /// Stop serving (every connection is closed) and wait for the thread; raises the
    /// OSError that stopped the server early, if one did.
    fn stop(&mut self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.halt())
            .map_err(|e| io_error(e, "echo server"))
    }

    /// Whether the server thread is still serving (False after stop() or an error).
    #[getter]
    fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Counters: accepted, closed, bytes, recvs, sends, cqes, enters, enobufs,
    /// fixed_files, defer_taskrun.
    fn stats(&self) -> HashMap<&'static str, u64> {
        let s = &self.stats;
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        HashMap::from([
            ("accepted", g(&s.accepted)),
            ("closed", g(&s.closed)),
            ("bytes", g(&s.bytes)),
            ("recvs", g(&s.recvs)),
            ("sends", g(&s.sends)),
            ("cqes", g(&s.cqes)),
            ("enters", g(&s.enters)),
            ("enobufs", g(&s.enobufs)),
            ("fixed_files", g(&s.fixed_files)),
            ("defer_taskrun", g(&s.defer_taskrun)),
        ])
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.halt();
        // SAFETY: our eventfd; the thread that read it has ended.
        unsafe { libc::close(self.stop_fd) };
    }
}

/// Closed-loop echo load against host:port: results as a dict (see uringkit.net.load).
#[pyfunction]
#[pyo3(signature = (host, port, connections=64, size=4096, seconds=2.0, warmup=0.5))]
pub fn echo_load(
    py: Python<'_>,
    host: &str,
    port: u16,
    connections: u32,
    size: usize,
    seconds: f64,
    warmup: f64,
) -> PyResult<HashMap<&'static str, f64>> {
    if !(seconds > 0.0 && seconds.is_finite() && warmup >= 0.0 && warmup.is_finite()) {
        return Err(PyValueError::new_err(
            "seconds must be > 0 and warmup >= 0 (finite numbers)",
        ));
    }
    if connections == 0 || size == 0 || size > (1 << 30) {
        return Err(PyValueError::new_err(
            "connections must be >= 1 and size between 1 and 1 GiB",
        ));
    }
    let addr: std::net::SocketAddr = format!("{host}:{port}")
        .parse()
        .or_else(|_| {
            use std::net::ToSocketAddrs;
            (host, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|_| PyValueError::new_err(format!("cannot resolve {host}:{port}")))?;
    let cfg = load::LoadConfig {
        connections,
        size,
        seconds,
        warmup,
    };
    let r = py
        .detach(|| load::run(addr, &cfg))
        .map_err(|e| io_error(e, "echo load"))?;
    let us = |p: f64| r.latency.percentile(p) as f64 / 1000.0;
    Ok(HashMap::from([
        ("requests", r.requests as f64),
        ("seconds", r.seconds),
        ("requests_per_s", r.requests as f64 / r.seconds.max(1e-9)),
        ("mean_us", r.latency.mean() / 1000.0),
        ("p50_us", us(50.0)),
        ("p99_us", us(99.0)),
        ("p999_us", us(99.9)),
        ("max_us", r.latency.max as f64 / 1000.0),
        ("enters", r.enters as f64),
    ]))
}
