"""when_all, when_any, timeout and TaskGroup: results, failure handling, cancellation, races."""

from __future__ import annotations

import random

import pytest

import tinycoro as tc
from helpers.runtime import cancel_and_wait
from helpers.sync import Cancelled, run, wait_blocked


async def value_after(v, yields=0, ready=None):
    if ready is not None:
        await ready.wait()
    for _ in range(yields):
        await tc.yield_now()
    return v


async def fail_after(exc, yields=0, ready=None):
    if ready is not None:
        await ready.wait()
    for _ in range(yields):
        await tc.yield_now()
    raise exc


def tracker():
    """Coroutines that park forever and record how they ended."""
    ended: list[str] = []

    async def forever(name, ready=None):
        try:
            if ready is not None:
                ready.count_down()  # inside the try: from here on, a cancel is recorded
            await tc.Event().wait()
        except Cancelled:
            ended.append(name)
            raise

    return ended, forever


# -- when_all --------------------------------------------------------------------------------


def test_when_all_returns_results_in_argument_order(contexts):
    async def main():
        slow_first = [value_after(i, yields=50 - i) for i in range(50)]
        results = await tc.when_all(*slow_first)
        assert results == list(range(50))
        t = tc.spawn(value_after("task"))
        ev = tc.Event()
        ev.set("awaitable")
        assert await tc.when_all(t, value_after("coro"), ev.wait()) == ["task", "coro", "awaitable"]
        assert await tc.when_all() == []
        with pytest.raises(TypeError):
            await tc.when_all(42)

    run(main(), contexts)


def test_when_all_first_failure_cancels_the_rest_then_raises_it(contexts):
    async def main():
        ended, forever = tracker()
        ready = tc.Latch(2)
        with pytest.raises(ValueError, match="boom"):
            await tc.when_all(
                forever("a", ready), fail_after(ValueError("boom"), 3, ready), forever("b", ready)
            )
        return sorted(ended)  # both were cancelled, and had finished, before when_all raised

    assert run(main(), contexts) == ["a", "b"]


def test_when_all_second_failure_is_attached_as_a_note(contexts):
    async def main():
        gate = tc.Latch(2)

        async def fail(exc):
            gate.count_down()
            await gate.wait()
            raise exc

        try:
            await tc.when_all(fail(ValueError("one")), fail(KeyError("two")))
        except (ValueError, KeyError) as e:
            return e, getattr(e, "__notes__", [])

    exc, notes = run(main(), contexts)
    assert len(notes) == 1 and "also failed" in notes[0]


def test_cancelling_when_all_cancels_its_children_and_adopted_tasks(contexts):
    async def main():
        ended, forever = tracker()
        ready = tc.Latch(3)
        adopted = tc.spawn(forever("adopted", ready))

        async def caller():
            await tc.when_all(forever("x", ready), forever("y", ready), adopted)

        c = tc.spawn(caller())
        await ready.wait()
        await wait_blocked(c, adopted)
        await cancel_and_wait(c)
        assert adopted.cancelled()
        return sorted(ended)

    assert run(main(), contexts) == ["adopted", "x", "y"]


# -- when_any --------------------------------------------------------------------------------


def test_when_any_first_to_finish_wins_and_the_rest_are_cancelled(contexts):
    async def main():
        ended, forever = tracker()
        ready = tc.Latch(2)
        idx, value = await tc.when_any(
            forever("a", ready), value_after("fast", 3, ready), forever("b", ready)
        )
        assert (idx, value) == (1, "fast")
        assert sorted(ended) == ["a", "b"]  # cancelled and finished before when_any returned
        ready = tc.Latch(1)
        with pytest.raises(ValueError, match="first"):
            await tc.when_any(forever("c", ready), fail_after(ValueError("first"), 2, ready))
        assert await tc.when_any(value_after(None)) == (0, None)
        with pytest.raises(ValueError, match="at least one"):
            await tc.when_any()
        return sorted(ended)

    assert run(main(), contexts) == ["a", "b", "c"]


def test_when_any_and_when_all_adopt_tasks(contexts):
    async def main():
        ended, forever = tracker()
        ready = tc.Latch(1)
        loser = tc.spawn(forever("loser", ready))
        winner = tc.spawn(value_after("w", 2, ready))
        assert await tc.when_any(loser, winner) == (1, "w")
        assert loser.cancelled()  # a child of the race: cancelled and finished
        failing = tc.spawn(fail_after(KeyError("t"), 1))
        other = tc.spawn(forever("other"))
        with pytest.raises(KeyError):
            await tc.when_all(other, failing)
        assert other.done()
        return ended

    assert "loser" in run(main(), contexts)


