"""Ring-wide registrations: restrictions on a ring created disabled, io-wq worker caps
and CPU affinity, NAPI busy polling. Each is checked against what the kernel does, not
only that the call returns (unsupported on this kernel = skip)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from uringkit import Ring


def _one(ring: Ring) -> int:
    ring.submit()
    (c,) = ring.wait(1)
    return c.res


def test_a_disabled_ring_takes_no_submissions_until_enabled() -> None:
    with Ring(8, disabled=True) as ring:
        assert ring.config["disabled"] is True
        ring.nop()
        with pytest.raises(OSError, match=r"disabled=True .* Ring\.enable\(\)") as e:
            ring.submit()
        assert e.value.errno == errno.EBADFD
        ring.enable()
        assert _one(ring) == 0
        with pytest.raises(OSError, match="enabled already"):
            ring.enable()


def test_restricted_ring_refuses_other_ops_and_registrations(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"hello world")
    fd = os.open(p, os.O_RDWR)
    try:
        with Ring(8, disabled=True) as ring:
            ring.restrict(["read", "nop"], register=["register_files"])
            with pytest.raises(OSError, match="go before enable|once") as e:
                ring.restrict(["read"])  # a second time
            assert e.value.errno == errno.EBUSY
            ring.enable()
            buf = bytearray(5)
            ring.read(fd, buf, 0)
            assert _one(ring) == 5 and buf == b"hello"
            ring.write(fd, b"HELLO", 0)
            assert _one(ring) == -errno.EACCES
            assert p.read_bytes() == b"hello world"  # nothing written
            ring.nop(link=True)  # flags: all allowed by default
            assert _one(ring) == 0
            ring.register_files([fd])  # allowed
            with pytest.raises(PermissionError):
                ring.register_buffers(1, 4096)  # not in `register`
    finally:
        os.close(fd)


def test_restricted_sqe_flags() -> None:
    with Ring(8, disabled=True) as ring:
        ring.restrict(["nop"], allowed_flags=[], required_flags=["async"])
        ring.enable()
        ring.nop()  # lacks the required IOSQE_ASYNC
        assert _one(ring) == -errno.EACCES
        ring.nop(async_=True)
        assert _one(ring) == 0
        ring.nop(async_=True, link=True)  # link is neither allowed nor required
        assert _one(ring) == -errno.EACCES


def test_restrict_arguments_and_state() -> None:
    with Ring(8) as ring, pytest.raises(RuntimeError, match="disabled=True"):
        ring.restrict(["nop"])
    with Ring(8, disabled=True) as ring:
        with pytest.raises(ValueError, match=r"ops: unknown name 'frobnicate' \(known: nop"):
            ring.restrict(["frobnicate"])
        with pytest.raises(ValueError, match="register: unknown name"):
            ring.restrict(["nop"], register=["register_everything"])
        with pytest.raises(ValueError, match="allowed_flags: unknown name 'sticky'"):
            ring.restrict(["nop"], allowed_flags=["sticky"])
        ring.enable()
        with pytest.raises(OSError, match="before enable") as e:
            ring.restrict(["nop"])
        assert e.value.errno == errno.EBADFD


# io-wq belongs to the submitting task: each check runs in a fresh process, so its pool
# starts empty and its limits at the kernel's defaults.
WORKERS = """
import os, sys, threading, time
from uringkit import Ring

def workers():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith("iou-wrk"):
                    out[int(tid)] = os.sched_getaffinity(int(tid))
        except (OSError, ValueError):
            pass
    return out

ring = Ring(64)
CAP, AFF, PATH = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if CAP:
    old = ring.iowq_max_workers(bounded=CAP)
    assert ring.iowq_max_workers() == (CAP, old[1]), (old, ring.iowq_max_workers())
if AFF != "-":
    ring.iowq_affinity([int(AFF)])
