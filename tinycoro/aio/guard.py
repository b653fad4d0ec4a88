"""What asyncio code finds on a tinycoro context thread: a running loop that refuses all work.

asyncio code starts by asking for its loop (``asyncio.get_running_loop()``), before anything is
yielded to the engine. On a context thread no asyncio loop runs, so ``await asyncio.sleep(1)``
inside a tinycoro task used to fail with asyncio's own "no running event loop", which names
neither the cause nor ``tc.aio``. While a context thread runs its engine, :func:`refusing` makes
:data:`NOT_ASYNCIO` that thread's running loop: the first thing asyncio asks of it (a future, a
timer, a task) raises the TypeError that docs/design.md, API contract promises, at the user's await.

Why refuse rather than run the awaitable: making it work would need an asyncio loop that this
thread drives (asyncio's loops, futures and primitives are bound to one loop and are not
thread-safe), i.e. one loop per context. Tasks are spread over contexts, so an asyncio.Event or
Queue shared by two tasks would be touched from two threads, which asyncio cannot detect in
general. ``tc.aio`` runs the whole awaitable on the scheduler's companion loop instead, where it
is safe, and cancels both ways (docs/asyncio.md).

A consequence, as inside an asyncio task: blocking asyncio calls (``asyncio.run``,
``loop.run_until_complete``) refuse to run in a tinycoro task, since a loop "is running" there.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, Iterator

from ..core.errors import asyncio_in_task
from ..core.local import thread_state

__all__ = ["NOT_ASYNCIO", "refusing"]


class _NotAsyncio(asyncio.AbstractEventLoop):
    """The stand-in loop: every public method raises the TypeError that names ``tc.aio``."""

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("__") or name == "is_closed":
            return object.__getattribute__(self, name)
        task = thread_state.task
        who = task.name if task is not None else "code on a tinycoro context"
        caller = sys._getframe(1)
        module = caller.f_globals.get("__name__", "?")
        if module.startswith("asyncio."):  # asyncio.tasks.sleep is asyncio.sleep to a user
            module = "asyncio"
        what = f"{module}.{caller.f_code.co_name}"
        raise asyncio_in_task(who, f"asyncio work ({what} needs an asyncio event loop)")

    def is_closed(self) -> bool:
        """True: it takes no work. Registries of loops that some code on a context reached
        (tornado's map of loops to IOLoops) drop closed loops, on whatever thread they next
        look; answering there, instead of raising, keeps the stand-in from breaking them."""
        return True

    def __repr__(self) -> str:
        return "<no asyncio loop: a tinycoro context thread (use tc.aio)>"


# typeshed marks AbstractEventLoop's methods abstract, but asyncio's class is no ABC (they raise
# NotImplementedError) and every one of them reaches __getattribute__ above, which refuses it.
NOT_ASYNCIO = _NotAsyncio()  # type: ignore[abstract]


@contextlib.contextmanager
def refusing() -> Iterator[None]:
    """Make :data:`NOT_ASYNCIO` this thread's running asyncio loop for the duration."""
    previous = asyncio._get_running_loop()
    asyncio._set_running_loop(NOT_ASYNCIO)
    try:
        yield
    finally:
        asyncio._set_running_loop(previous)
