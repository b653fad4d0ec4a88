"""The low-level seam: what primitives, event-loop bridges and runners are built on.

Not for everyday use (that is ``import tinycoro as tc``), but stable and documented
(docs/lowlevel.md), in the way ``trio.lowlevel`` is for trio. Everything here is a name of the
core re-exported unchanged, or a small function over one, so code outside ``tinycoro.core``
(``tinycoro.sync``, ``tinycoro.aio``, the notebook layer ``tinycoro.kernel_ext``, your own
integration) never reaches for an underscore name of the core.

* Waking and interrupting: a parked waiter is a :class:`Waker` (a :class:`Task`, or another
  event loop's stand-in); :func:`reschedule` / ``waker.wake(value)`` resumes it,
  :func:`interrupt` raises an exception at a task's pending await, ``Task.withdraw`` takes one
  back, ``Task.add_done_callback`` observes the end.
* Suspending: :func:`park` with a :class:`Park` ticket, ``await op`` / :func:`perform_raw`
  with an io_uring :class:`Op`, :func:`checkpoint_if_cancelled`, :func:`consume_budget` (the
  gate of an operation that completes without suspending, rule 16), and the traps themselves for
  code that drives a task's coroutine by hand (an ``Op``, a ``Park`` or :data:`YIELD`).
* Where am I: :func:`current_task`, :func:`current_engine`, :data:`thread_state` (the
  per-thread record itself, for hot paths), :func:`outside_engine`.
* Guest engines (a thread that runs an engine for a while, such as a notebook cell on the
  kernel's main thread): :func:`guest_engine`, :func:`start_guest`, :func:`run_guest`,
  :func:`abandon`, and :func:`before_blocking` for a step that blocks its thread.
* KeyboardInterrupt protection (rule 12): :func:`protect_package`,
  :func:`user_frames_to`, :func:`defer_sigint`, :class:`SigintDeferred`, :class:`SignalWakeup`.
"""

from __future__ import annotations

from typing import Any

from .core.engine import Engine as Engine
from .core.ki import SigintDeferred as SigintDeferred
from .core.ki import SignalWakeup as SignalWakeup
from .core.ki import defer_sigint as defer_sigint
from .core.ki import protect_package as protect_package
from .core.ki import user_frames_to as user_frames_to
from .core.local import thread_state as thread_state
from .core.runtime import current_task as current_task
from .core.scheduler import Scheduler
from .core.scheduler import before_blocking as before_blocking
from .core.task import Task as Task
from .core.task import Waker as Waker
from .core.traps import YIELD as YIELD
from .core.traps import Op as Op
from .core.traps import Park as Park
from .core.traps import checkpoint_if_cancelled as checkpoint_if_cancelled
from .core.traps import consume_budget as consume_budget
from .core.traps import park as park
from .core.traps import perform_raw as perform_raw

__all__ = [
    "Engine",
    "Op",
    "Park",
    "SigintDeferred",
    "SignalWakeup",
    "Task",
    "Waker",
    "YIELD",
    "abandon",
    "before_blocking",
    "checkpoint_if_cancelled",
    "consume_budget",
    "current_engine",
    "current_task",
    "defer_sigint",
    "guest_engine",
    "interrupt",
    "outside_engine",
    "park",
    "perform_raw",
    "protect_package",
    "reschedule",
    "run_guest",
    "start_guest",
    "thread_state",
    "user_frames_to",
]

# Module-level aliases of the methods, not wrappers: a primitive that wakes through this name
# pays no extra Python call per wake (the waker's own method is the same function object).
reschedule = Task.wake
"""``reschedule(task, value=None)``: resume a parked *task* with *value* (what its
:func:`park` returns), on the task's own context; any thread, once per park. The function
behind ``Task.wake``; a waiter list that may hold other :class:`Waker` objects calls
``waker.wake(value)`` instead."""

