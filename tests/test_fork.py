"""A Ring created before `os.fork()`: its queues are shared with the child. The child's
calls raise RuntimeError naming the fix, and closing it there (or the garbage collector)
neither cancels the parent's operations nor takes their completions.

The scenario runs in a fresh interpreter (not a fork of pytest's), which forks itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCENARIO = r"""
import gc, json, os
from uringkit import Ring

r1, r2 = Ring(8), Ring(8)
p1, p2 = os.pipe(), os.pipe()
buf1, buf2 = bytearray(5), bytearray(5)
r1.read(p1[0], buf1, 0, user_data=1)  # in flight: nothing to read yet
r2.read(p2[0], buf2, 0, user_data=2)
r1.submit(), r2.submit()
pid = os.fork()
if pid == 0:
    refused, msg = [], ""
    for name, f in {
        "nop": lambda: r1.nop(user_data=9),
        "submit": lambda: r1.submit(),
        "wait": lambda: r1.wait(1, timeout=0.1),
        "completions": lambda: r1.completions(),
        "fileno": lambda: r1.fileno(),
        "register_files": lambda: r1.register_files([p1[0]]),
    }.items():
        try:
            f()
        except RuntimeError as e:
            refused.append(name)
            msg = str(e)
    r1.close()  # (before: cancelled everything in flight — the parent's read)
    r1.close()
    del r2  # (collected: the same)
    gc.collect()
    print(json.dumps({"refused": refused, "msg": msg}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
os.write(p1[1], b"hello")
os.write(p2[1], b"world")
got = []
for r in (r1, r2):
    (c,) = r.wait(1, timeout=10)
    got.append([c.user_data, c.res])
print(json.dumps({"parent": got, "data": [bytes(buf1).decode(), bytes(buf2).decode()]}))
r1.close(), r2.close()
child_ring = os.fork()
if child_ring == 0:  # a Ring made in the child works
    with Ring(4) as r:
        r.nop(user_data=5)
        (c,) = r.wait(1, timeout=10)
    print(json.dumps({"child ring": [c.user_data, c.res]}), flush=True)
    os._exit(0)
os.waitpid(child_ring, 0)
"""


def test_a_forked_child_refuses_the_ring_and_leaves_the_parents_ops_alone() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCENARIO], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    child, parent, child_ring = (json.loads(line) for line in out.stdout.splitlines())
    assert child["refused"] == ["nop", "submit", "wait", "completions", "fileno", "register_files"]
    assert "is a fork of it" in child["msg"] and "create a new Ring" in child["msg"]
    assert parent == {"parent": [[1, 5], [2, 5]], "data": ["hello", "world"]}
    assert child_ring == {"child ring": [5, 0]}
