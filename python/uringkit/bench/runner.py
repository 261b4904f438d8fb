"""Run jobs on the native loop and shape the results like fio's JSON."""

from __future__ import annotations

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


def drop_cache(path: str) -> None:
    """fio's invalidate=1: drop the file's pages from the page cache before the job."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


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
    return {
        "jobname": job.name,
        "groupid": 0,
        "error": 0,
        "elapsed": round(secs),
        "job options": {k: str(v) for k, v in job.options.items()},
        "read": _dir(r["read"], secs),
        "write": _dir(r["write"], secs),
        "trim": _dir({"ios": 0, "bytes": 0, "slat_ns": {}, "clat_ns": {}, "lat_ns": {}}, secs),
        "sync": {"total_ios": r["sync"]["N"], "lat_ns": r["sync"]},
        "job_runtime": int(secs * 1000),
        "usr_cpu": 100.0 * r["usr_ns"] / r["elapsed_ns"] if r["elapsed_ns"] else 0.0,
        "sys_cpu": 100.0 * r["sys_ns"] / r["elapsed_ns"] if r["elapsed_ns"] else 0.0,
        "ctx": r["ctx_vol"] + r["ctx_invol"],
        "majf": r["majflt"],
        "minf": r["minflt"],
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


def run(job: Job, progress: bool = True, label: str | None = None) -> dict[str, Any]:
    """Run one job (numjobs threads, group-reported) and return its fio-shaped result."""
    native = job.to_native()
    if job.get("invalidate", True) and os.path.exists(native["filename"]):
        drop_cache(native["filename"])
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
    if job.get("end_fsync") and r["write"]["ios"]:
        # fio's end_fsync=1: the written file is fsynced when the job's writes end; the
        # time it takes is reported on its own (uringkit.end_fsync_ns)
        fd = os.open(native["filename"], os.O_RDONLY)
        try:
            t = time.perf_counter_ns()
            os.fsync(fd)
            end_fsync_ns = time.perf_counter_ns() - t
        finally:
            os.close(fd)
    reduced = [
        k for k in ("gtod_reduce", "disable_lat", "disable_clat", "disable_slat") if job.get(k)
    ]
    if reduced:
        note = (
            f"{', '.join(reduced)}=1: uringkit measures latency anyway (one clock read per "
            "I/O, ~20 ns here)"
        )
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
