"""Run jobs on the native loop and shape the results like fio's JSON."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import __version__
from .._native import run_job as _run_native
from .options import Job

ProgressFn = Callable[[int, int, float, bool], bool | None]


def _human_rate(n: float) -> str:
    for unit in ("", "K", "M", "G"):
        if abs(n) < 1000:
            return f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}T"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


class ProgressLine:
    """A live one-line status on stderr: current IOPS and bandwidth."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.last_ios = 0
        self.last_bytes = 0
        self.last_t = 0.0
        self.last_print = 0.0
        self.width = 0

    def __call__(self, ios: int, nbytes: int, elapsed: float, ramping: bool) -> bool:
        if not self.enabled:
            return True
        dt = elapsed - self.last_t
        if ramping or dt <= 0:
            iops = bw = 0.0
        else:
            iops = (ios - self.last_ios) / dt
            bw = (nbytes - self.last_bytes) / dt
        self.last_ios, self.last_bytes, self.last_t = ios, nbytes, elapsed
        state = "ramp" if ramping else f"{elapsed:5.1f}s"
        text = f"[{self.label}] {state}  {_human_rate(iops)} IOPS  {_human_bytes(bw)}/s"
        now = time.monotonic()
        if self.tty:
            pad = max(0, self.width - len(text))
            sys.stderr.write("\r" + text + " " * pad)
            sys.stderr.flush()
            self.width = len(text)
        elif now - self.last_print >= 2.0:
            sys.stderr.write(text + "\n")
            self.last_print = now
        return True

    def done(self) -> None:
        if self.enabled and self.tty and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()


def _block_dev(path: str) -> str | None:
    """The sysfs directory of the block device holding `path` (None on tmpfs, overlay…)."""
    try:
        st = os.stat(os.path.dirname(os.path.abspath(path)) or ".")
    except OSError:
        return None
    d = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    return d if os.path.exists(os.path.join(d, "stat")) else None


def disk_snapshot(paths: list[str]) -> dict[str, tuple[list[int], float]]:
    """/sys/block/*/stat of the devices under `paths`, with the time it was read."""
    out: dict[str, tuple[list[int], float]] = {}
    for p in paths:
        d = _block_dev(p)
        if d and d not in out:
            with open(os.path.join(d, "stat")) as f:
                out[d] = ([int(x) for x in f.read().split()], time.monotonic())
    return out


def disk_util(
    before: dict[str, tuple[list[int], float]], after: dict[str, tuple[list[int], float]]
) -> list[dict[str, Any]]:
    """fio's `disk_util`: what each device did between the two snapshots (the whole
    system's I/O to it, as fio reports it). util = time the device was busy, percent."""
    res = []
    for d, (a, t0) in before.items():
        if d not in after:
            continue
        b, t1 = after[d]
        x = [v1 - v0 for v0, v1 in zip(a, b, strict=False)]
        if len(x) < 11:
            continue
        ms = (t1 - t0) * 1000
        res.append(
            {
                "name": os.path.basename(d),
                "read_ios": x[0],
                "write_ios": x[4],
                "read_merges": x[1],
                "write_merges": x[5],
                "read_ticks": x[3],
                "write_ticks": x[7],
                "in_queue": x[10],
                "util": min(100.0, 100.0 * x[9] / ms) if ms > 0 else 0.0,
            }
        )
    return res


