"""`kv.open(compression="lz4" | "zstd")`: values stored compressed when that pays, read
back exactly by every read path (get, multi_get cold and hot, iterator, items), kept
compressed by compaction, checked by check(), readable with compression off, and
refused as damaged — never served compressed — when a record lies about it. zstd's
dictionary: trained on the store's values, kept in `DICT-<id>`, used after that, found
by a reopen, a read-only follower and a checkpoint; missing, it is named in the error."""

from __future__ import annotations

import json
import random
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from uringkit import kv

from conftest import evict_file


def _values(n: int) -> dict[bytes, bytes]:
    rng = random.Random(5)
    out = {}
    for i in range(n):
        kind = i % 4
        if kind == 0:  # JSON: compresses well
            v = json.dumps({"id": i, "name": f"user{i}", "tags": ["a", "b"] * 20}).encode()
        elif kind == 1:  # random: stored as it is
            v = rng.randbytes(rng.randrange(64, 3000))
        elif kind == 2:  # short: never compressed
            v = b"s%d" % i
        else:  # large and repetitive (a block of a log file)
            v = (b"2026-12-03 INFO request served in %d ms\n" % (i % 97)) * 300
        out[b"k%06d" % i] = v
    return out


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir() if f.suffix == ".seg")


def _drop_cache(p: Path) -> None:
    for f in p.iterdir():
        evict_file(f)


COMPRESSIONS = ["lz4", "zstd"]


@pytest.mark.parametrize("how", COMPRESSIONS)
@pytest.mark.parametrize("durability", ["none", "sync"])
def test_every_read_path_gives_back_the_values(tmp_path: Path, durability: str, how: str) -> None:
    want = _values(2000)
    p = tmp_path / "db"
    plain = tmp_path / "plain"
    with kv.open(plain, durability="none") as db:
        db.write(list(want.items()))
    with kv.open(p, durability=durability, compression=how, segment_size=1 << 20) as db:
        items = list(want.items())
        db.write(items[:1000])  # a batch
        for k, v in items[1000:1500]:
            db.put(k, v)
        db.put(b"big", want[b"k000003"] * 200)  # 3.3 MB of log lines
        want[b"big"] = want[b"k000003"] * 200
        for k, v in items[1500:]:
            db[k] = bytearray(v)
        st = db.stats()
        assert st["compressed_values"] == 1001  # the JSON and the log blocks, not the rest
        assert st["compression_saved_bytes"] > 0.8 * 500 * len(want[b"k000003"])
        assert all(db.get(k) == v for k, v in want.items())
        keys = list(want)
        assert db.multi_get(keys) == [want[k] for k in keys]
        assert dict(db.iterator()) == want
        assert dict(db.items()) == want
        assert db.check() == (len(want), [])
    assert _size(p) < 0.45 * _size(plain)
    _drop_cache(p)
    # reopened without compression: the values come back; the cold path (a batch of
    # io_uring reads of whole records) decompresses too
    with kv.open(p, durability=durability) as db:
        assert db.multi_get(keys[:500]) == [want[k] for k in keys[:500]]
        assert all(db.get(k) == v for k, v in want.items())
        db.put(b"k000000", want[b"k000000"])  # stored plainly now
        assert db.stats()["compressed_values"] == 0


@pytest.mark.parametrize("how", COMPRESSIONS)
def test_direct_appends_compress_too(tmp_path: Path, how: str) -> None:
    """O_DIRECT appends (aligned buffers, the mirror of the active segment's tail) carry
    compressed records like buffered ones; compaction and a plain reopen read them."""
    want = _values(1000) | {b"d%06d" % j: _doc(j) for j in range(1500)}
    p = tmp_path / "db"
    with kv.open(p, durability="sync", compression=how, direct=True, segment_size=1 << 20) as db:
        items = list(want.items())
        db.write(items[:500])
        for k, v in items[500:]:
            db.put(k, v)
        assert db.stats()["direct"] == 1 and db.stats()["compressed_values"] > 1000
        assert all(db.get(k) == v for k, v in want.items())
        db.compact()
        assert dict(db.items()) == want and db.check() == (len(want), [])
    with kv.open(p, read_only=True) as db:
        assert dict(db.items()) == want


