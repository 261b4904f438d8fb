"""Crash safety for real (uringkit.kv.crashtest): a writer process puts with
durability="sync", logging an intent before each operation and an acknowledgement after
it returns; it is SIGKILLed at random moments (some during compaction). After each kill
the store is reopened: every acknowledged put must be there with its exact value, no
acknowledged delete may come back, nothing with a bad CRC may be served, and the
operation in flight at the kill landed whole or not at all. `benches/kv_crash.py` runs
the same harness for as many rounds as asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from uringkit.kv.crashtest import Round, run_rounds

from conftest import direct_file

ROUNDS = int(os.environ.get("URINGKIT_CRASH_ROUNDS", "30"))


@pytest.mark.timeout(900)
def test_sigkill_rounds(tmp_path: Path) -> None:
    rounds = run_rounds(tmp_path / "store", ROUNDS, "threads")
    assert len(rounds) == ROUNDS
    # the harness really exercised the store: writes acknowledged, reads checked
    assert sum(r.acked for r in rounds) > ROUNDS * 10
    assert rounds[-1].checked_keys > 100
    # checkpoints were taken (one round in five) and found whole at later checks
    assert ROUNDS < 10 or sum(r.backups for r in rounds) > 0
    # both recoveries ran: the live overlay a killed writer left (killed between
    # updates), and replay from INDEX (killed mid-update, or in the first round)
    overlay = sum(r.from_overlay for r in rounds)
    assert overlay < ROUNDS, overlay
    if overlay == 0:
        # Random kills reopen from the overlay in ~5-10 % of rounds (two in three
        # compact, which drops it), so 30 rounds without one happen (CI saw it once):
        # more rounds on a second store until one does.
        class Seen(Exception):
            pass

        def stop_at_overlay(r: Round) -> None:
            if r.from_overlay:
                raise Seen

        with pytest.raises(Seen):
            run_rounds(tmp_path / "more", 90, "threads", on_round=stop_at_overlay)


@pytest.mark.timeout(600)
def test_sigkill_rounds_async_tasks(tmp_path: Path) -> None:
    """Eight tasks write through the event loop's group commit and are killed mid-flight."""
    n = max(ROUNDS // 3, 5)
    rounds = run_rounds(tmp_path / "store", n, "async")
    assert all(r.acked > 0 for r in rounds)
    assert sum(r.in_flight for r in rounds) > 0  # kills really landed mid-operation


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["threads", "async"])
def test_sigkill_rounds_direct_io(tmp_path: Path, mode: str) -> None:
    """The same promises with O_DIRECT appends (block rewrites, zero-padded tails), from
    the blocking writer and from tasks writing block images on the loop's ring."""
    direct_file(tmp_path / "probe", b"x" * 4096)
    n = max(ROUNDS // 6, 5)
    rounds = run_rounds(tmp_path / "store", n, mode, direct=True)
    assert sum(r.acked for r in rounds) > n * 10


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["threads", "async"])
@pytest.mark.parametrize("durability", ["none", "batch"])
def test_sigkill_rounds_unsynced(tmp_path: Path, mode: str, durability: str) -> None:
    """durability="none"/"batch": a killed process loses no acknowledged write either —
    every write is in the page cache when it returns (before session 11 a "none" writer
    lost what waited in a 1 MiB buffer of the process)."""
    n = max(ROUNDS // 6, 5)
    rounds = run_rounds(tmp_path / "store", n, mode, durability=durability)
    assert sum(r.acked for r in rounds) > n * 10
