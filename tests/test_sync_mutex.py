"""Mutex: mutual exclusion, FIFO baton passing, misuse errors, cancellation, deadlock reports."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

import tinycoro as tc
from helpers.runtime import cancel_and_wait
from helpers.sync import Cancelled, exclusive_turn, is_blocked, run, spawn_elsewhere, spawn_here, until, wait_blocked


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n_tasks,m_rounds", [(200, 50), (100_000, 1)], ids=["200x50", "100000x1"])
def test_counter_is_exact_and_values_form_a_permutation(contexts, n_tasks, m_rounds):
    async def main():
        m = tc.Mutex()
        state = {"counter": 0, "inside": 0}
        seen: list[list[int]] = []

        async def worker():
            mine = []
            for _ in range(m_rounds):
                async with m:
                    assert state["inside"] == 0
                    state["inside"] = 1
                    v = state["counter"]
                    mine.append(v)
                    await tc.yield_now()  # hold the lock across a switch: real contention
                    state["counter"] = v + 1
                    state["inside"] = 0
            seen.append(mine)

        await tc.when_all(*(worker() for _ in range(n_tasks)))
        return state["counter"], seen, m.statistics()

    counter, seen, stats = run(main(), contexts)
    assert counter == n_tasks * m_rounds
    flat = sorted(v for mine in seen for v in mine)
    assert flat == list(range(n_tasks * m_rounds))
    assert all(mine == sorted(mine) for mine in seen)  # each task saw increasing values
    assert stats == tc.sync.MutexStatistics(locked=False, owner=None, waiters=0)


@pytest.mark.timeout(30)
def test_fifo_order_for_waiters_queued_in_a_known_order(contexts):
    k = 50

    async def main():
        m = tc.Mutex()
        order: list[int] = []

        async def waiter(i):
            async with m:
                order.append(i)
                await tc.yield_now()

        await m.lock()
        tasks = []
        for i in range(k):
            tasks.append(tc.spawn(waiter(i)))
            await until(lambda: m.statistics().waiters == i + 1)  # queued before the next one
        m.unlock()
        for t in tasks:
            await t
        return order

    assert run(main(), contexts) == list(range(k))


def test_unlock_hands_over_so_newcomers_cannot_barge(contexts):
    async def main():
        m = tc.Mutex()
        got = []

        async def waiter():
            async with m:
                got.append("waiter")

        await m.lock()
        t = spawn_here(waiter())  # same thread: it cannot run before our checks below
        await until(lambda: m.statistics().waiters == 1)
        m.unlock()
        # Ownership went straight to the waiter: the mutex never became free.
        assert m.locked()
        assert m.statistics().owner is t
        assert not m.try_lock()
        await t
        assert not m.locked()
        assert m.try_lock()
        m.unlock()
        return got

    assert run(main(), contexts) == ["waiter"]


def test_try_lock_and_misuse_errors():
    async def main():
        m = tc.Mutex()
        assert repr(m) == "<Mutex unlocked>"
        with pytest.raises(RuntimeError, match="unlock\\(\\) of an unlocked"):
            m.unlock()
        assert m.try_lock()
        assert m.locked()
        assert not m.try_lock()
        me = tc.current_task()
        assert m.statistics() == tc.sync.MutexStatistics(True, me, 0)
        assert repr(m) == f"<Mutex locked by <Task {me.id} {me.name!r}> waiters=0>"
        with pytest.raises(RuntimeError, match="not reentrant"):
            await m.lock()

        async def other():
            m.unlock()

        with pytest.raises(RuntimeError, match="does not hold it"):
            await tc.spawn(other())
        m.unlock()
        assert not m.locked()
        with pytest.raises(RuntimeError, match="unlocked"):
            m.unlock()

    run(main(), 1)


def test_acquisitions_held_at_once_are_distinct_and_each_takes_the_lock():
    # Each lock() and acquire() is an acquisition of its own: one still held, awaited or
    # driven later, keeps its own state.
    async def main():
        m, s = tc.Mutex(), tc.Semaphore(1)
        first, second = m.lock(), m.lock()
        assert first is not second
        await first
        order = []

        async def later():
            await second  # made before the lock was taken, awaited while it is held
            order.append("second")
            m.unlock()

        t = tc.spawn(later())
        await wait_blocked(t)
        order.append("first")
        m.unlock()
        await t
        driven = tc.spawn(s.acquire())  # driven by send(), not awaited
        held = m.lock()
        await driven
        assert s.value == 0 and held is not m.lock()
        s.release()
        await held
        m.unlock()
        for _ in range(100):  # the spare's reuse in a loop, mutex and semaphore alternating
            await m.lock()
            await s.acquire()
            m.unlock()
            s.release()
        assert order == ["first", "second"] and not m.locked()

    run(main(), 1)


def test_an_acquisition_is_awaited_once_as_a_coroutine_is():
    # Awaited, an acquisition lets go of its primitive (a spare kept for reuse must never
    # keep one alive), so a second await of the same one fails at once, as a coroutine's
    # does, on the mutex and the semaphore, free or held, and takes nothing.
    async def main():
        m, s = tc.Mutex(), tc.Semaphore(1)
        taken = m.lock()
        await taken
        with pytest.raises(RuntimeError, match="already awaited"):
            await taken  # held by us: would have been a re-lock
        m.unlock()
        with pytest.raises(RuntimeError, match="already awaited"):
            await taken  # free: would have taken it again
        assert not m.locked()
        got = s.acquire()
        await got
        s.release()
        with pytest.raises(RuntimeError, match="already awaited"):
            await got
        assert s.value == 1
        # a fresh one each time still works, after the failures
        for _ in range(3):
            await m.lock()
            m.unlock()
        return m.locked()

    assert run(main(), 1) is False


def test_reused_acquisitions_lock_for_their_own_awaiter(contexts):
    # The spare handed out again in a loop is indistinguishable from a fresh one: tasks on
    # every context locking in loops (an acquisition kept by one task while another loops)
    # each own the mutex exactly when their own await returned.
    async def main():
        m = tc.Mutex()
        inside = []

        async def worker(i):
            kept = m.lock() if i % 2 else None  # held across the loop: never a spare
            for _ in range(200):
                await m.lock()
                inside.append(i)
                assert m.statistics().owner is tc.current_task() and inside == [i]
                inside.pop()
                if i % 3 == 0:
                    await tc.yield_now()  # contended: others queue behind the holder
                m.unlock()
            if kept is not None:
                await kept
                assert m.statistics().owner is tc.current_task()
                m.unlock()

        await tc.when_all(*(worker(i) for i in range(6)))
        return m.locked()

    assert run(main(), contexts) is False


def test_a_primitive_taken_and_given_back_goes_with_its_last_reference():
    # The acquisition that lock() and acquire() return is over once awaited: nothing the
    # runtime keeps may hold the primitive after it (a finalizer or weak reference of the
    # application's would wait for some later lock anywhere in the process).
    class MyMutex(tc.Mutex):
        pass

    class MySemaphore(tc.Semaphore):
        pass

    async def awaited(aw):
        await aw

    async def main():
        alive = []
        for make, take, give, drive in (
            (MyMutex, lambda p: p.lock(), lambda p: p.unlock(), awaited),
            (MySemaphore, lambda p: p.acquire(), lambda p: p.release(), awaited),
            # driven by send() as a task's coroutine (a mutex would be that task's to unlock)
            (MySemaphore, lambda p: p.acquire(), lambda p: p.release(), tc.spawn),
        ):
            p = make()
            await drive(take(p))
            give(p)
            gone = weakref.ref(p)
            del p
            gc.collect()  # a primitive and its parking lot form a cycle
            alive.append(gone() is not None)
        return alive

    assert run(main(), 1) == [False] * 3


def test_outside_a_task_try_lock_and_unlock_work_from_a_plain_thread():
    m = tc.Mutex()
    assert m.try_lock()
    assert m.statistics().owner is None
    done = []
    th = threading.Thread(target=lambda: (m.unlock(), done.append(1)))
    th.start()
    th.join()
    assert done == [1] and not m.locked()


def test_async_with_releases_on_exception_and_on_cancellation(contexts):
    async def main():
        m = tc.Mutex()
        with pytest.raises(ValueError):
            async with m:
                raise ValueError("boom")
        assert not m.locked()

        parked = tc.Event()

        async def holder():
            async with m:
                await parked.wait()  # never set: cancelled while holding

        t = tc.spawn(holder())
        await wait_blocked(t)
        assert m.statistics().owner is t
        await cancel_and_wait(t)
        assert not m.locked()

    run(main(), contexts)


def test_waiter_cancelled_while_queued_leaves_the_queue(contexts):
    async def main():
        m = tc.Mutex()
        order = []

        async def waiter(i):
            try:
                async with m:
                    order.append(i)
            except Cancelled:
                order.append(f"cancelled {i}")
                raise

        await m.lock()
        ts = []
        for i in range(3):
            ts.append(tc.spawn(waiter(i)))
            await until(lambda: m.statistics().waiters == i + 1)
        await cancel_and_wait(ts[1])
        assert m.statistics().waiters == 2
        m.unlock()
        await ts[0]
        await ts[2]
        return order, m.statistics()

    order, stats = run(main(), contexts)
    assert order == ["cancelled 1", 0, 2]
    assert stats.waiters == 0 and not stats.locked


def test_waiter_cancelled_after_handoff_passes_the_lock_on(contexts):
    async def main():
        m = tc.Mutex()
        got = []

        async def waiter(i):
            async with m:
                got.append(i)

        await m.lock()
        # w1 runs on our context, so nothing can run it between the two calls below.
        w1 = spawn_here(waiter(1))
        await until(lambda: m.statistics().waiters == 1)
        w2 = tc.spawn(waiter(2))
        await until(lambda: m.statistics().waiters == 2)
        w1.cancel()  # requested first ...
        m.unlock()  # ... then ownership is handed to w1 anyway: its undo must pass it on
        assert m.statistics().owner is w1
        with pytest.raises(Cancelled):
            await w1
        await w2
        return got, m.statistics()

    got, stats = run(main(), contexts)
    assert got == [2]
    assert not stats.locked and stats.waiters == 0


@pytest.mark.timeout(30)
def test_lock_order_deadlock_is_reported_naming_both_tasks(contexts):
    async def main():
        a, b = tc.Mutex(), tc.Mutex()
        both = tc.Latch(2)

        async def first():
            async with a:
                both.count_down()
                await both.wait()
                async with b:
                    pass

        async def second():
            async with b:
                both.count_down()
                await both.wait()
                async with a:
                    pass

        await tc.when_all(first(), second())

    with pytest.raises(tc.DeadlockError) as ei:
        run(main(), contexts, deadlock_timeout=0.3)
    msg = str(ei.value)
    assert ".first'" in msg and ".second'" in msg
    whats = sorted(w for _t, w in ei.value.parked if w.startswith("<Mutex"))
    assert len(whats) == 2
    assert all("waiters=1" in w for w in whats)


@pytest.mark.timeout(120)  # 300 hand-overs to another context's thread, each waiting for
# the OS to run it: seconds on a loaded machine with the GIL off (0.3-10.6 s seen at load 21)
def test_cancel_storm_keeps_fifo_order_of_the_survivors(contexts):
    """Most queued waiters cancelled: the parking lot compacts its dead entries and the
    survivors still get the lock in the order they queued."""
    n = 300

    async def main():
        m = tc.Mutex()
        order = []

        async def waiter(i):
            async with m:
                order.append(i)

        await m.lock()
        ts = []
        for i in range(n):
            ts.append(tc.spawn(waiter(i)))
            await until(lambda: m.statistics().waiters == i + 1)
        doomed = [i for i in range(n) if i % 5]
        for i in doomed:
            ts[i].cancel()
        for i in doomed:
            with pytest.raises(Cancelled):
                await ts[i]
        assert m.statistics().waiters == n - len(doomed)
        assert len(m._lot._queue) < n  # compacted, not just marked
        m.unlock()
        for t in ts:
            if not t.cancelled():
                await t
        return order

    assert run(main(), contexts) == [i for i in range(n) if i % 5 == 0]


@pytest.mark.timeout(120)
def test_fast_path_races_across_threads_keep_exclusion_and_lose_no_waiter(contexts):
    """The uncontended path takes no threading.Lock (it pops a token): with the GIL
    switching threads every microsecond, tasks on every context race lock and unlock without
    yielding inside, so fast takes, fast releases and queued waiters interleave at every
    bytecode. Exclusion must hold, every waiter must get the lock (a stranded one hangs the
    run: DeadlockError or the timeout), and the mutex ends free with nobody queued."""
    import sys

    async def main():
        m = tc.Mutex()
        state = {"inside": 0, "count": 0, "overlaps": 0}

        async def worker(rounds):
            for i in range(rounds):
                if i % 3 == 0:
                    await m.lock()
                    try:
                        exclusive_turn(state)
                    finally:
                        m.unlock()
                else:
                    async with m:
                        exclusive_turn(state)
                if i % 7 == 0:
                    await tc.yield_now()

        await tc.when_all(*(worker(400) for _ in range(40)))
        return state, m.statistics()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        state, stats = run(main(), contexts)
    finally:
        sys.setswitchinterval(old)
    assert state == {"inside": 0, "count": 40 * 400, "overlaps": 0}
    assert stats == tc.sync.MutexStatistics(locked=False, owner=None, waiters=0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [2, 4])
@pytest.mark.parametrize("pause", range(8))
def test_a_waiter_that_queues_at_any_point_of_a_fast_unlock_is_not_stranded(contexts, pause):
    """A deterministic interleaving of the fast unlock with a newcomer's lock: the unlocking
    task's thread is stopped (sys.settrace) before the *pause*-th line of ``unlock`` it runs,
    a second task on another context locks meanwhile (it takes the token or parks), then the
    unlock finishes. Whatever the stop point, the mutex is never free while that task waits,
    and it gets the lock. Putting the token back *after* reading ``_contended`` (the reversed
    order the module doc argues against) strands the waiter at one of these stop points."""
    import sys

    from tinycoro import compiled

    if compiled.is_compiled(sys.modules["tinycoro.sync.mutex"]):
        # Compiled, unlock has no lines to stop at. Under the GIL no other thread can run
        # between its token append and its read of the flag at all; without it (a
        # free-threaded build) one can, and tests/test_ft_stress.py races that unlock against
        # newcomers on every context instead. The interleavings this test forces by stopping
        # exist only in the interpreted source (the pure run, on either build).
        pytest.skip("the compiled unlock has no lines to stop at (test_ft_stress races it)")
    code = tc.Mutex.unlock.__code__
    resume = threading.Event()
    stopped_inside: list[bool] = []

    async def main():
        m = tc.Mutex()
        paused = tc.Event()
        seen: dict[str, object] = {}

        def tracer(frame, event, arg):
            if frame.f_code is not code:
                return None
            lines = 0

            def line(frame, event, arg):
                nonlocal lines
                if event == "line":
                    if lines == pause:
                        stopped_inside.append(True)
                        paused.set()
                        assert resume.wait(30), "never resumed"  # blocks this context's thread
                    lines += 1
                return line

            return line

        async def unlocker():
            await m.lock()
            old = sys.gettrace()
            sys.settrace(tracer)
            try:
                m.unlock()
            finally:
                sys.settrace(old)
            stats = m.statistics()
            seen["free with a waiter"] = not stats.locked and stats.waiters > 0
            paused.set()  # the stop point was past the end of unlock: nothing stopped

        async def newcomer():
            await m.lock()
            seen["newcomer got it"] = True
            m.unlock()

        u = spawn_elsewhere(unlocker())
        await paused.wait()
        w = spawn_here(newcomer())
        await until(lambda: w.done() or is_blocked(w))
        resume.set()
        await u
        if seen["free with a waiter"]:
            m._settle()  # the waiter is stranded: let it finish, then report
            await w
            raise AssertionError(f"the mutex was free while a task waited (stop point {pause})")
        await w
        assert seen["newcomer got it"]
        return m.statistics()

    stats = run(main(), contexts)
    assert stats == tc.sync.MutexStatistics(locked=False, owner=None, waiters=0)
    if pause <= 2:
        assert stopped_inside, "the fast unlock has at least three lines to stop at"
