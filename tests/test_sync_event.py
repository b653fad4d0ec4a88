"""Event, Latch and WaitGroup: wakeups, values, happens-before, misuse, cancellation, deadlock."""

from __future__ import annotations

import threading
import time

import pytest

import tinycoro as tc
from helpers.runtime import cancel_and_wait
from helpers.sync import run, until, wait_blocked

# -- Event -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_event_waiters_resume_after_a_set_100ms_later_with_its_value(contexts):
    n_waiters = 20_000

    async def main():
        e = tc.Event()
        set_at: list[float] = []

        async def waiter(i):
            value = await e.wait()
            return i, value, time.monotonic()

        async def setter():
            await tc.sleep(0.1)
            set_at.append(time.monotonic())
            e.set("go")

        tasks = [tc.spawn(waiter(i)) for i in range(n_waiters)]
        s = tc.spawn(setter())
        results = [await t for t in tasks]
        await s
        return set_at[0], results

    t_set, results = run(main(), contexts)
    assert sorted(i for i, _v, _t in results) == list(range(n_waiters))
    assert all(v == "go" for _i, v, _t in results)
    assert all(t >= t_set for _i, _v, t in results)  # nobody resumed before the set


def test_wait_on_a_set_event_does_not_suspend():
    e = tc.Event()
    e.set(42)
    coro = e.wait()
    with pytest.raises(StopIteration) as si:  # completes on its first step: no trap yielded
        coro.send(None)
    assert si.value.value == 42
    assert e.is_set()


def test_clear_rearms_and_set_replaces_the_value(contexts):
    async def main():
        e = tc.Event()
        assert repr(e) == "<Event unset waiters=0>"
        e.set(1)
        e.set(2)
        assert await e.wait() == 2
        e.clear()
        assert not e.is_set()
        t = tc.spawn(e.wait())
        await wait_blocked(t)
        assert e.statistics() == tc.sync.EventStatistics(is_set=False, waiters=1)
        assert repr(e) == "<Event unset waiters=1>"
        e.set(3)
        assert await t == 3
        assert repr(e) == "<Event set waiters=0>"

    run(main(), contexts)


def test_set_from_a_plain_thread_wakes_waiters(contexts):
    e = tc.Event()
    parked = threading.Event()

    async def main():
        ts = [tc.spawn(e.wait()) for _ in range(10)]
        await wait_blocked(*ts)
        parked.set()
        return [await t for t in ts]

    def setter():
        parked.wait(10)
        e.set("from thread")

    th = threading.Thread(target=setter)
    th.start()
    try:
        assert run(main(), contexts) == ["from thread"] * 10
    finally:
        th.join()


def test_event_waiter_cancelled_while_queued_leaves_the_queue(contexts):
    async def main():
        e = tc.Event()
        ts = [tc.spawn(e.wait()) for _ in range(3)]
        await wait_blocked(*ts)
        await cancel_and_wait(ts[1])
        assert e.statistics().waiters == 2
        e.set("v")
        return [await ts[0], await ts[2]], e.statistics()

    values, stats = run(main(), contexts)
    assert values == ["v", "v"] and stats.waiters == 0


@pytest.mark.timeout(30)
def test_event_nobody_sets_is_reported_as_a_deadlock(contexts):
    async def forgotten(e):
        await e.wait()

    async def main():
        await tc.spawn(forgotten(tc.Event()))

    with pytest.raises(tc.DeadlockError) as ei:
        run(main(), contexts, deadlock_timeout=0.2)
    assert any(".forgotten'" in t and w == "<Event unset waiters=1>" for t, w in ei.value.parked)


# -- Latch -----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_latch_every_count_down_happens_before_any_waiter_proceeds(contexts):
    n_workers, n_waiters = 1000, 100

    async def main():
        latch = tc.Latch(n_workers)
        done: list[int] = []

        async def worker(i):
            await tc.yield_now()
            done.append(i)  # the work, before counting down
            latch.count_down()

        async def waiter():
            await latch.wait()
            return len(done)

        ws = [tc.spawn(waiter()) for _ in range(n_waiters)]
        await tc.when_all(*(worker(i) for i in range(n_workers)))
        seen = [await w for w in ws]
        return seen, sorted(done), latch.statistics()

    seen, done, stats = run(main(), contexts)
    assert seen == [n_workers] * n_waiters
    assert done == list(range(n_workers))
    assert stats == tc.sync.CounterStatistics(count=0, waiters=0)


def test_latch_edges_and_misuse(contexts):
    async def main():
        open_latch = tc.Latch(0)
        await open_latch.wait()  # starts open
        latch = tc.Latch(3)
        t = tc.spawn(latch.wait())
        await wait_blocked(t)
        latch.count_down(2)
        assert latch.count == 1 and not t.done()
        assert repr(latch) == "<Latch count=1 waiters=1>"
        latch.count_down(0)
        assert latch.count == 1
        latch.count_down(5)  # clamps at zero
        await t
        assert latch.count == 0
        latch.count_down()  # harmless once open
        await latch.wait()

    run(main(), contexts)
    assert tc.Latch(-1).count == 0  # count <= 0 starts open
    with pytest.raises(ValueError, match="n >= 0"):
        tc.Latch(1).count_down(-1)
    with pytest.raises(TypeError):
        tc.Latch(1.5)


# -- WaitGroup -------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_waitgroup_every_done_happens_before_any_waiter_proceeds(contexts):
    n_workers, n_waiters = 1000, 100

    async def main():
        wg = tc.WaitGroup()
        done: list[int] = []

        async def worker(i):
            await tc.yield_now()
            done.append(i)
            wg.done()

        async def waiter():
            await wg.wait()
            return len(done)

        wg.add(n_workers)
        ws = [tc.spawn(waiter()) for _ in range(n_waiters)]
        for i in range(n_workers):
            tc.spawn(worker(i))
        seen = [await w for w in ws]
        return seen, sorted(done)

    seen, done = run(main(), contexts)
    assert seen == [n_workers] * n_waiters
    assert done == list(range(n_workers))


def test_waitgroup_reuse_and_misuse(contexts):
    async def main():
        wg = tc.WaitGroup()
        await wg.wait()  # zero: does not suspend
        with pytest.raises(ValueError, match="negative"):
            wg.done()
        assert wg.count == 0
        for _round in range(3):  # reusable once back at zero
            wg.add(2)
            t = tc.spawn(wg.wait())
            await wait_blocked(t)
            assert wg.statistics() == tc.sync.CounterStatistics(count=2, waiters=1)
            wg.done()
            assert not t.done()
            wg.add(-1)
            await t
        with pytest.raises(ValueError):
            wg.add(-1)
        with pytest.raises(TypeError):
            wg.add("1")
        assert repr(wg) == "<WaitGroup count=0 waiters=0>"

    run(main(), contexts)


def test_waitgroup_waiter_cancelled_leaves_the_queue(contexts):
    async def main():
        wg = tc.WaitGroup()
        wg.add()
        ts = [tc.spawn(wg.wait()) for _ in range(2)]
        await wait_blocked(*ts)
        await cancel_and_wait(ts[0])
        await until(lambda: wg.statistics().waiters == 1)
        wg.done()
        await ts[1]

    run(main(), contexts)
