"""asyncio inside tinycoro: ``await tc.aio(awaitable)`` and the scheduler's companion loop.

A tinycoro task cannot await an asyncio future: its context thread runs an engine, not an
asyncio loop. ``tc.aio`` runs the awaitable as an asyncio task on the scheduler's *companion
loop* (one daemon thread per Scheduler, started on first use, stopped and joined when the
scheduler shuts down) and parks the tinycoro task until that asyncio task is over.

Cancellation goes both ways and always waits for the other side: cancelling the tinycoro task
(``task.cancel()``, ``tc.timeout``) cancels the asyncio task, and the tinycoro task sees its
``tc.Cancelled`` (or the timeout) only once the asyncio task has finished, so nothing it started
outlives the await. An asyncio task cancelled from the asyncio side surfaces as
``tc.Cancelled`` at the tinycoro task's await.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import weakref
from typing import Any, Awaitable, TypeVar

from ..core.errors import Cancelled
from ..core.local import thread_state
from ..core.traps import Park, park

log = logging.getLogger("tinycoro")

T = TypeVar("T")


class Companion:
    """An asyncio loop on its own daemon thread, serving one Scheduler's ``tc.aio`` calls."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stopped = False
        self.calls: set[_Call] = set()  # running now; set.add/discard are atomic
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    def _main(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._started.set)
        try:
            loop.run_forever()
            # Stopped: cancel what is left and let it unwind, as asyncio.run does.
            pending = asyncio.all_tasks(loop)
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())  # closes a hosted ring, if any
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def start(self, awaitable: Awaitable[Any], call: "_Call") -> None:
        """Create the asyncio task on the loop's thread; any thread."""
        self.calls.add(call)
        try:
            self.loop.call_soon_threadsafe(call.begin, self.loop, awaitable)
        except BaseException:
            self.calls.discard(call)
            raise

    def busy(self) -> bool:
        return bool(self.calls)

    def stop(self) -> None:
        """Stop the loop (its tasks are cancelled and unwound), join the thread. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # already closed
            pass
        if self.thread is not threading.current_thread():
            self.thread.join()


class _Call:
    """One ``tc.aio`` call: the asyncio task on the companion loop and the parked tinycoro task.

    ``cancel`` may come from the tinycoro side before the asyncio task exists; ``begin`` then
    cancels it as soon as it is created, so a wake always comes.
    """

    __slots__ = ("task", "atask", "cancel_requested", "outcome", "companion", "awaitable")

    def __init__(self, task: Any, companion: Companion) -> None:
        self.task = task
        self.companion = companion
        self.atask: asyncio.Task | None = None
        self.cancel_requested = False
        self.outcome: tuple[str, Any] | None = None
        self.awaitable: Awaitable[Any] | None = None

    def begin(self, loop: asyncio.AbstractEventLoop, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable
        try:
            atask = loop.create_task(_await(awaitable))
        except BaseException as e:  # noqa: BLE001 - delivered to the tinycoro task
            self.outcome = ("error", e)
            self._finish()
            return
        self.atask = atask
        atask.add_done_callback(self._done)
        if self.cancel_requested:
            atask.cancel()

    def request_cancel(self) -> None:  # on the companion loop
        self.cancel_requested = True
        if self.atask is not None:
            self.atask.cancel()

    def _done(self, atask: asyncio.Task) -> None:
        awaitable, self.awaitable = self.awaitable, None
        if atask.cancelled():
            self.outcome = ("cancelled", None)
            # Cancelled before its first step, the task never started _await, so the caller's
            # coroutine never started either: close it, as asyncio closes a task's own
            # coroutine cancelled before it began (else: "coroutine ... was never awaited").
            if inspect.iscoroutine(awaitable) and inspect.getcoroutinestate(awaitable) == inspect.CORO_CREATED:
                awaitable.close()
        else:
            exc = atask.exception()
            self.outcome = ("error", exc) if exc is not None else ("ok", atask.result())
        self._finish()

    def _finish(self) -> None:
        self.companion.calls.discard(self)
        self.task.wake(None)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


# One companion per Scheduler, created under the lock on first use; the scheduler's shutdown
# hook (Scheduler.at_shutdown) stops it.
_lock = threading.Lock()
_companions: "weakref.WeakKeyDictionary[Any, Companion]" = weakref.WeakKeyDictionary()


def companion_for(scheduler: Any) -> Companion:
    with _lock:
        c = _companions.get(scheduler)
        if c is None:
            c = _companions[scheduler] = Companion(f"tinycoro-aio-{scheduler.id}")
            scheduler.at_shutdown.append(c.stop)
            scheduler.busy_elsewhere.append(c.busy)
        elif c._stopped:
            raise RuntimeError("tc.aio(): this scheduler has stopped")
    return c


def _describe(awaitable: Any) -> str:
    return getattr(awaitable, "__qualname__", None) or type(awaitable).__name__


async def aio(awaitable: Awaitable[T]) -> T:
    """Run an asyncio awaitable from a tinycoro task; return its result or raise its exception.

    Inside a tinycoro task it runs as an asyncio task on the scheduler's companion loop (a
    thread started on first use); cancelling either side cancels the other. Awaited inside an
    asyncio task, it simply awaits *awaitable* there.
    """
    if not inspect.isawaitable(awaitable):
        raise TypeError(f"tc.aio() takes an awaitable (a coroutine, task or future), got {awaitable!r}")
    engine = thread_state.engine
    if engine is None:
        if asyncio._get_running_loop() is None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError("tc.aio() awaited outside both a tinycoro task and an asyncio loop")
        return await awaitable
    scheduler = engine.scheduler
    if scheduler is None:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise RuntimeError("tc.aio(): this context belongs to no scheduler")
    companion = companion_for(scheduler)
    call = _Call(thread_state.task, companion)
    companion.start(awaitable, call)

    def abort() -> bool:
        # Cancelled while the asyncio task runs: cancel it there and wait for it to end; the
        # wake comes from its done callback.
        try:
            companion.loop.call_soon_threadsafe(call.request_cancel)
        except RuntimeError:  # the companion loop is closed: its tasks are all over
            pass
        return False

    # undo: a wake that carries the asyncio task's end to a task being cancelled has nothing
    # to give back; the engine then raises the cancellation (or timeout) at this await.
    await park(Park(abort, f"asyncio {_describe(awaitable)}", _nothing_to_undo))
    outcome = call.outcome
    assert outcome is not None  # the wake comes from the done callback, which sets it
    kind, value = outcome
    if kind == "ok":
        return value
    if kind == "error":
        raise value
    raise Cancelled("the asyncio side was cancelled")


def _nothing_to_undo(_value: Any) -> None:
    pass
