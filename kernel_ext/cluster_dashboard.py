"""Live dashboard of a tinycoro cluster: the local dashboard's rows, grouped per engine, with
each engine process's CPU % beside its contexts' busy %.

Layout (one group per engine; ``~~~`` are sparklines over the last 60 seconds)::

    tinycoro cluster · 2 engines · 4 contexts · running · failed 0 · 2 CPU cores here
    engine / context     has work   now / CPU                last min           ...  finished
    engine 0 host:4711   2 of 2     CPU 99% · busy 100% GIL-bound  ~~~~~      ...          20412
      ctx 0              yes        100%                           ~~~~~      ...          10231
      ctx 1              yes        100%                           ~~~~~      ...          10181
    engine 1 · host:4712 ...
    ▸ live tasks (12)                                          (per engine, from cluster.tasks())

Why CPU beside busy: a context is "busy" while it runs Python code, and under the GIL two
contexts of one process can both be busy while only one of them runs at a time. They then
spend two seconds running tasks per second while the process gets one second of CPU: the
engine is GIL-bound, and more engines (processes), not more contexts, would add CPU (rule 15).
A context blocked in a call outside Python (time.sleep, blocking I/O) is busy too, at no CPU,
and needs its task fixed instead: :func:`off_cpu` tells the two apart from each context's
thread time on a CPU and waiting for one, and the row says "blocked" for it. An engine
without a GIL (free-threaded, GIL off: ``EngineLoad.gil``) waits for no GIL: its row says "GIL
off", its awake time off a CPU is "blocked", and "waiting for a core" says when its contexts were
runnable without one. Each context's own CPU share is under its busy (a column of its own
widened the table beyond a 900 px notebook).
Both are shares of the same last second (:mod:`tinycoro.core.timeshare`): compared over
different windows, an engine that just went idle looked GIL-bound ("CPU 1% · busy 86%"). The
engine row's busy is its contexts' average, a share like theirs, never above 100%; its CPU is a
share of one core (the most the GIL lets Python use), shown at most 100%.

Where the numbers come from: ``cluster.load()`` (per engine, its scheduler's
:class:`tinycoro.SchedulerStats` and its process's CPU seconds, answered on the engine's control
thread, so never behind a busy engine; engines on other hosts included), ``cluster.tasks()``
(the same, for the task list) and ``cluster.engines`` (id, host, pid).

The threading model is the local dashboard's (:class:`tinycoro.kernel_ext.refresh.RefreshThread`):
widgets are created on the asking thread, then one refresher thread is the only code that sets
their traits, under ``hold_sync``, a few times a second, also while a cell blocks; it ends
after rendering the final "stopped" state once the cluster stops.
"""

from __future__ import annotations

import dataclasses
import html
import os
import time
from typing import Any, Mapping, Protocol, Sequence

import tinycoro as tc
from tinycoro.core.stats import counted

from .history import CpuMeter, History
from .refresh import REFRESH_INTERVAL, TASKS_EVERY, RefreshThread
from .render import COLUMNS as CONTEXT_COLUMNS
from .render import CPU_WORDS
from .render import GROUPS as CONTEXT_GROUPS
from .render import (
    NOWRAP, NUM, cell_text, context_rows, count, failed_html, head_row, row_html, scales, sparkline, table_html,
    task_table, task_title,
)
from .widgets import Board, need_widgets, task_list

__all__ = ["ClusterDashboard", "ClusterRefresher", "CpuMeter"]

# The local dashboard's columns, the first and the busy ones named for what an engine row
# shows there.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("engine / context", "an engine (an ipyparallel engine process, host:pid) and its contexts"),
    ("has work", "contexts: " + CONTEXT_COLUMNS[1][1] + "; engine: how many of its contexts have"),
    ("now / CPU", "contexts: share of the last second spent running tasks, and under it CPU: "
     + CPU_WORDS + "; engine: its process's CPU over the last second (100% = one core) and its "
     "contexts' average busy"),
    ("last min", "contexts: busy and CPU over the last 60 s; engine: process CPU over the last "
     "60 s"),
    *CONTEXT_COLUMNS[5:],
)
# The local dashboard's groups, busy and CPU in one column (its width is the engine row's)
GROUPS: tuple[tuple[str, int, str], ...] = (
    CONTEXT_GROUPS[0], (CONTEXT_GROUPS[1][0], 2, CONTEXT_GROUPS[1][2]), *CONTEXT_GROUPS[2:])
