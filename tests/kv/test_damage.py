"""Damaged stores, at random: bits flipped, bytes zeroed, files cut short or removed.

Whatever the damage, a store either refuses to open (an OSError naming the file), or
opens and then never serves a value that was not written for its key; without
`repair=True` a damaged record is refused when read (OSError naming the segment and
the CRC) and anything else it serves is exactly what was last written — no key lost,
stale or back from the dead without a warning. With `repair=True` it opens, reads
everything it lists, and `check()` finds nothing left to complain about. A read-only
open, first, holds to the same and leaves every file byte for byte as it was.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from uringkit import kv


class Base:
    """A store over 19 segments of 64 KiB: puts, overwrites, deletes and batches, the
    first half compacted (segments with hint files), closed (INDEX written, unless
    `index_snapshot` is off: then only the records' durable marks say what was synced).
    With `compression="zstd"` the values are JSON-like text, compressed against the
    dictionary the store trains (`DICT-*`, one more file to damage)."""

    def __init__(
        self, path: Path, durability: str, index_snapshot: bool, compression: str | None
    ) -> None:
        rng = random.Random(1)
        self.path = path
        self.durability, self.index_snapshot = durability, index_snapshot
        self.compression = compression
        self.hist: dict[bytes, set[bytes]] = {}  # every value each key ever had
        self.last: dict[bytes, bytes] = {}
        opts = self.opts() | {"segment_size": 64 << 10}

        def value(n: int) -> bytes:
            if compression is None:
                return rng.randbytes(n)
            words = [b"alpha", b"beta", b"gamma", b"delta", b"%d" % rng.randrange(1000)]
            text = b" ".join(rng.choice(words) for _ in range(n // 6))
            return b'{"user": "u%05d", "note": "%s"}' % (rng.randrange(99999), text)

        with kv.open(path, **opts) as db:
            for i in range(3000):
                k = b"k%05d" % rng.randrange(1500)
                r = rng.random()
                if r < 0.1 and k in self.last:
                    db.delete(k)
                    del self.last[k]
                elif r < 0.2:
                    with db.batch() as b:
                        for _ in range(5):
                            bk, bv = (
                                b"b%05d" % rng.randrange(500),
                                value(rng.randrange(1, 300)),
                            )
                            b.put(bk, bv)
                            self.note(bk, bv)
                else:
                    v = value(rng.randrange(400))
                    db.put(k, v)
                    self.note(k, v)
                if i == 1500:
                    db.compact()
            if compression is not None:
                # (trained in the background from the first 1,000 values: it may still
                # be training — the compaction above did not wait — so wait, then
                # compact again so that every value is compressed against it)
                deadline = time.monotonic() + 30
                while db.stats()["compression_dictionary"] <= 1 and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert db.stats()["compression_dictionary"] > 1, "no dictionary trained"
                db.compact()

    def opts(self) -> dict[str, Any]:
        """How every open of this store (and its damaged copies) is made."""
        return {
            "durability": self.durability,
            "index_snapshot": self.index_snapshot,
            "compression": self.compression,
        }

    def note(self, k: bytes, v: bytes) -> None:
        self.hist.setdefault(k, set()).add(v)
        self.last[k] = v


@pytest.fixture(
    scope="module",
    params=[("none", True, None), ("sync", False, None), ("none", True, "zstd")],
    ids=str,
)
def base(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Base:
    return Base(tmp_path_factory.mktemp("damage") / "base", *request.param)


def damage(d: Path, rng: random.Random) -> str:
    """Damage one file of the store in `d` at random; says how."""
    name = rng.choice(sorted(f for f in os.listdir(d) if f != "LOCK"))
    p = d / name
    size = p.stat().st_size
    how = rng.choice(["flip", "flip", "zero", "cut", "remove"] if size else ["remove"])
    if how == "remove":
        p.unlink()
        return f"removed {name}"
    with open(p, "r+b") as f:
        if how == "flip":
            at = [rng.randrange(size) for _ in range(rng.choice([1, 1, 2, 8]))]
            for o in at:
                f.seek(o)
                b = f.read(1)[0] ^ (1 << rng.randrange(8))
                f.seek(o)
                f.write(bytes([b]))
            return f"flipped bits of {name} at {at}"
        o = rng.randrange(size)
        if how == "zero":
            n = min(rng.randrange(1, 64), size - o)
            f.seek(o)
            f.write(bytes(n))
            return f"zeroed {name}[{o}:{o + n}]"
        f.truncate(o)
        return f"cut {name} from {size} to {o} bytes"


def read_all(db: kv.DB) -> tuple[dict[bytes, bytes], list[str]]:
    """Every listed key's value, and the errors reading some of them raised."""
    out, errors = {}, []
    for k in list(db.keys()):
        try:
            v = db.get(k)
        except OSError as e:
            errors.append(str(e))
            continue
        assert v is not None, f"{k!r} listed but not there"
        out[k] = v
    return out, errors


@pytest.mark.parametrize("seed", range(4))
def test_random_damage_is_refused_or_reported_never_served(
    base: Base, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    for trial in range(15):
        d = tmp_path / f"t{trial}"
        shutil.copytree(base.path, d)
        what = damage(d, rng)
        read_only(base, d, f"trial {trial}: {what}, read_only")
        for repair in (False, True):
            t = tmp_path / f"t{trial}-{repair}"
            shutil.copytree(d, t)
            ctx = f"trial {trial}: {what}, repair={repair}"
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                try:
                    db = kv.open(t, repair=repair, **base.opts())
                except OSError as e:
                    assert not repair, f"{ctx}: repair could not open: {e}"
                    assert ".seg" in str(e) or "INDEX" in str(e), f"{ctx}: {e}"
                    continue
            warned = [str(x.message) for x in w]
            with db:
                out, errors = read_all(db)
                bad = db.check()[1]
                if repair and not errors and not bad:
                    # A repaired store compacts: its damaged bytes are still in the
                    # files, where the segment scan stops; the index lists the rest.
                    db.compact()
                    again, errors = read_all(db)
                    assert again == out, f"{ctx}: compaction after repair changed values"
                    bad = db.check()[1]
            check_served(base, out, ctx)
            if repair:
                assert not errors and not bad, f"{ctx}: after repair {errors[:2]} {bad[:2]}"
                continue
            # (a record whose value was compressed against a damaged or missing DICT-*
            # is refused the same way, naming the dictionary)
            named = [e for e in errors if ".seg" in e and ("CRC" in e or "DICT-" in e)]
            assert named == errors, f"{ctx}: {errors[:2]}"
            assert len(bad) >= len(errors), f"{ctx}: check() found {bad}, reads {errors}"
            if not warned:
                refused = len(errors)
                assert len(out) + refused == len(base.last), f"{ctx}: keys lost or back silently"
                stale = [k for k, v in out.items() if base.last.get(k) != v]
                assert not stale, f"{ctx}: stale values served silently: {stale[:3]}"


def read_only(base: Base, d: Path, ctx: str) -> None:
    """A read-only open of the damaged store refuses it or serves only what was written,
    and leaves every file as it was, whatever it finds."""
    files = {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            db = kv.open(d, read_only=True)
        except OSError as e:
            assert ".seg" in str(e) or "INDEX" in str(e), f"{ctx}: {e}"
            db = None
        if db is not None:
            with db:
                out, errors = read_all(db)
            check_served(base, out, ctx)
            assert all(".seg" in e or "INDEX" in e for e in errors), f"{ctx}: {errors[:2]}"
    after = {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}
    assert after == files, f"{ctx}: the read-only open changed the store's files"


def check_served(base: Base, out: dict[bytes, Any], ctx: str) -> None:
    for k, v in out.items():
        assert v in base.hist.get(k, ()), f"{ctx}: {k!r} served a value never written for it"