interrupt = Task.interrupt
"""``interrupt(task, exc) -> bool``: raise *exc* at *task*'s pending await (its pending
io_uring operation is cancelled in the kernel first, or it is taken off its waiter list); any
thread. False if the task has finished. ``task.cancel()`` is ``interrupt(task, tc.Cancelled())``;
``task.withdraw(exc)`` takes a still-pending one back (owner thread)."""


def current_engine() -> Engine | None:
    """The engine the calling thread drives right now (a context's, or a guest engine), or
    None outside tinycoro (or inside :func:`outside_engine`)."""
    return thread_state.engine


class outside_engine:
    """``with outside_engine(): ...`` runs the block as if no tinycoro engine ran on this thread.

    For code that drives another event loop from inside a task (the notebook's cell loop turns
    asyncio): tinycoro awaitables awaited by that loop's tasks then take the path for a thread
    without an engine (``tc.aio``'s hosted ring) instead of yielding to the engine that is
    busy running the block. The engine and task of the thread are put back on exit. Nothing in
    the block may await on the engine itself.
    """

    __slots__ = ("_saved",)

    def __init__(self) -> None:
        self._saved: tuple[Any, Any] = (None, None)

    def __enter__(self) -> None:
        state = thread_state
        self._saved = (state.engine, state.task)
        state.engine = state.task = None

    def __exit__(self, *exc_info: object) -> None:
        state = thread_state
        state.engine, state.task = self._saved


# -- guest engines ------------------------------------------------------------------------------
def guest_engine(scheduler: Scheduler | None = None, ring_entries: int = 256) -> Engine:
    """A *guest* engine: a ready queue, ring and eventfd that some thread you own (not a context
    of *scheduler*) runs for a while with :func:`run_guest`, as many times as it likes.

    It takes no part in the stop protocol (its thread is borrowed), and ``tc.spawn`` from its
    tasks dispatches to *scheduler*. Close it with ``engine.close()`` once it has stopped for
    good (after :func:`run_guest` returned or :func:`abandon`).

    *scheduler* may run in either mode. A task its steps spawn is pushed at the end of the
    step's turn (rule 18), and from its admission it holds its context's stop flag, so a
    ``loop()`` does not end, nor cancel it, in between. A step that blocks its thread
    (``run_sync``, ``stop()``, a blocking ``result()``) must call :func:`before_blocking`
    first (those three do).
    """
    return Engine(None, scheduler, ring_entries, guest=True)


def start_guest(engine: Engine, task: Task) -> None:
    """Queue *task* (made with ``Task(coro, engine, name=...)``) on the guest *engine*, to run
    at its next :func:`run_guest`.

    The task is registered with the engine, so :func:`abandon` finishes it wherever it is
    (running, parked, in flight or ready). Make the Task first when something must know it
    before it can run (the cell runner's interrupt handler does). Call from the engine's
    thread, or while nothing runs the engine.
    """
    engine.live.add(task)
    engine.push(task)


def run_guest(engine: Engine, until: Task) -> None:
    """Drive the guest *engine* on the calling thread until the task *until* is done.

    Other tasks of the engine stay where they are (ready, parked, in flight) for the next
    run, or for :func:`abandon`. Raises RuntimeError if an engine already runs on the thread.
    If it raises anything else (the engine failed mid-turn), call :func:`abandon`.
    """
    engine.run(until=until)


def abandon(engine: Engine, error: BaseException | None = None) -> None:
    """Finish every task still on *engine*, on its own thread, once it no longer runs.

    Every operation in the kernel is cancelled and waited for (no buffer is freed while the
    kernel may write into it), every parked task is taken off its waiter list (what a wake
    handed over is given back), every unfinished coroutine is closed (its ``finally`` blocks
    run) and its task finishes with *error*, or ``tc.Cancelled``. Nothing is reported: these
    endings are the caller's to report. The engine is empty afterwards and can run again.
    """
    engine.abandon(error)
