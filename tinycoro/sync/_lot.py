"""The parking lot: the one FIFO waiter queue every primitive shares (the source of fairness).

A primitive owns a short ``threading.Lock`` and one or more :class:`ParkingLot` objects guarded by
it. Waiting is always the same three steps:

1. under the primitive's lock, decide that the task must wait and ``enqueue()`` it;
2. release the lock;
3. ``await lot.park(waiter)``.

Between steps 2 and 3 another thread may already have popped the waiter and called
``task.wake(value)``: the engine copes with a wake that arrives before the park (the task is
simply made ready again and the park returns at once), so no wakeup is lost in that gap.

Waking is: under the lock, ``pop()`` the first live waiter and hand it whatever it waited for
(ownership, a permit, an item: baton passing, rule 6); release the lock; then call
``waiter.task.wake(value)``, which reschedules the task on its own context.

Cancellation uses lazy deletion. When a parked task is cancelled the engine calls ``abort()`` on
the task's own context; under the lock, a waiter still queued is only *marked* dead (O(1)) and
``abort`` returns True, so the engine throws ``Cancelled`` into the task. A waiter already popped
returns False: its wake (and what it hands over) is on the way, and the primitive's ``undo`` hook,
if it has one, gives the handed-over thing back. Dead waiters are skipped when popped and the
queue is compacted when they outnumber the live ones, so cancel storms cannot grow it unbounded.

Acquisitions that complete at once
----------------------------------
A lock that is free, a permit that is there, an event that is set: the acquisition returns
without suspending, and spends one unit of the engine's cooperative budget (rule 16 of
docs/design.md: :func:`spend`), as a send the socket takes at once does. At zero it yields to the
engine once first, so a task that takes and releases a free lock in a loop still lets the
other tasks of its context run every ``INLINE_BUDGET`` acquisitions; and a cancel (or an expired
timeout) waiting for the task's next await lands at that yield, before anything is taken.

The awaitable of such an acquisition is :data:`DONE`: one shared object whose ``__await__`` is
itself and whose first step finishes with None. Compiled, that step is a C ``tp_iternext``
returning NULL with no exception set, which CPython reads as "returned None": awaiting it
allocates nothing and raises nothing, where an ``async def`` costs a coroutine, its frame (a
closure object, compiled) and an await wrapper per call.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Generator

from ..core.engine import spend_inline
from ..core.local import thread_state
from ..core.task import Waker, describe
from ..core.traps import DONE, Park, foreign_waiter, park, thrown
from . import _refs

_COMPACT_MIN = 64  # dead waiters tolerated before considering a compaction


def spend() -> bool:
    """May the running task complete one more acquisition without suspending? True counts it
    in its engine's budget (rule 16, module doc). False: the budget of this step is spent, or
    an interrupt waits for the task's next await; the caller then awaits the gate,
    ``traps.consume_budget()``, which yields once (that interrupt is raised there) and counts
    the acquisition in the new step's budget. Code that is no tinycoro task (an
    asyncio task) has no budget: True. Compiled, ``spend_inline`` is a C call (the .pxd)."""
    task = thread_state.task
    return task is None or spend_inline(task)


class Acquirable:
    """A primitive whose acquisition may complete at once (Mutex, Semaphore): its
    ``_acquire()`` takes the thing and returns :data:`DONE`, or returns an awaitable (a
    coroutine, a park) that yields first (the budget) or waits. Compiled, a C method that
    :class:`Acquisition` calls through the type's table. ``_spare`` is the primitive's last
    :class:`Acquisition`, handed out again by :func:`acquisition` once nothing else holds it."""

    __slots__ = ("_spare",)
    _spare: Any  # unset until the first acquisition, interpreted (acquisition() reads it only compiled)

    def _acquire(self) -> Any:
        raise NotImplementedError


def acquisition(prim: Acquirable) -> "Acquisition":
    """An :class:`Acquisition` of *prim*, with no ``__init__`` call (compiled, a C call).

    The primitive's spare when nothing else holds it (``_refs.unshared``: compiled, under the
    GIL): ``await m.lock()`` drops its acquisition as soon as it has called ``__await__``, so
    in a loop of uncontended locks the spare is free again by the next ``lock()``, and one
    handed out again is indistinguishable from a fresh one. Otherwise (held by someone, on a
    free-threaded build, interpreted) a fresh one. The spare is the primitive's own, and an
    awaited acquisition lets go of its primitive (``__await__``), so no spare keeps a
    primitive alive: neither a module slot holding the last one used anywhere, nor a cycle.
    (Cython ignores ``@cython.freelist`` for a class declared in an augmenting .pxd.)"""
    if _refs.REUSE:
        acq = prim._spare
        if acq is None or not _refs.unshared(acq):  # held by the field and acq alone, or make one
            acq = prim._spare = Acquisition.__new__(Acquisition)
    else:
        acq = Acquisition.__new__(Acquisition)
    acq._gen = None
    acq.prim = prim
    return acq


class Acquisition:
    """What ``Mutex.lock()`` and ``Semaphore.acquire()`` return: an awaitable that does its
    work when awaited (not when made), and a coroutine (``send``/``throw``/``close``) so that
    ``tc.spawn(m.lock())`` and ``asyncio.create_task(m.lock())`` take it, as they take an
    ``async def``'s coroutine. Awaited, it returns the iterator of what ``prim._acquire()``
    gives: ``traps.DONE`` itself when the thing was taken at once. Awaited once, as a
    coroutine is: a second await raises ``RuntimeError`` (the acquisition has let go of its
    primitive, so that a spare kept for reuse never keeps one alive).

    Thrown into before its first step (a task cancelled before it started), it raises
    without taking anything, as a coroutine that never ran would. That, and staying finished
    (:data:`DONE`) once done, is why it is not a ``traps._CoroutineProtocol``, whose ops
    step ``__await__`` on a first throw and may be awaited again."""

    __slots__ = ("prim", "_gen")
    prim: Any  # the Acquirable, until awaited; then None
    _gen: Any  # None until driven by send(); then what __await__ returned

    def __await__(self) -> Generator[Any, Any, None]:
        if self.prim is None:
            raise RuntimeError("cannot reuse an already awaited lock() or acquire()")
        aw = self.prim._acquire()
        self.prim = None  # let go of it: the primitive's spare must not keep it alive
        return aw if aw is DONE else aw.__await__()

    def send(self, value: Any) -> Any:
        gen = self._gen
        if gen is None:
            gen = self._gen = self.__await__()
        try:
            return gen.send(value)
        except BaseException:
            self._gen = DONE  # finished: a later send raises StopIteration
            raise

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        gen = self._gen
        if gen is None:
            self._gen = DONE
            raise thrown(typ, val, tb)
        try:
            if val is None and tb is None:
                return gen.throw(typ)
            return gen.throw(typ, val, tb)
        except BaseException:
            self._gen = DONE
            raise

    def close(self) -> None:
        gen, self._gen = self._gen, DONE
        if gen is not None:
            gen.close()


class Waiter:
    """One queued task, plus an optional ``item`` (a channel sender's value, for example)."""

    __slots__ = ("lot", "task", "item", "queued")

    def __init__(self, lot: "ParkingLot", task: Waker, item: Any) -> None:
        self.lot = lot
        self.task = task
        self.item = item
        self.queued = True

    def abort(self) -> bool:
        """Engine hook (the waiter's own context): leave the queue if still in it."""
        lot = self.lot
        with lot._lock:
            if not self.queued:
                return False  # already popped: a wake is on its way
            self.queued = False
            lot._live -= 1
            lot._dead += 1
            if lot._dead > _COMPACT_MIN and lot._dead > lot._live:
                lot._queue = deque(w for w in lot._queue if w.queued)
                lot._dead = 0
            return True

    def __repr__(self) -> str:
        return f"<Waiter {describe(self.task)} queued={self.queued}>"


class ParkingLot:
    """FIFO queue of parked tasks; every method except :meth:`park` needs ``lock`` held.

    ``what`` is the primitive the tasks wait on: it names the wait in ``repr(task)`` and in
    :class:`~tinycoro.DeadlockError` messages.
    """

    __slots__ = ("_lock", "_queue", "_live", "_dead", "what")

    def __init__(self, lock: threading.Lock, what: object) -> None:
        self._lock = lock
        self._queue: deque[Waiter] = deque()
        self._live = 0
        self._dead = 0
        self.what = what

    def __len__(self) -> int:
        return self._live

    def __bool__(self) -> bool:
        return self._live > 0

    def enqueue(self, item: Any = None) -> Waiter:
        """Queue the calling task at the back; lock held. Call :meth:`park` once unlocked."""
        task = thread_state.task
        if task is None:
            task = foreign_waiter()  # an asyncio task's stand-in (tinycoro.aio), or None
        if task is None:
            raise RuntimeError(
                f"waiting on {self.what!r} outside a tinycoro task: run it with tc.run(...), "
                "Scheduler.submit(...) or tc.spawn(...)"
            )
        w = Waiter(self, task, item)
        self._queue.append(w)
        self._live += 1
        return w

    def pop(self) -> Waiter | None:
        """Take the first live waiter off the queue (skipping cancelled ones); lock held."""
        q = self._queue
        while q:
            w = q.popleft()
            if w.queued:
                w.queued = False
                self._live -= 1
                return w
            self._dead -= 1
        return None

    def pop_all(self) -> list[Waiter]:
        """Take every live waiter off the queue, in FIFO order; lock held."""
        out = [w for w in self._queue if w.queued]
        for w in out:
            w.queued = False
        self._queue.clear()
        self._live = 0
        self._dead = 0
        return out

    def park(self, waiter: Waiter, undo: Callable[[Any], None] | None = None):
        """Suspend the task until it is woken; lock NOT held. Returns the wake's value."""
        return park(Park(waiter.abort, self.what, undo))


def wake_all(waiters: list[Waiter], value: Any) -> None:
    """Reschedule every popped waiter with *value*; call with the primitive's lock released."""
    for w in waiters:
        w.task.wake(value)
