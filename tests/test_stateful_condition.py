"""Condition (with its Mutex) against a sequential model, driven by hypothesis (see
helpers/stateful.py).

Actors: *waiters* (``async with m: await cv.wait()``) and *holders* (take the mutex and keep it
until told to let go). Model: the mutex's owner and FIFO queue, and the condition's FIFO queue.
The queue entries of the mutex are: a holder, a waiter that has not started waiting yet, a group
of notified waiters re-acquiring the mutex (a group because waiters notified together race each
other to the mutex; within a group only the set is checked), and a cancelled waiter re-acquiring
the mutex before its ``Cancelled`` propagates (if it had been notified, it passes the notify on:
no notify is ever lost). Checked after every rule: ``statistics()`` of both, who woke, who was
cancelled, who is still parked.

A rule whose outcome is a real race (``..._racing_...``) lets the model follow whichever way the
race went; so that hypothesis sees the same choices either way, the other rules have no
preconditions on the model's state and do nothing when they do not apply.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

import tinycoro as tc
from helpers.stateful import ActorMachine, per_context_count

pytestmark = pytest.mark.timeout(120)

PICK = st.integers(min_value=0, max_value=63)


class ConditionMachine(ActorMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = tc.Mutex()
        self.cv = tc.Condition(self.m)
        self.owner: int | None = None  # a holder (waiters never keep the mutex once settled)
        self.mq: list[tuple] = []  # ("hold", i) | ("enter", i) | ("group", {i..}) | ("cancelled", i, notified)
        self.cvq: deque[int] = deque()
        self.outcome: dict[int, tuple] = {}

    # -- actors ----------------------------------------------------------------------------------
    async def waiter(self, i: int) -> None:
        try:
            async with self.m:
                await self.cv.wait()
                self.log.append(("woke", i))
        except tc.Cancelled:
            self.log.append(("cancelled", i))
            raise

    async def holder(self, i: int) -> None:
        async with self.m:
            self.log.append(("holds", i))
            await self.release[i].wait()
        self.log.append(("let go", i))

    # -- model -----------------------------------------------------------------------------------
    def notify(self, n: int) -> None:
        woken = {self.cvq.popleft() for _ in range(min(n, len(self.cvq)))}
        if woken:
            self.mq.append(("group", woken))

    def run_mutex(self) -> None:
        """Hand the free mutex down its queue until a holder keeps it or the queue is empty."""
        while self.owner is None and self.mq:
            entry = self.mq.pop(0)
            kind = entry[0]
            if kind == "hold":
                self.owner = entry[1]
                self.outcome[entry[1]] = ("holds",)
            elif kind == "enter":  # takes the mutex, starts waiting, which releases it
                self.cvq.append(entry[1])
            elif kind == "group":
                for w in entry[1]:
                    self.outcome[w] = ("woke",)
            else:
                _, w, notified = entry
                self.outcome[w] = ("cancelled",)
                if notified:
                    self.notify(1)  # passed on before the Cancelled propagates

    def members(self) -> list[int]:
        """Every actor parked on the mutex."""
        out: list[int] = []
        for entry in self.mq:
            out += sorted(entry[1]) if entry[0] == "group" else [entry[1]]
        return out

    # -- rules -----------------------------------------------------------------------------------
    @precondition(lambda self: self.room())
    @rule()
    def wait(self) -> None:
        self.mq.append(("enter", self.start(self.waiter)))
        self.run_mutex()

    @precondition(lambda self: self.room())
    @rule()
    def hold(self) -> None:
        self.mq.append(("hold", self.start(self.holder)))
        self.run_mutex()

    @rule()
    def let_go(self) -> None:
        if self.owner is None:
            return
        self.release[self.owner].set()
        self.outcome[self.owner] = ("let go",)
        self.owner = None
        self.run_mutex()

    @rule(n=st.integers(min_value=1, max_value=3))
    def notify_n(self, n: int) -> None:
        if n == 1:
            self.cv.notify_one()
        else:
            self.cv.notify(n)
        self.notify(n)
        self.run_mutex()

    @rule()
    def notify_all(self) -> None:
        self.cv.notify_all()
        self.notify(len(self.cvq))
        self.run_mutex()

    @rule(k=PICK)
    def cancel_waiting(self, k: int) -> None:
        if not self.cvq:
            return
        w = self.cvq[k % len(self.cvq)]
        self.tasks[w].cancel()
        self.cvq.remove(w)
        self.mq.append(("cancelled", w, False))  # re-acquires the mutex, then raises
        self.run_mutex()

    @rule(k=PICK)
    def cancel_notified(self, k: int) -> None:
        """Cancel a notified waiter while it waits for the mutex: it queues again at the back,
        and once it has the mutex it passes the notify on to the next waiter."""
        notified = [w for e in self.mq if e[0] == "group" for w in sorted(e[1])]
        if not notified:
            return
        w = notified[k % len(notified)]
        self.tasks[w].cancel()
        for e in self.mq:
            if e[0] == "group":
                e[1].discard(w)
        self.mq = [e for e in self.mq if e[0] != "group" or e[1]]
        self.mq.append(("cancelled", w, True))
        self.run_mutex()

    @rule()
    def notify_racing_cancel_of_first(self) -> None:
        """notify_one() while the longest waiter is being cancelled: either it wakes, or it
        passes the notify on to the next waiter; the notify is never swallowed."""
        if self.owner is not None or not self.cvq:
            return
        first = self.cvq[0]
        self.cv.notify_one()
        self.tasks[first].cancel()
        self.settle()
        self.cvq.popleft()
        if self.last().get(first) == ("woke",):
            self.outcome[first] = ("woke",)
        else:
            self.outcome[first] = ("cancelled",)
            self.notify(1)
            self.run_mutex()

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.settle()
        assert self.owner is not None or not self.mq
        owner = None if self.owner is None else self.tasks[self.owner]
        mutex = tc.sync.MutexStatistics(self.owner is not None, owner, len(self.members()))
        assert self.cv.statistics() == tc.sync.ConditionStatistics(len(self.cvq), mutex), self.log
        assert self.last() == self.outcome, self.log
        self.assert_parked(self.cvq)
        self.assert_parked(self.members())
        if self.owner is not None:
            self.assert_parked([self.owner])
        self.assert_done(i for i, o in self.outcome.items() if o != ("holds",))


globals().update(per_context_count(ConditionMachine))
