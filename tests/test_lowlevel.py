"""tinycoro.lowlevel: every public name, used the way a primitive, a bridge or a runner uses it.

The primitive below (:class:`Gate`) is built from lowlevel names only, as a user's extension
would be: it parks with a ``Park`` ticket and wakes with ``reschedule``; contexts 1, 2 and 4.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
import threading

from pathlib import Path

import pytest

import tinycoro as tc
from helpers.runtime import wait_until
from tinycoro import lowlevel as ll
from tinycoro import uring
from tinycoro.testing import wait_blocked

pytestmark = pytest.mark.timeout(60)


class Boom(Exception):
    pass


class Gate:
    """A one-shot gate from lowlevel names only: ``wait()`` parks until ``open(value)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiters: list[ll.Waker] = []
        self.opened = False
        self.value: object = None

    async def wait(self) -> object:
        me = ll.current_task()
        assert me is not None
        with self.lock:
            if self.opened:
                return self.value
            self.waiters.append(me)

        def abort() -> bool:  # the engine, on me's context, when me is interrupted
            with self.lock:
                if me in self.waiters:
                    self.waiters.remove(me)
                    return True
                return False  # already popped: the wake is on its way

        return await ll.park(ll.Park(abort, self))

    def open(self, value: object) -> None:
        with self.lock:
            self.opened, self.value = True, value
            waiters, self.waiters = self.waiters, []
        for w in waiters:
            w.wake(value)  # the Waker protocol; for a Task, the same as ll.reschedule(w, value)


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_a_primitive_from_lowlevel_names_parks_and_wakes_across_contexts(contexts):
    async def main():
        gate = Gate()
        waiters = [tc.spawn(gate.wait()) for _ in range(16)]
        await wait_blocked(*waiters)
        assert len(gate.waiters) == 16
        gate.open(42)
        return [await t for t in waiters]

    assert tc.run(main(), contexts=contexts) == [42] * 16


def test_reschedule_and_interrupt_are_the_task_methods_themselves():
    # Aliases, not wrappers: waking through the lowlevel name costs no extra call.
    assert ll.reschedule is ll.Task.wake and ll.interrupt is ll.Task.interrupt

    async def main():
        gate = Gate()
        t = tc.spawn(gate.wait())
        await wait_blocked(t)
        with gate.lock:
            gate.waiters.remove(t)  # popped by hand, as a primitive would
        ll.reschedule(t, "by hand")
        return await t

    assert tc.run(main(), contexts=2) == "by hand"


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_interrupt_raises_at_the_pending_await_and_aborts_the_park(contexts):
    async def main():
        gate = Gate()
        t = tc.spawn(gate.wait())
        await wait_blocked(t)
        assert ll.interrupt(t, Boom("stop")) is True
        with pytest.raises(Boom, match="stop"):
            await t
        assert gate.waiters == []  # abort() took it off the list
        assert ll.interrupt(t, Boom()) is False  # finished: nothing to interrupt

    tc.run(main(), contexts=contexts)


def test_withdraw_and_checkpoint_if_cancelled():
    async def main():
        me = ll.current_task()
        first = Boom("first")
        assert me.interrupt(first) and me.withdraw(first)
        assert not me.withdraw(first)  # gone already
        await ll.checkpoint_if_cancelled()  # nothing pending: returns
        me.interrupt(Boom("second"))
        with pytest.raises(Boom, match="second"):
            await ll.checkpoint_if_cancelled()

    tc.run(main(), contexts=1)


def test_consume_budget_is_the_gate_of_an_operation_that_completes_at_once(contexts):
    """A primitive's wait that returns at once (an open gate) awaits ``ll.consume_budget()``
    first: a loop of it lets another task of its context run every INLINE_BUDGET waits, and
    ``tc.timeout(0)`` expires at it."""
    from tinycoro.core.engine import INLINE_BUDGET

    async def open_wait() -> None:
        await ll.consume_budget()  # the gate of a wait on an open gate: done at once

    async def main():
        done = [0]
        stop = [False]

        async def looper():
            while not stop[0] and done[0] < 100_000:
                await open_wait()
                done[0] += 1

        t = tc.spawn(looper())
        seen = []
        while t.context != tc.current_context():  # (round robin: look for one here)
            t.cancel()
            t = tc.spawn(looper())
        for _ in range(20):
            seen.append(done[0])
            await tc.yield_now()
        stop[0] = True
        await t
        with pytest.raises(TimeoutError):
            async with tc.timeout(0):
                await open_wait()
        return [b - a for a, b in zip(seen, seen[1:])]

    gaps = tc.run(main(), contexts=contexts)
    assert 0 < max(gaps) <= INLINE_BUDGET, gaps


