"""Helpers for testing code that must survive a locked-down io_uring.

``block_io_uring()`` installs a real seccomp filter (as Docker's default profile and
gVisor do) that makes io_uring_setup/enter/register fail with ``errno``. It cannot be
undone: call it in a child process (``multiprocessing`` with the "fork" or "spawn"
method, or ``subprocess``).
"""

from __future__ import annotations

import errno as _errno

from ._native import block_io_uring as _block


def block_io_uring(errno: int = _errno.EPERM) -> None:
    """Make every io_uring syscall fail with ``errno`` in this process, for good."""
    _block(errno)


__all__ = ["block_io_uring"]
