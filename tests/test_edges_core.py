"""The engine at its edges: bad SQE arguments, abandoned tasks and the primitives
they waited on, stale cancels, failed completions of cancelled operations, huge sleeps."""

from __future__ import annotations

import os
import resource
import threading

import pytest

import tinycoro as tc
from tinycoro import uring
from tinycoro.core.traps import Op, Park
from tinycoro.testing import wait_blocked
from helpers.runtime import cancel_and_wait, open_fds, opened_since, tinycoro_threads, wait_until
from helpers.sync import spawn_here


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- rule 11: an exception while preparing an SQE goes to the task that asked -----------------


@pytest.mark.timeout(30)
def test_bad_sqe_argument_fails_only_the_task_that_passed_it(contexts, tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"abc")

    async def main():
        fd = os.open(path, os.O_RDONLY)
        try:
            buf = bytearray(1)
            sleeper = tc.spawn(tc.sleep(0.01))  # an innocent task, maybe on the same context
            with pytest.raises(OverflowError):
                await Op(uring.prep_read, fd, buf, 1, 1 << 64)  # offset past u64
            with pytest.raises(OverflowError):
                # a negative mode reaches io_uring_prep_openat unchecked
                await Op(uring.prep_openat, str(tmp_path / "x").encode(), os.O_CREAT | os.O_WRONLY, -1, -100)
            # The context carries on: the next operation on it works, and so does the sleeper.
            n = await Op(uring.prep_read, fd, buf, 1, 1)
            await sleeper
            return n, bytes(buf)
        finally:
            os.close(fd)

    assert tc.run(main(), contexts=contexts) == (1, b"b")
    assert not tinycoro_threads()


# -- rule 13: shutdown leaves no dead waiter in a primitive ------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["waiting", "holding"])
def test_stop_timeout_0_leaves_no_dead_waiter_in_a_shared_mutex(contexts, how):
    m = tc.Mutex()
    a = tc.Scheduler(contexts).start()
    b = tc.Scheduler(contexts).start()
    released = []
    try:
        if how == "waiting":
            # b holds the mutex; a's task parks on it; a is stopped without a grace period.
            b.run_sync(m.lock())  # taken by a task of b, which then ends holding it

            async def waiter():
                try:
                    await m.lock()
                finally:
                    released.append("finally ran")

            t = a.submit(waiter())
            wait_until(lambda: m.statistics().waiters == 1, what="a's task parked on the mutex")
            a.stop(timeout=0)
            assert t.cancelled()
            stats = m.statistics()
            assert stats.waiters == 0
            m.unlock()  # the owner (outside any task here) lets go: nobody dead gets it
            assert not m.locked() and m.statistics().owner is None
        else:
            # a's task holds the mutex inside ``async with`` and waits forever; closing its
            # coroutine at shutdown runs the ``async with`` exit, which releases the mutex.
            async def holder():
                async with m:
                    released.append("holding")
                    await tc.Event().wait()

            t = a.submit(holder())
            wait_until(lambda: m.locked() and a.tasks() and a.tasks()[0].state == "parked", what="holder parked")
            a.stop(timeout=0)
            assert not m.locked() and m.statistics().owner is None
        # b can take the mutex and use it normally afterwards.

        async def take():
            async with m:
                return m.statistics().owner is tc.current_task()

        assert b.run_sync(take(), timeout=10) is True
        assert m.statistics() == type(m.statistics())(False, None, 0)
        assert released
    finally:
        a.stop()
        b.stop()
    assert not tinycoro_threads()


@pytest.mark.timeout(30)
def test_abandon_seam_finishes_parked_and_io_tasks_and_runs_again(tmp_path):
    """``Engine.abandon`` on a guest engine (what the notebook runner calls when a cell's
    engine fails): in-flight ops are waited out, parked tickets aborted, coroutines closed, and
    the engine is usable afterwards."""
    from tinycoro.core.engine import Engine
    from tinycoro.core.task import Task

    sched = tc.Scheduler(1).start()
    engine = Engine(None, sched, 64, guest=True)
    try:
        ev = tc.Event()
        sem = tc.Semaphore(0)
        log = []

        async def parked():
            try:
                await sem.acquire()
            finally:
                log.append("parked finally")

        async def sleeper():
            try:
                await tc.sleep(60)
            finally:
                log.append("sleeper finally")

        def interrupt():
            raise KeyboardInterrupt  # as if it landed in the engine's own code

        async def driver():
            await wait_blocked(p, s)
            engine.call_soon(interrupt)  # the engine stops with tasks in flight and parked
            await ev.wait()

        p = Task(parked(), engine, name="parked")
        s = Task(sleeper(), engine, name="sleeper")
        d = Task(driver(), engine, name="driver")
        for t in (p, s, d):
            engine.push(t)
        with pytest.raises(KeyboardInterrupt):
            engine.run(until=d)
        err = RuntimeError("cell engine failed")
        engine.abandon(err)
        assert sorted(log) == ["parked finally", "sleeper finally"]
        assert p.exception() is err and s.exception() is err and d.exception() is err
        assert not engine.inflight and not engine.parked and not engine.ready
        assert len(sem._lot) == 0
        assert sched.stats().failed == 0  # abandoned tasks are not unobserved failures

        async def again():
            await tc.sleep(0.001)
            ev.set()
            return "ok"

        t = Task(again(), engine)
        engine.push(t)
        engine.run(until=t)
        assert t.result() == "ok"
    finally:
        engine.close()
        sched.stop()


