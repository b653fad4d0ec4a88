"""Exceptions of the runtime. I/O failures are plain ``OSError`` subclasses, made by the kernel's
errno (``OSError(errno.ENOENT, ...)`` is a ``FileNotFoundError``)."""

from __future__ import annotations

import errno
import os


class Cancelled(BaseException):
    """Raised inside a task at its pending await once ``task.cancel()`` reaches it.

    A ``BaseException`` so that ``except Exception`` in user code does not swallow it.
    """


class DeadlockError(RuntimeError):
    """Every context is idle with no I/O and no timers, yet tasks are still parked: nothing inside
    the scheduler can ever wake them. The message names each parked task and what it waits on."""

    def __init__(self, message: str, parked: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.parked = parked or []


class ClosedResourceError(OSError):
    """The stream, listener, socket or file was closed while this operation waited on it, or the
    stream or listener is used after close (rule 10). An ``OSError`` with errno EBADF."""

    def __init__(self, message: str = "the resource was closed") -> None:
        super().__init__(errno.EBADF, message)


class ChannelClosed(Exception):
    """``send`` on a closed channel, or ``recv`` on a closed and drained one."""


def asyncio_in_task(task_name: str, what: str) -> TypeError:
    """The error of awaiting asyncio inside a tinycoro task (docs/design.md, API contract): it names the
    task, what was awaited and the way out, ``tc.aio``. One text for every place that sees it
    (the engine, for a future yielded to it; the context threads' stand-in asyncio loop)."""
    return TypeError(
        f"{task_name} awaited {what} inside a tinycoro task. tinycoro tasks run on tinycoro "
        "contexts, not on an asyncio event loop: run it with `await tc.aio(...)` (e.g. "
        "`await tc.aio(asyncio.sleep(1))`), or use tinycoro's awaitables (tc.sleep, tc.io, "
        "tc.net, tc.Event, ...) instead"
    )


def oserror(res: int, what: str | None = None) -> OSError:
    """The ``OSError`` subclass for a negative io_uring result, keeping its errno."""
    code = -res
    if what:
        return OSError(code, os.strerror(code), what)
    return OSError(code, os.strerror(code))
