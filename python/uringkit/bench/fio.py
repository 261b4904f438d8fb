"""Run the reference, fio, on the same job, and read its JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from .options import IO_URING_OPTS, Job

FIO_ENGINES = {"psync": "psync", "posixaio": "posixaio", "libaio": "libaio", "io_uring": "io_uring"}


def available() -> str | None:
    return shutil.which("fio")


def version() -> str:
    exe = available()
    if not exe:
        return ""
    return subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()


def supports(job: Job) -> bool:
    return job.get("ioengine", "psync") in FIO_ENGINES


def command(job: Job) -> list[str]:
    n = job.to_native()
    args = [
        available() or "fio",
        f"--name={job.name}",
        f"--filename={n['filename']}",
        f"--size={n['size']}",
        f"--rw={n['rw']}",
        f"--bs={n['bs']}",
        f"--ioengine={FIO_ENGINES[n['ioengine']]}",
        f"--iodepth={n['iodepth']}",
        f"--iodepth_batch_submit={n['iodepth_batch_submit']}",
        f"--iodepth_batch_complete_min={n['iodepth_batch_complete_min']}",
        f"--iodepth_batch_complete_max={n['iodepth_batch_complete_max']}",
        f"--direct={int(n['direct'])}",
        f"--numjobs={n['numjobs']}",
        "--group_reporting=1",
        "--thread=1",
        f"--invalidate={int(job.get('invalidate', True))}",
        "--output-format=json",
    ]
    if n["rw"] in ("rw", "randrw"):
        args.append(f"--rwmixread={n['rwmixread']}")
    if n["runtime"]:
        args.append(f"--runtime={int(n['runtime'] * 1000)}ms")  # fio drops fractions of s
    if n["time_based"]:
        args.append("--time_based=1")
    if n["ramp_time"]:
        args.append(f"--ramp_time={int(n['ramp_time'] * 1000)}ms")
    if n["offset"]:
        args.append(f"--offset={n['offset']}")
    if n["io_size"]:
        args.append(f"--io_size={n['io_size']}")  # (loops= included)
    if n["number_ios"]:
        args.append(f"--number_ios={n['number_ios']}")
    if n["rate_iops"]:
        args.append(f"--rate_iops={n['rate_iops']}")
    if n["bssplit"]:
        total = sum(w for _, w in n["bssplit"])
        args.append("--bssplit=" + ":".join(f"{b}/{w * 100 / total:g}" for b, w in n["bssplit"]))
    dist = n["random_distribution"]
    if dist and dist[0] != "random":
        args.append(f"--random_distribution={dist[0]}:{dist[1]:g}")
    if n["fsync"]:
        args.append(f"--fsync={n['fsync']}")
    if n["fdatasync"]:
        args.append(f"--fdatasync={n['fdatasync']}")
    if n["verify"]:
        args.append("--verify=crc32c")
    if n["rw"].startswith("rand"):
        # uringkit's random offsets are drawn with replacement: fio's norandommap=1
        args.append("--norandommap=1")
    if "randseed" in job.options:
        args.append(f"--randseed={job.options['randseed']}")
    elif job.get("randrepeat") is False:
        args.append("--randrepeat=0")
    if n["percentiles"]:
        args.append("--percentile_list=" + ":".join(f"{p:g}" for p in n["percentiles"]))
    for k in (
        "end_fsync",
        "fsync_on_close",
        "gtod_reduce",
        "disable_lat",
        "disable_clat",
        "disable_slat",
    ):
        if job.get(k):
            args.append(f"--{k}=1")
    if job.get("startdelay"):
        args.append(f"--startdelay={int(job.get('startdelay') * 1000)}ms")
    for k in IO_URING_OPTS:
        if k in n and k not in ("single_issuer", "defer_taskrun", "coop_taskrun"):
            v = n[k]
            args.append(f"--{k}={int(v) if isinstance(v, bool) else v}")
    return args


def run(job: Job, timeout: float = 600) -> dict[str, Any]:
    """fio's jobs[0] for this job, with `uringkit.cpu_us_per_io` computed like ours
    (fio's usr_cpu/sys_cpu are its job threads only)."""
    cmd = command(job)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"fio failed ({' '.join(cmd)}): {p.stderr.strip() or p.stdout[-500:]}")
    text = p.stdout
    data = json.loads(text[text.index("{") :])
    j: dict[str, Any] = data["jobs"][0]
    ios = j["read"]["total_ios"] + j["write"]["total_ios"]
    secs = max(j["read"]["runtime"], j["write"]["runtime"]) / 1000 or 1e-9
    cpu_s = (j["usr_cpu"] + j["sys_cpu"]) / 100 * secs
    j["uringkit"] = {"cpu_us_per_io": cpu_s * 1e6 / ios if ios else 0.0, "command": " ".join(cmd)}
    return j
