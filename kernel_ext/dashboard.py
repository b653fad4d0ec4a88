"""Live scheduler dashboard: current numbers and the last minute of history, per context.

Layout (one row per context; ``~~~`` are SVG sparklines over the last 60 seconds; it fits the
notebook column of JupyterLab's default layout at 1400 px with the file browser open)::

    tinycoro · round_robin · running · accepting work · contexts with work 2 of 2 ●● · failed 0
                      busy          I/O ops/s          tasks now, by state                    
    context has work  now last min  now   last min  ready in I/O sleeping parked last min finished
    ctx 0   yes       52% ~~~~~     1,204 ~~~~~         3     12        0      0 ~~~~~      10231
    ctx 1   yes       31% ~~~~~       980 ~~~~~         0      4        1      0 ~~~~~       9870
    has work: the context holds tasks or I/O (its stop flag) ... (the one-line legend)
    ▸ live tasks (37): 20 parked on Mutex, 12 sleeping, 5 in I/O

The words are tinycoro.core.stats.COLUMNS, the ones ``%tinycoro status`` and ``python -m
tinycoro`` use; each header's tooltip says what it counts. Sleeps are not I/O (docs/design.md, API contract):
they have their own column and series, and the I/O rate leaves their timers out.

Why SVG sparklines in plain ``ipywidgets.HTML``: ``python -m benchmarks.dashboard_widgets``
times one refresh of 4 contexts x 4 series x 60 points in a real ipykernel 7.4 (new data set on
the widgets, serialised and sent as comm messages; best of 3 kernels, 2 busy cores): this
dashboard 0.64 ms and 12.7 KiB (it draws 5 series per context and the numbers too); bqplot
1.05 ms and 8.2 KiB (numpy arrays sent as binary buffers); naive per-series SVG strings 2.9 ms;
a plotly FigureWidget 8.0 ms and 22 KiB (and it needs anywidget); ipympl 381 ms and 1.1 MiB
(matplotlib renders a PNG in the kernel on every draw). What makes this one cheap is sending the
whole table as ONE widget value: a comm message costs about as much as rendering a row, so the
first version, with one widget per number (about 50), took 66 ms. bqplot comes close, but it
brings pandas, numpy, bqscales and a d3 front end; this needs nothing beyond ipywidgets, runs no
JS build step, and its plots are plain SVG path text that a test can read from the DOM.

Threading model (cf. ``tqdm.notebook``): widgets are created on the thread that asks for a
dashboard; from then on one :class:`Refresher` thread is the only code that sets their traits.
It reads ``Scheduler.stats()`` a few times a second, keeps the history itself (so it does not
matter whether ``stats()`` advances anything), and applies each snapshot under ``hold_sync``,
so each widget sends at most one comm message per tick and only when a value changed. Being a
plain thread, it keeps refreshing while a cell blocks the main thread. It is started with an
empty ``contextvars.Context()`` so that it inherits nothing from the cell that created it, and
it ends (after rendering the final "stopped" state) when the scheduler stops;
:meth:`Refresher.follow` points it, with its dashboards, at a new scheduler and starts it again.

ipywidgets is imported only by this module, and only the dashboard needs it.
"""

from __future__ import annotations

import collections
import contextvars
import html
import math
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import tinycoro as tc
from tinycoro.core.stats import COLUMNS as _stats_columns
from tinycoro.core.stats import STATE_WORDS, STATES
from tinycoro.core.waits import age
from tinycoro.core.waits import summary as wait_summary

from .extension import signals_blocked

try:  # guarded: everything but the dashboard works without ipywidgets
    import ipywidgets as _w
except ImportError:  # pragma: no cover - exercised only where ipywidgets is missing
    _w = None

__all__ = [
    "Dashboard", "History", "Refresher", "RefreshThread", "REFRESH_INTERVAL", "cell_text", "sparkline",
]

REFRESH_INTERVAL = 0.25  # seconds: four refreshes a second
SPAN = 60.0  # seconds of history in each plot
STEP = 1.0  # seconds between two kept points of history (the newest point moves every tick)
TASKS_EVERY = 4  # refresh the (open) task list every 4th tick: once a second
TASKS_SHOWN = 500  # rows of the task list (it scrolls); the title counts all of them
TASKS_HEIGHT = 320  # px: the open task list scrolls beyond this, never pushing the notebook down

