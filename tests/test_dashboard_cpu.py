"""Per-context CPU on the dashboards, rendered from given stats: the notebook dashboard's CPU
column and build line, and the cluster dashboard's flags on engines with and without a GIL."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("ipywidgets")

from helpers.cluster import Engine

import tinycoro as tc
from tinycoro.core.stats import ContextStats
from tinycoro.kernel_ext.history import CpuMeter, History

pytestmark = pytest.mark.timeout(60)


def _stats(t: float, busy: list[float], cpu: list[float], wait: list[float]) -> tc.SchedulerStats:
    """Contexts at time *t* (seconds since 0) that have run *cpu* and waited for a core
    *wait* seconds per second so far, each awake *busy* of the last second."""
    ctxs = tuple(ContextStats(id=i, queued=0, io_pending=0, io_inflight=0, parked=0, tasks_run=0,
                              busy=b, stop_flag=1, sleeping=False, ops=0, cpu=c * t, cpu_wait=w * t)
                 for i, (b, c, w) in enumerate(zip(busy, cpu, wait)))
    return tc.SchedulerStats(stop_token=len(ctxs), accepting=True, running=True, contexts=ctxs)


def _history(busy: list[float], cpu: list[float], wait: list[float],
             process: float | None = None) -> tuple[History, CpuMeter, tc.SchedulerStats]:
    """Three seconds of refreshes, four a second, of one engine (id 0) whose process runs
    *process* CPU seconds per second (by default, the sum of its contexts')."""
    history, meter = History(), CpuMeter()
    process = sum(cpu) if process is None else process
    stats = _stats(0.0, busy, cpu, wait)
    for step in range(13):
        t = step * 0.25
        stats = _stats(t, busy, cpu, wait)
        history.add(100.0 + t, stats)
        meter.add(0, 100.0 + t, process * t)
    return history, meter, stats


# -- the notebook dashboard ------------------------------------------------------------------
def test_each_context_shows_its_cpu_share_beside_busy_on_one_scale():
    from tinycoro.kernel_ext.render import cell_text, scheduler_table

    # two contexts awake all the time: one ran all of it, the other half (waited the rest)
    history, _, stats = _history([1.0, 1.0], [1.0, 0.5], [0.0, 0.0])
    table = scheduler_table(stats, history, 103.0)
    assert cell_text(table, 0, "busy") == "100%"
    assert cell_text(table, 1, "busy") == "100%"
    assert cell_text(table, 0, "cpu") == "100%"
    assert cell_text(table, 1, "cpu") == "50%"
    # busy and CPU share one plot per context, on one 0-100% scale
    plots = re.findall(r'tc-plot-busy".*?</svg><div[^>]*>([^<]*)</div>', table)
    assert plots == ["0-100%", "0-100%"], plots
    assert table.count('class="tc-series-cpu"') == 2
    assert table.count('class="tc-series-busy"') == 2


def test_a_context_not_measured_yet_shows_no_cpu_number():
    from tinycoro.kernel_ext.render import cell_text, scheduler_table

    stats = _stats(0.0, [1.0], [1.0], [0.0])
    assert cell_text(scheduler_table(stats, None, 0.0), 0, "cpu") == "–"


@pytest.mark.parametrize(("free_threaded", "gil", "says"), [
    (False, True, "GIL on"),
    (True, True, "GIL on"),
    (True, False, "GIL off"),
])
def test_the_build_line_says_whether_contexts_can_run_python_in_parallel(free_threaded, gil, says):
    from tinycoro.kernel_ext.render import build_line, scheduler_table

    line = build_line(free_threaded, gil)
    assert says in line
    assert ("free-threaded" in line) == free_threaded
    if gil:  # one context runs Python at a time: the CPU column sums to one core at most
        assert "one context at a time" in line
    else:
        assert "each context up to 100%" in line
    history, _, stats = _history([1.0, 1.0], [1.0, 1.0], [0.0, 0.0])
    table = scheduler_table(stats, history, 103.0, build=line)
    assert '<div class="tc-build"' in table and line in table


def test_the_default_build_line_is_this_interpreters():
    from tinycoro import compiled
    from tinycoro.kernel_ext.render import build_line, scheduler_table

    history, _, stats = _history([1.0], [1.0], [0.0])
    table = scheduler_table(stats, history, 103.0)
    assert build_line(compiled.FREE_THREADED, compiled.gil_enabled()) in table


# -- the cluster dashboard -------------------------------------------------------------------
def _engine_cell(busy, cpu, wait, gil: bool, process: float | None = None) -> str:
    from tinycoro.kernel_ext.cluster_dashboard import cluster_table
    from tinycoro.kernel_ext.render import cell_text

    history, meter, stats = _history(busy, cpu, wait, process)
    engines = [Engine(0, "host", 1)]
    table = cluster_table(engines, {0: stats}, {0: history}, meter, 103.0, gil={0: gil})
    return cell_text(table, "engine", "busy", scope="e0-")


def test_an_engine_with_a_gil_whose_contexts_wait_for_it_is_gil_bound():
    # two contexts awake all the time, each ran half of it: under a GIL, each waited for it
    cell = _engine_cell([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], gil=True)
    assert cell.endswith("GIL-bound"), cell


def test_an_engine_without_a_gil_is_never_called_gil_bound():
    # the same numbers on a free-threaded engine with the GIL off: nothing waits for a GIL,
    # the contexts were awake off the CPU, blocked (this read "GIL-bound" before)
    cell = _engine_cell([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], gil=False)
    assert "GIL" not in cell.replace("GIL off", ""), cell
    assert cell.endswith("blocked"), cell


def test_an_engine_without_a_gil_whose_contexts_wait_for_cores_says_so():
    # awake all the time, half of it running, half runnable but waiting for a core: more
    # contexts than cores (or other processes on them)
    cell = _engine_cell([1.0, 1.0], [0.5, 0.5], [0.5, 0.5], gil=False)
    assert cell.endswith("waiting for a core"), cell
    assert "GIL" not in cell, cell
    assert "blocked" not in cell, cell


def test_off_cpu_without_a_gil_counts_no_gil_wait():
    from tinycoro.kernel_ext.cluster_dashboard import off_cpu

    assert off_cpu([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], 1.0) == (1.0, 0.0)
    assert off_cpu([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], 1.0, gil=False) == (0.0, 1.0)


def test_an_engine_row_says_when_its_gil_is_off():
    from tinycoro.kernel_ext.cluster_dashboard import cluster_table
    from tinycoro.kernel_ext.render import cell_text

    history, meter, stats = _history([0.0], [0.0], [0.0])
    engines = [Engine(0, "host", 1)]
    off = cluster_table(engines, {0: stats}, {0: history}, meter, 103.0, gil={0: False})
    on = cluster_table(engines, {0: stats}, {0: history}, meter, 103.0, gil={0: True})
    assert "GIL off" in cell_text(off, "engine", "name", scope="e0-")
    assert "GIL" not in cell_text(on, "engine", "name", scope="e0-")


def test_an_engines_load_says_whether_its_gil_is_enabled():
    from tinycoro.cluster import EngineLoad

    stats = _stats(0.0, [0.0], [0.0], [0.0])
    assert EngineLoad(stats, 1.0).gil is True  # an older engine's answer says nothing
    assert EngineLoad(stats, 1.0, gil=False).gil is False


def test_the_cluster_shows_each_contexts_cpu_under_its_busy():
    from tinycoro.kernel_ext.cluster_dashboard import cluster_table

    history, meter, stats = _history([1.0, 1.0], [1.0, 0.5], [0.0, 0.0])
    table = cluster_table([Engine(0, "host", 1)], {0: stats}, {0: history}, meter, 103.0)
    cpus = re.findall(r'class="tc-ctx-cpu"[^>]*>([^<]*)<', table)
    assert cpus == ["CPU 100%", "CPU 50%"], cpus
    assert table.count('class="tc-series-cpu"') == 2  # in the contexts' busy plots
