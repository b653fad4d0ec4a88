"""The cell runner: IPython's ``loop_runner`` for cells that ``await`` at top level.

IPython compiles such a cell into a coroutine (``InteractiveShell.run_cell_async``) and hands it
to ``shell.loop_runner`` on the kernel's main thread. :class:`CellRunner` drives that coroutine
as a tinycoro :class:`~tinycoro.core.task.Task` on a *guest* engine: the main thread acts as a
temporary context with its own ready queue, io_uring ring and eventfd for as long as the cell
runs, while ``tc.spawn`` from the cell dispatches to the extension's long-lived scheduler.
The cell's asyncio awaitables are forwarded to the kernel's own asyncio loop (the one that
called the runner), which a second task on the same engine turns while the cell runs
(:mod:`tinycoro.kernel_ext.cell_loop`), so a cell awaits both kinds.

Interrupts (the kernel's SIGINT) and why they are handled the way they are
--------------------------------------------------------------------------
Python runs a signal handler on the main thread between two bytecodes. The default handler
raises ``KeyboardInterrupt`` right there, which could be in the middle of the engine's own
bookkeeping (in ``_step`` between resuming the cell and acting on what it yielded, after a
CQE was reaped but before the task was made ready) and leave the engine inconsistent, or
finish the cell task while its coroutine is still suspended (rule 12). So while a
cell runs, :class:`CellRunner` installs its own handler, which decides by *where* the signal
landed (:func:`tinycoro.lowlevel.user_frames_to`):

* If the interrupted frame and every frame out to the cell coroutine's outermost frame are
  the cell's own code (or IPython's, or a library's), i.e. the cell computes between two
  awaits, it raises ``KeyboardInterrupt`` there, exactly as a plain cell would be
  interrupted. The exception unwinds only frames that are not tinycoro's; the engine sees an
  ordinary task failure.
* Otherwise (the thread is asleep in the engine's sleep point, or in tinycoro code, or the
  step frame itself was interrupted) it does not raise. It queues a call on the engine (a
  lock-free deque append; the handler must not take a lock the interrupted code may hold)
  that asks for ``KeyboardInterrupt`` at the cell's pending await (``task.interrupt``, the
  mechanism behind ``Task.cancel``): the pending io_uring operation is cancelled in the
  kernel (or the task taken off the waiter list it is parked on) and ``KeyboardInterrupt``
  is thrown into the cell once the operation's completion has arrived, so no buffer is
  released while the kernel owns it.

Either way the cell's ``finally`` blocks run (and may still await), IPython shows
``KeyboardInterrupt``, and the runner returns only once the cell coroutine has finished. A
``KeyboardInterrupt`` raised by the handler has the handler's own frame as its innermost
traceback entry; while a cell runs, the runner registers an IPython custom exception handler
(``set_custom_exc``, only if none is set) that shows it without that frame, as a plain cell's
interrupt looks.

Waking up: a signal that arrives just before the engine blocks in ``read(2)`` of its eventfd
interrupts no system call, and Python runs the handler only when the thread next executes
bytecode. So while a cell runs, ``signal.set_wakeup_fd`` points at a socket on which the cell's
engine keeps an io_uring receive in flight (:class:`~tinycoro.lowlevel.SignalWakeup`): the C
level handler writes it the moment the signal arrives, the completion writes the eventfd, and
the handler runs at once. No polling; the previous wakeup fd is restored after the cell.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, Callable, Coroutine

from tinycoro.lowlevel import (
    Engine,
    SignalWakeup,
    Task,
    abandon,
    current_engine,
    current_task,
    run_guest,
    start_guest,
    user_frames_to,
)

from .cell_loop import CellLoop
from .tracebacks import show as show_traceback
from .tracebacks import strip

__all__ = ["CellRunner"]

# The runner's own frames are runtime code for the interrupt rules (lowlevel.protect_package):
# they are, being tinycoro.kernel_ext's.


def _ipython_shell() -> Any:
    """The running IPython shell, if IPython is in use at all (the runner also runs bare)."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _without_handler_frame(tb: TracebackType | None) -> TracebackType | None:
    """*tb* without the entries of the SIGINT handler's frame (always the innermost one)."""
    head = tb
    while head is not None and head.tb_frame.f_code is _HANDLER_CODE:
        head = head.tb_next
    entry = head
    while entry is not None and entry.tb_next is not None:
        if entry.tb_next.tb_frame.f_code is _HANDLER_CODE:
            entry.tb_next = entry.tb_next.tb_next
        else:
            entry = entry.tb_next
    return head


def _show_interrupt(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset=None):
    """IPython custom exception handler for KeyboardInterrupt in a cell: show it as a plain
    cell's interrupt is shown, without the runner's handler frame nor the runtime's."""
    tb = _without_handler_frame(tb)
    return show_traceback(shell, etype, value.with_traceback(tb), tb, tb_offset)


