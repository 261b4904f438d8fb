"""`uringkit net bench` (the echo benchmark: uringkit's io_uring server against asyncio's
and uvloop's, same load, same run) and `uringkit net serve` (run the echo server).

The load is seed 001 §6's: 64 connections, 4 KiB messages, each connection sending its
next message once the whole echo is back (closed loop; every echo checked byte for
byte). Servers run in turn, in several rounds (the order reversed every other round),
each keeping its best round: this machine is shared and noisy. The load generator runs
on io_uring in this process. Servers: uringkit / uringkit-zc (the native io_uring
server, SEND / SEND_ZC, on a thread of this process); aio-sock / aio-sock-uvloop (a
coroutine per connection on uringkit.aio.sock_recv/sock_sendall, on asyncio's loop /
uvloop); uringkit-loop / uringkit-loop-sock (the Protocol server, its transport
receiving through the ring / the loop.sock_* coroutines on uringkit.loop, asyncio's loop
waiting on io_uring); uringkit-loop-selector (that Protocol server on uringkit.loop with
asyncio's readiness-based transports); the incumbents
asyncio / uvloop (an asyncio.Protocol that writes back what it receives) and
asyncio-sock / uvloop-sock (the same coroutines on loop.sock_recv/sock_sendall) — each
of those in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

from . import EchoServer, load

SERVERS = [
    "uringkit",
    "uringkit-zc",
    "aio-sock",
    "aio-sock-uvloop",
    "uringkit-loop",
    "uringkit-loop-sock",
    "uringkit-loop-selector",
    "aio-sock-uringkit-loop",
    "asyncio",
    "uvloop",
    "asyncio-sock",
    "uvloop-sock",
]
INCUMBENTS = ["asyncio", "uvloop", "asyncio-sock", "uvloop-sock"]
#: served by the native EchoServer in this process; every other kind is a peers.py process
NATIVE = ["uringkit", "uringkit-zc"]


def _peer(kind: str) -> tuple[subprocess.Popen[str], int]:
    p = subprocess.Popen(
        [sys.executable, "-m", "uringkit.net.peers", kind, "127.0.0.1", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.strip():
        p.wait()
        err = p.stderr.read().strip() if p.stderr else ""
        raise RuntimeError(f"{kind} server did not start: {err.splitlines()[-1:] or '?'}")
    return p, int(line)


def _cpu_clock(pid: int = 0, tid: int = 0) -> int:
    """The kernel's CPU-time clock of process `pid` or thread `tid` (Linux encodes them as
    negative clock ids: what pthread_getcpuclockid/clock_getcpuclockid return), read
    with time.clock_gettime in nanoseconds of scheduler time — /proc's utime + stime
    count 10 ms ticks, which a short run's server may not reach at all."""
    return ((~tid) << 3) | 6 if tid else ((~pid) << 3) | 2


def _echo_thread_clock() -> int:
    """The CPU clock of this process's native echo server thread."""
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().strip() == "uringkit-echo":
                return _cpu_clock(tid=int(tid))
    raise RuntimeError("the echo server thread is not running")


def _measure(addr: tuple[str, int], clock: int, a: argparse.Namespace) -> dict[str, float]:
    """A warm-up load, then the measured one with the server's CPU time around it."""
    load(addr, connections=a.connections, size=a.size, seconds=a.warmup or 0.01, warmup=0)
    c0 = time.clock_gettime(clock)
    r = load(addr, connections=a.connections, size=a.size, seconds=a.seconds, warmup=0)
    cpu = time.clock_gettime(clock) - c0
    r["server_cpu_us_per_request"] = cpu * 1e6 / max(1.0, r["requests"])
    return r


def run_one(kind: str, a: argparse.Namespace) -> dict[str, float]:
    if kind in NATIVE:
        with EchoServer(zero_copy=kind == "uringkit-zc") as srv:
            r = _measure(srv.address, _echo_thread_clock(), a)
            st = srv.stats()
        r["server_enters_per_request"] = st["enters"] / max(1, st["recvs"])
        return r
    p, port = _peer(kind)
    try:
        return _measure(("127.0.0.1", port), _cpu_clock(pid=p.pid), a)
    finally:
        p.kill()
        p.wait()


def available(kind: str) -> bool:
    if "uvloop" in kind:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return False
    return True


def _reference(kind: str, inc: list[str]) -> list[str]:
    """What a server is compared with: aio.sock_* servers with the loop.sock_* ones (the
    same code, another I/O path); the native server with every incumbent."""
    if kind.startswith("aio-sock") or kind == "uringkit-loop-sock":
        return [k for k in inc if k.endswith("-sock")]
    if kind in ("uringkit-loop", "uringkit-loop-selector"):
        return [k for k in inc if not k.endswith("-sock")]
    return inc


