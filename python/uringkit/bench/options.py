"""fio's job options, the subset uringkit implements: job files and command lines.

Values are parsed the way fio parses them (sizes with k/m/g suffixes in powers of two,
times in seconds unless suffixed, booleans as 0/1). An option uringkit does not implement
is an error naming it: nothing is silently ignored.
"""

from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass, field
from typing import Any

IO_URING_OPTS = (
    "sqthread_poll",
    "sqthread_poll_cpu",
    "registerfiles",
    "fixedbufs",
    "hipri",
    "nonvectored",
    "single_issuer",
    "defer_taskrun",
    "coop_taskrun",
)

#: option -> kind. Aliases map to their canonical name in ALIASES.
OPTIONS: dict[str, str] = {
    "name": "str",
    "filename": "str",
    "directory": "str",
    "size": "size",
    "rw": "rw",
    "rwmixread": "int",
    "rwmixwrite": "int",
    "bs": "size",
    "iodepth": "int",
    "iodepth_batch_submit": "int",
    "iodepth_batch_complete_min": "int",
    "iodepth_batch_complete_max": "int",
    "direct": "bool",
    "buffered": "bool",
    "runtime": "time",
    "time_based": "bool",
    "ramp_time": "time",
    "numjobs": "int",
    "fsync": "int",
    "fdatasync": "int",
    "ioengine": "engine",
    "verify": "verify",
    "group_reporting": "bool",
    "invalidate": "bool",
    "thread": "bool",
    "randrepeat": "bool",
    "randseed": "int",
    "norandommap": "bool",
    "percentile_list": "percentiles",
    "eta": "eta",
    "startdelay": "time",
    "end_fsync": "bool",
    "fsync_on_close": "bool",
    # the I/O region and how much I/O: [offset, offset + size), io_size bytes (default
    # size; more goes around again), number_ios I/Os, loops passes over the region
    "offset": "size",
    "io_size": "size",
    "number_ios": "int",
    "loops": "int",
    "unlink": "bool",
    # I/Os per second, evenly paced (read or write jobs)
    "rate_iops": "rate",
    # the mix of I/O sizes: 4k/50:64k/50 (sizes/percent; a size without /percent shares
    # what the others leave)
    "bssplit": "bssplit",
    # which blocks random I/O picks: random (default), zipf:THETA, pareto:H, normal:DEV
    "random_distribution": "distribution",
    # percentiles of slat, clat and lat are always reported (fio's json has them when
    # these are 1): accepted; =0 does not remove them (the job prints a note)
    "lat_percentiles": "bool",
    "clat_percentiles": "bool",
    "slat_percentiles": "bool",
    # uringkit runs the jobs of a file one after another: what these ask fio for
    "stonewall": "bool",
    "new_group": "bool",
    # fio's knobs for fewer clock reads: accepted, latency is measured anyway (a clock
    # read per I/O costs ~20 ns here); the job prints a note saying so
    "gtod_reduce": "bool",
    "disable_lat": "bool",
    "disable_clat": "bool",
    "disable_slat": "bool",
    "sqthread_poll": "bool",
    "sqthread_poll_cpu": "int",
    "registerfiles": "bool",
    "fixedbufs": "bool",
    "hipri": "bool",
    "nonvectored": "bool",
    "single_issuer": "bool",
    "defer_taskrun": "bool",
    "coop_taskrun": "bool",
}

ALIASES = {
    "readwrite": "rw",
    "blocksize": "bs",
    "iodepth_batch": "iodepth_batch_submit",
    "iodepth_batch_complete": "iodepth_batch_complete_min",
    "timeout": "runtime",
    "filesize": "size",  # (one file per job: the same thing)
    "io_limit": "io_size",
}

ENGINES = ("io_uring", "libaio", "posixaio", "threads", "psync", "auto")
#: fio's other synchronous engines: read/write, preadv/pwritev and preadv2/pwritev2 cost
#: the same as pread/pwrite per call; they run as psync (docs/bench.md says so)
ENGINE_ALIASES = {"sync": "psync", "pvsync": "psync", "pvsync2": "psync"}
RW = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")

