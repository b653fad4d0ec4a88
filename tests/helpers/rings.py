"""Reaping a bare ring in tests by user_data: tests that queue SQEs by hand pick any user_data
(all 64 bits, odd ones, neighbours), where ``complete`` finds an owner's op in the slot its
user_data names (the completion contract in ``tinycoro/uring.py``), so these read the CQEs
through the ring's by-hand ``reap`` instead; the contract itself has tests of its own
(test_ring.py)."""

from __future__ import annotations

from typing import Any, Iterable


def reap(ring: Any, out: list, uds: Iterable[int] = range(1, 1001)) -> int:
    """Reap every ready CQE of *ring*; append ``(user_data, res)`` to *out* for the first CQE
    of each user_data in *uds* (in completion order: an owner's table holds an op once); return
    how many CQEs were reaped, those of other user_data included (they are counted, as an
    owner's own SQEs are)."""
    wanted = set(uds)
    got: list = []
    n = ring.reap(got)
    for ud, res in got:
        if ud in wanted:
            wanted.discard(ud)
            out.append((ud, res))
    return n