def table(con: Console, res: dict[str, dict[str, float]], a: argparse.Namespace) -> None:
    inc = [k for k in INCUMBENTS if k in res]
    t = Table(
        title=f"uringkit net bench: echo, {a.connections} connections x {a.size} B "
        "(ratios against the best of the incumbents named in 'against'; > 1: better)"
    )
    cols = ["server", "requests/s", "p50 µs", "p99 µs", "server CPU µs/req"]
    for c in cols + ["req/s", "p99", "CPU", "against"]:
        t.add_column(c, justify="left" if c in ("server", "against") else "right")

    def ratio(x: float, best: float, higher: bool) -> str:
        if not x or not best:
            return "-"
        return f"{(x / best if higher else best / x):.2f}×"

    for k, r in res.items():
        ref = [] if k in inc else _reference(k, inc)
        cpu = r["server_cpu_us_per_request"]
        cells = ["", "", "", ""]
        if ref:
            best_rps = max(res[i]["requests_per_s"] for i in ref)
            best_p99 = min(res[i]["p99_us"] for i in ref)
            best_cpu = min(res[i]["server_cpu_us_per_request"] for i in ref)
            cells = [
                ratio(r["requests_per_s"], best_rps, True),
                ratio(r["p99_us"], best_p99, False),
                ratio(cpu, best_cpu, False),
                "loop.sock_* servers"
                if ref[0].endswith("-sock")
                else ("Protocol servers" if len(ref) < len(inc) else "every incumbent"),
            ]
        t.add_row(
            k,
            f"{r['requests_per_s']:,.0f}",
            f"{r['p50_us']:.0f}",
            f"{r['p99_us']:.0f}",
            f"{cpu:.1f}",
            *cells,
        )
    con.print(t)
    con.print(
        "server CPU µs/req: the server's own CPU time (its CPU clock, user + system) per "
        "echoed request — what the server costs, whoever else shares the machine. On a "
        "machine with few cores the load generator competes with the server for them, "
        "and requests/s and latency measure both."
    )


def bench(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="uringkit net bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  uringkit net bench\n"
        "  uringkit net bench --connections 16 --size 65536 --seconds 5 --json net.json\n"
        "  uringkit net bench --servers uringkit uvloop --rounds 5",
    )
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--size", type=int, default=4096, help="message size in bytes")
    ap.add_argument("--seconds", type=float, default=2.0, help="measured time per server")
    ap.add_argument("--warmup", type=float, default=0.5, help="unmeasured time before it")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the servers (best kept)")
    ap.add_argument("--servers", nargs="+", choices=SERVERS, default=SERVERS)
    ap.add_argument("--json", dest="json_out", help="write the results as JSON here")
    a = ap.parse_args(argv)
    if a.connections < 1 or a.size < 1 or a.seconds <= 0 or a.warmup < 0 or a.rounds < 1:
        ap.error("--connections, --size, --rounds must be >= 1, --seconds > 0, --warmup >= 0")
    con = Console(stderr=True)
    kinds = [k for k in a.servers if available(k)]
    for k in a.servers:
        if k not in kinds:
            con.print(f"[yellow]{k}: not installed (pip install 'uringkit[bench]'), skipped")
    res: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for rnd in range(a.rounds):
        order = kinds if rnd % 2 == 0 else kinds[::-1]
        for k in order:
            con.print(f"round {rnd + 1}/{a.rounds}: {k}…", end=" ")
            r = run_one(k, a)
            con.print(f"{r['requests_per_s']:,.0f} req/s, p99 {r['p99_us']:.0f} µs")
            if k not in res or r["requests_per_s"] > res[k]["requests_per_s"]:
                res[k] = r
    out = Console()
    if not out.is_terminal:
        out = Console(width=110)  # (a pipe or a log: the table at full width)
    table(out, {k: res[k] for k in kinds if k in res}, a)
    con.print(f"{time.perf_counter() - t0:.0f} s")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"config": vars(a), "results": res}, f, indent=1)
        con.print(f"wrote {a.json_out}")
    return 0


def serve(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="uringkit net serve",
        description="Run the io_uring echo server until Ctrl-C, printing its counters "
        "every second.",
        epilog="examples:\n  uringkit net serve --port 7000\n"
        "  uringkit net serve --host 0.0.0.0 --port 7000 --zero-copy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=7000)
    ap.add_argument("--zero-copy", action="store_true", help="send with SEND_ZC")
    ap.add_argument("--buffers", type=int, default=2048)
    ap.add_argument("--buffer-size", type=int, default=4096)
    a = ap.parse_args(argv)
    with EchoServer(
        (a.host, a.port),
        zero_copy=a.zero_copy,
        buffers=a.buffers,
        buffer_size=a.buffer_size,
    ) as srv:
        print(f"echo on {srv.address[0]}:{srv.address[1]} (Ctrl-C stops)", flush=True)
        try:
            while srv.running:
                time.sleep(1)
                print(json.dumps(srv.stats()), flush=True)
        except KeyboardInterrupt:
            pass
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "bench":
        return bench(argv[1:])
    if argv and argv[0] == "serve":
        return serve(argv[1:])
    print(
        "usage: uringkit net bench|serve [--help]\n\n"
        "  bench  the echo benchmark against asyncio and uvloop (uringkit net bench --help)\n"
        "  serve  run the io_uring echo server (uringkit net serve --help)\n\n"
        "examples:\n  uringkit net bench\n  uringkit net serve --port 7000",
        file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout,
    )
    return 0 if argv and argv[0] in ("-h", "--help") else 2
