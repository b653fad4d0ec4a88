"""The dashboard's history, plots and refresher against real schedulers (no kernel process:
widgets without a front end still hold their state; tests/test_kernel_protocol.py and
tests/test_browser_dashboard.py cover the comm messages and the browser)."""

from __future__ import annotations

import html
import re
import threading

import pytest

pytest.importorskip("ipywidgets")

from helpers.runtime import wait_until

import tinycoro as tc
from tinycoro.core.stats import ContextStats
from tinycoro.kernel_ext.dashboard import PLOT_W, SPAN, Dashboard, History, Refresher, sparkline

pytestmark = pytest.mark.timeout(60)


def _stats(ops: list[int], running: bool = True, busy: float = 0.5) -> tc.SchedulerStats:
    ctxs = tuple(_ctx(i, n, busy) for i, n in enumerate(ops))
    return tc.SchedulerStats(stop_token=len(ops), accepting=running, running=running,
                             contexts=ctxs)


def _ctx(i: int, ops: int, busy: float) -> ContextStats:
    return ContextStats(id=i, queued=i, io_pending=0, io_inflight=2 * i, parked=3, tasks_run=0,
                        busy=busy, stop_flag=1, sleeping=False, ops=ops)


def test_history_keeps_one_point_a_second_for_a_minute_and_rates_from_the_counters():
    h = History()
    t = 1000.0
    h.add(t, _stats([0, 0]))
    for k in range(1, 4 * 90 + 1):  # 90 s of refreshes, four a second
        h.add(t + k * 0.25, _stats([100 * k, 0]))
    points = h.points(0)
    assert 60 <= len(points) <= SPAN + 2  # a minute of kept points, plus the newest
    assert points[-1].t == t + 90.0
    assert points[-1].t - points[0].t <= SPAN
    # 100 completions per 0.25 s tick on context 0 is 400/s; none on context 1
    assert {round(p.ops_rate) for p in points} == {400}
    assert {p.ops_rate for p in h.points(1)} == {0.0}
    assert (points[-1].queued, points[-1].inflight, points[-1].parked) == (0, 0, 3)
    assert (h.points(1)[-1].queued, h.points(1)[-1].inflight) == (1, 2)


def test_history_rate_is_over_the_last_second_as_the_legend_says():
    """"I/O operations completed per second, over the last second": 400/s until t = 10, then
    nothing; half a second later half of the last second had the load."""
    h = History()
    for k in range(0, 41):  # 10 s of refreshes, four a second, 100 completions each
        h.add(k * 0.25, _stats([100 * k]))
    h.add(10.25, _stats([4000]))
    h.add(10.5, _stats([4000]))
    assert round(h.points(0)[-1].ops_rate) == 200
    h.add(11.0, _stats([4000]))  # a whole second without completions
    assert h.points(0)[-1].ops_rate == 0.0


def test_history_goes_on_across_a_restart_and_shows_a_stopped_scheduler_idle():
    """The plots keep the minute before a %tinycoro restart; the new scheduler's
    counters start from zero without a negative rate; a context added by the restart starts
    its own history; a stopped scheduler shows idle."""
    h = History()
    h.add(1.0, _stats([5, 5]))
    h.add(2.5, _stats([500, 500]))
    h.rebase()  # what Refresher.follow does
    h.add(4.0, _stats([0, 0, 0], running=False, busy=0.9))
    assert [len(h.points(i)) for i in range(3)] == [3, 3, 1]
    assert all(p.ops_rate >= 0 for i in range(3) for p in h.points(i))
    assert h.points(2)[-1].busy == 0.0
    h.add(5.0, _stats([100, 0]))  # fewer contexts after another restart
    assert h.points(2) == [] and len(h.points(0)) == 4


def test_sleeps_are_counted_apart_from_io():
    """docs/design.md, API contract: a sleep's timer is neither I/O in flight nor an I/O operation per second."""
    h = History()
    ctx = ContextStats(id=0, queued=0, io_pending=0, io_inflight=5, parked=0, tasks_run=0,
                       busy=0.1, stop_flag=1, sleeping=True, ops=100, sleeps=4, timers=100)
    h.add(1.0, tc.SchedulerStats(1, True, True, (ctx,)))
    later = ContextStats(id=0, queued=0, io_pending=0, io_inflight=5, parked=0, tasks_run=0,
                         busy=0.1, stop_flag=1, sleeping=True, ops=200, sleeps=4, timers=190)
    h.add(2.0, tc.SchedulerStats(1, True, True, (later,)))
    [_, p] = h.points(0)
    assert (p.inflight, p.sleeping, round(p.ops_rate)) == (1, 4, 10)


def test_sparkline_maps_the_last_minute_onto_the_plot():
    svg = sparkline([80.0, 100.0], [("busy", [0.0, 1.0])], now=100.0, top=1.0, label="x",
                    css="tc-plot-busy")
    [d] = re.findall(r'd="([^"]+)"', svg)
    w = PLOT_W
    assert d == f"M{round(w * 2 / 3)} 29 {w} 1"  # 20 s old at 2/3 of the width, newest at the edge


