"""Event: a manual-reset event that carries a value (seed 004's async manual-reset event).

``set(value)`` opens the event and wakes every waiter with *value*; while it is open, ``wait()``
returns the value without suspending; ``clear()`` closes it again. ``set`` and ``wait`` decide
under one lock, so a ``set()`` racing with a ``wait()`` on another thread is seen by it either as
"already set" (no suspend) or as a wake of the queued waiter: there is no lost wakeup.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..core.traps import consume_budget
from ._lot import ParkingLot, spend, wake_all


@dataclass(frozen=True)
class EventStatistics:
    is_set: bool
    waiters: int


class Event:
    """``await e.wait() -> value``; ``e.set(value=None)``; ``e.is_set()``; ``e.clear()``."""

    __slots__ = ("_mu", "_set", "_value", "_lot")

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._set = False
        self._value: Any = None
        self._lot = ParkingLot(self._mu, self)

    async def wait(self) -> Any:
        """Return the value the event was set with, waiting until it is set.

        On a set event it returns at once, without suspending, and that spends one unit of
        the engine's cooperative budget (rule 16), as an uncontended lock does: a wait that
        completes at once is an operation like any other, and a task that waits on a set event
        in a loop (a "stop" flag checked each round, say) must not starve its context. At zero,
        or when a cancel waits for the task's next await, it yields once first: that cancel
        lands there."""
        # rule 16: a wait that completes at once counts in the budget; one that parks does
        # not (the park is the suspension, and an interrupt that is due lands there)
        if self._set and not spend():
            await consume_budget()  # spent, or an interrupt is due: it is raised here
        with self._mu:
            if self._set:
                return self._value
            waiter = self._lot.enqueue()
        # No undo: once set() has handed us the value we return it; a cancel requested in the
        # meantime is raised at this task's next await instead.
        return await self._lot.park(waiter)

    def set(self, value: Any = None) -> None:
        """Open the event with *value* (replacing any earlier one) and wake every waiter.

        Any thread, inside or outside a task.
        """
        with self._mu:
            self._set = True
            self._value = value
            waiters = self._lot.pop_all()
        wake_all(waiters, value)

    def clear(self) -> None:
        """Close the event again; later ``wait()`` calls suspend until the next ``set()``."""
        with self._mu:
            self._set = False
            self._value = None

    def is_set(self) -> bool:
        return self._set

    def statistics(self) -> EventStatistics:
        with self._mu:
            return EventStatistics(self._set, len(self._lot))

    def _waits_on(self) -> str:
        """What a task parked here waits on, in plain words (``TaskInfo.waits_on``)."""
        return "Event"

    def __repr__(self) -> str:
        state = "set" if self._set else "unset"
        return f"<Event {state} waiters={len(self._lot)}>"
