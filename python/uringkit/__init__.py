"""uringkit: all of Linux asynchronous I/O for Python.

io_uring with its advanced features, libaio, POSIX AIO and thread pools behind one
interface, the tools to measure them, asyncio integration and a crash-safe KV store.

>>> from uringkit import Ring
>>> with Ring(8) as ring:
...     ring.nop(user_data=7)
...     [c.user_data for c in ring.wait(1)]
[7]
"""

from __future__ import annotations

from ._native import (
    AlignedBuffer,
    Buffer,
    BufferRing,
    BufferView,
    Completion,
    Fixed,
    Ring,
    __version__,
)
from .ring import (
    RESOLVE_BENEATH,
    RESOLVE_CACHED,
    RESOLVE_IN_ROOT,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    aligned_buffer,
    probe,
    supported,
)

__all__ = [
    "RESOLVE_BENEATH",
    "RESOLVE_CACHED",
    "RESOLVE_IN_ROOT",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "RESOLVE_NO_XDEV",
    "AlignedBuffer",
    "Buffer",
    "BufferRing",
    "BufferView",
    "Completion",
    "Fixed",
    "Ring",
    "__version__",
    "aligned_buffer",
    "probe",
    "supported",
]
