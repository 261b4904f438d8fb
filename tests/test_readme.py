"""The README's tour runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import need_ops

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_tour(tmp_path: Path, capsys: object) -> None:
    need_ops("read", "write", "fsync", "read_fixed")
    text = README.read_text()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(m.group(1), "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