@pytest.mark.parametrize("how", COMPRESSIONS)
def test_compaction_keeps_values_compressed(tmp_path: Path, how: str) -> None:
    want = _values(1200)
    p = tmp_path / "db"
    with kv.open(p, durability="none", compression=how, segment_size=256 << 10) as db:
        db.write(list(want.items()))
        for k in list(want)[::3]:  # a third overwritten: segments to compact
            want[k] = want[k][::-1]
            db.put(k, want[k])
        before = _size(p)
        retired, _ = db.compact()
        assert retired > 0
        assert dict(db.iterator()) == want
        assert db.check() == (len(want), [])
        assert _size(p) < before
    with kv.open(p, compression=how) as db:
        assert dict(db.items()) == want


@pytest.mark.parametrize("how", COMPRESSIONS)
def test_async_store_compresses_too(tmp_path: Path, how: str) -> None:
    import asyncio

    v = b'{"a": "' + b"x" * 500 + b'"}'

    async def go() -> int:
        async with kv.open_async(tmp_path / "db", compression=how) as db:
            await asyncio.gather(*(db.put(b"k%d" % i, v) for i in range(50)))
            assert await db.get(b"k7") == v
            return db.db.stats()["compressed_values"]

    assert asyncio.run(go()) == 50
    with kv.open(tmp_path / "db") as db:
        assert db[b"k49"] == v


def test_a_record_that_lies_about_compression_is_damage(tmp_path: Path) -> None:
    """A compressed record is format version 2 with flag bit 1; a version-1 record with
    the flag, or a version-2 one without it, is damaged: reported, never decompressed or
    served as it is."""
    p = tmp_path / "db"
    v = b"abc" * 100
    with kv.open(p, durability="sync", compression="lz4", index_snapshot=False) as db:
        db.put(b"k", v)
    seg = p / "00000001.seg"
    data = bytearray(seg.read_bytes())
    assert data[6] == 2 and data[8] & 2  # version 2, compressed
    data[8] &= ~2  # drop the flag only (the CRC then fails too)
    seg.write_bytes(bytes(data))
    with pytest.raises(OSError, match="corrupt record at offset 0"), kv.open(p) as db:
        db.get(b"k")


def test_bad_compression_argument(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match='compression="snappy": use "zstd"'):
        kv.open(tmp_path / "db", compression="snappy")
    assert not (tmp_path / "db").exists()


def _doc(i: int) -> bytes:
    """A ~250-byte JSON record: little repeats inside one, much across them."""
    rng = random.Random(i)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "golf", "hotel", "kilo"]
    return json.dumps(
        {
            "id": i,
            "name": f"{rng.choice(words).title()} {rng.choice(words).title()}",
            "email": f"{rng.choice(words)}{rng.randrange(1000)}@example.com",
            "score": round(rng.random() * 1000, 3),
            "bio": " ".join(rng.choice(words) for _ in range(16)),
        }
    ).encode()


def _trained(db: kv.DB, start: int, timeout: float = 20.0) -> tuple[int, int]:
    """Put `_doc`s from `start` on until the store's dictionary is trained and in use;
    (its id, the next doc number)."""
    i = start
    deadline = time.monotonic() + timeout
    while (dict_id := db.stats()["compression_dictionary"]) == 0:
        assert time.monotonic() < deadline, "no dictionary was trained"
        db.write([(b"d%06d" % j, _doc(j)) for j in range(i, i + 100)])
        i += 100
        if i > 1500:
            time.sleep(0.01)  # (1,000 values were sampled: the trainer is at work)
    return dict_id, i


def _per_value(db: kv.DB, start: int, n: int) -> float:
    """Bytes saved per value over `n` more puts of `_doc`s."""
    before = db.stats()["compression_saved_bytes"]
    db.write([(b"d%06d" % j, _doc(j)) for j in range(start, start + n)])
    return (db.stats()["compression_saved_bytes"] - before) / n


def _all_docs(n: int) -> dict[bytes, bytes]:
    return {b"d%06d" % j: _doc(j) for j in range(n)}


