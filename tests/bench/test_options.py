"""fio option parsing: job files and command lines, strict about what is unsupported."""

from __future__ import annotations

import pytest

from uringkit.bench.options import JobError, parse_cmdline, parse_jobfile, parse_size, parse_time


def test_sizes_and_times() -> None:
    assert parse_size("4k") == 4096
    assert parse_size("1g") == 1 << 30
    assert parse_size("128MiB") == 128 << 20
    assert parse_size("512") == 512
    assert parse_time("10") == 10.0
    assert parse_time("500ms") == 0.5
    assert parse_time("2m") == 120.0
    with pytest.raises(JobError, match="not a size"):
        parse_size("lots")


def test_cmdline_form() -> None:
    line = (
        "--name=j --filename=/tmp/F --size=1g --rw=randread --bs=4k --direct=1 "
        "--ioengine=io_uring --iodepth=32 --runtime=10 --time_based=1 --fixedbufs"
    )
    (j,) = parse_cmdline(line.split())
    n = j.to_native()
    assert n["size"] == 1 << 30 and n["bs"] == 4096 and n["iodepth"] == 32
    assert n["direct"] is True and n["time_based"] is True and n["runtime"] == 10.0
    assert n["ioengine"] == "io_uring" and n["fixedbufs"] is True


def test_globals_before_name_apply_to_every_job() -> None:
    jobs = parse_cmdline(
        ["--filename=/tmp/x", "--size=1m", "--name=a", "--rw=read", "--name=b", "--rw=write"]
    )
    assert [j.name for j in jobs] == ["a", "b"]
    assert [j.get("rw") for j in jobs] == ["read", "write"]
    assert all(j.get("size") == 1 << 20 for j in jobs)


def test_jobfile() -> None:
    text = """
; a comment
[global]
ioengine=libaio
direct=1
bs=4k
size=64m
directory=/tmp

[seq]
rw=read
iodepth=8

[rand]
rw=randread
iodepth=32
"""
    seq, rand = parse_jobfile(text, "t.fio")
    assert seq.get("filename") == "/tmp/seq.0.0"
    assert rand.to_native()["iodepth"] == 32
    assert rand.to_native()["ioengine"] == "libaio"


def test_unsupported_option_named() -> None:
    with pytest.raises(JobError, match="'zonemode' is not supported"):
        parse_cmdline(["--name=x", "--zonemode=zbd"])
    with pytest.raises(JobError, match=r"\[j\].*'cpus_allowed'"):
        parse_jobfile("[j]\ncpus_allowed=0\n")


def test_bad_values() -> None:
    with pytest.raises(JobError, match="rw='sideways'"):
        parse_cmdline(["--name=x", "--rw=sideways"])
    with pytest.raises(JobError, match="ioengine='spdk'"):
        parse_cmdline(["--name=x", "--ioengine=spdk"])
    with pytest.raises(JobError, match="verify"):
        parse_cmdline(["--name=x", "--verify=md5"])
    with pytest.raises(JobError, match="only apply to ioengine=io_uring"):
        parse_cmdline(["--name=x", "--filename=f", "--ioengine=libaio", "--sqthread_poll=1"])
    with pytest.raises(JobError, match="needs a value"):
        parse_cmdline(["--name=x", "--rw"])


def test_batch_complete_max_defaults_to_min_like_fio() -> None:
    """fio: iodepth_batch_complete_max "by default is equal to iodepth_batch_complete_min"
    (so fio handles one completion at a time however big iodepth_batch_submit is);
    it is passed to the native job and to fio's command line, never dropped."""
    from uringkit.bench.fio import command

    base = "--name=j --filename=/tmp/F --size=1m --iodepth=32 --iodepth_batch_submit=32"
    (d,) = parse_cmdline(base.split())
    assert d.to_native()["iodepth_batch_complete_max"] == 1
    (m,) = parse_cmdline([*base.split(), "--iodepth_batch_complete_min=4"])
    assert m.to_native()["iodepth_batch_complete_max"] == 4
    (x,) = parse_cmdline([*base.split(), "--iodepth_batch_complete_max=16"])
    assert x.to_native()["iodepth_batch_complete_max"] == 16
    assert "--iodepth_batch_complete_max=16" in command(x)
    (big,) = parse_cmdline([*base.split(), "--iodepth_batch_complete_max=999"])
    assert big.to_native()["iodepth_batch_complete_max"] == 32


def test_bare_flags_and_common_fio_options() -> None:
    """The fio command lines people copy: bare boolean flags, randrepeat/randseed,
    norandommap, filesize, percentile_list, eta, gtod_reduce."""
    from uringkit.bench.fio import command

    famous = (  # the fio line of many hosting guides, plus the flags people add to it
        "--randrepeat=1 --ioengine=libaio --direct=1 --gtod_reduce=1 --name=test "
        "--filename=/tmp/F --bs=4k --iodepth=64 --filesize=4m --readwrite=randrw "
        "--rwmixread=75 --norandommap --time_based --percentile_list=50:99.5 "
        "--eta=never --end_fsync --startdelay=0"
    )
    (j,) = parse_cmdline(famous.split(" "))
    n = j.to_native()
    assert n["size"] == 4 << 20 and n["rw"] == "randrw" and n["time_based"]
    assert j.get("norandommap") is True and j.get("end_fsync") is True
    assert n["percentiles"] == [50.0, 99.5] and j.get("eta") == "never"
    assert (
        n["seed"] == parse_cmdline(["--name=x", "--filename=F", "--size=1m"])[0].to_native()["seed"]
    )  # randrepeat=1 (the default): the same offsets every run
    cmd = command(j)
    assert "--norandommap=1" in cmd and "--percentile_list=50:99.5" in cmd
    assert "--gtod_reduce=1" in cmd and "--end_fsync=1" in cmd
    base = ["--name=x", "--filename=F", "--size=1m"]
    seeds = {parse_cmdline([*base, "--randrepeat=0"])[0].to_native()["seed"] for _ in range(3)}
    assert len(seeds) == 3  # randrepeat=0: a new seed each run
    assert parse_cmdline([*base, "--randseed=42"])[0].to_native()["seed"] == 42
    with pytest.raises(JobError, match="norandommap=0"):
        parse_cmdline([*base, "--norandommap=0"])
    with pytest.raises(JobError, match="percentile_list"):
        parse_cmdline([*base, "--percentile_list=50:120"])
    with pytest.raises(JobError, match="eta="):
        parse_cmdline([*base, "--eta=sometimes"])
    with pytest.raises(JobError, match="needs a value"):
        parse_cmdline([*base, "--bs"])
