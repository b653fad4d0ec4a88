"""Shares of the last second, from samples of a cumulative amount.

A context's "busy" is the share of the last second it spent running tasks; the cluster
dashboard sets beside it the share of a core its engine's process used over that same second.
Both are read from a counter that only grows (seconds asleep, CPU seconds) and is sampled now
and then, never on a timer: an engine samples its sleep total as it wakes, a dashboard the CPU
time each engine reports. Between two samples the counter's value is interpolated, so the
estimate for a window that starts between them is off by at most their distance (samples are
kept :data:`STEP` apart), and a counter known to grow at one second per second (a context
asleep since a known moment) is exact. An average from a single old sample instead decays like
1/t once the context sleeps: after a one-second load it read 41%, 25%, 18%, ... for many
seconds. Plain functions of tuples, no clock, no state: any thread may call them.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["STEP", "WINDOW", "Sample", "awake_share", "growth", "keep", "sample"]

WINDOW = 1.0  # seconds: "the last second" of the legends
STEP = 0.05  # seconds at least between two kept samples: bounds the interpolation's error

Sample = tuple[float, float]  # (time, the cumulative amount at that time)


def keep(samples: tuple[Sample, ...], t: float, total: float,
         window: float = WINDOW) -> tuple[Sample, ...]:
    """*samples* (oldest first) with ``(t, total)`` added, keeping only what a window of
    *window* seconds ending at *t* or later needs: the newest sample at or before its start,
    and every later one. A new tuple, so a reader on another thread sees the old or the new
    one whole."""
    out = samples + ((t, total),)
    start = t - window
    first = 0
    while first + 1 < len(out) and out[first + 1][0] <= start:
        first += 1
    return out[first:] if first else out


def _at(points: Sequence[Sample], t: float) -> float:
    """The amount at *t*, interpolated between the known points around it (the first point's
    amount before them: nothing is known earlier)."""
    prev = points[0]
    if t <= prev[0]:
        return prev[1]
    for point in points[1:]:
        if t <= point[0]:
            span = point[0] - prev[0]
            if span <= 0:
                return point[1]
            return prev[1] + (point[1] - prev[1]) * (t - prev[0]) / span
        prev = point
    return prev[1]


def growth(points: Sequence[Sample], now: float, window: float = WINDOW) -> float | None:
    """How fast the amount grew over the *window* seconds up to *now*, per second, from known
    points (oldest first, the last at *now*); over the points' whole span when they begin
    later. None when they span no time."""
    start = max(now - window, points[0][0])
    if now - start <= 0:
        return None
    return (_at(points, now) - _at(points, start)) / (now - start)


def sample(samples: tuple[Sample, ...], t: float,
           total: float) -> tuple[tuple[Sample, ...], float | None]:
    """A reading of a growing amount taken at *t*: the samples with it kept (unless it is
    closer than :data:`STEP` to the newest one) and the amount's growth per second over the
    last window up to *t*; None for the growth when the reading was not kept or the samples
    span no time yet (a caller shows the growth it showed last)."""
    if samples and t - samples[-1][0] < STEP:
        return samples, None
    samples = keep(samples, t, total)
    return samples, growth(samples, t)


def awake_share(samples: Sequence[Sample], sleep_total: float, sleep_since: float,
                now: float, window: float = WINDOW) -> float:
    """The share of the *window* seconds up to *now* that an engine spent awake, in [0, 1].

    *samples* are ``(time, seconds asleep so far)`` taken as it woke; *sleep_total* is its
    sleep so far, up to the current sleep, which began at *sleep_since* (0: awake). While it
    sleeps its sleep grows at one second per second, so once it has slept a whole window the
    share is exactly 0."""
    asleep = 0.0 < sleep_since <= now
    if asleep and now - sleep_since >= window:
        return 0.0
    points = [s for s in samples if s[0] < now]
    if asleep:
        points.append((sleep_since, sleep_total))
    points.append((now, sleep_total + (now - sleep_since if asleep else 0.0)))
    slept = growth(points, now, window)
    if slept is None:
        return 0.0
    return min(1.0, max(0.0, 1.0 - slept))
