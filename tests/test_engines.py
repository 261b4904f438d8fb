"""Engine choice and the URINGKIT_ENGINE override."""

from __future__ import annotations

import subprocess
import sys

import pytest

from uringkit.engines import choose_engine


def test_forced_engine() -> None:
    assert choose_engine(env={"URINGKIT_ENGINE": "threads"}).name == "threads"
    c = choose_engine(env={"URINGKIT_ENGINE": "libaio"})
    assert c.name == "libaio" and "URINGKIT_ENGINE" in c.reason


def test_unknown_forced_engine() -> None:
    with pytest.raises(ValueError, match="not an engine"):
        choose_engine(env={"URINGKIT_ENGINE": "epoll"})


CHILD = """
from uringkit.testing import block_io_uring
block_io_uring()
from uringkit.engines import choose_engine
a = choose_engine(direct=False, env={})
b = choose_engine(direct=True, env={})
print(a.name, b.name)
print(a.reason)
"""


def test_fallback_when_really_blocked() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, reason = out.stdout.splitlines()[:2]
    assert first == "threads libaio"
    assert "blocked" in reason
