"""What other threads read of an engine for statistics: ``Scheduler.stats()`` and ``tasks()``.

Plain reads of an engine's counters and tables from any thread, without locks: a snapshot
may be a step behind, never an inconsistent object (the engine replaces what it updates as a
whole, such as its busy samples). Nothing here runs on the engine's own path, so none of
it is compiled or costs the engine anything.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .stats import ContextStats, TaskInfo
from .timeshare import awake_share
from .traps import Op, Park
from .waits import SLEEP, park_words

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine

__all__ = ["task_infos", "sleeps", "busy", "thread_times", "guest_stats"]


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
    return awake_share(engine._samples, engine.sleep_total, engine.sleep_since, now)


def thread_times(native_id: int | None) -> tuple[float, float]:
    """Seconds the thread *native_id* (of this process) has run on a CPU and has waited,
    runnable, for one: the kernel's schedstat, any thread. A per-thread CPU clock
    (``pthread_getcpuclockid``) gives the first only, and needs the thread alive: this is one
    read, and a thread gone (or no schedstat) reads (0, 0)."""
    if native_id is None:
        return 0.0, 0.0
    try:  # os.open/os.read, no file object: about 12 us a context (open() took 20)
        fd = os.open(f"/proc/self/task/{native_id}/schedstat", os.O_RDONLY)
        try:
            ran, waited = os.read(fd, 128).split()[:2]
        finally:
            os.close(fd)
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def guest_stats(engine: "Engine") -> ContextStats:
    """What a guest engine (a notebook's cells' own context) holds and has done, in a
    context's words; its busy share is left at 0 (its thread is lent, not its own)."""
    return ContextStats(
        id=-1, queued=len(engine.ready), io_pending=engine.unsubmitted,
        io_inflight=len(engine.inflight), parked=len(engine.parked),
        tasks_run=engine.tasks_run, busy=0.0, stop_flag=0, sleeping=engine.sleeping,
        ops=engine.ops, sleeps=sleeps(engine), timers=engine.timers,
    )