# Its contexts waited, awake, for the GIL (or for a core, or were blocked outside Python) for
# half a second per second or more: worth a flag.
GIL_BOUND = 0.5
BLOCKED = 0.5
CORE_BOUND = 0.5


class EngineLike(Protocol):
    """What the dashboard needs of ``tc.cluster.EngineInfo``."""

    id: int
    host: str
    pid: int


class ClusterLike(Protocol):
    """What the dashboard needs of a ``tc.cluster`` cluster."""

    @property
    def engines(self) -> Sequence[EngineLike]: ...

    def load(self) -> Mapping[int, Any]: ...  # tc.cluster.EngineLoad: .stats, .cpu_seconds

    def tasks(self) -> Mapping[int, Sequence[tc.TaskInfo]]: ...


# -- rendering ---------------------------------------------------------------------------------
def _summary(engines: Sequence[EngineLike], stats: Mapping[int, tc.SchedulerStats],
             running: bool) -> str:
    contexts = sum(len(s.contexts) for s in stats.values())
    failed = sum(s.failed for s in stats.values())
    state = "running" if running else "stopped"
    return (
        f"<b>tinycoro cluster</b> &middot; {counted(len(engines), 'engine')} "
        f"&middot; {counted(contexts, 'context')} "
        f"&middot; {state} &middot; "
        f"{failed_html(failed, 0, 'all engines, since the start')} "
        f"&middot; {os.cpu_count()} CPU cores here"
    )


def off_cpu(busy: Sequence[float], cpu: Sequence[float], cpu_wait: Sequence[float],
            process: float, gil: bool = True) -> tuple[float, float]:
    """Why an engine's contexts were awake without running, in seconds per second: (waiting
    for the GIL, blocked outside Python), from each context's busy share, the shares its
    thread ran on a CPU and waited for one, and the process's CPU share (1.0 = one core).

    An awake context that neither runs nor waits for a core sleeps in the kernel: on the GIL,
    or in a call that released it (time.sleep, blocking I/O, a lock). The two look alike from
    outside, but a thread can wait for the GIL only while another thread holds it, that is
    runs Python or waits for a core with it: at most the process's CPU beside its own, plus
    the other contexts' waits for a core. The rest of its off-CPU time it was blocked with
    the GIL free. (Comparing the sum of busy with the process CPU alone called a context
    blocked in time.sleep "GIL-bound": awake, at 0% CPU.)

    *gil*: whether the engine's interpreter has its GIL enabled. Without one (free-threaded,
    GIL off) nothing waits for it: all of that time is blocked (a wait for a core is not off
    the CPU here; it is the threads' ``cpu_wait``)."""
    waited_gil = blocked = 0.0
    for b, c, w in zip(busy, cpu, cpu_wait):
        off = max(0.0, b - c - w)
        held = max(0.0, process - c) + sum(cpu_wait) - w  # others held (or queued with) it
        waited = min(off, held) if gil else 0.0
        waited_gil += waited
        blocked += off - waited
    return waited_gil, blocked


def _flags(cpu: float, busy: Sequence[float], points: Sequence[Sequence[Any]],
           gil_enabled: bool = True) -> str:
    """The engine row's flags: GIL-bound (with a GIL) or waiting for a core (without one),
    blocked, each with what to do in its tooltip, or none; none while a context's CPU is not
    yet measured."""
    threads = [p[-1] for p in points if p]
    if len(threads) != len(busy) or any(t.cpu is None or t.cpu_wait is None for t in threads):
        return ""
    waits = [t.cpu_wait for t in threads]
    gil, blocked = off_cpu(busy, [t.cpu for t in threads], waits, cpu, gil_enabled)
    flag = ""
    if not gil_enabled and sum(waits) >= CORE_BOUND:
        flag += (f' <b style="white-space:nowrap" title="its contexts were runnable {sum(waits):.1f} '
                 's per second without a core: more threads want to run than there are cores '
                 '(this engine\'s contexts, or other processes); more contexts will not add CPU">'
                 "waiting for a core</b>")
    if gil >= GIL_BOUND:
        flag += (f' <b style="white-space:nowrap" title="its contexts waited {gil:.1f} s per second for the GIL while the '
                 f'process had {cpu:.1f} s of CPU: one process runs Python on one core at a '
                 'time; more engines, not more contexts, add CPU">GIL-bound</b>')
    if blocked >= BLOCKED:
        flag += (f' <b style="white-space:nowrap" title="its contexts were awake {blocked:.1f} s per second without CPU, '
                 'the GIL free: a task blocks its context in a call outside Python (time.sleep, '
                 'blocking I/O or a lock); await tc.sleep or tinycoro\'s I/O instead, or run '
                 'the call in a thread">blocked</b>')
    return flag


