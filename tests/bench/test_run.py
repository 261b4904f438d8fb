"""Jobs on every engine through the CLI, as users run them; fio's JSON layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import PROBED

ENGINES = ["psync", "threads", "posixaio", "libaio"] + (["io_uring"] if PROBED else [])


def bench(
    *args: str, cwd: Path | None = None, prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    code = prelude + "import sys\nfrom uringkit.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def small_job(tmp_path: Path, *opts: str) -> list[str]:
    """A job `t` on an 8 MiB file in tmp_path, plus `opts`."""
    return [f"--filename={tmp_path / 'f.dat'}", "--size=8m", "--name=t", *opts]


def run_json(tmp_path: Path, *opts: str) -> dict[str, Any]:
    out = bench(*small_job(tmp_path, *opts), "--output-format=json")
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)  # stdout is only the JSON
    return doc


@pytest.mark.parametrize("engine", ENGINES)
def test_randread_every_engine(tmp_path: Path, engine: str) -> None:
    doc = run_json(
        tmp_path, "--rw=randread", "--bs=4k", f"--ioengine={engine}", "--iodepth=8", "--direct=1"
    )
    (j,) = doc["jobs"]
    r = j["read"]
    assert r["total_ios"] == 2048 and r["io_bytes"] == 8 << 20
    assert r["iops"] > 0 and r["bw_bytes"] > 0
    p = r["clat_ns"]["percentile"]
    assert {"1.000000", "50.000000", "99.000000", "99.990000"} <= set(p)
    assert 0 < p["50.000000"] <= p["99.000000"] <= r["clat_ns"]["max"]
    assert r["lat_ns"]["mean"] >= r["clat_ns"]["mean"] * 0.5
    # usr/sys are split by tick sampling: a short job can land all its ticks on one side
    assert j["usr_cpu"] >= 0 and j["sys_cpu"] >= 0 and j["usr_cpu"] + j["sys_cpu"] > 0
    assert j["ctx"] >= 0
    u = j["uringkit"]
    assert u["engine"] == engine and u["syscalls"] > 0 and u["cpu_us_per_io"] > 0


@pytest.mark.parametrize("cmax", ["1", "3", "8"])
def test_completions_handled_in_bounded_batches(tmp_path: Path, cmax: str) -> None:
    """iodepth_batch_complete_max bounds how many completions a round handles; the rest
    wait in the backlog: every I/O is still counted once, reads verified."""
    ios_engine = "io_uring" if PROBED else "libaio"
    doc = run_json(
        tmp_path,
        "--rw=randread",
        "--bs=4k",
        f"--ioengine={ios_engine}",
        "--iodepth=16",
        "--iodepth_batch_submit=16",
        f"--iodepth_batch_complete_max={cmax}",
        "--direct=1",
        "--verify=crc32c",
    )
    (j,) = doc["jobs"]
    assert j["read"]["total_ios"] == 2048
    assert j["uringkit"]["verify"]["errors"] == 0 and j["uringkit"]["verify"]["blocks"] > 0


@pytest.mark.parametrize("engine", ENGINES)
def test_write_fdatasync_verified(tmp_path: Path, engine: str) -> None:
    doc = run_json(
        tmp_path,
        "--rw=write",
        "--bs=4k",
        f"--ioengine={engine}",
        "--iodepth=4",
        "--fdatasync=1",
        "--verify=crc32c",
        "--size=1m",
    )
    (j,) = doc["jobs"]
    assert j["write"]["total_ios"] == 256
    assert j["sync"]["total_ios"] == 256
    assert j["uringkit"]["verify"] == {"blocks": 256, "errors": 0, "first_error": None}


def test_randrw_mix_and_numjobs(tmp_path: Path) -> None:
    doc = run_json(
        tmp_path,
        "--rw=randrw",
        "--rwmixread=70",
        "--ioengine=threads",
        "--iodepth=4",
        "--numjobs=2",
        "--runtime=0.3",
        "--time_based=1",
    )
    (j,) = doc["jobs"]
    reads, writes = j["read"]["total_ios"], j["write"]["total_ios"]
    assert reads > 0 and writes > 0
    assert 0.5 < reads / (reads + writes) < 0.9


def test_jobfile_and_table(tmp_path: Path) -> None:
    jf = tmp_path / "j.fio"
    jf.write_text(
        f"[global]\ndirectory={tmp_path}\nsize=4m\nbs=4k\n\n"
        "[a]\nrw=randread\nioengine=libaio\niodepth=4\ndirect=1\n"
    )
    out = bench(str(jf), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "uringkit bench" in out.stdout and "IOPS" in out.stdout
    assert "one after another" not in out.stdout  # one job: nothing to say
    jf.write_text(jf.read_text() + "\n[b]\nrw=randread\nioengine=psync\n")
    out = bench(str(jf), "--no-progress")
    assert out.returncode == 0 and "runs jobs one after another" in out.stdout
    jf.write_text(jf.read_text().replace("[b]\n", "[b]\nstonewall\n"))
    out = bench(str(jf), "--no-progress")
    assert out.returncode == 0 and "one after another" not in out.stdout
    # fio's IO depths / submit / complete distributions, one line per job
    assert "a (uringkit): depth " in out.stdout and "per submit" in out.stdout


def test_libaio_buffered_warns(tmp_path: Path) -> None:
    out = bench(
        f"--filename={tmp_path / 'f'}",
        "--size=1m",
        "--name=t",
        "--rw=read",
        "--ioengine=libaio",
        "--iodepth=4",
        "--no-progress",
    )
    assert out.returncode == 0
    assert "synchronous" in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        (["--filename=/nonexistent-dir/f", "--size=1m"], "does not exist"),
        (
            ["--size=1m", "--bs=1000", "--direct=1", "--ioengine=libaio"],
            "not a multiple of the logical block size",
        ),
        (
            [
                "--size=1m",
                "--ioengine=libaio",
                "--iodepth=40000",
                "--bs=512",
                "--numjobs=2",
                "--direct=1",
                "--time_based=1",  # both jobs' contexts exist at once
                "--runtime=1",
            ],
            "aio-max-nr",
        ),
        (["--size=1m", "--frobnicate=1"], "'frobnicate' is not supported"),
        (["--size=1k", "--bs=4k"], "smaller than bs"),
    ],
)
def test_bad_input_one_line_no_json(tmp_path: Path, opts: list[str], needle: str) -> None:
    args = list(opts)
    if not any(a.startswith("--filename") for a in args):
        args.append(f"--filename={tmp_path / 'f'}")
    out = bench("--name=bad", *args, "--output-format=json", "--rw=read", cwd=tmp_path)
    assert out.returncode != 0
    assert needle in out.stderr, out.stderr
    assert out.stdout == ""  # no partial JSON passed off as a result
    assert len(out.stderr.strip().splitlines()) <= 2


def test_hipri_without_poll_queues(tmp_path: Path) -> None:
    if not PROBED:
        pytest.skip("io_uring unavailable")
    out = bench(
        f"--filename={tmp_path / 'f'}",
        "--size=1m",
        "--name=t",
        "--rw=randread",
        "--ioengine=io_uring",
        "--hipri=1",
        "--direct=1",
        "--iodepth=4",
        "--no-progress",
    )
    if out.returncode == 0:
        return  # a device with poll queues: IOPOLL works
    assert "poll queues" in out.stderr
    assert "os error" not in out.stderr, out.stderr  # (the errno is OSError.errno)


def test_auto_engine_falls_back_when_blocked(tmp_path: Path) -> None:
    out = bench(
        f"--filename={tmp_path / 'f'}",
        "--size=1m",
        "--name=t",
        "--rw=randread",
        "--ioengine=auto",
        "--direct=1",
        "--iodepth=4",
        "--output-format=json",
        prelude="from uringkit.testing import block_io_uring\nblock_io_uring()\n",
    )
    assert out.returncode == 0, out.stderr
    (j,) = json.loads(out.stdout)["jobs"]
    assert j["uringkit"]["engine"] == "libaio"
    assert "blocked" in j["uringkit"]["engine_reason"]


def test_percentile_list_end_fsync_and_gtod_note(tmp_path: Path) -> None:
    doc = run_json(
        tmp_path,
        "--rw=randwrite",
        "--bs=4k",
        "--ioengine=psync",
        "--runtime=0.2",
        "--time_based",
        "--percentile_list=50:99.5",
        "--end_fsync",
        "--gtod_reduce=1",
    )
    (j,) = doc["jobs"]
    assert list(j["write"]["clat_ns"]["percentile"]) == ["50.000000", "99.500000"]
    assert j["uringkit"]["end_fsync_ns"] > 0
    assert "gtod_reduce=1" in j["uringkit"]["warning"]
    # the table shows "–" for a percentile the list left out
    out = bench(
        *small_job(
            tmp_path, "--rw=randread", "--runtime=0.1", "--time_based", "--percentile_list=50"
        ),
        "--eta=never",
    )
    assert out.returncode == 0, out.stderr
    assert "–" in out.stdout


def _keys(d: Any, pre: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(d, dict):
        for k, v in d.items():
            out.add(pre + k)
            if k not in ("percentile", "job options"):
                out |= _keys(v, pre + k + ".")
    return out


def test_json_has_every_key_fio_writes(tmp_path: Path) -> None:
    """Tools made for fio's JSON read ours: every key of fio's job entry (and top level)
    is in ours, with fio's meaning — distributions that sum to 100 %, per-window IOPS
    and bandwidth samples."""
    opts = ["--rw=randread", "--bs=4k", "--iodepth=8", "--runtime=1.2", "--time_based=1"]
    doc = run_json(tmp_path, "--ioengine=psync", *opts)
    (j,) = doc["jobs"]
    for k in ("iodepth_level", "iodepth_submit", "iodepth_complete"):
        assert abs(sum(j[k].values()) - 100) < 1e-6, k
    lat = sum(j["latency_ns"].values()) + sum(j["latency_us"].values())
    assert abs(lat + sum(j["latency_ms"].values()) - 100) < 1e-6
    r = j["read"]
    assert r["iops_samples"] == r["bw_samples"] >= 2
    assert r["iops_min"] <= r["iops_mean"] <= r["iops_max"]
    assert 0.5 < r["iops_mean"] / r["iops"] < 2 and r["bw_min"] <= r["bw_mean"] <= r["bw_max"]
    assert j["job options"]["name"] == "t" and isinstance(doc["disk_util"], list)
    from uringkit.bench import fio

    if not fio.available():
        pytest.skip("fio is not installed (.ci/run installs it)")
    out = subprocess.run(
        [
            fio.available() or "fio",
            "--name=t",
            f"--filename={tmp_path / 'f.dat'}",
            "--size=8m",
            "--ioengine=psync",
            *opts,
            "--output-format=json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    theirs = json.loads(out.stdout[out.stdout.index("{") :])
    assert set(theirs) - set(doc) <= {"global options"}
    missing = _keys(theirs["jobs"][0]) - _keys(j)
    assert not missing, f"fio writes, we do not: {sorted(missing)}"


def test_json_plus_has_histogram_bins(tmp_path: Path) -> None:
    """fio's json+: clat_ns.bins maps each latency bucket (ns) to its I/O count."""
    out = bench(
        *small_job(tmp_path, "--rw=randread", "--runtime=0.2", "--time_based"),
        "--output-format=json+",
    )
    assert out.returncode == 0, out.stderr
    (j,) = json.loads(out.stdout)["jobs"]
    bins = j["read"]["clat_ns"]["bins"]
    assert sum(bins.values()) == j["read"]["total_ios"] > 0
    values = [int(k) for k in bins]
    assert values == sorted(values) and values[0] >= j["read"]["clat_ns"]["min"]
    assert (
        "bins"
        not in run_json(tmp_path, "--rw=randread", "--runtime=0.1", "--time_based")["jobs"][0][
            "read"
        ]["clat_ns"]
    )


