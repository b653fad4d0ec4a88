"""Profiles of tinycoro's side of the hot workloads: task switch, spawn + join, file reads, echo.

``python -m benchmarks.profile [--only switch spawn file echo] [--tool auto|py-spy|cprofile]
[--seconds S] [--top N]`` prints, per workload, the functions where the context thread spends
its time. The in-process workloads use cProfile, enabled on the context thread from inside the
workload (the loop body of ``Engine.run`` itself is then not attributed, and cProfile's per-call
overhead inflates small functions). The echo server is sampled from outside by py-spy when it
is installed (``pip install py-spy``; not a project dependency): self and total percentages of
the context thread's samples, engine loop included; otherwise it profiles itself with cProfile.

On full runs the runner writes these excerpts to docs/benchmarks-profiles.md (the page
benchmarks.md links), one part per Python version.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Awaitable, Callable

import tinycoro as tc

from . import config, echo_procs, w_file, w_spawn, w_switch
from .instructions import echo_instructions, mutex_instructions, pingpong_instructions
from .config import REPO, Config, checkout_env

TARGETS = ("switch", "spawn", "file", "echo")
TITLES = {
    "switch": "task switch, 2-task yield_now ping-pong",
    "spawn": "spawn + join of trivial tasks",
    "file": "file 4 KiB random reads, 64 in flight",
    "echo": "TCP echo server, 64 B, 50 connections (echo_load as the client)",
}


def find_pyspy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


# -- the tinycoro side of each in-process workload, repeated for a while ------------------------
def _repeat(seconds: float, once: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[int]]:
    async def loop() -> int:
        n = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            await once()
            n += 1
        return n

    return loop


def _workload(name: str, cfg: Config, stack: ExitStack) -> Callable[[], Awaitable[Any]]:
    if name == "switch":
        return lambda: w_switch._tc_main(2, cfg.pingpong_yields // 4 or 1)
    if name == "spawn":
        return lambda: w_spawn._tc_main(cfg.spawn_tasks)
    if name == "file":
        path = w_file.test_file(cfg, stack)
        parts = w_file.shares(w_file.offsets(cfg, cfg.file_ops // 4 or 64), cfg.inflight)
        return lambda: w_file.tc_random_io(path, parts, write=False)
    raise ValueError(name)


def run_target(name: str, cfg: Config, seconds: float, prof: cProfile.Profile | None = None) -> None:
    """Run the tinycoro side of *name* for *seconds* on one context (optionally cProfiled)."""
    with ExitStack() as stack:
        body = _repeat(seconds, _workload(name, cfg, stack))

        async def main() -> int:
            if prof is not None:
                prof.enable()  # the context thread: cProfile hooks are per thread
            try:
                return await body()
            finally:
                if prof is not None:
                    prof.disable()

        tc.run(main(), contexts=1)


# -- py-spy ------------------------------------------------------------------------------------
_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")


def summarize_raw(raw: str, top: int) -> str:
    """Self and total percentages per function from py-spy's ``--format raw`` output,
    counting only samples of context threads (stacks that pass through ``Engine.run``)."""
    self_c: collections.Counter[str] = collections.Counter()
    total_c: collections.Counter[str] = collections.Counter()
    n = 0
    for line in raw.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        count = int(m[2])
        if "Engine.run (" not in m[1]:
            continue  # not a context thread (the main thread waiting in loop(), imports)
        frames = []
        for fr in m[1].split(";"):
            fm = _FRAME.match(fr)
            frames.append(f"{fm[1]} ({fm[2]})" if fm else fr)
        n += count
        self_c[frames[-1]] += count
        for fr in set(frames):
            total_c[fr] += count
    if not n:
        return "(no samples)"
    out = [f"{n} samples of the context thread", f"{'self%':>6} {'total%':>7}  function (file)"]
    for fn, c in self_c.most_common(top):
        out.append(f"{100 * c / n:6.1f} {100 * total_c[fn] / n:7.1f}  {fn}")
    return "\n".join(out)


def _pyspy(name: str, cfg: Config, seconds: float, top: int, pyspy: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        raw = os.path.join(d, "raw.txt")
        base = [pyspy, "record", "--nonblocking", "-r", "1000", "-f", "raw", "-o", raw]
        if name == "echo":
            exe = echo_procs.build_echo_load()
            srv = echo_procs.EchoServer("tinycoro", 1)
            try:
                rec = subprocess.Popen(
                    base + ["-d", f"{seconds:g}", "--pid", str(srv.proc.pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                time.sleep(0.3)  # let py-spy attach before the load starts
                sample = echo_procs.run_load(exe, srv.port, cfg.echo_conns, 64, seconds)
                _, err = rec.communicate(timeout=seconds + 30)
            finally:
                srv.close()
            head = f"echo_load during profiling: {sample.value:,.0f} req/s (py-spy slows the server)"
        else:
            env = checkout_env()
            cmd = [sys.executable, "-m", "benchmarks.profile", "--target", name, "--seconds", f"{seconds:g}"]
            if cfg.mode == "tiny":
                cmd.append("--tiny")
            res = subprocess.run(base + ["--"] + cmd, cwd=str(REPO), env=env, capture_output=True, text=True)
            err = res.stderr
            head = ""
        try:
            with open(raw) as f:
                text = f.read()
        except OSError:
            return f"(py-spy produced no profile: {err.strip()[-300:]})"
    body = summarize_raw(text, top)
    return f"{head}\n{body}".strip()


# -- cProfile ----------------------------------------------------------------------------------
def _pstats_text(stats: pstats.Stats, top: int) -> str:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    lines = buf.getvalue().splitlines()
    # Keep the header and rows; shorten absolute paths to package-relative ones.
    keep = [ln for ln in lines if ln.strip() and not ln.startswith("   Ordered by") and "List reduced" not in ln]
    text = "\n".join(keep)
    text = re.sub(r"/\S*?/(tinycoro|benchmarks|asyncio|liburing)/", r"\1/", text)
    return re.sub(r"/\S*/lib/python3\.\d+/", "", text)  # the standard library


def _cprofile(name: str, cfg: Config, seconds: float, top: int) -> str:
    if name == "echo":
        exe = echo_procs.build_echo_load()
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "echo.prof")
            env = {"TINYCORO_BENCH_PROFILE": out, "TINYCORO_BENCH_PROFILE_SECS": f"{seconds:g}"}
            srv = echo_procs.EchoServer("tinycoro", 1, env=env)
            try:
                echo_procs.run_load(exe, srv.port, cfg.echo_conns, 64, seconds + 0.5)
                deadline = time.monotonic() + 30
                while not os.path.exists(out) and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                srv.close()
            return _pstats_text(pstats.Stats(out), top)
    prof = cProfile.Profile()
    run_target(name, cfg, seconds, prof)
    return _pstats_text(pstats.Stats(prof), top)


def profile(name: str, cfg: Config, tool: str = "auto", seconds: float = 4.0, top: int = 14) -> tuple[str, str]:
    """(tool used, text excerpt) for workload *name*.

    ``auto`` samples the echo server with py-spy when it is installed and uses cProfile for the
    in-process workloads: py-spy 0.4 on CPython 3.11 attributes the time spent inside resumed
    coroutine frames to the ``coro.send`` line of ``Engine._step``, which hides exactly the
    frames (``read_at``, ``_pread``, ``yield_now``) these profiles are for.
    """
    pyspy = find_pyspy() if tool in ("auto", "py-spy") else None
    if tool == "py-spy" and pyspy is None:
        raise SystemExit("py-spy not found: pip install py-spy")
    if tool == "auto" and name != "echo":
        pyspy = None
    if pyspy is not None:
        return "py-spy", _pyspy(name, cfg, seconds, top, pyspy)
    return "cProfile", _cprofile(name, cfg, seconds, top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=TARGETS, default=list(TARGETS))
    ap.add_argument("--tool", choices=("auto", "py-spy", "cprofile", "perf"), default="auto",
                    help="profiler; with --syscalls: perf (counting) instead of strace")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--target", choices=TARGETS, help=argparse.SUPPRESS)  # child of py-spy
    ap.add_argument(
        "--instructions",
        metavar="KIND",
        help="only count instructions per echo request of server KIND with callgrind",
    )
    ap.add_argument(
        "--syscalls",
        nargs="+",
        metavar="KIND",
        help="only count system calls per echo request of servers KIND (e.g. tinycoro c-uring) with strace",
    )
    ap.add_argument(
        "--utilisation",
        nargs="+",
        metavar="KIND",
        help="only measure CPU over wall, run-queue wait, sleeps and the client's CPU per echo "
        "request of servers KIND, alternating (KIND:VAR=VALUE sets a server's environment)",
    )
    ap.add_argument(
        "--setup",
        nargs="+",
        metavar="KIND",
        help="only measure the HTTP-style server's CPU per connection to set one up and to tear "
        "it down, servers KIND alternating (benchmarks.setupcost; KIND:VAR=VALUE as --utilisation)",
    )
    ap.add_argument("--conns", type=int, default=10_000, help="connections (--setup)")
    ap.add_argument("--gilwait", action="store_true",
                    help="only show the tinycoro echo server's waits for the GIL by what its "
                    "threads came back from (perf uprobes; root; use --contexts 2)")
    ap.add_argument("--contexts", type=int, default=1,
                    help="contexts of the tinycoro server (--syscalls, --utilisation, --gilwait)")
    ap.add_argument("--pingpong", action="store_true",
                    help="only count instructions per one-connection echo round trip (callgrind)")
    ap.add_argument("--mutex", nargs="?", const="tinycoro", choices=("tinycoro", "asyncio"),
                    help="only count instructions per uncontended lock + unlock (callgrind) of a "
                    "tc.Mutex or an asyncio.Lock")
    args = ap.parse_args(argv)
    if args.syscalls:
        from . import syscalls

        tool = "perf" if args.tool == "perf" else "strace"
        return syscalls.main(args.syscalls, args.seconds, args.contexts, tool)
    if args.setup:
        from . import setupcost

        return setupcost.main(args.setup, args.conns)
    if args.gilwait:
        from . import gilwait

        return gilwait.main(args.contexts, args.seconds)
    if args.utilisation:
        from . import utilisation

        return utilisation.main(args.utilisation, args.seconds, args.contexts)
    if args.pingpong:
        value, note = pingpong_instructions()
        print(f"ping-pong: {value:,.0f} instructions per round trip ({note})" if value else note)
        return 0
    if args.mutex:
        value, note = mutex_instructions(args.mutex)
        print(f"{args.mutex} mutex: {value:,.0f} instructions per lock + unlock ({note})" if value else note)
        return 0
    if args.instructions:
        value, note = echo_instructions(args.instructions, args.seconds)
        print(f"{args.instructions}: {value:,.0f} instructions per request ({note})" if value else note)
        return 0
    cfg = config.pick(quick=False, tiny=args.tiny)
    if args.target:
        run_target(args.target, cfg, args.seconds)
        return 0
    for name in args.only:
        used, text = profile(name, cfg, args.tool, args.seconds, args.top)
        print(f"== {TITLES[name]} ({used}) ==\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