# fsyncs of freshly written files, forced to io-wq (IOSQE_ASYNC): bounded work that
# sleeps on the disk, so the pool starts a worker for the next one meanwhile (as many
# as it may)
fds = [os.open(f"{PATH}{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for i in range(24)]
for fd in fds:
    os.write(fd, b"x" * (256 << 10))
for fd in fds:
    ring.fsync(fd, async_=True)
ring.submit()
most, affs = 0, set()
done = 0
while done < 24:
    w = workers()
    most = max(most, len(w))
    for a in w.values():
        affs.add(tuple(sorted(a)))
    done += len(ring.completions())
    time.sleep(0.0005)
for i, fd in enumerate(fds):
    os.close(fd)
    os.unlink(f"{PATH}{i}")
print(most, sorted(affs))
"""


def _workers(tmp_path: Path, cap: int, cpu: int | None) -> tuple[int, str]:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(WORKERS),
            str(cap),
            "-" if cpu is None else str(cpu),
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    most, affs = r.stdout.split(" ", 1)
    return int(most), affs.strip()


def test_iowq_max_workers_caps_the_worker_threads(tmp_path: Path) -> None:
    free, _ = _workers(tmp_path, 0, None)
    if free < 2:
        pytest.skip("this kernel ran the writes without several io-wq workers")
    capped, _ = _workers(tmp_path, 1, None)
    assert capped == 1, f"cap 1, yet {capped} workers (uncapped: {free})"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_iowq_affinity_pins_the_workers(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    most, affs = _workers(tmp_path, 0, cpu)
    assert most >= 1
    assert affs == f"[({cpu},)]", affs
    with Ring(8) as ring:
        ring.iowq_affinity([0])
        ring.iowq_affinity(None)  # back to the task's
        with pytest.raises(ValueError, match="at least one CPU"):
            ring.iowq_affinity([])
        with pytest.raises(ValueError, match="beyond the largest CPU"):
            ring.iowq_affinity([1 << 20])


def test_iowq_max_workers_arguments() -> None:
    with Ring(8) as ring:
        before = ring.iowq_max_workers()
        assert before[0] > 0 and before[1] > 0
        with pytest.raises(OverflowError, match="bounded"):
            ring.iowq_max_workers(bounded=-1)


def test_napi_busy_poll_registers_and_sockets_still_work() -> None:
    with Ring(8) as ring:
        try:
            ring.register_napi(50, prefer_busy_poll=True)
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                pytest.skip(f"no NAPI registration on this kernel: {e}")
            raise
        a, b = socket.socketpair()
        with a, b:
            a.send(b"ping")
            buf = bytearray(4)
            ring.recv(b.fileno(), buf)
            assert _one(ring) == 4 and buf == b"ping"
        ring.unregister_napi()


PERSONALITY = """
import errno, os, sys
from uringkit import Ring
path = sys.argv[1]
ring = Ring(8)
me = ring.register_personality()  # root's credentials, kept by the ring
assert me > 0 and ring.personality == 0
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)  # nobody from here on

def open_res():
    ring.openat(path, os.O_RDONLY)
    ring.submit()
    (c,) = ring.wait(1)
    if c.res >= 0:
        os.close(c.res)
    return c.res

assert open_res() == -errno.EACCES  # as nobody
ring.personality = me
assert open_res() >= 0  # as the registered root
ring.personality = 0
assert open_res() == -errno.EACCES
ring.unregister_personality(me)
try:
    ring.unregister_personality(me)
except OSError as e:
    assert e.errno == errno.EINVAL and "no personality" in str(e), e
else:
    raise AssertionError("unregistered twice")
ring.personality = me  # gone: the op fails, it does not run as anyone
assert open_res() == -errno.EINVAL
print("ok")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_personality_runs_ops_with_registered_credentials(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)  # nobody may look up the file, not read it
    r = subprocess.run(
        [sys.executable, "-c", PERSONALITY, str(secret)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_personality_argument() -> None:
    with Ring(8) as ring:
        with pytest.raises(OverflowError, match="personality"):
            ring.personality = 1 << 16
        ring.personality = 0
        assert ring.personality == 0
