"""Mutex: a FIFO, baton-passing async lock (DESIGN rule 6, seeds 000 and 001).

Invariant: **the mutex is never free while a live task waits for it.** ``unlock()`` with waiters
does not set the mutex free; it makes the first waiter the owner, then reschedules it on its own
context. So a newcomer can never barge past a waiter (``lock()`` and ``try_lock()`` succeed only
when the mutex is free, which by the invariant means "no waiters"), and waiters get the lock in
exactly the order they queued.

Ownership is per task: ``unlock()`` by a *task* that does not own the mutex raises
``RuntimeError``, as does re-locking a mutex the calling task already holds (it would deadlock).
Code outside any task (a plain thread, a coroutine being closed at shutdown) has no task identity
to check, so its ``unlock()`` is allowed; a mutex taken there has no owner task.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..core.local import _local
from ..core.task import Task, describe
from ..core.traps import foreign_waiter
from ._lot import ParkingLot


@dataclass(frozen=True)
class MutexStatistics:
    locked: bool
    owner: Task | None  # the owning task (None if free or taken outside any task)
    waiters: int


class Mutex:
    """An async mutual-exclusion lock, fair (FIFO) and safe across contexts.

    ``await m.lock()`` / ``m.unlock()``, or ``async with m:`` (released on exceptions and on
    cancellation).
    """

    __slots__ = ("_mu", "_locked", "_owner", "_lot")

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._locked = False
        self._owner: Task | None = None
        self._lot = ParkingLot(self._mu, self)

    # The hot paths below use acquire()/release() rather than ``with``: measurably cheaper per
    # call, and nothing between the two can raise.

    async def lock(self) -> None:
        """Acquire the mutex, waiting in FIFO order behind earlier waiters if it is held."""
        task = _local.task
        if task is None:
            task = foreign_waiter()  # an asyncio task owns it through its stand-in
        mu = self._mu
        mu.acquire()
        if not self._locked:  # free implies no waiters (the invariant above)
            self._locked = True
            self._owner = task
            mu.release()
            return
        try:
            if task is not None and self._owner is task:
                raise RuntimeError(f"{self!r}: this task already holds it (Mutex is not reentrant)")
            waiter = self._lot.enqueue()
        finally:
            mu.release()
        # unlock() made us the owner before waking us. If we were cancelled while that wake was
        # on its way, the engine calls _undo to pass the lock on before throwing Cancelled.
        await self._lot.park(waiter, self._undo)

    def try_lock(self) -> bool:
        """Take the mutex if it is free (and so has no waiters); never waits."""
        with self._mu:
            if self._locked:
                return False
            self._locked = True
            self._owner = _local.task or foreign_waiter()
            return True

    def unlock(self) -> None:
        """Release the mutex, handing it straight to the first waiter if there is one."""
        me = _local.task
        if me is None:
            me = foreign_waiter()
        mu = self._mu
        mu.acquire()
        owner = self._owner
        if self._locked and (me is None or owner is None or owner is me):
            if not self._lot._live:  # nobody waits: set it free
                self._locked = False
                self._owner = None
                mu.release()
                return
            waiter = self._handoff_locked()
            mu.release()
            waiter.task._wake(None)
            return
        locked = self._locked
        mu.release()
        if not locked:
            raise RuntimeError(f"unlock() of an unlocked {self!r}")
        raise RuntimeError(f"unlock() of {self!r} by {describe(me)}, which does not hold it")

    def locked(self) -> bool:
        return self._locked

    def statistics(self) -> MutexStatistics:
        with self._mu:
            return MutexStatistics(self._locked, self._owner, len(self._lot))

    # -- internals --------------------------------------------------------------------------
    def _handoff_locked(self):
        """Release under ``_mu``: make the first waiter the owner, or set the mutex free."""
        waiter = self._lot.pop()
        if waiter is None:
            self._locked = False
            self._owner = None
        else:
            self._owner = waiter.task  # baton passing: never free while someone waits
        return waiter

    def _undo(self, _value: Any) -> None:
        # Engine hook, on the cancelled waiter's context: it was made owner by unlock() but is
        # being cancelled instead of resuming, so pass the lock on.
        with self._mu:
            waiter = self._handoff_locked()
        if waiter is not None:
            waiter.task._wake(None)

    async def __aenter__(self) -> "Mutex":
        # The uncontended path of lock(), inlined: one coroutine frame less per acquisition.
        task = _local.task
        if task is None:
            task = foreign_waiter()
        mu = self._mu
        mu.acquire()
        if not self._locked:
            self._locked = True
            self._owner = task
            mu.release()
            return self
        mu.release()
        await self.lock()  # contended: lock() decides again under the lock
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.unlock()

    def __repr__(self) -> str:
        if not self._locked:
            return "<Mutex unlocked>"
        return f"<Mutex locked by {describe(self._owner)} waiters={len(self._lot)}>"
