"""What other threads read of an engine for statistics: ``Scheduler.stats()`` and ``tasks()``.

Plain reads of an engine's counters and tables from any thread, without the engine's locks: a
snapshot may be a step behind, never an inconsistent object (the engine replaces what it
updates as a whole, such as its busy samples; that replacement, and only it, is taken under a
short lock the engine holds once per ``BUSY_STEP``: docs/design.md, "Synchronisation"). Nothing here runs on the engine's own path, so none of
it is compiled or costs the engine anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .stats import TaskInfo
from .timeshare import awake_share
from .traps import Op, Park
from .waits import SLEEP, park_words

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine

__all__ = ["task_infos", "sleeps", "busy"]


def task_infos(engine: "Engine", now: float) -> list[TaskInfo]:
    """What each live task is doing, read from another thread without locks: a snapshot
    that may be a step behind, never an inconsistent object. The words are built here,
    by the caller (core/waits.py), so describing waits costs the engine nothing."""
    ready = {id(t) for t in list(engine.ready)}
    out = []
    for t in list(engine.live):
        waiting = t._waiting
        try:
            if isinstance(waiting, Op):
                sleep = getattr(waiting.prep, "__name__", "") == SLEEP
                state, what = ("sleeping" if sleep else "io"), waiting.describe()
            elif type(waiting) is Park:
                if isinstance(waiting.what, Op):  # the next CQE of an op in flight for
                    # several awaits (one that completes many times, RingOwner.arm): I/O
                    state, what = "io", waiting.what.describe()
                else:
                    state, what = "parked", park_words(waiting.what)
            else:
                state, what = ("ready" if id(t) in ready else "running"), ""
        except Exception as e:  # noqa: BLE001 - a snapshot never fails for a description
            state, what = "parked" if type(waiting) is Park else "io", type(e).__name__
        out.append(TaskInfo(t.id, t.name, engine.id, state, what, max(0.0, now - t._born)))
    return out


def sleeps(engine: "Engine") -> int:
    """Tasks in a ``tc.sleep`` now (timers in flight): counted when asked, any thread."""
    return sum(
        1 for op in list(engine.inflight.values())
        if getattr(op.prep, "__name__", "") == SLEEP
    )


def busy(engine: "Engine", now: float) -> float:
    """Share of the last second (up to *now*, a perf_counter() reading) that *engine* spent
    awake, running tasks, in [0, 1]; any thread, no side effect
    (:mod:`tinycoro.core.timeshare`)."""
    with engine._samples_lock:  # the tuple is replaced under it (Engine.__init__ says why)
        samples = engine._samples
    return awake_share(samples, engine.sleep_total, engine.sleep_since, now)
