"""Async synchronisation primitives, correct across contexts (threads).

Every primitive guards its state with one short ``threading.Lock`` (never held across an await)
and queues its waiters in a :class:`~tinycoro.sync._lot.ParkingLot`, the shared FIFO waiter queue
with lazy cancellation. Waking reschedules the waiter on its own context (rule 6); a
parked task counts in its context's wait count (rule 7), so a run cannot end while it waits and
a real deadlock is reported as ``tc.DeadlockError``.
"""

from .condition import Condition, ConditionStatistics
from .counters import CounterStatistics, Latch, WaitGroup
from .event import Event, EventStatistics
from .mutex import Mutex, MutexStatistics
from .semaphore import Semaphore, SemaphoreStatistics

__all__ = [
    "Condition",
    "ConditionStatistics",
    "CounterStatistics",
    "Event",
    "EventStatistics",
    "Latch",
    "Mutex",
    "MutexStatistics",
    "Semaphore",
    "SemaphoreStatistics",
    "WaitGroup",
]
