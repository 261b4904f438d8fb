"""The default suite, quick form: tables (to --output's file), JSON, PNG, temp file
cleaned up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_quick_suite(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "uringkit",
            "bench",
            "--quick",
            "--dir",
            str(tmp_path),
            "--no-progress",
            "--output=tables.txt",  # fio's --output: the result there, not on stdout
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "IOPS by queue depth" not in out.stdout
    text = " ".join((tmp_path / "tables.txt").read_text().split())  # titles wrap
    assert "IOPS by queue depth" in text and "Latency and CPU at qd32" in text
    assert "Cached 4 KiB random read" in text and "fdatasync" in text
    doc = json.loads((tmp_path / "uringkit-bench.json").read_text())
    rows = doc["uringkit_suite"]["rows"]
    engines = {r["engine"] for r in rows if r["table"] == "randread"}
    assert {"psync", "posixaio", "libaio"} <= engines
    assert all(r["iops"] > 0 for r in rows)
    sw = [r for r in rows if r["table"] == "seqwrite+fdatasync"]
    assert sw and all(r["verified_blocks"] > 0 for r in sw)
    assert (tmp_path / "uringkit-bench.png").stat().st_size > 10_000
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".dat")]
    assert leftovers == []


def _run(iops: float, cpu: float) -> dict[str, object]:
    """The fields of a job result that the target check reads."""
    return {
        "read": {"iops": iops},
        "write": {"iops": 0.0},
        "uringkit": {"cpu_us_per_io": cpu},
    }


def test_targets_are_ratios_of_medians() -> None:
    from rich.console import Console

    from uringkit.bench.suite import TARGET_CELLS, Entry, Suite

    s = Suite(".", quick=True, vs_fio=False, con=Console(file=None))
    # one pair below 0.95 alone, the cell at parity: the ratio of the medians decides
    e = Entry("randread", "io_uring", 1, [_run(93, 9.0), _run(101, 8.0)], [_run(100, 8.5)] * 2)
    slow = Entry("randread", "libaio", 32, [_run(90, 3.0)] * 2, [_run(100, 3.0)] * 2)
    costly = Entry("randread", "io_uring+fixed", 128, [_run(100, 4.0)] * 2, [_run(100, 3.0)] * 2)
    no_fio = Entry("randread", "io_uring", 32, [_run(100, 3.0)])
    other = Entry("randread", "posixaio", 32, [_run(100, 3.0)], [_run(100, 3.0)])
    s.entries = [e, slow, costly, no_fio, other]
    rows = {(r["engine"], r["iodepth"]): r for r in s.targets()}
    assert set(rows) == {("io_uring", 1), ("libaio", 32), ("io_uring+fixed", 128)}
    assert set(rows) <= set(TARGET_CELLS)
    r = rows[("io_uring", 1)]
    assert abs(r["iops_ratio"] - 0.97) < 1e-9 and r["met"]
    assert [round(x, 2) for x in r["pair_ratios"]] == [0.93, 1.01]
    assert not rows[("libaio", 32)]["met"]  # IOPS 0.90x
    assert not rows[("io_uring+fixed", 128)]["met"]  # CPU 1.33x
