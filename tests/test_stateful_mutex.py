"""Mutex and Semaphore against sequential models, driven by hypothesis (see helpers/stateful.py).

Model of the Mutex: an owner and a FIFO queue of waiters; ``unlock`` hands the lock to the first
waiter (baton passing), a cancelled waiter leaves the queue, ``try_lock`` succeeds only when
free. Checked after every rule: ``statistics()`` (locked, owner task, waiter count), the order
in which actors acquired (FIFO), every waiter parked, every finished actor's outcome.
The Semaphore's model is the same with a count of permits and a set of holders.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

import tinycoro as tc
from helpers.stateful import ActorMachine, per_context_count

pytestmark = pytest.mark.timeout(120)

PICK = st.integers(min_value=0, max_value=63)  # which of the current candidates, modulo


class HoldMachine(ActorMachine):
    """What the Mutex and Semaphore machines share: actors that take the primitive, hold it
    until told to let go (or cancelled), and give it back; a FIFO queue of waiters."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: deque[int] = deque()
        self.acquired: list[int] = []  # the model's acquisition order
        self.maybe: set[int] = set()  # actors whose acquisition a race may or may not show
        self.outcome: dict[int, tuple] = {}  # actor -> its expected last report

    async def hold(self, i: int, take, give_back) -> None:
        """Actor *i*: ``await take()`` (None: already taken), hold until ``release[i]``."""
        if take is not None:
            try:
                await take()
            except tc.Cancelled:
                self.log.append(("cancelled", i))
                raise
        self.log.append(("acquired", i))
        try:
            await self.release[i].wait()
        finally:
            give_back()
            self.log.append(("released", i))

    @rule(k=PICK)
    def cancel_waiter(self, k: int) -> None:
        if not self.queue:
            return
        w = self.queue[k % len(self.queue)]
        self.tasks[w].cancel()
        self.queue.remove(w)
        self.outcome[w] = ("cancelled",)

    def check_actors(self, holders) -> None:
        """Acquisition order (FIFO), each actor's outcome, waiters and *holders* parked."""
        got = [i for i in self.events("acquired") if i not in self.maybe]
        assert got == [i for i in self.acquired if i not in self.maybe], self.log
        last = self.last()
        for i in self.maybe:  # acquired and then cancelled, or cancelled while queued
            assert last[i] in (("cancelled",), ("released",)), self.log
            assert self.tasks[i].done()
        for i, expected in self.outcome.items():
            if i not in self.maybe:
                assert last.get(i) == expected, (i, self.log)
        self.assert_parked(self.queue)
        self.assert_parked(holders)  # each waits for its release event
        self.assert_done(i for i, o in self.outcome.items() if o != ("acquired",))


