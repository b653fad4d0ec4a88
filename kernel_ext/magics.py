"""``%tinycoro`` line magic: ``status`` (default) | ``tasks`` | ``dashboard`` |
``restart [-n N] [--dispatch D]`` | ``stop``, and ``cluster ...`` for a tinycoro cluster on
ipyparallel engines (:mod:`tinycoro.kernel_ext.cluster_magics`)."""

from __future__ import annotations

import argparse
import shlex
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

import tinycoro as tc
from tinycoro.core.checks import DISPATCH
from tinycoro.core.stats import STATE_WORDS, STATES, format_stats, legend, text_table
from tinycoro.core.waits import age
from tinycoro.core.waits import summary as wait_summary

from .extension import Extension

if TYPE_CHECKING:  # pragma: no cover
    from .cluster_magics import ClusterCommands

__all__ = ["TinycoroMagics", "format_status", "format_tasks"]

COMMANDS = ("status", "tasks", "dashboard", "restart", "stop", "cluster")

def _table(rows: Sequence[Sequence[str]], left: frozenset[int] = frozenset()) -> list[str]:
    """Rows of cells as aligned text lines (kept for the cluster commands)."""
    return text_table(rows, left)


def format_status(stats: tc.SchedulerStats, dispatch: str = "") -> str:
    """A plain-text table of one stats snapshot, with its legend (what ``%tinycoro status``
    prints); the words are those of ``python -m tinycoro`` and the dashboard."""
    return format_stats(stats, dispatch)


def format_tasks(tasks: Sequence[tc.TaskInfo], failures: Sequence[tc.FailureInfo]) -> str:
    """Live tasks (oldest first, a summary line per kind of wait, a legend), then recent
    failures, as plain text (what ``%tinycoro tasks`` prints)."""
    n = len(tasks)
    head = f"tinycoro: {n} live task{'s' if n != 1 else ''}"
    lines = [f"{head}: {wait_summary(tasks)}" if tasks else head]
    if tasks:
        rows: list[tuple[str, ...]] = [("id", "name", "context", "state", "age", "waits on")]
        for t in sorted(tasks, key=lambda t: t.id):
            ctx = "cell" if t.context is None else str(t.context)
            state = STATE_WORDS.get(t.state, t.state)
            rows.append((str(t.id), t.name, ctx, state, age(t.age), t.waits_on))
        lines += _table(rows, left=frozenset({1, 3, 5}))
        lines += legend([("state", "; ".join(f"{k}: {v}" for k, v in STATES)),
                         ("age", "time since the task was spawned")])
    if failures:
        lines.append(f"recent failures nobody awaited ({len(failures)}):")
        rows = [("id", "name", "context", "when", "error")]
        for f in failures:
            ctx = "cell" if f.context is None else str(f.context)
            when = time.strftime("%H:%M:%S", time.localtime(f.when))
            rows.append((str(f.id), f.name, ctx, when, f.error))
        lines += _table(rows, left=frozenset({1, 4}))
    return "\n".join(lines)


