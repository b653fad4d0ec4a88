"""What other threads read of an engine for statistics: ``Scheduler.stats()`` and ``tasks()``.

Plain reads of an engine's counters and tables from any thread, without locks: a snapshot
may be a step behind, never an inconsistent object (the engine replaces what it updates as a
whole, such as its two busy samples). Nothing here runs on the engine's own path, so none of
it is compiled or costs the engine anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .stats import TaskInfo
from .traps import Op, Park
from .waits import SLEEP, park_words

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine

__all__ = ["BUSY_WINDOW", "task_infos", "sleeps", "busy"]

BUSY_WINDOW = 0.1  # seconds: the shortest interval the busy fraction is measured over


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
                    # several awaits (a stream's multishot recv, tinycoro.net): I/O
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
    """Fraction of the time since a sample at least BUSY_WINDOW old that *engine* spent
    awake, in [0, 1]; any thread, no side effect."""
    older, newer = engine._samples
    base = newer if now - newer[0] >= BUSY_WINDOW else older
    dt = now - base[0]
    if dt <= 0:
        return 0.0
    since = engine.sleep_since
    asleep = engine.sleep_total + (now - since if since else 0.0) - base[1]
    return min(1.0, max(0.0, 1.0 - asleep / dt))
