"""`uringkit bench`: fio-compatible jobs on native engines, and the default comparison suite.

    uringkit bench                              # the default suite (tables, JSON, PNG)
    uringkit bench --quick --vs-fio             # the short suite, side by side with fio
    uringkit bench jobs.fio                     # an fio job file
    uringkit bench --name=j --filename=F --size=1g --rw=randread --bs=4k --direct=1 \\
        --ioengine=io_uring --iodepth=32 --runtime=10 --time_based=1 --output-format=json
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from . import fio as fio_mod
from . import report, runner
from .options import Job, JobError, parse_cmdline, parse_jobfile

HELP = """usage: uringkit bench [JOBFILE ...] [--fio-option=VALUE ...] [options]

Measure Linux async I/O engines the way fio does: IOPS, bandwidth, submission/
completion/total latency percentiles, CPU per I/O for the whole process (every
thread, including io_uring's SQPOLL and glibc's AIO helpers), context switches
and system calls.

With no job: the default suite on a temporary 1 GiB file in --dir (removed
afterwards): 4 KiB O_DIRECT random reads for every engine at depths 1-128,
latency and CPU at qd32, cached random reads, and 4 KiB sequential writes with
fdatasync (linked on io_uring), verified. Prints tables, writes
uringkit-bench.json and uringkit-bench.png. About 3 minutes (--quick: ~30 s).