def _cpu_cell(cpu: float | None, busy: Sequence[float], running: bool,
              points: Sequence[Sequence[Any]] = (), gil: bool = True) -> str:
    """The engine row's busy cell: process CPU, its contexts' average busy, and the flags
    (:func:`off_cpu`) over the same last second; *points* are its contexts' histories."""
    if not running:
        return '<span class="tc-cpu-pct">stopped</span>'
    mean = sum(busy) / len(busy) if busy else 0.0
    avg = (f'<span class="tc-busy-sum" style="color:#777;white-space:nowrap" title="its '
           f'contexts\' average busy">busy {mean:.0%}</span>')
    if cpu is None:
        return f'<span class="tc-cpu-pct">CPU measuring</span> · {avg}'
    shown = (f'<span class="tc-cpu-pct" style="white-space:nowrap" title="{cpu:.2f} s of CPU '
             f'per second (all its threads)">CPU {min(cpu, 1.0):.0%}</span>')
    flag = _flags(cpu, busy, points, gil)
    return f'<span style="font-size:11px">{shown} · {avg}{flag}</span>'


def engine_rows(engine: EngineLike, stats: tc.SchedulerStats | None, history: History | None,
                cpu: CpuMeter | None, now: float, running: bool = True,
                tops: tuple[float, float] | None = None, gil: bool = True) -> str:
    """One engine's group: its own row (process CPU beside its contexts' average busy, and the
    sums of their counters), then the local dashboard's row of each of its contexts. *gil*:
    whether the engine's interpreter has its GIL enabled (``EngineLoad.gil``)."""
    scope = f"e{engine.id}-"
    where = f"{html.escape(engine.host)}:{engine.pid}"
    # host:pid beside the engine (below it when the notebook is narrow), the host by its
    # short name: a cloud machine's full name would widen the table beyond a 900 px notebook,
    # and cutting it shows a fragment (the whole of it is the tooltip)
    name = (f'{NOWRAP.format(f"engine {engine.id}")} · <span title="{where}" style="white-space:'
            f'nowrap;font-weight:normal;font-size:11px">{html.escape(_short(engine.host))}:'
            f"{engine.pid}</span>")
    if not gil:  # its contexts can run Python in parallel: say so where CPU is read
        name += (' · <span class="tc-gil" title="a free-threaded interpreter with its GIL off: '
                 'its contexts run Python in parallel, each up to 100% of a core" '
                 'style="white-space:nowrap;font-weight:normal;font-size:11px">GIL off</span>')
    if stats is None:
        empty = [("name", f"<b>{name}</b>", ""), ("stop_flag", "no stats yet", "")]
        return row_html(f"{scope}engine", empty, ' class="tc-engine"')
    ctxs = stats.contexts
    live = running and stats.running
    busy = [c.busy if live else 0.0 for c in ctxs]
    cpu_now = cpu.now(engine.id) if cpu is not None and live else None
    points = cpu.points(engine.id) if cpu is not None else []
    cpu_svg = ""
    if points:  # a share of one core, as the cell shows it
        cpu_svg = sparkline([p.t for p in points], [("busy", [min(p.cpu, 1.0) for p in points])],
                            now, 1.0, "CPU 0-100%", "tc-plot-cpu")
    histories = [history.points(i) if history is not None else [] for i in range(len(ctxs))]
    rate = sum(pts[-1].ops_rate for pts in histories if pts)
    cells: list[tuple[str, Any, str]] = [
        ("name", f"<b>{name}</b>", ""),
        ("stop_flag", NOWRAP.format(f"{stats.stop_token} of {len(ctxs)}"), ""),
        ("busy", _cpu_cell(cpu_now, busy, live, histories, gil), ""),
        ("busy-plot", cpu_svg, ""),
        ("ops-rate", count(rate), NUM),
        ("ops-plot", "", ""),
        ("queued", sum(c.queued for c in ctxs), NUM),
        ("io_inflight", sum(c.in_io for c in ctxs), NUM),
        ("sleeping", sum(c.sleeps for c in ctxs), NUM),
        ("parked", sum(c.parked for c in ctxs), NUM),
        ("queues-plot", "", ""),
        ("tasks_run", sum(c.tasks_run for c in ctxs), NUM),
    ]
    head = row_html(f"{scope}engine", cells, ' class="tc-engine" style="background:#f0f4f8"')
    shown = stats if running else _stopped(stats)
    return head + context_rows(shown, history, now, scope=scope, name="\u00a0\u00a0ctx {}",
                               tops=tops, cpu_column=False)