_WORDS = dict(_stats_columns)
# Column heads, two rows: groups (name, columns spanned, tooltip), then each column's name and
# what it counts (its tooltip), in the words of tinycoro.core.stats.COLUMNS.
GROUPS: tuple[tuple[str, int, str], ...] = (
    ("", 2, ""),
    ("busy", 2, _WORDS["busy"]),
    ("I/O ops/s", 2, "file and socket operations completed per second (sleeps not counted)"),
    ("tasks now, by state", 5, "how many tasks are in each state now, and over the last 60 s"),
    ("", 1, ""),
)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("context", _WORDS["context"]),
    ("has work", _WORDS["has work"]),
    ("now", _WORDS["busy"]),
    ("last min", "busy over the last 60 s, 0-100%"),
    ("now", "I/O operations completed per second, over the last second"),
    ("last min", "I/O operations completed per second over the last 60 s"),
    ("ready", _WORDS["ready"]),
    ("in I/O", _WORDS["in I/O"]),
    ("sleeping", _WORDS["sleeping"]),
    ("parked", _WORDS["parked"]),
    ("last min", "ready, in I/O, sleeping and parked tasks over the last 60 s"),
    ("finished", _WORDS["finished"]),
)
LEGEND = (
    "<b>has work</b>: the context holds tasks or I/O (its stop flag) &middot; <b>contexts with "
    "work</b>: how many have (the stop token); the scheduler may stop when none has and no new "
    "work can come &middot; <b>failed</b>: tasks that raised with nobody awaiting them"
)
COLORS = {"busy": "#2a7ab0", "ops": "#8a4fb5", "queued": "#2a7ab0", "inflight": "#d98a1c",
          "sleeping": "#2e8b3a", "parked": "#c0392b"}
SERIES_OF = {"ready": "queued", "in I/O": "inflight", "sleeping": "sleeping", "parked": "parked"}
PLOT_W, PLOT_H = 100, 30

_Base: Any = _w.VBox if _w is not None else object


def _need_widgets() -> None:
    if _w is None:
        raise ImportError(
            "the tinycoro dashboard needs ipywidgets: pip install 'tinycoro[jupyter]' "
            "(or pip install ipywidgets)"
        )


# -- history ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One context at one moment, as plotted."""

    t: float  # time.monotonic()
    busy: float
    ops_rate: float  # completions per second since the previous kept point
    queued: int
    inflight: int  # I/O in flight, sleeps left out
    parked: int
    sleeping: int = 0


def keep(kept: "collections.deque[Any]", point: Any, step: float, span: float) -> bool:
    """Append *point* (anything with a ``t``) to *kept* if the newest kept one is at least
    *step* seconds older, dropping points older than *span*; False if it was not kept."""
    if kept and point.t - kept[-1].t < step:
        return False
    kept.append(point)
    while kept and point.t - kept[0].t > span:
        kept.popleft()
    return True


class History:
    """The last minute of per-context numbers: one kept point a second, plus a newest point
    that each refresh replaces (so the plots move at the refresh rate while holding 61 points,
    not 240). Rates come from the cumulative ``io_ops`` counters. It outlives a ``%tinycoro
    restart`` (:meth:`rebase`): the plots go on across it, from the new scheduler's zero."""

    def __init__(self, span: float = SPAN, step: float = STEP) -> None:
        self.span = span
        self.step = step
        self._kept: list[collections.deque[Point]] = []
        self._last: list[Point | None] = []
        self._ops: list[tuple[float, int] | None] = []  # (t, io_ops) at the newest kept point

    def rebase(self) -> None:
        """The counters start again from zero (another scheduler): keep the points, forget
        the counters' baselines so that no rate comes out negative."""
        self._ops = [None] * len(self._ops)

    def add(self, now: float, stats: tc.SchedulerStats) -> None:
        n = len(stats.contexts)
        while len(self._kept) < n:  # first sample, or a restart with more contexts
            self._kept.append(collections.deque())
            self._last.append(None)
            self._ops.append(None)
        del self._kept[n:], self._last[n:], self._ops[n:]  # a restart with fewer
        for i, c in enumerate(stats.contexts):
            base = self._ops[i]
            if base is None or c.io_ops < base[1]:
                base = self._ops[i] = (now, c.io_ops)
            t0, ops0 = base
            dt = now - t0
            last, kept = self._last[i], self._kept[i]
            if dt >= 0.2:
                rate = (c.io_ops - ops0) / dt
            else:  # too short a window for a rate: keep the one shown last
                rate = last.ops_rate if last else kept[-1].ops_rate if kept else 0.0
            point = Point(now, c.busy if stats.running else 0.0, max(0.0, rate), c.queued,
                          c.in_io, c.parked, c.sleeps)
            if keep(kept, point, self.step, self.span):
                self._ops[i] = (now, c.io_ops)
                self._last[i] = None
            else:
                self._last[i] = point

    def points(self, ctx: int) -> list[Point]:
        """The kept points of context *ctx*, oldest first, then the newest one."""
        if ctx >= len(self._kept):
            return []
        out = list(self._kept[ctx])
        last = self._last[ctx]
        if last is not None:
            out.append(last)
        return out


