"""What ``%load_ext tinycoro`` owns in one IPython shell, and how it is torn down again.

One :class:`Extension` per shell holds the default long-lived :class:`tinycoro.Scheduler`, the
guest engine that cell coroutines run on (see :mod:`kernel_ext.runner`), the IPython state it
replaced (``loop_runner`` and ``autoawait``), and the dashboard refresher, if one was started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import TYPE_CHECKING, Any, Iterator

import tinycoro as tc
from tinycoro.core.engine import Engine
from tinycoro.core.scheduler import DISPATCH

from .runner import CellRunner

if TYPE_CHECKING:  # pragma: no cover
    from .dashboard import Refresher

__all__ = ["Extension", "default_config", "start_scheduler", "signals_blocked"]

GUEST_RING_ENTRIES = 64  # a cell drives one coroutine; its ring never needs to be large
STOP_TIMEOUT = 5.0  # seconds for cancelled tasks to unwind when the scheduler stops


def default_config() -> tuple[int | None, str]:
    """Contexts and dispatch for the scheduler started at load time.

    ``TINYCORO_CONTEXTS`` (a positive int) and ``TINYCORO_DISPATCH`` (``round_robin`` or
    ``least_loaded``) override the defaults (``os.cpu_count()`` contexts, round robin); the
    kernelspec installer writes them into the kernel's environment when asked to.
    """
    raw = os.environ.get("TINYCORO_CONTEXTS", "").strip()
    contexts: int | None = None
    if raw:
        try:
            contexts = int(raw)
        except ValueError:
            raise ValueError(f"TINYCORO_CONTEXTS must be a positive int, got {raw!r}") from None
    dispatch = os.environ.get("TINYCORO_DISPATCH", "").strip() or "round_robin"
    if dispatch not in DISPATCH:
        raise ValueError(f"TINYCORO_DISPATCH must be one of {DISPATCH}, got {dispatch!r}")
    return contexts, dispatch


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


def start_scheduler(contexts: int | None, dispatch: str) -> tc.Scheduler:
    """A started long-lived scheduler whose context threads never receive process signals."""
    sched = tc.Scheduler(contexts, dispatch=dispatch)
    with signals_blocked():
        return sched.start()


class Extension:
    """The tinycoro state of one shell: scheduler, guest engine, runner, saved IPython state."""

    def __init__(self, shell: Any, contexts: int | None = None, dispatch: str = "round_robin") -> None:
        self.shell = shell
        self._lock = threading.Lock()  # guards scheduler swaps against the dashboard refresher
        self.scheduler: tc.Scheduler | None = None
        self.refresher: "Refresher | None" = None
        self.scheduler = start_scheduler(contexts, dispatch)
        try:
            engine = Engine(None, self.scheduler, GUEST_RING_ENTRIES, guest=True)
        except BaseException:
            self.scheduler.stop()
            raise
        self.runner = CellRunner(engine)
        self._saved = (shell.loop_runner, shell.autoawait)
        shell.loop_runner = self.runner
        shell.autoawait = True
        self._previous_default = tc.get_default_scheduler()
        tc.set_default_scheduler(self.scheduler)

    # -- scheduler lifetime (used by the %tinycoro magics) -------------------------------------
    @property
    def engine(self) -> Engine:
        return self.runner.engine

    def stop_scheduler(self, timeout: float = STOP_TIMEOUT) -> bool:
        """Stop the default scheduler: cancel its tasks, join its threads. False if none ran."""
        with self._lock:
            sched, refresher = self.scheduler, self.refresher
            self.refresher = None
        if sched is None or not sched.stats().running:
            if refresher is not None:
                refresher.stop()
            return False
        try:
            sched.stop(timeout=timeout)
        finally:
            if refresher is not None:
                refresher.stop()  # renders the final "stopped" state, then its thread ends
        return True

    def restart(self, contexts: int | None = None, dispatch: str | None = None) -> tc.Scheduler:
        """Stop the current scheduler and start a new one (same settings unless given)."""
        old = self.scheduler
        if contexts is None and old is not None:
            contexts = old.contexts
        if dispatch is None:
            dispatch = old.dispatch if old is not None else "round_robin"
        if contexts is not None and (isinstance(contexts, bool) or not isinstance(contexts, int) or contexts < 1):
            raise ValueError(f"contexts must be a positive int, got {contexts!r}")
        if dispatch not in DISPATCH:
            raise ValueError(f"dispatch must be one of {DISPATCH}, got {dispatch!r}")
        self.stop_scheduler()
        new = start_scheduler(contexts, dispatch)
        with self._lock:
            self.scheduler = new
        self.engine.scheduler = new
        tc.set_default_scheduler(new)
        return new

    def dashboard_refresher(self) -> "Refresher":
        """The refresher for the current scheduler, started on first use."""
        from .dashboard import Refresher

        with self._lock:
            sched = self.scheduler
            if sched is None or not sched.stats().running:
                raise RuntimeError(
                    "the tinycoro scheduler is stopped; %tinycoro restart starts a new one"
                )
            if self.refresher is None:
                self.refresher = Refresher(sched)
            return self.refresher

    # -- teardown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Undo everything :meth:`__init__` did; leaves no tinycoro thread running."""
        shell = self.shell
        loop_runner, autoawait = self._saved
        if shell.loop_runner is self.runner:
            shell.loop_runner = loop_runner
            shell.autoawait = autoawait
        self.stop_scheduler()
        if tc.get_default_scheduler() is self.scheduler:
            previous = self._previous_default
            if previous is not None and not previous.stats().running:
                previous = None
            tc.set_default_scheduler(previous)
        self.runner.close()  # deferred to the end of the cell if called from an awaiting cell
