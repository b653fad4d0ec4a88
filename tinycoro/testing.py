"""Helpers for tests that need to know where other tasks are, instead of sleeping.

In the spirit of trio's ``wait_all_tasks_blocked``: synchronise on the runtime's own state.
"""

from __future__ import annotations

from .core.task import Task
from .core.traps import Op, Park, yield_now

__all__ = ["is_blocked", "wait_blocked"]


def is_blocked(task: Task) -> bool:
    """True while *task* is suspended on an I/O operation, a timer or a primitive."""
    return type(task._waiting) in (Op, Park) and not task.done()


async def wait_blocked(*tasks: Task, limit: int = 10_000_000) -> None:
    """Yield until every one of *tasks* is blocked (on I/O, a timer, a primitive or a join).

    The tasks may run on other contexts. Raises ``RuntimeError`` after *limit* turns, so a
    test that waits for something that never happens fails instead of hanging.
    """
    for _ in range(limit):
        if all(is_blocked(t) for t in tasks):
            return
        await yield_now()
    raise RuntimeError(f"tasks never blocked: {tasks!r}")
