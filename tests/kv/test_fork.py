"""A store opened before `os.fork()`: the child shares the parent's files, lock and shared
mappings, with a copy of the store's memory frozen at the fork. It refuses to work there
(RuntimeError naming the fix), writes nothing when closed or collected there, and the
child does not keep the parent's store locked.

Each scenario runs in a fresh interpreter (not a fork of pytest's), which forks itself.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from uringkit import kv

# The parent buffers a write (durability "none": in the write buffer, not yet in the
# file), forks, then writes and syncs more while the child waits. Then the child tries
# every operation, closes its copy (and lets the garbage collector have another one),
# and reports. Before stores knew about forks, the child's close flushed its stale
# buffer and truncated the active segment at the end it knew — the parent's later
# records were gone — and wrote INDEX over the parent's view.
CHILD_OPS = r"""
import asyncio, gc, json, os, sys
from uringkit import kv

path, durability = sys.argv[1], sys.argv[2]
db = kv.open(path, durability=durability, segment_size=64 << 10)
other = kv.open(path + "-other", durability=durability)  # (collected, not closed)
for i in range(500):
    db.put(b"before%04d" % i, b"%d" % i * 20)
snap = db.snapshot()  # (a snapshot too: refused in the child, let go there harmlessly)
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(go_w)
    os.read(go_r, 1)  # the parent has written and synced more by now
    refused, served = [], []
    def attempt(name, f):
        try:
            f()
            served.append(name)
        except RuntimeError as e:
            refused.append(name)
            last["msg"] = str(e)
    ops = {
        "get": lambda: db.get(b"before0001"),
        "put": lambda: db.put(b"child", b"x"),
        "delete": lambda: db.delete(b"before0002"),
        "multi_get": lambda: db.multi_get([b"before0003"]),
        "batch": lambda: db.write([(b"child2", b"y")]),
        "contains": lambda: b"before0004" in db,
        "len": lambda: len(db),
        "keys": lambda: db.keys(),
        "stats": lambda: db.stats(),
        "check": lambda: db.check(),
        "compact": lambda: db.compact(),
        "sync": lambda: db.sync(),
        "snapshot": lambda: db.snapshot(),
        "snapshot get": lambda: snap.get(b"before0001"),
    }
    last = {"msg": ""}
    for name, f in ops.items():
        attempt(name, f)
    async def via_async():
        adb = kv.AsyncDB(db, durability)
        await adb.put(b"child3", b"z")
    attempt("async put", lambda: asyncio.run(via_async()))
    snap.close()
    del snap
    db.close()
    db.close()  # (idempotent)
    del other
    gc.collect()
    print(json.dumps({"refused": refused, "served": served, "msg": last["msg"]}), flush=True)
    os._exit(0)
os.close(go_r)
for i in range(3000):  # (past the child's end of the active segment, and further)
    db.put(b"after%04d" % i, b"%d" % i * 20)
db.sync()
os.write(go_w, b"g")
_, status = os.waitpid(pid, 0)
for i in range(100):
    db.put(b"late%03d" % i, b"L")
db.close()
other.close()
print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
"""


def _run(code: str, *args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("durability", ["none", "sync"])
def test_a_forked_child_refuses_the_store_and_writes_nothing(
    tmp_path: Path, durability: str
) -> None:
    path = str(tmp_path / "db")
    child, parent = _run(CHILD_OPS, path, durability)
    assert parent == {"status": 0}
    assert child["served"] == []
    assert len(child["refused"]) == 15  # (every operation, the async put too)
    msg = str(child["msg"])
    assert "is a fork of it" in msg and "open the store again" in msg, msg
    with kv.open(path) as db:
        assert db.recovery["torn_bytes"] == 0
        assert db.check() == (len(db), [])
        assert len(db) == 500 + 3000 + 100
        assert db.get(b"before0002") == b"2" * 20
        assert db.get(b"after2999") == b"2999" * 20
        assert db.get(b"late099") == b"L"
        assert db.get(b"child") is None and db.get(b"child3") is None


LOCK_HOLDER = r"""
import json, os, sys, time
from uringkit import kv

path = sys.argv[1]
db = kv.open(path, durability="sync")
db.put(b"k", b"parent")
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:  # a worker that never uses the store, alive until told
    os.close(go_w)
    os.read(go_r, 1)
    if sys.argv[2] == "reader":
        with kv.open(path, read_only=True) as r:
            print(json.dumps({"child read": r.get(b"k").decode()}), flush=True)
    os._exit(0)
os.close(go_r)
db.close()
reopened = kv.open(path, durability="sync")  # the child is still alive
reopened.put(b"k", b"reopened")
os.write(go_w, b"g")
os.waitpid(pid, 0)
reopened.close()
print(json.dumps({"reopened": True}), flush=True)
"""


def test_a_forked_child_does_not_keep_the_store_locked(tmp_path: Path) -> None:
    # (the flock belongs to the open file description, which a child shares: it used
    # to keep the parent from closing and opening its own store again while it lived)
    assert _run(LOCK_HOLDER, str(tmp_path / "db"), "idle") == [{"reopened": True}]


def test_a_forked_child_opens_the_store_read_only(tmp_path: Path) -> None:
    out = _run(LOCK_HOLDER, str(tmp_path / "db"), "reader")
    assert out == [{"child read": "reopened"}, {"reopened": True}]


def test_a_second_writer_in_a_child_is_still_refused(tmp_path: Path) -> None:
    code = r"""
import json, os, sys
from uringkit import kv
db = kv.open(sys.argv[1])
pid = os.fork()
if pid == 0:
    try:
        kv.open(sys.argv[1])
        print(json.dumps({"child": "opened"}), flush=True)
    except OSError as e:
        print(json.dumps({"child": e.errno}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
db.close()
"""
    assert _run(code, str(tmp_path / "db")) == [{"child": errno.EAGAIN}]


def test_stores_opened_in_the_child_work(tmp_path: Path) -> None:
    code = r"""
import json, os, sys
from uringkit import kv
first = kv.open(sys.argv[1] + "-a")
pid = os.fork()
if pid == 0:
    with kv.open(sys.argv[1] + "-b", durability="sync") as db:
        db.put(b"k", b"v")
        print(json.dumps({"child": db.get(b"k").decode()}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
first.put(b"k", b"w")
first.close()
"""
    assert _run(code, str(tmp_path / "db")) == [{"child": "v"}]
    with kv.open(str(tmp_path / "db-b")) as db:
        assert db.get(b"k") == b"v"
    assert os.path.exists(tmp_path / "db-a" / "INDEX")