class CellRunner:
    """Callable installed as ``shell.loop_runner``; drives one cell coroutine at a time.

    ``engine`` is the guest engine (``Engine(None, scheduler, entries, guest=True)``) owned by
    the extension; the runner never creates threads.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.cell_loop = CellLoop()  # serves the cells' asyncio awaitables
        self.running: Task | None = None  # the cell task being driven, if any
        self._cell: Coroutine[Any, Any, Any] | None = None  # its coroutine (IPython's)
        self.interrupts = 0  # SIGINTs received while a cell ran
        self._close_after = False
        self._busy = threading.Lock()  # one cell at a time: the guest engine has one owner

    def __repr__(self) -> str:  # shown by IPython's %autoawait
        return "tinycoro"

    def __str__(self) -> str:
        return "tinycoro"

    # -- IPython's loop_runner protocol ---------------------------------------------------------
    def __call__(self, coro: Coroutine[Any, Any, Any]) -> Any:
        engine = self.engine
        if current_engine() is not None:
            coro.close()
            raise RuntimeError(
                "a cell that awaits cannot be run from inside a tinycoro task "
                "(e.g. get_ipython().run_cell() in an awaiting cell); await the work instead"
            )
        if engine.closed:
            coro.close()
            raise RuntimeError("the tinycoro extension was unloaded; %load_ext tinycoro again")
        if not self._busy.acquire(blocking=False):
            coro.close()
            raise RuntimeError(
                "another awaiting cell is running on the tinycoro runner, in another thread (an "
                "ipykernel subshell?) or around this call (asyncio work of that cell, e.g. a "
                "widget callback, ran this one); the cell engine serves one cell at a time"
            )
        # The cell is known to the handler before the handler exists: an interrupt from here
        # on is delivered to it (at its first await if it has not started yet).
        cell_loop = self.cell_loop
        self._cell = coro
        forward = cell_loop.forward(coro)
        task = self.running = Task(forward, engine, name="<cell>")
        try:
            restore, wakeup = self._install_sigint()
        except BaseException:  # e.g. the kernel's KeyboardInterrupt, just before we took over
            self.running = self._cell = None
            self._busy.release()
            forward.close()
            coro.close()
            raise
        try:
            helpers = [Task(cell_loop.drive(), engine, name="<cell asyncio loop>")]
            if wakeup is not None:
                helpers.append(Task(wakeup.watch(), engine, name="<cell signal wakeup>"))
            for t in (task, *helpers):
                start_guest(engine, t)  # so that abandon() finds it wherever it is

            def serve() -> None:
                run_guest(engine, task)
                self.running = None  # from here on, a SIGINT is too late for this cell
                for t in helpers:
                    t.cancel()
                    run_guest(engine, t)  # its poll or receive is cancelled and reaped

            try:
                cell_loop.run(serve)  # with the loop serving the cell's asyncio work running
            except BaseException as exc:  # the engine itself failed mid-turn
                # Never leave the cell suspended: cancel and wait out its I/O, take it off any
                # waiter list, close its coroutine (finally blocks run) and finish it with exc.
                abandon(engine, exc)
                raise
        finally:
            self.running = self._cell = None
            restore()
            self._busy.release()
            if self._close_after:
                self._close_after = False
                self.close()
        failure = task.exception()
        if failure is not None:
            raise strip(failure.with_traceback(_without_handler_frame(failure.__traceback__)))
        return task.result()

    # -- interrupts ---------------------------------------------------------------------------
    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT while a cell runs (main thread, between two bytecodes); see the module doc."""
        self.interrupts += 1
        task = self.running
        if task is None or task.done():
            return  # the cell is returning; the interrupt arrived too late to matter
        cell = self._cell
        if (
            current_task() is task
            and cell is not None
            and user_frames_to(frame, getattr(cell, "cr_frame", None))
        ):
            raise KeyboardInterrupt  # the cell computes between awaits: interrupt it right here
        # Nothing here may take a lock: the handler may have interrupted this very thread
        # while it held one (Task.interrupt takes the task module's lock). A deque append
        # (and an eventfd write if the engine sleeps) is safe; the engine does the rest.
        self.engine.call_soon(self._interrupt_cell, task)

    @staticmethod
    def _interrupt_cell(task: Task) -> None:
        """On the engine's own turn: deliver KeyboardInterrupt at the cell's pending await."""
        task.interrupt(KeyboardInterrupt())

    def _install_sigint(self) -> tuple[Callable[[], None], SignalWakeup | None]:
        """Install the cell's SIGINT handler and signal wakeup; return (restore, wakeup)."""
        if threading.current_thread() is not threading.main_thread():
            return (lambda: None), None  # signals are only handled on the main thread anyway
        handler = self._on_sigint
        previous = signal.signal(signal.SIGINT, handler)
        if previous is None:  # installed from C; the best stand-in is Python's default
            previous = signal.default_int_handler
        try:
            wakeup = SignalWakeup()
        except BaseException:
            signal.signal(signal.SIGINT, previous)
            raise
        unshow = self._install_show_interrupt()

        def restore() -> None:
            unshow()
            wakeup.close()
            if signal.getsignal(signal.SIGINT) == handler:
                signal.signal(signal.SIGINT, previous)

        return restore, wakeup

    @staticmethod
    def _install_show_interrupt() -> Callable[[], None]:
        shell = _ipython_shell()
        if shell is None or getattr(shell, "custom_exceptions", None) != ():
            return lambda: None  # somebody else's custom handler: leave it alone

        def restore() -> None:
            if shell.custom_exceptions == (KeyboardInterrupt,):
                shell.set_custom_exc((), None)  # IPython's own default state

        shell.set_custom_exc((KeyboardInterrupt,), _show_interrupt)
        return restore

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the guest engine; deferred to the end of the cell if one is running now."""
        if self.running is not None:
            self._close_after = True
            return
        if not self.engine.closed:
            self.engine.close()
        self.cell_loop.close()


_HANDLER_CODE = CellRunner._on_sigint.__code__
