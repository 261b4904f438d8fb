"""A UDP echo server (an asyncio.DatagramProtocol) on uringkit.loop against the same
server on asyncio's loop and uvloop, in one run.

    python benches/udp_echo.py [--requests 50000] [--clients 1] [--size 64] [--rounds 3]

Each server runs in its own process; the load is `--clients` blocking UDP sockets in
this process, each sending its next datagram once its echo is back (closed loop, every
echo checked), round-robin over the clients. Reported per server: requests/s and the
server's CPU time per request (user + system, from /proc/PID/stat) — what the server
costs, whoever else shares the machine. Servers run in turn, the order reversed every
other round, each keeping its best round (this machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

SERVER = r"""
import asyncio, os, sys
kind = sys.argv[1]
class Echo(asyncio.DatagramProtocol):
    def connection_made(self, t):
        self.t = t
    def datagram_received(self, d, a):
        self.t.sendto(d, a)
async def main():
    loop = asyncio.get_running_loop()
    t, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    print(t.get_extra_info("sockname")[1], type(t).__name__, flush=True)
    await asyncio.Event().wait()
if kind == "uvloop":
    import uvloop
    uvloop.run(main())
elif kind.startswith("uringkit"):
    import uringkit.loop
    loop = uringkit.loop.new_event_loop(ring_transports=kind == "uringkit-loop")
    loop.run_until_complete(main())
else:
    asyncio.run(main())
"""

KINDS = ["asyncio", "uvloop", "uringkit-loop", "uringkit-loop-selector"]


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def one(kind: str, requests: int, clients: int, size: int) -> dict[str, float | str]:
    p = subprocess.Popen([sys.executable, "-c", SERVER, kind], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        port_s, transport = p.stdout.readline().split()
        addr = ("127.0.0.1", int(port_s))
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(clients)]
        for s in socks:
            s.connect(addr)
            s.settimeout(5)
        msg = os.urandom(size)
        for _ in range(1000):  # warm-up
            for s in socks:
                s.send(msg)
            for s in socks:
                s.recv(size + 1)
        tick = os.sysconf("SC_CLK_TCK")
        c0, t0 = cpu_ticks(p.pid), time.perf_counter()
        rounds = max(1, requests // clients)
        for _ in range(rounds):
            for s in socks:
                s.send(msg)
            for s in socks:
                if s.recv(size + 1) != msg:
                    raise RuntimeError(f"{kind}: wrong echo")
        el = time.perf_counter() - t0
        c1 = cpu_ticks(p.pid)
        n = rounds * clients
        for s in socks:
            s.close()
        return {
            "transport": transport,
            "requests_per_s": n / el,
            "cpu_us_per_request": (c1 - c0) / tick / n * 1e6,
        }
    finally:
        p.kill()
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--clients", type=int, default=1, help="datagrams in flight")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", nargs="+", default=KINDS, choices=KINDS)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    best: dict[str, dict[str, float | str]] = {}
    for r in range(a.rounds):
        order = a.servers if r % 2 == 0 else a.servers[::-1]
        for k in order:
            got = one(k, a.requests, a.clients, a.size)
            old = best.get(k)
            if old is None or float(got["cpu_us_per_request"]) < float(old["cpu_us_per_request"]):
                best[k] = got
    if a.json:
        print(json.dumps(best, indent=2))
        return 0
    ref = (
        min(float(best[k]["cpu_us_per_request"]) for k in ("asyncio", "uvloop") if k in best)
        if any(k in best for k in ("asyncio", "uvloop"))
        else None
    )
    print(
        f"UDP echo, {a.clients} datagram(s) in flight x {a.size} B, best of {a.rounds} "
        "rounds (server CPU per request: lower is better)"
    )
    head = ("server", "transport", "req/s", "CPU us/req", "vs best incumbent")
    print(f"{head[0]:24s} {head[1]:28s} {head[2]:>10s} {head[3]:>11s} {head[4]:>18s}")
    for k in a.servers:
        b = best[k]
        cpu = float(b["cpu_us_per_request"])
        ratio = f"{ref / cpu:.2f}x" if ref and not k.startswith(("asyncio", "uvloop")) else ""
        rps = float(b["requests_per_s"])
        print(f"{k:24s} {b['transport']!s:28s} {rps:10,.0f} {cpu:11.1f} {ratio:>18s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
