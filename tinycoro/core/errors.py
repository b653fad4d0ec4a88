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
    stream or listener is used after close (DESIGN rule 10). An ``OSError`` with errno EBADF."""

    def __init__(self, message: str = "the resource was closed") -> None:
        super().__init__(errno.EBADF, message)


class ChannelClosed(Exception):
    """``send`` on a closed channel, or ``recv`` on a closed and drained one."""


def oserror(res: int, what: str | None = None) -> OSError:
    """The ``OSError`` subclass for a negative io_uring result, keeping its errno."""
    code = -res
    if what:
        return OSError(code, os.strerror(code), what)
    return OSError(code, os.strerror(code))
