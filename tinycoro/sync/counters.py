"""Latch and WaitGroup: counters whose waiters are released when the count reaches zero.

Both decide under one lock whether the count is zero and, if not, queue the waiter in the same
critical section; the call that brings the count to zero pops every waiter in that same lock. So
a ``count_down()``/``done()`` racing with ``wait()`` on another thread cannot lose the wakeup (the
C++ original's wait group could: it checked the count and queued the waiter in two steps).
Every decrement therefore happens before any waiter it releases proceeds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..core.checks import check_int
from ._lot import ParkingLot, Waiter, wake_all


@dataclass(frozen=True)
class CounterStatistics:
    count: int
    waiters: int


class _Counter:
    __slots__ = ("_mu", "_count", "_lot")

    def __init__(self, count: int) -> None:
        self._mu = threading.Lock()
        self._count = count
        self._lot = ParkingLot(self._mu, self)

    async def wait(self) -> None:
        """Wait until the count is zero (return at once if it already is).

        Unlike ``Event.wait`` on a set event, a wait on an open latch or group spends none of
        the engine's budget (rule 16) and takes no pending interrupt: code that counts down
        and then waits (every party of a barrier) relies on getting past an open latch with
        a cancel pending, and raising its own error instead."""
        with self._mu:
            if self._count == 0:
                return
            waiter = self._lot.enqueue()
        await self._lot.park(waiter)

    def _set_count_locked(self, count: int) -> list[Waiter]:
        self._count = count
        return self._lot.pop_all() if count == 0 else []

    @property
    def count(self) -> int:
        return self._count

    def statistics(self) -> CounterStatistics:
        with self._mu:
            return CounterStatistics(self._count, len(self._lot))

    def _waits_on(self) -> str:
        """What a task parked here waits on, in plain words (``TaskInfo.waits_on``)."""
        return f"{type(self).__name__} (count {self._count}, {len(self._lot)} waiting)"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} count={self._count} waiters={len(self._lot)}>"


class Latch(_Counter):
    """A one-shot countdown: ``count_down(n)``; ``await wait()`` until it reaches zero.

    A count <= 0 starts open (the public contract; the design's first draft of a "negative latch count" error is
    the negative *argument* of ``count_down``). Counting down an open latch is harmless.
    """

    __slots__ = ()

    def __init__(self, count: int) -> None:
        super().__init__(max(0, check_int("Latch count", count)))

    def count_down(self, n: int = 1) -> None:
        """Decrease the count by *n* (clamped at zero); at zero, release every waiter."""
        if check_int("count_down(n)", n) < 0:
            raise ValueError(f"count_down(n) needs n >= 0, got {n}")
        with self._mu:
            if self._count == 0 or n == 0:
                return
            waiters = self._set_count_locked(max(0, self._count - n))
        wake_all(waiters, None)


class WaitGroup(_Counter):
    """Go's sync.WaitGroup: ``add(n)`` before starting work, ``done()`` after each piece,
    ``await wait()`` until the count is back to zero. Reusable once it reaches zero."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)

    def add(self, n: int = 1) -> None:
        """Add *n* (may be negative) to the count; below zero raises ``ValueError``."""
        check_int("add(n)", n)
        with self._mu:
            count = self._count + n
            if count < 0:
                raise ValueError(
                    f"{self!r}: add({n}) would make the count negative (more done() than add())"
                )
            waiters = self._set_count_locked(count)
        wake_all(waiters, None)

    def done(self) -> None:
        """One piece of work finished: ``add(-1)``."""
        self.add(-1)
