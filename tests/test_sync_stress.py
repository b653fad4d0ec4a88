"""Seeded random stress of the races that matter, across context threads, bounded by counts of
rounds (never by time, so what a run covers does not depend on how loaded the machine is):
set/wait, done/wait, close/recv, cancel/unlock (mutex, semaphore, condition) and timeouts
interrupting lock waits. Plus one run mixing mutex, event, latch and wait group.

A seeded test writes one round (``one_round(rng, r)``) and hands it to :func:`run_rounds`,
which runs the rounds on a scheduler of ``contexts`` contexts, once per seed.

Each round is spawned with random yields on every side, so who gets to the primitive's lock
first varies from round to round and from thread to thread; the GIL switch interval is shortened
so that threads interleave at a much finer grain than by default. A lost wakeup shows up as a
``DeadlockError`` (every run has a deadlock timeout) instead of a hang; every test also has a
pytest timeout.
"""

from __future__ import annotations

import random
import threading
from typing import Awaitable, Callable

import pytest

import tinycoro as tc
from helpers.runtime import switch_interval
from helpers.sync import Cancelled, run, yield_n

pytestmark = pytest.mark.timeout(60)

SEEDS = [1, 2]


@pytest.fixture(params=SEEDS, ids=lambda s: f"seed{s}")
def seed(request) -> int:
    """Each seeded test runs once per seed (and per context count, by ``contexts``)."""
    return request.param


@pytest.fixture(autouse=True)
def fine_grained_thread_switches():
    with switch_interval(1e-5):
        yield


Round = Callable[[random.Random, int], Awaitable[None]]


def run_rounds(contexts: int, seed: int, rounds: int, one_round: Round) -> None:
    """Run ``await one_round(rng, r)`` for each round *r* in one task on *contexts* contexts,
    with one ``random.Random(seed)`` for the whole run, and check that every round ran to its
    end (a lost wakeup fails the run with DeadlockError instead)."""

    async def main() -> int:
        rng = random.Random(seed)
        done = 0
        for r in range(rounds):
            await one_round(rng, r)
            done += 1
        return done

    assert run(main(), contexts, deadlock_timeout=5) == rounds


async def wait_all(tasks: list[tc.Task]) -> None:
    """Wait for every task to end, each either normally or cancelled."""
    for t in tasks:
        try:
            await t
        except Cancelled:
            pass


async def jitter(rng: random.Random, most: int = 3) -> None:
    for _ in range(rng.randrange(most + 1)):
        await tc.yield_now()


def test_event_set_races_wait(contexts, seed):
    async def one_round(rng: random.Random, r: int) -> None:
        e = tc.Event()

        async def waiter(delay):
            await yield_n(delay)
            return await e.wait()

        async def setter(delay):
            await yield_n(delay)
            e.set(r)

        ws = [waiter(rng.randrange(4)) for _ in range(rng.randrange(1, 6))]
        got = await tc.when_all(*ws, setter(rng.randrange(4)))
        assert got[:-1] == [r] * len(ws)

    run_rounds(contexts, seed, 1000, one_round)


def test_waitgroup_and_latch_done_races_wait(contexts, seed):
    async def one_round(rng: random.Random, r: int) -> None:
        k = rng.randrange(1, 6)
        use_latch = r % 2 == 1
        gate = tc.Latch(k) if use_latch else tc.WaitGroup()
        if not use_latch:
            gate.add(k)
        finished = []

        async def worker(delay):
            await yield_n(delay)
            finished.append(1)
            if use_latch:
                gate.count_down()
            else:
                gate.done()

        async def waiter(delay):
            await yield_n(delay)
            await gate.wait()
            return len(finished)

        jobs = [worker(rng.randrange(4)) for _ in range(k)]
        jobs += [waiter(rng.randrange(4)) for _ in range(rng.randrange(1, 4))]
        rng.shuffle(jobs)
        got = await tc.when_all(*jobs)
        assert [g for g in got if g is not None] == [k] * (len(jobs) - k)
        assert gate.statistics().waiters == 0

    run_rounds(contexts, seed, 800, one_round)


def test_channel_close_races_send_and_recv(contexts, seed):
    async def one_round(rng: random.Random, r: int) -> None:
        ch = tc.Channel(rng.choice([0, 0, 1, 2, 8]))
        sent: list[tuple[int, int]] = []

        async def producer(p, count):
            for i in range(count):
                try:
                    await ch.send((p, i))
                except tc.ChannelClosed:
                    return
                sent.append((p, i))  # only sends that completed
                await jitter(rng, 1)

        async def consumer():
            got = []
            async for item in ch:
                got.append(item)
                await jitter(rng, 1)
            return got

        async def closer(delay):
            await yield_n(delay)
            ch.close()

        n_prod, n_cons = rng.randrange(1, 4), rng.randrange(1, 4)
        jobs = [producer(p, rng.randrange(12)) for p in range(n_prod)]
        jobs += [consumer() for _ in range(n_cons)]
        jobs.append(closer(rng.randrange(20)))
        results = await tc.when_all(*jobs)
        received = [item for got in results[n_prod : n_prod + n_cons] for item in got]
        assert len(received) == len(set(received))  # no duplicates
        assert sorted(received) == sorted(sent)  # every completed send arrived, nothing else
        stats = ch.statistics()
        assert stats.closed and stats.senders == 0 and stats.receivers == 0

    run_rounds(contexts, seed, 400, one_round)


