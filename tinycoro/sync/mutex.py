"""Mutex: a FIFO, baton-passing async lock (rule 6, seeds 000 and 001).

Invariant: **the mutex is never free while a live task waits for it.** ``unlock()`` with waiters
does not set the mutex free; it makes the first waiter the owner, then reschedules it on its own
context. So a newcomer can never barge past a waiter, and waiters get the lock in exactly the
order they queued.

Ownership is per task: ``unlock()`` by a *task* that does not own the mutex raises
``RuntimeError``, as does re-locking a mutex the calling task already holds (it would deadlock).
Code outside any task (a plain thread, a coroutine being closed at shutdown) has no task identity
to check, so its ``unlock()`` is allowed; a mutex taken there has no owner task.

The uncontended path takes no ``threading.Lock``
--------------------------------------------------
Being free is a *token* (tinycoro/core/tokens.py, the seam a stream's receive uses too):
``_free`` holds it while the mutex is free. Taking the mutex is ``tokens.take(_free)`` (False
when it is taken), setting it free is ``tokens.give(_free)``. Each is a single step that runs
no Python code, so under the GIL it is atomic: of two threads that take at once exactly one
gets the token (a compare-and-set), and giving it twice still leaves one token, so not even a
misused unlock can make two. Compiled, each is a few C statements on the token's own fields:
no method called, no exception raised and caught when the token is gone, and no read of the
thread state (on 3.12 and later a call into the shared libpython's thread-local storage).
Everything else, the waiter queue (``_lot``) and the ``_contended`` flag, changes only under
``_mu``.

A waiter that finds the token gone sets ``_contended``, queues itself, and then looks for the
token once more (:meth:`_settle_locked`), all under ``_mu``. An unlock puts the token back
*first* and reads ``_contended`` *second*; if it is set, it takes ``_mu`` and settles too. The
GIL runs these single steps in one global order, so either the waiter's look comes after the
token is back (it finds it), or the unlocker's read comes after the flag is set (it settles,
under ``_mu``, after the waiter queued): no waiter is ever left behind a free mutex. Whoever
settles hands the token straight to the first waiter (baton passing), so a free mutex with a
waiter lasts only until that settle, and a newcomer cannot take it meanwhile: ``lock()`` tries
the fast path only while ``_contended`` is clear, and otherwise queues behind the others. The
flag is cleared, under ``_mu``, only when a settle finds nobody waiting.

Without the GIL (a free-threaded build) each token step is still one atomic step (under the
token's own lock, a critical section), so "exactly one take gets the token" holds; but the two
write-then-read handshakes above need a full barrier on each side, between the write and the
read, or both may read the old value. ``fence.full()`` is that barrier there (a C fence,
compiled; tinycoro.core.fence), and compiles to nothing under the GIL.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Awaitable

from ..core.local import running_task
from ..core.task import Task, describe
from ..core.traps import DONE, consume_budget, foreign_waiter
from ..core import fence
from ..core.engine import spend_inline
from ..core import tokens
from ._lot import Acquirable, Acquisition, ParkingLot, Waiter, acquisition


@dataclass(frozen=True)
class MutexStatistics:
    locked: bool
    owner: Task | None  # the owning task (None if free or taken outside any task)
    waiters: int


class _Foreign:
    """The owner of a mutex taken outside any task: it has no identity to check."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "code outside any task"


_FOREIGN = _Foreign()


