"""The cell runner: IPython's ``loop_runner`` for cells that ``await`` at top level.

IPython compiles such a cell into a coroutine (``InteractiveShell.run_cell_async``) and hands it
to ``shell.loop_runner`` on the kernel's main thread. :class:`CellRunner` drives that coroutine
as a tinycoro :class:`~tinycoro.core.task.Task` on a *guest* engine: the main thread acts as a
temporary context with its own ready queue, io_uring ring and eventfd for as long as the cell
runs, while ``tc.spawn`` from the cell dispatches to the extension's long-lived scheduler.

Interrupts (the kernel's SIGINT) and why they are handled the way they are
--------------------------------------------------------------------------
Python runs a signal handler on the main thread between two bytecodes. The default handler
raises ``KeyboardInterrupt`` right there, which could be in the middle of the engine's own
bookkeeping (half-way through moving a task between its queues, or after a CQE was reaped but
before the task was made ready) and leave the engine inconsistent for the next cell. So while
a cell runs, :class:`CellRunner` installs its own handler, which decides by *where* the signal
landed:

* If the interrupted frames between the engine's ``_step`` and the signal are all the cell's
  own code (or IPython's), i.e. the cell is computing between two awaits, it raises
  ``KeyboardInterrupt`` there, exactly as a plain cell would be interrupted. The exception
  unwinds only frames that are not tinycoro's; the engine sees an ordinary task failure.
* Otherwise (the thread is asleep in ``os.eventfd_read``, or inside tinycoro code) it does not
  raise. It queues a call on the engine (a lock-free deque append; the handler must not take
  a lock the interrupted code may hold) and writes the engine's eventfd; the interrupted read
  returns (EINTR counts as a wake-up), and on its next turn the engine asks for
  ``KeyboardInterrupt`` at the cell's pending await (``task._interrupt``, the mechanism behind
  ``Task.cancel``). It cancels the pending io_uring operation in the kernel (or takes the task
  off the waiter list it is parked on) and throws ``KeyboardInterrupt`` into the cell only once
  the operation's completion has arrived, so no buffer is released while the kernel owns it.

Either way the cell's ``finally`` blocks run (and may still await), IPython shows
``KeyboardInterrupt``, and the runner returns only once the cell coroutine has finished.

One gap remains in any Python program that blocks in a system call: if the signal arrives in
the few instructions after the engine's last look at its queues and before the ``read`` system
call starts, there is no EINTR, and Python runs the handler only when the thread next executes
bytecode, i.e. at the next wake-up. For a cell parked on a primitive that could be never. So
while a cell runs, a tiny *tick* task on the same guest engine sleeps in
:data:`TICK` second steps; its timer completion wakes the thread, and a late handler runs
then. The worst-case interrupt latency is one tick; the cost is a few wake-ups a second, and
only while a cell is running.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable, Coroutine

from tinycoro.core.engine import Engine
from tinycoro.core.errors import Cancelled
from tinycoro.core.local import _local
from tinycoro.core.runtime import sleep
from tinycoro.core.task import Task

__all__ = ["CellRunner", "TICK"]

TICK = 0.25  # seconds: the worst-case delay of an interrupt that missed the eventfd read

_STEP_CODE = Engine._step.__code__
_OWN_PACKAGES = ("tinycoro", "kernel_ext")


def _is_own(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__") or ""
    return name.split(".", 1)[0] in _OWN_PACKAGES


def _in_cell_code(frame: FrameType | None) -> bool:
    """True if every frame from *frame* out to the engine's ``_step`` is not tinycoro's own:
    the cell is running its own Python code, where raising is as safe as in a plain cell."""
    while frame is not None:
        if frame.f_code is _STEP_CODE:
            return True
        if _is_own(frame):
            return False
        frame = frame.f_back
    return False


async def _tick() -> None:
    """Wake the cell's thread every TICK s, so a signal handler Python deferred gets to run."""
    while True:
        await sleep(TICK)


