"""The deadlines of one engine: when each ``tc.timeout`` scope entered by its tasks expires.

A heap of ``[when, seq, scope]`` entries, owned by one engine and touched only on its thread.
The engine's loop fires what has passed at the end of every turn and bounds its sleep by the
next deadline (``Engine._block_until``); the deadlock watchdog asks whether any is pending
(a scope will wake a parked task). Removal is lazy: a removed entry has scope None and stays
until it surfaces, or until the dead outnumber the live and the heap is rebuilt without them.
Compiled with ``deadlines.pxd`` beside it, since the engine's loop calls it every turn.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from typing import Any

__all__ = ["Deadlines"]

_perf = time.perf_counter
log = logging.getLogger("tinycoro")


class Deadlines:
    """``heap``: the entries, earliest first (empty when nothing is pending: the engine tests
    it every turn); ``dead``: entries in it whose scope has exited."""

    __slots__ = ("heap", "dead", "_seq")

    def __init__(self) -> None:
        self.heap: list[list] = []
        self.dead = 0
        self._seq = itertools.count()

    def add(self, when: float, scope: Any) -> list:
        """Call ``scope._fire()`` once ``perf_counter()`` passes *when*. Returns the entry
        for :meth:`remove`."""
        entry = [when, next(self._seq), scope]
        heapq.heappush(self.heap, entry)
        return entry

    def remove(self, entry: list) -> None:
        """Forget a deadline (its scope exited). Lazy: the entry is marked and dropped when it
        surfaces, or all at once when the dead outnumber the live."""
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
        """True while a scope's deadline is pending."""
        return len(self.heap) > self.dead

    def fire(self) -> float | None:
        """Fire every deadline that has passed; return the next one, or None."""
        heap = self.heap
        now = _perf()
        while heap:
            entry = heap[0]
            scope = entry[2]
            if scope is None:
                heapq.heappop(heap)
                self.dead -= 1
                continue
            if entry[0] > now:
                return entry[0]
            heapq.heappop(heap)
            entry[2] = None
            try:
                scope._fire()  # queues the scope's interrupt on its task (call_soon)
            except BaseException:  # noqa: BLE001 - one broken scope must not stop the others
                log.exception("while firing the deadline of %r", scope)
        return None

    def clear(self) -> None:
        """Drop every deadline (the engine abandons its tasks)."""
        self.heap.clear()
        self.dead = 0
