"""Helpers shared by the benchmark scripts (run them as `python benches/<name>.py`)."""

from __future__ import annotations

import os
import tempfile


def make_file(directory: str, size: int, prefix: str = "uringkit-bench-") -> str:
    """A temporary file of `size` incompressible bytes in `directory`; the caller removes it."""
    fd, path = tempfile.mkstemp(prefix=prefix, dir=directory)
    chunk = os.urandom(1 << 20)
    done = 0
    while done < size:
        done += os.write(fd, chunk[: min(len(chunk), size - done)])
    os.close(fd)
    return path


def warm(path: str) -> None:
    """Read the file once so it sits in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    while os.read(fd, 1 << 22):
        pass
    os.close(fd)