def test_done_callbacks():
    seen = []

    async def main():
        gate = Gate()
        t = tc.spawn(gate.wait())

        def kept(task):
            seen.append(("kept", task))

        def dropped(task):
            seen.append(("dropped", task))

        t.add_done_callback(kept)
        t.add_done_callback(dropped)
        assert t.remove_done_callback(dropped) is True
        assert t.remove_done_callback(dropped) is False
        await wait_blocked(t)
        gate.open("v")
        assert await t == "v"
        t.add_done_callback(lambda task: seen.append(("late", task)))  # done: called at once
        return t

    t = tc.run(main(), contexts=2)
    assert seen == [("kept", t), ("late", t)]


def test_current_engine_task_and_thread_state():
    assert ll.current_engine() is None and ll.current_task() is None
    assert ll.thread_state.engine is None and ll.thread_state.task is None

    async def main():
        engine, me = ll.current_engine(), ll.current_task()
        assert isinstance(engine, ll.Engine) and engine.id == tc.current_context()
        assert isinstance(me, ll.Task) and isinstance(me, ll.Waker)
        assert ll.thread_state.engine is engine and ll.thread_state.task is me
        return True

    assert tc.run(main(), contexts=2)


def test_an_asyncio_stand_in_is_a_waker_too():
    from tinycoro.aio.host import AioWaiter

    async def main():
        return AioWaiter(asyncio.current_task(), asyncio.get_running_loop())

    assert isinstance(asyncio.run(main()), ll.Waker)
    assert not isinstance(object(), ll.Waker)


def test_outside_engine_hides_the_engine_for_the_block():
    async def main():
        me = ll.current_task()
        with ll.outside_engine():
            assert ll.current_engine() is None and ll.current_task() is None
            # No engine here: the trap goes to the path for asyncio code, which a context
            # thread refuses (the guard that names tc.aio), instead of to this engine.
            with pytest.raises(TypeError, match="tc.aio"):
                await tc.yield_now()
        assert ll.current_task() is me and ll.current_engine() is not None
        await tc.yield_now()  # back on the engine

    tc.run(main(), contexts=1)


def test_traps_op_perform_and_yield():
    class Yield:
        def __await__(self):
            return (yield ll.YIELD)

    async def main():
        assert await ll.perform_raw(ll.Op(uring.prep_nop)) == 0
        tick = ll.Op(uring.prep_timeout, uring.timespec(0.001), 0, 0)
        assert await ll.perform_raw(tick) == -errno.ETIME
        with pytest.raises(OSError) as e:
            await ll.Op(uring.prep_timeout, uring.timespec(0.001), 0, 0)
        assert e.value.errno == errno.ETIME
        assert await Yield() is None

    tc.run(main(), contexts=1)


def test_guest_engine_run_and_abandon():
    engine = ll.guest_engine(None, 16)
    try:

        async def short():
            await tc.sleep(0.001)
            return "done"

        t = ll.Task(short(), engine, name="short")
        ll.start_guest(engine, t)
        ll.run_guest(engine, t)
        assert t.result() == "done"

        gate, cleaned = Gate(), []

        async def parked():
            try:
                await gate.wait()
            finally:
                cleaned.append("parked")

        async def sleeper():
            try:
                await tc.sleep(3600)
            finally:
                cleaned.append("sleeper")

        a, b, c = ll.Task(parked(), engine), ll.Task(sleeper(), engine), ll.Task(short(), engine)
        for x in (a, b, c):
            ll.start_guest(engine, x)
        ll.run_guest(engine, c)
        assert not a.done() and not b.done()  # they wait for the next run, or for abandon
        err = RuntimeError("the runner gave up")
        ll.abandon(engine, err)
        assert a.exception() is err and b.exception() is err
        assert sorted(cleaned) == ["parked", "sleeper"] and gate.waiters == []
        assert not engine.inflight and not engine.parked
        d = ll.Task(short(), engine)  # and it runs again
        ll.start_guest(engine, d)
        ll.run_guest(engine, d)
        assert d.result() == "done"
    finally:
        engine.close()


