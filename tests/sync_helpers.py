"""Helpers for the sync/channel/combinator tests (conftest.py belongs to the core tests)."""

from __future__ import annotations

from typing import Any, Callable

import tinycoro as tc
from tinycoro.core.local import _local
from tinycoro.testing import is_blocked, wait_blocked

__all__ = ["run", "spawn_here", "until", "wait_blocked", "is_blocked", "Cancelled"]

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


async def _noop() -> None:
    return None


def spawn_here(coro: Any) -> tc.Task:
    """Spawn *coro* on the calling task's own context (round-robin dispatch only): spawn
    no-op probes until the next round-robin slot is ours. Makes cross-context races that a
    test wants to pin down deterministic (both sides then run on one thread)."""
    engine = _local.engine
    n = engine.scheduler.contexts
    me = engine.id
    for _ in range(2 * n + 1):
        probe = tc.spawn(_noop())
        if (probe.context + 1) % n == me:
            task = tc.spawn(coro)
            assert task.context == me
            return task
    raise AssertionError("round-robin dispatch expected")
