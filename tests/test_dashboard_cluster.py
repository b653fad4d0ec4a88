"""The cluster dashboard's grouping, process CPU and refresher, against real schedulers in
this process standing in for engines (what the dashboard reads of a cluster is ``engines``
and ``stats()``); tests/test_magics_cluster.py drives it on a real ipyparallel cluster."""

from __future__ import annotations

import os
import re
import socket
import threading
import time

import pytest

pytest.importorskip("ipywidgets")

from helpers.cluster import Engine
from helpers.runtime import switch_interval, wait_until

import tinycoro as tc
from tinycoro.cluster import EngineLoad
from tinycoro.kernel_ext.cluster_dashboard import (
    ClusterDashboard, ClusterRefresher, CpuMeter,
)

pytestmark = pytest.mark.timeout(60)


class SchedulersAsEngines:
    """Two (or more) real schedulers of this process, read the way the dashboard reads a
    cluster; after :meth:`stop`, ``stats()`` raises as a stopped cluster's does."""

    def __init__(self, contexts: int, n: int = 2, host: str | None = None) -> None:
        self.scheds = [tc.Scheduler(contexts).start() for _ in range(n)]
        self.engines = tuple(Engine(i, host or socket.gethostname(), os.getpid())
                             for i in range(n))
        self.stopped = False

    def stats(self) -> dict[int, tc.SchedulerStats]:
        if self.stopped:
            raise RuntimeError("the cluster is stopped")
        return {i: s.stats() for i, s in enumerate(self.scheds)}

    def load(self) -> dict[int, EngineLoad]:
        """As an engine answers: its stats and its process's CPU time (here, all "engines"
        share this process's)."""
        return {i: EngineLoad(s, time.process_time()) for i, s in self.stats().items()}

    def tasks(self) -> dict[int, tuple[tc.TaskInfo, ...]]:
        if self.stopped:
            raise RuntimeError("the cluster is stopped")
        return {i: s.tasks() for i, s in enumerate(self.scheds)}

    def stop(self) -> None:
        self.stopped = True
        for s in self.scheds:
            s.stop()


@pytest.fixture
def pair(contexts):
    cluster = SchedulersAsEngines(contexts)
    yield cluster
    cluster.stop()


def _keys(table: str) -> list[str]:
    """Row keys in table order: ``e0-engine``, ``e0-ctx-0``, ..."""
    return re.findall(r'<tr[^>]*><td class="tc-(\S+) tc-name"', table)


def test_rows_are_grouped_per_engine_and_count_each_engines_own_work(pair, contexts):
    refresher = ClusterRefresher(pair, interval=0.02)
    board = refresher.dashboard()
    try:
        want = []
        for e in (0, 1):
            want += [f"e{e}-engine"] + [f"e{e}-ctx-{c}" for c in range(contexts)]
        assert _keys(board._table.value) == want
        host = socket.gethostname()
        assert board.shown(1, "engine", "name") == f"engine 1 · {host}:{os.getpid()}"
        assert board.shown(0, 0, "name") == "ctx 0"

        async def nap():
            await tc.sleep(0)

        async def load():
            await tc.when_all(*(tc.spawn(nap()) for _ in range(10 * contexts)))

        pair.scheds[1].run_sync(load(), timeout=30)  # work on "engine" 1 only
        wait_until(lambda: int(board.shown(1, "engine", "tasks_run")) >= 10 * contexts + 1,
                   what="engine 1's row to count its finished tasks")
        per_ctx = [int(board.shown(1, c, "tasks_run")) for c in range(contexts)]
        assert sum(per_ctx) == int(board.shown(1, "engine", "tasks_run"))
        assert board.shown(0, "engine", "tasks_run") == "0"
        summary = board._summary.value
        assert "2 engines" in summary and f"{2 * contexts} contexts" in summary
        assert "running" in summary and "failed <b>0</b>" in summary
    finally:
        refresher.stop()
    assert not refresher.alive
    assert "stopped" in board._summary.value