def test_output_file_instead_of_stdout(tmp_path: Path) -> None:
    """fio's --output=FILE: the result goes to the file, in the chosen format."""
    common = small_job(tmp_path, "--rw=randread", "--runtime=0.1", "--time_based", "--eta=never")
    out = bench(*common, "--output-format=json", f"--output={tmp_path / 'r.json'}")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    assert json.loads((tmp_path / "r.json").read_text())["jobs"][0]["jobname"] == "t"
    out = bench(*common, f"--output={tmp_path / 'r.txt'}")
    assert out.returncode == 0 and "IOPS" in (tmp_path / "r.txt").read_text()
    assert "IOPS" not in out.stdout


def test_version() -> None:
    from uringkit import __version__

    out = bench("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"uringkit-{__version__}"
    top = subprocess.run(
        [sys.executable, "-m", "uringkit", "--version"], capture_output=True, text=True
    )
    assert top.returncode == 0 and top.stdout.strip() == f"uringkit {__version__}"


def test_help() -> None:
    out = bench("--help")
    assert out.returncode == 0 and "examples:" in out.stdout and "--vs-fio" in out.stdout


def test_vs_fio(tmp_path: Path) -> None:
    from uringkit.bench import fio

    if not fio.available():
        pytest.skip("fio is not installed (.ci/run installs it)")
    out = bench(
        f"--filename={tmp_path / 'f'}",
        "--size=16m",
        "--name=t",
        "--rw=randread",
        "--ioengine=libaio",
        "--direct=1",
        "--iodepth=8",
        "--runtime=0.3",
        "--time_based=1",
        "--vs-fio",
        "--output-format=json",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["fio_jobs"]) == 2
    (cmp_,) = doc["uringkit_vs_fio"]
    assert len(cmp_["iops_ratios"]) == 2 and all(r > 0 for r in cmp_["iops_ratios"])
    os.remove(tmp_path / "f")


def test_disk_full_is_one_line(small_fs: Path) -> None:
    small = small_fs
    out = bench(
        f"--filename={small / 'f'}",
        "--size=4m",
        "--name=full",
        "--rw=write",
        "--ioengine=psync",
        "--output-format=json",
    )
    assert out.returncode == 1
    assert "No space left on device" in out.stderr and "disk is full" in out.stderr
    assert out.stdout == ""


def test_plot_for_jobs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    jf = tmp_path / "j.fio"
    jf.write_text(
        f"[global]\nfilename={tmp_path / 'f'}\nsize=4m\nbs=4k\nrw=randread\n"
        "ioengine=threads\n\n[d1]\niodepth=1\n\n[d8]\niodepth=8\n"
    )
    png = tmp_path / "p.png"
    out = bench(str(jf), "--no-progress", f"--plot={png}")
    assert out.returncode == 0, out.stderr
    assert png.stat().st_size > 10_000


def test_io_uring_sets_up_its_ring_like_fio(tmp_path: Path) -> None:
    """With no task-run option, the ring gets fio's flags where the kernel takes them
    (COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN; SQPOLL refuses DEFER_TASKRUN and then
    COOP_TASKRUN, as fio's fallbacks find), and the job's JSON says which it got. Flags
    the job names are used as given."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    from uringkit import Ring

    def setup(*opts: str) -> str:
        doc = run_json(tmp_path, "--rw=randread", "--bs=4k", "--ioengine=io_uring", *opts)
        s: str = doc["jobs"][0]["uringkit"]["setup"]
        return s

    try:
        Ring(2, single_issuer=True, defer_taskrun=True, coop_taskrun=True).close()
        want = "COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN"
    except OSError:
        pytest.skip("this kernel has no DEFER_TASKRUN")
    assert setup() == want
    assert setup("--registerfiles=1", "--fixedbufs=1") == (
        want + " | registered file | registered buffers"
    )
    assert setup("--coop_taskrun=1") == "COOP_TASKRUN"
    assert setup("--defer_taskrun=1") == "SINGLE_ISSUER | DEFER_TASKRUN"
    sq = setup("--sqthread_poll=1")
    assert sq.startswith("SQPOLL") and "DEFER_TASKRUN" not in sq
    # the other engines have no setup to report
    assert (
        run_json(tmp_path, "--rw=randread", "--ioengine=psync")["jobs"][0]["uringkit"]["setup"]
        is None
    )


def _ios(out: subprocess.CompletedProcess[str]) -> tuple[int, int, int]:
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout[out.stdout.index("{") :])["jobs"][0]
    return j["read"]["total_ios"], j["write"]["total_ios"], j["read"]["io_bytes"]


@pytest.mark.parametrize(
    "opts",
    [
        ("--rw=read", "--offset=1m", "--size=1m"),
        ("--rw=read", "--offset=1m", "--size=1m", "--io_size=3m"),
        ("--rw=randread", "--size=1m", "--number_ios=100", "--loops=3"),
        ("--rw=read", "--size=1m", "--offset=512k", "--io_size=1m", "--loops=2"),
        ("--rw=randwrite", "--size=1m", "--io_limit=256k"),
    ],
)
def test_region_and_amount_as_fio(tmp_path: Path, opts: tuple[str, ...]) -> None:
    """offset, io_size (io_limit), number_ios and loops decide where and how much I/O a
    job does: the same counts as fio's for the same command line."""
    f = tmp_path / "f.dat"
    common = [f"--filename={f}", "--name=t", "--bs=4k", "--ioengine=psync", *opts]
    ours = _ios(bench(*common, "--output-format=json"))
    from uringkit.bench import fio

    if not fio.available():
        pytest.skip("fio is not installed (.ci/run installs it)")
    theirs = _ios(
        subprocess.run(
            [fio.available() or "fio", *common, "--output-format=json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    )
    assert ours == theirs


def test_offset_region_is_the_only_one_touched(tmp_path: Path) -> None:
    """A write job with offset= writes [offset, offset + size) and verifies it there; the
    bytes before the offset are left alone; an O_DIRECT offset that is not a multiple of
    the logical block size is one line naming the fix."""
    f = tmp_path / "f.dat"
    f.write_bytes(b"\xaa" * 8192)
    out = bench(
        f"--filename={f}",
        "--name=t",
        "--bs=4k",
        "--size=64k",
        "--offset=8k",
        "--rw=randwrite",
        "--verify=crc32c",
        "--output-format=json",
    )
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)["jobs"][0]["uringkit"]["verify"]
    assert v["errors"] == 0 and v["blocks"] > 0
    assert f.stat().st_size == 8192 + 65536
    assert f.read_bytes()[:8192] == b"\xaa" * 8192
    try:
        os.close(os.open(f, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip(f"no O_DIRECT here: {e}")
    bad = bench(
        f"--filename={f}", "--name=t", "--size=64k", "--offset=1000", "--rw=read", "--direct=1"
    )
    assert bad.returncode == 1 and bad.stdout == ""
    assert "offset=1000 is not a multiple of the logical block size" in bad.stderr
    assert "use offset=512 or direct=0" in bad.stderr


def test_unlink_fsync_on_close_percentile_flags_and_pvsync2(tmp_path: Path) -> None:
    """unlink=1 removes the job's file afterwards; fsync_on_close=1 fsyncs it when the
    writes end (timed in uringkit.end_fsync_ns); lat/clat_percentiles are accepted (the
    percentiles are always reported: =0 prints a note); pvsync2 runs as psync."""
    f = tmp_path / "f.dat"
    out = bench(
        f"--filename={f}",
        "--name=t",
        "--size=256k",
        "--rw=write",
        "--ioengine=pvsync2",
        "--fsync_on_close=1",
        "--unlink=1",
        "--lat_percentiles=1",
        "--clat_percentiles=0",
        "--output-format=json",
    )
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)["jobs"][0]
    assert j["uringkit"]["end_fsync_ns"] > 0 and j["uringkit"]["engine"] == "psync"
    assert "clat_percentiles=0" in j["uringkit"]["warning"]
    assert "percentile" in j["write"]["clat_ns"] and "percentile" in j["write"]["lat_ns"]
    assert not f.exists()


@pytest.mark.parametrize("depth", [1, 8])
def test_rate_iops_paces_the_job(tmp_path: Path, depth: int) -> None:
    """rate_iops=N: the job issues no more than N I/Os per second, evenly (an upper
    bound the pacing enforces: the machine's noise can only lower it), whatever the
    depth; mixed read/write jobs and separate read,write rates are refused by name."""
    common = small_job(tmp_path, "--rw=randread", f"--iodepth={depth}", "--ioengine=io_uring")
    out = bench(
        *common,
        "--rate_iops=200",
        "--runtime=0.5",
        "--time_based",
        "--eta=never",
        "--output-format=json",
    )
    if "io_uring" in out.stderr and out.returncode:
        pytest.skip(out.stderr)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)["jobs"][0]["read"]
    assert 20 <= r["total_ios"] <= 200 * 0.5 + 2, r["total_ios"]
    mixed = bench(*small_job(tmp_path, "--rw=randrw", "--rate_iops=10"))
    assert mixed.returncode != 0 and "rate_iops with rw=rw/randrw" in mixed.stderr
    split = bench(*small_job(tmp_path, "--rw=read", "--rate_iops=10,5"))
    assert split.returncode != 0 and "separate read,write rates" in split.stderr


def test_random_distribution(tmp_path: Path) -> None:
    """random_distribution=zipf:THETA / pareto:H / normal:DEV run (the skew itself is checked by the
    core's unit tests on the sampler); a parameter out of range is refused with the
    allowed ones, before any file is touched."""
    for d in ("random", "zipf:1.2", "pareto:0.2", "normal:5", "gauss"):
        out = bench(
            *small_job(tmp_path, "--rw=randread", f"--random_distribution={d}"),
            "--number_ios=500",
            "--output-format=json",
        )
        assert out.returncode == 0, (d, out.stderr)
        assert json.loads(out.stdout)["jobs"][0]["read"]["total_ios"] == 500
    for bad in ("zipf:1", "pareto:1.5", "normal:500", "zoned:50/5:50/95", "zipf"):
        out = bench(*small_job(tmp_path, "--rw=randread", f"--random_distribution={bad}"))
        assert out.returncode == 2 and "zipf:THETA" in out.stderr, (bad, out.stderr)


def test_bssplit_mixes_sizes_as_fio(tmp_path: Path) -> None:
    """bssplit=4k/75:64k/25: I/O sizes drawn by weight (a size without a percentage
    shares what the others leave), offsets on the smallest size; the job moves the same
    bytes as fio in about as many I/Os. Refused: with verify, separate read,write splits,
    percentages over 100."""
    f = tmp_path / "f.dat"
    common = [f"--filename={f}", "--name=t", "--size=16m", "--ioengine=psync"]
    for split, mean in (("4k/75:64k/25", 0.75 * 4096 + 0.25 * 65536), ("4k:8k:16k:32k", 15360)):
        out = bench(*common, "--rw=randread", f"--bssplit={split}", "--output-format=json")
        assert out.returncode == 0, out.stderr
        r = json.loads(out.stdout)["jobs"][0]["read"]
        assert r["io_bytes"] >= 16 << 20
        assert abs(r["io_bytes"] / r["total_ios"] / mean - 1) < 0.15, (split, r["total_ios"])
    for bad, why in (
        ("--bssplit=4k/50:8k/50 --verify=crc32c", "bssplit with verify"),
        ("--bssplit=4k/50,8k/100", "separate read,write"),
        ("--bssplit=4k/70:8k/70", "adding up to at most 100"),
    ):
        out = bench(*common, "--rw=randwrite", *bad.split())
        assert out.returncode != 0 and why in out.stderr, (bad, out.stderr)
