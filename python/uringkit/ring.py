"""The io_uring Ring and helpers around it.

`Ring` itself is implemented natively (``uringkit._native.Ring``); this module adds the
conveniences that need no kernel access of their own.
"""

from __future__ import annotations

import enum

from ._native import AlignedBuffer, Completion, Fixed, Ring

__all__ = [
    "AlignedBuffer",
    "Completion",
    "Fixed",
    "Resolve",
    "Ring",
    "aligned_buffer",
    "probe",
    "supported",
]


class Resolve(enum.IntFlag):
    """openat2(2)'s `resolve` flags (<linux/openat2.h>; the os module has none), for
    `Ring.openat2(..., resolve=Resolve.BENEATH | Resolve.NO_SYMLINKS)`."""

    NO_XDEV = 0x01  # no crossing of mount points
    NO_MAGICLINKS = 0x02  # no /proc/*/fd-style magic links
    NO_SYMLINKS = 0x04  # no symlinks at all (-ELOOP)
    BENEATH = 0x08  # never leave dir_fd (-EXDEV), no absolute paths
    IN_ROOT = 0x10  # resolve as if dir_fd were the root directory
    CACHED = 0x20  # only from the dentry cache (-EAGAIN otherwise)


class EpollOp(enum.IntEnum):
    """epoll_ctl(2)'s `op` (the select module has no names for them), for
    `Ring.epoll_ctl(epfd, EpollOp.ADD, fd, select.EPOLLIN)`."""

    ADD = 1
    DEL = 2
    MOD = 3


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