@pytest.mark.parametrize("contexts", (1, 2, 4))
def test_numbers_and_plots_move_under_load_and_freeze_when_the_scheduler_stops(contexts):
    sched = tc.Scheduler(contexts).start()
    refresher = Refresher(sched, interval=0.02)
    board = refresher.dashboard()
    try:
        def paths(kind: str) -> list[list[str]]:
            return [re.findall(r'd="([^"]+)"', cell)
                    for cell in re.findall(f'tc-{kind}-plot"[^>]*>(.*?)</td>', board._table.value)]

        done = threading.Event()
        rounds = 400

        async def ticker():  # statx through the ring: I/O completions on every context
            for _ in range(rounds):
                await tc.io.stat(__file__)

        async def load():
            await tc.when_all(*(tc.spawn(ticker()) for _ in range(2 * contexts)))
            done.set()

        # the history's first sample must predate the load, or its rate has no baseline
        wait_until(lambda: refresher.ticks >= 1, what="the first refresh")
        first = paths("ops")
        sched.submit(load())
        done.wait(30)
        wait_until(lambda: all(int(board.shown(c, "tasks_run")) > 0 for c in range(contexts)),
                   what="every context to show finished tasks")
        assert paths("ops") != first  # the plots exist and moved since the first refresh

        def rose(d: str) -> bool:  # y = 29 is a rate of 0, the plot's baseline
            return any(int(y) < 29 for y in d[1:].split()[1::2])

        wait_until(lambda: all(rose(d) for [d] in paths("ops")),
                   what="every context's ops plot to rise above 0")
        assert len(paths("ops")) == contexts and len(paths("queues")[0]) == 4  # sleeping too
        rates = [board.shown(c, "ops-rate") for c in range(contexts)]
        assert all(re.fullmatch(r"[\d,.k]+", r) for r in rates), rates
        summary = board._summary.value
        assert "running" in summary and "failed <b>0</b>" in summary

        # the stop flags and the token, as shown: all fall to 0 once the work drained ...
        wait_until(lambda: "contexts with work <b>0</b>" in board._summary.value
                   and all(board.shown(c, "stop_flag") == "no" for c in range(contexts)),
                   what="the flags and the token to show 0")
        # ... and a parked task raises its context's flag again
        gate = tc.Event()
        parked = sched.submit(gate.wait())
        wait_until(lambda: f"contexts with work <b>1</b> of {contexts}" in board._summary.value
                   and board.shown(parked.context, "stop_flag") == "yes"
                   and board.shown(parked.context, "parked") == "1",
                   what="the parked task's flag to show 1")
        gate.set()
    finally:
        sched.stop()
        refresher.stop()
    assert not refresher.alive
    assert "stopped" in board._summary.value and "not accepting" in board._summary.value


def test_failures_and_the_live_task_list_show_once_opened():
    sched = tc.Scheduler(2).start()
    refresher = Refresher(sched, interval=0.02)
    board = refresher.dashboard()
    gate = tc.Event()
    try:
        async def boom():
            raise ValueError("boom")

        async def waiter():
            await gate.wait()

        sched.submit(boom(), name="boom")
        parked = [sched.submit(waiter(), name=f"waiter-{i}") for i in range(3)]
        wait_until(lambda: "failed <b>1</b>" in board._summary.value,
                   what="the failure count")
        assert "live tasks" == board._tasks_box.get_title(0)  # closed: not refreshed
        board._tasks_box.selected_index = 0  # what a click on the title does
        wait_until(lambda: board._tasks_box.get_title(0) == "live tasks (3): 3 parked on Event",
                   what="the live-task count and summary")
        table = board._tasks.value
        assert all(f"waiter-{i}" in table for i in range(3)) and "parked" in table
        assert "<td>Event</td>" in table  # plain words, not a repr
        ids = [int(i) for i in re.findall(r"<tr><td>(\d+)</td>", table)]
        assert ids == sorted(ids)  # a stable order: oldest first
        assert "max-height" in table and "overflow:auto" in table  # a long list scrolls
    finally:
        gate.set()
        for t in parked:
            sched.run_sync(_join(t), timeout=10)
        sched.stop()
        refresher.stop()


async def _join(task: tc.Task) -> None:
    await task


