"""The low-level ring as users and notebooks/10_io_uring.ipynb drive it by hand, on both rings:
``get_sqe`` + a ``prep_*`` function, ``submit``, then ``reap`` of what has completed. ``reap``
is part of :class:`tinycoro.uring.Ring`'s public interface (the engine uses ``complete``)."""

from __future__ import annotations

import pytest

from tinycoro import uring

pytestmark = pytest.mark.timeout(30)

IMPLS = [
    pytest.param(uring.PyRing, id="pure"),
    pytest.param(
        uring.CRing, id="compiled",
        marks=pytest.mark.skipif(uring.CRing is None, reason=f"compiled ring: {uring.WHY_PURE}"),
    ),
]


@pytest.mark.parametrize("ring_cls", IMPLS)
def test_reap_by_hand_appends_user_data_and_result_in_order(ring_cls):
    ring = ring_cls(64)
    try:
        for i in range(16):
            sqe = ring.get_sqe()
            uring.prep_nop(sqe)
            sqe.user_data = 100 + i
        assert ring.sq_ready() == 16
        assert ring.submit() == 16
        out: list = [("already", "there")]
        while len(out) < 17:  # NOPs complete inside the submit; reap takes them without waiting
            assert ring.reap(out) > 0
        assert out == [("already", "there")] + [(100 + i, 0) for i in range(16)]
        assert ring.reap(out) == 0 and len(out) == 17
    finally:
        ring.close()