# -- rendering --------------------------------------------------------------------------------
def _path(ts: Sequence[float], vs: Sequence[float], now: float, top: float) -> str:
    """SVG path data for one series: x spans the last SPAN seconds, y 0..top, in whole
    pixels (after ``M`` further coordinate pairs are implicit line-tos)."""
    sx = PLOT_W / SPAN
    sy = (PLOT_H - 2) / top
    x0 = (SPAN - now) * sx + 0.5  # x = (t - (now - SPAN)) * sx, rounded
    y0 = PLOT_H - 0.5
    return "M" + " ".join([f"{int(t * sx + x0)} {int(y0 - v * sy)}" for t, v in zip(ts, vs)])


def sparkline(
    ts: Sequence[float],
    series: Iterable[tuple[str, Sequence[float]]],
    now: float,
    top: float,
    label: str,
    css: str,
) -> str:
    """A small SVG of one or more series over the last minute, with its scale as a caption
    (*label* is HTML)."""
    paths = "".join(
        f'<path class="tc-series-{name}" d="{_path(ts, vs, now, top)}" fill="none" '
        f'stroke="{COLORS[name]}" stroke-width="1.3"/>'
        for name, vs in series
        if len(vs) >= 1
    )
    return (
        f'<div class="tc-plot {css}" style="line-height:0">'
        f'<svg width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}">'
        f'<rect width="{PLOT_W}" height="{PLOT_H}" fill="#f6f6f6"/>{paths}</svg>'
        f'<div style="font-size:9px;line-height:10px;color:#777">{label}</div></div>'
    )


def _nice_top(value: float) -> float:
    """The smallest 1-2-5 step at or above *value*, at least 1: a y scale that moves rarely."""
    if value <= 1:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= value)


def _count(n: float) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,.0f}"


def _plots(points: list[Point], now: float) -> tuple[str, str, str]:
    ts = [p.t for p in points]
    busy = sparkline(ts, [("busy", [p.busy for p in points])], now, 1.0,
                     "0-100%", "tc-plot-busy")
    ops_top = _nice_top(max((p.ops_rate for p in points), default=0.0))
    ops = sparkline(ts, [("ops", [p.ops_rate for p in points])], now, ops_top,
                    f"0-{_count(ops_top)}/s", "tc-plot-ops")
    queue_top = _nice_top(max((max(p.queued, p.inflight, p.parked, p.sleeping)
                               for p in points), default=0))
    queues = sparkline(
        ts,
        [("queued", [p.queued for p in points]), ("inflight", [p.inflight for p in points]),
         ("sleeping", [p.sleeping for p in points]), ("parked", [p.parked for p in points])],
        now, queue_top, f"0-{_count(queue_top)} tasks", "tc-plot-queues",
    )
    return busy, ops, queues


def _summary(stats: tc.SchedulerStats, dispatch: str) -> str:
    state = "running" if stats.running else "stopped"
    accepting = "accepting work" if stats.accepting else "not accepting work"
    flags = "".join(
        f'<span title="context {c.id}: {"has work" if c.stop_flag else "no work"}" '
        f'style="color:{"#2e8b3a" if c.stop_flag else "#bbb"}">&#9679;</span>'
        for c in stats.contexts
    )
    failed = stats.failed
    fail_style = ' style="color:#c0392b"' if failed else ""
    return (
        f"<b>tinycoro</b> &middot; {dispatch} &middot; {state} &middot; {accepting} &middot; "
        f'<span class="tc-token" title="how many contexts hold tasks or I/O (the stop token); '
        f'the scheduler may stop once none does and no new work can come">contexts with work '
        f"<b>{stats.stop_token}</b> of {len(stats.contexts)}</span> {flags} &middot; "
        f'<span class="tc-failed"{fail_style} title="tasks that raised an exception with '
        f'nobody awaiting them, since the start (%tinycoro tasks lists them)">failed '
        f"<b>{failed}</b></span>"
    )


