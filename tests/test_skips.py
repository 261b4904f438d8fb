"""What this kernel lacks, listed once, so a CI log shows every skip's cause."""

from __future__ import annotations

from uringkit._native import kernel_release, op_table

from conftest import PROBED

USED_BY_TESTS = {
    "nop",
    "read",
    "write",
    "readv",
    "writev",
    "read_fixed",
    "write_fixed",
    "fsync",
    "fallocate",
    "openat",
    "close",
    "statx",
    "splice",
    "tee",
    "accept",
    "connect",
    "recv",
    "send",
    "send_zc",
    "sendmsg",
    "recvmsg",
    "shutdown",
    "socket",
    "timeout",
    "link_timeout",
    "cancel",
    "provide_buffers",
}


def test_list_missing_ops() -> None:
    if PROBED is None:
        print("io_uring unavailable: every ring test skips")
        return
    since = {name: s for name, _, s in op_table()}
    missing = sorted(USED_BY_TESTS - PROBED)
    for m in missing:
        print(f"kernel {kernel_release()} lacks {m} (added in {since.get(m, '?')})")
    assert {name for name, _, _ in op_table()} >= USED_BY_TESTS
