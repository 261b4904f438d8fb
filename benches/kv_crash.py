"""xkv's SIGKILL crash harness for as many rounds as asked (CI runs 30 in the test suite).

    python benches/kv_crash.py --rounds 200 [--mode threads|async] [--direct]
        [--durability sync|batch|none] [--power] [--dir .] [--json]

Each round runs a writer process (durability="sync" unless asked otherwise: under
SIGKILL "batch" and "none" promise the same, intent/ack log), SIGKILLs it at a
random moment (some during compaction), reopens the store and checks every acknowledged
write, every acknowledged delete, every record's CRC, and that the operation in flight
landed whole or not at all. Exit status 1 with the broken promise at the first failure.

--power makes each kill a power cut too: the store lives on a LazyFS mount
(uringkit.kv.lazyfs) that loses every byte not fsynced — whatever of it its writeback
had written stays, torn pages included. "sync" keeps every promise above through that;
"batch" and "none" must reopen to a point in time (mode threads: one writer's order);
with mode async, to a store with nothing damaged or invented.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import directory

from uringkit.kv.crashtest import CrashCheckFailed, Round, run_rounds


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--mode", choices=["threads", "async"], default="threads")
    ap.add_argument(
        "--dir", type=directory, default=".", help="where the stores go (made if missing)"
    )
    ap.add_argument("--direct", action="store_true", help="the writer appends with O_DIRECT")
    ap.add_argument(
        "--durability",
        choices=["sync", "batch", "none"],
        default="sync",
        help="the writer's durability (a killed process loses no acknowledged write in any)",
    )
    ap.add_argument(
        "--power",
        action="store_true",
        help="each kill is a power cut too: the store is on a LazyFS mount that loses what "
        "was not fsynced (root, /dev/fuse, mfusepy). sync: every promise above; batch "
        "(--mode threads): the store reopens to a point in the writer's operations; none, "
        "or batch with --mode async: it opens, nothing damaged or invented",
    )
    ap.add_argument("--json", action="store_true", help="one JSON summary on stdout")
    a = ap.parse_args()
    t0 = time.perf_counter()

    # (after a power cut of "batch"/"none", Round.landed counts the operations the
    # store came back with — a point in time — not in-flight ones that landed)
    to_a_point = a.power and a.durability != "sync"

    def progress(r: Round) -> None:
        landed = f"{r.landed} kept" if to_a_point else f"{r.landed} landed"
        print(
            f"\rround {r.seed + 1}/{a.rounds}: {r.acked} acknowledged, "
            f"{r.in_flight} in flight ({landed}), {r.checked_keys} keys checked",
            end="",
            file=sys.stderr,
            flush=True,
        )

    with tempfile.TemporaryDirectory(prefix="uringkit-kv-crash-", dir=a.dir) as d:
        try:
            rounds = run_rounds(
                Path(d) / "store", a.rounds, a.mode, progress, a.direct, a.durability, a.power
            )
        except CrashCheckFailed as e:
            print(f"\nFAILED: {e}", file=sys.stderr)
            return 1
    print(file=sys.stderr)
    summary = {
        "mode": a.mode,
        "direct": a.direct,
        "power": a.power,
        "durability": a.durability,
        "rounds": len(rounds),
        "acknowledged_ops": sum(r.acked for r in rounds),
        "in_flight_at_kill": sum(r.in_flight for r in rounds),
        ("ops_kept_at_a_point_in_time" if to_a_point else "in_flight_landed"): sum(
            r.landed for r in rounds
        ),
        "reopened_from_overlay": sum(r.from_overlay for r in rounds),
        "order_read_from_file": sum(r.order_from_file for r in rounds),
        "rounds_with_a_dictionary": sum(r.dictionary for r in rounds),
        "dictionaries_seen": len({d for r in rounds for d in r.dictionaries}),
        "most_dictionaries_at_once": max((len(r.dictionaries) for r in rounds), default=0),
        "backups_checked": sum(r.backups for r in rounds),
        "log_cuts_in_older_segments": sum(
            "a crash of the machine tore" in n for r in rounds for n in r.notes
        ),
        "backups_interrupted": sum("interrupted checkpoint" in n for r in rounds for n in r.notes),
        "keys_checked_last_round": rounds[-1].checked_keys if rounds else 0,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if a.json:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['rounds']} rounds ({a.mode}), {summary['acknowledged_ops']} acknowledged "
            f"operations checked, {summary['in_flight_at_kill']} caught in flight "
            + (
                f"(the power cuts kept {summary['ops_kept_at_a_point_in_time']} operations, "
                "each round's a prefix), "
                if to_a_point
                else f"({summary['in_flight_landed']} landed whole, the rest not at all), "
            )
            + f"{summary['reopened_from_overlay']} reopens from the live overlay, "
            f"{summary['order_read_from_file']} key-order checks read from ORDER, "
            f"{summary['rounds_with_a_dictionary']} rounds with a zstd dictionary in the "
            f"store ({summary['dictionaries_seen']} dictionaries in all, at most "
            f"{summary['most_dictionaries_at_once']} at once), a checkpoint found whole "
            f"{summary['backups_checked']} times ({summary['backups_interrupted']} "
            f"interrupted)"
            + (
                f", {summary['log_cuts_in_older_segments']} logs cut in an older segment"
                + ("" if a.durability == "sync" else ", every round at a point in time")
                + (" (each task's keys)" if to_a_point and a.mode == "async" else "")
                if a.power
                else ""
            )
            + ": no promise broken "
            f"({summary['seconds']} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