def _short(host: str) -> str:
    """A host's name up to its first dot (``hostname -s``); an IP address whole."""
    if host.replace(".", "").isdigit() or ":" in host:
        return host
    return host.split(".", 1)[0]


def _stopped(stats: tc.SchedulerStats) -> tc.SchedulerStats:
    """*stats* as a stopped engine shows it: not running, so every context idle."""
    return dataclasses.replace(stats, running=False, accepting=False)


def cluster_table(engines: Sequence[EngineLike], stats: Mapping[int, tc.SchedulerStats],
                  histories: Mapping[int, History], cpu: CpuMeter | None, now: float,
                  running: bool = True, gil: Mapping[int, bool] | None = None) -> str:
    """Every engine's group, in engine order, as one HTML table (one comm message a tick);
    *gil*: per engine, whether its GIL is enabled (an engine left out: enabled)."""
    gil = gil or {}
    # every engine's contexts on one scale per quantity
    tops = scales(h.points(i) for e in engines if (h := histories.get(e.id)) is not None
                  and (s := stats.get(e.id)) is not None for i in range(len(s.contexts)))
    rows = "".join(
        engine_rows(e, stats.get(e.id), histories.get(e.id), cpu, now, running, tops,
                    gil.get(e.id, True))
        for e in sorted(engines, key=lambda e: e.id)
    )
    return table_html(rows, head_row(COLUMNS, GROUPS))


class ClusterDashboard(Board):
    """Per-engine, per-context load of a cluster, now and over the last minute; display it
    as a cell's result.

    Its text form (``repr``, the ``text/plain`` output) names only the number of engines, so
    notebooks comparing outputs (nbval) see the same text on every run.
    """

    def __init__(self, engines: Sequence[EngineLike],
                 stats: Mapping[int, tc.SchedulerStats] | None = None) -> None:
        w = need_widgets()
        self._summary = w.HTML(_dom_classes=("tc-summary",))
        self._table = w.HTML(_dom_classes=("tc-table-widget",))
        self._tasks, self._tasks_box = task_list()
        self.engines = tuple(engines)
        self.apply(self.engines, stats or {}, {}, None, 0.0)
        super().__init__([self._summary, self._table, self._tasks_box],
                         _dom_classes=("tinycoro-dashboard", "tinycoro-cluster-dashboard"))

    def __repr__(self) -> str:
        return f"<tinycoro cluster dashboard: {counted(len(self.engines), 'engine')}>"

    def shown(self, engine: int, ctx: int | str, field: str) -> str:
        """What the table shows now for context *ctx* (or ``"engine"``: the engine's own row)
        of engine *engine*, in column *field* (e.g. ``tasks_run``, ``busy``)."""
        return cell_text(self._table.value, ctx, field, scope=f"e{engine}-")

    @property
    def tasks_open(self) -> bool:
        """Whether the user expanded the live-task list (it is refreshed only then)."""
        return bool(self._tasks_box.selected_index == 0)

    def apply(self, engines: Sequence[EngineLike], stats: Mapping[int, tc.SchedulerStats],
              histories: Mapping[int, History], cpu: CpuMeter | None, now: float,
              running: bool = True,
              tasks: Mapping[int, Sequence[tc.TaskInfo]] | None = None,
              gil: Mapping[int, bool] | None = None) -> None:
        """Show one snapshot of every engine (and, when given, their live tasks). Called only
        by the refresher thread (and once by the constructor)."""
        self.engines = tuple(engines)
        with self._summary.hold_sync(), self._table.hold_sync(), self._tasks.hold_sync(), \
                self._tasks_box.hold_sync():
            self._summary.value = _summary(self.engines, stats, running)
            self._table.value = cluster_table(self.engines, stats, histories, cpu, now, running,
                                              gil)
            if tasks is not None:
                count = sum(len(t) for t in tasks.values())
                every = [i for t in tasks.values() for i in t]
                self._tasks_box.set_title(0, task_title(every) if count else "live tasks (0)")
                self._tasks.value = "".join(
                    f'<div class="tc-tasks-e{e.id}"><b>engine {e.id} · {html.escape(e.host)}:'
                    f"{e.pid}</b>{task_table(tasks.get(e.id, ()))}</div>"
                    for e in self.engines
                )


