"""The dashboards' memory: the last minute of each context's numbers (:class:`History`) and of
each engine process's CPU share (:class:`CpuMeter`), one kept point a second plus the newest.

Kept by the refresher thread, which alone writes it; the rendering reads it on that thread.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import tinycoro as tc
from tinycoro.core import timeshare

__all__ = ["SPAN", "STEP", "CpuMeter", "CpuPoint", "History", "Point", "keep"]

SPAN = 60.0  # seconds of history in each plot
STEP = 1.0  # seconds between two kept points of history (the newest point moves every tick)


@dataclass(frozen=True)
class Point:
    """One context at one moment, as plotted."""

    t: float  # time.monotonic()
    busy: float
    ops_rate: float  # completions per second over the last second
    queued: int
    inflight: int  # I/O in flight, sleeps left out
    parked: int
    sleeping: int = 0
    # shares of the last second the context's thread ran on a CPU, and waited for one (None
    # until two readings span some time): beside busy, why an awake context did not run
    cpu: float | None = None
    cpu_wait: float | None = None


def keep(kept: "collections.deque[Any]", point: Any, step: float, span: float) -> bool:
    """Append *point* (anything with a ``t``) to *kept* if the newest kept one is at least
    *step* seconds older, dropping points older than *span*; False if it was not kept."""
    if kept and point.t - kept[-1].t < step:
        return False
    kept.append(point)
    while kept and point.t - kept[0].t > span:
        kept.popleft()
    return True


class History:
    """The last minute of per-context numbers: one kept point a second, plus a newest point
    that each refresh replaces (so the plots move at the refresh rate while holding 61 points,
    not 240). Rates come from the cumulative ``io_ops`` counters. It outlives a ``%tinycoro
    restart`` (:meth:`rebase`): the plots go on across it, from the new scheduler's zero."""

    def __init__(self, span: float = SPAN, step: float = STEP) -> None:
        self.span = span
        self.step = step
        self._kept: list[collections.deque[Point]] = []
        self._last: list[Point | None] = []
        # (t, amount) readings per context of its cumulative I/O ops, CPU seconds and seconds
        # waiting for a CPU: as much as the last second's rate needs
        self._ops: list[tuple[timeshare.Sample, ...]] = []
        self._cpu: list[tuple[timeshare.Sample, ...]] = []
        self._wait: list[tuple[timeshare.Sample, ...]] = []

    def rebase(self) -> None:
        """The counters start again from zero (another scheduler): keep the points, forget
        the counters' readings so that no rate comes out negative."""
        self._ops = [()] * len(self._ops)
        self._cpu = [()] * len(self._cpu)
        self._wait = [()] * len(self._wait)

    def add(self, now: float, stats: tc.SchedulerStats) -> None:
        n = len(stats.contexts)
        while len(self._kept) < n:  # first sample, or a restart with more contexts
            self._kept.append(collections.deque())
            self._last.append(None)
            self._ops.append(())
            self._cpu.append(())
            self._wait.append(())
        # a restart with fewer
        del self._kept[n:], self._last[n:], self._ops[n:], self._cpu[n:], self._wait[n:]
        for i, c in enumerate(stats.contexts):
            shown = self._last[i] or (self._kept[i][-1] if self._kept[i] else None)
            self._cpu[i], cpu = _share(self._cpu[i], now, c.cpu)
            self._wait[i], wait = _share(self._wait[i], now, c.cpu_wait)
            point = Point(now, c.busy if stats.running else 0.0, self._rate(i, now, c.io_ops),
                          c.queued, c.in_io, c.parked, c.sleeps,
                          cpu if cpu is not None else (shown.cpu if shown else None),
                          wait if wait is not None else (shown.cpu_wait if shown else None))
            kept = self._kept[i]
            self._last[i] = None if keep(kept, point, self.step, self.span) else point

    def _rate(self, ctx: int, now: float, io_ops: int) -> float:
        """Completions per second of context *ctx* over the last second (the window of its
        busy share, :mod:`tinycoro.core.timeshare`), from its cumulative ``io_ops``; the rate
        shown last while the readings are too close together to say."""
        readings = self._ops[ctx]
        if readings and io_ops < readings[-1][1]:  # counters restarted without a rebase
            readings = ()
        self._ops[ctx], rate = timeshare.sample(readings, now, float(io_ops))
        if rate is None:
            shown = self._last[ctx] or (self._kept[ctx][-1] if self._kept[ctx] else None)
            return shown.ops_rate if shown else 0.0
        return max(0.0, rate)

    def points(self, ctx: int) -> list[Point]:
        """The kept points of context *ctx*, oldest first, then the newest one."""
        if ctx >= len(self._kept):
            return []
        out = list(self._kept[ctx])
        last = self._last[ctx]
        if last is not None:
            out.append(last)
        return out


def _share(readings: tuple[timeshare.Sample, ...], now: float,
           total: float) -> tuple[tuple[timeshare.Sample, ...], float | None]:
    """A cumulative amount of seconds read at *now*: the readings with it, and its growth
    per second over the last second in [0, 1] (None: too close to the last reading)."""
    if readings and total < readings[-1][1]:  # another thread, or counters restarted
        readings = ()
    readings, share = timeshare.sample(readings, now, total)
    return readings, None if share is None else min(1.0, max(0.0, share))


@dataclass(frozen=True)
class CpuPoint:
    t: float
    cpu: float  # CPU seconds per wall second over the last second (1.0 = one core)


class CpuMeter:
    """Process CPU per engine, as a share of one core over the last second (the window of the
    contexts' busy, :mod:`tinycoro.core.timeshare`, so that the two compare), from the CPU
    seconds each of its answers reports; with the last minute of it (one kept point a second,
    like :class:`History`)."""

    def __init__(self, span: float = SPAN, step: float = STEP) -> None:
        self.span, self.step = span, step
        self._readings: dict[int, tuple[timeshare.Sample, ...]] = {}  # engine -> (t, CPU s)
        self._kept: dict[int, collections.deque[CpuPoint]] = {}
        self._newest: dict[int, CpuPoint] = {}

    def add(self, engine: int, now: float, cpu_seconds: float | None) -> float | None:
        """Record a reading; the CPU share over the last second (over the readings' span
        while they span less; None: no reading yet, or too short a span to say)."""
        if cpu_seconds is None:
            return None
        self._readings[engine], share = timeshare.sample(
            self._readings.get(engine, ()), now, cpu_seconds)
        if share is None:  # too close to the last reading, or the first one
            return self.now(engine)
        point = CpuPoint(now, max(0.0, share))
        self._newest[engine] = point
        keep(self._kept.setdefault(engine, collections.deque()), point, self.step, self.span)
        return point.cpu

    def points(self, engine: int) -> list[CpuPoint]:
        out = list(self._kept.get(engine, ()))
        newest = self._newest.get(engine)
        if newest is not None and (not out or out[-1] is not newest):
            out.append(newest)
        return out

    def now(self, engine: int) -> float | None:
        newest = self._newest.get(engine)
        return newest.cpu if newest is not None else None
