"""The default suite: the tables of MISSION.md §3 on this machine's disk, optionally side by
side with fio (interleaved ABBA: ours, fio, fio, ours) with per-pair ratios."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from . import fio as fio_mod
from . import report, runner
from .options import Job

ENGINES: dict[str, dict[str, Any]] = {
    "psync": {"ioengine": "psync"},
    "threads": {"ioengine": "threads"},
    "posixaio": {"ioengine": "posixaio"},
    "libaio": {"ioengine": "libaio"},
    "io_uring": {"ioengine": "io_uring"},
    "io_uring+sqpoll": {"ioengine": "io_uring", "sqthread_poll": True},
    "io_uring+fixed": {"ioengine": "io_uring", "registerfiles": True, "fixedbufs": True},
}


@dataclass
class Plan:
    size: int
    depths: list[int]
    engines: list[str]
    runtime: float
    ramp: float
    cached_runtime: float
    seqwrite_depths: list[int]
    seqwrite_engines: list[str]
    seqwrite_runtime: float


FULL = Plan(
    size=1 << 30,
    depths=[1, 4, 16, 32, 64, 128],
    engines=list(ENGINES),
    runtime=2.0,
    ramp=0.5,
    cached_runtime=1.5,
    seqwrite_depths=[1, 8, 32],
    seqwrite_engines=["psync", "libaio", "io_uring"],
    seqwrite_runtime=2.0,
)

QUICK = Plan(
    size=256 << 20,
    depths=[1, 32, 128],
    engines=["psync", "posixaio", "libaio", "io_uring", "io_uring+fixed"],
    runtime=0.8,
    ramp=0.2,
    cached_runtime=0.6,
    seqwrite_depths=[1, 32],
    seqwrite_engines=["libaio", "io_uring"],
    seqwrite_runtime=0.8,
)


@dataclass
class Entry:
    table: str
    engine: str
    depth: int
    ours: list[dict[str, Any]] = field(default_factory=list)
    fio: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def best(self, who: str) -> dict[str, Any] | None:
        runs = self.ours if who == "ours" else self.fio
        return max(runs, key=report.iops) if runs else None

    def median_iops(self, who: str) -> float:
        runs = self.ours if who == "ours" else self.fio
        return statistics.median(report.iops(j) for j in runs) if runs else 0.0

    def ratios(self) -> list[float]:
        """Per-pair IOPS ratios, the noise-robust comparison. Runs go ours, fio, fio, ours:
        pair i is (ours[i], fio[i])."""
        return [
            report.iops(a) / report.iops(b)
            for a, b in zip(self.ours, self.fio, strict=False)
            if report.iops(b)
        ]


# The cells the engines issue sets a target for (MISSION.md §3): with --vs-fio, uringkit
# reaches >= 0.95x fio's IOPS there and spends <= 1.1x fio's CPU per I/O.
TARGET_CELLS = [(e, d) for e in ("io_uring", "io_uring+fixed", "libaio") for d in (1, 32, 128)]
TARGET_IOPS, TARGET_CPU = 0.95, 1.10


def median_cpu(runs: list[dict[str, Any]]) -> float:
    return statistics.median(report.cpu_per_io(j) for j in runs) if runs else 0.0


def warm_cache(path: str) -> None:
    """Read the file once so the cached table measures the page cache, not the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        while os.read(fd, 1 << 22):
            pass
    finally:
        os.close(fd)


def _job(name: str, path: str, size: int, engine: str, depth: int, **kw: Any) -> Job:
    opts: dict[str, Any] = {
        "filename": path,
        "size": size,
        "bs": 4096,
        "iodepth": depth,
        # fio's defaults: each I/O submitted as soon as it is ready. Batching submissions
        # (N/4 per io_uring_enter) cost up to 25 % of IOPS on this VM's disk, whose host
        # completes a batch submitted together all at once (lockstep).
        "iodepth_batch_submit": 1,
        "iodepth_batch_complete_min": 1,
        **ENGINES[engine],
        **kw,
    }
    return Job(name, opts)


