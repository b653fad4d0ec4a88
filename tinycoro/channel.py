"""Channel: a FIFO queue between tasks, bounded (``capacity`` > 0) or rendezvous (0).

State, all under one lock: a buffer of at most ``capacity`` items, a parking lot of blocked
senders (each carrying its item) and one of blocked receivers. Two invariants follow from
handing items over directly, never through "free" (baton passing, as in the Mutex):

* receivers wait only while the buffer is empty and no sender waits;
* senders wait only while the buffer is full (always, for capacity 0) and no receiver waits.

``send`` gives its item straight to the first waiting receiver, else buffers it, else waits.
``recv`` takes the oldest buffered item and refills the buffer from the first waiting sender
(which is then released), or, with nothing buffered, takes a waiting sender's item directly
(the rendezvous), else waits. FIFO holds across all three paths.

``close()`` (idempotent, any thread) wakes every blocked sender with ``ChannelClosed`` (their
items are not delivered) and every blocked receiver; receivers drain what is buffered before
they see ``ChannelClosed``; ``async for`` ends there.

A ``send`` or ``recv`` that completes at once (room, an item, a waiting partner) is an
operation like any other (rule 16): it passes ``consume_budget`` first, so a loop of them lets
the context's other tasks run, and a cancel or timeout due is raised there, before anything is
transferred.

Cancellation never loses or duplicates an item: a sender or receiver cancelled while queued
leaves the queue with nothing transferred; one whose transfer already happened (item taken, item
delivered) completes normally and sees the cancellation at its next await.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .core.checks import check_int
from .core.errors import ChannelClosed
from .core.traps import consume_budget
from .sync._lot import ParkingLot, spend, wake_all

T = TypeVar("T")


class _Closed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "CLOSED"


_CLOSED: Any = _Closed()  # the wake value of a waiter released by close()


@dataclass(frozen=True)
class ChannelStatistics:
    capacity: int
    buffered: int
    senders: int  # tasks blocked in send()
    receivers: int  # tasks blocked in recv()
    closed: bool


class Channel(Generic[T]):
    """``await ch.send(x)``, ``await ch.recv()``, ``ch.close()``, ``async for x in ch``."""

    __slots__ = ("_mu", "_capacity", "_buf", "_senders", "_receivers", "_closed")

    def __init__(self, capacity: int = 0) -> None:
        check_int("Channel capacity", capacity)
        if capacity < 0:
            raise ValueError(f"Channel capacity must be >= 0 (0 = rendezvous), got {capacity}")
        self._mu = threading.Lock()
        self._capacity = capacity
        self._buf: deque[T] = deque()
        self._senders = ParkingLot(self._mu, self)
        self._receivers = ParkingLot(self._mu, self)
        self._closed = False

    @property
    def capacity(self) -> int:
        return self._capacity

    async def send(self, item: T) -> None:
        """Deliver *item*: to a waiting receiver, else into the buffer, else wait for room
        (capacity 0: wait until a receiver takes it). ``ChannelClosed`` if closed."""
        if not spend():  # rule 16 (module doc); one that waits is charged too: harmless
            await consume_budget()  # spent, or an interrupt is due: it is raised here
        with self._mu:
            if self._closed:
                raise ChannelClosed(f"send() on closed {self!r}")
            receiver = self._receivers.pop()
            if receiver is None:
                if len(self._buf) < self._capacity:
                    self._buf.append(item)
                    return
                waiter = self._senders.enqueue(item)
        if receiver is not None:
            receiver.task.wake(item)
            return
        # No undo: if our item was taken, the send happened; a cancel comes at the next await.
        if await self._senders.park(waiter) is _CLOSED:
            raise ChannelClosed(f"{self!r} was closed while send() waited; item not delivered")

    async def recv(self) -> T:
        """Take the oldest item, waiting for one; ``ChannelClosed`` once closed and drained."""
        if not spend():  # rule 16 (module doc)
            await consume_budget()
        with self._mu:
            buf = self._buf
            sender = self._senders.pop()
            if buf:
                item = buf.popleft()
                if sender is not None:  # room again: move the first blocked sender's item in
                    buf.append(sender.item)
            elif sender is not None:  # rendezvous: take the blocked sender's item directly
                item = sender.item
            elif self._closed:
                raise ChannelClosed(f"recv() on closed and drained {self!r}")
            else:
                waiter = self._receivers.enqueue()
                item = _CLOSED  # marker: we must wait (no real item is ever _CLOSED)
        if sender is not None:
            sender.item = None
            sender.task.wake(None)
        if item is _CLOSED:
            # No undo: an item handed to us is returned even if a cancel raced with it (the
            # cancel is raised at our next await), so no item is ever lost.
            item = await self._receivers.park(waiter)
            if item is _CLOSED:
                raise ChannelClosed(f"recv() on closed and drained {self!r}")
        return item

    def close(self) -> None:
        """Close the channel: blocked senders get ``ChannelClosed``, blocked receivers drain the
        buffer (empty whenever a receiver is blocked) and get ``ChannelClosed``. Idempotent."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            senders = self._senders.pop_all()
            receivers = self._receivers.pop_all()
        for s in senders:
            s.item = None
        wake_all(senders, _CLOSED)
        wake_all(receivers, _CLOSED)

    def is_closed(self) -> bool:
        return self._closed

    def statistics(self) -> ChannelStatistics:
        with self._mu:
            return ChannelStatistics(
                self._capacity,
                len(self._buf),
                len(self._senders),
                len(self._receivers),
                self._closed,
            )

    def __aiter__(self) -> "Channel[T]":
        return self

    async def __anext__(self) -> T:
        try:
            return await self.recv()
        except ChannelClosed:
            raise StopAsyncIteration from None

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<Channel capacity={self._capacity}{state} buffered={len(self._buf)} "
            f"senders={len(self._senders)} receivers={len(self._receivers)}>"
        )
