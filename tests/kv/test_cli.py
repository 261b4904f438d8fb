"""`uringkit kv ...` as users type it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def kv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uringkit", "kv", *args], capture_output=True, text=True, timeout=300
    )


def test_commands(tmp_path: Path) -> None:
    p = str(tmp_path / "s")
    assert kv("put", p, "user:1", "ada").returncode == 0
    assert kv("put", p, "user:2", "bob").returncode == 0
    assert kv("get", p, "user:1").stdout == "ada\n"
    out = kv("get", p, "nope")
    assert out.returncode == 1 and "not found" in out.stderr
    assert kv("scan", p, "--prefix", "user:").stdout == "user:1\tada\nuser:2\tbob\n"
    assert kv("scan", p, "--limit", "1").stdout == "user:1\tada\n"
    assert kv("scan", p, "--prefix", "zzz").stdout == ""
    assert kv("delete", p, "user:1").returncode == 0
    assert kv("scan", p, "--keys-only").stdout == "user:2\n"
    assert "retired" in kv("compact", p).stdout
    out = kv("check", p)
    assert out.returncode == 0 and "0 problems" in out.stdout
    st = json.loads(kv("stats", p, "--json").stdout)
    assert st["keys"] == 1
    assert kv("--hex", "get", p, "757365723a32").stdout == "626f62\n"


def test_scan_as_json_lines(tmp_path: Path) -> None:
    """Values with tabs and newlines, and bytes that are not UTF-8, come out whole."""
    p = str(tmp_path / "s")
    assert kv("put", p, "doc:1", '{"a":\t1,\n"b": "é"}').returncode == 0
    assert kv("--hex", "put", p, "646f633aff", "00ff").returncode == 0  # b"doc:\xff"
    rows = [json.loads(ln) for ln in kv("scan", p, "--json").stdout.splitlines()]
    assert rows == [
        {"key": "doc:1", "value": '{"a":\t1,\n"b": "é"}'},
        {"key_hex": "646f633aff", "value_hex": "00ff"},
    ]
    out = kv("scan", p, "--json", "--keys-only", "--limit", "1").stdout
    assert [json.loads(ln) for ln in out.splitlines()] == [{"key": "doc:1"}]
    out = kv("--hex", "scan", p, "--json", "--prefix", "646f633a31").stdout
    assert json.loads(out) == {
        "key_hex": "646f633a31",
        "value_hex": '{"a":\t1,\n"b": "é"}'.encode().hex(),
    }


def test_scan_a_range_in_either_order(tmp_path: Path) -> None:
    """--start/--stop/--reverse (plyvel's iterator bounds), from read-only opens of a
    store whose writer saved its keys in order (ORDER) at close."""
    from uringkit import kv as kv_api

    p = str(tmp_path / "s")
    with kv_api.open(p) as db:
        db.write([(b"user:%04d" % i, b"v%d" % i) for i in range(0, 3000, 3)])
        assert list(db.iterator(start=b"user:", include_value=False))[:1] == [b"user:0000"]
    out = kv("scan", p, "--start", "user:1000", "--stop", "user:1010", "--keys-only").stdout
    assert out.split() == ["user:1002", "user:1005", "user:1008"]
    out = kv("scan", p, "--start", "user:1000", "--stop", "user:1010", "--reverse").stdout
    assert [ln.split("\t") for ln in out.splitlines()] == [
        ["user:1008", "v1008"],
        ["user:1005", "v1005"],
        ["user:1002", "v1002"],
    ]
    assert (tmp_path / "s" / "ORDER").exists()  # (the writer's; read-only opens keep it)


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    # `uringkit kv scan ... | head -1`: the pipe closes while the scan still prints
    from uringkit import kv as kv_api

    p = tmp_path / "s"
    with kv_api.open(p, durability="none") as db:
        db.write([(b"k%06d" % i, b"v" * 100) for i in range(50_000)])
    with subprocess.Popen(
        [sys.executable, "-m", "uringkit", "kv", "scan", str(p)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"k000000\t")
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141, err
    assert err == ""


def test_compact_converts_to_a_compression(tmp_path: Path) -> None:
    from uringkit import kv as kv_api

    p = tmp_path / "s"
    docs = {
        b"u%05d" % i: json.dumps(
            {"id": i, "name": f"user {i}", "bio": "lorem ipsum " * (i % 7 + 5)}
        ).encode()
        for i in range(3000)
    }
    with kv_api.open(p, durability="none") as db:
        db.write(list(docs.items()))
        plain = db.stats()["bytes_on_disk"]
    out = kv("compact", str(p), "--compression", "zstd")
    assert out.returncode == 0, out.stderr
    assert "values in zstd (dictionary DICT-" in out.stdout
    assert len(list(p.glob("DICT-*"))) == 1
    st = json.loads(kv("stats", str(p), "--json").stdout)
    assert st["bytes_on_disk"] < 0.5 * plain, (st["bytes_on_disk"], plain)
    with kv_api.open(p, read_only=True) as db:
        assert dict(db.items()) == docs
    out = kv("compact", str(p), "--compression", "zstd", "--level", "25")
    assert out.returncode == 1 and "compression_level=25: zstd's levels" in out.stderr
    out = kv("compact", str(p), "--compression", "snappy")
    assert out.returncode == 2 and "invalid choice: 'snappy'" in out.stderr


def test_missing_store_and_help(tmp_path: Path) -> None:
    out = kv("get", str(tmp_path / "absent"), "k")
    assert out.returncode == 1 and "no such store" in out.stderr
    h = kv("--help")
    assert h.returncode == 0 and "examples:" in h.stdout
    # every command's own --help: what each argument is, and an example of it
    for cmd in ("put", "get", "delete", "scan", "compact", "check", "stats", "backup"):
        h = kv(cmd, "--help")
        assert h.returncode == 0, h.stderr
        assert f"\n  uringkit kv {cmd} /data/store" in h.stdout, h.stdout
        assert "the store's directory" in h.stdout


def test_bench_quick_xkv_and_sqlite(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "uringkit",
            "kv",
            "bench",
            "--quick",
            "--dir",
            str(tmp_path),
            "--only",
            "xkv",
            "sqlite3",
            "--json-out",
            str(tmp_path / "kv.json"),
            "--plot",
            str(tmp_path / "kv.png"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "kv.json").read_text())
    rows = doc["rows"]
    assert rows["random get hot (gets/s)"]["xkv"] > 0
    assert set(rows["durable put P99 (ms)"]) == {"xkv", "sqlite3"}
    # the bounds are checked in the run (those needing LevelDB are absent here)
    got = {t["target"]: t for t in doc["targets"]}
    assert 0 < got["index <= 64 B/key beyond the key (RSS)"]["value"] <= 64
    assert got["reopen after SIGKILL <= 150 ms"]["met"] is not None
    assert not any("LevelDB" in t for t in got)
    assert "targets met:" in out.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("uringkit-kv")] == []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no plot" in out.stdout
    else:
        assert (tmp_path / "kv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_target_ratios_never_round_onto_the_other_side() -> None:
    """1.497x against a 1.5x target is shown as 1.497x (unmet), not as "1.50x" — the
    kv bench printed an unmet "1.50x" in session 12."""
    from uringkit.kv.bench import shown_ratio

    assert shown_ratio(1.497, 1.5) == "1.497×"
    assert shown_ratio(0.996, 1.0) == "0.996×"
    assert shown_ratio(1.5, 1.5) == "1.50×" and shown_ratio(1.234, 1.0) == "1.23×"
    assert shown_ratio(0.94, 1.0) == "0.94×"


def test_the_chart_leaves_out_rows_only_xkv_has() -> None:
    """xkv's index-memory rows have no peer: charted, they showed xkv's bar at 1 as if
    it had beaten someone (session 25)."""
    from uringkit.kv.bench import compared

    rows = {
        "load (puts/s, batches)": {"xkv": 3.0, "lmdb": 2.0},
        "index RSS per key beyond the key": {"xkv": 25.9},
        "reopen after load (ms)": {"xkv": 0.05, "lmdb": 0.18, "leveldb": 1.3},
    }
    assert compared(rows) == ["load (puts/s, batches)", "reopen after load (ms)"]


def test_stress(tmp_path: Path) -> None:
    """`uringkit kv stress`: a run per configuration asked for, one JSON line each."""
    out = kv(
        "stress",
        "--seed",
        "5",
        "--steps",
        "300",
        "--config",
        "none",
        "--config",
        "sync-lz4",
        "--dir",
        str(tmp_path),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    runs = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert [(r["config"], r["seed"], r["steps"]) for r in runs] == [
        ("none", 5, 300),
        ("sync-lz4", 5, 300),
    ]
    assert runs[0]["ops"]["put"] > 50
    assert "2 runs, no mismatch" in out.stderr
    assert list(tmp_path.iterdir()) == []  # its stores are gone
    bad = kv("stress", "--steps", "0")
    assert bad.returncode == 2 and "--steps and --seconds must be positive" in bad.stderr
