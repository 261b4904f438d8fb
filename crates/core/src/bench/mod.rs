//! The native benchmark: a fio-style job loop over any [`Engine`](crate::engine::Engine),
//! latency histograms, whole-process CPU accounting, and crc32c verification.

pub mod cpu;
pub mod dist;
pub mod hist;
pub mod job;
pub mod verify;

pub use hist::Hist;
pub use job::{run_jobs, JobResult, JobSpec, Progress, Rw};
