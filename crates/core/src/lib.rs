//! uringkit-core: Linux asynchronous I/O without Python.
//!
//! - [`ring`]: io_uring setup, submission with back-pressure, completion reaping that keeps
//!   every in-flight op's memory alive until its final CQE, probing.
//! - [`op`]: SQE builders, one module per kernel concept.
//! - [`buf`]: page-aligned, registered and provided buffers.
//! - [`sys`]: kernel version, seccomp.

pub mod buf;
pub mod op;
pub mod ring;
pub mod sys;
pub mod text;

pub use op::FdArg;
pub use ring::{Done, Ring, RingConfig, SetupError, Slot, SqeOpts, WaitOutcome};
pub mod bench;
pub mod engine;
pub mod kv;
pub mod net;
