"""What ``%load_ext tinycoro`` owns in one IPython shell, and how it is torn down again.

One :class:`Extension` per shell holds the default long-lived :class:`tinycoro.Scheduler`, the
guest engine that cell coroutines run on (see :mod:`tinycoro.kernel_ext.runner`), the IPython state it
replaced (``loop_runner`` and ``autoawait``), and the dashboard refresher, if one was started.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Coroutine

import tinycoro as tc
from tinycoro.core.checks import check_contexts, check_dispatch, default_contexts
from tinycoro.lowlevel import Engine, guest_engine

from .runner import CellRunner
from .signals import signals_blocked
from .tracebacks import format_failure
from .tracebacks import install as install_tracebacks

if TYPE_CHECKING:  # pragma: no cover
    from .refresh import Refresher

__all__ = ["Extension", "default_config", "report_failure", "start_scheduler", "signals_blocked"]

GUEST_RING_ENTRIES = 64  # a cell drives one coroutine; its ring never needs to be large
STOP_TIMEOUT = 5.0  # seconds for cancelled tasks to unwind when the scheduler stops


def default_config() -> tuple[int, str]:
    """Contexts and dispatch for the scheduler started at load time.

    The contexts are what ``contexts=None`` means in this process
    (:func:`tinycoro.core.checks.default_contexts`: ``TINYCORO_CONTEXTS`` when set, a positive
    int, else rule 15's default); ``TINYCORO_DISPATCH`` (``round_robin`` or ``least_loaded``)
    overrides round robin. The kernelspec installer writes both into the kernel's environment
    when asked to. A bad value fails here, at load time, with the variable's name.
    """
    contexts = default_contexts()
    try:
        dispatch = check_dispatch(os.environ.get("TINYCORO_DISPATCH", "").strip() or "round_robin")
    except ValueError as e:
        raise ValueError(f"TINYCORO_DISPATCH: {e}") from None
    return contexts, dispatch


def report_failure(task: tc.Task, exc: BaseException) -> None:
    """The scheduler's ``failure_hook``: print the traceback of a task that failed while
    nothing awaited it to ``sys.stderr``, formatted as IPython formats a cell's error ("Cell
    In[2], line 3", the kernel's colours) and without the runtime's frames
    (:mod:`tinycoro.kernel_ext.tracebacks`).

    The core calls it on the task's context thread inside the task's ``contextvars.Context``
    (rule 9). ipykernel keeps the cell's parent header in a ContextVar, so the traceback
    lands in the cell that spawned the task (its stream is flushed within ~0.2 s), not in
    whichever cell happens to run. It must never raise into the context.
    """
    try:
        where = "" if task.context is None else f" on context {task.context}"
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        text = (
            f"tinycoro: task {task.name!r} (id {task.id}){where} failed and nothing awaited it:\n"
            + format_failure(exc, shell)
        )
        sys.stderr.write(text)
    except Exception:  # noqa: BLE001 - a closed or replaced stderr must not crash a context
        pass


def start_scheduler(contexts: int | None, dispatch: str) -> tc.Scheduler:
    """A started long-lived scheduler whose context threads never receive process signals and
    whose unawaited failures are printed (:func:`report_failure`)."""
    sched = tc.Scheduler(contexts, dispatch=dispatch)
    sched.failure_hook = report_failure
    with signals_blocked():
        return sched.start()


class Extension:
    """The tinycoro state of one shell: scheduler, guest engine, runner, saved IPython state."""

    def __init__(self, shell: Any, contexts: int | None = None, dispatch: str = "round_robin") -> None:
        self.shell = shell
        self._lock = threading.Lock()  # guards scheduler swaps against the dashboard refresher
        self.refresher: "Refresher | None" = None
        self._cancelled_by_restart: int | None = None
        self._restore_run_code: Callable[[], None] | None = None  # see _hand_over_loading_cell
        self.scheduler: tc.Scheduler = start_scheduler(contexts, dispatch)
        try:
            engine = guest_engine(self.scheduler, GUEST_RING_ENTRIES)
        except BaseException:
            self.scheduler.stop()
            raise
        self.runner = CellRunner(engine)
        self._saved = (shell.loop_runner, shell.autoawait)
        shell.loop_runner = self.runner
        shell.autoawait = True
        self._untraceback = install_tracebacks(shell)  # errors about the user's code
        self._previous_default = tc.get_default_scheduler()
        tc.set_default_scheduler(self.scheduler)
        self._hand_over_loading_cell()

    # -- the cell that loads the extension ------------------------------------------------------
    def _hand_over_loading_cell(self) -> None:
        """Let the rest of the cell that ran ``%load_ext tinycoro`` await tinycoro awaitables.

        IPython picks a cell's runner before the cell runs (``InteractiveShell.run_cell`` asks
        ``should_run_async`` and takes ``loop_runner``; ipykernel awaits ``run_cell_async`` on
        its own asyncio loop while ``loop_runner`` is IPython's asyncio runner), so installing
        :class:`CellRunner` here is too late for the cell that loads us. But that cell runs
        its top-level statements one by one, each through ``shell.run_code(code,
        async_=True)`` when it awaits. Until that cell ends (``post_run_cell``) we wrap
        ``run_code``: a statement that awaits and is not already on a tinycoro task is handed
        to the cell runner, which drives it to its end on this thread (blocking the foreign
        loop, as any running cell does), with the same interrupt handling as every later cell.
        """
        shell = self.shell
        original = shell.run_code  # the bound method (or whatever another extension put there)
        had_own = "run_code" in shell.__dict__
        runner = self.runner

        async def run_code(code_obj: Any, result: Any = None, *, async_: bool = False) -> Any:
            coro: Coroutine[Any, Any, Any] = original(code_obj, result, async_=async_)
            if not async_ or tc.current_task() is not None or shell.loop_runner is not runner:
                return await coro  # not awaiting, already on tinycoro, or we were unloaded
            return runner(coro)

        def restore(*_: Any) -> None:
            if shell.__dict__.get("run_code") is run_code:
                if had_own:
                    shell.run_code = original
                else:
                    del shell.run_code  # back to the class's method
            with contextlib.suppress(ValueError):
                shell.events.unregister("post_run_cell", restore)
            self._restore_run_code = None

        shell.run_code = run_code
        shell.events.register("post_run_cell", restore)
        self._restore_run_code = restore

    # -- scheduler lifetime (used by the %tinycoro magics) -------------------------------------
    @property
    def engine(self) -> Engine:
        return self.runner.engine

    def stop_scheduler(self, timeout: float | None = None) -> int | None:
        """Stop the default scheduler: cancel its tasks, join its threads. Returns how many
        live tasks it cancelled (they were counted just before), None if none ran. The tasks
        get *timeout* seconds (default :data:`STOP_TIMEOUT`) to unwind; one the calling cell's
        step has just spawned is pushed first (``Scheduler.stop`` does), so it unwinds too.

        Afterwards no scheduler is the default and the cell engine dispatches nowhere, so
        ``tc.spawn`` in any cell fails with tinycoro's "no default scheduler is running"
        message, which names ``%tinycoro restart``, rather than with a stopped scheduler's
        "create a new Scheduler" (advice a notebook user cannot follow).
        """
        with self._lock:
            sched, refresher = self.scheduler, self.refresher
            self.refresher = None
        if tc.get_default_scheduler() is sched:
            tc.set_default_scheduler(None)
        if self.engine.scheduler is sched:
            self.engine.scheduler = None
        if not sched.running:
            if refresher is not None:
                refresher.stop()
            return None
        cancelled = len(sched.tasks())  # a task ending meanwhile was not cancelled: near enough
        try:
            sched.stop(timeout=STOP_TIMEOUT if timeout is None else timeout)
        finally:
            if refresher is not None:
                refresher.stop()  # renders the final "stopped" state, then its thread ends
        return cancelled

    @property
    def cancelled_by_restart(self) -> int | None:
        """Tasks the last :meth:`restart` cancelled (None before any, or if none ran)."""
        return self._cancelled_by_restart

    def restart(self, contexts: int | None = None, dispatch: str | None = None) -> tc.Scheduler:
        """Stop the current scheduler and start a new one (same settings unless given)."""
        old = self.scheduler
        contexts = check_contexts(old.contexts if contexts is None else contexts)
        dispatch = check_dispatch(old.dispatch if dispatch is None else dispatch)
        refresher = self.refresher  # its dashboards follow the new scheduler
        self._cancelled_by_restart = self.stop_scheduler()
        new = start_scheduler(contexts, dispatch)
        with self._lock:
            self.scheduler = new
            if refresher is not None:
                self.refresher = refresher.follow(new)
        self.engine.scheduler = new
        tc.set_default_scheduler(new)
        return new

    def dashboard_refresher(self) -> "Refresher":
        """The refresher for the current scheduler, started on first use."""
        from .refresh import Refresher

        with self._lock:
            sched = self.scheduler
            if not sched.running:
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
        if self._restore_run_code is not None:
            self._restore_run_code()
        loop_runner, autoawait = self._saved
        if shell.loop_runner is self.runner:
            shell.loop_runner = loop_runner
            shell.autoawait = autoawait
        self._untraceback()
        default = tc.get_default_scheduler()
        self.stop_scheduler()
        if default is self.scheduler or default is None:
            previous = self._previous_default
            if previous is not None and not previous.running:
                previous = None
            tc.set_default_scheduler(previous)
        self.runner.close()  # deferred to the end of the cell if called from an awaiting cell
