"""The asyncio loop of awaiting cells, turned by the cell's tinycoro engine (see docs/jupyter.md).

An awaiting cell is a tinycoro task on the guest engine (:mod:`tinycoro.kernel_ext.runner`), so tinycoro's
awaitables, combinators, ``tc.timeout`` and ``tc.current_task()`` work in it as in any task. Its
asyncio awaitables are served by *the kernel's own asyncio loop*: the one that called the cell
runner (ipykernel's tornado-on-asyncio loop, which runs on the main thread between cells). So
asyncio objects a cell makes (futures, ``asyncio.Event``, ``asyncio.create_task``) bind to the
loop that keeps turning between cells: background asyncio tasks (heartbeats, pools, keep-alives)
carry on while the kernel is idle, as in a plain kernel, and the loop reports
``is_running()``, as asyncio libraries (dask's, tornado's) check. Only where no such loop runs
(IPython without a kernel loop, or a loop that is not a ``SelectorEventLoop``, e.g. uvloop) does
a private loop of :class:`CellLoop` serve the cell, run (``run_forever``) for the cell's duration
and idle between cells.

* :meth:`CellLoop.run` calls the cell's engine with that loop running on the thread; in the
  kernel's loop, the asyncio task that called the runner (ipykernel's ``execute_request``) is
  set aside for the duration, as it would be while awaiting;
* :meth:`CellLoop.forward` wraps the cell coroutine: an asyncio future the cell awaits is not
  handed to the engine (which refuses it) but waited for on a tinycoro Event that the future's
  done callback sets, and its outcome is then sent into the cell, as an asyncio task would.
  While the cell's code runs, asyncio's current task is the cell's asyncio face
  (:class:`_CellTask`), so ``asyncio.timeout`` and ``asyncio.TaskGroup`` work in it;
* :meth:`CellLoop.drive`, a second task on the guest engine, turns the loop while the cell runs:
  one nested iteration with a zero timeout (``_run_once``, as the loop's own ``run_forever``
  does), then an io_uring poll on the loop's selector with the next asyncio timer as its
  deadline. So the engine's one sleep point also waits for asyncio's I/O and timers. Between
  cells the kernel turns its loop itself.

Inside a turn no tinycoro engine is visible on the thread, so tinycoro awaitables awaited by
asyncio tasks (``asyncio.gather(tc.sleep(1), ...)``) run on the ring tinycoro hosts on the
loop (:mod:`tinycoro.aio.host`), and an interrupt landing in a turn is delivered at the cell's
pending await, never inside asyncio's bookkeeping.

Interrupted while it waits on an asyncio future, the cell cancels that future and waits until
it is done (a task finishes its own cancellation first, so asyncio's I/O is settled as
tinycoro's is), then ``KeyboardInterrupt`` (or a ``tc.timeout``'s cancellation) is raised at
the cell's ``await``. A second interrupt stops that wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from typing import Any, Callable, Coroutine, Generator, TypeGuard, TypeVar, cast

import tinycoro as tc
from tinycoro import uring
from tinycoro.lowlevel import YIELD, Op, Task, current_task, outside_engine, perform_raw

__all__ = ["CellLoop"]

T = TypeVar("T")

# asyncio's record of the task that runs on a loop (C implementations, no public name): the
# cell is entered as its own task for each of its steps (_CellTask); the task that called the
# runner is set aside while the cell runs (CellLoop._inside).
# Typed for any task-like object: the cell's face (_CellTask) stands in for an asyncio.Task.
_enter_task: Callable[[asyncio.AbstractEventLoop, Any], None] = asyncio.tasks._enter_task
_leave_task: Callable[[asyncio.AbstractEventLoop, Any], None] = asyncio.tasks._leave_task


def _noop() -> None:
    pass


def _entered(context: Any) -> bool:
    """Whether *context* (a ``contextvars.Context``) is entered now, on this thread or another:
    running a callback in it would raise "cannot enter context"."""
    if context is None:
        return False
    try:
        context.run(_noop)
    except RuntimeError:
        return True
    return False


def _is_future(obj: object) -> bool:
    return getattr(obj, "_asyncio_future_blocking", None) is not None


def _turnable(loop: asyncio.AbstractEventLoop | None) -> TypeGuard[asyncio.AbstractEventLoop]:
    """Whether *loop*, this thread's running loop, can serve a cell: a running CPython
    selector loop (ipykernel's), whose iterations the cell's engine can make."""
    return (
        isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop)
        and hasattr(loop, "_run_once")
        and loop.is_running()
    )


class CellLoop:
    """The asyncio loop that serves one extension's cells, and the tinycoro code that turns it.

    It leans on CPython's ``BaseEventLoop`` in ways asyncio has no public name for: its
    ``_run_once`` (one iteration; ``run_forever`` is a loop of it), ``_ready`` and
    ``_scheduled`` (read only), ``tasks._enter_task``/``_leave_task`` (to set aside the task
    that called the runner) and the selector's descriptor. :func:`_turnable` checks that the
    loop is of that kind; otherwise the private ``SelectorEventLoop`` made here serves.
    """

    def __init__(self) -> None:
        self.private = asyncio.SelectorEventLoop()  # for when the thread runs no usable loop
        self.loop: asyncio.AbstractEventLoop = self.private  # serving this (or the last) cell
        self.face: _CellTask | None = None  # the running cell's asyncio face, entered on loop

    # -- the cell's side ----------------------------------------------------------------------
    def run(self, fn: Callable[[], T]) -> T:
        """Return ``fn()`` (the cell's engine, run to the cell's end), called with the loop that
        serves the cell running on this thread."""
        outer = asyncio._get_running_loop()  # ipykernel's, which called the runner
        if _turnable(outer):
            self.loop = outer
            return self._inside(outer, fn)
        self.loop = loop = self.private
        outcome: list[Any] = []

        def body() -> None:
            try:
                outcome.append(self._inside(loop, fn))
            except BaseException as e:  # noqa: BLE001 - re-raised outside run_forever
                outcome.append(_Raised(e))
            finally:
                loop.stop()

        asyncio._set_running_loop(None)  # run_forever refuses to start under another loop
        try:
            loop.call_soon(body)
            loop.run_forever()
        finally:
            asyncio._set_running_loop(outer)
        if not outcome:  # the loop stopped before body ran (it cannot, but never hide it)
            raise RuntimeError("the cell's asyncio loop stopped before the cell ran")
        if isinstance(outcome[0], _Raised):
            raise outcome[0].exc
        return outcome[0]

    @staticmethod
    def _inside(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
        """``fn()`` inside one of *loop*'s callbacks, whose nested turns ``fn`` makes."""
        # The asyncio task that called the runner (ipykernel's execute_request) is set aside,
        # as it would be while it awaited: asyncio tasks then step in the cell's turns, and in
        # the cell current_task() is the cell's own face (_CellTask), not that task.
        caller = asyncio.current_task(loop)
        if caller is not None:
            _leave_task(loop, caller)
        ready = loop._ready  # type: ignore[attr-defined]
        waiting = len(ready)
        try:
            return fn()
        finally:
            # The iteration that runs this callback counted its ready callbacks before running
            # them, and will pop that many; our turns ran some of them. Leave at least as many
            # as there were (no-ops), or it would pop from an empty queue.
            for _ in range(waiting - len(ready)):
                loop.call_soon(_noop)
            if caller is not None:
                _enter_task(loop, caller)

    def poke(self) -> None:
        """Make the driver turn the loop soon (it may be waiting in its poll)."""
        self.loop.call_soon_threadsafe(_noop)  # writes the loop's self-pipe: the poll completes

    async def forward(self, cell: Coroutine[Any, Any, Any]) -> Any:
        """Run *cell*, passing tinycoro traps to the engine and waiting out asyncio futures."""
        return await _Forward(self, cell)

    def _await_future(self, fut: asyncio.Future) -> Generator[Any, Any, BaseException | None]:
        """Wait (as a tinycoro task) until *fut* is done; return the interrupt that arrived
        meanwhile, if any, after cancelling *fut* and letting it finish."""
        done = tc.Event()
        fut.add_done_callback(lambda _f: done.set())
        self.poke()  # the cell may have queued callbacks and timers: the loop must see them
        try:
            yield from done.wait().__await__()
            return None
        except BaseException as exc:  # noqa: BLE001 - an interrupt or a tc.timeout's cancel
            interrupt = exc.with_traceback(None)  # raised afresh at the cell's await
        fut.cancel()
        self.poke()
        try:
            while not fut.done():  # a task finishes its cancellation (its finally blocks) first
                yield from done.wait().__await__()
        except BaseException:  # noqa: BLE001 - a second interrupt: stop waiting for it
            pass
        if not fut.done():
            return interrupt
        if isinstance(interrupt, asyncio.CancelledError):
            # asyncio's own cancel (of the cell's asyncio face, by asyncio.timeout, say): the
            # cell takes the future's outcome, as an asyncio task does (CancelledError, or
            # what a task that absorbed its cancellation returned).
            return None
        if not fut.cancelled():
            fut.exception()  # the interrupt is what the cell sees; not "never retrieved"
        return interrupt

    # -- the driver ----------------------------------------------------------------------------
    def turn(self, loop: asyncio.AbstractEventLoop) -> bool:
        """One iteration of *loop* with a zero timeout, with no tinycoro engine visible and
        the cell's asyncio face set aside (the loop's tasks step here); True if callbacks that
        can run here are ready after it."""
        face = self.face
        if face is not None:
            _leave_task(loop, face)
        # Callbacks that must run in a context entered right now (further down this thread's
        # stack) wait for the cell's end: ipykernel 7 steps every shell message's task in one
        # persistent Context, which the execute_request that runs this cell has entered, so the
        # next cell's request, queued by Run All, would fail with "cannot enter context".
        # After the cell, the kernel's loop runs them, and they wait for the cell's lock.
        ready = loop._ready  # type: ignore[attr-defined]
        deferred = [h for h in ready if _entered(getattr(h, "_context", None))]
        for h in deferred:
            ready.remove(h)
        try:
            with outside_engine():  # asyncio tasks' tinycoro awaits use the hosted ring
                loop.call_soon(_noop)  # something is ready: the iteration polls without blocking
                loop._run_once()  # type: ignore[attr-defined]
            runnable = bool(ready)
        finally:
            ready.extendleft(reversed(deferred))
            if face is not None:
                _enter_task(loop, face)
        return runnable

    async def drive(self) -> None:
        """Turn the loop while the cell runs (a task on the guest engine; cancel it after)."""
        loop = self.loop
        selector_fd = loop._selector.fileno()  # type: ignore[attr-defined]
        while True:
            if self.turn(loop):
                await tc.yield_now()
                continue
            scheduled = loop._scheduled  # type: ignore[attr-defined]
            delay = scheduled[0].when() - loop.time() if scheduled else None
            if delay is not None and delay <= 0:
                await tc.yield_now()
                continue
            poll = Op(uring.prep_poll_add, selector_fd, select.POLLIN)
            if delay is None:
                await perform_raw(poll)
            else:
                with contextlib.suppress(TimeoutError):
                    async with tc.timeout(delay):
                        await perform_raw(poll)

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel the asyncio tasks cells left on the private loop, close its async generators
        (the hosted ring with them) and default executor, and close it. No engine runs here.
        The kernel's own loop is the kernel's: what cells left there lives on, as in a plain
        kernel."""
        loop = self.private
        if loop.is_closed():
            return
        outer = asyncio._get_running_loop()
        asyncio._set_running_loop(None)
        try:
            left = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in left:
                t.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            asyncio._set_running_loop(outer)


class _Raised:
    """What :meth:`CellLoop.run`'s callback raised, carried out of ``run_forever``."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _CellTask:
    """The cell as asyncio sees it: ``asyncio.current_task()`` while the cell's code runs.

    The cell is a tinycoro task, not an asyncio one, but asyncio's structured code asks for
    the current task and uses a small part of it: ``asyncio.timeout`` (and ``wait_for`` on
    Python 3.12+) and ``asyncio.TaskGroup`` call ``cancel()``, ``cancelling()`` and
    ``uncancel()``. ``cancel()`` asks for ``asyncio.CancelledError`` at the cell's pending
    await through the tinycoro interrupt path (the one a ``tc.timeout`` or the stop button
    takes): an awaited asyncio future is cancelled and waited for, a pending io_uring
    operation is cancelled in the kernel. When ``uncancel()`` brings the count back to zero,
    cancellations still pending are withdrawn, so one that lost a race with the awaited
    future's completion does not surface at a later await (as Python 3.13's tasks do).
    """

    __slots__ = ("_task", "_cell", "_loop", "_requests", "_pending")

    def __init__(self, task: Task, cell: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        self._task = task
        self._cell = cell
        self._loop = loop
        self._requests = 0
        self._pending: list[BaseException] = []

    def cancel(self, msg: Any = None) -> bool:
        exc = asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)
        if not self._task.interrupt(exc):
            return False  # the cell has finished
        self._requests += 1
        self._pending.append(exc)
        return True

    def cancelling(self) -> int:
        return self._requests

    def uncancel(self) -> int:
        if self._requests > 0:
            self._requests -= 1
            if self._requests == 0:
                for exc in self._pending:
                    self._task.withdraw(exc)  # the cell's own thread: it is the owner
                self._pending.clear()
        return self._requests

    def done(self) -> bool:
        return self._task.done()

    def cancelled(self) -> bool:
        return False  # while asyncio can see it, the cell runs

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def get_name(self) -> str:
        return "<cell>"

    def get_coro(self) -> Coroutine[Any, Any, Any]:
        return self._cell

    def __repr__(self) -> str:
        return f"<the cell, as asyncio's current task; tinycoro {self._task!r}>"


class _Forward:
    """The awaitable behind :meth:`CellLoop.forward` (a generator that drives the cell)."""

    __slots__ = ("_cl", "_cell")

    def __init__(self, cl: CellLoop, cell: Coroutine[Any, Any, Any]) -> None:
        self._cl = cl
        self._cell = cell

    def __await__(self) -> Generator[Any, Any, Any]:
        cl, cell = self._cl, self._cell
        loop = cl.loop  # set by CellLoop.run before the cell's first step, which is now
        # The face is asyncio's current task on the loop for the cell's whole run; only the
        # turns set it aside (CellLoop.turn), as they are the one place other asyncio tasks
        # step. Entering it once, not around each step, keeps a cell's step as cheap as before.
        me = cast(Task, current_task())  # the cell's task is running this
        face = cl.face = _CellTask(me, cell, loop)
        _enter_task(loop, face)
        value: Any = None
        exc: BaseException | None = None
        try:
            while True:
                try:
                    y = cell.send(value) if exc is None else cell.throw(exc)
                except StopIteration as e:
                    return e.value
                value = exc = None
                if y is None:  # asyncio's bare yield (sleep(0)): let the loop turn, then resume
                    y = YIELD
                    cl.poke()
                if not _is_future(y):  # a tinycoro trap (anything else: the engine's TypeError)
                    if loop._ready:  # type: ignore[attr-defined]
                        cl.poke()  # the cell queued asyncio callbacks, then awaits tinycoro
                    try:
                        value = yield y
                    except BaseException as e:  # noqa: BLE001 - delivered to the cell's await
                        exc = e
                    continue
                y._asyncio_future_blocking = False  # what an asyncio task does with it
                if y.get_loop() is not loop:
                    exc = RuntimeError(f"the cell awaited {y!r}, attached to a different loop")
                    continue
                exc = yield from cl._await_future(y)
        finally:
            cl.face = None
            if asyncio.current_task(loop) is face:
                _leave_task(loop, face)
