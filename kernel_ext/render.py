"""The dashboards' HTML: the summary line, the table of contexts with their sparklines, the
live-task list; plain functions of stats snapshots and history, shared by the scheduler's
dashboard and the cluster's (:mod:`tinycoro.kernel_ext.cluster_dashboard`).

Each table is ONE string, so one widget value and one comm message a tick (a comm message costs
about as much as rendering a row; see :mod:`tinycoro.kernel_ext.dashboard` for the figures).
Every cell has the class ``tc-{row key} tc-{field}``, which :func:`cell_text` (and the browser
test) finds.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Iterable, Sequence

import tinycoro as tc
from tinycoro import compiled
from tinycoro.core.stats import COLUMNS as _stats_columns
from tinycoro.core.stats import STATE_WORDS, STATES
from tinycoro.core.waits import age
from tinycoro.core.waits import summary as wait_summary

from .history import SPAN, History, Point

__all__ = [
    "COLUMNS", "build_line", "GROUPS", "LEGEND", "NOWRAP", "NUM", "TASKS_HEIGHT", "TASKS_SHOWN", "cell_text", "context_rows",
    "failed_html",
    "axis", "count", "head_row", "nice_top", "row_html", "scales", "scheduler_summary", "scheduler_table",
    "sparkline", "table_html", "task_table", "task_title",
]

TASKS_SHOWN = 500  # rows of the task list (it scrolls); the title counts all of them
TASKS_HEIGHT = 320  # px: the open task list scrolls beyond this, never pushing the notebook down

_WORDS = dict(_stats_columns)
CPU_WORDS = ("share of the last second the context's thread ran on a core (from the kernel's "
             "schedstat), 0-100% of one core: below busy, it was awake but not running (waiting "
             "for the GIL or a core, or blocked in a call)")
# Column heads, two rows: groups (name, columns spanned, tooltip), then each column's name and
# what it counts (its tooltip), in the words of tinycoro.core.stats.COLUMNS.
GROUPS: tuple[tuple[str, int, str], ...] = (
    ("", 2, ""),
    ("busy · CPU", 3, "busy: how long the context was awake; CPU: how long its thread ran on a "
     "core; both shares of the last second"),
    ("I/O ops/s", 2, "file and socket operations completed per second (sleeps not counted)"),
    ("tasks now, by state", 5, "how many tasks are in each state now, and over the last 60 s"),
    ("", 1, ""),
)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("context", _WORDS["context"]),
    ("has work", _WORDS["has work"]),
    ("busy", _WORDS["busy"]),
    ("CPU", CPU_WORDS),
    ("last min", "busy and CPU over the last 60 s, 0-100%"),
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
COLORS = {"busy": "#2a7ab0", "cpu": "#222", "ops": "#8a4fb5", "queued": "#2a7ab0", "inflight": "#d98a1c",
          "sleeping": "#2e8b3a", "parked": "#c0392b"}
SERIES_OF = {"busy": "busy", "CPU": "cpu", "ready": "queued", "in I/O": "inflight", "sleeping": "sleeping", "parked": "parked"}
# 90 px: three plots a row leave room for the numbers in a 900 px notebook column
PLOT_W, PLOT_H = 90, 30


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
    timed: Iterable[tuple[str, Sequence[float], Sequence[float]]] = (),
) -> str:
    """A small SVG of one or more series over the last minute, with its scale as a caption
    (*label* is HTML); *timed* series have times of their own (name, times, values)."""
    paths = "".join(
        f'<path class="tc-series-{name}" d="{_path(xs, vs, now, top)}" fill="none" '
        f'stroke="{COLORS[name]}" stroke-width="1.3"/>'
        for name, xs, vs in [(name, ts, vs) for name, vs in series] + list(timed)
        if len(vs) >= 1
    )
    return (
        f'<div class="tc-plot {css}" style="line-height:0">'
        f'<svg width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}">'
        f'<rect width="{PLOT_W}" height="{PLOT_H}" fill="#f6f6f6"/>{paths}</svg>'
        f'<div style="font-size:9px;line-height:10px;color:#777;white-space:nowrap">{label}'
        "</div></div>"
    )


def nice_top(value: float) -> float:
    """The smallest 1-2-5 step at or above *value*, at least 1: a y scale that moves rarely."""
    if value <= 1:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= value)


def count(n: float) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,.0f}"


def axis(top: float) -> str:
    """A plot's maximum (a :func:`nice_top`) as its caption writes it: 500, 2k, 10k, 1M."""
    for unit, word in ((1e6, "M"), (1e3, "k")):
        if top >= unit:
            return f"{top / unit:g}{word}"
    return f"{top:g}"


def scales(histories: Iterable[Sequence[Point]]) -> tuple[float, float]:
    """The y maxima of the I/O-rate and the task plots, one for every row of a dashboard: the
    same quantity on the same scale, so that rows compare at a glance; each the smallest
    :func:`nice_top` above every row's last minute."""
    ops = tasks = 0.0
    for points in histories:
        for p in points:
            ops = max(ops, p.ops_rate)
            tasks = max(tasks, p.queued, p.inflight, p.parked, p.sleeping)
    return nice_top(ops), nice_top(tasks)