@pytest.mark.timeout(240)
def test_a_gil_bound_engine_shows_busy_beyond_its_process_cpu():
    # two contexts running Python code without pause are both busy all the time; under the
    # GIL the process still gets one core's worth of CPU at most: busy 200%, CPU <= ~100%.
    # The GIL is handed over every 250 ms, not every 5 ms: a context waiting for it then
    # sleeps that long off any CPU. At 5 ms it woke every 5 ms to ask for it, and on a loaded
    # machine (load average ~14 on 2 cores) each of those wake-ups waited for a core, so that
    # its wait for the GIL read as a wait for a core ("CPU 11% · busy 100%", no flag, for the
    # whole test), which is what the row rightly says of an engine short of cores.
    cluster = SchedulersAsEngines(contexts=2, n=1)
    refresher = ClusterRefresher(cluster, interval=0.05)
    board = refresher.dashboard()
    stop = threading.Event()
    turns = [0, 0]

    async def spin(k):
        while not stop.is_set():
            sum(i * i for i in range(2000))
            turns[k] += 1
            await tc.yield_now()

    sched = cluster.scheds[0]
    shown: list[str] = []

    def flagged() -> bool:
        # one reading of the row, kept: the refresher may redraw it before a second read
        shown[:] = [board.shown(0, "engine", "busy")]
        return shown[0].endswith("GIL-bound")

    with switch_interval(0.25):
        spinners = [sched.submit(spin(k)) for k in range(2)]
        try:
            assert {t.context for t in spinners} == {0, 1}
            wait_until(lambda: min(turns) > 0, timeout=30, what="both contexts to run")
            ticks = refresher.ticks
            wait_until(lambda: refresher.ticks > ticks, timeout=30, what="a refresh after that")
            # A long bound: while other processes take the cores (the tests beside this one,
            # in CI), the contexts' waits are for a core, and the row rightly does not call
            # them GIL waits until a core is free again.
            wait_until(flagged, timeout=180, what="the engine row to flag the GIL")
            m = re.fullmatch(r"CPU (\d+)% · busy (\d+)% GIL-bound", shown[0])
            assert m, shown[0]
            assert 2 * int(m[2]) > int(m[1]), shown[0]  # two contexts' busy beyond the CPU
            assert "tc-plot-cpu" in board._table.value  # the CPU history, beside the busy plots
        finally:
            stop.set()
            refresher.stop()
            cluster.stop()


def test_remote_engines_show_the_cpu_they_report(contexts):
    # an engine on another host: its CPU comes with its own answer, not from a /proc here
    cluster = SchedulersAsEngines(contexts, host="elsewhere.example")
    refresher = ClusterRefresher(cluster, interval=0.02)
    board = refresher.dashboard()
    try:
        assert re.fullmatch(r"CPU measuring · busy \d+%", board.shown(0, "engine", "busy"))
        wait_until(lambda: board.shown(0, "engine", "busy").startswith("CPU ")
                   and "measuring" not in board.shown(0, "engine", "busy"),
                   what="a CPU share from two of the engine's answers")
        assert re.match(r"CPU \d+% · busy \d+%", board.shown(0, "engine", "busy"))
    finally:
        refresher.stop()
        cluster.stop()


def test_an_engine_without_stats_yet_has_a_row_that_says_so():
    engines = (Engine(0, socket.gethostname(), os.getpid()), Engine(3, "h", 1))
    board = ClusterDashboard(engines, {})
    assert _keys(board._table.value) == ["e0-engine", "e3-engine"]
    assert board.shown(3, "engine", "stop_flag") == "no stats yet"


def test_text_repr_is_deterministic():
    board = ClusterDashboard((Engine(0, "a", 1), Engine(1, "b", 2)), {})
    assert repr(board) == "<tinycoro cluster dashboard: 2 engines>"
    assert board._repr_mimebundle_()["text/plain"] == repr(board)


def test_the_refresher_ends_showing_stopped_when_the_cluster_stops():
    cluster = SchedulersAsEngines(contexts=1)
    refresher = ClusterRefresher(cluster, interval=0.02)
    board = refresher.dashboard()
    wait_until(lambda: refresher.ticks >= 1, what="the first refresh")
    cluster.stop()
    wait_until(lambda: not refresher.alive, what="the refresher to end with the cluster")
    assert "stopped" in board._summary.value
    assert [t for t in threading.enumerate() if t.name == "tinycoro-cluster-dashboard"] == []


def test_the_cpu_meter():
    meter = CpuMeter()
    assert meter.add(7, 100.0, 3.0) is None  # one reading is no rate
    assert meter.add(7, 101.0, 3.5) == pytest.approx(0.5)
    assert meter.add(7, 103.0, 5.5) == pytest.approx(1.0)
    assert [round(p.cpu, 3) for p in meter.points(7)] == [0.5, 1.0]
    assert meter.add(8, 1.0, None) is None and meter.points(8) == []


