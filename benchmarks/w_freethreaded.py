"""8. Free-threaded Python: the same workloads on 1 and 2 contexts on the GIL build (the Python
the runner runs on) and on the free-threaded build (3.13t), side by side in one run.

Under the GIL a second context overlaps I/O but adds no CPU (docs/design.md, rule 15); on a
free-threaded build each context runs Python on its own core. The cases:

* **CPU-bound coroutines**: 8 tasks, each 50 chunks of a 20,000-iteration loop of integer
  arithmetic with ``await tc.sleep(0)`` between chunks (spawned round robin, 4 per context on
  2 contexts); chunks per second. Target: 2 contexts >= 1.8x one on the free-threaded build.
* **JSON request/response**: :mod:`benchmarks.json_server`, whose every request costs ~150 us
  of Python (a JSON round trip of a ~4 KiB document), driven by echo_load (C) with 50
  connections. Target: 2 contexts >= 1.6x one on the free-threaded build.
* **Mutex across contexts**: uncontended (2 tasks, each locking its own ``tc.Mutex``) and
  contended (8 tasks sharing one, each holding it across a yield), spread over the contexts.
* **Echo**: the 64 B echo server of workload 5 on 1 and 2 contexts.

Every case has four series, ``<build> <n> ctx``, and its ratios: 2 contexts / 1 context on each
build, and the free-threaded build's 1 context / the GIL build's 1 context: the free-threaded
interpreter's own single-thread cost on the same work (the GIL build is the running Python,
so from Python 3.11 that ratio includes what 3.11 and 3.13 differ by; ``--python 3.13`` makes it
the cost of free threading alone). The in-process series run in one worker process per build
(:mod:`benchmarks.ft_worker`), the servers in one process per build and contexts, all started
once and kept warm, so the harness alternates the series of both builds every repetition. Every
row shows the CPU time beside the wall-clock rate: the process's user + system CPU per unit
(chunk, lock pair, request), which stays flat when a second core does half the work.

The free-threaded interpreter is the one ``tools/build_freethreaded_python.sh`` caches; its
environment (``build/benchmarks/py3.13t-venv``, tinycoro compiled for it as ``.ci/run``'s
``ft_install`` does) is made on first use, or ``$TINYCORO_BENCH_PY313T`` names one ready to use.
Its children run without ``PYTHON_GIL``: a series whose worker finds the GIL on after importing
tinycoro fails with that reason rather than report a free-threaded figure that is not one.
Without the interpreter, its rows are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, Callable

from . import json_server
from .config import REPO, Config, checkout_env
from .echo_procs import EchoLoadMissing, EchoServer, build_echo_load, run_load
from .harness import Case, CaseResult, Ratio, RatioResult, Sample, Series, SeriesResult, round_ratio
from .peers import FREE_THREADED, is_free_threaded, version_python
from .w_echo import servers

NAME = "freethreaded"
WORKLOAD = "free-threaded Python"
CONTEXTS = (1, 2)  # always explicit: what contexts=None means may differ between builds
CPU_TASKS, CPU_CHUNKS, CPU_ITERS = 8, 50, 20_000
TINY_CPU = (8, 2, 200)
TARGETS = {"cpu": 1.8, "json": 1.6}  # 2 contexts / 1 context on the free-threaded build
JSON_REQUEST = 64  # bytes of each request (ends in a blank line)
ECHO_SIZE = 64
READY_TIMEOUT = 60.0  # a loaded machine, and a first import that compiles nothing but is slow
REPLY_TIMEOUT = 600.0
ENV_PYTHON = "TINYCORO_BENCH_PY313T"


def _gil_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def label(build: str, contexts: int) -> str:
    return f"{build} {contexts} ctx"


def builds(cfg: Config) -> dict[str, tuple[str | None, str | None]]:
    """``{tag: (python, skip reason)}`` for the GIL build and the free-threaded build."""
    if is_free_threaded():
        gil = (None, "the runner itself runs on the free-threaded build: run it from a GIL "
                     "build to compare the two (python -m benchmarks --only freethreaded)")
        return {"GIL": gil, FREE_THREADED: (sys.executable, None)}
    named = os.environ.get(ENV_PYTHON)
    ft = (named, None) if named else version_python(FREE_THREADED, create=cfg.mode != "tiny")
    return {_gil_tag(): (sys.executable, None), FREE_THREADED: ft}


def child_env() -> dict[str, str]:
    """The environment of every child: this checkout importable, and no ``PYTHON_GIL``, so that
    the free-threaded build runs as a user's would (the GIL off unless an import turns it on)."""
    env = checkout_env()
    env.pop("PYTHON_GIL", None)
    return env


