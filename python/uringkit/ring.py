"""The io_uring Ring and helpers around it.

`Ring` itself is implemented natively (``uringkit._native.Ring``); this module adds the
conveniences that need no kernel access of their own.
"""

from __future__ import annotations

from ._native import AlignedBuffer, Completion, Fixed, Ring

__all__ = ["AlignedBuffer", "Completion", "Fixed", "Ring", "aligned_buffer", "probe", "supported"]


def aligned_buffer(size: int) -> AlignedBuffer:
    """Page-aligned, zero-filled memory of ``size`` bytes for O_DIRECT I/O.

    Supports the buffer protocol: ``memoryview(aligned_buffer(4096))``.
    """
    return AlignedBuffer(size)


def probe() -> frozenset[str]:
    """Names of the io_uring opcodes the running kernel supports.

    Raises OSError (with the reason) when io_uring is unavailable.
    """
    return Ring.probe()


def supported(*ops: str) -> bool:
    """True when io_uring works here and supports every op in ``ops``."""
    try:
        have = Ring.probe()
    except OSError:
        return False
    return all(op in have for op in ops)