def plots(points: list[Point], now: float, tops: tuple[float, float]) -> tuple[str, str, str]:
    """One row's plots: busy and CPU (one 0-100% scale), then I/O rate and tasks on the
    dashboard's *tops*."""
    ts = [p.t for p in points]
    measured = [p for p in points if p.cpu is not None]  # none until two readings span time
    busy = sparkline(ts, [("busy", [p.busy for p in points])], now, 1.0, "0-100%", "tc-plot-busy",
                     [("cpu", [p.t for p in measured], [p.cpu or 0.0 for p in measured])])
    ops_top, queue_top = tops
    ops = sparkline(ts, [("ops", [p.ops_rate for p in points])], now, ops_top,
                    f"0-{axis(ops_top)}/s", "tc-plot-ops")
    queues = sparkline(
        ts,
        [("queued", [p.queued for p in points]), ("inflight", [p.inflight for p in points]),
         ("sleeping", [p.sleeping for p in points]), ("parked", [p.parked for p in points])],
        now, queue_top, f"0-{axis(queue_top)} tasks", "tc-plot-queues",
    )
    return busy, ops, queues


def failed_html(failed: int, unawaited: int, where: str) -> str:
    """The summary's failure count: every task that failed with nobody awaiting it (since the
    start, *where*), and in red those of the recent ones nobody has awaited since; a failure
    awaited after all (``Scheduler.failures()`` drops it) leaves the red."""
    red = (f' &middot; <span class="tc-unawaited" style="color:#c0392b" title="recent failures '
           f'nobody has awaited yet (%tinycoro tasks lists them)"><b>{unawaited}</b> nobody '
           f"awaited</span>") if unawaited else ""
    return (f'<span class="tc-failed" title="tasks that raised an exception with nobody '
            f'awaiting them when they ended, {where}">failed <b>{failed}</b></span>{red}')


def scheduler_summary(stats: tc.SchedulerStats, dispatch: str, unawaited: int = 0) -> str:
    """The summary line; *unawaited*: how many of the recent failures nobody has awaited
    (``len(Scheduler.failures())``)."""
    state = "running" if stats.running else "stopped"
    accepting = "accepting work" if stats.accepting else "not accepting work"
    flags = "".join(
        f'<span title="context {c.id}: {"has work" if c.stop_flag else "no work"}" '
        f'style="color:{"#2e8b3a" if c.stop_flag else "#bbb"}">&#9679;</span>'
        for c in stats.contexts
    )
    return (
        f"<b>tinycoro</b> &middot; {dispatch} &middot; {state} &middot; {accepting} &middot; "
        f'<span class="tc-token" title="how many contexts hold tasks or I/O (the stop token); '
        f'the scheduler may stop once none does and no new work can come">contexts with work '
        f"<b>{stats.stop_token}</b> of {len(stats.contexts)}</span> {flags} &middot; "
        + failed_html(stats.failed, unawaited, "since the start")
    )

def flag_word(flag: int) -> str:
    return "yes" if flag else "no"



TD = '<td class="tc-{key} tc-{f}" style="padding:1px 4px{style}">{v}</td>'
NUM = ";text-align:right"
# No cell is kept on one line: a narrow notebook (900 px) wraps headers and phrases between
# words (the auto table layout takes each column's one-line width while there is room, and
# shrinks toward its longest word when not); what must stay whole is in a NOWRAP span.
TH_CSS = "padding:1px 4px;text-align:left;font-weight:normal;vertical-align:bottom"
NOWRAP = '<span style="white-space:nowrap">{}</span>'



def head_row(columns: Sequence[tuple[str, str]] = COLUMNS,
             groups: Sequence[tuple[str, int, str]] = GROUPS) -> str:
    """The table's two header rows: the groups, then each column's name, each with what it
    counts as its tooltip (a task-state column in its plot series' colour)."""
    top = "<tr>" + "".join(
        f'<th colspan="{span}" title="{html.escape(what)}" style="{TH_CSS};font-weight:bold;'
        f'border-bottom:1px solid #ddd">{name}</th>' if name else f'<th colspan="{span}"></th>'
        for name, span, what in groups
    ) + "</tr>"
    names = []
    for name, what in columns:
        color = COLORS[SERIES_OF[name]] if name in SERIES_OF else ""
        style = f"{TH_CSS};color:{color}" if color else TH_CSS
        names.append(f'<th title="{html.escape(what)}" style="{style}">{name}</th>')
    return top + "<tr>" + "".join(names) + "</tr>"


def build_line(free_threaded: bool, gil: bool) -> str:
    """What the CPU column can reach on this build: under a GIL one context runs Python at a
    time, so the contexts' CPU adds up to about one core however many there are; with the GIL
    off each context can run on a core of its own."""
    if gil:
        build = "free-threaded Python, GIL on" if free_threaded else "Python with a GIL (GIL on)"
        return (f"<b>{build}</b>: Python runs in one context at a time, so the contexts' CPU "
                "adds up to about 100% at most (more contexts overlap I/O, not CPU)")
    return ("<b>free-threaded Python, GIL off</b>: contexts run Python in parallel, each context "
            "up to 100% of a core")