Jobs: fio job files, or fio's command-line form (replace `fio` by `uringkit
bench`). Engines: io_uring, libaio, posixaio, threads, psync. io_uring options:
sqthread_poll, sqthread_poll_cpu, registerfiles, fixedbufs, hipri, nonvectored,
single_issuer, defer_taskrun, coop_taskrun. Booleans may be given bare
(--time_based, --norandommap) as with fio; percentile_list, randrepeat/randseed,
eta, startdelay, end_fsync, fsync_on_close, filesize, offset, io_size, number_ios,
rate_iops, bssplit, random_distribution (zipf, pareto, normal), loops and unlink work as in fio
(docs/bench.md lists them all). An unsupported option is an error.

options:
  --dir DIR               where the default suite puts its file (default: .)
  --quick                 the short suite
  --vs-fio                also run each job under fio (same file and options,
                          interleaved ours/fio/fio/ours) and print the ratios;
                          the suite runs the 9 target cells (io_uring, fixed,
                          libaio at qd 1/32/128) twice and ends with a table of
                          them against >= 0.95x fio IOPS, <= 1.1x its CPU/IO.
                          About 9 minutes with fio (--quick: ~1.5).
  --plot FILE.png         write the plot here (default suite: uringkit-bench.png)
  --json-out FILE         where the default suite writes JSON (uringkit-bench.json)
  --output-format=FMT     normal (tables), json (fio's layout on stdout only;
                          progress goes to stderr) or json+ (also the latency
                          histograms' buckets, clat_ns.bins, as fio's json+)
  --output FILE           write the result (in --output-format) to FILE instead
                          of stdout, as fio does
  --no-progress           no live progress line
  --version               print the version (uringkit-X.Y.Z, as fio --version)
  -h, --help              this help

examples:
  uringkit bench --quick
  uringkit bench --vs-fio --dir /mnt/nvme
  uringkit bench --name=r --filename=/tmp/f --size=1g --rw=randread --bs=4k \\
      --direct=1 --ioengine=io_uring --iodepth=32 --runtime=10 --time_based=1
  uringkit bench job.fio --output-format=json > result.json
"""

OURS_FLAGS = {"--quick", "--vs-fio", "--no-progress"}
OURS_VALUED = {"--dir", "--plot", "--json-out", "--output-format", "--output"}


def _split(argv: list[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    ours: dict[str, Any] = {}
    fio_args: list[str] = []
    files: list[str] = []
    it = iter(argv)
    for a in it:
        key, eq, val = a.partition("=")
        if a in ("-h", "--help"):
            ours["help"] = True
        elif a == "--version":  # as `fio --version`
            ours["version"] = True
        elif a in OURS_FLAGS:
            ours[a[2:].replace("-", "_")] = True
        elif key in OURS_VALUED:
            if not eq:
                try:
                    val = next(it)
                except StopIteration:
                    raise JobError(f"{key} needs a value") from None
            ours[key[2:].replace("-", "_")] = val
        elif a.startswith("--"):
            fio_args.append(a)
        else:
            files.append(a)
    return ours, fio_args, files


def main(argv: list[str]) -> int:
    try:
        ours, fio_args, files = _split(argv)
    except JobError as e:
        print(f"uringkit bench: {e}", file=sys.stderr)
        return 2
    if ours.get("help"):
        print(HELP)
        return 0
    if ours.get("version"):
        from .. import __version__

        print(f"uringkit-{__version__}")
        return 0
    fmt = ours.get("output_format", "normal")
    if fmt not in ("normal", "json", "json+"):
        print(f"uringkit bench: --output-format={fmt}: use normal, json or json+", file=sys.stderr)
        return 2
    as_json = fmt in ("json", "json+")
    ours["bins"] = fmt == "json+"
    con = Console(stderr=as_json, width=None if sys.stdout.isatty() else 160)
    progress = not ours.get("no_progress", False)
    try:
        jobs: list[Job] = []
        for f in files:
            with open(f) as fh:
                jobs += parse_jobfile(fh.read(), f)
        if fio_args:
            jobs += parse_cmdline(fio_args)
    except (JobError, OSError) as e:
        print(f"uringkit bench: {e}", file=sys.stderr)
        return 2
    try:
        if not jobs:
            return _suite(ours, con, as_json, progress)
        return _jobs(jobs, ours, con, as_json, progress)
    except KeyboardInterrupt:
        print("\nuringkit bench: interrupted; no results written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # (the reader stopped early: `uringkit` ends quietly, cli.main)
    except (OSError, RuntimeError, JobError) as e:
        print(f"uringkit bench: {e}", file=sys.stderr)
        return 1


def _jobs(
    jobs: list[Job], ours: dict[str, Any], con: Console, as_json: bool, progress: bool
) -> int:
    vs = bool(ours.get("vs_fio"))
    if vs and not fio_mod.available():
        con.print("[yellow]--vs-fio: fio is not installed; running uringkit only[/]")
        vs = False
    if any(not j.get("stonewall") for j in jobs[1:]):
        con.print(
            "[yellow]note:[/] uringkit runs jobs one after another (fio runs the jobs of a "
            "file at the same time unless they have stonewall)"
        )
    results: list[dict[str, Any]] = []
    files = [str(j.get("filename", "")) for j in jobs if j.get("filename")]
    disks = runner.disk_snapshot(files)
    for job in jobs:
        bins = bool(ours.get("bins"))
        item: dict[str, Any] = {"ours": [runner.run(job, progress, bins=bins)], "fio": []}
        if vs and fio_mod.supports(job):
            # ABBA (ours, fio, fio, ours): drift and warm-up favour each side once
            item["fio"].append(fio_mod.run(job))
            item["fio"].append(fio_mod.run(job))
            item["ours"].append(runner.run(job, progress, bins=bins))
        results.append(item)
        w = item["ours"][0]["uringkit"].get("warning")
        if w:
            con.print(f"[yellow]note:[/] {w}")
    out_jobs = [r["ours"][-1] for r in results]
    extra: dict[str, Any] = {"disk_util": runner.disk_util(disks, runner.disk_snapshot(files))}
    if vs:
        extra |= {
            "fio_jobs": [f for r in results for f in r["fio"]],
            "uringkit_vs_fio": [
                {
                    "job": r["ours"][0]["jobname"],
                    "iops_ratios": [
                        report.iops(a) / report.iops(b)
                        for a, b in zip(r["ours"], r["fio"], strict=False)
                        if report.iops(b)
                    ],
                    "cpu_ratios": [
                        report.cpu_per_io(a) / report.cpu_per_io(b)
                        for a, b in zip(r["ours"], r["fio"], strict=False)
                        if report.cpu_per_io(b)
                    ],
                }
                for r in results
                if r["fio"]
            ],
        }
    doc = runner.envelope(out_jobs, extra)
    _write_result(ours, as_json, doc, lambda c: report.job_table(c or con, results))
    if ours.get("plot"):
        _plot_jobs(ours["plot"], [r["ours"][-1] for r in results], con)
    return 0


def _write_result(
    ours: dict[str, Any],
    as_json: bool,
    doc: dict[str, Any],
    tables: Callable[[Console | None], None],
) -> None:
    """The result in the chosen format — JSON, or `tables(console)` — on stdout, or in
    --output's file instead (fio's --output=FILE); tables(None): the usual console."""
    out_path = ours.get("output")
    with open(out_path, "w") if out_path else contextlib.nullcontext(sys.stdout) as fh:
        if as_json:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        else:
            tables(Console(file=fh, width=160) if out_path else None)


def _plot_jobs(path: str, jobs: list[dict[str, Any]], con: Console) -> None:
    """IOPS by queue depth, one line per engine (+ its options), and the completion
    latency percentiles of each job at the deepest depth measured."""
    curves: dict[str, dict[int, float]] = {}
    lat: dict[str, dict[str, float]] = {}
    for j in jobs:
        u = j["uringkit"]
        opts = j["job options"]
        extra = [
            k
            for k in ("sqthread_poll", "registerfiles", "fixedbufs", "hipri")
            if opts.get(k) in ("True", "1")
        ]
        name = u["engine"] + ("+" + "+".join(extra) if extra else "")
        curves.setdefault(name, {})[int(u["iodepth"])] = report.iops(j)
    for name, pts in curves.items():
        deepest = max(pts)
        for j in jobs:
            if j["uringkit"]["iodepth"] == deepest and name.startswith(j["uringkit"]["engine"]):
                d = "read" if j["read"]["total_ios"] else "write"
                lat[f"{name} qd{deepest}"] = {
                    k: float(v) for k, v in j[d]["clat_ns"]["percentile"].items()
                }
    if report.plot(path, curves, lat, "uringkit bench"):
        con.print(f"wrote {path}")
    else:
        con.print("no plot: install the plot extra (pip install 'uringkit\\[plot]')")


def _suite(ours: dict[str, Any], con: Console, as_json: bool, progress: bool) -> int:
    from .suite import Suite

    directory = ours.get("dir", ".")
    s = Suite(directory, bool(ours.get("quick")), bool(ours.get("vs_fio")), con, progress)
    doc = s.run()
    json_path = ours.get("json_out", "uringkit-bench.json")
    tmp = json_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=2)
    os.replace(tmp, json_path)  # never a partial JSON that looks like a result
    _write_result(ours, as_json, doc, s.print_tables)
    png = ours.get("plot", "uringkit-bench.png")
    if s.plot(png):
        con.print(f"wrote {json_path} and {png}")
    else:
        con.print(
            f"wrote {json_path} (no plot: install the plot extra, pip install 'uringkit\\[plot]')"
        )
    return 0
