"""``python -m benchmarks``: run every workload on tinycoro and its peers, print and write results."""

from __future__ import annotations

import argparse
import datetime as _dt
import shlex
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

from . import (
    config, machine, report, w_aio_file, w_bulk, w_cluster, w_conns, w_direct, w_echo, w_file,
    w_freethreaded, w_mutex, w_scaling, w_spawn, w_switch, w_wholefile,
)
from .harness import CaseResult, format_tables, run_case

WORKLOADS: dict[str, ModuleType] = {
    m.NAME: m
    for m in (w_switch, w_spawn, w_mutex, w_file, w_wholefile, w_direct, w_aio_file, w_echo,
              w_conns, w_bulk, w_scaling, w_cluster, w_freethreaded)
}
PROFILED = ("switch", "spawn", "file", "echo")  # the tinycoro hot paths profiled on full runs
# A run writes its report to the build folder unless asked to publish it: an exploratory run
# must not rewrite the tracked docs/benchmarks.md (its plot, full page and stored runs) that the
# README quotes.
DRAFT = config.BUILD_DIR / "benchmarks.md"
PUBLISHED = config.REPO / "docs" / "benchmarks.md"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="tinycoro vs asyncio, uvloop and aiofiles: medians, ratios and targets.",
    )
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and smaller sizes (< 3 min)")
    ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), metavar="NAME",
                    help=f"run only these workloads: {', '.join(WORKLOADS)}")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=None,
                       help="markdown file to write (its plot goes next to it as <name>.png); "
                       f"default {DRAFT.relative_to(config.REPO)}, a git-ignored build file")
    where.add_argument("--publish", action="store_true",
                       help=f"write the tracked {PUBLISHED.relative_to(config.REPO)} (and its "
                       "plot) instead: for a run whose figures the README and docs quote")
    ap.add_argument("--reps", type=int, help="measured repetitions per series (default: by mode)")
    prof = ap.add_mutually_exclusive_group()
    prof.add_argument("--profile", dest="profile", action="store_true", default=None,
                      help="profile the tinycoro side afterwards (default on full runs)")
    prof.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--python", metavar="X.Y",
                    help="run everything (tinycoro, the peers' servers and workloads) on Python X.Y "
                    "instead, in build/benchmarks/pyX.Y-venv, made on first use from pyenv's X.Y "
                    "(3.13t: the free-threaded build tools/build_freethreaded_python.sh caches); "
                    "the page keeps the latest run of each version")
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # smoke-test sizes
    return ap.parse_args(argv)


def running_version() -> str:
    """``"3.11"``; ``"3.13t"`` on a free-threaded build (its own venv and part of the page)."""
    from .peers import is_free_threaded

    return f"{sys.version_info.major}.{sys.version_info.minor}" + ("t" if is_free_threaded() else "")


