"""Acquisitions that complete at once spend the engine's cooperative budget (rule 16).

An uncontended ``Mutex`` lock, a ``Semaphore`` acquire that finds a permit and an ``Event``
wait that finds the event set all return without suspending. Each spends one unit of the
budget (``Engine.inline_ok``, ``INLINE_BUDGET`` per step), as a send the socket takes at once
does, and at zero the acquisition yields to the engine once first. So a task that takes and
releases a free lock in a loop still lets the other tasks of its context run every
``INLINE_BUDGET`` acquisitions, and a cancel waiting for its next await lands at that yield,
before the lock is taken.

Each test counts acquisitions between two steps of a second task on the same context (no
sleeps, no clocks); a bound on the loop keeps a broken runtime from hanging the test.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

import tinycoro as tc
from tinycoro.core.engine import INLINE_BUDGET

from helpers.budget import gaps, loop_beside_counter
from helpers.sync import run, spawn_elsewhere, spawn_here

pytestmark = pytest.mark.timeout(60)

LIMIT = 100_000  # acquisitions: bounds a looper that never lets the counter run


async def _mutex_lock(m: tc.Mutex) -> None:
    await m.lock()
    m.unlock()


async def _mutex_with(m: tc.Mutex) -> None:
    async with m:
        pass


async def _semaphore_acquire(s: tc.Semaphore) -> None:
    await s.acquire()
    s.release()


async def _semaphore_with(s: tc.Semaphore) -> None:
    async with s:
        pass


async def _event_wait(e: tc.Event) -> None:
    await e.wait()


def _set_event() -> tc.Event:
    e = tc.Event()
    e.set("v")
    return e


# name -> (make the primitive, one acquisition that completes at once)
KINDS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {
    "mutex-lock": (tc.Mutex, _mutex_lock),
    "mutex-async-with": (tc.Mutex, _mutex_with),
    "semaphore-acquire": (lambda: tc.Semaphore(2), _semaphore_acquire),
    "semaphore-async-with": (lambda: tc.Semaphore(2), _semaphore_with),
    "event-set-wait": (_set_event, _event_wait),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_task_looping_on_a_free_primitive_cannot_starve_its_context(contexts, kind):
    """One task acquires and releases a free primitive in a loop; another on the same
    context counts its own steps. The counter finishes, and between two of its steps the
    looper completes at most INLINE_BUDGET acquisitions (then it yields)."""
    make, once = KINDS[kind]

    async def main():
        prim = make()
        return await loop_beside_counter(lambda: once(prim), LIMIT)

    done, seen = run(main(), contexts)
    assert done < LIMIT, "the counter never ran while the looper acquired"
    assert max(gaps(seen)) <= INLINE_BUDGET, gaps(seen)


@pytest.mark.parametrize("where", ["same-context", "other-context"])
@pytest.mark.parametrize("kind", ["mutex-lock", "mutex-async-with", "semaphore-acquire"])
def test_a_cancel_reaches_a_task_looping_on_a_free_lock_and_leaves_it_free(contexts, kind, where):
    """The acquisitions do not suspend, but the budget's yield does: a cancel requested by
    another task (on the looper's context, or from another context's thread) lands there,
    before the lock is taken, so the lock is left free and the next acquisition gets it."""
    if where == "other-context" and contexts == 1:
        pytest.skip("needs a second context")
    make, once = KINDS[kind]
    # A looper that never yields ends uncancelled after this many: on its own context main
    # runs only when it yields; from another context the cancel is one GIL switch away.
    limit = 1_000 if where == "same-context" else 2_000_000

    async def main():
        prim = make()
        started = tc.Event()
        done = [0]

        async def looper():
            while done[0] < limit:
                await once(prim)
                done[0] += 1
                if done[0] == 100:
                    started.set()

        if where == "same-context":
            t = spawn_here(looper())
        else:
            t = spawn_elsewhere(looper())
        await started.wait()
        t.cancel()
        with pytest.raises(tc.Cancelled):
            await t
        await once(prim)  # free again: this completes at once
        return prim

    prim = run(main(), contexts)
    if isinstance(prim, tc.Mutex):
        assert prim.statistics() == tc.sync.MutexStatistics(locked=False, owner=None, waiters=0)
    else:
        assert prim.value == 2


def test_a_cancel_due_lands_at_the_acquisition_before_the_lock_is_taken(contexts):
    """A cancel requested while the task runs (here: by itself, as another context's cancel
    would be) is delivered at its next acquisition, even an uncontended one, and that
    acquisition does not take the lock."""

    async def main():
        m = tc.Mutex()
        me = tc.current_task()
        me.cancel()
        with pytest.raises(tc.Cancelled):
            await m.lock()
        return m.locked()

    assert run(main(), contexts) is False


def test_lock_does_its_work_when_awaited_and_is_a_coroutine(contexts):
    """``m.lock()`` takes nothing until awaited (as a coroutine would); spawned as a task of
    its own it locks for that task; cancelled before it ever ran, it takes nothing."""

    async def main():
        m = tc.Mutex()
        pending = m.lock()
        assert not m.locked()  # made, not awaited
        await pending
        assert m.statistics().owner is tc.current_task()
        m.unlock()

        t = tc.spawn(m.lock())  # the spawned task itself takes it
        await t
        assert m.statistics().owner is t

        other = tc.Mutex()
        t = spawn_here(other.lock())  # on our context: it cannot start before we yield
        t.cancel()  # before its first step
        with pytest.raises(tc.Cancelled):
            await t
        return other.locked()

    assert run(main(), contexts) is False
