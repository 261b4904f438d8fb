"""Engine choice: io_uring when it works, graceful fallback when it does not.

Rules (MISSION.md §1, seed 000 §10.1): io_uring when the kernel has it and nothing blocks
it; when it is blocked (ENOSYS: old kernel; EPERM: seccomp or kernel.io_uring_disabled;
ENOMEM: RLIMIT_MEMLOCK), libaio for O_DIRECT work and a thread pool otherwise. Never POSIX
AIO by default (it is a user-space thread pool in disguise). ``URINGKIT_ENGINE`` forces
one engine.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ._native import Ring, libaio_check

ENGINES = ("io_uring", "libaio", "posixaio", "threads", "psync")
ENV_VAR = "URINGKIT_ENGINE"


@dataclass(frozen=True)
class IoUringStatus:
    usable: bool
    errno: int | None
    message: str


@dataclass(frozen=True)
class EngineChoice:
    name: str
    reason: str


@functools.cache
def io_uring_status() -> IoUringStatus:
    """Whether io_uring_setup works in this process (probed once, cached)."""
    try:
        Ring(2).close()
    except OSError as e:
        return IoUringStatus(False, e.errno, str(e))
    return IoUringStatus(True, None, "io_uring works")


@functools.cache
def libaio_usable() -> tuple[bool, str]:
    code = libaio_check()
    if code == 0:
        return True, "io_setup works"
    return False, f"io_setup failed: {os.strerror(code)} (errno {code})"


def choose_engine(direct: bool = False, env: Mapping[str, str] | None = None) -> EngineChoice:
    """Pick the engine for this process and say why.

    ``direct``: the work uses O_DIRECT (libaio is only asynchronous with O_DIRECT).
    Raises ValueError when ``URINGKIT_ENGINE`` names an unknown engine.
    """
    env = os.environ if env is None else env
    forced = env.get(ENV_VAR, "").strip()
    if forced and forced != "auto":
        if forced not in ENGINES:
            raise ValueError(
                f"{ENV_VAR}={forced!r} is not an engine; choose one of {', '.join(ENGINES)}"
                " or 'auto'"
            )
        return EngineChoice(forced, f"forced by {ENV_VAR}={forced}")
    st = io_uring_status()
    if st.usable:
        return EngineChoice("io_uring", "io_uring works on this kernel")
    why = {
        errno.ENOSYS: "the kernel has no io_uring",
        errno.EPERM: "io_uring is blocked (seccomp or kernel.io_uring_disabled)",
        errno.ENOMEM: "RLIMIT_MEMLOCK is too small for a ring",
    }.get(st.errno or 0, f"io_uring_setup failed ({st.message})")
    if direct:
        ok, aio_msg = libaio_usable()
        if ok:
            return EngineChoice("libaio", f"{why}; O_DIRECT work uses libaio")
        why += f"; libaio unusable too ({aio_msg})"
    return EngineChoice("threads", f"{why}; using a thread pool")
