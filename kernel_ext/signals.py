"""Threads the notebook layer starts never receive the process's asynchronous signals: the
context threads of its scheduler and the dashboards' refresher are started inside
:func:`signals_blocked`, so the kernel delivers an interrupt to the main thread, where the cell
runs."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

__all__ = ["signals_blocked"]


# Asynchronous process signals a Python program may install handlers for. Threads started while
# they are blocked inherit the mask, so the kernel delivers these signals to the main thread.
_THREAD_BLOCKED = frozenset(
    getattr(signal, name)
    for name in (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGCHLD",
        "SIGWINCH",
    )
    if hasattr(signal, name)
)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block asynchronous signals in the calling thread while threads are started here.

    Threads inherit their creator's signal mask, so the context threads (and the dashboard's
    refresher) started inside this block never receive these signals; the kernel then always
    delivers them to the main thread, whose blocking read they interrupt at once. Otherwise
    Linux may pick any thread that does not block the signal (e.g. for a second SIGINT while
    the main thread still has one pending), and the cell would see the interrupt only at its
    engine's next wake-up. (Python runs signal handlers on the main thread in any case.)
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _THREAD_BLOCKED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
