"""Helpers shared by the benchmark scripts (run them as `python benches/<name>.py`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any


def make_file(directory: str, size: int, prefix: str = "uringkit-bench-") -> str:
    """A temporary file of `size` incompressible bytes in `directory`; the caller removes it."""
    fd, path = tempfile.mkstemp(prefix=prefix, dir=directory)
    chunk = os.urandom(1 << 20)
    done = 0
    while done < size:
        done += os.write(fd, chunk[: min(len(chunk), size - done)])
    os.close(fd)
    return path


def warm(path: str) -> None:
    """Read the file once so it sits in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    while os.read(fd, 1 << 22):
        pass
    os.close(fd)


def directory(path: str) -> str:
    """argparse type of a `--dir`: the directory, made if it does not exist yet (with
    its parents), or a usage error that says why it cannot be."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot use {path!r}: {e.strerror}") from None
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} is not a directory")
    return path


def kv_parser(doc: str | None, rounds: int, keys: int | None = None) -> argparse.ArgumentParser:
    """The kv benches' command line: `doc` as the help text, and the options they all
    take — `--rounds`, `--dir` (where the stores go), `--json` — plus `--keys` when a
    default is given."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if keys is not None:
        ap.add_argument("--keys", type=int, default=keys)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument(
        "--dir",
        type=directory,
        default=tempfile.gettempdir(),
        help="where the stores go (made if missing)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return ap


def emit_json(doc: object) -> None:
    """A run's results as one JSON document on stdout."""
    json.dump(doc, sys.stdout)
    print()


def round_line(r: int, cells: list[str], ratio: float | None = None, tail: str = "") -> str:
    """`round N: cell | cell | ratio× tail`, the line each round of a kv bench prints."""
    if ratio is not None:
        cells = [*cells, f"{ratio:.2f}×"]
    return f"round {r + 1}: " + " | ".join(cells) + tail


Row = dict[str, dict[str, Any]]


def alternating_rounds(
    rounds: int,
    names: list[str],
    run: Callable[[str], dict[str, Any]],
    line: Callable[[str, dict[str, Any]], str],
    summary: Callable[[Row], tuple[list[str], float | None, str]],
    quiet: bool,
) -> list[Row]:
    """Run every store once per round — in turn, and in reverse order every other round,
    so that a slow stretch of the machine lands on all of them — and return the rows
    ({store: its results} per round). Unless `quiet`: each store's `line` on stderr as
    it finishes, then the round's line (`summary`: its cells, ratio and tail)."""
    rows: list[Row] = []
    for r in range(rounds):
        row: Row = {}
        for name in names if r % 2 == 0 else names[::-1]:
            row[name] = run(name)
            if not quiet:
                print(f"  {name:8} {line(name, row[name])}", file=sys.stderr)
        rows.append(row)
        if not quiet:
            cells, ratio, tail = summary(row)
            print(round_line(r, cells, ratio, tail), flush=True)
    return rows


def kv_peers() -> list[str]:
    """ "xkv" and the peers installed (LevelDB via plyvel, RocksDB via rocksdict, LMDB),
    a note on stderr for each one that is not."""
    names = ["xkv"]
    for name, mod in (("leveldb", "plyvel"), ("rocksdb", "rocksdict"), ("lmdb", "lmdb")):
        try:
            __import__(mod)
            names.append(name)
        except ImportError:
            print(f"{mod} is not installed: {name} skipped", file=sys.stderr)
    return names


def print_medians(
    title: str, labels: dict[str, str], names: list[str], med: Row, lower: str
) -> None:
    """The median of each row (`labels`: key -> label) per store, with xkv's ratio to
    the best peer; the row `lower` is better lower (and printed with decimals)."""
    print(f"\n{title}")
    print(f"{'':22}" + "".join(f"{n:>14}" for n in names) + "   xkv vs best peer")
    for w, label in labels.items():
        vals = [med[n][w] for n in names]
        peers = vals[1:]
        low = w == lower
        ratio = ""
        if peers:
            best = min(peers) if low else max(peers)
            ratio = f"{(best / vals[0] if low else vals[0] / best):.2f}×"
        cells = "".join(f"{v:>14,.2f}" if low else f"{v:>14,.0f}" for v in vals)
        print(f"{label:22}{cells}   {ratio}")
