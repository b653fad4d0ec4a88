"""Semaphore: bounded concurrency, FIFO, baton passing, cancellation."""

from __future__ import annotations

import threading

import pytest

import tinycoro as tc
from helpers.sync import Cancelled, run, spawn_here, until


@pytest.mark.timeout(30)
def test_at_most_value_tasks_inside_and_all_permits_come_back(contexts):
    permits, n_tasks = 3, 2000

    async def main():
        sem = tc.Semaphore(permits)
        lock = threading.Lock()
        state = {"inside": 0, "max": 0, "entered": 0}

        async def worker():
            async with sem:
                with lock:
                    state["inside"] += 1
                    state["entered"] += 1
                    state["max"] = max(state["max"], state["inside"])
                await tc.yield_now()
                with lock:
                    state["inside"] -= 1

        await tc.when_all(*(worker() for _ in range(n_tasks)))
        return state, sem.statistics()

    state, stats = run(main(), contexts)
    assert state["entered"] == n_tasks and state["inside"] == 0
    assert 1 <= state["max"] <= permits
    assert stats == tc.sync.SemaphoreStatistics(value=permits, waiters=0)


def test_fifo_and_no_barging(contexts):
    async def main():
        sem = tc.Semaphore(1)
        order = []

        async def waiter(i):
            async with sem:
                order.append(i)

        await sem.acquire()
        ts = []
        for i in range(20):
            ts.append(tc.spawn(waiter(i)))
            await until(lambda: sem.statistics().waiters == i + 1)
        assert repr(sem) == "<Semaphore value=0 waiters=20>"
        sem.release()
        assert not sem.try_acquire() or sem.statistics().waiters == 0
        for t in ts:
            await t
        return order

    assert run(main(), contexts) == list(range(20))


def test_release_hands_the_permit_to_the_waiter_not_to_the_count(contexts):
    async def main():
        sem = tc.Semaphore(0)
        t = spawn_here(sem.acquire())
        await until(lambda: sem.statistics().waiters == 1)
        sem.release()
        assert sem.value == 0  # handed over, never visible to a newcomer
        assert not sem.try_acquire()
        await t
        sem.release()
        assert sem.try_acquire()

    run(main(), contexts)


def test_cancelled_waiter_leaves_queue_and_cancel_after_handoff_passes_permit_on(contexts):
    async def main():
        sem = tc.Semaphore(0)
        got = []

        async def waiter(i):
            await sem.acquire()
            got.append(i)

        w1 = spawn_here(waiter(1))
        await until(lambda: sem.statistics().waiters == 1)
        w2 = tc.spawn(waiter(2))
        await until(lambda: sem.statistics().waiters == 2)
        w3 = tc.spawn(waiter(3))
        await until(lambda: sem.statistics().waiters == 3)
        w3.cancel()  # queued: just leaves
        with pytest.raises(Cancelled):
            await w3
        assert sem.statistics().waiters == 2
        w1.cancel()
        sem.release()  # handed to w1, which is being cancelled: its undo passes it to w2
        with pytest.raises(Cancelled):
            await w1
        await w2
        return got, sem.statistics()

    got, stats = run(main(), contexts)
    assert got == [2]
    assert stats == tc.sync.SemaphoreStatistics(value=0, waiters=0)


def test_semaphore_misuse():
    with pytest.raises(ValueError):
        tc.Semaphore(-1)
    with pytest.raises(TypeError):
        tc.Semaphore(True)
