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
from .ring import EpollOp, Resolve, aligned_buffer, probe, supported

__all__ = [
    "AlignedBuffer",
    "Buffer",
    "BufferRing",
    "BufferView",
    "Completion",
    "EpollOp",
    "Fixed",
    "Resolve",
    "Ring",
    "__version__",
    "aligned_buffer",
    "probe",
    "supported",
]