def test_zstd_trains_a_dictionary_and_uses_it(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p, durability="none", compression="zstd") as db:
        plain_saving = _per_value(db, 0, 200)  # before any dictionary: zstd alone
        assert db.stats()["compression_dictionary"] == 0
        dict_id, i = _trained(db, 200)
        assert sorted(f.name for f in p.glob("DICT-*")) == [f"DICT-{dict_id:08x}"]
        assert not list(p.glob("*.tmp"))
        with_dict = _per_value(db, i, 500)
        doc_len = len(_doc(i))
        # a dictionary takes these records to well under half of what zstd alone makes
        assert doc_len - with_dict < 0.6 * (doc_len - plain_saving), (plain_saving, with_dict)
        n = i + 500
        want = _all_docs(n)
        assert db.check() == (n, [])
    # read without compression; reopened with it, the same dictionary (none trained)
    with kv.open(p) as db:
        assert dict(db.items()) == want
    with kv.open(p, durability="none", compression="zstd") as db:
        assert db.stats()["compression_dictionary"] == dict_id
        assert _per_value(db, n, 100) > 0.9 * with_dict
        assert db.get(b"d000007") == want[b"d000007"]
    assert len(list(p.glob("DICT-*"))) == 1


def _with_dictionary(p: Path) -> tuple[kv.DB, int, int]:
    """A zstd store at `p` whose dictionary is trained, with 300 docs written against it
    after that: (the open store, the dictionary's id, how many docs it holds)."""
    db = kv.open(p, durability="none", compression="zstd")
    dict_id, n = _trained(db, 0)
    db.write([(b"d%06d" % j, _doc(j)) for j in range(n, n + 300)])
    return db, dict_id, n + 300


def test_zstd_dictionary_goes_with_checkpoints_and_is_named_when_missing(
    tmp_path: Path,
) -> None:
    p = tmp_path / "db"
    db, dict_id, n = _with_dictionary(p)
    with db:
        db.checkpoint(tmp_path / "cp")
    want = _all_docs(n)
    name = f"DICT-{dict_id:08x}"
    assert (tmp_path / "cp" / name).exists()
    with kv.open(tmp_path / "cp", read_only=True) as db:
        assert dict(db.items()) == want
    # a copy of the store without its dictionary: the values compressed with it are
    # errors naming the file; the others still read
    (tmp_path / "cp" / name).unlink()
    with kv.open(tmp_path / "cp") as db:
        assert db.get(b"d000000") == want[b"d000000"]  # (before the dictionary)
        with pytest.raises(OSError, match=f"{name}, which is not in the store's directory"):
            db.get(b"d%06d" % (n - 1))
        count, bad = db.check()
        assert count == n and len(bad) >= 300 and all(name in b for b in bad)
    # damaged: named as such
    (tmp_path / "cp" / name).write_bytes((p / name).read_bytes()[:-1] + b"?")
    with kv.open(tmp_path / "cp") as db, pytest.raises(OSError, match=f"{name} is damaged"):
        db.get(b"d%06d" % (n - 1))


def test_repair_drops_what_a_missing_or_damaged_dictionary_made_unreadable(
    tmp_path: Path,
) -> None:
    p = tmp_path / "db"
    db, dict_id, n = _with_dictionary(p)
    with db:
        db.put(b"d000000", _doc(10**6))  # rewritten against the dictionary
        with db.batch() as b:  # a batch with one compressed member and one too small
            b.put(b"batch-big", _doc(1))
            b.put(b"batch-small", b"x")
    name = f"DICT-{dict_id:08x}"
    for how in ("missing", "damaged"):
        t = tmp_path / how
        shutil.copytree(p, t)
        if how == "missing":
            (t / name).unlink()
        else:
            (t / name).write_bytes((p / name).read_bytes()[:-1] + b"?")
        # without repair: refused when read, named
        with kv.open(t) as db, pytest.raises(OSError, match=name):
            db.get(b"d%06d" % (n - 1))
        with pytest.warns(RuntimeWarning) as w:  # (every one: the batch's too)
            db = kv.open(t, repair=True)
        assert any(re.search(f"skipped .*cannot be read.*{name}", str(x.message)) for x in w)
        assert any("dropped an incomplete batch" in str(x.message) for x in w)
        with db:
            got = dict(db.items())
            assert db.check() == (len(got), [])
        # one report per segment (not one per record), counting what it skipped
        said = [str(x.message) for x in w if "cannot be read" in str(x.message)]
        counts = [re.search(r"skipped (\d+) records", m) for m in said]
        skipped = [int(c[1]) if c else 1 for c in counts]  # (or "skipped the record")
        assert len(said) == len({m.split(": skipped")[0] for m in said}), said
        assert sum(skipped) >= 300, said
        # what the dictionary made is gone; what was written before it is all there,
        # d000000 with the value it had before its rewrite; the batch all or nothing
        assert got[b"d000000"] == _doc(0)
        assert b"batch-big" not in got and b"batch-small" not in got
        early = {k: v for k, v in _all_docs(n).items() if k in got}
        assert got == early and len(got) >= 200
        assert all(v.startswith(b"{") for v in got.values())


