"""Semaphore: a counter of permits with FIFO, baton-passing waiters.

Like :class:`~tinycoro.Mutex`, ``release()`` with a waiter queued hands the permit straight to
that waiter instead of incrementing the count, so the count is positive only while nobody
waits, and a newcomer never takes a permit ahead of a waiter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..core.checks import check_int
from ._lot import ParkingLot


@dataclass(frozen=True)
class SemaphoreStatistics:
    value: int  # permits available now
    waiters: int


class Semaphore:
    """``await sem.acquire()`` / ``sem.release()``, or ``async with sem:``. FIFO."""

    __slots__ = ("_mu", "_value", "_lot")

    def __init__(self, value: int = 1) -> None:
        check_int("Semaphore value", value)
        if value < 0:
            raise ValueError(f"Semaphore value must be >= 0, got {value}")
        self._mu = threading.Lock()
        self._value = value
        self._lot = ParkingLot(self._mu, self)

    async def acquire(self) -> None:
        """Take a permit, waiting (FIFO) while none is available."""
        with self._mu:
            if self._value > 0:  # positive implies no waiters (baton passing)
                self._value -= 1
                return
            waiter = self._lot.enqueue()
        # A permit handed over while we were being cancelled is given back by _undo.
        await self._lot.park(waiter, self._undo)

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

    async def __aenter__(self) -> "Semaphore":
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    def _waits_on(self) -> str:
        """What a task parked here waits on, in plain words (``TaskInfo.waits_on``)."""
        return f"Semaphore ({self._value} free, {len(self._lot)} waiting)"

    def __repr__(self) -> str:
        return f"<Semaphore value={self._value} waiters={len(self._lot)}>"
