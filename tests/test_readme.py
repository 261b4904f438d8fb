"""The README's Python examples run as written."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
from pathlib import Path

from conftest import need_ops

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples(tmp_path: Path) -> None:
    need_ops("read", "write", "fsync", "read_fixed")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        (tmp_path / "data.bin").write_bytes(os.urandom(16384))
        for i, code in enumerate(blocks):
            ns: dict[str, object] = {}
            exec(compile(code, f"README.md block {i}", "exec"), ns)
            main = ns.get("main")
            if inspect.iscoroutinefunction(main):
                asyncio.run(main())
    finally:
        os.chdir(cwd)
