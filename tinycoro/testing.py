"""Helpers for tests that need to know where other tasks are, instead of sleeping.

In the spirit of trio's ``wait_all_tasks_blocked``: synchronise on the runtime's own state.
:func:`wait_blocked` parks the calling task; every engine that runs one of the watched tasks
looks at the watch at the end of each of its turns (a task only ever blocks during a turn),
and the engine that sees them all blocked wakes the caller.
"""

from __future__ import annotations

import threading

from .scopes import timeout
from .core.local import thread_state
from .core.task import Task
from .core.traps import Op, Park, park

__all__ = ["is_blocked", "wait_blocked"]


def is_blocked(task: Task) -> bool:
    """True while *task* is suspended on an I/O operation, a timer or a primitive."""
    return isinstance(task.waiting_on(), (Op, Park)) and not task.done()


class _Watch:
    """One ``wait_blocked`` call: the tasks it waits for and the task waiting."""

    __slots__ = ("tasks", "waiter", "lock", "done")

    def __init__(self, tasks: tuple[Task, ...], waiter: Task) -> None:
        self.tasks = tasks
        self.waiter = waiter
        self.lock = threading.Lock()
        self.done = False

    def check(self) -> None:
        """Engine hook, any engine's thread at the end of a turn: wake the waiter once all
        the tasks are blocked."""
        if self.done or not all(is_blocked(t) for t in self.tasks):
            return
        with self.lock:
            if self.done:
                return
            self.done = True
        self.waiter.wake(None)

    def abort(self) -> bool:
        """Park ticket hook: the waiter was cancelled (or its timeout fired)."""
        with self.lock:
            if self.done:
                return False
            self.done = True
            return True

    def __repr__(self) -> str:
        return f"<wait_blocked for {len(self.tasks)} task(s)>"


async def wait_blocked(*tasks: Task, seconds: float = 30.0) -> None:
    """Return once every one of *tasks* is blocked (on I/O, a timer, a primitive or a join).

    The tasks may run on other contexts; the caller is parked meanwhile, not spinning.
    Raises ``RuntimeError`` after *seconds*, so a test that waits for something that never
    happens (a task that finished, say) fails instead of hanging.
    """
    if all(is_blocked(t) for t in tasks):
        return
    watch = _Watch(tasks, thread_state.task)
    for engine in {t.engine for t in tasks}:
        engine.call_soon(engine.watch_blocked, watch)
    try:
        async with timeout(seconds):
            await park(Park(watch.abort, watch))
    except TimeoutError:
        raise RuntimeError(f"tasks never blocked within {seconds} s: {tasks!r}") from None