#: options that may be given bare on the command line (`--norandommap`): every bool
BOOL_FLAGS = {k for k, kind in OPTIONS.items() if kind == "bool"}
#: fio's default random seed behaviour (randrepeat=1): the same offsets every run
DEFAULT_SEED = 0x5EED


class JobError(ValueError):
    """A job description uringkit cannot run, with the reason."""


def parse_size(text: str, option: str = "size") -> int:
    """fio sizes: 4k, 1m, 1g, 1t (powers of two; 'kib' too), plain bytes."""
    s = text.strip().lower().replace("ib", "").replace("b", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgtp]?)", s)
    if not m:
        raise JobError(f"{option}={text!r} is not a size (examples: 4k, 128m, 1g)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
    return int(float(m.group(1)) * mult[m.group(2)])


def parse_time(text: str, option: str = "runtime") -> float:
    """fio times: seconds by default; us, ms, s, m, h suffixes."""
    s = text.strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)?", s)
    if not m:
        raise JobError(f"{option}={text!r} is not a duration (examples: 10, 10s, 500ms, 2m)")
    mult = {None: 1.0, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    return float(m.group(1)) * mult[m.group(2)]


def parse_bool(text: str, option: str) -> bool:
    s = text.strip().lower()
    if s in ("1", "true", "yes", "on", ""):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise JobError(f"{option}={text!r} must be 0 or 1")


def parse_value(option: str, text: str) -> Any:
    key = ALIASES.get(option, option)
    kind = OPTIONS.get(key)
    if kind is None:
        raise JobError(
            f"option {option!r} is not supported by uringkit bench; supported: "
            + ", ".join(sorted(OPTIONS))
        )
    if kind == "str":
        return text
    if kind == "size":
        return parse_size(text, key)
    if kind == "time":
        return parse_time(text, key)
    if kind == "bool":
        return parse_bool(text, key)
    if kind == "int":
        try:
            return int(text, 0)
        except ValueError:
            raise JobError(f"{key}={text!r} must be an integer") from None
    if kind == "rw":
        if text not in RW:
            raise JobError(f"rw={text!r} is not supported; use one of {', '.join(RW)}")
        return "rw" if text == "readwrite" else text
    if kind == "engine":
        eng = ENGINE_ALIASES.get(text, text)
        if eng not in ENGINES:
            raise JobError(f"ioengine={text!r} is not supported; use one of {', '.join(ENGINES)}")
        return eng
    if kind == "rate":
        parts = text.split(",")
        try:
            n = int(parts[0], 0)
        except ValueError:
            n = 0
        if len(parts) > 1 and any(p.strip() for p in parts[1:]):
            raise JobError(
                f"{key}={text!r}: separate read,write rates are not supported; give one "
                "number (the job's reads or writes)"
            )
        if n < 1:
            raise JobError(f"{key}={text!r} must be a positive integer (I/Os per second)")
        return n
    if kind == "bssplit":
        if "," in text:
            raise JobError(
                f"bssplit={text!r}: separate read,write splits are not supported; give one "
                "split (e.g. 4k/50:64k/50)"
            )
        sizes: list[tuple[int, float | None]] = []
        for part in filter(None, text.split(":")):
            size, _, pct = part.partition("/")
            try:
                share = float(pct) if pct else None
            except ValueError:
                share = -1.0
            if share is not None and not 0 <= share <= 100:
                raise JobError(f"bssplit={text!r}: {pct!r} is not a percentage")
            sizes.append((parse_size(size, key), share))
        given = sum(p for _, p in sizes if p is not None)
        blank = [b for b, p in sizes if p is None]
        if not sizes or given > 100.0001 or (not blank and given <= 0):
            raise JobError(
                f"bssplit={text!r}: sizes with percentages adding up to at most 100 "
                "(example: 4k/50:64k/50)"
            )
        rest = (100 - given) / len(blank) if blank else 0.0
        # weights in hundredths of a percent
        return [(b, round((rest if p is None else p) * 100)) for b, p in sizes]
    if kind == "distribution":
        name, _, arg = text.partition(":")
        if name == "random" and not arg:
            return ("random", 0.0)
        try:
            v = float(arg)
        except ValueError:
            v = float("nan")
        if name == "zipf" and v > 0 and v != 1:
            return ("zipf", v)
        if name == "pareto" and 0 < v < 1:
            return ("pareto", v)
        if name in ("normal", "gauss") and (not arg or 0 <= v <= 100):
            return ("normal", v if arg else 0.0)
        raise JobError(
            f"random_distribution={text!r}: use random, zipf:THETA (THETA > 0, not 1; "
            "e.g. zipf:1.2), pareto:H (0 < H < 1; e.g. pareto:0.2) or normal:DEV (a "
            "percentage; e.g. normal:5)"
        )
    if kind == "eta":
        if text not in ("never", "always", "auto"):
            raise JobError(f"eta={text!r}: use never, always or auto")
        return text
    if kind == "percentiles":
        try:
            pcts = [float(x) for x in text.split(":") if x]
        except ValueError:
            pcts = []
        if not pcts or not all(0 < p <= 100 for p in pcts) or len(pcts) > 20:
            raise JobError(
                f"percentile_list={text!r}: 1 to 20 percentiles in (0, 100] separated by "
                "':' (example: 50:99:99.9)"
            )
        return pcts
    if kind == "verify":
        if text in ("crc32c", "crc32c-intel", "1"):
            return True
        if text in ("0", "", "none"):
            return False
        raise JobError(f"verify={text!r} is not supported; use verify=crc32c")
    raise AssertionError(kind)


@dataclass
class Job:
    """One job: fio option names to parsed values (global options merged in)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)

    def to_native(self) -> dict[str, Any]:
        """The dict `uringkit._native.run_job` takes, with fio's defaults applied."""
        o = dict(self.options)
        if "filename" not in o:
            raise JobError(f"job {self.name!r}: no filename (or directory) given")
        offset = o.get("offset", 0)
        if "size" not in o:
            try:
                o["size"] = max(os.path.getsize(o["filename"]) - offset, 0)
            except OSError:
                o["size"] = 0
            if not o["size"]:
                raise JobError(
                    f"job {self.name!r}: size= is required for a new file (or one no "
                    "larger than offset=)"
                )
        loops = o.get("loops", 1)
        if loops < 1:
            raise JobError(f"job {self.name!r}: loops={loops} must be at least 1")
        if loops > 1 and not o.get("time_based"):
            # fio repeats the whole job: each pass does io_size (default size) bytes and
            # at most number_ios I/Os again
            o["io_size"] = o.get("io_size", o["size"]) * loops
            if o.get("number_ios"):
                o["number_ios"] = o["number_ios"] * loops
        if o.get("buffered") is not None and "direct" not in o:
            o["direct"] = not o["buffered"]
        if "rwmixwrite" in o and "rwmixread" not in o:
            o["rwmixread"] = 100 - o["rwmixwrite"]
        engine = o.get("ioengine", "psync")
        if engine == "auto":
            from ..engines import choose_engine

            choice = choose_engine(direct=bool(o.get("direct", False)))
            engine = choice.name
            self.options["ioengine"] = engine
            self.options["engine_reason"] = choice.reason
        if "randseed" in o:
            seed = o["randseed"]
        elif o.get("randrepeat", True):
            seed = DEFAULT_SEED
        else:  # randrepeat=0: different offsets every run
            seed = int.from_bytes(os.urandom(8), "little")
        depth = o.get("iodepth", 1)
        bsub = o.get("iodepth_batch_submit", 1) or 1
        bcomp = o.get("iodepth_batch_complete_min", 1) or 1
        # fio: "by default it is equal to iodepth_batch_complete_min"
        bmax = max(o.get("iodepth_batch_complete_max", bcomp) or bcomp, bcomp)
        return {
            "name": self.name,
            "filename": o["filename"],
            "size": o["size"],
            "rw": o.get("rw", "read"),
            "rwmixread": o.get("rwmixread", 50),
            "bs": max(b for b, _ in o["bssplit"]) if o.get("bssplit") else o.get("bs", 4096),
            "bssplit": o.get("bssplit") or [],
            "iodepth": depth,
            "iodepth_batch_submit": min(bsub, depth),
            "iodepth_batch_complete_min": min(bcomp, depth),
            "iodepth_batch_complete_max": min(bmax, depth),
            "direct": bool(o.get("direct", False)),
            "runtime": o.get("runtime"),
            "time_based": bool(o.get("time_based", False)),
            "ramp_time": o.get("ramp_time", 0.0),
            "fsync": o.get("fsync", 0),
            "fdatasync": o.get("fdatasync", 0),
            "ioengine": engine,
            "verify": bool(o.get("verify", False)),
            "numjobs": o.get("numjobs", 1),
            "seed": seed & (2**64 - 1),
            "offset": offset,
            "io_size": o.get("io_size"),
            "number_ios": o.get("number_ios"),
            "rate_iops": o.get("rate_iops"),
            "invalidate": bool(o.get("invalidate", True)),
            "random_distribution": o.get("random_distribution"),
            "percentiles": o.get("percentile_list"),
            **{k: o[k] for k in IO_URING_OPTS if k in o},
        }


def _finish(jobs: list[Job]) -> list[Job]:
    for j in jobs:
        o = j.options
        if "directory" in o and "filename" not in o:
            o["filename"] = os.path.join(o["directory"], f"{j.name}.0.0")
        elif "directory" in o and not os.path.isabs(o["filename"]):
            o["filename"] = os.path.join(o["directory"], o["filename"])
        if o.get("norandommap") is False:
            raise JobError(
                f"job {j.name!r}: norandommap=0 (fio's random map: every block once per "
                "pass) is not implemented; uringkit picks random offsets with "
                "replacement, as fio does with norandommap=1"
            )
        if o.get("ioengine") != "io_uring":
            bad = [k for k in IO_URING_OPTS if k in o]
            if bad:
                raise JobError(
                    f"job {j.name!r}: {', '.join(bad)} only apply to ioengine=io_uring "
                    f"(this job uses {o.get('ioengine', 'psync')})"
                )
    return jobs


def parse_jobfile(text: str, source: str = "<jobfile>") -> list[Job]:
    """An fio job file: [global] and one section per job."""
    cp = configparser.ConfigParser(
        allow_no_value=True, interpolation=None, delimiters=("=",), comment_prefixes=("#", ";")
    )
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        cp.read_string(text, source=source)
    except configparser.Error as e:
        raise JobError(f"{source}: {e}") from None
    glob: dict[str, Any] = {}
    jobs: list[Job] = []
    for section in cp.sections():
        opts: dict[str, Any] = {}
        for k, v in cp.items(section):
            key = ALIASES.get(k, k)
            try:
                opts[key] = parse_value(k, "1" if v is None else v)
            except JobError as e:
                raise JobError(f"{source} [{section}]: {e}") from None
        if section == "global":
            glob.update(opts)
        else:
            jobs.append(Job(section, {**glob, **opts}))
    if not jobs:
        raise JobError(f"{source}: no job sections (only [global])")
    return _finish(jobs)


def parse_cmdline(args: list[str]) -> list[Job]:
    """fio's command-line form: options before the first --name are global; each --name
    starts a job that takes the options after it."""
    glob: dict[str, Any] = {}
    jobs: list[Job] = []
    for a in args:
        if not a.startswith("--"):
            raise JobError(f"unexpected argument {a!r}: fio options look like --key=value")
        k, eq, v = a[2:].partition("=")
        if not eq and k not in BOOL_FLAGS:
            raise JobError(f"--{k} needs a value (--{k}=VALUE)")
        key = ALIASES.get(k, k)
        val = parse_value(k, v if eq else "1")
        if key == "name":
            jobs.append(Job(str(val), dict(glob)))
        elif jobs:
            jobs[-1].options[key] = val
        else:
            glob[key] = val
    if not jobs and glob:
        jobs.append(Job("job", glob))
    return _finish(jobs)
