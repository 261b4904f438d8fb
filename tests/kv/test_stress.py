"""Model-checked random runs (uringkit.kv.stress, `uringkit kv stress`): every
configuration, two seeds each; every answer of the store compared with a dict's. The
seeds are fixed, so a failure here replays with
`uringkit kv stress --config NAME --seed SEED --steps STEPS`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from uringkit.kv.stress import CONFIGS, Mismatch, _Run, direct_supported, run

STEPS = int(os.environ.get("URINGKIT_STRESS_STEPS", "1500"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_operations_agree_with_a_dict(tmp_path: Path, name: str, seed: int) -> None:
    cfg = CONFIGS[name]
    if cfg.direct and not direct_supported(tmp_path):
        pytest.skip(f"no O_DIRECT in {tmp_path}")
    rep = run(tmp_path / "store", cfg, seed=seed, steps=STEPS)
    assert rep.steps == STEPS
    # the run really did what it is for: every kind of operation, stores left non-empty
    assert set(rep.ops) >= {"put", "delete", "batch", "reopen", "compact", "threads", "tasks"}
    assert rep.keys > 0
    if cfg.auto_compact is not None:
        assert rep.auto_compactions > 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("small_fs", ["2m"], indirect=True)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_operations_on_a_full_disk(small_fs: Path, name: str) -> None:
    """The same runs on a 2 MiB tmpfs, which they fill up again and again: a write, a
    compaction or a checkpoint that fails with ENOSPC must have changed nothing (the
    model keeps what it had), everything acknowledged must stay, and every reopen must
    find the store whole. (It found two bugs at once, session 30: a durable write that
    failed after rolling the segment over left the next write at the old segment's
    length — a hole, read at the next open as a torn tail, dropping acknowledged puts —
    and replaying a segment with a hole on a full tmpfs died of SIGBUS; then an O_DIRECT
    write the disk took part of failing without an errno.)"""
    if CONFIGS[name].direct and not direct_supported(small_fs):
        pytest.skip("no O_DIRECT on tmpfs here (kernels before 6.6)")
    failed = 0
    for seed in (0, 2, 4, 6, 8, 10):
        if seed > 2 and failed:
            break  # (more seeds only until one has filled the disk)
        rep = run(small_fs / "store", CONFIGS[name], seed=seed, steps=1000, full_disk=True)
        assert rep.steps == 1000 and rep.keys > 0
        failed += rep.ops["enospc"]
    assert failed > 0  # the disk did fill up


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["none", "sync-direct", "sync-pwrite"])
def test_random_operations_on_a_full_ext4(small_ext4: Path, name: str) -> None:
    """The same on a 4 MiB ext4 filesystem (a loop device): O_DIRECT appends, fallocate
    and ext4's own ENOSPC (at the write, from its block reservations) on a full disk."""
    failed = 0
    for seed in (0, 1, 3, 5, 7):
        if seed > 1 and failed:
            break  # (more seeds only until one has filled the disk)
        rep = run(small_ext4 / "store", CONFIGS[name], seed=seed, steps=1000, full_disk=True)
        assert rep.steps == 1000 and rep.keys > 0
        failed += rep.ops["enospc"]
    assert failed > 0


def test_a_wrong_answer_is_reported_with_its_trace(tmp_path: Path) -> None:
    """The checker is not blind: a store changed behind the model's back is caught, and
    the report names the seed, the step and the operations before it."""
    r = _Run(tmp_path / "store", CONFIGS["none"], seed=3, trace=10)
    try:
        for _ in range(50):
            r.step_once()
        k = next(iter(r.model))
        r.db.put(k, r.model[k] + b"!")  # not told to the model
        with pytest.raises(
            Mismatch, match=r"(?s)seed 3 \[durability=none\], step \d+: .*last operations"
        ):
            r.op_listing()
    finally:
        r.db.close()
        if r.follower is not None:
            r.follower.close()