def _flag(flag: int) -> str:
    return "yes" if flag else "no"


def _bar(busy: float) -> str:
    color = "#4caf50" if busy < 0.8 else "#ff9800"
    return (
        '<div style="width:40px;height:9px;background:#e6e6e6;display:inline-block">'
        f'<div style="width:{busy:.0%};height:9px;background:{color}"></div></div>'
    )


_TD = '<td class="tc-{key} tc-{f}" style="padding:1px 4px{style}">{v}</td>'
_NUM = ";text-align:right"
_CSS = "white-space:nowrap;padding:1px 4px;text-align:left;font-weight:normal"


def head_row(columns: Sequence[tuple[str, str]] = COLUMNS,
             groups: Sequence[tuple[str, int, str]] = GROUPS) -> str:
    """The table's two header rows: the groups, then each column's name, each with what it
    counts as its tooltip (a task-state column in its plot series' colour)."""
    top = "<tr>" + "".join(
        f'<th colspan="{span}" title="{html.escape(what)}" style="{_CSS};font-weight:bold;'
        f'border-bottom:1px solid #ddd">{name}</th>' if name else f'<th colspan="{span}"></th>'
        for name, span, what in groups
    ) + "</tr>"
    names = []
    for name, what in columns:
        color = COLORS[SERIES_OF[name]] if name in SERIES_OF else ""
        style = f"{_CSS};color:{color}" if color else _CSS
        names.append(f'<th title="{html.escape(what)}" style="{style}">{name}</th>')
    return top + "<tr>" + "".join(names) + "</tr>"


def table_html(rows: str, head: str) -> str:
    """The ``<table>`` around header rows and rows (HTML strings), and the one-line legend."""
    return (
        '<table class="tc-table" style="border-collapse:collapse;font-size:12px;'
        f'white-space:nowrap">{head}{rows}</table>'
        f'<div class="tc-legend" style="font-size:11px;color:#555;white-space:normal">'
        f"{LEGEND}</div>"
    )


def _table(stats: tc.SchedulerStats, history: History | None, now: float) -> str:
    """Every context's row: its numbers, then its plots. One string, so one comm message a
    tick for the whole table (each widget message costs about as much as rendering a row)."""
    return table_html(context_rows(stats, history, now), head_row())


def row_html(key: str, cells: Iterable[tuple[str, Any, str]], attrs: str = "") -> str:
    """One ``<tr>``: each cell is (field, HTML value, extra style), its class ``tc-{key}
    tc-{field}`` (what :func:`cell_text` finds)."""
    return f"<tr{attrs}>" + "".join(
        _TD.format(key=key, f=f, style=style, v=v) for f, v, style in cells) + "</tr>"


def context_rows(stats: tc.SchedulerStats, history: History | None, now: float,
                 scope: str = "", name: str = "ctx {}") -> str:
    """The rows of every context of one scheduler; *scope* prefixes each cell's key (the
    cluster dashboard passes ``e<engine>-``), *name* formats the first cell."""
    rows = []
    for i, c in enumerate(stats.contexts):
        busy = c.busy if stats.running else 0.0
        points = history.points(i) if history is not None else []
        if points:
            busy_svg, ops_svg, queue_svg = _plots(points, now)
            rate = _count(points[-1].ops_rate)
        else:
            busy_svg = ops_svg = queue_svg = ""
            rate = "0"
        cells = (
            ("name", name.format(c.id), ""),
            ("stop_flag", _flag(c.stop_flag), ""),
            ("busy", f'<span class="tc-busy-pct">{busy:.0%}</span>', _NUM),
            ("busy-plot", busy_svg, ""),
            ("ops-rate", rate, _NUM),
            ("ops-plot", ops_svg, ""),
            ("queued", c.queued, _NUM),
            ("io_inflight", c.in_io, _NUM),
            ("sleeping", c.sleeps, _NUM),
            ("parked", c.parked, _NUM),
            ("queues-plot", queue_svg, ""),
            ("tasks_run", c.tasks_run, _NUM),
        )
        rows.append(row_html(f"{scope}ctx-{c.id}", cells))
    return "".join(rows)