class Mutex(Acquirable):
    """An async mutual-exclusion lock, fair (FIFO) and safe across contexts.

    ``await m.lock()`` / ``m.unlock()``, or ``async with m:`` (released on exceptions and on
    cancellation).
    """

    __slots__ = ("_mu", "_free", "_contended", "_owner", "_lot")

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._free = tokens.new()  # the token: there while the mutex is free (module doc)
        self._contended = False  # someone queued since the last settle found nobody; under _mu
        # The owning task, _FOREIGN, or None: free, or between taking the token and writing
        # this (two bytecodes of the new owner's).
        self._owner: Any = None
        self._lot = ParkingLot(self._mu, self)

    @property
    def _locked(self) -> bool:
        return not self._free

    def lock(self) -> Acquisition:
        """``await m.lock()``: acquire the mutex, waiting in FIFO order behind earlier waiters
        if it is held.

        A free mutex is taken at once, without suspending, and that spends one unit of the
        engine's cooperative budget (rule 16, ``Engine.inline_ok``): at zero,
        or when a cancel or an expired timeout waits for the task's next await, the
        acquisition yields to the engine once first. A cancel therefore lands there, before
        the mutex is taken (it is not held when ``Cancelled`` propagates), or, for a task that
        has to wait, while it waits; a cancel that arrives once the lock has been handed to a
        waiter passes the lock on. The work is done when the result is awaited, not when
        ``lock()`` is called, as with a coroutine."""
        return acquisition(self)

    def _acquire(self) -> Any:
        """The acquisition, as ``lock()`` and ``async with`` await it: take a free mutex and
        return ``DONE``, or return the coroutine that yields first (the budget) or waits."""
        me = running_task()  # compiled, a C read of the thread-local (mutex.pxd), no attribute lookup
        if me is None:
            me = foreign_waiter() or _FOREIGN  # an asyncio task owns it through its stand-in
        elif not self._contended and self._free and not spend_inline(me):
            # only a lock taken at once counts in the budget; one that waits parks instead
            return self._lock_later(me)
        if self._take_free(me):
            return DONE
        return self._lock_slow(me)

    def _take_free(self, me: Any) -> bool:
        """The uncontended path: take the token if nobody queued and it is there (module doc)
        and make *me* the owner."""
        if self._contended or not self._grab():
            return False
        self._owner = me
        return True

    async def _lock_later(self, me: Any) -> None:
        await consume_budget()  # spent, or an interrupt is due: it is raised here
        if not self._take_free(me):
            await self._lock_slow(me)

    async def _lock_slow(self, me: Any) -> None:
        mu = self._mu
        mu.acquire()
        try:
            if me is not _FOREIGN and self._owner is me:
                raise RuntimeError(f"{self!r}: this task already holds it (Mutex is not reentrant)")
            self._contended = True
            waiter = self._lot.enqueue()
            if fence.FREE_THREADED:  # the flag before the look at the token (module doc)
                fence.full()
            first = self._settle_locked() if self._free else None  # usually held: skip the call
        finally:
            mu.release()
        if first is waiter:  # the mutex was free after all and nobody queued before us
            return
        if first is not None:
            first.task.wake(None)
        # Whoever settles makes us the owner before waking us. If we were cancelled while that
        # wake was on its way, the engine calls _undo to pass the lock on before throwing
        # Cancelled.
        await self._lot.park(waiter, self._undo)

    def try_lock(self) -> bool:
        """Take the mutex if it is free and nobody waits for it; never waits."""
        me = running_task() or foreign_waiter() or _FOREIGN
        with self._mu:
            if self._lot or not self._take_locked():
                return False
            self._owner = me
            return True

    def unlock(self) -> None:
        """Release the mutex, handing it straight to the first waiter if there is one."""
        me = running_task()
        if me is not None and self._owner is me:
            self._owner = None
            tokens.give(self._free)  # first the token, then the flag: see the module doc
            if fence.FREE_THREADED:
                fence.full()
            if self._contended:
                self._settle()
            return
        self._unlock_slow(me)

    def _unlock_slow(self, me: Any) -> None:
        """Release by code outside a task (allowed while the mutex is held), or misuse. *me*
        is the calling task or None, then its asyncio stand-in (typed Any: compiled, an
        annotation is enforced)."""
        if me is None:
            me = foreign_waiter()
        mu = self._mu
        mu.acquire()
        owner = self._owner
        held = not self._free
        if held and (me is None or owner is _FOREIGN or owner is me):
            self._owner = None
            tokens.give(self._free)
            first = self._settle_locked()
            mu.release()
            if first is not None:
                first.task.wake(None)
            return
        mu.release()
        if not held:
            raise RuntimeError(f"unlock() of an unlocked {self!r}")
        raise RuntimeError(f"unlock() of {self!r} by {describe(me)}, which does not hold it")

    def locked(self) -> bool:
        return not self._free

    def statistics(self) -> MutexStatistics:
        with self._mu:
            owner = self._owner
            return MutexStatistics(
                not self._free, None if owner is _FOREIGN else owner, len(self._lot)
            )

    # -- internals --------------------------------------------------------------------------
    def _take_locked(self) -> bool:
        """Take the token if it is there (a fast-path lock may take it first meanwhile)."""
        # not free: the common case under contention, no exception raised and caught
        return bool(self._free) and self._grab()

    def _grab(self) -> bool:
        """Take the token: False if another thread's take won it (module doc)."""
        return tokens.take(self._free)

    def _settle_locked(self) -> Waiter | None:
        """Under ``_mu``: if the mutex is free, make the first waiter its owner and return that
        waiter (wake it once ``_mu`` is released); with nobody waiting, leave it free."""
        if not self._take_locked():
            return None  # held: its owner's unlock settles
        waiter = self._lot.pop()
        if waiter is None:
            self._contended = False  # before the token goes back: a newcomer then queues
            tokens.give(self._free)
            return None
        self._owner = waiter.task  # baton passing: never free while someone waits
        return waiter

    def _settle(self) -> None:
        with self._mu:
            first = self._settle_locked()
        if first is not None:
            first.task.wake(None)

    def _undo(self, _value: Any) -> None:
        # Engine hook, on the cancelled waiter's context: it was made owner by a settle but is
        # being cancelled instead of resuming, so pass the lock on.
        with self._mu:
            self._owner = None
            tokens.give(self._free)
            first = self._settle_locked()
        if first is not None:
            first.task.wake(None)

    def __aenter__(self) -> Awaitable[None]:
        """``async with m:`` takes the mutex as ``await m.lock()`` does (same budget and
        cancellation); ``as`` binds None, as with ``asyncio.Lock`` and ``trio.Lock``: the
        uncontended entry is then a shared ready awaitable, with nothing allocated per entry."""
        return self._acquire()

    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[None]:
        """Release the mutex (on exceptions and cancellation too); never suppresses."""
        self.unlock()
        return DONE

    def _waits_on(self) -> str:
        """What a task parked here waits on, in plain words (``TaskInfo.waits_on``)."""
        owner = self._owner
        waiting = len(self._lot)
        if self._free or owner is None:
            return f"Mutex ({waiting} waiting)"
        held = repr(owner) if owner is _FOREIGN else repr(getattr(owner, "name", owner))
        return f"Mutex held by {held} ({waiting} waiting)"

    def __repr__(self) -> str:
        if self._free:
            return "<Mutex unlocked>"
        return f"<Mutex locked by {describe(self._owner)} waiters={len(self._lot)}>"