def test_a_guest_run_runs_what_was_queued_behind_its_tasks_last_step():
    # The run returns as the task ends; a call another thread queued meanwhile (here: the
    # last step itself, the same position in the queue) runs before it returns, not at the
    # next run, which for a notebook's last cell may never come.
    engine = ll.guest_engine(None, 16)
    ran = []
    try:

        async def last_step():
            engine.call_soon(ran.append, "queued")

        t = ll.Task(last_step(), engine)
        ll.start_guest(engine, t)
        ll.run_guest(engine, t)
        assert ran == ["queued"]
    finally:
        engine.close()


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_before_blocking_starts_what_the_guest_step_spawned(contexts):
    # A guest's step that blocks its thread on something a task it spawned will do: the
    # spawn waits for the end of the step's turn (rule 18) unless the step says it blocks.
    started = threading.Event()

    async def spawned():
        started.set()

    with tc.Scheduler(contexts) as s:
        engine = ll.guest_engine(s, 8)
        try:

            async def step():
                ll.before_blocking()  # nothing deferred yet: nothing to do
                t = tc.spawn(spawned())
                ll.before_blocking()
                return started.wait(20), t

            t = ll.Task(step(), engine)
            ll.start_guest(engine, t)
            ll.run_guest(engine, t)
            ran, spawned_task = t.result()
            assert ran, "the spawned task did not start while its step blocked"
            assert spawned_task.context in range(contexts)
        finally:
            engine.close()
    ll.before_blocking()  # outside any step: nothing to do


def test_run_guest_refuses_a_thread_that_runs_an_engine():
    engine = ll.guest_engine(None, 8)
    try:

        async def nothing():
            pass

        async def main():
            t = ll.Task(nothing(), engine)
            ll.start_guest(engine, t)
            with pytest.raises(RuntimeError, match="already runs on this thread"):
                ll.run_guest(engine, t)
            ll.abandon(engine)
            assert t.cancelled()

        tc.run(main(), contexts=1)
    finally:
        engine.close()


def _frame_of_module(name: str):
    namespace = {"__name__": name}
    exec("import sys\ndef here():\n    return sys._getframe()\n", namespace)
    return namespace["here"]()


def test_ki_protection_hooks_decide_by_module():
    user = _frame_of_module("tc_lowlevel_user_code.mod")
    assert ll.user_frames_to(user, user) is True  # user code out to the task's frame: raise
    assert ll.user_frames_to(user, None) is False  # no frame of the task: runtime code
    runtime = _frame_of_module("tinycoro.somewhere")
    assert ll.user_frames_to(runtime, runtime) is False
    lib = _frame_of_module("tc_lowlevel_protected_pkg.runner")
    assert ll.user_frames_to(lib, lib) is True
    ll.protect_package("tc_lowlevel_protected_pkg")  # a runner outside tinycoro marks its frames
    assert ll.user_frames_to(lib, lib) is False


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
def test_defer_sigint_records_and_raises_at_the_end():
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("someone else's SIGINT handler is installed")
    woke = []
    with pytest.raises(KeyboardInterrupt):
        with ll.defer_sigint() as deferred:
            assert isinstance(deferred, ll.SigintDeferred) and deferred.installed
            deferred.set_waker(lambda: woke.append(True))
            os.kill(os.getpid(), signal.SIGINT)
            wait_until(lambda: deferred.pending == 1, what="the handler to record the SIGINT")
            assert woke == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    inert = []

    def elsewhere():
        with ll.defer_sigint() as d:
            inert.append(d.installed)

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join(10)
    assert inert == [False]  # only the main thread handles signals


@pytest.mark.skipif(sys.platform != "linux", reason="io_uring")
def test_signal_wakeup_restores_the_previous_wakeup_fd():
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    w = ll.SignalWakeup()
    try:
        assert w.previous == before
        now = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(now)
        assert now != before  # ours, while it lives
    finally:
        w.close()
    after = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(after)
    assert after == before


def test_everything_exported_is_tested_here():
    source = Path(__file__).read_text()
    missing = [n for n in ll.__all__ if f"ll.{n}" not in source]
    assert missing == [], f"lowlevel names without a test here: {missing}"
