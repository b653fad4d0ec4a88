"""Timers: tc.sleep's deadlines (from the call, in order, never early), their cancellation,
and SQ/CQ pressure from io_uring timeouts."""

from __future__ import annotations

import asyncio
import errno
import random
import threading
import time

import pytest

import tinycoro as tc
import tinycoro.lowlevel as ll
from tinycoro import uring
from tinycoro.core.deadlines import Sleep
from tinycoro.testing import wait_blocked
from helpers.runtime import cancel_and_wait, run_as_cell, wait_until


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


def test_a_sleeper_counts_as_sleeping_not_as_io_or_parked(contexts):
    # Sleeps are not I/O (docs/design.md, API contract): a task in tc.sleep counts in
    # ContextStats.sleeps (and as a timer started), not in in_io, io_ops or parked; the
    # snapshot of tasks says "sleeping" and how long is left.
    with tc.Scheduler(contexts) as sched:
        started = threading.Event()

        async def sleeper():
            started.set()
            await tc.sleep(30)

        task = sched.submit(sleeper(), name="napper")
        assert started.wait(5)
        wait_until(lambda: sum(c.sleeps for c in sched.stats().contexts) == 1, what="a sleeper")
        stats = sched.stats().contexts
        assert sum(c.in_io for c in stats) == 0 and sum(c.parked for c in stats) == 0
        assert sum(c.timers for c in stats) == 1 and sum(c.io_ops for c in stats) == 0
        (info,) = [i for i in sched.tasks() if i.name == "napper"]
        assert info.state == "sleeping" and info.waits_on.startswith("sleep 30 s (")
        task.cancel()
        wait_until(task.done, what="the cancelled sleeper")
        assert sum(c.sleeps for c in sched.stats().contexts) == 0


def test_a_sleeper_is_no_deadlock(contexts):
    # The watchdog sees a pending sleep as something that will wake a task: the parked
    # waiter below is woken by the sleeper, long after deadlock_timeout.
    async def main():
        ev = tc.Event()

        async def waker():
            await tc.sleep(0.3)
            ev.set()

        async def waiter():
            await ev.wait()
            return "woken"

        w = tc.spawn(waiter())
        tc.spawn(waker())
        return await w

    assert tc.run(main(), contexts=contexts, deadlock_timeout=0.05) == "woken"


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


def test_tiny_ring_serves_10000_concurrent_timeouts(contexts):
    # 8 SQ entries and 16 CQ entries for 10,000 io_uring timeouts in flight at once: the
    # engine submits when the SQ fills and reaps through the kernel's CQ overflow list, never
    # failing an op. (tc.sleep keeps no kernel timeout: these are raw ones.)
    n = 10_000
    sched = tc.Scheduler(contexts, ring_entries=8)
    fired = []

    async def timer(i):
        res = await ll.perform_raw(ll.Op(uring.prep_timeout, uring.timespec(0.05 + (i % 7) * 0.001), 0, 0))
        assert res == -errno.ETIME
        fired.append(i)

    for i in range(n):
        sched.submit(timer(i))
    sched.loop()
    assert sorted(fired) == list(range(n))


