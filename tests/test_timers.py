"""Timers: io_uring timeouts, their cancellation, and SQ/CQ pressure."""

from __future__ import annotations

import threading
import time

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked
from helpers.runtime import cancel_and_wait, wait_until


def test_sleep_lasts_and_does_not_block_the_context():
    # One context: while the sleeper waits on its io_uring timeout, a second task on the same
    # context keeps making progress (it counts turns until the sleeper is done).
    async def main():
        done = False
        turns = 0

        async def sleeper():
            nonlocal done
            t0 = time.monotonic()
            await tc.sleep(0.05)
            done = True
            return time.monotonic() - t0

        async def counter():
            nonlocal turns
            while not done:
                turns += 1
                await tc.yield_now()

        s = tc.spawn(sleeper())
        c = tc.spawn(counter())
        elapsed = await s
        await c
        return elapsed, turns

    elapsed, turns = tc.run(main(), contexts=1)
    assert elapsed >= 0.05
    assert turns > 1


def test_many_sleepers_in_parallel(contexts):
    async def nap(i):
        await tc.sleep(0.02)
        return i

    async def main():
        t0 = time.monotonic()
        tasks = [tc.spawn(nap(i)) for i in range(200)]
        got = sorted([await t for t in tasks])
        return got, time.monotonic() - t0

    got, elapsed = tc.run(main(), contexts=contexts)
    assert got == list(range(200))
    assert elapsed >= 0.02


def test_cancel_a_sleep(contexts):
    async def main():
        entered = []

        async def sleeper():
            entered.append(1)
            try:
                await tc.sleep(30)
            except tc.Cancelled:
                entered.append("cancelled")
                raise

        t = tc.spawn(sleeper())
        await wait_blocked(t)
        assert t.cancel() is True
        with pytest.raises(tc.Cancelled):
            await t
        # the 30 s sleep ended by the cancel, not by its timer: that is what the log shows
        assert t.cancelled() and entered == [1, "cancelled"]
        assert t.cancel() is False  # already finished

    tc.run(main(), contexts=contexts)


def test_cancel_from_a_foreign_thread():
    with tc.Scheduler(2) as sched:
        started = threading.Event()

        async def sleeper():
            started.set()
            await tc.sleep(30)

        task = sched.submit(sleeper())
        assert started.wait(5)
        wait_until(lambda: sum(c.io_inflight for c in sched.stats().contexts) == 1, what="timer")
        task.cancel()

        async def join():
            with pytest.raises(tc.Cancelled):
                await task
            return task.cancelled()

        assert sched.run_sync(join(), timeout=10)


def test_cancel_before_first_step():
    async def never():
        raise AssertionError("must not run")

    async def main():
        t = tc.spawn(never())
        await cancel_and_wait(t)

    tc.run(main(), contexts=1)


def test_tiny_ring_serves_10000_concurrent_timers(contexts):
    # 8 SQ entries and 16 CQ entries for 10,000 timeouts in flight at once: the engine submits
    # when the SQ fills and reaps through the kernel's CQ overflow list, never failing an op.
    n = 10_000
    sched = tc.Scheduler(contexts, ring_entries=8)
    fired = []

    async def timer(i):
        await tc.sleep(0.05 + (i % 7) * 0.001)
        fired.append(i)

    for i in range(n):
        sched.submit(timer(i))
    sched.loop()
    assert sorted(fired) == list(range(n))
