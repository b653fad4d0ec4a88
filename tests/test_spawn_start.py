"""When a spawned task starts: never before the turn of the step that spawned it is over,
whichever context it is placed on.

A task placed on the spawner's own context could never start earlier (the context is busy
running the spawner). A task placed on another context used to be pushed there at once, so it
could run, and fail, while the spawning step was still on its way to ``await`` it: the failure
was then reported as one that nothing awaited. These tests widen that window on purpose (a
tiny GIL switch interval and a count-bounded spin inside the spawning step), so the old
behaviour shows up in nearly every round; the rule they check holds whatever the timing.
"""

from __future__ import annotations

import threading

import pytest

import tinycoro as tc
from helpers.runtime import run_as_cell
from helpers.sync import spawn_elsewhere

pytestmark = pytest.mark.timeout(60)

SPIN = 200_000  # iterations of plain Python inside one step: a few ms, many switch intervals


def _spin() -> None:
    for _ in range(SPIN):
        pass


@pytest.mark.parametrize("contexts", [2, 4])
def test_a_task_spawned_on_another_context_starts_after_the_spawning_step(contexts, tiny_switch_interval):
    in_step = [False]

    async def record() -> bool:
        return in_step[0]  # True: it ran while the step that spawned it was still running

    async def main() -> list[bool]:
        seen = []
        for _ in range(10):
            in_step[0] = True
            t = spawn_elsewhere(record())
            _spin()
            in_step[0] = False
            seen.append(await t)
        return seen

    assert tc.run(main(), contexts=contexts) == [False] * 10


async def _fails() -> None:
    raise ValueError("awaited all along")


async def _spawn_spin_await(rounds: int) -> int:
    """Spawn a failing task, spin inside the same step, then await it; *rounds* times."""
    caught = 0
    for _ in range(rounds):
        t = tc.spawn(_fails())
        _spin()
        try:
            await t
        except ValueError:
            caught += 1
    return caught


# A task on a context spawning onto its own context cannot race (the context is busy running
# the spawner): one context is covered by a notebook cell below, a spawner on another thread.
@pytest.mark.parametrize("contexts", [2, 4])
def test_a_failure_awaited_in_the_step_that_spawned_it_is_never_reported(contexts, tiny_switch_interval):
    with tc.Scheduler(contexts) as s:
        assert s.run_sync(_spawn_spin_await(20), timeout=30) == 20
        assert s.stats().failed == 0


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_a_failure_awaited_in_the_cell_step_that_spawned_it_is_never_reported(contexts, tiny_switch_interval):
    # A notebook cell runs on the kernel's main thread, never one of the contexts: every
    # spawn it makes, on one context too, could run while the cell's step goes on.
    with tc.Scheduler(contexts) as s:
        assert run_as_cell(_spawn_spin_await(20), s).result() == 20
        assert s.stats().failed == 0


def test_a_spawn_in_a_guest_tasks_last_step_starts_when_the_run_returns():
    # A notebook cell is a task on a guest engine, whose run returns as soon as the cell's task
    # is done: a task spawned by the cell's last step must start anyway, not at the next cell.
    started = threading.Event()

    async def background() -> None:
        started.set()

    async def cell() -> tc.Task:
        return tc.spawn(background())  # the cell's one and last step

    with tc.Scheduler(2) as s:
        spawned = run_as_cell(cell(), s).result()
        assert spawned.context in range(2)
        assert started.wait(10), "the task spawned by the cell never started"


def test_run_sync_from_a_guest_task_starts_its_task_at_once():
    # run_sync blocks its caller until the task ends; from a notebook cell (a guest engine's
    # task) its task must not wait for the end of the cell's turn, which the block prevents.
    async def answer() -> int:
        return 42

    with tc.Scheduler(2) as s:

        async def cell() -> int:
            return s.run_sync(answer(), timeout=20)

        assert run_as_cell(cell(), s).result() == 42
