"""Semaphore: a counter of permits with FIFO, baton-passing waiters.

Like :class:`~tinycoro.Mutex`, ``release()`` with a waiter queued hands the permit straight to
that waiter instead of incrementing the count, so the count is positive only while nobody
waits, and a newcomer never takes a permit ahead of a waiter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Awaitable

from ..core.checks import check_int
from ..core.traps import DONE, consume_budget
from ._lot import Acquirable, Acquisition, ParkingLot, acquisition, spend


@dataclass(frozen=True)
class SemaphoreStatistics:
    value: int  # permits available now
    waiters: int


class Semaphore(Acquirable):
    """``await sem.acquire()`` / ``sem.release()``, or ``async with sem:``. FIFO."""

    __slots__ = ("_mu", "_value", "_lot")

    def __init__(self, value: int = 1) -> None:
        check_int("Semaphore value", value)
        if value < 0:
            raise ValueError(f"Semaphore value must be >= 0, got {value}")
        self._mu = threading.Lock()
        self._value = value
        self._lot = ParkingLot(self._mu, self)

    def acquire(self) -> Acquisition:
        """``await sem.acquire()``: take a permit, waiting (FIFO) while none is available.

        A permit that is there is taken at once, without suspending, and spends one unit of
        the engine's cooperative budget (rule 16, as ``Mutex.lock()`` does): at zero, or when a
        cancel waits for the task's next await, it yields once first, so that cancel lands
        before a permit is taken. A permit handed to a waiter that is being cancelled goes
        back (to the next waiter or the count). The work is done when awaited."""
        return acquisition(self)

    def _acquire(self) -> Any:
        """Take a permit and return ``DONE``, or return what yields first or waits."""
        # Only a permit taken at once counts in the budget (a look without _mu: it decides
        # the charge, _take_or_park decides the take); a wait for one parks, which suspends.
        if self._value > 0 and not spend():
            return self._acquire_later()
        return self._take_or_park()

    def _take_or_park(self) -> Any:
        """Take a permit and return ``DONE``, or return the wait for one."""
        with self._mu:
            if self._value > 0:  # positive implies no waiters (baton passing)
                self._value -= 1
                return DONE
            waiter = self._lot.enqueue()
        # A permit handed over while we were being cancelled is given back by _undo.
        return self._lot.park(waiter, self._undo)

    async def _acquire_later(self) -> None:
        await consume_budget()  # spent, or an interrupt is due: it is raised here
        await self._take_or_park()

    def try_acquire(self) -> bool:
        """Take a permit if one is available now; never waits."""
        with self._mu:
            if self._value > 0:
                self._value -= 1
                return True
            return False

    def release(self) -> None:
        """Return a permit: to the first waiter if any, else to the count. Any thread."""
        with self._mu:
            waiter = self._lot.pop()
            if waiter is None:
                self._value += 1
                return
        waiter.task.wake(None)

    def _undo(self, _value: Any) -> None:
        self.release()

    @property
    def value(self) -> int:
        return self._value

    def statistics(self) -> SemaphoreStatistics:
        with self._mu:
            return SemaphoreStatistics(self._value, len(self._lot))

    def __aenter__(self) -> Awaitable[None]:
        """``async with sem:`` takes a permit as ``await sem.acquire()`` does; ``as`` binds
        None, as with ``asyncio.Semaphore``."""
        return self._acquire()

    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[None]:
        """Return the permit (on exceptions and cancellation too); never suppresses."""
        self.release()
        return DONE

    def _waits_on(self) -> str:
        """What a task parked here waits on, in plain words (``TaskInfo.waits_on``)."""
        return f"Semaphore ({self._value} free, {len(self._lot)} waiting)"

    def __repr__(self) -> str:
        return f"<Semaphore value={self._value} waiters={len(self._lot)}>"
