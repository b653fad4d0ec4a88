"""Condition: wait for a predicate over state guarded by a :class:`~tinycoro.Mutex`.

``wait()`` must be called holding the mutex. It queues the task on the condition *before*
releasing the mutex, so a notifier (which changes the state under the mutex, then notifies) finds
it queued: no lost wakeup. It then parks; once notified, it re-acquires the mutex (FIFO behind
the mutex's other waiters) and returns holding it.

Interrupts: if the task is cancelled while parked, it still re-acquires the mutex before the
``Cancelled`` propagates (so ``async with m:`` around the wait unlocks a mutex the task holds);
interrupts arriving during that re-acquire are merged and raised afterwards. A waiter that was
notified but then raises instead of returning (cancelled after the notify was handed to it, or
while re-acquiring the mutex) passes the notification on to the next waiter, so a
``notify_one()`` is never swallowed by a task that is going away.

``notify_one``/``notify_all`` do not require the mutex (any thread may call them), but the state
the predicate reads must be changed under the mutex, or a waiter can test it, find it false, and
miss the notify that follows.
"""

from __future__ import annotations

from dataclasses import dataclass
import threading
from typing import Any, Callable

from ..core.local import thread_state
from ..core.traps import consume_budget, foreign_waiter
from ._interrupts import keep_one
from ._lot import ParkingLot, wake_all
from .mutex import Mutex, MutexStatistics


@dataclass(frozen=True)
class ConditionStatistics:
    waiters: int
    mutex: MutexStatistics


class Condition:
    """``await cv.wait(predicate=None)``, ``cv.notify_one()``, ``cv.notify_all()``; FIFO."""

    __slots__ = ("_mu", "_mutex", "_lot")

    def __init__(self, mutex: Mutex | None = None) -> None:
        if mutex is None:
            mutex = Mutex()
        elif not isinstance(mutex, Mutex):
            raise TypeError(f"Condition needs a tc.Mutex, got {mutex!r}")
        self._mu = threading.Lock()
        self._mutex = mutex
        self._lot = ParkingLot(self._mu, self)

    @property
    def mutex(self) -> Mutex:
        return self._mutex

    async def wait(self, predicate: Callable[[], Any] | None = None) -> Any:
        """Release the mutex, wait for a notify, re-acquire it.

        With *predicate*: return its (true) value, waiting as often as needed until it holds;
        it is evaluated with the mutex held, and not waited for at all if already true.
        """
        m = self._mutex
        me = thread_state.task
        if me is None:
            me = foreign_waiter()
        if me is None or not m._locked or m._owner is not me:
            raise RuntimeError(f"{self!r}.wait() must be called by the task holding {m!r}")
        if predicate is None:
            await self._wait_once()
            return None
        # A predicate that holds already returns without waiting: rule 16's gate first (a
        # cancel or timeout due lands here, the mutex still held, as the caller holds it).
        await consume_budget()
        while True:
            result = predicate()
            if result:
                return result
            await self._wait_once()

    async def _wait_once(self) -> None:
        with self._mu:
            waiter = self._lot.enqueue()
        self._mutex.unlock()
        pending: BaseException | None = None
        notified = False
        try:
            await self._lot.park(waiter, self._undo)
            notified = True
        except GeneratorExit:  # the coroutine is being closed: it must not await again
            raise
        except BaseException as e:  # noqa: BLE001 - raised below, once the mutex is ours again
            pending = e
        while True:
            try:
                await self._mutex.lock()
                break
            except GeneratorExit:
                raise
            except BaseException as e:  # noqa: BLE001 - merged, raised with the mutex held
                pending = keep_one(pending, e)
        if pending is not None:
            if notified:
                # Notified, then interrupted while re-acquiring the mutex: we raise instead of
                # returning, so the notify we consumed must reach another waiter (found by the
                # one-slot-buffer stress test: a notify_one could otherwise be lost).
                self.notify_one()
            raise pending

    def _undo(self, _value: Any) -> None:
        # Engine hook: a notify was handed to a waiter that is being cancelled; pass it on.
        self.notify_one()

    def notify_one(self) -> None:
        """Wake the longest-waiting task, if any."""
        self.notify(1)

    def notify(self, n: int = 1) -> None:
        """Wake up to *n* waiting tasks, longest-waiting first."""
        with self._mu:
            lot = self._lot
            waiters = []
            for _ in range(n):
                w = lot.pop()
                if w is None:
                    break
                waiters.append(w)
        wake_all(waiters, None)

    def notify_all(self) -> None:
        """Wake every waiting task, in the order they started waiting."""
        with self._mu:
            waiters = self._lot.pop_all()
        wake_all(waiters, None)

    def statistics(self) -> ConditionStatistics:
        with self._mu:
            n = len(self._lot)
        return ConditionStatistics(n, self._mutex.statistics())

    async def __aenter__(self) -> "Condition":
        await self._mutex.lock()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._mutex.unlock()

    def _waits_on(self) -> str:
        """What a task parked here waits on, in plain words (``TaskInfo.waits_on``)."""
        return f"Condition ({len(self._lot)} waiting)"

    def __repr__(self) -> str:
        return f"<Condition waiters={len(self._lot)} on {self._mutex!r}>"
