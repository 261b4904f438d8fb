//! `run_job`: the native job loop, driven from Python with the GIL released.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::time::Duration;
use uringkit_core::bench::dist::Dist;
use uringkit_core::bench::hist::FIO_PERCENTILES;
use uringkit_core::bench::job::DirStats;
use uringkit_core::bench::{run_jobs, Hist, JobSpec, Progress, Rw};
use uringkit_core::engine::{EngineKind, UringOpts};

fn get<'py, T>(d: &Bound<'py, PyDict>, key: &str, default: T) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py>,
{
    match d.get_item(key)? {
        Some(v) if !v.is_none() => v.extract::<T>().map_err(|_| {
            PyValueError::new_err(format!(
                "job option {key}={} has the wrong type",
                v.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        }),
        _ => Ok(default),
    }
}

fn spec_from(d: &Bound<'_, PyDict>) -> PyResult<JobSpec> {
    let rw_s: String = get(d, "rw", "read".to_string())?;
    let rw = Rw::parse(&rw_s).ok_or_else(|| {
        PyValueError::new_err(format!(
            "rw={rw_s} is not supported; use read, write, randread, randwrite, rw or randrw"
        ))
    })?;
    let engine_s: String = get(d, "ioengine", "io_uring".to_string())?;
    let engine = match engine_s.as_str() {
        "psync" | "sync" | "pvsync" => EngineKind::Psync,
        "threads" => EngineKind::Threads,
        "posixaio" => EngineKind::PosixAio,
        "libaio" => EngineKind::Libaio,
        "io_uring" => EngineKind::Uring(UringOpts {
            sqthread_poll: get(d, "sqthread_poll", false)?,
            sqthread_poll_cpu: get(d, "sqthread_poll_cpu", None)?,
            registerfiles: get(d, "registerfiles", false)?,
            fixedbufs: get(d, "fixedbufs", false)?,
            hipri: get(d, "hipri", false)?,
            nonvectored: get(d, "nonvectored", true)?,
            single_issuer: get(d, "single_issuer", false)?,
            defer_taskrun: get(d, "defer_taskrun", false)?,
            coop_taskrun: get(d, "coop_taskrun", false)?,
            // fio's io_uring engine sets COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN by default; do the
            // same unless the job chose task-run flags itself.
            fio_defaults: ["single_issuer", "defer_taskrun", "coop_taskrun"]
                .iter()
                .all(|k| !matches!(d.get_item(*k), Ok(Some(_)))),
        }),
        other => {
            return Err(PyValueError::new_err(format!(
            "ioengine={other} is not supported; use io_uring, libaio, posixaio, threads or psync"
        )))
        }
    };
    let runtime: Option<f64> = get(d, "runtime", None)?;
    let ramp: f64 = get(d, "ramp_time", 0.0)?;
    Ok(JobSpec {
        name: get(d, "name", "job".to_string())?,
        filename: get::<String>(d, "filename", String::new())?.into(),
        size: get(d, "size", 0u64)?,
        rw,
        rwmixread: get(d, "rwmixread", 50u32)?,
        bs: get(d, "bs", 4096u32)?,
        iodepth: get(d, "iodepth", 1u32)?,
        iodepth_batch_submit: get(d, "iodepth_batch_submit", 1u32)?,
        iodepth_batch_complete_min: get(d, "iodepth_batch_complete_min", 1u32)?,
        iodepth_batch_complete_max: get(
            d,
            "iodepth_batch_complete_max",
            get(d, "iodepth_batch_complete_min", 1u32)?,
        )?,
        direct: get(d, "direct", false)?,
        runtime: runtime.filter(|r| *r > 0.0).map(Duration::from_secs_f64),
        time_based: get(d, "time_based", false)?,
        ramp_time: Duration::from_secs_f64(ramp.max(0.0)),
        fsync: get(d, "fsync", 0u32)?,
        fdatasync: get(d, "fdatasync", 0u32)?,
        engine,
        verify: get(d, "verify", false)?,
        numjobs: get(d, "numjobs", 1u32)?,
        seed: get(d, "seed", 0x5eed_u64)?,
        offset: get(d, "offset", 0u64)?,
        io_size: get(d, "io_size", None::<u64>)?,
        number_ios: get(d, "number_ios", None::<u64>)?,
        rate_iops: get(d, "rate_iops", None::<u64>)?,
        invalidate: get(d, "invalidate", false)?,
        bssplit: get(d, "bssplit", Vec::<(u32, u32)>::new())?,
        random_distribution: match get(d, "random_distribution", None::<(String, f64)>)? {
            None => Dist::Uniform,
            Some((k, v)) if k == "zipf" => Dist::Zipf(v),
            Some((k, v)) if k == "pareto" => Dist::Pareto(v),
            Some((k, v)) if k == "normal" => Dist::Normal(v),
            Some((k, _)) if k == "random" => Dist::Uniform,
            Some((k, _)) => {
                return Err(PyValueError::new_err(format!(
                    "random_distribution {k:?}: use random, zipf:THETA, pareto:H or normal:DEV"
                )))
            }
        },
    })
}

/// fio's latency distribution thresholds (the same for ns and µs; ms adds 2000).
const LAT_LIMITS: [u64; 11] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000, 2000];

fn hist_dict<'py>(
    py: Python<'py>,
    h: &Hist,
    pcts: &[f64],
    bins: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("N", h.n)?;
    d.set_item("min", if h.n == 0 { 0 } else { h.min })?;
    d.set_item("max", h.max)?;
    d.set_item("mean", h.mean())?;
    d.set_item("stddev", h.stdev())?;
    let p = PyDict::new(py);
    if h.n > 0 {
        for &q in pcts {
            p.set_item(format!("{q:.6}"), h.percentile(q))?;
        }
    }
    d.set_item("percentile", p)?;
    if bins {
        // fio's json+: every non-empty bucket, value (ns) -> count
        let b = PyDict::new(py);
        for (v, c) in h.bins() {
            b.set_item(v.to_string(), c)?;
        }
        d.set_item("bins", b)?;
    }
    Ok(d)
}

