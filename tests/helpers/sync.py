"""Helpers for the sync/channel/combinator tests: run on N contexts, wait for a state, settle."""

from __future__ import annotations

import time
from typing import Any, Callable

import tinycoro as tc
from tinycoro.core.local import thread_state as _local
from tinycoro.testing import is_blocked, wait_blocked

__all__ = ["run", "exclusive_turn", "spawn_here", "spawn_elsewhere", "until", "wait_blocked", "is_blocked", "settle", "Cancelled"]

Cancelled = tc.Cancelled
DEADLOCK = 20.0  # a test that deadlocks fails with DeadlockError instead of hanging


def run(coro: Any, contexts: int, deadlock_timeout: float = DEADLOCK) -> Any:
    return tc.run(coro, contexts=contexts, deadlock_timeout=deadlock_timeout)


async def until(predicate: Callable[[], bool], limit: int = 5_000_000) -> None:
    """Yield until *predicate()* holds (a state with no event of its own, e.g. N waiters
    queued on a primitive); fails instead of hanging."""
    for _ in range(limit):
        if predicate():
            return
        await tc.yield_now()
    raise AssertionError("condition never became true")


async def yield_n(turns: int) -> None:
    """Yield *turns* times: a seeded stress test's way to vary where tasks interleave."""
    for _ in range(turns):
        await tc.yield_now()


def exclusive_turn(state: dict[str, int]) -> None:
    """One turn inside a critical section that checks itself: ``state["overlaps"]`` counts the
    turns that found another inside, ``state["count"]`` every turn (both start at 0, as does
    ``state["inside"]``, which is 0 again after a turn)."""
    state["inside"] += 1
    state["overlaps"] += state["inside"] != 1
    state["count"] += 1
    state["inside"] -= 1


async def _noop() -> None:
    return None


def spawn_here(coro: Any) -> tc.Task:
    """Spawn *coro* on the calling task's own context (round-robin dispatch only). Makes
    cross-context races that a test wants to pin down deterministic (both sides then run on
    one thread)."""
    return _spawn_placed(coro, here=True)


def spawn_elsewhere(coro: Any) -> tc.Task:
    """Spawn *coro* on a context other than the calling task's (round-robin dispatch only, two
    contexts or more): the two sides of a race then run on two threads."""
    return _spawn_placed(coro, here=False)


def _spawn_placed(coro: Any, here: bool) -> tc.Task:
    # Spawn no-op probes until the next round-robin slot is (or is not) the caller's context.
    engine = _local.engine
    n = engine.scheduler.contexts
    me = engine.id
    for _ in range(2 * n + 1):
        probe = tc.spawn(_noop())
        if ((probe.context + 1) % n == me) == here:
            task = tc.spawn(coro)
            assert (task.context == me) == here
            return task
    raise AssertionError("round-robin dispatch expected")


def _quiet_marker(sched: tc.Scheduler) -> tuple[int, ...] | None:
    """A progress marker while every context of *sched* sleeps with nothing to do, else None.

    Reads the engines' own state (the same reads as the scheduler's deadlock watchdog): a
    context that is awake, or has a ready task, a pending call (a cancel on its way) or I/O,
    is not quiet. Wake-ups and steps are counted, so two equal markers in a row mean no
    context ran anything in between.
    """
    engines = sched._engines  # no public seam for this yet (see the health report)
    for e in engines:
        if not e.sleeping or e.ready or e.calls or e.inflight or e.unsubmitted:
            return None
    return tuple(e.wakeups for e in engines) + tuple(e.steps for e in engines)


def settle(sched: tc.Scheduler, timeout: float = 30.0) -> None:
    """Block the calling thread (not a context) until *sched* is quiescent: every wake-up,
    hand-over and cancel already requested has been carried out, and every task is parked or
    done. Why two equal markers suffice: work only moves by a push or a call onto a context,
    both appended *before* the eventfd write, so an in-flight hand-over shows up as a ready
    task or a pending call, and one already carried out changes a context's step count.
    Fails loudly instead of hanging."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        late = time.monotonic() > deadline  # read before the state: as helpers.runtime.wait_until
        marker = _quiet_marker(sched)
        if marker is not None and marker == last:
            return
        last = marker
        if late:
            raise AssertionError(f"the scheduler never went quiet: {sched.stats()!r}")
        time.sleep(0.0002)