def _this_build() -> str:
    return build_line(compiled.FREE_THREADED, compiled.gil_enabled())


def table_html(rows: str, head: str, build: str = "") -> str:
    """The ``<table>`` around header rows and rows (HTML strings), the one-line legend and
    *build* (:func:`build_line`) under it."""
    line = (f'<div class="tc-build" style="font-size:11px;line-height:1.3;color:#555;'
            f'white-space:normal">{build}</div>') if build else ""
    return (
        # line-height: a widget's HTML has the height of a widget row (28 px) per line
        '<table class="tc-table" style="border-collapse:collapse;font-size:12px;'
        f'line-height:1.3;white-space:normal">{head}{rows}</table>'
        '<div class="tc-legend" style="font-size:11px;line-height:1.3;color:#555;'
        'white-space:normal">'
        f"{LEGEND}</div>{line}"
    )


def scheduler_table(stats: tc.SchedulerStats, history: History | None, now: float,
                    build: str | None = None) -> str:
    """Every context's row: its numbers, then its plots. One string, so one comm message a
    tick for the whole table (each widget message costs about as much as rendering a row).
    *build*: the line that says whether contexts can run Python in parallel (by default this
    interpreter's, :func:`build_line`)."""
    return table_html(context_rows(stats, history, now), head_row(),
                      _this_build() if build is None else build)


def row_html(key: str, cells: Iterable[tuple[str, Any, str]], attrs: str = "") -> str:
    """One ``<tr>``: each cell is (field, HTML value, extra style), its class ``tc-{key}
    tc-{field}`` (what :func:`cell_text` finds)."""
    return f"<tr{attrs}>" + "".join(
        TD.format(key=key, f=f, style=style, v=v) for f, v, style in cells) + "</tr>"


def context_rows(stats: tc.SchedulerStats, history: History | None, now: float,
                 scope: str = "", name: str = "ctx {}",
                 tops: tuple[float, float] | None = None, cpu_column: bool = True) -> str:
    """The rows of every context of one scheduler; *scope* prefixes each cell's key (the
    cluster dashboard passes ``e<engine>-``), *name* formats the first cell, *tops* are the
    plots' maxima (:func:`scales`; by default, of these rows); without *cpu_column*, a
    context's CPU goes under its busy, in the busy cell (the cluster's, as wide as its engine
    rows make it: a column of its own would widen the table beyond a 900 px notebook)."""
    rows = []
    every = [history.points(i) if history is not None else [] for i in range(len(stats.contexts))]
    if tops is None:
        tops = scales(every)
    for i, c in enumerate(stats.contexts):
        busy = c.busy if stats.running else 0.0
        points = every[i]
        if points:
            busy_svg, ops_svg, queue_svg = plots(points, now, tops)
            rate = count(points[-1].ops_rate)
            cpu = points[-1].cpu
        else:
            busy_svg = ops_svg = queue_svg = ""
            rate = "0"
            cpu = None
        if not stats.running:
            cpu = 0.0
        shown = "\u2013" if cpu is None else f"{cpu:.0%}"  # a dash until two readings span time
        pct = f'<span class="tc-busy-pct">{busy:.0%}</span>'
        cpu_cells: tuple[tuple[str, Any, str], ...] = (
            ("cpu", f'<span class="tc-cpu-pct">{shown}</span>', NUM),)
        if not cpu_column:
            pct += (f'<br><span class="tc-ctx-cpu" title="{html.escape(CPU_WORDS)}" '
                    f'style="font-size:11px;white-space:nowrap">CPU {shown}</span>')
            cpu_cells = ()
        cells = (
            ("name", NOWRAP.format(name.format(c.id)), ""),
            ("stop_flag", flag_word(c.stop_flag), ""),
            ("busy", pct, NUM),
            *cpu_cells,
            ("busy-plot", busy_svg, ""),
            ("ops-rate", rate, NUM),
            ("ops-plot", ops_svg, ""),
            ("queued", c.queued, NUM),
            ("io_inflight", c.in_io, NUM),
            ("sleeping", c.sleeps, NUM),
            ("parked", c.parked, NUM),
            ("queues-plot", queue_svg, ""),
            ("tasks_run", c.tasks_run, NUM),
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


def task_table(infos: Sequence[tc.TaskInfo]) -> str:
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
        '<table class="tc-tasks" style="font-size:11px;line-height:1.3;white-space:nowrap">'
        "<tr><th>id</th><th>name</th><th>context</th><th>state</th><th>age</th>"
        f"<th>waits on</th></tr>{rows}</table>{tail}</div>"
        f'<div style="font-size:10px;line-height:1.3;color:#666;white-space:normal">{states}'
        "</div>"
    )
