//! `uringkit._native`: PyO3 glue over `uringkit-core`. Conversions, errors and the buffer
//! protocol live here; everything that talks to the kernel lives in the core crate.

mod bench;
mod buffers;
mod completion;
mod convert;
mod int;
mod kv;
mod libaio;
mod net;
mod ring;
mod sys;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ring::Ring>()?;
    m.add_class::<completion::Completion>()?;
    m.add_class::<buffers::Fixed>()?;
    m.add_class::<buffers::Buffer>()?;
    m.add_class::<buffers::AlignedBuffer>()?;
    m.add_class::<buffers::BufferRing>()?;
    m.add_class::<buffers::BufferView>()?;
    m.add_class::<kv::KvStore>()?;
    m.add_class::<kv::KvScan>()?;
    m.add_class::<kv::KvView>()?;
    m.add_class::<libaio::LibaioContext>()?;
    m.add_class::<net::EchoServer>()?;
    m.add_function(wrap_pyfunction!(net::echo_load, m)?)?;
    m.add_function(wrap_pyfunction!(ring::op_table, m)?)?;
    m.add_function(wrap_pyfunction!(bench::run_job, m)?)?;
    sys::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