def _compute(seconds: float) -> None:
    """Hold the context (and the GIL) for *seconds* without awaiting: a CPU-bound step."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _roles_per_context(contexts: int, *roles):
    """Spawn each role once per context, role after role: round-robin dispatch gives every
    context one task of each role, in the order given. On the spawner's own context they join
    its ready queue during the spawning step (rule 18), so they run in one turn there."""
    return [[tc.spawn(role()) for _ in range(contexts)] for role in roles]


def test_sleepers_of_one_turn_resume_in_deadline_order(contexts):
    # In one turn: A sleeps 50 ms, B computes 100 ms, C sleeps 10 ms. A's deadline (call + 50
    # ms) comes before C's (100 ms later + 10 ms), so A resumes first, as in asyncio; and
    # neither resumes before its deadline. (Counted from the turn's submit, C's 10 ms ended
    # first and C resumed first.)
    async def main():
        woken = []  # (context, role, deadline, resumed), in the order they resumed

        def sleeper(role, seconds):
            async def body():
                deadline = time.perf_counter() + seconds
                await tc.sleep(seconds)
                woken.append((tc.current_context(), role, deadline, time.perf_counter()))
            return body

        async def computer():
            _compute(0.1)

        groups = _roles_per_context(contexts, sleeper("A", 0.05), computer, sleeper("C", 0.01))
        for group in groups:
            for t in group:
                await t
        return woken

    woken = tc.run(main(), contexts=contexts, dispatch="round_robin")
    assert len(woken) == 2 * contexts
    for ctx, role, deadline, resumed in woken:
        assert resumed >= deadline, f"{role} on context {ctx} resumed before its deadline"
    for ctx in range(contexts):
        order = [role for c, role, _, _ in woken if c == ctx]
        assert order == ["A", "C"], f"context {ctx} resumed {order}"


def test_a_sleep_due_during_a_turn_resumes_in_the_next_turn(contexts):
    # A sleeps 10 ms and B computes 50 ms in the same turn: A's deadline passed during that
    # turn, so A resumes in the next one or the one after, while Y, a task that yields every
    # turn, has counted two or three turns. Had the sleep counted from the turn's submit, A
    # would have resumed 10 ms of Y's turns later (thousands of them).
    async def main():
        turns = [0] * contexts
        seen = []

        async def a():
            await tc.sleep(0.01)
            seen.append(turns[tc.current_context()])

        async def b():
            _compute(0.05)

        async def y():
            ctx = tc.current_context()
            while len(seen) < contexts:
                turns[ctx] += 1
                await tc.yield_now()

        groups = _roles_per_context(contexts, a, b, y)
        for group in groups:
            for t in group:
                await t
        return seen

    seen = tc.run(main(), contexts=contexts, dispatch="round_robin")
    # On the spawner's context A, B and Y run in one turn for certain; elsewhere they may not
    # (then A's sleep does not overlap B's computation at all), which only makes A earlier.
    assert max(seen) <= 3, seen


def _random_sleepers(count: int, longest: float, seed: int):
    """*count* tasks sleeping random times up to *longest*. Each records (context, delay,
    called, resumed) as it resumes, where *called* is perf_counter() just before its
    ``tc.sleep``. Returns the coroutine to run and the records, in the order they resumed."""
    rng = random.Random(seed)
    delays = [rng.uniform(0, longest) for _ in range(count)]
    records = []

    async def sleeper(d):
        called = time.perf_counter()
        await tc.sleep(d)
        records.append((tc.current_context(), d, called, time.perf_counter()))

    async def main():
        tasks = [tc.spawn(sleeper(d)) for d in delays]
        for t in tasks:
            await t

    return main(), records


def _out_of_order(records):
    """The sleepers (per context) that resumed after one whose deadline was certainly later.

    A task's own clock reading comes before tc.sleep's, and on a loaded machine the thread
    may be preempted in between (by tens of ms), so the true deadline is only known to lie
    between its reading plus the delay and, since one context runs one step at a time, the
    reading of the next sleeper on that context plus the delay. A sleeper is out of order
    when even its latest possible deadline comes before the earliest possible deadline of
    one that resumed before it."""
    bounds = {}
    by_ctx: dict = {}
    for r in records:
        by_ctx.setdefault(r[0], []).append(r)
    for rs in by_ctx.values():
        rs.sort(key=lambda r: r[2])  # the order of the calls on that context
        for r, nxt in zip(rs, rs[1:] + [None]):
            ctx, d, called, resumed = r
            bounds[id(r)] = (called + d, (nxt[2] if nxt is not None else resumed) + d)
    bad = []
    latest: dict = {}  # per context: the latest earliest-deadline of those resumed so far
    for r in records:
        lo, hi = bounds[id(r)]
        prev = latest.get(r[0], lo)
        if hi < prev:
            bad.append((r, prev))
        latest[r[0]] = max(prev, lo)
    return bad


@pytest.mark.timeout(300)
@pytest.mark.parametrize("contexts, count", [(1, 100_000), (2, 20_000), (4, 20_000)],
                         ids=["ctx1", "ctx2", "ctx4"])
def test_random_timers_resume_in_deadline_order_and_never_early(contexts, count):
    # Random sleeps of 0-500 ms on each context resume in the order of their deadlines (the
    # call time plus the delay), none before it.
    coro, records = _random_sleepers(count, 0.5, seed=count + contexts)
    tc.run(coro, contexts=contexts)
    assert len(records) == count
    early = [r for r in records if r[3] < r[2] + r[1]]
    assert not early, f"{len(early)} of {count} resumed before their deadline: {early[:5]}"
    bad = _out_of_order(records)
    assert not bad, f"{len(bad)} of {count} resumed out of deadline order, e.g. {bad[:5]}"


def test_sleep_in_a_guest_engine_counts_from_the_call():
    # A notebook cell's engine: the cell sleeps while nothing else runs there; its deadline
    # is kept by the guest engine, which must bound its own idle wait by it.
    async def cell():
        deadline = time.perf_counter() + 0.02
        await tc.sleep(0.02)
        resumed = time.perf_counter()
        with pytest.raises(TimeoutError):  # a timeout scope and a sleep share the heap
            async with tc.timeout(0.01):
                await tc.sleep(5)
        return deadline, resumed

    deadline, resumed = run_as_cell(cell()).result()
    assert resumed >= deadline


def _run_asyncio(main):
    return asyncio.run(main())


def _run_uvloop(main):
    # skips before the coroutine is made: one made and never awaited is reported as such
    uvloop = pytest.importorskip("uvloop")
    return uvloop.run(main())


@pytest.mark.parametrize("run", [_run_asyncio, _run_uvloop], ids=["asyncio", "uvloop"])
def test_tc_sleep_in_asyncio_counts_from_the_call(run):
    # tinycoro awaitables inside asyncio (tinycoro.aio): the same scenario as on a context,
    # with the loop blocked by B's computation. uvloop counts whole milliseconds and may wake
    # a timer early: the sleep waits again then.
    async def main():
        woken = []

        async def sleeper(role, seconds):
            deadline = time.perf_counter() + seconds
            await tc.sleep(seconds)
            woken.append((role, deadline, time.perf_counter()))

        async def computer():
            _compute(0.1)

        await asyncio.gather(sleeper("A", 0.05), computer(), sleeper("C", 0.01))
        return woken

    woken = run(main)
    assert [role for role, _, _ in woken] == ["A", "C"], _timeline(woken)
    assert all(resumed >= deadline for _, deadline, resumed in woken), _timeline(woken)


def _timeline(woken):
    start = min(deadline for _, deadline, _ in woken)
    return ", ".join(f"{role}: deadline +{1e3 * (deadline - start):.1f} ms, resumed "
                     f"+{1e3 * (resumed - start):.1f} ms" for role, deadline, resumed in woken)


@pytest.mark.parametrize("run", [_run_asyncio, _run_uvloop], ids=["asyncio", "uvloop"])
def test_tc_sleeps_in_asyncio_resume_in_deadline_order_after_a_stall(run):
    # The loop is held past both deadlines, then a callback due before both timers holds it
    # again, past C's deadline (the process descheduled on a loaded machine): A, due first,
    # still resumes first. Both loops read their clock when a timer is armed, so the timers
    # keep the deadlines' order whatever the loop's delays.
    async def main():
        woken = []

        async def sleeper(role, seconds):
            await tc.sleep(seconds)
            woken.append(role)

        async def computer():
            _compute(0.1)
            asyncio.get_running_loop().call_later(0.001, _compute, 0.03)

        await asyncio.gather(sleeper("A", 0.05), computer(), sleeper("C", 0.01))
        return woken

    assert run(main) == ["A", "C"]


@pytest.mark.parametrize("run", [_run_asyncio, _run_uvloop], ids=["asyncio", "uvloop"])
def test_tc_sleep_in_asyncio_due_before_the_loop_sees_it_keeps_deadline_order(run):
    # C's deadline passes between tc.sleep's call and the loop's driver (the process was
    # descheduled there: C's step stalls 20 ms after taking it). A's, 60 ms earlier, passed
    # too, but only the loop's timers know it: C must not resume before them, in its step.
    async def main():
        woken = []

        async def sleeper(role, seconds, stall=0.0):
            trap = Sleep(seconds, time.perf_counter() + seconds)  # what tc.sleep awaits
            _compute(stall)
            await trap
            woken.append(role)

        async def computer():
            _compute(0.1)

        await asyncio.gather(sleeper("A", 0.05), computer(), sleeper("C", 0.01, stall=0.02))
        return woken

    assert run(main) == ["A", "C"]


def test_sleep_0_is_a_plain_yield():
    # sleep(0) (or less) goes to the back of the ready queue, like yield_now, and starts no
    # timer: two tasks alternate.
    async def main():
        order = []

        async def ping(name):
            for i in range(3):
                order.append((name, i))
                await tc.sleep(0 if name == "a" else -1)

        a, b = tc.spawn(ping("a")), tc.spawn(ping("b"))
        await a
        await b
        return order

    with tc.Scheduler(1) as sched:
        order = sched.run_sync(main(), timeout=10)
        assert sum(c.timers for c in sched.stats().contexts) == 0
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