def test_follow_points_the_dashboards_at_a_new_scheduler_and_restarts_the_thread():
    old = tc.Scheduler(2).start()
    refresher = Refresher(old, interval=0.02)
    board = refresher.dashboard()
    old.stop()
    wait_until(lambda: not refresher.alive, what="the refresher to end with its scheduler")
    assert "stopped" in board._summary.value
    new = tc.Scheduler(3, dispatch="least_loaded").start()
    try:
        assert refresher.follow(new) is refresher
        wait_until(lambda: board.contexts == 3 and "running" in board._summary.value,
                   what="the dashboard to show the new scheduler")
        assert refresher.alive and "least_loaded" in board._summary.value
        assert repr(board) == "<tinycoro dashboard: 3 contexts>"
        assert board.shown(2, "name") == "ctx 2"
        names = [t.name for t in threading.enumerate() if t.name == "tinycoro-dashboard"]
        assert names == ["tinycoro-dashboard"]
        sched_tasks = [new.submit(tc.sleep(0)) for _ in range(30)]
        for t in sched_tasks:
            new.run_sync(_join(t), timeout=10)
        wait_until(lambda: sum(int(board.shown(c, "tasks_run")) for c in range(3)) >= 30,
                   what="the new scheduler's finished tasks")
    finally:
        new.stop()
        refresher.stop()
    assert not refresher.alive


def test_text_repr_is_deterministic():
    sched = tc.Scheduler(2).start()
    try:
        board = Dashboard(sched)
        assert repr(board) == "<tinycoro dashboard: 2 contexts>"
        assert board._repr_mimebundle_()["text/plain"] == "<tinycoro dashboard: 2 contexts>"
    finally:
        sched.stop()


def test_after_restart_the_dashboard_follows_the_new_scheduler(monkeypatch):
    """%tinycoro restart: the dashboard already on screen shows the new scheduler (rows for
    its contexts, running), served by the same single refresher thread."""
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    from tinycoro import kernel_ext

    monkeypatch.setenv("TINYCORO_CONTEXTS", "2")
    shell = InteractiveShell.instance()
    saved = (shell.loop_runner, shell.autoawait)
    shell.run_line_magic("load_ext", "tinycoro")
    try:
        shell.run_line_magic("tinycoro", "dashboard")  # displays it, returns None
        board = shell.magics_manager.registry["TinycoroMagics"].last_dashboard
        ext = kernel_ext.get_extension(shell)
        old = ext.scheduler
        shell.run_line_magic("tinycoro", "restart -n 3 --dispatch least_loaded")
        assert ext.scheduler is not old
        wait_until(lambda: board.contexts == 3 and "running" in board._summary.value,
                   what="the dashboard to follow the restarted scheduler")
        assert "least_loaded" in board._summary.value and board.shown(2, "name") == "ctx 2"
        names = [t.name for t in threading.enumerate() if t.name == "tinycoro-dashboard"]
        assert names == ["tinycoro-dashboard"]
        assert ext.refresher is not None and ext.refresher.alive
    finally:
        shell.run_line_magic("unload_ext", "tinycoro")
        shell.loop_runner, shell.autoawait = saved
    assert not [t for t in threading.enumerate() if t.name.startswith("tinycoro")]
    assert "stopped" in board._summary.value


def test_a_failure_awaited_after_all_leaves_the_red_count_of_failures_nobody_awaited():
    sched = tc.Scheduler(2).start()
    refresher = Refresher(sched, interval=0.02)
    board = refresher.dashboard()
    try:
        async def boom():
            raise ValueError("boom")

        failed = sched.submit(boom(), name="boom")
        def text() -> str:
            return html.unescape(re.sub(r"<[^>]+>", "", board._summary.value))

        wait_until(lambda: "failed 1 · 1 nobody awaited" in text(),
                   what="the failure shown as nobody's")
        assert "#c0392b" in board._summary.value  # in red
        with pytest.raises(ValueError):
            sched.run_sync(_join(failed), timeout=10)
        assert sched.failures() == ()
        wait_until(lambda: "nobody awaited" not in text(),
                   what="the awaited failure to leave the red count")
        assert "#c0392b" not in board._summary.value
        assert "failed <b>1</b>" in board._summary.value  # still counted, in black
    finally:
        sched.stop()
        refresher.stop()


def _history(rates: list[float]) -> History:
    """A history of one context per entry of *rates*, each completing that many I/O ops a
    second for three seconds."""
    history = History()
    for step in range(13):
        t = step * 0.25
        ops = [int(r * t) for r in rates]
        history.add(100.0 + t, _stats(ops))
    return history


def test_the_io_axis_scales_to_the_data_with_round_maxima_the_same_for_every_row():
    from tinycoro.kernel_ext.render import scheduler_table

    table = scheduler_table(_stats([0, 0]), _history([6500.0, 30.0]), 103.0)
    ops_axes = re.findall(r'tc-plot-ops".*?<div[^>]*>([^<]*)</div>', table)
    assert ops_axes == ["0-10k/s", "0-10k/s"], ops_axes  # one scale, a round maximum
    queue_axes = re.findall(r'tc-plot-queues".*?<div[^>]*>([^<]*)</div>', table)
    assert len(set(queue_axes)) == 1, queue_axes  # ready: 0 and 1, in I/O: 0 and 2
    assert queue_axes == ["0-5 tasks", "0-5 tasks"], queue_axes