def _line(i: int) -> bytes:
    """A ~200-byte log line: nothing like `_doc`'s JSON."""
    rng = random.Random(-i)
    svc = rng.choice(["gateway", "billing", "search", "auth"])
    return (
        f"2026-12-03T12:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z "
        f"{rng.choice(['INFO', 'WARN', 'ERROR'])} [{svc}] request_id={rng.getrandbits(64):016x} "
        f"path=/api/v{rng.randrange(3)}/{svc}/items/{rng.randrange(10**6)} "
        f"status={rng.choice([200, 404, 500])} latency_ms={rng.random() * 100:.2f}"
    ).encode()


def test_compaction_retrains_the_dictionary_when_the_values_drifted(tmp_path: Path) -> None:
    p = tmp_path / "db"
    with kv.open(p, durability="none", compression="zstd") as db:
        first, n = _trained(db, 0)
        db.compact()  # values like the dictionary's: kept
        assert (db.stats()["compression_dictionary"], generation(db)) == (first, 0)
        # most of what the store holds becomes log lines, which the JSON dictionary
        # does little for (they are stored as they are)
        json_only = stored(p)
        lines = {b"l%06d" % j: _line(j) for j in range(4 * n)}
        db.write(list(lines.items()))
        before = stored(p)
        want = _all_docs(n) | lines
        # a follower opened now reads JSON records compressed against the old dictionary
        follower = kv.open(p, read_only=True)
        db.compact()
        second = db.stats()["compression_dictionary"]
        assert second != first and generation(db) == 1
        assert (p / f"DICT-{second:08x}").exists()
        # every value rewritten against it: the same records now take well under what
        # they took against the old one
        assert stored(p) < 0.85 * before, (json_only, before, stored(p))
        assert dict(db.items()) == want and db.check() == (5 * n, [])
        assert dicts(p) == sorted([first, second])  # (kept while it was in use then)
        db.compact()  # nothing drifted since: kept; the old one no record names: gone
        assert (db.stats()["compression_dictionary"], generation(db)) == (second, 1)
        assert dicts(p) == [second]
        with follower:
            # the follower still reads the (retired) segments it holds, against the
            # dictionary no longer in the directory, and refreshed, the new ones
            assert dict(follower.items()) == want
            # and its checkpoint carries the dictionary its records name
            follower.checkpoint(tmp_path / "cp")
            with kv.open(tmp_path / "cp", read_only=True) as cp:
                assert dict(cp.items()) == want and cp.check() == (5 * n, [])
            assert first in dicts(tmp_path / "cp")
            follower.refresh()
            assert dict(follower.items()) == want
            # (an open that does not compress names the store's newest dictionary)
            assert (follower.stats()["compression_dictionary"], generation(follower)) == (
                second,
                1,
            )
    # reopened: the newest generation is the one written with
    with kv.open(p, durability="none", compression="zstd") as db:
        assert (db.stats()["compression_dictionary"], generation(db)) == (second, 1)
        assert dict(db.items()) == want