def test_when_any_with_a_sleep_race(contexts):
    started, cancelled, finished = [], [], []

    async def sleep(seconds):
        started.append(seconds)
        try:
            await tc.sleep(seconds)
        except Cancelled:
            cancelled.append(seconds)
            raise
        finished.append(seconds)

    async def main():
        return await tc.when_any(sleep(5), value_after("now", 10), sleep(3))

    assert run(main(), contexts) == (1, "now")
    # the losing sleeps were cancelled (or never started), not waited out: run() returns only
    # once every task has ended, so a sleep that was not cancelled would show up as finished
    assert finished == [] and sorted(cancelled) == sorted(started)


# -- timeout ---------------------------------------------------------------------------------


def test_timeout_interrupts_a_parked_wait_and_an_io_op(contexts):
    async def main():
        e = tc.Event()
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.05) as t:
                await e.wait()
        assert t.expired()
        assert e.statistics().waiters == 0  # the wait was aborted, not left behind
        with pytest.raises(TimeoutError):  # raised only if the sleep was interrupted
            async with tc.timeout(0.05):
                await tc.sleep(30)  # an io_uring timeout op, cancelled in the kernel
        m = tc.Mutex()
        await m.lock()

        async def locker():
            async with tc.timeout(0.02):
                await m.lock()

        with pytest.raises(TimeoutError):
            await tc.spawn(locker())
        assert m.statistics().waiters == 0
        m.unlock()
        assert not m.locked()
        for already_past in (0, -1, float("-inf")):  # expires at the first await that waits
            with pytest.raises(TimeoutError):
                async with tc.timeout(already_past):
                    await e.wait()

    run(main(), contexts)


def test_timeout_not_reached_leaves_no_trace(contexts):
    async def main():
        async with tc.timeout(30) as t:
            await tc.yield_now()
        assert not t.expired()
        async with tc.timeout(None):
            await tc.yield_now()
        async with tc.timeout(float("inf")):
            await tc.yield_now()
        with pytest.raises(RuntimeError, match="twice"):
            async with t:
                pass
        with pytest.raises(TypeError):
            tc.timeout("1")
        for _ in range(3):
            await tc.yield_now()  # no stray interrupt arrives later

    run(main(), contexts)


def test_timeout_fired_just_as_the_body_finishes_is_withdrawn(contexts):
    """Deterministic version of the race: the deadline fires after the body's last await."""

    async def main():
        async with tc.timeout(30) as t:
            await tc.yield_now()
            t._fire()  # what the timer task does, at the worst moment
        assert t.expired()
        for _ in range(3):
            await tc.yield_now()  # the pending interrupt must not leak here
        await tc.sleep(0.001)
        return "clean"

    assert run(main(), contexts) == "clean"


@pytest.mark.timeout(60)
def test_timeout_racing_the_end_of_the_body_never_leaks(contexts):
    """Real timers racing real bodies: each round either times out or completes; no round's
    interrupt ever shows up in the code after its block."""

    async def main():
        rng = random.Random(1234 + contexts)
        outcomes = {"timeout": 0, "done": 0}
        for _ in range(1500):  # bounded by count: the coverage does not depend on load
            try:
                async with tc.timeout(rng.choice([0, 0, 1e-5, 1e-4])):
                    for _ in range(rng.randrange(4)):
                        await tc.yield_now()
                outcomes["done"] += 1
            except TimeoutError:
                outcomes["timeout"] += 1
            await tc.yield_now()  # a leaked interrupt would raise Cancelled here
            await tc.yield_now()
        return outcomes

    outcomes = run(main(), contexts)
    assert outcomes["timeout"] > 0 and outcomes["done"] > 0


def test_nested_timeouts(contexts):
    async def main():
        e = tc.Event()
        async with tc.timeout(30) as outer:
            with pytest.raises(TimeoutError):
                async with tc.timeout(0.01):
                    await e.wait()
            await tc.yield_now()
        assert not outer.expired()
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.01) as outer:
                async with tc.timeout(30) as inner:
                    await e.wait()
        assert outer.expired() and not inner.expired()

        # Both fire at once: the core keeps one pending interrupt (the inner's); the outer's
        # must not be lost: it is re-delivered when the inner block exits.
        got = []
        with pytest.raises(TimeoutError):
            async with tc.timeout(30) as outer:
                try:
                    async with tc.timeout(30) as inner:
                        inner._fire()
                        outer._fire()
                        await e.wait()
                except TimeoutError:
                    got.append("inner")
                await e.wait()  # the outer deadline has passed: this must not block
        return got

    assert run(main(), contexts) == ["inner"]


def test_cancel_inside_a_timeout_propagates_as_cancelled(contexts):
    async def main():
        async def body():
            async with tc.timeout(30):
                await tc.Event().wait()

        t = tc.spawn(body())
        await wait_blocked(t)
        await cancel_and_wait(t)
        assert t.cancelled()

    run(main(), contexts)


