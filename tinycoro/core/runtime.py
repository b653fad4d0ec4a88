"""The task-facing runtime functions: run, spawn, sleep, yield_now, current_context."""

from __future__ import annotations

import contextvars
import time
import types
from typing import Any, Callable, Coroutine

from . import ki
from .checks import check_seconds
from .errors import Cancelled, DeadlockError
from .local import _local
from .scheduler import Scheduler, _check_coro
from .task import Task
from .deadlines import Sleep
from .traps import park, yield_now

_perf = time.perf_counter

__all__ = [
    "run",
    "spawn",
    "sleep",
    "yield_now",
    "current_context",
    "current_task",
    "set_default_scheduler",
    "get_default_scheduler",
]

_CoroutineType = types.CoroutineType
_default: Scheduler | None = None


def run(
    coro: Coroutine[Any, Any, Any],
    *,
    contexts: int | None = None,
    dispatch: str = "round_robin",
    deadlock_timeout: float | None = None,
) -> Any:
    """Run *coro* on a new Scheduler until all work is done; return its result.

    Every task it spawns is waited for too (the stop protocol ends the run exactly when the
    last context runs out of work), and every thread, ring and eventfd is gone on return.
    *contexts* None means :func:`tinycoro.core.checks.default_contexts` (``TINYCORO_CONTEXTS``
    if set; else one per CPU with the GIL off, one under it: docs/design.md rule 15).
    """
    coro = _check_coro(coro, "run")
    if _local.engine is not None:
        coro.close()
        name = getattr(coro, "__name__", None) or "the coroutine"
        # A notebook user does not know that a cell is a task: say what to write instead.
        raise RuntimeError(
            f"tc.run() cannot be called from inside a tinycoro task (a notebook cell with the "
            f"tinycoro extension runs as one): await {name}() instead"
        )
    # Ctrl-C from here on is recorded and acted on by loop() (or raised on the way out): never
    # raised in the middle of building the scheduler or submitting the task.
    with ki.defer_sigint():
        try:
            sched = Scheduler(contexts, dispatch=dispatch)
        except BaseException:
            coro.close()
            raise
        task = sched.submit_watched(coro, _observed)  # its outcome is returned or raised here
        try:
            sched.loop(deadlock_timeout=deadlock_timeout)
        except DeadlockError as deadlock:
            # Tasks left parked because *coro* failed: its failure is the cause worth seeing.
            if task.done() and task.exception() is not None:
                raise deadlock from task.exception()
            raise
        except BaseException as stopped:  # Ctrl-C, or a crashed context
            _report_with(stopped, task)
            raise
        return task.result()


def _report_with(stopped: BaseException, task: Task) -> None:
    """The run ends with *stopped*: the main *task*'s own failure, if it has one (a spawn the
    interrupt's shutdown refused, say), is reported with it as its context, not left for the
    garbage collector to log as "never retrieved" wherever it happens to run."""
    if stopped.__suppress_context__:
        # ``raise ... from cause`` (a crashed context): a traceback shows the cause and hides
        # the context, so the failure goes on the cause, where it is shown.
        stopped = stopped.__cause__ if stopped.__cause__ is not None else stopped
    if not task.done() or stopped.__context__ is not None or stopped.__suppress_context__:
        return  # (a context already there is kept; the failure is then the collector's to log)
    failure = task.exception()  # retrieved here: it goes out with *stopped*
    if failure is not None and not isinstance(failure, Cancelled) and not _chained(failure, stopped):
        stopped.__context__ = failure


def _chained(exc: BaseException, target: BaseException) -> bool:
    """Whether *target* is *exc* or in its chain of causes and contexts (a task that the crash
    finished carries the crash already: linking it back would make a cycle)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if link is target:
            return True
        seen.add(id(link))
        link = link.__cause__ if link.__cause__ is not None else link.__context__
    return False


def _observed(task: Task) -> None:
    """A done callback that only marks a task's outcome as taken care of."""


def spawn(
    coro: Coroutine[Any, Any, Any],
    *,
    name: str | None = None,
    context: contextvars.Context | None = None,
) -> Task:
    """Start *coro* as a new task on the current scheduler (or the default one, in notebooks).

    It runs in *context*, or in a copy of the caller's ``contextvars`` context (rule 9).
    """
    return spawn_watched(coro, None, name=name, context=context)


def spawn_watched(
    coro: Coroutine[Any, Any, Any],
    on_done: Callable[[Task], None] | None,
    *,
    name: str | None = None,
    context: contextvars.Context | None = None,
) -> Task:
    """:func:`spawn` with a done callback registered before the task can run (see
    :meth:`Scheduler.submit_watched`)."""
    if type(coro) is not _CoroutineType:  # exact-type test first: ~5x cheaper than inspect
        coro = _check_coro(coro, "spawn")
    engine = _local.engine
    sched = engine.scheduler if engine is not None else _default
    if sched is None:
        coro.close()
        raise RuntimeError(
            "tc.spawn() needs a running scheduler, and no default scheduler is running: call it "
            "from a tinycoro task, or use "
            "Scheduler.submit() / tc.run() (in a notebook: %load_ext tinycoro, or "
            "%tinycoro restart after %tinycoro stop)"
        )
    return sched.submit_watched(coro, on_done, name=name, context=context)


async def sleep(seconds: float) -> None:
    """Suspend for *seconds*; other tasks on the context keep running.

    The deadline is the time of the call plus *seconds* on the monotonic clock
    (``time.perf_counter``); the task resumes at the end of the first turn that finds it
    passed, never before it, and sleepers due in one turn resume in deadline order. Deadlines
    are kept in the engine's heap (:mod:`tinycoro.core.deadlines`), not as kernel timeouts.
    ``sleep(0)`` (or less) is a plain :func:`yield_now`. Any length is accepted:
    ``sleep(math.inf)`` sleeps until cancelled. In an asyncio task (tinycoro.aio), the
    loop's own timers keep the same deadline.
    """
    seconds = check_seconds("seconds", seconds)
    if seconds <= 0:
        await yield_now()
        return
    when = _perf() + seconds
    engine = _local.engine
    task = _local.task
    if engine is None or task is None:  # an asyncio task, or nothing that can sleep (the
        await Sleep(seconds, when)  # driver says which)
        return
    engine.timers += 1  # so that rates of I/O leave sleeps out (SchedulerStats)
    await park(engine.deadlines.sleep(task, seconds, when))


def current_context() -> int | None:
    """Id of the context running the calling task; None outside any context."""
    engine = _local.engine
    return engine.id if engine is not None else None


def current_task() -> Task | None:
    """The task being run on this thread right now, if any."""
    return _local.task


def set_default_scheduler(scheduler: Scheduler | None) -> None:
    """Where ``tc.spawn`` sends work when called outside any task (set by the notebook ext)."""
    global _default
    if scheduler is not None and not isinstance(scheduler, Scheduler):
        raise TypeError(f"expected a Scheduler or None, got {scheduler!r}")
    _default = scheduler


def get_default_scheduler() -> Scheduler | None:
    return _default
