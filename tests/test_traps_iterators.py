"""The trap layer's awaitables that are their own iterators: ``Ready`` (a result known at
once) and the gate's yield (``consume_budget`` with the step's budget spent).

Compiled, their steps are C slots (core/iterslots) and, on 3.12+, a result leaves through a
reused ``StopIteration``. What must hold either way: the value comes back, a shared ``Ready``
serves any number of awaits on any number of contexts, the gate yields once and counts the
operation in the next step's budget, a due cancel is raised at the gate, and a
``StopIteration`` a caller keeps is never changed by the next await's result.
"""

from __future__ import annotations

import asyncio

import pytest

import tinycoro as tc
from tinycoro.core.engine import INLINE_BUDGET
from tinycoro.core.local import thread_state as _local
from tinycoro.core.traps import Ready, consume_budget

from helpers.sync import run, spawn_here

pytestmark = pytest.mark.timeout(60)


def test_a_ready_returns_its_value_and_does_not_suspend_with_budget_left(contexts):
    async def main():
        engine = _local.engine
        steps = engine.steps
        got = [await Ready(v) for v in (0, 7, b"", None, "text", (1, 2))]
        return got, engine.steps - steps

    got, steps = run(main(), contexts)
    assert got == [0, 7, b"", None, "text", (1, 2)]
    assert steps == 0


@pytest.mark.parametrize("value", [5, b"abc", None, (1, 2)])
def test_a_ready_with_the_budget_spent_yields_once_then_returns_its_value(value):
    """The gate's yield: another task of the context runs in between, the await returns the
    value, and the operation counts in the new step's budget."""

    async def main():
        engine = _local.engine
        ran = []

        async def other():
            ran.append(True)

        spawn_here(other())
        engine.inline_left = 0
        got = await Ready(value)
        return got, ran, engine.inline_left

    got, ran, left = run(main(), 1)
    assert got == value
    assert ran == [True]
    assert left == INLINE_BUDGET - 1


def test_the_gate_with_the_budget_spent_yields_once_and_counts_in_the_next_step():
    async def main():
        engine = _local.engine
        steps = engine.steps
        engine.inline_left = 0
        got = await consume_budget()
        return got, engine.steps - steps, engine.inline_left

    got, steps, left = run(main(), 1)
    assert got is None
    assert steps == 1
    assert left == INLINE_BUDGET - 1


def test_a_cancel_due_is_raised_at_a_ready_and_the_task_goes_on_after_it():
    async def main():
        me = tc.current_task()
        me.cancel()
        with pytest.raises(tc.Cancelled):
            await Ready(1)
        return await Ready(2)  # the cancel was taken: the next await returns

    assert run(main(), 1) == 2


def test_one_shared_ready_serves_many_tasks_at_once(contexts):
    """Stateless: awaits of one instance interleave (some through the gate's yield) and
    each gets the value."""
    shared = Ready(41)

    async def user(n: int) -> int:
        total = 0
        for _ in range(n):
            total += await shared
            if total % 5 == 0:
                await tc.yield_now()
        return total

    async def main():
        tasks = [tc.spawn(user(200)) for _ in range(8)]
        return [await t for t in tasks]

    assert run(main(), contexts) == [41 * 200] * 8


def test_a_ready_outside_any_task_returns_its_value_without_a_budget():
    async def main():
        return [await Ready(3), await Ready(b"x"), await consume_budget()]

    assert asyncio.run(main()) == [3, b"x", None]


def test_a_ready_driven_by_hand_ends_at_its_first_step():
    r = Ready(9)
    for _ in range(2):  # shared: each drive starts over
        with pytest.raises(StopIteration) as e:
            r.send(None)
        assert e.value.value == 9
    r.close()
    with pytest.raises(KeyError):
        r.throw(KeyError("k"))


@pytest.mark.parametrize("first, second", [(1234567, 7654321), (b"kept", b"next"), (None, 5)])
def test_a_stop_iteration_a_caller_keeps_keeps_its_value(first, second):
    """The C slots reuse one StopIteration for the next result only while nobody else holds
    it (3.12+, with the GIL): one kept by the caller is left alone."""
    with pytest.raises(StopIteration) as kept:
        Ready(first).send(None)
    with pytest.raises(StopIteration) as later:
        Ready(second).send(None)
    assert kept.value.value == first
    assert kept.value.args == (first,) or (first is None and kept.value.args in ((), (None,)))
    assert later.value.value == second