def test_the_live_task_list_shows_each_engines_tasks_once_opened():
    cluster = SchedulersAsEngines(contexts=2)
    refresher = ClusterRefresher(cluster, interval=0.02)
    board = refresher.dashboard()
    gate = tc.Event()
    try:
        waiters = [cluster.scheds[1].submit(gate.wait(), name=f"waiter-{i}") for i in range(3)]
        assert not board.tasks_open
        wait_until(lambda: refresher.ticks >= 8, what="a few refreshes")
        assert "open to list" in board._tasks.value  # closed: not refreshed
        board._tasks_box.selected_index = 0  # the user opens it
        wait_until(lambda: "waiter-2" in board._tasks.value, what="the list to fill")
        listed = board._tasks.value
        assert board._tasks_box.get_title(0) == "live tasks (3): 3 parked on Event"
        engine1 = listed.split('class="tc-tasks-e1"', 1)[1]
        assert all(f"waiter-{i}" in engine1 for i in range(3))
        assert "<i>no live tasks</i>" in listed.split('class="tc-tasks-e1"', 1)[0]
        gate.set()
        for w in waiters:
            cluster.scheds[1].run_sync(_join(w), timeout=10)
        wait_until(lambda: board._tasks_box.get_title(0) == "live tasks (0)",
                   what="the list to empty")
    finally:
        refresher.stop()
        cluster.stop()


async def _join(task: tc.Task) -> None:
    await task


def test_an_engine_blocked_outside_python_is_not_called_gil_bound():
    # a context whose task blocks in time.sleep is awake (busy) at ~0% CPU while the GIL is
    # free: its engine needs its tasks fixed (tc.sleep, tinycoro's I/O, a thread), not more
    # engines
    cluster = SchedulersAsEngines(contexts=2, n=1)
    refresher = ClusterRefresher(cluster, interval=0.05)
    board = refresher.dashboard()
    stop = threading.Event()

    async def blocks():
        while not stop.is_set():
            time.sleep(0.02)  # the mistake the dashboard must name
            await tc.yield_now()

    sched = cluster.scheds[0]
    blocker = sched.submit(blocks())
    try:
        wait_until(lambda: board.shown(0, "engine", "busy").endswith("blocked"), timeout=30,
                   what="the engine row to say a context is blocked")
        cell = board.shown(0, "engine", "busy")
        assert re.fullmatch(r"CPU \d+% · busy \d+% blocked", cell), cell
        assert "GIL" not in cell
        title = re.search(r'<b [^>]*title="([^"]*)">blocked</b>', board._table.value).group(1)
        assert "time.sleep" in title and "tc.sleep" in title, title  # what to do about it
    finally:
        stop.set()
        refresher.stop()
        sched.run_sync(_join(blocker), timeout=10)
        cluster.stop()


def test_the_engine_flag_tells_waiting_for_the_gil_from_blocking():
    from tinycoro.kernel_ext.cluster_dashboard import off_cpu

    # two contexts busy all second, each on CPU half of it, the process one core: each
    # waited while the other held the GIL
    gil, blocked = off_cpu(busy=[1.0, 1.0], cpu=[0.5, 0.5], cpu_wait=[0.0, 0.0], process=1.0)
    assert gil == pytest.approx(1.0) and blocked == pytest.approx(0.0)
    # one context in time.sleep: awake, no CPU, nobody held the GIL
    gil, blocked = off_cpu(busy=[1.0, 0.0], cpu=[0.0, 0.0], cpu_wait=[0.0, 0.0], process=0.02)
    assert blocked == pytest.approx(0.98) and gil == pytest.approx(0.02)
    # a machine short of CPU: time waiting for a core is neither
    gil, blocked = off_cpu(busy=[1.0], cpu=[0.4], cpu_wait=[0.6], process=0.4)
    assert gil == pytest.approx(0.0) and blocked == pytest.approx(0.0)


def test_every_engines_rows_share_one_scale_per_quantity():
    from tinycoro.core.stats import ContextStats
    from tinycoro.kernel_ext.cluster_dashboard import cluster_table
    from tinycoro.kernel_ext.history import History

    def stats(ops: int, parked: int) -> tc.SchedulerStats:
        ctx = ContextStats(id=0, queued=0, io_pending=0, io_inflight=0, parked=parked,
                           tasks_run=0, busy=0.5, stop_flag=1, sleeping=False, ops=ops)
        return tc.SchedulerStats(stop_token=1, accepting=True, running=True, contexts=(ctx,))

    histories = {0: History(), 1: History()}
    for k in range(9):  # engine 0: 6,500 I/O ops/s and 3 parked; engine 1: 30/s and 40 parked
        t = k * 0.25
        histories[0].add(100 + t, stats(int(6500 * t), 3))
        histories[1].add(100 + t, stats(int(30 * t), 40))
    engines = (Engine(0, "a", 1), Engine(1, "b", 2))
    table = cluster_table(engines, {0: stats(0, 3), 1: stats(0, 40)}, histories, None, 102.0)
    assert re.findall(r'tc-plot-ops".*?<div[^>]*>([^<]*)</div>', table) == ["0-10k/s"] * 2
    assert re.findall(r'tc-plot-queues".*?<div[^>]*>([^<]*)</div>', table) == ["0-50 tasks"] * 2
