"""The inline budget seen from beside a loop: a looper that repeats one operation on the calling
task's context, and a counter on that same context recording how far the looper got at each of
its own steps. A gap between two records is how many operations ran between two turns of the
counter, which the budget (``INLINE_BUDGET``) bounds."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import tinycoro as tc

from helpers.sync import spawn_here


async def loop_beside_counter(
    once: Callable[[], Awaitable[Any]], limit: int, steps: int = 50
) -> tuple[int, list[int]]:
    """From inside a task: run ``await once()`` in a loop (a task on this context) until it has
    run *limit* times or a counter (another task on this context) has made *steps* steps,
    recording the loop's count at each. (operations done, the counter's records)."""
    done = [0]
    stop = [False]

    async def looper() -> None:
        while done[0] < limit and not stop[0]:
            await once()
            done[0] += 1

    async def counter() -> list[int]:
        seen = []
        for _ in range(steps):
            seen.append(done[0])
            await tc.yield_now()
        stop[0] = True
        return seen

    lt = spawn_here(looper())
    seen = await spawn_here(counter())
    await lt
    return done[0], seen


def gaps(seen: list[int]) -> list[int]:
    """The operations made between each two records of :func:`loop_beside_counter`'s counter."""
    return [b - a for a, b in zip(seen, seen[1:])]
