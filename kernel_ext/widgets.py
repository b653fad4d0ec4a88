"""The dashboards' widgets: a ``VBox`` of a summary, a table and a live-task list, each an
``ipywidgets.HTML`` whose value the refresher thread sets (:mod:`tinycoro.kernel_ext.refresh`).

ipywidgets is imported here and only here; everything else in the notebook layer works without
it, and asking for a dashboard without it is a clear ImportError (:func:`need_widgets`).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import tinycoro as tc
from tinycoro.core.stats import counted

from .history import History
from .render import cell_text, scheduler_summary, scheduler_table, task_table, task_title

try:  # guarded: everything but the dashboard works without ipywidgets
    import ipywidgets
except ImportError:  # pragma: no cover - exercised only where ipywidgets is missing
    ipywidgets = None

__all__ = ["Board", "Dashboard", "need_widgets", "task_list"]

_Box: Any = ipywidgets.VBox if ipywidgets is not None else object


class Board(_Box):  # a VBox where ipywidgets is installed
    """What a dashboard is: a ``VBox`` whose plain-text form is its ``repr`` (a terminal, a
    test, or a front end without widgets shows that instead of ipywidgets' class name)."""

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = repr(self)
        return bundle


def need_widgets() -> Any:
    """The ipywidgets module, or an ImportError that says how to install it."""
    if ipywidgets is None:
        raise ImportError(
            "the tinycoro dashboard needs ipywidgets: pip install 'tinycoro[jupyter]' "
            "(or pip install ipywidgets)"
        )
    return ipywidgets


def task_list() -> tuple[Any, Any]:
    """The closed "live tasks" list under a dashboard's table: (its HTML widget, the
    accordion around it). The refresher fills it only while it is open."""
    tasks = need_widgets().HTML("<i>open to list the live tasks</i>")
    box = need_widgets().Accordion(children=[tasks], selected_index=None, _dom_classes=("tc-task-list",))
    box.set_title(0, "live tasks")
    return tasks, box

class Dashboard(Board):
    """Per-context load of one scheduler, now and over the last minute; display it as a
    cell's result.

    Its text form (``repr``, the ``text/plain`` output) names only the number of contexts, so
    notebooks comparing outputs (nbval) see the same text on every run.
    """

    def __init__(self, scheduler: tc.Scheduler) -> None:
        w = need_widgets()
        self._summary = w.HTML(_dom_classes=("tc-summary",))
        self._table = w.HTML(_dom_classes=("tc-table-widget",))
        self._tasks, self._tasks_box = task_list()
        self.bind(scheduler)
        super().__init__([self._summary, self._table, self._tasks_box],
                         _dom_classes=("tinycoro-dashboard",))

    def bind(self, scheduler: tc.Scheduler) -> None:
        """Show *scheduler* (at creation, and on the refresher thread after a follow)."""
        stats = scheduler.stats()
        self._summary.value = scheduler_summary(stats, scheduler.dispatch,
                                                len(scheduler.failures()))
        self._table.value = scheduler_table(stats, None, 0.0)
        self.contexts = scheduler.contexts  # after the table: readers see rows, then the count
        self.scheduler = scheduler

    def __repr__(self) -> str:
        return f"<tinycoro dashboard: {counted(self.contexts, 'context')}>"

    def shown(self, ctx: int, field: str) -> str:
        """What the table shows now for context *ctx* in column *field* (e.g. ``tasks_run``,
        ``queued``, ``stop_flag``, ``ops-rate``)."""
        return cell_text(self._table.value, ctx, field)

    @property
    def tasks_open(self) -> bool:
        """Whether the user expanded the live-task list (it is refreshed only then)."""
        return self._tasks_box.selected_index == 0

    def apply(self, stats: tc.SchedulerStats, history: History | None = None,
              now: float | None = None, tasks: Sequence[tc.TaskInfo] | None = None,
              unawaited: int = 0) -> None:
        """Show one snapshot (and the history that ends with it; *unawaited*: how many recent
        failures nobody has awaited). Called only by the refresher thread."""
        if now is None:
            now = time.monotonic()
        with self._summary.hold_sync(), self._table.hold_sync(), self._tasks.hold_sync(), \
                self._tasks_box.hold_sync():
            self._summary.value = scheduler_summary(stats, self.scheduler.dispatch, unawaited)
            self._table.value = scheduler_table(stats, history, now)
            if tasks is not None:
                self._tasks_box.set_title(0, task_title(tasks))
                self._tasks.value = task_table(tasks)