def test_cancel_is_not_lost_while_another_interrupt_is_pending():
    # Regression: the core kept one pending interrupt, so a cancel() that arrived while a
    # timeout's signal was pending returned True and was then dropped.
    class Other(BaseException):
        pass

    async def main():
        e = tc.Event()

        async def victim():
            try:
                await e.wait()
            except Other:
                pass
            try:  # the cancel() that returned True must arrive at a later await
                for _ in range(3):
                    await tc.yield_now()
            except Cancelled:
                return "cancel delivered"
            return "cancel lost"

        t = tc.spawn(victim())
        await wait_blocked(t)
        t.interrupt(Other())  # e.g. a timeout firing
        assert t.cancel()
        return await t

    assert run(main(), 1) == "cancel delivered"


# -- TaskGroup -------------------------------------------------------------------------------


def test_task_group_waits_for_every_child_including_nested_spawns(contexts):
    async def main():
        results = []

        async def child(g, depth):
            await tc.yield_now()
            results.append(depth)
            if depth < 3:
                g.spawn(child(g, depth + 1))
                g.spawn(child(g, depth + 1))

        async with tc.TaskGroup() as g:
            g.spawn(child(g, 0))
        assert len(results) == 1 + 2 + 4 + 8
        with pytest.raises(RuntimeError, match="has finished"):
            g.spawn(child(g, 0))
        with pytest.raises(RuntimeError, match="not been entered"):
            tc.TaskGroup().spawn(child(g, 0))
        return sorted(results)

    assert run(main(), contexts) == [0] + [1] * 2 + [2] * 4 + [3] * 8


def test_task_group_child_failure_cancels_siblings_and_the_body(contexts):
    async def main():
        ended, forever = tracker()
        body_saw = []
        ready = tc.Latch(2)
        with pytest.raises(KeyError):
            async with tc.TaskGroup() as g:
                g.spawn(forever("sibling1", ready))
                g.spawn(forever("sibling2", ready))
                g.spawn(fail_after(KeyError("child"), 3, ready))
                try:
                    await tc.Event().wait()
                except Cancelled:
                    body_saw.append("cancelled")
                    raise
        return sorted(ended), body_saw

    assert run(main(), contexts) == (["sibling1", "sibling2"], ["cancelled"])


def test_task_group_body_exception_cancels_children_and_propagates(contexts):
    async def main():
        ended, forever = tracker()
        with pytest.raises(ZeroDivisionError):
            async with tc.TaskGroup() as g:
                ready = tc.Latch(5)
                for i in range(5):
                    g.spawn(forever(f"c{i}", ready))
                await ready.wait()
                raise ZeroDivisionError("the body fails")
        return sorted(ended)

    assert run(main(), contexts) == [f"c{i}" for i in range(5)]


def test_cancelling_the_task_in_a_task_group_cancels_children_first(contexts):
    async def main():
        ended, forever = tracker()

        ready = tc.Latch(3)

        async def parent():
            async with tc.TaskGroup() as g:
                for i in range(3):
                    g.spawn(forever(f"c{i}", ready))

        p = tc.spawn(parent())
        await ready.wait()
        await wait_blocked(p)
        await cancel_and_wait(p)
        return sorted(ended)

    assert run(main(), contexts) == ["c0", "c1", "c2"]


def test_timeout_around_a_task_group(contexts):
    # The deadline is wall-clock time: on a loaded machine it may pass before a child has
    # taken its first step, and a child cancelled before it starts never runs its body. What
    # must hold either way: the timeout ends the group, and every child that started ended.
    async def main():
        ended, forever = tracker()
        started: list[str] = []

        async def child(name, ready):
            started.append(name)
            await forever(name, ready)

        with pytest.raises(TimeoutError):
            async with tc.timeout(0.05):
                async with tc.TaskGroup() as g:
                    ready = tc.Latch(2)
                    g.spawn(child("a", ready))
                    g.spawn(child("b", ready))
                    await ready.wait()
                    await tc.Event().wait()  # only the deadline ends the body
        return sorted(started), sorted(ended)

    started, ended = run(main(), contexts)
    assert ended == started


@pytest.mark.timeout(30)
def test_a_stuck_task_group_is_reported_as_a_deadlock(contexts):
    async def stuck():
        await tc.Event().wait()

    async def main():
        async with tc.TaskGroup() as g:
            g.spawn(stuck())

    with pytest.raises(tc.DeadlockError) as ei:
        run(main(), contexts, deadlock_timeout=0.2)
    whats = [w for _t, w in ei.value.parked]
    assert any(w.startswith("<TaskGroup waiting for children [<Task ") and ".stuck'>" in w for w in whats)


def test_misuse_is_reported_at_the_call_and_leaves_no_unawaited_coroutine():
    import gc
    import warnings

    async def scoped():
        async with tc.timeout(1):
            pass

    async def main():
        with pytest.raises(TypeError, match="awaitable"):
            await tc.when_all(value_after(1), "not awaitable")
        with pytest.raises(TypeError):
            await tc.when_any(value_after(1), 3)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="only inside a tinycoro task"):
            scoped().send(None)
        with pytest.raises(RuntimeError, match="outside a tinycoro task"):
            tc.when_all(value_after(1), value_after(2)).send(None)
        run(main(), 1)
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
