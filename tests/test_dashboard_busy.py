"""What "busy" means, as the legend says it: the share of the last second a context spent
running tasks. Once the last task ended and the context went to sleep, busy falls to 0% within
two seconds, in ``Scheduler.stats()`` and on the dashboard alike; the cluster dashboard compares
busy with its process's CPU over that same second, so an idle engine is never flagged as
GIL-bound, and no busy share it shows is above 100%."""

from __future__ import annotations

import re
import threading
import time

import pytest

from helpers.runtime import wait_until

import tinycoro as tc

pytestmark = pytest.mark.timeout(60)

ROUNDS = 300  # rounds of CPU work per context: a load of a few tenths of a second each
QUIET = 2.0  # s: the bound, after the last task ended, for every busy share to read 0


def _chunk() -> int:
    return sum(i * i for i in range(3000))


async def _work() -> None:
    for _ in range(ROUNDS):
        _chunk()
        await tc.yield_now()  # the context stays awake: the ready queue is never empty


def _load(sched: tc.Scheduler) -> float:
    """Run one working task on every context of *sched*; the perf_counter() when the last
    of them ended (from their done callbacks: the moment, not when this thread noticed)."""
    n = sched.contexts
    ended: list[float] = []
    lock = threading.Lock()
    all_done = threading.Event()

    def done(_t: tc.Task) -> None:
        with lock:
            ended.append(time.perf_counter())
            if len(ended) == n:
                all_done.set()

    tasks = [sched.submit(_work(), name=f"work-{i}") for i in range(n)]
    assert sorted(t.context for t in tasks) == list(range(n))  # round robin: one per context
    for t in tasks:
        t.add_done_callback(done)
    assert all_done.wait(30), "the load did not finish"
    return max(ended)


def _until_quiet(read, what: str, end: float) -> None:
    """Wait until *read()* says every share is 0, failing once QUIET seconds passed since
    *end* (the requirement itself is a time bound; the wait is on the state)."""
    wait_until(read, timeout=max(0.0, end + QUIET - time.perf_counter()), what=what)


def test_busy_falls_to_zero_within_two_seconds_of_the_last_task(contexts):
    with tc.Scheduler(contexts) as sched:
        end = _load(sched)
        _until_quiet(lambda: all(c.busy == 0.0 for c in sched.stats().contexts),
                     "every context's busy to read 0 in stats()", end)


def test_the_dashboard_shows_busy_fall_to_zero_within_two_seconds(contexts):
    pytest.importorskip("ipywidgets")
    from tinycoro.kernel_ext.dashboard import Refresher

    sched = tc.Scheduler(contexts).start()
    refresher = Refresher(sched, interval=0.02)
    board = refresher.dashboard()
    try:
        end = _load(sched)
        _until_quiet(lambda: all(board.shown(c, "busy") == "0%" for c in range(contexts)),
                     "every context's busy to show 0% on the dashboard", end)
    finally:
        sched.stop()
        refresher.stop()


def test_busy_is_the_awake_share_of_the_last_second():
    from tinycoro.core import timeshare

    # an engine that woke at t=10, ran until 10.5 and sleeps since: known points of its
    # cumulative sleep, read at several moments (a pure function: no clock, no thread)
    samples = ((9.0, 4.0), (10.0, 5.0))  # asleep from 9 to 10
    def busy(now: float) -> float:
        return timeshare.awake_share(samples, sleep_total=5.0, sleep_since=10.5, now=now)

    assert busy(10.5) == pytest.approx(0.5)  # [9.5, 10.5]: asleep until 10, then awake
    assert busy(11.0) == pytest.approx(0.5)  # [10, 11]: awake 10-10.5, asleep since
    assert busy(11.2) == pytest.approx(0.3)
    assert busy(11.5) == 0.0 and busy(100.0) == 0.0  # asleep for the whole last second
    # awake now, since its last wake at 10: the share of [now - 1, now] not asleep
    assert timeshare.awake_share(samples, 5.0, 0.0, 10.4) == pytest.approx(0.4)
    assert timeshare.awake_share(samples, 5.0, 0.0, 12.0) == pytest.approx(1.0)
    # a young engine: its life so far is the window
    assert timeshare.awake_share(((0.0, 0.0),), 0.1, 0.0, 0.4) == pytest.approx(0.75)
    for now in (9.0, 9.99, 10.25, 10.75, 11.0, 30.0):
        assert 0.0 <= busy(now) <= 1.0


def test_samples_cover_the_last_second_and_no_more():
    from tinycoro.core import timeshare

    samples: tuple[tuple[float, float], ...] = ((0.0, 0.0),)
    for k in range(1, 200):
        samples = timeshare.keep(samples, k * timeshare.STEP, 0.0)
    now = 199 * timeshare.STEP
    assert samples[0][0] <= now - timeshare.WINDOW < samples[1][0]
    assert len(samples) <= timeshare.WINDOW / timeshare.STEP + 2


# -- the cluster dashboard: busy and CPU over the same second ------------------------------------
def test_an_idle_engine_is_not_gil_bound_and_no_busy_share_passes_100(contexts):
    pytest.importorskip("ipywidgets")
    from test_dashboard_cluster import SchedulersAsEngines

    from tinycoro.kernel_ext.cluster_dashboard import ClusterRefresher

    cluster = SchedulersAsEngines(contexts, n=1)
    refresher = ClusterRefresher(cluster, interval=0.02)
    board = refresher.dashboard()
    seen: list[str] = []
    try:
        sched = cluster.scheds[0]
        end = _load(sched)
        seen.append(board.shown(0, "engine", "busy"))
        # idle: every context asleep with no work, for the whole last second, in the stats ...
        _until_quiet(lambda: all(c.busy == 0.0 and c.sleeping for c in sched.stats().contexts),
                     "the engine's contexts to be idle", end)
        # ... then a bounded number of refreshes of the dashboard of an idle engine
        first = refresher.ticks
        while refresher.ticks < first + 20:
            seen.append(board.shown(0, "engine", "busy"))
            wait_until(lambda n=refresher.ticks: refresher.ticks > n, what="the next refresh")
        idle = board.shown(0, "engine", "busy")
        assert "GIL-bound" not in idle, idle
        assert re.fullmatch(r"CPU \d+% · busy 0%", idle), idle
    finally:
        refresher.stop()
        cluster.stop()
    shares = [int(v) for cell in seen for v in re.findall(r"busy (\d+)%", cell)]
    assert shares and max(shares) <= 100, seen
    table = board._table.value
    assert all(int(v) <= 100 for v in re.findall(r"(\d+)%", re.sub(r"<[^>]+>", " ", table)))


def test_a_stopped_clusters_engines_say_stopped():
    pytest.importorskip("ipywidgets")
    from test_dashboard_cluster import SchedulersAsEngines

    from tinycoro.kernel_ext.cluster_dashboard import ClusterRefresher

    cluster = SchedulersAsEngines(contexts=1)
    refresher = ClusterRefresher(cluster, interval=0.02)
    board = refresher.dashboard()
    wait_until(lambda: refresher.ticks >= 2, what="two refreshes")
    cluster.stop()
    wait_until(lambda: not refresher.alive, what="the refresher to end with the cluster")
    for e in (0, 1):
        cell = board.shown(e, "engine", "busy")
        assert cell == "stopped", cell
        assert "measuring" not in board._table.value