class ClusterRefresher(RefreshThread):
    """The one thread that updates every dashboard of one cluster, until the cluster stops
    (``load()`` raises) or :meth:`stop` is called."""

    thread_name = "tinycoro-cluster-dashboard"

    def __init__(self, cluster: ClusterLike, interval: float = REFRESH_INTERVAL) -> None:
        super().__init__(interval)
        self.cluster = cluster
        self.histories: dict[int, History] = {}
        self.cpu = CpuMeter()
        self.gil: dict[int, bool] = {}  # per engine, whether its GIL is enabled
        self._engines: tuple[EngineLike, ...] = tuple(cluster.engines)
        self._stats: Mapping[int, tc.SchedulerStats] = {}
        self._final = False

    def stop(self, timeout: float = 5.0) -> None:
        """Show the cluster as stopped and end the thread (idempotent): for ``%tinycoro
        cluster stop``, which calls it before stopping the engines."""
        self._final = True
        super().stop(timeout)

    def dashboard(self) -> ClusterDashboard:
        """A new dashboard for this cluster; the refresher thread starts with the first."""
        try:  # rows from the start; the refresher thread adds history and CPU
            engines = tuple(self.cluster.engines)
            stats: Mapping[int, tc.SchedulerStats] = {
                eid: load.stats for eid, load in self.cluster.load().items()
            }
        except Exception:  # noqa: BLE001 - a stopped cluster: its last state
            engines, stats = self._engines, self._stats
        board: ClusterDashboard = self._add(ClusterDashboard(engines, stats))
        return board

    def sample(self) -> tuple[Sequence[EngineLike], Mapping[int, tc.SchedulerStats], float, bool]:
        """Read the cluster once: its engines, their stats, the time; False once it stopped."""
        now = time.monotonic()
        if self._final:
            return self._engines, self._stats, now, False
        try:
            engines = tuple(self.cluster.engines)
            loads = self.cluster.load()
        except Exception:  # noqa: BLE001 - a stopped (or lost) cluster: show the last state
            return self._engines, self._stats, now, False
        stats = {eid: load.stats for eid, load in loads.items()}
        for eid, load in loads.items():
            self.histories.setdefault(eid, History()).add(now, load.stats)
            self.cpu.add(eid, now, load.cpu_seconds)
            self.gil[eid] = getattr(load, "gil", True)
        self._engines, self._stats = engines, stats
        return engines, stats, now, True

    def _tick(self, boards: list[Any]) -> bool:
        engines, stats, now, running = self.sample()
        tasks = None
        if running and self.ticks % TASKS_EVERY == 0 and any(b.tasks_open for b in boards):
            try:  # answered on the engines' control thread, like stats
                tasks = self.cluster.tasks()
            except Exception:  # noqa: BLE001 - stopped meanwhile: the next tick shows it
                tasks = None
        for board in boards:
            self._show(board, lambda: board.apply(engines, stats, self.histories, self.cpu,
                                                  now, running, tasks, self.gil))
        return running
