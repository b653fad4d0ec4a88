"""``%tinycoro`` line magic: ``status`` (default) | ``dashboard`` | ``restart [-n N] [--dispatch D]``
| ``stop``."""

from __future__ import annotations

import argparse
import shlex
from typing import Any, Callable, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

import tinycoro as tc
from tinycoro.core.scheduler import DISPATCH

from .extension import Extension

__all__ = ["TinycoroMagics", "format_status"]

_HEAD = ("ctx", "busy", "queued", "io_pending", "io_inflight", "parked", "tasks_run", "flag", "state")


def format_status(stats: tc.SchedulerStats, dispatch: str = "") -> str:
    """A plain-text table of one stats snapshot (what ``%tinycoro status`` prints)."""
    state = "running" if stats.running else "stopped"
    accepting = "accepting work" if stats.accepting else "not accepting work"
    how = f", {dispatch}" if dispatch else ""
    lines = [
        (
            f"tinycoro scheduler: {len(stats.contexts)} contexts{how}, {state}, {accepting}, "
            f"stop token {stats.stop_token}"
        )
    ]
    rows = [_HEAD]
    for c in stats.contexts:
        rows.append(
            (
                str(c.id),
                f"{c.busy:.0%}",
                str(c.queued),
                str(c.io_pending),
                str(c.io_inflight),
                str(c.parked),
                str(c.tasks_run),
                str(c.stop_flag),
                "asleep" if c.sleeping else "awake",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
    for r in rows:
        lines.append("  ".join(v.rjust(w) for v, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as IPython UsageErrors instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"%tinycoro: {message}\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(message or self.format_usage())


def _parser() -> _Parser:
    p = _Parser(prog="%tinycoro", description="Inspect and control the notebook's tinycoro scheduler.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("status", help="print a table of per-context load (the default)")
    sub.add_parser("dashboard", help="show a live dashboard widget")
    r = sub.add_parser("restart", help="stop the scheduler (cancelling its tasks) and start a new one")
    r.add_argument("-n", "--contexts", type=int, default=None, help="number of contexts")
    r.add_argument("--dispatch", choices=DISPATCH, default=None, help="dispatch policy")
    sub.add_parser("stop", help="stop the scheduler, cancelling its tasks")
    return p


@magics_class
class TinycoroMagics(Magics):
    """The ``%tinycoro`` magic of one loaded extension."""

    def __init__(self, shell: Any, ext: Extension) -> None:
        super().__init__(shell)
        self.ext = ext

    @line_magic
    def tinycoro(self, line: str = "") -> Any:
        """%tinycoro [status | dashboard | restart [-n N] [--dispatch D] | stop]

        status     print a table of per-context load and the stop-token state
        dashboard  show a live widget of the same (needs ipywidgets)
        restart    stop the scheduler (cancelling its tasks) and start a new one
        stop       stop the scheduler, cancelling its tasks
        """
        try:
            args = _parser().parse_args(shlex.split(line))
        except ValueError as e:  # unbalanced quotes
            raise UsageError(f"%tinycoro: {e}") from None
        command: Callable[[argparse.Namespace], Any] = getattr(self, f"_{args.command or 'status'}")
        return command(args)

    def _status(self, args: argparse.Namespace) -> None:
        sched = self.ext.scheduler
        if sched is None:
            print("tinycoro: no scheduler; %tinycoro restart starts one")
            return
        print(format_status(sched.stats(), sched.dispatch))
        if not sched.stats().running:
            print("(stopped: %tinycoro restart starts a new scheduler)")

    def _dashboard(self, args: argparse.Namespace) -> Any:
        try:
            return self.ext.dashboard_refresher().dashboard()
        except (RuntimeError, ImportError) as e:
            raise UsageError(f"%tinycoro dashboard: {e}") from None

    def _restart(self, args: argparse.Namespace) -> None:
        if args.contexts is not None and args.contexts < 1:
            raise UsageError("%tinycoro restart: -n must be a positive number of contexts")
        sched = self.ext.restart(args.contexts, args.dispatch)
        print(f"tinycoro: restarted with {sched.contexts} contexts ({sched.dispatch})")

    def _stop(self, args: argparse.Namespace) -> None:
        if self.ext.stop_scheduler():
            print("tinycoro: scheduler stopped; %tinycoro restart starts a new one")
        else:
            print("tinycoro: the scheduler was not running")
