"""Live scheduler dashboard: an ipywidgets table fed by one refresher thread.

Layout (one row per context)::

    tinycoro · round_robin · stop token 2 · accepting · running
    context  busy            queued  I/O in flight  parked  tasks run  stop flag
    ctx 0    [#####     ] 52%     3             12       0      10231          1
    ctx 1    [###       ] 31%     0              4       1       9870          1

Threading model (cf. ``tqdm.notebook``): widgets are created on the thread that asks for a
dashboard; from then on one :class:`Refresher` thread per scheduler is the only code that sets
their traits. It reads ``Scheduler.stats()`` (cheap, thread-safe) a few times a second and
applies each snapshot under ``hold_sync``, so each widget sends at most one comm message per
tick and only when a value changed. Because it is a plain thread it keeps refreshing while a
cell blocks the main thread. It is started with an empty ``contextvars.Context()`` so that it
inherits nothing from the cell that created it, and it ends (after rendering the final
"stopped" state) when the scheduler stops.

ipywidgets is imported only by this module, and only the dashboard needs it.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from typing import Any

import tinycoro as tc

from .extension import signals_blocked

try:  # guarded: everything but the dashboard works without ipywidgets
    import ipywidgets as _w
except ImportError:  # pragma: no cover - exercised only where ipywidgets is missing
    _w = None

__all__ = ["Dashboard", "Refresher", "REFRESH_INTERVAL"]

REFRESH_INTERVAL = 0.25  # seconds: four refreshes a second
COLUMNS = ("context", "busy", "", "queued", "I/O in flight", "parked", "tasks run", "stop flag")
FIELDS = ("queued", "io_inflight", "parked", "tasks_run", "stop_flag")

_Base: Any = _w.VBox if _w is not None else object


def _need_widgets() -> None:
    if _w is None:
        raise ImportError(
            "the tinycoro dashboard needs ipywidgets: pip install 'tinycoro[jupyter]' "
            "(or pip install ipywidgets)"
        )


def _summary(stats: tc.SchedulerStats, dispatch: str) -> str:
    state = "running" if stats.running else "stopped"
    accepting = "accepting" if stats.accepting else "not accepting"
    return (
        f"<b>tinycoro</b> &middot; {dispatch} &middot; stop token <b>{stats.stop_token}</b>"
        f" &middot; {accepting} &middot; {state}"
    )


class Dashboard(_Base):  # type: ignore[misc, valid-type]
    """A table of per-context load for one scheduler; display it as a cell's result.

    Its text form (``repr``, the ``text/plain`` output) names only the number of contexts, so
    notebooks comparing outputs (nbval) see the same text on every run.
    """

    def __init__(self, scheduler: tc.Scheduler) -> None:
        _need_widgets()
        self.scheduler = scheduler
        self.contexts = scheduler.contexts
        stats = scheduler.stats()
        self._summary = _w.HTML(_summary(stats, scheduler.dispatch), _dom_classes=("tc-summary",))
        cells: list[Any] = [
            _w.HTML(f"<b>{c}</b>", _dom_classes=("tc-head",)) for c in COLUMNS
        ]
        self._rows: list[tuple[Any, Any, dict[str, Any]]] = []
        for c in stats.contexts:
            dom = f"tc-ctx-{c.id}"
            bar = _w.FloatProgress(
                value=0.0, min=0.0, max=1.0, _dom_classes=(dom, "tc-busy"),
                layout=_w.Layout(width="140px"),
            )
            pct = _w.Label("0%", _dom_classes=(dom, "tc-busy-pct"))
            labels = {f: _w.Label(str(getattr(c, f)), _dom_classes=(dom, f"tc-{f}")) for f in FIELDS}
            cells += [_w.Label(f"ctx {c.id}", _dom_classes=(dom, "tc-name")), bar, pct]
            cells += [labels[f] for f in FIELDS]
            self._rows.append((bar, pct, labels))
        grid = _w.GridBox(
            cells,
            layout=_w.Layout(
                grid_template_columns="70px 150px 50px repeat(5, 100px)", grid_gap="2px 8px"
            ),
        )
        super().__init__([self._summary, grid], _dom_classes=("tinycoro-dashboard",))

    def __repr__(self) -> str:
        return f"<tinycoro dashboard: {self.contexts} contexts>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = repr(self)
        return bundle

    def apply(self, stats: tc.SchedulerStats) -> None:
        """Show one snapshot. Called only by the refresher thread."""
        widgets = [self._summary]
        for bar, pct, labels in self._rows:
            widgets += [bar, pct, *labels.values()]
        with contextlib.ExitStack() as hold:
            for widget in widgets:
                hold.enter_context(widget.hold_sync())
            self._summary.value = _summary(stats, self.scheduler.dispatch)
            for (bar, pct, labels), c in zip(self._rows, stats.contexts):
                busy = c.busy if stats.running else 0.0
                bar.value = busy
                bar.bar_style = "success" if busy < 0.8 else "warning"
                pct.value = f"{busy:.0%}"
                for f, label in labels.items():
                    label.value = str(getattr(c, f))


class Refresher:
    """The one thread that updates every dashboard of one scheduler."""

    def __init__(self, scheduler: tc.Scheduler, interval: float = REFRESH_INTERVAL) -> None:
        self.scheduler = scheduler
        self.interval = interval
        self.ticks = 0
        self._boards: "weakref.WeakSet[Dashboard]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def dashboard(self) -> Dashboard:
        """A new dashboard for this scheduler; the refresher thread starts with the first."""
        board = Dashboard(self.scheduler)
        with self._lock:
            self._boards.add(board)
            if self._thread is None:
                ctx = contextvars.Context()  # inherit nothing from the cell that asked
                self._thread = threading.Thread(
                    target=ctx.run, args=(self._run,), name="tinycoro-dashboard", daemon=True
                )
                with signals_blocked():  # like the contexts: signals belong to the main thread
                    self._thread.start()
        return board

    def stop(self, timeout: float = 5.0) -> None:
        """Render the final state and end the thread (idempotent)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            stats = self.scheduler.stats()
            with self._lock:
                boards = list(self._boards)
            for board in boards:
                try:
                    board.apply(stats)
                except Exception:  # noqa: BLE001 - a closed widget or a gone kernel: drop it
                    with self._lock:
                        self._boards.discard(board)
            self.ticks += 1
            if not stats.running or self._stop.is_set():
                return
            self._stop.wait(self.interval)
