"""``%tinycoro`` line magic: ``status`` (default) | ``tasks`` | ``dashboard`` |
``restart [-n N] [--dispatch D]`` | ``stop``, and ``cluster ...`` for a tinycoro cluster on
ipyparallel engines (:mod:`tinycoro.kernel_ext.cluster_magics`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from tinycoro.core import readers
from tinycoro.core.checks import DISPATCH
from tinycoro.core.stats import counted, format_stats

from .extension import Extension
from .textout import emit, format_tasks

if TYPE_CHECKING:  # pragma: no cover
    from .cluster_magics import ClusterCommands

__all__ = ["TinycoroMagics"]

COMMANDS = ("status", "tasks", "dashboard", "restart", "stop", "cluster")
_STOPPED = "(stopped: %tinycoro restart starts a new scheduler)"

@magics_class
class TinycoroMagics(Magics):
    """The ``%tinycoro`` magic of one loaded extension."""

    def __init__(self, shell: Any, ext: Extension) -> None:
        super().__init__(shell)
        self.ext = ext
        self._commands: "ClusterCommands | None" = None  # made by the first %tinycoro cluster
        self.last_dashboard: Any = None  # the widget %tinycoro dashboard displayed last
        # After every cell, %px follows the kernel's most recent cluster, also one a cell made
        # with tc.cluster.start/connect (ClusterCommands.follow says why).
        shell.events.register("post_run_cell", self._follow_cluster)

    @property
    def cluster(self) -> "ClusterCommands":
        """The notebook's cluster commands (:mod:`tinycoro.kernel_ext.cluster_magics`)."""
        if self._commands is None:
            from .cluster_magics import ClusterCommands  # ipyparallel's magics come with it

            self._commands = ClusterCommands(self.shell)
        return self._commands

    def _follow_cluster(self, result: Any = None) -> None:
        if self._commands is None and "tinycoro.cluster" not in sys.modules:
            return  # no cluster can exist before its package is imported
        self.cluster.follow()

    def close(self) -> None:
        """At unload: stop the cluster started here (let go of a connected one)."""
        if self.shell is not None:  # (IPython types a Magics' shell as optional)
            self.shell.events.unregister("post_run_cell", self._follow_cluster)
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
            emit(parser.format_help().removeprefix("::\n\n"))
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
        # the cells' own context too: a cell's awaited I/O runs there, on the main thread
        text = format_stats(stats, sched.dispatch, cells=readers.guest_stats(self.ext.engine))
        emit(text if stats.running else text + "\n" + _STOPPED)

    def _tasks(self, args: argparse.Namespace) -> None:
        sched = self.ext.scheduler
        text = format_tasks(sched.tasks(), sched.failures())
        emit(text if sched.running else text + "\n" + _STOPPED)

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
        emit(f"tinycoro: restarted with {counted(sched.contexts, 'context')} "
             f"({sched.dispatch}){before}")

    def _stop(self, args: argparse.Namespace) -> None:
        cancelled = self.ext.stop_scheduler()
        if cancelled is None:
            emit("tinycoro: the scheduler was not running")
        else:
            emit(f"tinycoro: scheduler stopped, cancelled {_tasks_word(cancelled)}; "
                 "%tinycoro restart starts a new one")


def _tasks_word(n: int) -> str:
    return counted(n, "task")


# magic_arguments opens the docstring it builds (what %tinycoro? shows) with an RST literal-block
# marker, "::", a line of its own that IPython shows as is: the usage follows without it.
TinycoroMagics.tinycoro.__doc__ = (TinycoroMagics.tinycoro.__doc__ or "").removeprefix("::\n\n")