def test_mutex_and_semaphore_cancel_races_unlock(contexts, seed):
    async def one_round(rng: random.Random, r: int) -> None:
        use_sem = r % 2 == 1
        permits = rng.randrange(1, 3) if use_sem else 1
        prim = tc.Semaphore(permits) if use_sem else tc.Mutex()
        lock = threading.Lock()
        state = {"inside": 0, "max": 0, "entered": 0}

        async def worker():
            await jitter(rng, 2)
            async with prim:
                with lock:
                    state["inside"] += 1
                    state["entered"] += 1
                    state["max"] = max(state["max"], state["inside"])
                try:
                    await jitter(rng, 2)
                finally:
                    with lock:
                        state["inside"] -= 1

        tasks = [tc.spawn(worker()) for _ in range(rng.randrange(2, 10))]
        victims = rng.sample(tasks, rng.randrange(len(tasks)))
        await jitter(rng, 4)
        for v in victims:
            v.cancel()
            await jitter(rng, 1)
        await wait_all(tasks)
        assert state["inside"] == 0 and 1 <= state["max"] + (state["entered"] == 0) <= permits
        if use_sem:
            assert prim.statistics() == tc.sync.SemaphoreStatistics(permits, 0)
        else:
            assert prim.statistics() == tc.sync.MutexStatistics(False, None, 0)

    run_rounds(contexts, seed, 400, one_round)


def test_condition_notify_races_cancel_and_no_notify_is_lost(contexts, seed):
    """A one-slot buffer between a producer and consumers on two conditions, using notify_one
    only: a notify swallowed by a cancelled consumer would leave everyone waiting (a
    DeadlockError), so the undo hook that passes it on is exercised for real."""

    async def one_round(rng: random.Random, r: int) -> None:
        m = tc.Mutex()
        has_item, has_room = tc.Condition(m), tc.Condition(m)
        slot: list[int] = []
        state = {"done": False}
        taken: list[int] = []
        n_items = rng.randrange(1, 20)

        async def producer():
            for i in range(n_items):
                async with m:
                    await has_room.wait(lambda: not slot)
                    slot.append(i)
                    has_item.notify_one()
                await jitter(rng, 1)
            async with m:
                await has_room.wait(lambda: not slot)
                state["done"] = True
                has_item.notify_all()

        async def consumer():
            while True:
                async with m:
                    await has_item.wait(lambda: slot or state["done"])
                    if not slot:
                        return
                    taken.append(slot.pop())
                    has_room.notify_one()
                await jitter(rng, 1)

        immune = tc.spawn(consumer())  # never cancelled: the items always drain
        others = [tc.spawn(consumer()) for _ in range(rng.randrange(1, 5))]
        p = tc.spawn(producer())
        for v in rng.sample(others, rng.randrange(len(others) + 1)):
            await jitter(rng, 3)
            v.cancel()
        await p
        await immune
        await wait_all(others)
        assert sorted(taken) == list(range(n_items))
        assert not m.locked()

    run_rounds(contexts, seed, 150, one_round)


def test_timeouts_interrupting_lock_waits_keep_the_mutex_consistent(contexts, seed):
    async def main():
        rng = random.Random(seed)
        m = tc.Mutex()
        lock = threading.Lock()
        state = {"inside": 0, "entered": 0, "timeouts": 0}

        async def worker(limit):
            try:
                async with tc.timeout(limit):
                    async with m:
                        with lock:
                            state["inside"] += 1
                            state["entered"] += 1
                            assert state["inside"] == 1
                        try:
                            await jitter(rng, 2)
                        finally:
                            with lock:
                                state["inside"] -= 1
            except TimeoutError:
                with lock:
                    state["timeouts"] += 1
            await tc.yield_now()  # a leaked interrupt would surface here

        total = 0
        while total < 1500:
            batch = [worker(rng.choice([0, 1e-5, 1e-4, 1e-3])) for _ in range(20)]
            await tc.when_all(*batch)
            total += len(batch)
        return total, state, m.statistics()

    total, state, stats = run(main(), contexts, deadlock_timeout=5)
    assert state["entered"] + state["timeouts"] >= total  # (a body can time out after entry)
    assert state["inside"] == 0
    assert stats == tc.sync.MutexStatistics(False, None, 0)


def test_mixed_mutex_event_latch_waitgroup_semaphore_channel(contexts):
    n_workers, m_rounds = 1000, 10

    async def main():
        start = tc.Event()
        m = tc.Mutex()
        latch = tc.Latch(n_workers)
        wg = tc.WaitGroup()
        sem = tc.Semaphore(4)
        results = tc.Channel(64)
        state = {"counter": 0}

        async def worker(i):
            go = await start.wait()
            assert go == "go"
            for _ in range(m_rounds):
                async with m:
                    state["counter"] += 1
            async with sem:
                await results.send(i)
            latch.count_down()
            wg.done()

        async def collector():
            return sorted([x async for x in results])

        wg.add(n_workers)
        c = tc.spawn(collector())
        for i in range(n_workers):
            tc.spawn(worker(i))
        while start.statistics().waiters < n_workers:  # all parked at the start line
            await tc.yield_now()
        start.set("go")
        await latch.wait()
        after_latch = state["counter"]
        await wg.wait()
        results.close()
        return after_latch, state["counter"], await c

    after_latch, counter, collected = run(main(), contexts)
    assert after_latch == counter == n_workers * m_rounds
    assert collected == list(range(n_workers))
