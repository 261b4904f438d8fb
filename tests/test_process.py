"""waitid through the ring (kernel 6.7+): a child's exit as a completion."""

from __future__ import annotations

import errno
import os
import signal

from uringkit import Ring

from conftest import need_ops, wait_all


def _spawn(*argv: str) -> int:
    return os.posix_spawn(argv[0], list(argv), os.environ)


def test_waitid_reports_exit_status_and_signal(ring: Ring) -> None:
    need_ops("waitid")
    ok = _spawn("/bin/sh", "-c", "exit 3")
    sleeper = _spawn("/bin/sleep", "30")
    ring.waitid(os.P_PID, ok, os.WEXITED, user_data=1)
    ring.waitid(os.P_PID, sleeper, os.WEXITED, user_data=2)
    (c,) = ring.wait(1, timeout=10)  # the sleeper is still asleep: only the first
    assert c.user_data == 1 and c.res == 0
    assert c.result["si_pid"] == ok and c.result["si_status"] == 3
    assert c.result["si_code"] == os.CLD_EXITED and c.result["si_signo"] == signal.SIGCHLD
    os.kill(sleeper, signal.SIGKILL)
    (c,) = wait_all(ring, 1, timeout=10)
    assert c.user_data == 2 and c.result["si_code"] == os.CLD_KILLED
    assert c.result["si_status"] == signal.SIGKILL
    ring.waitid(os.P_PID, sleeper, os.WEXITED, user_data=3)  # already reaped
    assert ring.wait(1, timeout=5)[0].res == -errno.ECHILD
