"""Primitives shared between asyncio tasks and tinycoro tasks on a Scheduler's contexts keep
every guarantee: FIFO baton passing of the Mutex, no lost wake-up of Event,
Condition, Semaphore and Channel. Bounded by counts; every test has a timeout."""

from __future__ import annotations

import asyncio

import pytest

import tinycoro as tc

uvloop = pytest.importorskip("uvloop")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["asyncio", "uvloop"])
def arun(request):
    return asyncio.run if request.param == "asyncio" else uvloop.run


async def _gather_both(aio_coros, tc_tasks):
    """Await asyncio coroutines and tinycoro tasks together; fail fast on the first error."""
    aio_tasks = [asyncio.create_task(c) for c in aio_coros]
    joins = [asyncio.create_task(_join(t)) for t in tc_tasks]
    return await asyncio.gather(*aio_tasks, *joins)


async def _join(t):
    return await t


ROUNDS = 1000


def test_mutex_stress_two_asyncio_and_two_tinycoro_tasks(arun, contexts):
    # 2 asyncio tasks + 2 tinycoro tasks, ROUNDS critical sections each, on one Mutex. The
    # counter's read-yield-write is exact only under mutual exclusion. FIFO baton passing is
    # checked directly: just before each unlock the holder notes the head of the waiter queue
    # (under the mutex's own lock, so the head cannot change before the unlock pops it), and
    # the next holder must be exactly that waiter whenever there was one.
    m = tc.Mutex()
    state = {"n": 0}
    holders: list[object] = []
    heads: list[object] = []

    async def worker(rounds):
        for _ in range(rounds):
            async with m:
                holders.append(m.statistics().owner)
                v = state["n"]
                await tc.yield_now()  # works in both worlds: let the others queue up
                state["n"] = v + 1
                with m._mu:  # test-only look at the queue head (see above)
                    head = next((w for w in m._lot._queue if w.queued), None)
                heads.append(head.task if head is not None else None)
        return rounds

    async def main():
        with tc.Scheduler(contexts) as s:
            tc_tasks = [s.submit(worker(ROUNDS)) for _ in range(2)]
            done = await _gather_both([worker(ROUNDS), worker(ROUNDS)], tc_tasks)
        return done

    assert arun(main()) == [ROUNDS] * 4
    assert state["n"] == 4 * ROUNDS
    assert len(holders) == 4 * ROUNDS
    assert all(h is not None for h in holders)
    handoffs = 0
    for i in range(len(heads) - 1):
        if heads[i] is not None:
            handoffs += 1
            assert holders[i + 1] is heads[i], f"round {i}: the lock skipped its first waiter"
    assert handoffs > 0  # the test did exercise baton passing
    owners = {id(h) for h in holders}
    assert len(owners) == 4  # each of the four tasks held it, under its own identity
    assert not m.locked()


def test_event_ping_pong_no_lost_wakeup(arun, contexts):
    # Round i: the tinycoro side waits on a[i] and then sets b[i]; the asyncio side sets a[i]
    # and waits on b[i]. A lost wake-up hangs (and the timeout fails the test).
    n = 300
    a = [tc.Event() for _ in range(n)]
    b = [tc.Event() for _ in range(n)]

    async def tc_side():
        total = 0
        for i in range(n):
            total += await a[i].wait()
            b[i].set(i)
        return total

    async def aio_side():
        total = 0
        for i in range(n):
            a[i].set(i)
            total += await b[i].wait()
        return total

    async def main():
        with tc.Scheduler(contexts) as s:
            return await _gather_both([aio_side()], [s.submit(tc_side())])

    expected = sum(range(n))
    assert arun(main()) == [expected, expected]


def test_semaphore_permits_cross_both_ways(arun, contexts):
    n = 500
    to_aio = tc.Semaphore(0)
    to_tc = tc.Semaphore(0)

    async def tc_side():
        for _ in range(n):
            to_aio.release()
            await to_tc.acquire()
        return "tc"

    async def aio_side():
        for _ in range(n):
            await to_aio.acquire()
            to_tc.release()
        return "aio"

    async def main():
        with tc.Scheduler(contexts) as s:
            return await _gather_both([aio_side()], [s.submit(tc_side())])

    assert arun(main()) == ["aio", "tc"]
    assert to_aio.statistics().value == 0 and to_tc.statistics().value == 0


def test_condition_bounded_buffer_across_sides(arun, contexts):
    # One slot guarded by a Mutex and two Conditions; producers and consumers on both sides.
    # notify_one reaching the wrong kind of waiter, or getting lost, would hang.
    n = 200
    m = tc.Mutex()
    not_full = tc.Condition(m)
    not_empty = tc.Condition(m)
    slot: list[int] = []

    async def produce(start):
        for i in range(start, start + n):
            async with m:
                await not_full.wait(lambda: not slot)
                slot.append(i)
                not_empty.notify_one()
        return None

    async def consume():
        got = []
        for _ in range(n):
            async with m:
                await not_empty.wait(lambda: slot)
                got.append(slot.pop())
                not_full.notify_one()
        return got

    async def main():
        with tc.Scheduler(contexts) as s:
            tc_tasks = [s.submit(produce(0)), s.submit(consume())]
            return await _gather_both([produce(n), consume()], tc_tasks)

    _, aio_got, _, tc_got = arun(main())
    assert sorted(aio_got + tc_got) == list(range(2 * n))


@pytest.mark.parametrize("capacity", [0, 1, 8])
def test_channel_many_to_many_across_sides(arun, contexts, capacity):
    n = 300
    ch = tc.Channel(capacity)

    async def send(base):
        for i in range(n):
            await ch.send(base + i)

    async def recv():
        got = []
        for _ in range(n):
            got.append(await ch.recv())
        return got

    async def main():
        with tc.Scheduler(contexts) as s:
            tc_tasks = [s.submit(send(0)), s.submit(recv())]
            return await _gather_both([send(10_000), recv()], tc_tasks)

    _, aio_got, _, tc_got = arun(main())
    assert sorted(aio_got + tc_got) == list(range(n)) + list(range(10_000, 10_000 + n))
    # each sender's items arrive in its own order, whoever receives them
    for got in (aio_got, tc_got):
        for base in (0, 10_000):
            mine = [x for x in got if base <= x < base + n]
            assert mine == sorted(mine)
