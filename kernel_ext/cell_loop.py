"""The asyncio loop of awaiting cells, turned by the cell's tinycoro engine (see docs/jupyter.md).

An awaiting cell is a tinycoro task on the guest engine (:mod:`kernel_ext.runner`), so tinycoro's
awaitables, combinators, ``tc.timeout`` and ``tc.current_task()`` work in it as in any task. For
its asyncio awaitables, :class:`CellLoop` keeps one private asyncio event loop per extension:

* while a cell runs, that loop is the thread's *running loop*, so ``asyncio.sleep``,
  ``asyncio.gather``, ``asyncio.open_connection`` and asyncio-based libraries find it;
* :meth:`CellLoop.forward` wraps the cell coroutine: an asyncio future the cell awaits is not
  handed to the engine (which refuses it) but waited for on a tinycoro Event that the future's
  done callback sets, and its outcome is then sent into the cell, as an asyncio task would;
* :meth:`CellLoop.drive`, a second task on the guest engine, turns the loop: one iteration
  with a zero timeout (``stop()`` then ``run_forever()``, asyncio's documented one-turn idiom),
  then an io_uring poll on the loop's selector with the next asyncio timer as its deadline. So
  the engine's one sleep point also waits for asyncio's I/O and timers.

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
from typing import Any, Coroutine, Generator

import tinycoro as tc
from tinycoro import uring
from tinycoro.core.local import _local
from tinycoro.core.traps import YIELD, Op, perform_raw

__all__ = ["CellLoop"]


def _noop() -> None:
    pass


def _is_future(obj: object) -> bool:
    return getattr(obj, "_asyncio_future_blocking", None) is not None


class CellLoop:
    """The private asyncio loop of one extension's cells, and the tinycoro code that turns it.

    It leans on two attributes of CPython's ``BaseEventLoop`` that asyncio has no public name
    for (``_ready`` and ``_scheduled``, read only) and on the selector's descriptor: the loop is
    always a ``SelectorEventLoop`` made here, never a user's or uvloop's.
    """

    def __init__(self) -> None:
        self.loop = asyncio.SelectorEventLoop()
        self._selector_fd = self.loop._selector.fileno()  # type: ignore[attr-defined]

    # -- the cell's side ----------------------------------------------------------------------
    @contextlib.contextmanager
    def running(self):
        """Make the loop the thread's running loop for the duration (one cell)."""
        outer = asyncio._get_running_loop()  # ipykernel's, when it runs the cell from its loop
        asyncio._set_running_loop(self.loop)
        try:
            yield
        finally:
            asyncio._set_running_loop(outer)

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
        return interrupt

    # -- the driver ----------------------------------------------------------------------------
    def turn(self) -> None:
        """One loop iteration with a zero timeout, with no tinycoro engine visible."""
        loop = self.loop
        engine, task = _local.engine, _local.task
        _local.engine = _local.task = None  # asyncio tasks' tinycoro awaits use the hosted ring
        asyncio._set_running_loop(None)  # run_forever refuses to start under a running loop
        try:
            loop.stop()
            loop.run_forever()
        finally:
            asyncio._set_running_loop(loop)
            _local.engine, _local.task = engine, task

    async def drive(self) -> None:
        """Turn the loop while the cell runs (a task on the guest engine; cancel it after)."""
        loop = self.loop
        while True:
            self.turn()
            if loop._ready:  # type: ignore[attr-defined]
                await tc.yield_now()
                continue
            scheduled = loop._scheduled  # type: ignore[attr-defined]
            delay = scheduled[0].when() - loop.time() if scheduled else None
            if delay is not None and delay <= 0:
                await tc.yield_now()
                continue
            poll = Op(uring.prep_poll_add, self._selector_fd, select.POLLIN)
            if delay is None:
                await perform_raw(poll)
            else:
                with contextlib.suppress(TimeoutError):
                    async with tc.timeout(delay):
                        await perform_raw(poll)

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel the asyncio tasks cells left behind, close async generators (the hosted ring
        with them) and the default executor, and close the loop. No engine runs here."""
        loop = self.loop
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


class _Forward:
    """The awaitable behind :meth:`CellLoop.forward` (a generator that drives the cell)."""

    __slots__ = ("_cl", "_cell")

    def __init__(self, cl: CellLoop, cell: Coroutine[Any, Any, Any]) -> None:
        self._cl = cl
        self._cell = cell

    def __await__(self) -> Generator[Any, Any, Any]:
        cl, cell, loop = self._cl, self._cell, self._cl.loop
        value: Any = None
        exc: BaseException | None = None
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