def _on_python(version: str, argv: list[str]) -> int:
    """Run this command again, without ``--python``, on Python *version*'s environment."""
    from .peers import version_python

    print(f"preparing Python {version}'s environment (the first time builds tinycoro for it)", flush=True)
    py, why = version_python(version)
    if py is None:
        print(f"cannot run on Python {version}: {why}", file=sys.stderr)
        return 2
    runtime = subprocess.run([py, "-c", "import tinycoro, tinycoro.compiled as c; print(c.describe())"],
                             capture_output=True, text=True, cwd=str(config.REPO))
    print(f"Python {version}: tinycoro's {runtime.stdout.strip() or runtime.stderr.strip()[-200:]}", flush=True)
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--python":
            skip = True
        elif not a.startswith("--python="):
            rest.append(a)
    return subprocess.run([py, "-m", "benchmarks", *rest], cwd=str(config.REPO)).returncode


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.python and args.python != running_version():
        return _on_python(args.python, list(argv if argv is not None else sys.argv[1:]))
    version = running_version()
    cfg = config.pick(args.quick, args.tiny)
    if args.reps is not None:
        cfg = cfg.with_(reps=max(1, args.reps))
    if args.profile is not None:
        cfg = cfg.with_(profile=args.profile)
    names = args.only or list(WORKLOADS)
    command = "python -m benchmarks" + ("".join(" " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))
    t_start = time.perf_counter()
    load_start = machine.loadavg()
    print(f"tinycoro benchmarks, {cfg.mode} mode: {cfg.reps} reps (+{cfg.warmup} warmup) per series, "
          f"order rotated every rep", flush=True)

    results: list[CaseResult] = []
    for name in names:
        mod = WORKLOADS[name]
        with ExitStack() as stack:
            cases = mod.build(cfg, stack)
            for case in cases:
                print(f"[{case.workload}: {case.case}]", flush=True)
                results.append(run_case(case, cfg.reps, cfg.warmup, log=lambda m: print(m, flush=True)))

    profiles: dict[str, tuple[str, str]] = {}
    if cfg.profile:
        from . import profile as prof

        for name in (n for n in PROFILED if n in names):
            print(f"[profiling the tinycoro side: {prof.TITLES[name]}]", flush=True)
            try:
                profiles[prof.TITLES[name]] = prof.profile(name, cfg, seconds=4.0)
            except Exception as e:  # noqa: BLE001 - a profile is extra; report why it is missing
                profiles[prof.TITLES[name]] = ("failed", f"{type(e).__name__}: {e}")

    wall = time.perf_counter() - t_start
    print()
    print(format_tables(results))
    print(f"\nwall time: {wall:.0f} s")

    out: Path = PUBLISHED if args.publish else (args.out or DRAFT)
    date = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load = f"{load_start} / {machine.loadavg()}"
    # The free-threaded comparison has a part of the page of its own (the README quotes it),
    # written by runs on the reference Python; on another version its rows stay in that
    # version's part. A run of it alone (--only freethreaded) leaves the version's part alone.
    own_part = version == config.REFERENCE_PYTHON
    ft = [r for r in results if own_part and r.case.workload == w_freethreaded.WORKLOAD]
    rest = [r for r in results if r not in ft]
    wrote: list[Path] = []
    if ft:
        ft_notes = [*w_freethreaded.notes(), f"Load average (1/5/15 min) at start / end: {load}."]
        record = report.run_record(ft, command=command, date=date, wall_seconds=wall,
                                   lead=w_freethreaded.summary(ft), notes=ft_notes)
        wrote += report.publish_part(out, w_freethreaded.PART, w_freethreaded.HEADING, record)
    if rest or not ft:
        wrote += _write_version_part(rest, out, version, cfg, command, date, wall, load, profiles)
    print("wrote " + " and ".join(dict.fromkeys(str(w) for w in wrote)))
    return 0


def chart_path(out: Path, version: str) -> Path:
    """Where a run on Python *version* that writes the page *out* draws its chart: beside the
    page under the page's name on the reference Python (the README shows it), with the version
    in the name on any other."""
    return out.with_suffix(".png") if version == config.REFERENCE_PYTHON else out.with_name(f"{out.stem}-py{version}.png")


def _write_version_part(
    results: list[CaseResult], out: Path, version: str, cfg: config.Config, command: str, date: str,
    wall: float, load: str, profiles: dict[str, tuple[str, str]],
) -> list[Path]:
    """Publish Python *version*'s run to *out* (the page, the full page and the stored runs
    beside it), with its chart and its profiles; return what was written."""
    image = chart_path(out, version)
    image_skip = report.plot(results, image, f"tinycoro benchmarks, {date}, {cfg.mode} mode, Python {version}")
    profiles_page = out.with_name(f"{out.stem}-profiles.md")
    notes = [
        f"tinycoro runs workloads 1-5 on {cfg.contexts} context (asyncio and uvloop are "
        "single-threaded too); workload 6 varies the number of contexts; workload 7 (cluster "
        f"scaling) runs on {cfg.cluster_engines} ipyparallel engines of 1 context each.",
        f"{cfg.reps} measured repetitions per series after {cfg.warmup} warmup; the order of "
        "the series rotates every repetition; each rate is timed inside its event loop.",
        "Echo servers run one per process (uvloop with its event loop policy); the client is "
        f"echo_load (C, epoll), {cfg.echo_conns} connections, {cfg.echo_seconds:g} s per run; "
        "p99 is echo_load's 99th percentile round trip; server CPU is the server process's "
        "user + system time over the run divided by its requests.",
        "uringio runs in its own virtual environment on Python >= 3.12 (build/benchmarks/"
        "uringio-venv, made by the runner); fio (Debian package) is the O_DIRECT peer.",
    ]
    if any(r.case.workload == w_freethreaded.WORKLOAD for r in results):
        notes += w_freethreaded.notes()
    record = report.run_record(
        results,
        command=command,
        date=date,
        wall_seconds=wall,
        machine=machine.describe() + [("load average (1/5/15 min) at start / end", load)],
        image=None if image_skip else image,
        image_skip=image_skip,
        profiles_page=profiles_page if profiles else None,
        notes=notes,
    )
    if profiles:
        report.write_profiles(
            profiles_page, report.profiles_section(profiles, date=date, command=command, version=version), version
        )
    wrote = report.publish_version(out, version, record)
    return wrote + ([] if image_skip else [image]) + ([profiles_page] if profiles else [])