# -- an idle context never spins ----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_idle_after_2000_cancel_versus_completion_races_costs_no_cpu(contexts, tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 4096)
    sched = tc.Scheduler(contexts).start()
    try:

        async def reader(fd):
            return await Op(uring.prep_read, fd, bytearray(16), 16, 0)

        async def races(fd):
            for i in range(2000):
                # On the racer's own context, so that every pattern happens on every run; a
                # cancel at varying points: before the reader starts, while its read is in the
                # kernel, and after its completion was reaped but before it was stepped (the
                # last iteration is that case, with no operation after it).
                t = spawn_here(reader(fd))
                for _ in range(i % 3):
                    await tc.yield_now()
                t.cancel()
                try:
                    await t
                except tc.Cancelled:
                    pass

        fd = os.open(path, os.O_RDONLY)
        try:
            sched.run_sync(races(fd), timeout=100)
        finally:
            os.close(fd)
        wait_until(lambda: all(c.sleeping for c in sched.stats().contexts), what="all contexts asleep")
        before = _cpu()
        threading.Event().wait(1.0)  # measuring over one idle second, not synchronising
        spent = _cpu() - before
        assert spent < 0.2, f"idle contexts spent {spent:.2f} s of CPU in one second"
    finally:
        sched.stop()


# -- a failed completion of a cancelled operation delivers the interrupt ------------------------


@pytest.mark.timeout(30)
def test_timeout_of_an_open_blocked_in_the_kernel_is_a_timeout_error(contexts, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fds = open_fds()

    async def main():
        # Opening a FIFO for writing with no reader blocks in the kernel (an io-wq worker);
        # cancelling it fails the open with -ERESTARTSYS (512), which must read as the timeout.
        # (For reading, io_uring's first, non-blocking attempt already succeeds.)
        for _ in range(3):
            with pytest.raises(TimeoutError):
                async with tc.timeout(0.3):
                    await tc.io.open(fifo, "wb")

    tc.run(main(), contexts=contexts)
    assert not opened_since(fds)


# -- sleeping "forever" ------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seconds", [1e300, 2**64, float("inf")])
def test_huge_sleep_sleeps_until_cancelled(seconds, caplog):
    async def main():
        t = tc.spawn(tc.sleep(seconds))
        await wait_blocked(t)
        await cancel_and_wait(t)
        async with tc.timeout(seconds):
            await tc.sleep(0.001)
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.01):
                await tc.sleep(seconds)

    tc.run(main(), contexts=2)
    assert not [r for r in caplog.records if r.name == "tinycoro"]


# -- an expired deadline fires at the first await, every time --------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seconds", [0, -1])
def test_expired_timeout_fires_at_the_first_await_every_time(contexts, seconds, tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 64)

    async def main():
        f = await tc.io.open(path, "rb")
        expired = 0
        try:
            for i in range(300):
                reached = False
                try:
                    async with tc.timeout(seconds):
                        reached = True
                        if i % 2:
                            await tc.yield_now()
                        else:
                            await f.read_at(16, 0)
                        raise AssertionError("the await after an expired deadline returned")
                except TimeoutError:
                    expired += reached
        finally:
            await f.close()
        return expired

    assert tc.run(main(), contexts=contexts) == 300


@pytest.mark.timeout(60)
def test_deadlines_fire_for_parked_and_sleeping_tasks_and_are_no_deadlock(contexts):
    async def parked(ev):
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.05):
                await ev.wait()  # nothing else is pending: only the deadline can wake it
        return "timed out"

    async def main():
        ev = tc.Event()
        tasks = [tc.spawn(parked(ev)) for _ in range(6)]
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.05):
                await tc.sleep(30)
        async with tc.timeout(5) as t:  # does not fire
            await tc.sleep(0.001)
        assert not t.expired()
        return [await t for t in tasks]

    assert tc.run(main(), contexts=contexts, deadlock_timeout=0.02) == ["timed out"] * 6


# -- a descriptor returned after its task was abandoned is closed, not leaked ----------------


