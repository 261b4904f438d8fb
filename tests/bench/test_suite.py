"""The default suite, quick form: tables, JSON, PNG, temp file cleaned up."""

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
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # titles wrap to the table's width
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