def cell_text(table: str, ctx: int | str, field: str, scope: str = "") -> str:
    """The text of one cell of a rendered table (tests read the dashboard with this, from the
    widget or from its comm messages): *field* is a column key such as ``tasks_run``; *ctx*
    a context id (or a whole row's key, such as the cluster dashboard's ``engine``)."""
    key = f"ctx-{ctx}" if isinstance(ctx, int) else ctx
    m = re.search(f'<td class="tc-{re.escape(scope + key)} tc-{re.escape(field)}"[^>]*>(.*?)</td>',
                  table)
    if m is None:
        raise KeyError(f"no cell {field!r} for {scope}{key}")
    return re.sub(r"<[^>]+>", "", m.group(1)).strip()


def task_title(infos: Sequence[tc.TaskInfo]) -> str:
    """The task list's title: the count and a summary per kind of wait."""
    if not infos:
        return "live tasks (0)"
    return f"live tasks ({len(infos)}): {wait_summary(infos)}"


def _task_table(infos: Sequence[tc.TaskInfo]) -> str:
    """The live tasks, oldest first (by id: a stable order), in a box that scrolls beyond
    TASKS_HEIGHT px, both ways, so neither a long list nor long words move the notebook (the
    summary per kind of wait is the list's title, :func:`task_title`)."""
    if not infos:
        return "<i>no live tasks</i>"
    infos = sorted(infos, key=lambda i: i.id)
    rows = "".join(
        f"<tr><td>{i.id}</td><td>{html.escape(i.name)}</td>"
        f"<td>{'cell' if i.context is None else i.context}</td>"
        f"<td>{STATE_WORDS.get(i.state, i.state)}</td><td>{age(i.age)}</td>"
        f"<td>{html.escape(i.waits_on)}</td></tr>"
        for i in infos[:TASKS_SHOWN]
    )
    more = len(infos) - TASKS_SHOWN
    tail = f"<div>... and {more} more (%tinycoro tasks lists them all)</div>" if more > 0 else ""
    states = " &middot; ".join(f"<b>{k}</b>: {v}" for k, v in STATES)
    return (
        f'<div class="tc-tasks-scroll" style="max-height:{TASKS_HEIGHT}px;overflow:auto">'
        '<table class="tc-tasks" style="font-size:11px;white-space:nowrap">'
        "<tr><th>id</th><th>name</th><th>context</th><th>state</th><th>age</th>"
        f"<th>waits on</th></tr>{rows}</table>{tail}</div>"
        f'<div style="font-size:10px;color:#666;white-space:normal">{states}</div>'
    )


def task_list() -> tuple[Any, Any]:
    """The closed "live tasks" list under a dashboard's table: (its HTML widget, the
    accordion around it). The refresher fills it only while it is open."""
    tasks = _w.HTML("<i>open to list the live tasks</i>")
    box = _w.Accordion(children=[tasks], selected_index=None, _dom_classes=("tc-task-list",))
    box.set_title(0, "live tasks")
    return tasks, box


class Dashboard(_Base):
    """Per-context load of one scheduler, now and over the last minute; display it as a
    cell's result.

    Its text form (``repr``, the ``text/plain`` output) names only the number of contexts, so
    notebooks comparing outputs (nbval) see the same text on every run.
    """

    def __init__(self, scheduler: tc.Scheduler) -> None:
        _need_widgets()
        self._summary = _w.HTML(_dom_classes=("tc-summary",))
        self._table = _w.HTML(_dom_classes=("tc-table-widget",))
        self._tasks, self._tasks_box = task_list()
        self._bind(scheduler)
        super().__init__([self._summary, self._table, self._tasks_box],
                         _dom_classes=("tinycoro-dashboard",))

    def _bind(self, scheduler: tc.Scheduler) -> None:
        """Show *scheduler* (at creation, and on the refresher thread after a follow)."""
        stats = scheduler.stats()
        self._summary.value = _summary(stats, scheduler.dispatch)
        self._table.value = _table(stats, None, 0.0)
        self.contexts = scheduler.contexts  # after the table: readers see rows, then the count
        self.scheduler = scheduler

    def __repr__(self) -> str:
        return f"<tinycoro dashboard: {self.contexts} contexts>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = repr(self)
        return bundle

    def shown(self, ctx: int, field: str) -> str:
        """What the table shows now for context *ctx* in column *field* (e.g. ``tasks_run``,
        ``queued``, ``stop_flag``, ``ops-rate``)."""
        return cell_text(self._table.value, ctx, field)

    @property
    def tasks_open(self) -> bool:
        """Whether the user expanded the live-task list (it is refreshed only then)."""
        return self._tasks_box.selected_index == 0

    def apply(self, stats: tc.SchedulerStats, history: History | None = None,
              now: float | None = None, tasks: Sequence[tc.TaskInfo] | None = None) -> None:
        """Show one snapshot (and the history that ends with it). Called only by the
        refresher thread."""
        if now is None:
            now = time.monotonic()
        with self._summary.hold_sync(), self._table.hold_sync(), self._tasks.hold_sync(), \
                self._tasks_box.hold_sync():
            self._summary.value = _summary(stats, self.scheduler.dispatch)
            self._table.value = _table(stats, history, now)
            if tasks is not None:
                self._tasks_box.set_title(0, task_title(tasks))
                self._tasks.value = _task_table(tasks)