@pytest.mark.timeout(30)
def test_abandon_closes_a_descriptor_that_an_orphaned_open_returned(tmp_path):
    from tinycoro.core.engine import Engine
    from tinycoro.core.task import Task

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sched = tc.Scheduler(1).start()
    engine = Engine(None, sched, 64, guest=True)
    try:
        fds = open_fds()

        def interrupt():
            raise KeyboardInterrupt

        async def opener():
            # Blocks in the kernel (O_CREAT makes io_uring open in a worker) until a reader
            # opens the FIFO.
            op = Op(uring.prep_openat, os.fsencode(fifo), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600, -100, returns_fd=True)
            return await op

        async def driver():
            await wait_blocked(o)
            engine.call_soon(interrupt)  # the engine stops with the open in the kernel
            await tc.Event().wait()

        o = Task(opener(), engine, name="opener")
        d = Task(driver(), engine, name="driver")
        engine.push(o)
        engine.push(d)
        with pytest.raises(KeyboardInterrupt):
            engine.run(until=d)
        # A reader arrives: the open succeeds in the kernel, but its task is about to be
        # abandoned. Wait (outside the engine) for that completion to be posted.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            wait_until(lambda: engine.ring.cq_ready() > 0, what="the open's completion")
            engine.abandon(None)
            assert o.cancelled()
        finally:
            os.close(reader)
        assert not opened_since(fds)  # the writer end the kernel opened was closed by the engine
    finally:
        engine.close()
        sched.stop()


# -- testing.wait_blocked parks -----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_wait_blocked_parks_until_the_tasks_block_and_is_bounded(contexts):
    go = threading.Event()

    async def busy_then_blocked(ev):
        while not go.is_set():  # runnable, not blocked, until the test thread says so
            await tc.yield_now()
        await ev.wait()

    async def watcher(t):
        await wait_blocked(t)
        return "blocked"

    with tc.Scheduler(contexts) as s:
        ev = tc.Event()
        t = s.submit(busy_then_blocked(ev))
        w = s.submit(watcher(t))
        wait_until(lambda: any(i.id == w.id and i.state == "parked" for i in s.tasks()), what="watcher parked")
        go.set()
        done = threading.Event()
        w.add_done_callback(lambda _t: done.set())
        assert done.wait(10) and w.result() == "blocked"
        ev.set()

        async def never():
            finished = s.submit(tc.sleep(0))
            while not finished.done():
                await tc.yield_now()
            with pytest.raises(RuntimeError, match="never blocked"):
                await wait_blocked(finished, seconds=0.05)

        s.run_sync(never(), timeout=10)


# -- Scheduler.stats() is a pure snapshot ----------------------------------------------------


@pytest.mark.timeout(30)
def test_stats_is_pure_and_the_first_snapshot_already_shows_busy():
    go = threading.Event()

    async def spin():
        while not go.is_set():
            await tc.yield_now()

    with tc.Scheduler(1) as s:
        t = s.submit(spin())
        try:
            # Measuring one awake stretch (the engine never sleeps while spin() yields), not
            # synchronising: busy is the awake fraction of wall time, preempted or not.
            threading.Event().wait(0.3)
            first = s.stats().contexts[0].busy  # no earlier call primed a sampling window
            again = s.stats().contexts[0].busy  # and that call did not move one either
            assert first > 0.5 and again > 0.5
        finally:
            go.set()
        done = threading.Event()
        t.add_done_callback(lambda _t: done.set())
        assert done.wait(10)



# -- a task's wait, read from another thread: the owner's tables, never Task._waiting ----------


def _owner_view(task: tc.Task) -> object:
    """``task.waiting_on()`` read on its own engine's thread (the direct read)."""
    box: list = []
    seen = threading.Event()
    task.engine.call_soon(lambda: (box.append(task.waiting_on()), seen.set()))
    assert seen.wait(30), "the owner never ran the call"
    return box[0]


@pytest.mark.timeout(60)
def test_a_foreign_thread_reads_the_wait_its_owner_reads(contexts):
    # Another thread reads a task's wait from its engine's tables (engine.parked and
    # engine.inflight; docs/freethreading-tsan.md, finding 12): the same Park or Op the owner
    # reads from the task, for a primitive and for I/O, and nothing once it is done.
    r, w = os.pipe()
    try:
        with tc.Scheduler(contexts) as s:
            ev = tc.Event()
            buf = bytearray(1)

            async def waiter():
                await ev.wait()
                return await Op(uring.prep_read, r, buf, 1, 0)

            t = s.submit(waiter())
            finished = threading.Event()
            t.add_done_callback(lambda _t: finished.set())
            wait_until(lambda: t.waiting_on() is not None, what="waiter parked")
            park = t.waiting_on()
            assert type(park) is Park and _owner_view(t) is park
            assert [i.state for i in s.tasks() if i.id == t.id] == ["parked"]
            assert "waiting on" in repr(t)  # a repr taken here reads the tables too
            t.engine.call_soon(ev.set)
            wait_until(lambda: isinstance(t.waiting_on(), Op), what="waiter reading the pipe")
            op = t.waiting_on()
            assert _owner_view(t) is op
            assert [i.state for i in s.tasks() if i.id == t.id] == ["io"]
            os.write(w, b"x")
            assert finished.wait(30), "the read never completed"
            assert t.result() == 1 and buf == b"x"
            assert t.waiting_on() is None
    finally:
        os.close(r)
        os.close(w)
