"""`uringkit doctor`: the production checklist (MISSION.md §6), checked on this machine.

Every answer comes from trying the thing (setting up a ring with the flag, probing the
opcode, registering the buffer ring), not from comparing version strings.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ._native import (
    Ring,
    dio_alignment,
    kernel_release,
    memlock_limit,
    op_table,
    seccomp_mode,
)
from .engines import choose_engine, io_uring_status, libaio_usable


@dataclass
class Check:
    name: str
    ok: bool | None  # None: not applicable / informational
    detail: str
    since: str = ""


@dataclass
class Report:
    kernel: str
    io_uring_usable: bool
    reason: str
    fallback: str
    checks: list[Check] = field(default_factory=list)
    features: list[Check] = field(default_factory=list)
    opcodes: list[dict[str, Any]] = field(default_factory=list)
    recommended: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _try_ring(**kw: Any) -> tuple[bool, str]:
    try:
        Ring(8, **kw).close()
    except (OSError, ValueError) as e:
        return False, str(e)
    return True, "ok"


def _cap_ipc_lock() -> bool:
    status = _read("/proc/self/status") or ""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) & (1 << 14))
    return False


def _human(n: int | None) -> str:
    if n is None:
        return "unlimited"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit != "B" else f"{n} B"
        n //= 1024
    return str(n)


def _multishot_accept() -> tuple[bool, str]:
    srv = socket.socket()
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with Ring(4) as r:
            r.accept(srv, multishot=True, user_data=1)
            r.submit()
            got = r.wait(1, timeout=0.05)
            if got and got[0].res == -errno.EINVAL:
                return False, "EINVAL: multishot accept unsupported"
            return True, "armed and cancelled"
    except OSError as e:
        return False, str(e)
    finally:
        srv.close()


def _oserror_says_no(probe: Callable[[], tuple[bool, str]]) -> Callable[[], tuple[bool, str]]:
    """A probe whose OSError means "not here": (False, its message)."""

    @functools.wraps(probe)
    def run() -> tuple[bool, str]:
        try:
            return probe()
        except OSError as e:
            return False, str(e)

    return run


@_oserror_says_no
def _multishot_recv() -> tuple[bool, str]:
    a, b = socket.socketpair()
    with a, b, Ring(4) as r:
        br = r.buffer_ring(0, 2, 64)
        r.recv(b, multishot=True, buffer_ring=br, user_data=1)
        a.send(b"x")
        got = r.wait(1, timeout=1)
        if got and got[0].res == -errno.EINVAL:
            return False, "EINVAL: multishot recv unsupported"
        if got and got[0].ok and got[0].more:
            return True, "received with F_MORE"
        return False, f"unexpected: {got}"


@_oserror_says_no
def _multishot_recvmsg() -> tuple[bool, str]:
    """A multishot RECVMSG into provided buffers (uringkit.loop's UDP endpoints): two
    datagrams on one armed receive, each with its sender's address."""
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with a, b, Ring(4) as r:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        br = r.buffer_ring(0, 4, 256)
        r.recvmsg(a, multishot=True, buffer_ring=br, user_data=1)
        r.submit()
        b.sendto(b"x", a.getsockname())
        b.sendto(b"y", a.getsockname())
        got = []
        for _ in range(4):
            got += r.wait(1, timeout=1)
            if len(got) >= 2 or (got and not got[-1].more):
                break
        if got and got[0].res == -errno.EINVAL:
            return False, "EINVAL: multishot recvmsg unsupported"
        msgs = [br.take_msg(c) for c in got if c.ok and c.more]
        if msgs == [(b"x", b.getsockname()), (b"y", b.getsockname())]:
            return True, "two datagrams on one receive, senders named"
        return False, f"unexpected: {got}"


def _buffer_ring() -> tuple[bool, str]:
    try:
        with Ring(4) as r:
            r.buffer_ring(0, 4, 64)
        return True, "registered"
    except OSError as e:
        return False, str(e)


def _restricted_ring() -> tuple[bool, str]:
    """A ring created disabled, restricted to NOP, enabled: the NOP runs, a READ is
    refused."""
    import errno

    try:
        with Ring(2, disabled=True) as r:
            r.restrict(["nop"])
            r.enable()
            r.nop()
            r.read(0, bytearray(1), 0)
            r.submit()
            got = sorted(c.res for c in r.wait(2))
    except OSError as e:
        return False, str(e)
    if got != [-errno.EACCES, 0]:
        return False, f"completions {got}, expected [-EACCES, 0]"
    return True, "NOP allowed, READ refused with EACCES"


def _iowq_limits() -> tuple[bool, str, tuple[int, int] | None]:
    try:
        with Ring(2) as r:
            b, u = r.iowq_max_workers()
    except OSError as e:
        return False, str(e), None
    # (the limits are the submitting thread's pool's, set by the first ring it used:
    # bounded = min(that ring's SQ entries, 4 x CPUs), unbounded = RLIMIT_NPROC)
    cpus = len(os.sched_getaffinity(0))
    return (
        True,
        f"file work: min(SQ entries, 4 x CPUs = {4 * cpus}); other work: {u} "
        f"(RLIMIT_NPROC) — per submitting thread (this one's now: {b}/{u})",
        (4 * cpus, u),
    )


def _napi() -> tuple[bool, str]:
    try:
        with Ring(2) as r:
            r.register_napi(0)
            r.unregister_napi()
    except OSError as e:
        return False, str(e)
    return True, "register_napi accepted"


def _direct_io(directory: str) -> Check:
    try:
        fd, path = tempfile.mkstemp(prefix=".uringkit-doctor-", dir=directory)
    except OSError as e:
        return Check(f"O_DIRECT in {directory}", False, f"cannot create a file: {e}")
    try:
        os.close(fd)
        try:
            dfd = os.open(path, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            return Check(
                f"O_DIRECT in {directory}",
                False,
                f"refused ({e.strerror}); use direct=0 / buffered I/O here",
            )
        try:
            al = dio_alignment(dfd)
            st = os.statvfs(directory)
        finally:
            os.close(dfd)
        if al is None:
            detail = (
                "accepted; alignment not reported by statx (assume 512 B or the "
                f"device's logical block), fs block {st.f_bsize} B"
            )
        else:
            detail = f"accepted; buffer alignment {al[0]} B, offset/length alignment {al[1]} B"
        return Check(f"O_DIRECT in {directory}", True, detail)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def gather(directory: str = ".") -> Report:
    st = io_uring_status()
    choice = choose_engine(direct=False)
    direct_choice = choose_engine(direct=True)
    fallback = (
        "none needed"
        if st.usable
        else f"{choice.name} (buffered), {direct_choice.name} (O_DIRECT): {choice.reason}"
    )
    rep = Report(
        kernel=kernel_release(),
        io_uring_usable=st.usable,
        reason=st.message,
        fallback=fallback,
    )
    c = rep.checks
    c.append(Check("io_uring_setup", st.usable, st.message))
    disabled = _read("/proc/sys/kernel/io_uring_disabled")
    group = _read("/proc/sys/kernel/io_uring_group")
    meaning = {
        "0": "enabled for all",
        "1": f"only CAP_SYS_ADMIN or group {group}",
        "2": "disabled for all",
    }
    c.append(
        Check(
            "kernel.io_uring_disabled",
            disabled in (None, "0"),
            f"{disabled} ({meaning.get(disabled or '', 'sysctl absent: kernel < 6.6')})"
            if disabled is not None
            else "sysctl absent (kernel < 6.6): not restricted",
        )
    )
    mode = seccomp_mode()
    c.append(
        Check(
            "seccomp",
            None if mode != 0 else True,
            {
                0: "no filter",
                1: "strict mode",
                2: "a filter is installed (container?); "
                "io_uring_setup " + ("works under it" if st.usable else "is blocked by it"),
            }.get(mode if mode is not None else -1, "unknown"),
        )
    )
    lim = memlock_limit()
    cap = _cap_ipc_lock()
    c.append(
        Check(
            "RLIMIT_MEMLOCK",
            lim is None or lim >= (8 << 20) or cap,
            f"{_human(lim)}"
            + (
                " (CAP_IPC_LOCK: not enforced for this process)"
                if cap
                else "; registered buffers beyond it fail with ENOMEM"
            ),
        )
    )
    if st.usable:
        ok, msg = _try_ring(sqpoll=True, sq_thread_idle_ms=10)
        c.append(
            Check(
                "SQPOLL permitted",
                ok,
                msg
                if not ok
                else f"yes; it costs a polling kernel thread ({os.cpu_count()} CPUs here)",
            )
        )
    aio_ok, aio_msg = libaio_usable()
    nr, mx = _read("/proc/sys/fs/aio-nr"), _read("/proc/sys/fs/aio-max-nr")
    c.append(Check("libaio", aio_ok, f"{aio_msg}; aio-nr {nr} of aio-max-nr {mx}"))
    c.append(_direct_io(directory))

    if st.usable:
        probe = Ring.probe()
        f = rep.features
        with Ring(2) as r:
            feats = r.features
        for name, since, ok, detail in [
            ("non-vectored read/write", "5.6", "read" in probe, "probe: read, write"),
            (
                "fast poll (no io-wq thread for sockets)",
                "5.7",
                "fast_poll" in feats,
                "IORING_FEAT_FAST_POLL",
            ),
            ("wait with timeout (EXT_ARG)", "5.11", "ext_arg" in feats, "IORING_FEAT_EXT_ARG"),
            (
                "SQPOLL without privileges",
                "5.11",
                "sqpoll_nonfixed" in feats,
                "IORING_FEAT_SQPOLL_NONFIXED",
            ),
            ("mkdirat/symlinkat/linkat", "5.15", "mkdirat" in probe, "probe"),
            ("socket op", "5.19", "socket" in probe, "probe"),
            ("CQE skip on success", "5.17", "cqe_skip" in feats, "IORING_FEAT_CQE_SKIP"),
        ]:
            f.append(Check(name, ok, detail, since))
        for name, since, kw in [
            ("COOP_TASKRUN", "5.19", {"coop_taskrun": True}),
            ("SINGLE_ISSUER", "6.0", {"single_issuer": True}),
            ("DEFER_TASKRUN", "6.1", {"single_issuer": True, "defer_taskrun": True}),
        ]:
            ok, msg = _try_ring(**kw)
            f.append(Check(name, ok, "ring set up" if ok else msg, since))
        ok, msg = _buffer_ring()
        f.append(Check("provided buffer rings", ok, msg, "5.19"))
        ok, msg = _multishot_accept()
        f.append(Check("multishot accept", ok, msg, "5.19"))
        ok, msg = _multishot_recv()
        f.append(Check("multishot recv", ok, msg, "6.0"))
        ok, msg = _multishot_recvmsg()
        f.append(Check("multishot recvmsg", ok, msg, "6.0"))
        f.append(Check("send_zc", "send_zc" in probe, "probe", "6.0"))
        ok, msg = _restricted_ring()
        f.append(Check("restricted rings (R_DISABLED)", ok, msg, "5.10"))
        ok, msg, iowq = _iowq_limits()
        f.append(Check("io-wq worker caps", ok, msg, "5.15"))
        ok, msg = _napi()
        f.append(Check("NAPI busy polling", ok, msg, "6.9"))
        for name, code, since in op_table():
            rep.opcodes.append(
                {"name": name, "code": code, "since": since, "supported": name in probe}
            )
        fok = {x.name: x.ok for x in f}
        if fok.get("DEFER_TASKRUN"):
            rep.recommended.append(
                "single_issuer=True, defer_taskrun=True for a ring used by one thread "
                "(fewer interrupts, batched completions)"
            )
        elif fok.get("COOP_TASKRUN"):
            rep.recommended.append("coop_taskrun=True")
        cpus = os.cpu_count() or 1
        if cpus <= 2:
            rep.recommended.append(
                f"no sqpoll: with {cpus} CPUs the poller takes a core from your program"
            )
        else:
            rep.recommended.append(
                "sqpoll=True only for sustained high-rate I/O with a spare core "
                "(sq_thread_cpu= pins it)"
            )
        if iowq is not None:
            rep.recommended.append(
                f"blocking work (buffered writes on ext4, fsyncs) runs on io-wq threads: up "
                f"to {iowq[0]} per submitting thread for files and {iowq[1]} for the rest; "
                "cap them with ring.iowq_max_workers(bounded=, unbounded=)"
            )
        if lim is not None and not cap and lim < (64 << 20):
            rep.recommended.append(
                f"RLIMIT_MEMLOCK is {_human(lim)}: keep registered buffers under it or "
                "raise it (ulimit -l)"
            )
    return rep


def render(rep: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()

    def mark(ok: bool | None) -> str:
        return {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]-[/]"}[ok]

    con.print(f"[bold]uringkit doctor[/] — kernel {rep.kernel}")
    t = Table(title="Production checklist", show_lines=False)
    t.add_column("check")
    t.add_column("ok", justify="center")
    t.add_column("detail")
    for ch in rep.checks:
        t.add_row(ch.name, mark(ch.ok), ch.detail)
    con.print(t)
    if rep.features:
        t = Table(title="Features (tried on this kernel)")
        t.add_column("feature")
        t.add_column("since", justify="right")
        t.add_column("here", justify="center")
        t.add_column("how we know")
        for ch in rep.features:
            t.add_row(ch.name, ch.since, mark(ch.ok), ch.detail)
        con.print(t)
    if rep.opcodes:
        t = Table(title="Opcodes (IORING_REGISTER_PROBE)")
        for _ in range(2):
            t.add_column("op")
            t.add_column("since", justify="right")
            t.add_column("", justify="center")
        rows = rep.opcodes
        third = (len(rows) + 1) // 2
        for i in range(third):
            cells: list[str] = []
            for j in range(2):
                k = i + j * third
                if k < len(rows):
                    o = rows[k]
                    cells += [o["name"], o["since"], mark(o["supported"])]
                else:
                    cells += ["", "", ""]
            t.add_row(*cells)
        con.print(t)
    if rep.recommended:
        con.print("[bold]Recommended ring flags here:[/]")
        for r in rep.recommended:
            con.print(f"  • {r}")
    if rep.io_uring_usable:
        con.print("[green]io_uring is usable.[/]")
    else:
        con.print(f"[red]io_uring is NOT usable:[/] {rep.reason}")
        con.print(f"uringkit will use: {rep.fallback}")


def main(directory: str = ".", as_json: bool = False) -> int:
    rep = gather(directory)
    if as_json:
        json.dump(rep.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(rep)
    return 0 if rep.io_uring_usable else 1