class RefreshThread:
    """One thread that updates a set of dashboards every *interval* seconds until what they
    show stops: the threading part of :class:`Refresher` (one scheduler) and of the cluster
    dashboard's refresher (:mod:`tinycoro.kernel_ext.cluster_dashboard`). A subclass says what one
    tick does (:meth:`_tick`)."""

    thread_name = "tinycoro-dashboard"

    def __init__(self, interval: float = REFRESH_INTERVAL) -> None:
        self.interval = interval
        self.ticks = 0
        self._boards: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _add(self, board: Any) -> Any:
        """Refresh *board* from now on; the thread starts with the first board."""
        with self._lock:
            self._boards.add(board)
            if self._thread is None:
                self._start()
        return board

    def stop(self, timeout: float = 5.0) -> None:
        """Render the final state and end the thread (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _restart(self) -> None:
        """After :meth:`stop`: a fresh stop event, and the thread again if boards remain."""
        with self._lock:
            self._stop = threading.Event()
            if self._boards:
                self._start()
            else:
                self._thread = None

    def _start(self) -> None:
        ctx = contextvars.Context()  # inherit nothing from the cell that asked
        self._thread = threading.Thread(
            target=ctx.run, args=(self._run, self._stop), name=self.thread_name, daemon=True,
        )
        with signals_blocked():  # like the contexts: signals belong to the main thread
            self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while True:
            with self._lock:
                boards = list(self._boards)
            going = self._tick(boards)
            self.ticks += 1
            if not going or stop.is_set():
                return
            stop.wait(self.interval)

    def _tick(self, boards: list[Any]) -> bool:
        """Sample once and show it on *boards* (each through :meth:`_show`); False once what
        they show has stopped (after showing that)."""
        raise NotImplementedError

    def _show(self, board: Any, show: Callable[[], None]) -> None:
        """Run *show* for *board*; a board that fails (a closed widget, a gone kernel) is
        dropped, never the thread."""
        try:
            show()
        except Exception:  # noqa: BLE001 - a closed widget or a gone kernel: drop it
            with self._lock:
                self._boards.discard(board)


class Refresher(RefreshThread):
    """The one thread that updates every dashboard of one scheduler."""

    def __init__(self, scheduler: tc.Scheduler, interval: float = REFRESH_INTERVAL) -> None:
        super().__init__(interval)
        self.scheduler = scheduler
        self.history = History()

    def dashboard(self) -> Dashboard:
        """A new dashboard for this scheduler; the refresher thread starts with the first."""
        board: Dashboard = self._add(Dashboard(self.scheduler))
        return board

    def follow(self, scheduler: tc.Scheduler) -> "Refresher":
        """Show *scheduler* from now on, in every dashboard of this refresher (after
        ``%tinycoro restart``): the history goes on, the rows are rebuilt by the
        refresher thread, and the thread starts again if it ended with the old scheduler."""
        self.stop()
        self.scheduler = scheduler
        self.history.rebase()  # the plots go on across the restart
        self._restart()
        return self

    def _tick(self, boards: list[Any]) -> bool:
        scheduler, history = self.scheduler, self.history
        stats = scheduler.stats()
        now = time.monotonic()
        history.add(now, stats)
        tasks = None
        if self.ticks % TASKS_EVERY == 0 or not stats.running:
            if any(b.tasks_open for b in boards):
                tasks = scheduler.tasks()

        def show(board: Dashboard) -> None:
            if board.scheduler is not scheduler:
                board._bind(scheduler)
            board.apply(stats, history, now, tasks)

        for board in boards:
            self._show(board, lambda: show(board))
        return bool(stats.running)