class Suite:
    def __init__(
        self, directory: str, quick: bool, vs_fio: bool, con: Console, progress: bool = True
    ) -> None:
        self.dir = directory
        self.plan = QUICK if quick else FULL
        self.vs_fio = vs_fio and fio_mod.available() is not None
        self.fio_missing = vs_fio and not self.vs_fio
        self.con = con
        self.progress = progress
        self.entries: list[Entry] = []
        self.notes: list[str] = []

    def _run(self, entry: Entry, job: Job) -> None:
        label = f"{entry.table} {entry.engine} qd{entry.depth}"
        use_fio = self.vs_fio and fio_mod.supports(job) and "threads" not in entry.engine
        # ABBA order (ours, fio, fio, ours): whatever warms up during a pair (the host's
        # cache of the disk image, CPU frequency) favours each side once.
        order = ["ours", "fio", "fio", "ours"] if use_fio else ["ours"]
        if use_fio and entry.table == "randread" and (entry.engine, entry.depth) in TARGET_CELLS:
            # the cells with a target get more runs; depth 1 most (its pairs spread
            # 0.86-1.12 on this VM's disk for the same work, 0.93-1.07 at depth 128)
            order *= 3 if entry.depth == 1 else 2
        for who in order:
            if who == "ours":
                entry.ours.append(runner.run(job, self.progress, label))
            else:
                entry.fio.append(fio_mod.run(job))
        self.entries.append(entry)

    def run(self) -> dict[str, Any]:
        p = self.plan
        if not os.path.isdir(self.dir):
            raise FileNotFoundError(f"--dir {self.dir}: no such directory")
        fd, path = tempfile.mkstemp(prefix="uringkit-bench-", suffix=".dat", dir=self.dir)
        os.close(fd)
        t0 = time.monotonic()
        try:
            self.con.print(
                f"[bold]uringkit bench[/] on {path} ({p.size >> 20} MiB)"
                + (" — side by side with " + fio_mod.version() if self.vs_fio else "")
            )
            if self.fio_missing:
                self.notes.append("--vs-fio: fio is not installed; ran uringkit only")
            common = {"runtime": p.runtime, "time_based": True, "ramp_time": p.ramp}
            for eng in p.engines:
                for d in p.depths:
                    if eng == "psync" and d > 1:
                        continue  # synchronous: depth is always 1
                    e = Entry("randread", eng, d)
                    self._run(
                        e,
                        _job(
                            f"randread-{eng}-qd{d}",
                            path,
                            p.size,
                            eng,
                            d,
                            rw="randread",
                            direct=True,
                            **common,
                        ),
                    )
            # IOPOLL: works only with poll queues; say so in one line and go on.
            try:
                e = Entry("randread", "io_uring+hipri", 32)
                self._run(
                    e,
                    _job(
                        "randread-hipri-qd32",
                        path,
                        p.size,
                        "io_uring",
                        32,
                        rw="randread",
                        direct=True,
                        hipri=True,
                        **common,
                    ),
                )
            except OSError as ex:
                self.notes.append(f"io_uring+hipri (IOPOLL) skipped: {ex.strerror or ex}")
            warm_cache(path)
            cached = {
                "runtime": p.cached_runtime,
                "time_based": True,
                "ramp_time": p.ramp,
                "invalidate": False,
            }
            for eng in p.engines:
                d = 1 if eng == "psync" else 32
                e = Entry("cached", eng, d)
                self._run(
                    e,
                    _job(
                        f"cached-{eng}", path, p.size, eng, d, rw="randread", direct=False, **cached
                    ),
                )
            for eng in p.seqwrite_engines:
                for d in p.seqwrite_depths:
                    if eng == "psync" and d > 1:
                        continue
                    e = Entry("seqwrite+fdatasync", eng, d)
                    self._run(
                        e,
                        _job(
                            f"seqwrite-{eng}-qd{d}",
                            path,
                            p.size,
                            eng,
                            d,
                            rw="write",
                            direct=False,
                            fdatasync=1,
                            verify=True,
                            runtime=p.seqwrite_runtime,
                            time_based=True,
                            iodepth_batch_submit=1,
                        ),
                    )
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.elapsed = time.monotonic() - t0
        return self.to_json()

    # ----- output ------------------------------------------------------------------------

    def targets(self) -> list[dict[str, Any]]:
        """The target cells measured side by side with fio: IOPS and CPU per I/O as the
        ratio of the medians over the interleaved runs (each run is also shown alone in
        the tables: the per-pair ratios carry this machine's noise)."""
        find = {(e.engine, e.depth): e for e in self.entries if e.table == "randread"}
        rows = []
        for eng, d in TARGET_CELLS:
            e = find.get((eng, d))
            if e is None or not e.fio or not e.median_iops("fio"):
                continue
            ir = e.median_iops("ours") / e.median_iops("fio")
            fc = median_cpu(e.fio)
            cr = median_cpu(e.ours) / fc if fc else None
            rows.append(
                {
                    "engine": eng,
                    "iodepth": d,
                    "iops_ratio": ir,
                    "cpu_ratio": cr,
                    "pair_ratios": e.ratios(),
                    "met": ir >= TARGET_IOPS and (cr is None or cr <= TARGET_CPU),
                }
            )
        return rows

    def print_targets(self, con: Console | None = None) -> None:
        rows = self.targets()
        if not rows:
            return
        t = Table(
            title=f"Targets: IOPS >= {TARGET_IOPS}x fio, CPU per I/O <= {TARGET_CPU}x fio "
            "(ratio of the medians of the interleaved runs)"
        )
        for c in ("engine", "qd", "IOPS vs fio", "per pair", "CPU/IO vs fio", "met"):
            t.add_column(c, justify="left" if c == "engine" else "right")
        for r in rows:
            cr = r["cpu_ratio"]
            t.add_row(
                r["engine"],
                str(r["iodepth"]),
                f"{r['iops_ratio']:.2f}×",
                " ".join(f"{x:.2f}" for x in r["pair_ratios"]),
                f"{cr:.2f}×" if cr is not None else "-",
                "[green]yes[/]" if r["met"] else "[red]no[/]",
            )
        (con or self.con).print(t)
        met = sum(r["met"] for r in rows)
        (con or self.con).print(f"targets met in {met} of {len(rows)} cells")

    def to_json(self) -> dict[str, Any]:
        jobs = [j for e in self.entries for j in e.ours]
        summary = []
        for e in self.entries:
            row: dict[str, Any] = {
                "table": e.table,
                "engine": e.engine,
                "iodepth": e.depth,
                "iops": e.median_iops("ours"),
            }
            b = e.best("ours")
            if b:
                row["cpu_us_per_io"] = report.cpu_per_io(b)
                row["clat_p99_us"] = report.pct_us(b, "99.000000")
                row["syscalls_per_io"] = b["uringkit"]["syscalls_per_io"]
                row["verified_blocks"] = b["uringkit"]["verify"]["blocks"]
            if e.fio:
                row["fio_iops"] = e.median_iops("fio")
                row["ratios"] = e.ratios()
                fb = e.best("fio")
                row["fio_cpu_us_per_io"] = report.cpu_per_io(fb) if fb else None
            summary.append(row)
        return runner.envelope(
            jobs,
            {
                "uringkit_suite": {
                    "elapsed_s": self.elapsed,
                    "rows": summary,
                    "targets": self.targets(),
                    "notes": self.notes,
                },
                "fio_jobs": [j for e in self.entries for j in e.fio],
            },
        )

    def _cell(self, e: Entry | None) -> str:
        if e is None:
            return ""
        ours = report.fmt_k(e.median_iops("ours"))
        if not e.fio:
            return ours
        rs = e.ratios()
        return f"{ours} / {report.fmt_k(e.median_iops('fio'))} ({min(rs):.2f}–{max(rs):.2f}×)"

    def print_tables(self, con: Console | None = None) -> None:
        """The suite's tables, on `con` (default: the suite's console)."""
        con = con or self.con
        find = {(e.table, e.engine, e.depth): e for e in self.entries}
        p = self.plan
        vs = " (uringkit / fio, per-pair ratio)" if self.vs_fio else ""
        t = Table(title=f"4 KiB random read, O_DIRECT: IOPS by queue depth{vs}")
        t.add_column("engine")
        for d in p.depths:
            t.add_column(f"qd{d}", justify="right")
        for eng in [*p.engines, "io_uring+hipri"]:
            cells = [self._cell(find.get(("randread", eng, d))) for d in p.depths]
            if any(cells):
                t.add_row(eng, *cells)
        con.print(t)

        t = Table(title="Latency and CPU at qd32 (4 KiB random read, O_DIRECT)")
        for c in (
            "engine",
            "IOPS",
            "P50 µs",
            "P99 µs",
            "P99.9 µs",
            "P99.99 µs",
            "CPU µs/IO",
            "syscalls/IO",
            "ctx/s",
        ):
            t.add_column(c, justify="left" if c == "engine" else "right")
        if self.vs_fio:
            t.add_column("fio CPU µs/IO", justify="right")
            t.add_column("fio P99 µs", justify="right")
        for eng in [*p.engines, "io_uring+hipri"]:
            e = find.get(("randread", eng, 32)) or find.get(("randread", eng, 1))
            b = e.best("ours") if e else None
            if not e or not b:
                continue
            u = b["uringkit"]
            row = [
                f"{eng}" + ("" if e.depth == 32 else " (qd1)"),
                report.fmt_k(report.iops(b)),
                *(f"{report.pct_us(b, q):.0f}" for q in report.PCTS),
                f"{report.cpu_per_io(b):.2f}",
                f"{u['syscalls_per_io']:.2f}",
                f"{u['ctx_per_sec']:.0f}",
            ]
            if self.vs_fio:
                fb = e.best("fio")
                row += [
                    f"{report.cpu_per_io(fb):.2f}" if fb else "-",
                    f"{report.pct_us(fb, '99.000000'):.0f}" if fb else "-",
                ]
            t.add_row(*row)
        con.print(t)

        t = Table(title="Cached 4 KiB random read (page cache: the software floor)")
        for c in ("engine", "qd", "IOPS", "CPU µs/IO", "syscalls/IO"):
            t.add_column(c, justify="left" if c == "engine" else "right")
        if self.vs_fio:
            t.add_column("fio IOPS", justify="right")
        for e in [x for x in self.entries if x.table == "cached"]:
            b = e.best("ours")
            if not b:
                continue
            row = [
                e.engine,
                str(e.depth),
                report.fmt_k(e.median_iops("ours")),
                f"{report.cpu_per_io(b):.2f}",
                f"{b['uringkit']['syscalls_per_io']:.2f}",
            ]
            if self.vs_fio:
                row.append(report.fmt_k(e.median_iops("fio")) if e.fio else "-")
            t.add_row(*row)
        con.print(t)

        t = Table(
            title="4 KiB sequential write + fdatasync every write "
            "(io_uring: linked SQEs), every block verified (crc32c)"
        )
        t.add_column("engine")
        for d in p.seqwrite_depths:
            t.add_column(f"qd{d}", justify="right")
        t.add_column("verified", justify="right")
        for eng in p.seqwrite_engines:
            es = [find.get(("seqwrite+fdatasync", eng, d)) for d in p.seqwrite_depths]
            blocks = sum(j["uringkit"]["verify"]["blocks"] for e in es if e for j in e.ours)
            t.add_row(eng, *(self._cell(e) for e in es), f"{blocks} blocks, 0 errors")
        con.print(t)
        for n in self.notes:
            con.print(f"[yellow]note:[/] {n}")
        warns = {
            j["uringkit"]["warning"]
            for e in self.entries
            for j in e.ours
            if j["uringkit"].get("warning")
        }
        for w in sorted(warns):
            con.print(f"[yellow]note:[/] {w}")
        self.print_targets(con)
        con.print(f"finished in {self.elapsed:.0f} s")

    def plot(self, path: str) -> bool:
        curves: dict[str, dict[int, float]] = {}
        lat: dict[str, dict[str, float]] = {}
        for e in self.entries:
            if e.table != "randread":
                continue
            curves.setdefault(e.engine, {})[e.depth] = e.median_iops("ours")
            if e.depth == 32:
                b = e.best("ours")
                if b:
                    lat[e.engine] = {
                        k: float(v) for k, v in b["read"]["clat_ns"]["percentile"].items()
                    }
        return report.plot(path, curves, lat, "uringkit bench: 4 KiB random read, O_DIRECT")
