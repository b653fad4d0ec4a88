"""The dashboards' one refresher thread: it alone sets their widgets' values after they were
made, a few times a second, also while a cell blocks the main thread.

Threading model (cf. ``tqdm.notebook``): widgets are created on the thread that asks for a
dashboard; from then on one :class:`RefreshThread` is the only code that sets their traits. It
samples what the dashboards show, keeps the history itself (so it does not matter whether
``stats()`` advances anything), and applies each snapshot under ``hold_sync``, so each widget
sends at most one comm message per tick and only when a value changed. It is started with an
empty ``contextvars.Context()`` so that it inherits nothing from the cell that created it,
with the process's signals blocked (they belong to the main thread), and it ends, after
rendering the final "stopped" state, when what it shows stops. :class:`Refresher` is the one of
a scheduler (:meth:`Refresher.follow` points it at a new one after ``%tinycoro restart``);
the cluster's is :class:`tinycoro.kernel_ext.cluster_dashboard.ClusterRefresher`.
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref
from typing import Any, Callable

import tinycoro as tc

from .history import History
from .signals import signals_blocked
from .widgets import Dashboard

__all__ = ["REFRESH_INTERVAL", "TASKS_EVERY", "RefreshThread", "Refresher"]

REFRESH_INTERVAL = 0.25  # seconds: four refreshes a second
TASKS_EVERY = 4  # refresh the (open) task list every 4th tick: once a second


class RefreshThread:
    """One thread that updates a set of dashboards every *interval* seconds until what they
    show stops: the threading part of :class:`Refresher` (one scheduler) and of the cluster
    dashboard's refresher (:mod:`tinycoro.kernel_ext.cluster_dashboard`). A subclass says what one
    tick does (:meth:`_tick`)."""

    thread_name = "tinycoro-dashboard"

    def __init__(self, interval: float = REFRESH_INTERVAL) -> None:
        self.interval = interval
        self.ticks = 0
        self._boards: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _add(self, board: Any) -> Any:
        """Refresh *board* from now on; the thread starts with the first board."""
        with self._lock:
            self._boards.add(board)
            if self._thread is None:
                self._start()
        return board

    def stop(self, timeout: float = 5.0) -> None:
        """Render the final state and end the thread (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _restart(self) -> None:
        """After :meth:`stop`: a fresh stop event, and the thread again if boards remain."""
        with self._lock:
            self._stop = threading.Event()
            if self._boards:
                self._start()
            else:
                self._thread = None

    def _start(self) -> None:
        ctx = contextvars.Context()  # inherit nothing from the cell that asked
        self._thread = threading.Thread(
            target=ctx.run, args=(self._run, self._stop), name=self.thread_name, daemon=True,
        )
        with signals_blocked():  # like the contexts: signals belong to the main thread
            self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while True:
            with self._lock:
                boards = list(self._boards)
            going = self._tick(boards)
            self.ticks += 1
            if not going or stop.is_set():
                return
            stop.wait(self.interval)

    def _tick(self, boards: list[Any]) -> bool:
        """Sample once and show it on *boards* (each through :meth:`_show`); False once what
        they show has stopped (after showing that)."""
        raise NotImplementedError

    def _show(self, board: Any, show: Callable[[], None]) -> None:
        """Run *show* for *board*; a board that fails (a closed widget, a gone kernel) is
        dropped, never the thread."""
        try:
            show()
        except Exception:  # noqa: BLE001 - a closed widget or a gone kernel: drop it
            with self._lock:
                self._boards.discard(board)


class Refresher(RefreshThread):
    """The one thread that updates every dashboard of one scheduler."""

    def __init__(self, scheduler: tc.Scheduler, interval: float = REFRESH_INTERVAL) -> None:
        super().__init__(interval)
        self.scheduler = scheduler
        self.history = History()

    def dashboard(self) -> Dashboard:
        """A new dashboard for this scheduler; the refresher thread starts with the first."""
        board: Dashboard = self._add(Dashboard(self.scheduler))
        return board

    def follow(self, scheduler: tc.Scheduler) -> "Refresher":
        """Show *scheduler* from now on, in every dashboard of this refresher (after
        ``%tinycoro restart``): the history goes on, the rows are rebuilt by the
        refresher thread, and the thread starts again if it ended with the old scheduler."""
        self.stop()
        self.scheduler = scheduler
        self.history.rebase()  # the plots go on across the restart
        self._restart()
        return self

    def _tick(self, boards: list[Any]) -> bool:
        scheduler, history = self.scheduler, self.history
        stats = scheduler.stats()
        unawaited = len(scheduler.failures())  # a failure awaited after all leaves the red
        now = time.monotonic()
        history.add(now, stats)
        tasks = None
        if self.ticks % TASKS_EVERY == 0 or not stats.running:
            if any(b.tasks_open for b in boards):
                tasks = scheduler.tasks()

        def show(board: Dashboard) -> None:
            if board.scheduler is not scheduler:
                board.bind(scheduler)
            board.apply(stats, history, now, tasks, unawaited)

        for board in boards:
            self._show(board, lambda: show(board))
        return bool(stats.running)