def test_writers_retrain_the_dictionary_when_their_values_drift(tmp_path: Path) -> None:
    """No compaction needed: once the values written change kind, the writers' frames
    come out larger than the dictionary's first window of them, and the values written
    next retrain it (in the background, kept because it does 10 % better)."""
    p = tmp_path / "db"
    with kv.open(p, durability="none", compression="zstd") as db:
        first, n = _trained(db, 0)
        n = _write_docs(db, n, 2000)  # (the window the dictionary is held to)
        assert db.stats()["compression_drift_retrainings"] == 0
        j, saved = 0, []
        deadline = time.monotonic() + 30
        while db.stats()["compression_drift_retrained"] == 0:
            assert time.monotonic() < deadline, db.stats()
            before = db.stats()["compression_saved_bytes"]
            db.write([(b"l%06d" % k, _line(k)) for k in range(j, j + 500)])
            saved.append((db.stats()["compression_saved_bytes"] - before) / 500)
            j += 500
        second = db.stats()["compression_dictionary"]
        assert second != first and generation(db) == 1, db.stats()
        assert dicts(p) == sorted([first, second])
        before = db.stats()["compression_saved_bytes"]
        db.write([(b"l%06d" % k, _line(k)) for k in range(j, j + 500)])
        now = (db.stats()["compression_saved_bytes"] - before) / 500
        # the lines the JSON dictionary did little for (stored as they are when it saved
        # under an eighth) now compress against one trained on them
        assert now > saved[0] + 0.25 * len(_line(0)), (saved, now)
        want = _all_docs(n) | {b"l%06d" % k: _line(k) for k in range(j + 500)}
        assert dict(db.items()) == want and db.check() == (len(want), [])
    with kv.open(p, durability="none", compression="zstd") as db:
        assert (db.stats()["compression_dictionary"], generation(db)) == (second, 1)
        assert dict(db.items()) == want


def _write_docs(db: kv.DB, start: int, n: int) -> int:
    """Put `n` more `_doc`s from `start` on, in batches; the next doc number."""
    for i in range(start, start + n, 500):
        db.write([(b"d%06d" % j, _doc(j)) for j in range(i, min(i + 500, start + n))])
    return start + n


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_retraining_and_removing_dictionaries_under_concurrent_writers(
    tmp_path: Path, durability: str
) -> None:
    """Writers put values of one kind, then another, while compactions of every segment
    retrain the dictionary and remove the ones no record names: every value written is
    read back, in this open and the next, and check() finds nothing."""
    p = tmp_path / "db"
    last: dict[bytes, bytes] = {}
    lock = threading.Lock()
    kinds = [_doc, _line, lambda j: _doc(j).upper(), _line]
    with kv.open(p, durability=durability, compression="zstd") as db:

        def writer(t: int, kind: int) -> None:
            for j in range(t, 1600, 4):
                k, v = b"k%05d" % (j % 900), kinds[kind](j + 10_000 * kind)
                with lock:  # (the last write of a key is the one noted)
                    db.put(k, v)
                    last[k] = v

        generations = set()
        for kind in range(len(kinds)):
            ths = [threading.Thread(target=writer, args=(t, kind)) for t in range(4)]
            for th in ths:
                th.start()
            while any(th.is_alive() for th in ths):
                db.compact()
                generations.add(generation(db))
            for th in ths:
                th.join()
            db.compact()
            generations.add(generation(db))
            assert dict(db.items()) == last
        assert len(generations) >= 3, generations  # (it retrained along the way)
        assert db.check() == (len(last), [])
        db.compact()
        current = db.stats()["compression_dictionary"]
        # what is left: the one in use, and the one before it if that compaction
        # retrained (in use when it sealed the log) — none of the others
        assert current in dicts(p) and len(dicts(p)) <= 2, (current, dicts(p))
    with kv.open(p) as db:
        assert dict(db.items()) == last and db.check() == (len(last), [])


def generation(db: kv.DB) -> int:
    return db.stats()["compression_dictionary_generation"]


def dicts(p: Path) -> list[int]:
    return sorted(int(f.name[5:], 16) for f in p.glob("DICT-*"))


def stored(p: Path) -> int:
    return sum(f.stat().st_size for f in p.glob("*.seg"))


