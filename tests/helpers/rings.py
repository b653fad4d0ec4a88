"""Reaping a bare ring in tests, through the ring's one completion call (``complete``), as its
owners do: no second reaping path exists only for tests."""

from __future__ import annotations

from typing import Any, Iterable


def reap(ring: Any, out: list, uds: Iterable[int] = range(1, 1001)) -> int:
    """Reap every ready CQE of *ring*; append ``(user_data, res)`` to *out* for each whose
    user_data is in *uds* (in completion order); return how many CQEs were reaped, those of
    other user_data included (they are counted, as an owner's own SQEs are)."""
    inflight = {ud: ud for ud in uds}
    done: list = []
    n = ring.complete(inflight, {}, done, [])  # no multishot is armed on a bare ring
    out.extend(done)
    return n
