"""The engine side of tc.cluster (``tinycoro.cluster.engine``) where no cluster is needed: the
check an engine makes before it starts submitted tasks."""

from __future__ import annotations

import pytest

pytest.importorskip("ipyparallel")

import tinycoro as tc
from tinycoro.core import get_default_scheduler, set_default_scheduler


@pytest.fixture
def default_scheduler():
    before = get_default_scheduler()
    sched = tc.Scheduler(1)
    sched.start()
    set_default_scheduler(sched)
    try:
        yield sched
    finally:
        set_default_scheduler(before)
        sched.stop()


def test_an_engine_checks_its_scheduler_runs_without_a_stats_snapshot(default_scheduler, monkeypatch):
    # Every request that starts tasks asks whether the scheduler runs; a full stats snapshot
    # (every context's counters and busy samples) cost about 5% of the engine's main thread.
    from tinycoro.cluster.engine import Agent

    def snapshot(self):
        raise AssertionError("the running check took a full stats snapshot")

    monkeypatch.setattr(tc.Scheduler, "stats", snapshot)
    assert Agent.scheduler() is default_scheduler


def test_an_engine_whose_scheduler_stopped_refuses_tasks_saying_so(default_scheduler):
    from tinycoro.cluster.engine import Agent

    default_scheduler.stop()
    with pytest.raises(RuntimeError, match="scheduler is not running.*%tinycoro restart"):
        Agent.scheduler()
    set_default_scheduler(None)
    with pytest.raises(RuntimeError, match="scheduler is not running"):
        Agent.scheduler()


def test_a_tasks_parent_keeps_the_request_header_not_the_batchs_buffers():
    # A task's parent (its output and outcome go under it) lives as long as the task; the
    # request's buffers are the pickled functions and arguments of every task of its batch.
    from tinycoro.cluster.messages import task_parent

    request = {
        "header": {"msg_id": "request", "msg_type": "apply_request", "session": "s"},
        "parent_header": {}, "metadata": {}, "content": {}, "buffers": [b"x" * 1024] * 8,
    }
    parent = task_parent(request, "token")
    assert parent["header"] == {"msg_id": "token", "msg_type": "apply_request", "session": "s"}
    assert not parent["buffers"]
    assert request["header"]["msg_id"] == "request" and len(request["buffers"]) == 8
