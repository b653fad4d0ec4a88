"""Channel against a sequential model, driven by hypothesis (see helpers/stateful.py).

Model: a buffer of at most ``capacity`` items, a FIFO queue of blocked senders (with their items)
and one of blocked receivers, a closed flag. ``send`` hands its item to the first blocked
receiver, else buffers it, else blocks; ``recv`` takes the oldest buffered item and moves the
first blocked sender's item in, else takes a blocked sender's item directly, else blocks;
``close`` fails blocked senders and ends blocked receivers. Every item is unique, so the check
after each rule (who got which item, who is still blocked, ``statistics()``) also checks FIFO
order and that no item is lost or delivered twice.

A rule whose outcome is a real race (``..._racing_...``) lets the model follow whichever way the
race went; so that hypothesis sees the same choices either way, the other rules have no
preconditions on the model's state and do nothing when they do not apply.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

import tinycoro as tc
from helpers.stateful import ActorMachine, per_context_count

pytestmark = pytest.mark.timeout(120)

PICK = st.integers(min_value=0, max_value=63)


class ChannelMachine(ActorMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ch: tc.Channel | None = None
        self.capacity = 0
        self.buf: deque[int] = deque()
        self.senders: deque[tuple[int, int]] = deque()  # (actor, item)
        self.receivers: deque[int] = deque()
        self.closed = False
        self.outcome: dict[int, tuple] = {}
        self.next_item = 100

    @initialize(capacity=st.sampled_from([0, 1, 2, 3]))
    def create(self, capacity: int) -> None:
        self.ch = tc.Channel(capacity)
        self.capacity = capacity

    # -- actors ----------------------------------------------------------------------------------
    async def sender(self, i: int, item: int) -> None:
        try:
            await self.ch.send(item)
        except tc.ChannelClosed:
            self.log.append(("send failed: closed", i))
            return
        except tc.Cancelled:
            self.log.append(("cancelled", i))
            raise
        self.log.append(("sent", i))

    async def receiver(self, i: int) -> None:
        try:
            item = await self.ch.recv()
        except tc.ChannelClosed:
            self.log.append(("recv ended: closed", i))
            return
        except tc.Cancelled:
            self.log.append(("cancelled", i))
            raise
        self.log.append(("got", i, item))

    # -- model -----------------------------------------------------------------------------------
    def model_send(self, i: int, item: int) -> None:
        if self.closed:
            self.outcome[i] = ("send failed: closed",)
        elif self.receivers:
            self.outcome[self.receivers.popleft()] = ("got", item)
            self.outcome[i] = ("sent",)
        elif len(self.buf) < self.capacity:
            self.buf.append(item)
            self.outcome[i] = ("sent",)
        else:
            self.senders.append((i, item))

    def model_recv(self, i: int) -> None:
        if self.buf:
            self.outcome[i] = ("got", self.buf.popleft())
            if self.senders:
                s, item = self.senders.popleft()
                self.buf.append(item)
                self.outcome[s] = ("sent",)
        elif self.senders:
            s, item = self.senders.popleft()
            self.outcome[i] = ("got", item)
            self.outcome[s] = ("sent",)
        elif self.closed:
            self.outcome[i] = ("recv ended: closed",)
        else:
            self.receivers.append(i)

    # -- rules -----------------------------------------------------------------------------------
    @precondition(lambda self: self.room())
    @rule()
    def send(self) -> None:
        item, self.next_item = self.next_item, self.next_item + 1
        i = self.start(lambda i: self.sender(i, item))
        self.model_send(i, item)

    @precondition(lambda self: self.room())
    @rule()
    def recv(self) -> None:
        self.model_recv(self.start(self.receiver))

    @rule()
    def close(self) -> None:
        self.ch.close()
        if not self.closed:
            self.closed = True
            for s, _item in self.senders:
                self.outcome[s] = ("send failed: closed",)
            for r in self.receivers:
                self.outcome[r] = ("recv ended: closed",)
            self.senders.clear()
            self.receivers.clear()

    @rule(k=PICK)
    def cancel_blocked_sender(self, k: int) -> None:
        if not self.senders:
            return
        s, item = self.senders[k % len(self.senders)]
        self.tasks[s].cancel()
        self.senders.remove((s, item))
        self.outcome[s] = ("cancelled",)  # its item is not delivered

    @rule(k=PICK)
    def cancel_blocked_receiver(self, k: int) -> None:
        if not self.receivers:
            return
        r = self.receivers[k % len(self.receivers)]
        self.tasks[r].cancel()
        self.receivers.remove(r)
        self.outcome[r] = ("cancelled",)

    @precondition(lambda self: self.room())
    @rule()
    def send_racing_cancel_of_first_receiver(self) -> None:
        """A send hands its item to the first blocked receiver just as that one is cancelled:
        either the receiver returns the item (the cancel comes later) or the item goes on as
        if that receiver had never waited. Never lost, never twice."""
        item, self.next_item = self.next_item, self.next_item + 1
        i = self.start(lambda i: self.sender(i, item))
        if not self.receivers:  # no race to run: a plain send
            self.model_send(i, item)
            return
        first = self.receivers[0]
        self.tasks[first].cancel()
        self.settle()
        if self.last().get(first) == ("got", item):
            self.model_send(i, item)  # the receiver won: it is first in line
        else:
            self.receivers.popleft()
            self.outcome[first] = ("cancelled",)
            self.model_send(i, item)

    # -- the check -------------------------------------------------------------------------------
    @invariant()
    def agrees_with_the_model(self) -> None:
        if self.ch is None:
            return
        self.settle()
        assert self.ch.statistics() == tc.channel.ChannelStatistics(
            self.capacity, len(self.buf), len(self.senders), len(self.receivers), self.closed
        ), self.log
        assert self.last() == self.outcome, self.log
        self.assert_parked([s for s, _item in self.senders])
        self.assert_parked(self.receivers)
        self.assert_done(self.outcome)
        got = [e[2] for e in self.log if e[0] == "got"]
        assert len(got) == len(set(got))  # nothing delivered twice


globals().update(per_context_count(ChannelMachine, max_examples=60))