class CellRunner:
    """Callable installed as ``shell.loop_runner``; drives one cell coroutine at a time.

    ``engine`` is the guest engine (``Engine(None, scheduler, entries, guest=True)``) owned by
    the extension; the runner never creates threads.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.running: Task | None = None  # the cell task being driven, if any
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
        if _local.engine is not None:
            coro.close()
            raise RuntimeError(
                "a cell that awaits cannot be run from inside a tinycoro task "
                "(e.g. get_ipython().run_cell() in an awaiting cell); await the work instead"
            )
        if engine.ring.closed:
            coro.close()
            raise RuntimeError("the tinycoro extension was unloaded; %load_ext tinycoro again")
        if not self._busy.acquire(blocking=False):
            coro.close()
            raise RuntimeError(
                "another awaiting cell is running on the tinycoro runner in another thread (an "
                "ipykernel subshell?); the cell engine serves one cell at a time"
            )
        try:
            restore = self._install_sigint()
        except BaseException:  # e.g. the kernel's KeyboardInterrupt, just before we took over
            self._busy.release()
            coro.close()
            raise
        try:
            task = Task(coro, engine, name="<cell>")
            tick = Task(_tick(), engine, name="<cell interrupt tick>")
            self.running = task
            engine.push(task)
            engine.push(tick)
            try:
                engine.run(until=task)
                self.running = None  # from here on, a SIGINT is too late for this cell
                tick.cancel()
                engine.run(until=tick)
            except BaseException as exc:  # the engine itself failed mid-turn
                self._abandon(task, tick, exc)
                raise
        finally:
            self.running = None
            restore()
            self._busy.release()
            if self._close_after:
                self._close_after = False
                self.close()
        return task.result()

    # -- interrupts ---------------------------------------------------------------------------
    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT while a cell runs (main thread, between two bytecodes); see the module doc."""
        self.interrupts += 1
        task = self.running
        if task is None or task.done():
            return  # the cell is returning; the interrupt arrived too late to matter
        if _local.task is task and _in_cell_code(frame):
            raise KeyboardInterrupt  # the cell computes between awaits: interrupt it right here
        # Nothing here may take a lock: the handler may have interrupted this very thread
        # while it held one (Task._interrupt takes the task module's lock). A deque append
        # and an eventfd write are safe; the engine does the rest on its next turn.
        self.engine.call_soon(self._interrupt_cell, task)
        self.engine.wake()

    @staticmethod
    def _interrupt_cell(task: Task) -> None:
        """On the engine's own turn: deliver KeyboardInterrupt at the cell's pending await."""
        task._interrupt(KeyboardInterrupt())

    def _install_sigint(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None  # signals are only delivered to the main thread anyway
        handler = self._on_sigint
        previous = signal.signal(signal.SIGINT, handler)
        if previous is None:  # installed from C; the best stand-in is Python's default
            previous = signal.default_int_handler

        def restore() -> None:
            if signal.getsignal(signal.SIGINT) == handler:
                signal.signal(signal.SIGINT, previous)

        return restore

    def _abandon(self, cell: Task, tick: Task, exc: BaseException) -> None:
        """Last resort when ``engine.run`` itself raised: never leave the cell suspended.

        Cancel and wait out what the cell has in the kernel (its buffers must outlive the
        operations), then close the coroutines, which runs their ``finally`` blocks (an
        ``await`` inside one of them fails, since nothing can drive it any more).
        """
        engine = self.engine
        try:
            engine._drain()
        finally:
            engine.ready.clear()
            engine.calls.clear()
            engine.parked.clear()
            engine.stop_requested = False
            for task, outcome in ((cell, exc), (tick, Cancelled())):
                if task.done():
                    continue
                coro = task._coro
                try:
                    coro.close()
                except BaseException as e:  # noqa: BLE001 - a finally block that awaited
                    print(f"tinycoro: {task.name} did not close cleanly: {e!r}", file=sys.stderr)
                task._finish(None, outcome)
                task._retrieved = True  # the runner re-raises it; nothing to log at collection

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the guest engine; deferred to the end of the cell if one is running now."""
        if self.running is not None:
            self._close_after = True
            return
        if not self.engine.ring.closed:
            self.engine.close()