@magics_class
class TinycoroMagics(Magics):
    """The ``%tinycoro`` magic of one loaded extension."""

    def __init__(self, shell: Any, ext: Extension) -> None:
        super().__init__(shell)
        self.ext = ext
        self._commands: "ClusterCommands | None" = None  # made by the first %tinycoro cluster
        self.last_dashboard: Any = None  # the widget %tinycoro dashboard displayed last

    @property
    def cluster(self) -> "ClusterCommands":
        """The notebook's cluster commands (:mod:`tinycoro.kernel_ext.cluster_magics`)."""
        if self._commands is None:
            from .cluster_magics import ClusterCommands  # it imports this module's formatters

            self._commands = ClusterCommands(self.shell)
        return self._commands

    def close(self) -> None:
        """At unload: stop the cluster started here (let go of a connected one)."""
        if self._commands is not None:
            self._commands.close()

    # IPython's magic_arguments builds one flat argparse parser from these decorators, and the
    # magic's help (``%tinycoro?``) from it. The commands take at most two options, both for
    # ``restart``, so one flat parser plus a check that the options came with ``restart`` is
    # simpler than argparse subparsers (which magic_arguments cannot declare). ``cluster``
    # has its own actions and options (-n there counts engines), so its arguments go to a
    # parser of their own (tinycoro.kernel_ext.cluster_magics).
    @magic_arguments()
    @argument(
        "command", nargs="?", default="status", choices=COMMANDS,
        help="status: per-context load; tasks: live tasks and recent failures; dashboard: a "
        "live widget; restart: stop the scheduler (cancelling its tasks) and start a new one; "
        "stop: stop the scheduler, cancelling its tasks; cluster: start | connect | status | "
        "tasks | dashboard | stop a cluster of ipyparallel engines (%%tinycoro cluster -h) "
        "(default: status)",
    )
    @argument("-n", "--contexts", type=int, default=None, help="restart: number of contexts")
    @argument("--dispatch", choices=DISPATCH, default=None, help="restart: dispatch policy")
    @argument("-h", "--help", action="store_true", help="show this help")
    @line_magic
    def tinycoro(self, line: str = "") -> Any:
        """Inspect and control the notebook's tinycoro scheduler."""
        parser = self.tinycoro.parser
        try:
            # comments=True: IPython hands a trailing "# comment" to the magic with its arguments
            argv = shlex.split(line, comments=True)
        except ValueError as e:  # unbalanced quotes
            raise UsageError(f"%tinycoro: {e}") from None
        if argv[:1] == ["cluster"]:
            return self.cluster.run(argv[1:])
        try:
            args = parser.parse_args(argv)
        except UsageError as e:
            raise UsageError(f"%tinycoro: {e}\n{parser.format_usage()}") from None
        if args.help:
            # magic_arguments formats help as an RST literal block for %tinycoro? ("::")
            print(parser.format_help().removeprefix("::\n\n"), end="")
            return None
        if args.command != "restart" and (args.contexts is not None or args.dispatch is not None):
            raise UsageError(f"%tinycoro: -n and --dispatch go with restart, not {args.command}")
        command: Callable[[argparse.Namespace], Any] = getattr(self, f"_{args.command}")
        return command(args)

    def _cluster(self, args: argparse.Namespace) -> Any:
        return self.cluster.run([])  # "cluster" came after options: its action is missing

    def _status(self, args: argparse.Namespace) -> None:
        sched = self.ext.scheduler
        stats = sched.stats()
        print(format_status(stats, sched.dispatch))
        if not stats.running:
            print("(stopped: %tinycoro restart starts a new scheduler)")

    def _tasks(self, args: argparse.Namespace) -> None:
        sched = self.ext.scheduler
        print(format_tasks(sched.tasks(), sched.failures()))
        if not sched.stats().running:
            print("(stopped: %tinycoro restart starts a new scheduler)")

    def _dashboard(self, args: argparse.Namespace) -> None:
        """Display the dashboard where the magic stands, as ``display()`` would: a magic's
        return value is shown only from a cell's last line, and a dashboard asked for on any
        line must appear."""
        try:
            board = self.ext.dashboard_refresher().dashboard()
        except (RuntimeError, ImportError) as e:
            raise UsageError(f"%tinycoro dashboard: {e}") from None
        from IPython.display import display

        self.last_dashboard = board  # for code (and tests) that want the widget itself
        display(board)

    def _restart(self, args: argparse.Namespace) -> None:
        try:
            sched = self.ext.restart(args.contexts, args.dispatch)
        except ValueError as e:  # the one check of contexts/dispatch, in tinycoro.core.checks
            raise UsageError(f"%tinycoro restart: {e}") from None
        cancelled = self.ext.cancelled_by_restart
        before = "" if cancelled is None else f"; cancelled {_tasks_word(cancelled)}"
        print(f"tinycoro: restarted with {sched.contexts} contexts ({sched.dispatch}){before}")

    def _stop(self, args: argparse.Namespace) -> None:
        cancelled = self.ext.stop_scheduler()
        if cancelled is None:
            print("tinycoro: the scheduler was not running")
        else:
            print(
                f"tinycoro: scheduler stopped, cancelled {_tasks_word(cancelled)}; "
                "%tinycoro restart starts a new one"
            )


def _tasks_word(n: int) -> str:
    return f"{n} task{'s' if n != 1 else ''}"
