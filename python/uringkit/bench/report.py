"""Readable tables (rich) and PNG plots (matplotlib, the `plot` extra)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

PCTS = ("50.000000", "99.000000", "99.900000", "99.990000")


def iops(j: dict[str, Any]) -> float:
    return float(j["read"]["iops"] + j["write"]["iops"])


def pct_us(j: dict[str, Any], p: str) -> float:
    for d in ("read", "write"):
        per = j[d]["clat_ns"].get("percentile") or {}
        if p in per and j[d]["total_ios"]:
            return float(per[p]) / 1000
    return 0.0


def has_pct(j: dict[str, Any], p: str) -> bool:
    return any(p in (j[d]["clat_ns"].get("percentile") or {}) for d in ("read", "write"))


def cpu_per_io(j: dict[str, Any]) -> float:
    return float(j.get("uringkit", {}).get("cpu_us_per_io", 0.0))


def fmt_k(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}K"
    return f"{n:.0f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "-"


def job_table(con: Console, results: list[dict[str, Any]]) -> None:
    """Per-job summary for user-supplied jobs, with fio's runs and per-pair ratios."""
    t = Table(title="uringkit bench")
    for c in (
        "job",
        "run",
        "IOPS",
        "BW MiB/s",
        "clat P50 µs",
        "P99 µs",
        "P99.99 µs",
        "CPU µs/IO",
        "syscalls/IO",
        "ctx/s",
    ):
        t.add_column(c, justify="right" if c not in ("job", "run") else "left")
    for item in results:
        runs = [("uringkit", j) for j in item["ours"]]
        if item["fio"]:
            runs = [
                x
                for pair in zip(item["ours"], item["fio"], strict=False)
                for x in (("uringkit", pair[0]), ("fio", pair[1]))
            ]
        for i, (who, j) in enumerate(runs):
            u = j.get("uringkit", {})
            bw = (j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / (1 << 20)
            eng = u.get("engine") or j["job options"].get("ioengine", "")
            t.add_row(
                j["jobname"] if i == 0 else "",
                f"{who} ({eng})",
                fmt_k(iops(j)),
                f"{bw:.1f}",
                *(
                    f"{pct_us(j, p):.1f}" if has_pct(j, p) else "–"  # not in percentile_list
                    for p in ("50.000000", "99.000000", "99.990000")
                ),
                f"{cpu_per_io(j):.2f}",
                f"{u['syscalls_per_io']:.2f}" if "syscalls_per_io" in u else "-",
                f"{u['ctx_per_sec']:.0f}" if "ctx_per_sec" in u else "-",
            )
        if item["fio"]:
            pairs = list(zip(item["ours"], item["fio"], strict=False))
            ir = [iops(a) / iops(b) for a, b in pairs if iops(b)]
            cr = [cpu_per_io(a) / cpu_per_io(b) for a, b in pairs if cpu_per_io(b)]
            t.add_row(
                "",
                "uringkit / fio",
                " ".join(f"{r:.2f}×" for r in ir),
                "",
                "",
                "",
                "",
                " ".join(f"{r:.2f}×" for r in cr),
                "",
                "",
            )
    con.print(t)
    for item in results:
        for who, j in [("uringkit", item["ours"][-1]), *(("fio", f) for f in item["fio"][-1:])]:
            line = distributions(j)
            if line:
                con.print(f"[dim]{j['jobname']} ({who}):[/] {line}")


def _dist(d: dict[str, float], unit: str = "") -> str:
    return " ".join(f"{k}{unit}={v:.1f}%" for k, v in d.items() if v >= 0.05)


def distributions(j: dict[str, Any]) -> str:
    """fio's "IO depths / submit / complete" lines in one: where each engine's batching
    shows (how deep the queue was at each submission, how many I/Os per system call)."""
    if "iodepth_level" not in j:
        return ""
    return (
        f"depth {_dist(j['iodepth_level'])} | per submit {_dist(j['iodepth_submit'])} | "
        f"per reap {_dist(j['iodepth_complete'])}"
    )


def plot(
    path: str, curves: dict[str, dict[int, float]], lat: dict[str, dict[str, float]], title: str
) -> bool:
    """IOPS by queue depth (one line per engine) and latency percentiles at one depth."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    for name, pts in curves.items():
        xs = sorted(pts)
        a.plot(xs, [pts[x] / 1000 for x in xs], marker="o", label=name)
    a.set_xscale("log", base=2)
    a.set_xlabel("queue depth")
    a.set_ylabel("kIOPS")
    a.set_title("IOPS by queue depth")
    a.grid(True, alpha=0.3)
    a.legend(fontsize=8)
    labels = ["P50", "P90", "P99", "P99.9", "P99.99"]
    keys = ["50.000000", "90.000000", "99.000000", "99.900000", "99.990000"]
    for name, per in lat.items():
        b.plot(labels, [per.get(k, 0) / 1000 for k in keys], marker="o", label=name)
    b.set_yscale("log")
    b.set_ylabel("completion latency (µs)")
    b.set_title("completion latency percentiles")
    b.grid(True, alpha=0.3)
    b.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