def test_zstd_read_only_follower_finds_a_dictionary_trained_after_its_open(
    tmp_path: Path,
) -> None:
    p = tmp_path / "db"
    with kv.open(p, durability="none", compression="zstd") as w:
        w.put(b"first", _doc(0))
        w.sync()
        with kv.open(p, read_only=True) as r:
            assert r.get(b"first") == _doc(0)
            _, n = _trained(w, 0)
            w.write([(b"d%06d" % j, _doc(j)) for j in range(n, n + 50)])
            w.sync()
            r.refresh()
            assert r.multi_get([b"d%06d" % j for j in range(n + 50)]) == [
                _doc(j) for j in range(n + 50)
            ]


def test_compaction_converts_a_store_to_its_compression(tmp_path: Path) -> None:
    """Compaction writes values in the store's compression (RocksDB's compactions write
    their output in the current one): a plain store opened with zstd shrinks as it is
    compacted (its dictionary trained first, on the values compacted); opened without
    compression, compaction copies values as they are."""
    p = tmp_path / "db"
    want = _all_docs(3000)
    with kv.open(p, durability="none", segment_size=64 << 10) as db:
        db.write(list(want.items()))
    plain = _size(p)
    with kv.open(p, durability="none", segment_size=64 << 10, compression="zstd") as db:
        assert db.stats()["compression_dictionary"] == 0
        # the dictionary is trained first, on the segments' values, and every value
        # is compacted against it
        db.compact()
        assert db.stats()["compression_dictionary"] != 0
        assert dict(db.items()) == want
        assert db.check()[1] == []
    converted = _size(p)
    # (0.44 here; without the dictionary, zstd alone: ~0.7)
    assert converted < 0.5 * plain, (converted, plain)
    with kv.open(p, durability="none", segment_size=64 << 10) as db:
        db.compact()
        assert db.get(b"d000123") == want[b"d000123"]
    assert _size(p) == converted, "compacted without compression: copied as stored"


def test_zstd_compression_level(tmp_path: Path) -> None:
    """`compression_level` (1-19) trades write speed for size; reads do not care."""
    sizes = {}
    want = _all_docs(2000)
    for level in (1, 19):
        p = tmp_path / f"l{level}"
        with kv.open(p, durability="none", compression="zstd", compression_level=level) as db:
            db.write(list(want.items()))
            db.compact()  # (every value against the dictionary, at this level)
            sizes[level] = db.stats()["bytes_on_disk"]
        with kv.open(p) as db:
            assert dict(db.items()) == want
    assert sizes[19] < sizes[1], sizes
    for bad in (0, 20, -5):
        with pytest.raises(ValueError, match=f"compression_level={bad}: zstd's levels"):
            kv.open(tmp_path / "bad", compression="zstd", compression_level=bad)
    with pytest.raises(ValueError, match='compression_level=5 with compression="lz4"'):
        kv.open(tmp_path / "bad", compression="lz4", compression_level=5)
    with pytest.raises(ValueError, match="compression_level=5 with compression=None"):
        kv.open(tmp_path / "bad", compression_level=5)
    assert not (tmp_path / "bad").exists()


def test_an_iterator_and_a_snapshot_of_a_follower_outlive_the_dictionary_removed(
    tmp_path: Path,
) -> None:
    """A follower's iterator and snapshot, taken before the writer converted the store
    to LZ4 (the compaction removes the zstd dictionary: no record names it any more) and
    read on after a refresh that reopened the follower: their values still decode — the
    reopened store keeps the dictionaries the old one had loaded. (Until session 31 the
    iterator's reads went through the new store, which had never seen the dictionary:
    "compressed with the dictionary DICT-…, which is not in the store's directory".)"""
    p = tmp_path / "db"
    db, dict_id, n = _with_dictionary(p)
    with db:
        db.compact()  # (every value against the dictionary)
        want = dict(db.items())
    with kv.open(p, durability="none", compression="lz4") as w, kv.open(p, read_only=True) as r:
        it = r.iterator()
        first = next(it)
        snap = r.snapshot()
        w.compact()
        assert dicts(p) == [], "the conversion did not remove the dictionary"
        w.put(b"after", b"x")
        w.sync()
        assert r.refresh()["reopened"] == 1
        assert dict([first, *it]) == want
        assert dict(snap.items()) == want
        assert snap.get(b"d000001") == want[b"d000001"]
        assert r.get(b"d000001") == want[b"d000001"] and r.get(b"after") == b"x"
        snap.close()