_EMPTY_HIST = {"N": 0, "min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "percentile": {}}


def _stats(xs: list[float]) -> tuple[float, float, float, float]:
    """min, max, mean, sample stddev (fio's n-1) of `xs`; zeros when empty."""
    if not xs:
        return 0.0, 0.0, 0.0, 0.0
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
    return min(xs), max(xs), mean, var**0.5


def _sampled(samples: list[list[int]], at: int) -> dict[str, Any]:
    """fio's per-direction bw_*/iops_* from the 500 ms windows (bw in KiB/s)."""
    wins = [w for w in samples if w[4] > 0]
    if not any(w[at] for w in wins):
        wins = []
    iops = [w[at] / (w[4] / 1e9) for w in wins]
    bw = [w[at + 1] / 1024 / (w[4] / 1e9) for w in wins]
    bmin, bmax, bmean, bdev = _stats(bw)
    imin, imax, imean, idev = _stats(iops)
    return {
        "bw_min": int(bmin),
        "bw_max": int(bmax),
        "bw_agg": 100.0 if wins else 0.0,  # one group: this job is all of it
        "bw_mean": bmean,
        "bw_dev": bdev,
        "bw_samples": len(wins),
        "iops_min": int(imin),
        "iops_max": int(imax),
        "iops_mean": imean,
        "iops_stddev": idev,
        "iops_samples": len(wins),
    }


def _shares(counts: list[int], keys: tuple[str, ...]) -> dict[str, float]:
    total = sum(counts)
    return {k: (100.0 * c / total if total else 0.0) for k, c in zip(keys, counts, strict=True)}


DEPTH_KEYS = ("1", "2", "4", "8", "16", "32", ">=64")
BATCH_KEYS = ("0", "4", "8", "16", "32", "64", ">=64")


def _dir(d: dict[str, Any], seconds: float) -> dict[str, Any]:
    ios = d["ios"]
    nbytes = d["bytes"]
    runtime_ms = int(seconds * 1000) if ios else 0
    bw_bytes = int(nbytes / seconds) if seconds > 0 and ios else 0
    return {
        "io_bytes": nbytes,
        "io_kbytes": nbytes // 1024,
        "bw_bytes": bw_bytes,
        "bw": bw_bytes // 1024,
        "iops": ios / seconds if seconds > 0 else 0.0,
        "runtime": runtime_ms,
        "total_ios": ios,
        "short_ios": 0,
        "drop_ios": 0,
        "slat_ns": d["slat_ns"],
        "clat_ns": d["clat_ns"],
        "lat_ns": d["lat_ns"],
    }


def fio_shape(job: Job, native: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """One entry of fio's `jobs[]`, plus a `uringkit` section with what fio lacks."""
    secs = r["elapsed_ns"] / 1e9
    ios = r["read"]["ios"] + r["write"]["ios"]
    cpu_ns = r["usr_ns"] + r["sys_ns"]
    samples = r.get("samples", [])
    none = {"ios": 0, "bytes": 0, "slat_ns": _EMPTY_HIST, "clat_ns": _EMPTY_HIST}
    return {
        "jobname": job.name,
        "groupid": 0,
        "error": 0,
        "eta": 0,
        "elapsed": round(secs),
        "job options": {"name": job.name, **{k: str(v) for k, v in job.options.items()}},
        "read": {**_dir(r["read"], secs), **_sampled(samples, 0)},
        "write": {**_dir(r["write"], secs), **_sampled(samples, 2)},
        "trim": {**_dir({**none, "lat_ns": _EMPTY_HIST}, secs), **_sampled([], 0)},
        "sync": {"total_ios": r["sync"]["N"], "lat_ns": r["sync"]},
        "job_runtime": int(secs * 1000),
        "usr_cpu": 100.0 * r["usr_ns"] / r["elapsed_ns"] if r["elapsed_ns"] else 0.0,
        "sys_cpu": 100.0 * r["sys_ns"] / r["elapsed_ns"] if r["elapsed_ns"] else 0.0,
        "ctx": r["ctx_vol"] + r["ctx_invol"],
        "majf": r["majflt"],
        "minf": r["minflt"],
        # fio's distributions: depth at submission, I/Os per submit and per reap call,
        # and completion latency in fio's buckets (percent of all I/Os)
        "iodepth_level": _shares(r.get("depth_map", [0] * 7), DEPTH_KEYS),
        "iodepth_submit": _shares(r.get("submit_map", [0] * 7), BATCH_KEYS),
        "iodepth_complete": _shares(r.get("complete_map", [0] * 7), BATCH_KEYS),
        **r.get("lat_buckets", {}),
        "latency_depth": native["iodepth"],
        "latency_target": 0,
        "latency_percentile": 100.0,
        "latency_window": 0,
        "uringkit": {
            "engine": native["ioengine"],
            "engine_reason": job.get("engine_reason"),
            "setup": r.get("setup"),
            "iodepth": r["depth"],
            "syscalls": r["syscalls"],
            "syscalls_per_sec": r["syscalls"] / secs if secs else 0.0,
            "syscalls_per_io": r["syscalls"] / ios if ios else 0.0,
            "cpu_us_per_io": cpu_ns / 1000 / ios if ios else 0.0,
            "ctx_per_sec": (r["ctx_vol"] + r["ctx_invol"]) / secs if secs else 0.0,
            "cpu_scope": "whole process (all threads, incl. iou-sqp/iou-wrk and AIO helpers)",
            "verify": {
                "blocks": r["verified_blocks"],
                "errors": r["verify_errors"],
                "first_error": r["first_verify_error"],
            },
            "warning": r["warning"],
        },
    }


def run(
    job: Job, progress: bool = True, label: str | None = None, bins: bool = False
) -> dict[str, Any]:
    """Run one job (numjobs threads, group-reported) and return its fio-shaped result
    (`bins`: with the latency histograms' buckets, as fio's json+)."""
    native = {**job.to_native(), "bins": bins}
    # (invalidate=1: the native job drops the file's pages once it is laid out)
    eta = job.get("eta")
    if eta is not None:  # fio's eta=never|always|auto for the progress line
        progress = eta == "always" or (eta == "auto" and progress)
    if job.get("startdelay"):
        time.sleep(job.get("startdelay"))
    line = ProgressLine(label or job.name, progress)
    try:
        r = _run_native(native, line, 0.5)
    finally:
        line.done()
    if r["verify_errors"]:
        raise VerifyError(
            f"job {job.name}: {r['verify_errors']} of {r['verified_blocks']} blocks failed "
            f"crc32c verification; first: {r['first_verify_error']}"
        )
    end_fsync_ns = None
    if (job.get("end_fsync") or job.get("fsync_on_close")) and r["write"]["ios"]:
        # fio's end_fsync=1 / fsync_on_close=1: the written file is fsynced when the
        # job's writes end (one file per job: the same moment); the time it takes is
        # reported on its own (uringkit.end_fsync_ns)
        fd = os.open(native["filename"], os.O_RDONLY)
        try:
            t = time.perf_counter_ns()
            os.fsync(fd)
            end_fsync_ns = time.perf_counter_ns() - t
        finally:
            os.close(fd)
    if job.get("unlink"):
        # fio's unlink=1: the job's file is removed when it is done
        with contextlib.suppress(FileNotFoundError):
            os.unlink(native["filename"])
    reduced = [
        k for k in ("gtod_reduce", "disable_lat", "disable_clat", "disable_slat") if job.get(k)
    ]
    notes = []
    if reduced:
        notes.append(
            f"{', '.join(reduced)}=1: uringkit measures latency anyway (one clock read per "
            "I/O, ~20 ns here)"
        )
    kept = [
        k
        for k in ("lat_percentiles", "clat_percentiles", "slat_percentiles")
        if job.get(k) is False
    ]
    if kept:
        notes.append(f"{', '.join(kept)}=0: uringkit reports those percentiles anyway")
    for note in notes:
        r["warning"] = f"{r['warning']}; {note}" if r["warning"] else note
    out = fio_shape(job, native, r)
    if end_fsync_ns is not None:
        out["uringkit"]["end_fsync_ns"] = end_fsync_ns
    return out


class VerifyError(RuntimeError):
    pass


def envelope(jobs: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """fio's top-level JSON object."""
    now = time.time()
    out: dict[str, Any] = {
        "fio version": f"uringkit-{__version__}",
        "timestamp": int(now),
        "timestamp_ms": int(now * 1000),
        "time": time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)),
        "jobs": jobs,
    }
    if extra:
        out.update(extra)
    return out
