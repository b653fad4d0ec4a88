"""Condition: strict alternation, turn taking, FIFO notify, misuse, cancellation."""

from __future__ import annotations

import pytest

import tinycoro as tc
from helpers.sync import Cancelled, run, spawn_here, until


@pytest.mark.timeout(60)
def test_two_tasks_strictly_alternate_for_10000_rounds(contexts):
    rounds = 10_000

    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        state = {"turn": 0}
        out: list[int] = []

        async def player(me):
            for _ in range(rounds):
                async with m:
                    await cv.wait(lambda: state["turn"] == me)
                    out.append(me)
                    state["turn"] = 1 - me
                    cv.notify_one()

        await tc.when_all(player(0), player(1))
        return out

    out = run(main(), contexts)
    assert out == [0, 1] * rounds


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [10, 300])
def test_tasks_waiting_for_their_turn_finish_in_order(contexts, n):
    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        state = {"turn": 0}
        out: list[int] = []

        async def player(me):
            async with m:
                await cv.wait(lambda: state["turn"] == me)
                out.append(me)
                state["turn"] += 1
                cv.notify_all()

        # Spawned in reverse so that the order cannot come from spawn order.
        await tc.when_all(*(player(i) for i in reversed(range(n))))
        return out, cv.statistics()

    out, stats = run(main(), contexts)
    assert out == list(range(n))
    assert stats.waiters == 0 and not stats.mutex.locked


def test_notify_one_wakes_in_fifo_order_and_wait_returns_holding_the_mutex(contexts):
    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        order = []

        async def waiter(i):
            async with m:
                await cv.wait()
                assert m.statistics().owner is tc.current_task()
                order.append(i)

        ts = []
        for i in range(10):
            ts.append(tc.spawn(waiter(i)))
            # wait() queues the waiter first and releases the mutex after: on parallel
            # contexts the count can be seen before the unlock, so wait for both.
            await until(lambda: cv.statistics().waiters == i + 1 and not m.locked())
        assert repr(cv) == "<Condition waiters=10 on <Mutex unlocked>>"
        for i in range(10):
            async with m:
                cv.notify_one()
            await ts[i]  # the one notified is the longest waiting
        cv.notify_all()  # nobody left: harmless
        return order

    assert run(main(), contexts) == list(range(10))


def test_wait_with_a_true_predicate_does_not_wait_and_returns_its_value():
    async def main():
        cv = tc.Condition()
        async with cv:
            assert await cv.wait(lambda: "ready") == "ready"
            assert cv.mutex.locked()
        assert not cv.mutex.locked()

    run(main(), 1)


def test_wait_without_holding_the_mutex_raises(contexts):
    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        with pytest.raises(RuntimeError, match="must be called by the task holding"):
            await cv.wait()
        held = tc.Event()
        release = tc.Event()

        async def holder():
            async with m:
                held.set()
                await release.wait()

        t = tc.spawn(holder())
        await held.wait()
        with pytest.raises(RuntimeError, match="holding"):
            await cv.wait()  # locked, but by another task
        release.set()
        await t
        with pytest.raises(TypeError):
            tc.Condition(object())

    run(main(), contexts)


def test_cancelled_waiter_reacquires_the_mutex_before_cancelled_propagates(contexts):
    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        seen = []

        async def waiter():
            async with m:
                try:
                    await cv.wait()
                except Cancelled:
                    seen.append(m.statistics().owner is tc.current_task())
                    raise

        t = tc.spawn(waiter())
        await until(lambda: cv.statistics().waiters == 1)
        await m.lock()  # the waiter must queue behind us to get the mutex back
        t.cancel()
        await until(lambda: m.statistics().waiters == 1)
        assert cv.statistics().waiters == 0
        m.unlock()
        with pytest.raises(Cancelled):
            await t
        return seen, m.statistics()

    seen, stats = run(main(), contexts)
    assert seen == [True]
    assert not stats.locked


def test_a_notify_handed_to_a_cancelled_waiter_is_passed_on(contexts):
    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        woke = []

        async def waiter(i):
            async with m:
                await cv.wait()
                woke.append(i)

        w1 = spawn_here(waiter(1))  # same context: nothing runs between cancel and notify
        await until(lambda: cv.statistics().waiters == 1)
        w2 = tc.spawn(waiter(2))
        await until(lambda: cv.statistics().waiters == 2)
        w1.cancel()
        cv.notify_one()  # popped w1, which is going away: the notify must reach w2
        with pytest.raises(Cancelled):
            await w1
        await w2
        return woke

    assert run(main(), contexts) == [2]


@pytest.mark.timeout(30)
def test_waiting_for_a_notify_that_never_comes_is_a_deadlock(contexts):
    async def main():
        cv = tc.Condition()

        async def lonely():
            async with cv:
                await cv.wait()

        await tc.spawn(lonely())

    with pytest.raises(tc.DeadlockError) as ei:
        run(main(), contexts, deadlock_timeout=0.2)
    assert any(w.startswith("<Condition waiters=1") for _t, w in ei.value.parked)


def test_a_notified_waiter_cancelled_while_reacquiring_the_mutex_passes_the_notify_on(contexts):
    async def main():
        m = tc.Mutex()
        cv = tc.Condition(m)
        woke = []

        async def waiter(i):
            async with m:
                await cv.wait()
                woke.append(i)

        w1 = tc.spawn(waiter(1))
        await until(lambda: cv.statistics().waiters == 1)
        w2 = tc.spawn(waiter(2))
        await until(lambda: cv.statistics().waiters == 2)
        await m.lock()
        cv.notify_one()  # w1 consumes the notify, then queues for the mutex we hold
        await until(lambda: m.statistics().waiters == 1)
        w1.cancel()  # ... and is cancelled there: it raises instead of returning
        m.unlock()
        with pytest.raises(Cancelled):
            await w1
        await w2  # the notify reached w2 (without the hand-on this is a DeadlockError)
        return woke

    assert run(main(), contexts, deadlock_timeout=2) == [2]