fn dir_dict<'py>(
    py: Python<'py>,
    s: &DirStats,
    pcts: &[f64],
    bins: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ios", s.ios)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("slat_ns", hist_dict(py, &s.slat, pcts, bins)?)?;
    d.set_item("clat_ns", hist_dict(py, &s.clat, pcts, bins)?)?;
    d.set_item("lat_ns", hist_dict(py, &s.lat, pcts, bins)?)?;
    Ok(d)
}

/// Run one fio-style job (a dict of fio option names, already parsed to numbers) in native
/// code with the GIL released. `progress(ios, bytes, elapsed_s, ramping)` is called about
/// every `interval` seconds; returning False (or raising) stops the job early.
#[pyfunction]
#[pyo3(signature = (spec, progress=None, interval=0.5))]
pub fn run_job<'py>(
    py: Python<'py>,
    spec: &Bound<'py, PyDict>,
    progress: Option<Py<PyAny>>,
    interval: f64,
) -> PyResult<Bound<'py, PyDict>> {
    // fio's percentile_list (default: its 17 percentiles)
    let pcts: Vec<f64> = match spec.get_item("percentiles")? {
        Some(v) if !v.is_none() => v.extract()?,
        _ => FIO_PERCENTILES.to_vec(),
    };
    if let Some(bad) = pcts.iter().find(|q| !(**q > 0.0 && **q <= 100.0)) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "percentiles must be in (0, 100] (got {bad})"
        )));
    }
    // fio's --output-format=json+: the latency histograms' buckets too
    let bins: bool = match spec.get_item("bins")? {
        Some(v) => v.is_truthy()?,
        None => false,
    };
    let spec = spec_from(spec)?;
    let interval = Duration::from_secs_f64(interval.clamp(0.01, 10.0));
    let mut raised: Option<PyErr> = None;
    let mut last = std::time::Instant::now();
    let result = py.detach(|| {
        run_jobs(&spec, Duration::from_millis(20), &mut |p: &Progress| {
            if raised.is_some() {
                return false;
            }
            if last.elapsed() < interval {
                return true;
            }
            last = std::time::Instant::now();
            Python::attach(|py| {
                if let Err(e) = py.check_signals() {
                    raised = Some(e);
                    return false;
                }
                let Some(cb) = &progress else { return true };
                match cb.call1(py, (p.ios, p.bytes, p.elapsed.as_secs_f64(), p.ramping)) {
                    Ok(v) => !matches!(v.extract::<bool>(py), Ok(false)),
                    Err(e) => {
                        raised = Some(e);
                        false
                    }
                }
            })
        })
    });
    if let Some(e) = raised {
        return Err(e);
    }
    let r = result.map_err(|e| match uringkit_core::text::errno_of(&e) {
        Some(code) => PyOSError::new_err((code, e.to_string())),
        None => PyOSError::new_err(e.to_string()),
    })?;
    let d = PyDict::new(py);
    d.set_item("read", dir_dict(py, &r.read, &pcts, bins)?)?;
    d.set_item("write", dir_dict(py, &r.write, &pcts, bins)?)?;
    d.set_item("sync", hist_dict(py, &r.sync, &pcts, bins)?)?;
    d.set_item("elapsed_ns", r.elapsed_ns)?;
    d.set_item("usr_ns", r.usage.user_ns)?;
    d.set_item("sys_ns", r.usage.sys_ns)?;
    d.set_item("ctx_vol", r.usage.vol_ctx)?;
    d.set_item("ctx_invol", r.usage.invol_ctx)?;
    d.set_item("minflt", r.usage.minflt)?;
    d.set_item("majflt", r.usage.majflt)?;
    d.set_item("syscalls", r.syscalls)?;
    d.set_item("verified_blocks", r.verified_blocks)?;
    d.set_item("verify_errors", r.verify_errors)?;
    d.set_item("first_verify_error", r.first_verify_error)?;
    d.set_item("warning", r.warning)?;
    d.set_item("setup", r.setup)?;
    d.set_item("depth", r.depth)?;
    d.set_item(
        "samples",
        r.samples.iter().map(|w| w.to_vec()).collect::<Vec<_>>(),
    )?;
    d.set_item("depth_map", r.depth_map.to_vec())?;
    d.set_item("submit_map", r.submit_map.to_vec())?;
    d.set_item("complete_map", r.complete_map.to_vec())?;
    // fio's latency_ns / latency_us / latency_ms: the share of I/Os (reads and writes)
    // whose completion latency falls under each threshold and above the previous one
    let mut clat = r.read.clat.clone();
    clat.merge(&r.write.clat);
    let lat_buckets = PyDict::new(py);
    for (unit, mult, limits) in [
        ("latency_ns", 1u64, &LAT_LIMITS[..10]),
        ("latency_us", 1_000, &LAT_LIMITS[..10]),
        ("latency_ms", 1_000_000, &LAT_LIMITS[..]),
    ] {
        let b = PyDict::new(py);
        let mut below_prev = if mult == 1 { 0 } else { clat.count_below(mult) };
        for &lim in limits {
            let below = clat.count_below(lim * mult);
            let share = if clat.n == 0 {
                0.0
            } else {
                100.0 * (below - below_prev) as f64 / clat.n as f64
            };
            b.set_item(lim.to_string(), share)?;
            below_prev = below;
        }
        if unit == "latency_ms" {
            let rest = clat.n - below_prev;
            let share = if clat.n == 0 {
                0.0
            } else {
                100.0 * rest as f64 / clat.n as f64
            };
            b.set_item(">=2000", share)?;
        }
        lat_buckets.set_item(unit, b)?;
    }
    d.set_item("lat_buckets", lat_buckets)?;
    Ok(d)
}