class MutexMachine(HoldMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = tc.Mutex()
        self.owner: int | None = None

    # -- actors --------------------------------------------------------------------------------
    def locker(self, i: int):
        return self.hold(i, self.m.lock, self.m.unlock)

    async def try_locker(self, i: int) -> None:
        if not self.m.try_lock():
            self.log.append(("refused", i))
            return
        await self.hold(i, None, self.m.unlock)

    # -- model -----------------------------------------------------------------------------------
    def hand_on(self) -> None:
        """The owner let go (unlock, or cancelled while holding): baton to the first waiter."""
        self.outcome[self.owner] = ("released",)
        self.owner = self.queue.popleft() if self.queue else None
        if self.owner is not None:
            self.acquired.append(self.owner)
            self.outcome[self.owner] = ("acquired",)

    # -- rules -----------------------------------------------------------------------------------
    @precondition(lambda self: self.room())
    @rule()
    def lock(self) -> None:
        i = self.start(self.locker)
        if self.owner is None:
            self.owner = i
            self.acquired.append(i)
            self.outcome[i] = ("acquired",)
        else:
            self.queue.append(i)

    @precondition(lambda self: self.room())
    @rule()
    def try_lock(self) -> None:
        i = self.start(self.try_locker)
        if self.owner is None:
            self.owner = i
            self.acquired.append(i)
            self.outcome[i] = ("acquired",)
        else:
            self.outcome[i] = ("refused",)

    @precondition(lambda self: self.owner is not None)
    @rule()
    def unlock(self) -> None:
        self.release[self.owner].set()
        self.hand_on()

    @precondition(lambda self: self.owner is not None)
    @rule()
    def cancel_owner(self) -> None:
        self.tasks[self.owner].cancel()  # its ``finally`` unlocks
        self.hand_on()

    @precondition(lambda self: self.owner is not None and bool(self.queue))
    @rule()
    def unlock_racing_cancel_of_next(self) -> None:
        """The owner unlocks while the first waiter is cancelled: whichever wins, the lock
        ends with the second waiter (the first either never gets it or passes it on)."""
        first = self.queue[0]
        self.release[self.owner].set()
        self.tasks[first].cancel()
        self.outcome[self.owner] = ("released",)
        self.queue.popleft()
        self.maybe.add(first)
        self.owner = None
        if self.queue:
            self.owner = self.queue.popleft()
            self.acquired.append(self.owner)
            self.outcome[self.owner] = ("acquired",)

    # -- the check -------------------------------------------------------------------------------
    @invariant()
    def agrees_with_the_model(self) -> None:
        self.settle()
        owner = None if self.owner is None else self.tasks[self.owner]
        stats = self.m.statistics()
        assert stats == tc.sync.MutexStatistics(self.owner is not None, owner, len(self.queue))
        assert self.m.locked() == (self.owner is not None)
        self.check_actors([] if self.owner is None else [self.owner])


class SemaphoreMachine(HoldMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sem: tc.Semaphore | None = None
        self.value = 0
        self.holders: set[int] = set()

    @initialize(value=st.integers(min_value=0, max_value=3))
    def create(self, value: int) -> None:
        self.sem = tc.Semaphore(value)
        self.value = value

    def acquirer(self, i: int):
        return self.hold(i, self.sem.acquire, self.sem.release)

    def give_back(self) -> None:
        """A permit came back: to the first waiter if there is one, else to the count."""
        if self.queue:
            w = self.queue.popleft()
            self.holders.add(w)
            self.acquired.append(w)
            self.outcome[w] = ("acquired",)
        else:
            self.value += 1

    @precondition(lambda self: self.room())
    @rule()
    def acquire(self) -> None:
        i = self.start(self.acquirer)
        if self.value > 0:
            self.value -= 1
            self.holders.add(i)
            self.acquired.append(i)
            self.outcome[i] = ("acquired",)
        else:
            self.queue.append(i)

    @rule()
    def try_acquire_outside_a_task(self) -> None:
        assert self.sem.try_acquire() == (self.value > 0)
        self.value = max(0, self.value - 1)

    @rule()
    def release_outside_a_task(self) -> None:
        self.sem.release()
        self.give_back()

    @precondition(lambda self: bool(self.holders))
    @rule(k=PICK, cancel=st.booleans())
    def holder_lets_go(self, k: int, cancel: bool) -> None:
        h = sorted(self.holders)[k % len(self.holders)]
        if cancel:
            self.tasks[h].cancel()  # its ``finally`` releases
        else:
            self.release[h].set()
        self.holders.remove(h)
        self.outcome[h] = ("released",)
        self.give_back()

    @precondition(lambda self: bool(self.queue))
    @rule()
    def release_racing_cancel_of_next(self) -> None:
        """A permit handed to the first waiter as it is cancelled goes on to the next one."""
        first = self.queue.popleft()
        self.sem.release()
        self.tasks[first].cancel()
        self.maybe.add(first)
        self.give_back()

    @invariant()
    def agrees_with_the_model(self) -> None:
        if self.sem is None:
            return
        self.settle()
        assert self.sem.statistics() == tc.sync.SemaphoreStatistics(self.value, len(self.queue))
        self.check_actors(self.holders)


globals().update(per_context_count(MutexMachine))
globals().update(per_context_count(SemaphoreMachine))
