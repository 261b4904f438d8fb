"""`uringkit doctor`: human table, JSON, exit status, and the blocked case for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROBED


def run(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = prelude + "import sys\nfrom uringkit.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )


def test_json_report(tmp_path: Path) -> None:
    out = run("doctor", "--json", "--dir", str(tmp_path))
    rep = json.loads(out.stdout)
    assert out.returncode == (0 if PROBED is not None else 1)
    assert rep["kernel"] and isinstance(rep["io_uring_usable"], bool)
    names = {c["name"] for c in rep["checks"]}
    assert {
        "io_uring_setup",
        "kernel.io_uring_disabled",
        "seccomp",
        "RLIMIT_MEMLOCK",
        "libaio",
    } <= names
    assert any(n.startswith("O_DIRECT in") for n in names)
    if PROBED is not None:
        ops = {o["name"]: o["supported"] for o in rep["opcodes"]}
        assert ops["nop"] is True and set(ops) >= {"read", "send_zc", "socket"}
        assert {o["name"] for o in rep["opcodes"] if o["supported"]} == {
            n for n in ops if n in PROBED
        }
        feats = {f["name"]: f for f in rep["features"]}
        assert feats["DEFER_TASKRUN"]["since"] == "6.1"
        # checked by doing it: a restricted ring refuses what it was not allowed
        assert feats["restricted rings (R_DISABLED)"]["ok"] is True
        assert "EACCES" in feats["restricted rings (R_DISABLED)"]["detail"]
        assert feats["io-wq worker caps"]["since"] == "5.15"
        # (uringkit.loop's UDP endpoints: done for real, two datagrams on one receive)
        assert feats["multishot recvmsg"]["since"] == "6.0"
        if feats["multishot recv"]["ok"]:  # (the same kernel, 6.0, brought both)
            assert feats["multishot recvmsg"]["ok"] is True, feats["multishot recvmsg"]
        assert rep["recommended"]


def test_table_output() -> None:
    out = run("doctor")
    assert "Production checklist" in out.stdout
    assert "RLIMIT_MEMLOCK" in out.stdout


def test_blocked_io_uring_exit_1() -> None:
    out = run(
        "doctor",
        "--json",
        prelude="from uringkit.testing import block_io_uring\nblock_io_uring()\n",
    )
    assert out.returncode == 1, out.stderr
    rep = json.loads(out.stdout)
    assert rep["io_uring_usable"] is False
    assert "EPERM" in rep["reason"] or "refused" in rep["reason"]
    assert "threads" in rep["fallback"] and "libaio" in rep["fallback"]


def test_help_has_example() -> None:
    out = run("doctor", "--help")
    assert out.returncode == 0 and "example" in out.stdout
    out = run("--help")
    assert "uringkit doctor" in out.stdout
