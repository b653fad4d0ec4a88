"""The deadlines of one engine: when each ``tc.timeout`` scope entered by its tasks expires,
and when each ``tc.sleep`` of its tasks ends.

One heap of ``[when, seq, item]`` entries, owned by one engine and touched only on its thread,
as asyncio and trio keep one per loop. ``when`` is a ``perf_counter()`` reading (the
monotonic clock) plus the length asked for, taken at the call: a sleep counts from its call,
not from whenever the turn hands something to the kernel. The engine's loop fires what has
passed at the end of every turn and bounds its sleep by the next deadline
(``Engine._block_until``), so at most one wait, the context's own idle wait, is armed for all
of them; the deadlock watchdog asks whether any is pending (a scope or a sleep will wake a
task). ``item`` is a scope, whose ``_fire()`` queues its interrupt, or a :class:`Sleep`,
whose task goes to the back of the ready queue. One pass pops entries earliest first
(``seq`` keeps equal deadlines in call order), so the sleepers due in one turn resume in
deadline order. Removal is lazy: a removed entry has item None and stays until it surfaces,
or until the dead outnumber the live and the heap is rebuilt without them.
Compiled with ``deadlines.pxd`` beside it, since the engine's loop calls it every turn.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import deque
from typing import Any, Generator

from .traps import Park, run_outside

__all__ = ["Deadlines", "Sleep"]

_perf = time.perf_counter
log = logging.getLogger("tinycoro")


class Sleep:
    """One ``tc.sleep(seconds)``: its length, its deadline (``perf_counter()`` at the call plus
    *seconds*) and, on an engine, its heap entry and its task.

    On an engine the sleeping task is parked (rule 7: it is work, and keeps its context from
    going idle) with ``Park(sleep.abort, sleep)``; the heap wakes it, and a cancel or an
    expired timeout takes the entry off the heap (:meth:`abort`): no kernel operation is
    involved, so none can be left behind. Where no engine runs on the thread (an asyncio
    loop), awaiting it hands it to the installed driver, which sleeps on that loop's timers.
    """

    __slots__ = ("seconds", "when", "task", "entry", "deadlines")

    def __init__(self, seconds: float, when: float) -> None:
        self.seconds = seconds
        self.when = when
        self.task: Any = None
        self.entry: list | None = None
        self.deadlines: Deadlines | None = None

    def abort(self) -> bool:
        """The park's abort (a cancel, an expired timeout, a shutdown), on the owner thread:
        True if the deadline was taken off the heap, False if it had fired already (the
        task is in the ready queue: the interrupt goes to its next await)."""
        entry = self.entry
        if entry is None or entry[2] is None:
            return False
        self.deadlines.remove(entry)  # type: ignore[union-attr]  # set with entry
        return True

    def __await__(self) -> Generator[Any, Any, Any]:
        """Only where no engine runs on this thread (an asyncio task): the driver's sleep."""
        return (yield from run_outside(self))

    def __repr__(self) -> str:
        return f"tc.sleep({self.seconds})"


class Deadlines:
    """``heap``: the entries, earliest first (empty when nothing is pending: the engine tests
    it every turn); ``dead``: entries in it whose scope exited or whose sleep was aborted;
    ``ready``: the engine's ready queue, where a sleep that ends puts its task."""

    __slots__ = ("heap", "dead", "_seq", "ready")

    def __init__(self, ready: deque | None = None) -> None:
        self.heap: list[list] = []
        self.dead = 0
        self._seq = itertools.count()
        self.ready: deque = ready if ready is not None else deque()

    def add(self, when: float, scope: Any) -> list:
        """Call ``scope._fire()`` once ``perf_counter()`` passes *when*. Returns the entry
        for :meth:`remove`."""
        entry = [when, next(self._seq), scope]
        heapq.heappush(self.heap, entry)
        return entry

    def sleep(self, task: Any, seconds: float, when: float) -> Park:
        """Put *task* on the heap until *when*; the ticket it parks with. The owner thread,
        inside *task*'s step: the park that follows keeps the task out of the ready queue
        until :meth:`fire` puts it back (or the ticket's abort takes the entry off)."""
        s = Sleep(seconds, when)
        s.task = task
        s.deadlines = self
        s.entry = entry = [when, next(self._seq), s]
        heapq.heappush(self.heap, entry)
        return Park(s.abort, s)

    def remove(self, entry: list) -> None:
        """Forget a deadline (its scope exited, its sleep was aborted). Lazy: the entry is
        marked and dropped when it surfaces, or all at once when the dead outnumber the live."""
        if entry[2] is None:
            return
        entry[2] = None
        self.dead += 1
        heap = self.heap
        if self.dead > 64 and 2 * self.dead > len(heap):
            heap[:] = [e for e in heap if e[2] is not None]
            heapq.heapify(heap)
            self.dead = 0

    def pending(self) -> bool:
        """True while a deadline is pending (a scope's or a sleep's)."""
        return len(self.heap) > self.dead

    def fire(self) -> float | None:
        """Fire every deadline that has passed, earliest first; return the next one, or None.
        Never early: an entry fires only once ``perf_counter()`` has reached it."""
        heap = self.heap
        ready = self.ready
        now = _perf()
        while heap:
            entry = heap[0]
            item = entry[2]
            if item is None:
                heapq.heappop(heap)
                self.dead -= 1
                continue
            if entry[0] > now:
                return entry[0]
            heapq.heappop(heap)
            entry[2] = None
            if type(item) is Sleep:
                ready.append(item.task)  # resumed with None at the next turn
                item.task = None
                continue
            try:
                item._fire()  # queues the scope's interrupt on its task (call_soon)
            except BaseException:  # noqa: BLE001 - one broken scope must not stop the others
                log.exception("while firing the deadline of %r", item)
        return None

    def clear(self) -> None:
        """Drop every deadline (the engine abandons its tasks)."""
        self.heap.clear()
        self.dead = 0
