"""A spawn deferred to the end of the spawner's turn (rule 18) meets a step that blocks its
thread, the dispatch policy, the task list and the stop protocol.

A task spawned onto another context is admitted at once and pushed once the spawning step's
turn is over. A step that then blocks its own thread (``run_sync``, ``stop()``, the magics
that stop the scheduler) keeps that turn from ever ending, so it must push first; until the
push, ``least_loaded`` must count the task toward its context, ``tasks()`` must not call it
"running", and the stop protocol must not end under it.
"""

from __future__ import annotations

import collections
import threading

import pytest

import tinycoro as tc
from helpers.runtime import CONTEXT_COUNTS, run_as_cell, wait_until
from helpers.sync import spawn_elsewhere

pytestmark = pytest.mark.timeout(60)

async def _value(v: object) -> object:
    return v


async def _forever() -> None:
    await tc.Event().wait()


@pytest.mark.parametrize("contexts", CONTEXT_COUNTS)
def test_run_sync_right_after_a_spawn_in_the_same_cell_step_finishes(contexts):
    # A cell spawns, then blocks in run_sync on a task that awaits what it spawned: the spawn
    # used to wait for the end of the cell's turn, which the blocked cell never reached.
    with tc.Scheduler(contexts) as s:

        async def other(t: tc.Task) -> object:
            return (await t, "joined")

        async def cell() -> object:
            t = tc.spawn(_value(7))
            return s.run_sync(other(t), timeout=20)

        assert run_as_cell(cell(), s).result() == (7, "joined")


@pytest.mark.parametrize("contexts", CONTEXT_COUNTS)
def test_a_failure_spawned_before_run_sync_and_awaited_by_its_task_is_never_reported(
    contexts, tiny_switch_interval
):
    # What the cell's step spawned starts once run_sync's task had its first step, as it
    # would have at the end of the cell's turn: a failure that task awaits at once is its.
    async def fails() -> None:
        raise ValueError("awaited by run_sync's task")

    async def other(t: tc.Task) -> str:
        try:
            await t
        except ValueError:
            return "caught"
        return "not raised"

    with tc.Scheduler(contexts) as s:

        async def cell() -> list[str]:
            return [s.run_sync(other(tc.spawn(fails())), timeout=20) for _ in range(20)]

        assert run_as_cell(cell(), s).result() == ["caught"] * 20
        assert s.stats().failed == 0


@pytest.mark.parametrize("contexts", CONTEXT_COUNTS)
def test_stop_right_after_a_submit_in_the_same_cell_step_does_not_wait_for_it(contexts):
    # stop() cancels what is live and waits for it to unwind; a task the same step submitted,
    # still waiting for that step's turn to end, could never unwind: stop() waited its whole
    # timeout (an hour here; the test's own timeout fails first).
    s = tc.Scheduler(contexts).start()
    try:

        async def cell() -> tc.Task:
            t = s.submit(_forever())
            s.stop(timeout=3600)
            return t

        t = run_as_cell(cell(), s).result()
        assert t.cancelled()
    finally:
        s.stop()


@pytest.mark.parametrize("contexts", CONTEXT_COUNTS)
def test_tasks_says_starting_for_a_task_whose_spawning_step_is_not_over(contexts):
    with tc.Scheduler(contexts) as s:

        async def cell() -> tuple:
            t = tc.spawn(_value(1))
            info = next(i for i in s.tasks() if i.id == t.id)
            await t
            return info.state, info.waits_on

        assert run_as_cell(cell(), s).result() == ("starting", "")


@pytest.mark.parametrize("contexts", [2, 4])
def test_tasks_says_starting_for_a_spawn_onto_another_context(contexts):
    async def main() -> tuple:
        t = spawn_elsewhere(_value(1))
        info = next(i for i in s.tasks() if i.id == t.id)
        await t
        return info.state, info.context == t.context

    with tc.Scheduler(contexts) as s:
        assert s.run_sync(main(), timeout=20) == ("starting", True)


@pytest.mark.parametrize("contexts", CONTEXT_COUNTS)
def test_a_guest_spawn_onto_a_loop_mode_scheduler_runs_though_every_context_went_idle(contexts):
    # A guest engine (a thread you own) spawns onto a scheduler run by loop(); before the
    # guest's step ends, the scheduler's last task ends and every context goes idle. The task
    # admitted meanwhile is work: loop() must run it, not stop and cancel it unstarted.
    s = tc.Scheduler(contexts)
    gate = tc.Event()
    ran = threading.Event()

    async def holder() -> None:
        await gate.wait()

    async def work() -> str:
        ran.set()
        return "ran"

    h = s.submit(holder())
    looping = threading.Thread(target=s.loop, kwargs={"deadlock_timeout": 30}, daemon=True)
    looping.start()
    try:
        wait_until(lambda: any(i.state == "parked" for i in s.tasks()), what="holder parked")

        def quiet() -> bool:
            stats = s.stats()
            return not stats.accepting or all(c.sleeping for c in stats.contexts)

        async def cell() -> tc.Task:
            t = tc.spawn(work())
            gate.set()  # the holder ends: nothing else is left on the scheduler
            wait_until(lambda: h.done() and quiet(), timeout=20, what="every context idle")
            return t

        t = run_as_cell(cell(), s).result()
        looping.join(30)
        assert not looping.is_alive(), "loop() did not return after the spawned task ended"
        assert ran.is_set() and t.done() and not t.cancelled() and t.result() == "ran"
    finally:
        if looping.is_alive():
            s.stop(timeout=1)
            looping.join(10)


@pytest.mark.parametrize("contexts", [2, 4])
@pytest.mark.parametrize("spawner", ["cell", "task"])
def test_least_loaded_spreads_a_burst_of_spawns_from_one_step(contexts, spawner):
    async def burst() -> collections.Counter:
        ts = [tc.spawn(_value(None)) for _ in range(100)]
        where = collections.Counter(t.context for t in ts)
        for t in ts:
            await t
        return where

    with tc.Scheduler(contexts, dispatch="least_loaded") as s:
        if spawner == "cell":
            where = run_as_cell(burst(), s).result()
        else:
            where = s.run_sync(burst(), timeout=20)
    assert where == {i: 100 // contexts for i in range(contexts)}, where



class _Cluster:
    """What a RemoteTask asks of its cluster when it ends (nothing else is used here)."""

    def forget(self, task: object) -> None:
        pass

    def send_queued(self) -> None:
        pass

    def engine_name(self, engine: int) -> str:
        return f"engine {engine}"


@pytest.mark.parametrize("contexts", CONTEXT_COUNTS)
def test_remote_result_in_a_cell_step_first_starts_what_the_step_spawned(contexts):
    # A cell spawns a local task the remote one depends on (a server it connects to, here
    # the task that delivers its outcome), then blocks in result(): the local task must start.
    pytest.importorskip("ipyparallel")
    import contextvars

    from tinycoro.cluster.messages import OK
    from tinycoro.cluster.remote import RemoteTask

    remote = RemoteTask(_Cluster(), 0, "token", "remote", contextvars.copy_context())

    async def local() -> None:
        remote._resolve((OK, "answered"))

    with tc.Scheduler(contexts) as s:

        async def cell() -> object:
            tc.spawn(local())
            return remote.result(timeout=20)

        assert run_as_cell(cell(), s).result() == "answered"