# -- the in-process series: one worker per build ----------------------------------------------
class Worker:
    """A :mod:`benchmarks.ft_worker` process on *python*; ``info`` is its READY description."""

    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen(
            [python, "-m", "benchmarks.ft_worker"], cwd=str(REPO), env=child_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        line = self._line(READY_TIMEOUT)
        if not line.startswith("READY "):
            err = self._stop_and_stderr()
            raise RuntimeError(f"worker on {python} did not start: {line.strip()!r} {err[-300:]}")
        self.info: dict[str, Any] = json.loads(line[len("READY "):])

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if r else ""

    def _stop_and_stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return self.proc.stderr.read().strip() if self.proc.stderr else ""

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self._line(REPLY_TIMEOUT)
        if not line:
            raise RuntimeError(f"worker gave no answer to {request}: {self._stop_and_stderr()[-300:]}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        if self.info["free_threaded"] and reply["gil"]:
            raise RuntimeError("the GIL was on on the free-threaded build after this workload")
        return reply

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the worker's loop ends at end of input
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


def _measure(worker: Worker, request: dict[str, Any]) -> Sample:
    """One repetition of an in-process series: the rate, and the CPU per unit."""
    reply = worker.run(request)
    units = reply["units"]
    user, system = reply["cpu"]
    return Sample(reply["value"], cpu_us=(user / units * 1e6, system / units * 1e6))


# -- the servers: one process per build and contexts -------------------------------------------
class Server(EchoServer):
    """``python -m <module> [args...]`` on *python*, started and stopped as an echo server is."""

    def __init__(self, python: str, module: str, args: list[str]) -> None:
        self.kind = f"{module} on {python}"
        self.proc = subprocess.Popen(
            [python, "-m", module, *args], cwd=str(REPO), env=child_env(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.port = self._wait_ready(timeout=READY_TIMEOUT)


# -- the cases ---------------------------------------------------------------------------------
INFO: dict[str, dict[str, Any]] = {}  # tag -> the worker's description, for the run's notes


def _ratios(tags: list[str], target: float | None) -> list[Ratio]:
    gil, ft = tags
    out = [Ratio(label(ft, 2), label(ft, 1), target), Ratio(label(gil, 2), label(gil, 1))]
    out.append(Ratio(label(ft, 1), label(gil, 1)))  # the free-threaded interpreter's own cost
    if target is not None:  # the workloads the build is for: against today's default
        out.append(Ratio(label(ft, 2), label(gil, 1)))
    return out


def _inprocess_case(
    what: str, unit: str, request: dict[str, Any], workers: dict[str, Worker | str], target: float | None,
) -> Case:
    series = []
    for tag, w in workers.items():
        for n in CONTEXTS:
            if isinstance(w, str):
                series.append(Series(label(tag, n), skip=w))
                continue
            req = dict(request, contexts=n)
            series.append(Series(label(tag, n), partial(_measure, w, req)))
    return Case(WORKLOAD, what, unit, series, _ratios(list(workers), target))


def _server_case(
    what: str, stack: ExitStack, pythons: dict[str, tuple[str | None, str | None]],
    start: Callable[[str, int], EchoServer], load: Callable[[EchoServer], Sample],
    exe_skip: str | None, target: float | None,
) -> Case:
    tags = list(pythons)
    ratios = _ratios(tags, target)
    labels = [label(t, n) for t in tags for n in CONTEXTS]
    if exe_skip:
        return Case(WORKLOAD, what, "req/s", [Series(lb) for lb in labels], ratios, skip=exe_skip)
    kinds: dict[str, tuple[str, Any]] = {}
    skips: dict[str, str] = {}
    for t in tags:
        py, why = pythons[t]
        for n in CONTEXTS:
            if py is None:
                skips[label(t, n)] = why or "no interpreter"
            else:
                kinds[label(t, n)] = (py, n)
    running = servers(stack, kinds, lambda py, n: start(py, n))
    series = []
    for lb in labels:
        srv = skips.get(lb) or running[lb]
        if isinstance(srv, str):
            series.append(Series(lb, skip=srv))
        else:
            series.append(Series(lb, partial(load, srv)))
    return Case(WORKLOAD, what, "req/s", series, ratios)


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    pythons = builds(cfg)
    workers: dict[str, Worker | str] = {}
    INFO.clear()
    for tag, (py, why) in pythons.items():
        if py is None:
            workers[tag] = why or "no interpreter"
            continue
        try:
            w = Worker(py)
        except (OSError, RuntimeError) as e:
            workers[tag] = str(e)
            continue
        stack.callback(w.close)
        workers[tag] = w
        INFO[tag] = w.info

    tasks, chunks, iters = TINY_CPU if cfg.mode == "tiny" else (CPU_TASKS, CPU_CHUNKS, CPU_ITERS)
    pairs = max(1, cfg.mutex_uncontended // 2)
    m_tasks, m_iters = 8, cfg.mutex_iters * 5
    try:
        exe: Path | None = build_echo_load()
        exe_skip = None
    except EchoLoadMissing as e:
        exe, exe_skip = None, str(e)
    conns, secs = cfg.echo_conns, cfg.echo_seconds

    def json_load(srv: EchoServer) -> Sample:
        return run_load(exe, srv.port, conns, JSON_REQUEST, secs, srv.proc.pid,  # type: ignore[arg-type]
                        json_server.RESPONSE_BYTES)

    def echo_load(srv: EchoServer) -> Sample:
        return run_load(exe, srv.port, conns, ECHO_SIZE, secs, srv.proc.pid)  # type: ignore[arg-type]

    return [
        _inprocess_case(
            f"CPU-bound coroutines, {tasks} tasks x {chunks} chunks of {iters:,}", "chunks/s",
            {"workload": "cpu", "tasks": tasks, "chunks": chunks, "iters": iters}, workers, TARGETS["cpu"],
        ),
        _server_case(
            f"JSON request/response (~4 KiB document), {conns} conns", stack, pythons,
            lambda py, n: Server(py, "benchmarks.json_server", [str(n)]), json_load, exe_skip, TARGETS["json"],
        ),
        _inprocess_case(
            "tc.Mutex uncontended, 2 tasks", "lock+unlock/s",
            {"workload": "mutex-uncontended", "tasks": 2, "pairs": pairs}, workers, None,
        ),
        _inprocess_case(
            f"tc.Mutex contended, {m_tasks} tasks", "lock+unlock/s",
            {"workload": "mutex-contended", "tasks": m_tasks, "iters": m_iters}, workers, None,
        ),
        _server_case(
            f"echo {ECHO_SIZE} B, {conns} conns", stack, pythons,
            lambda py, n: Server(py, "benchmarks.echo_server", ["tinycoro", str(n)]), echo_load, exe_skip, None,
        ),
    ]


def notes() -> list[str]:
    """What each build was, for the run's notes."""
    out = []
    for tag, info in INFO.items():
        if info["free_threaded"]:
            kind = f"free-threaded, the GIL {'on' if info['gil'] else 'off'} after importing tinycoro (no PYTHON_GIL)"
        else:
            kind = "with the GIL"
        out.append(f"Workload 8, build {tag}: CPython {info['python']} {kind}, tinycoro's {info['runtime']}.")
    if INFO:
        out.append("Workload 8's CPU column is the process's user + system CPU per unit (chunk, "
                   "lock pair, request) over the timed part, every thread included.")
    return out


# -- the page's part ---------------------------------------------------------------------------
PART = "free-threaded"  # the key of this workload's generated part of docs/benchmarks.md
HEADING = "## Free-threaded Python"


def _ratio(results: list[CaseResult], case_prefix: str, num: str, den: str) -> RatioResult | None:
    for cr in results:
        if cr.case.case.startswith(case_prefix):
            for r in cr.ratios:
                if (r.ratio.num, r.ratio.den) == (num, den):
                    return r
    return None


def _x(r: RatioResult | None) -> str:
    if r is None or r.value is None:
        return "not measured" + (f" ({r.skip})" if r is not None and r.skip else "")
    judged = f" (target {r.ratio.target:g}x: {r.status})" if r.ratio.target is not None else ""
    return f"{r.value:.2f}x{judged}"


def summary(results: list[CaseResult]) -> list[str]:
    """What the run says in two sentences (the README quotes them): what 2 contexts give on
    each build, and what one context costs on the free-threaded build."""
    tags = [t for t in INFO] or [_gil_tag(), FREE_THREADED]
    gil = next((t for t in tags if t != FREE_THREADED), _gil_tag())
    ft = FREE_THREADED
    cpu, srv = "CPU-bound", "JSON request/response"
    return [
        f"**2 contexts / 1 context.** On the free-threaded build ({ft}): CPU-bound coroutines "
        f"{_x(_ratio(results, cpu, label(ft, 2), label(ft, 1)))}, the ~150 us-per-request JSON "
        f"server {_x(_ratio(results, srv, label(ft, 2), label(ft, 1)))}. With the GIL ({gil}): "
        f"{_x(_ratio(results, cpu, label(gil, 2), label(gil, 1)))} and "
        f"{_x(_ratio(results, srv, label(gil, 2), label(gil, 1)))}.",
        "",
        f"**One context, {ft} / {gil}** (the free-threaded interpreter's own single-thread cost): "
        f"CPU-bound coroutines {_x(_ratio(results, cpu, label(ft, 1), label(gil, 1)))}, the JSON "
        f"server {_x(_ratio(results, srv, label(ft, 1), label(gil, 1)))}.",
        "",
        f"**CPU time per unit** (user + system; the machine's other load moves it less than the "
        f"rates): {_cpu_line(results, cpu, 'chunk', gil, ft)}; {_cpu_line(results, srv, 'request', gil, ft)}.",
    ]


def _series(results: list[CaseResult], case_prefix: str, lb: str) -> SeriesResult | None:
    for cr in results:
        if cr.case.case.startswith(case_prefix):
            for s in cr.series:
                if s.label == lb and s.cpu_us is not None:
                    return s
    return None


def _cpu_total(sample: Sample) -> float | None:
    return None if sample.cpu_us is None else sum(sample.cpu_us)


def _cpu_line(results: list[CaseResult], case_prefix: str, unit: str, gil: str, ft: str) -> str:
    """``<us> per <unit> on <ft> against <us> on <gil> (<x>), <x> that on 2 contexts of <ft>``
    (each build's median CPU per unit on 1 context, then 2 contexts against 1 on the
    free-threaded build; each ratio the median of per-round ratios, as the tables' are), or
    what was not measured."""
    g1, f1, f2 = (_series(results, case_prefix, label(t, n)) for t, n in ((gil, 1), (ft, 1), (ft, 2)))
    if f1 is None or g1 is None:
        return f"{case_prefix}: not measured"
    line = f"{sum(f1.cpu_us):.0f} us per {unit} on {ft} against {sum(g1.cpu_us):.0f} on {gil}"  # type: ignore[arg-type]
    line += f" ({_times(round_ratio(f1, g1, _cpu_total))})"
    if f2 is not None:
        line += f", {_times(round_ratio(f2, f1, _cpu_total))} that on 2 contexts of {ft}"
    return line


def _times(x: float | None) -> str:
    return "no round measured both" if x is None else f"{x:.2f}x"
