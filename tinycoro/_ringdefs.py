"""What the pure-Python ring (``uring.py``) and the compiled one (``_cring.pyx``) share.

Its own module so that the compiled ring imports these without importing ``tinycoro.uring``,
which imports the compiled ring: no import cycle between the two (``tinycoro.compiled`` loads
``_cring``, ``uring`` re-exports both names).
"""

from __future__ import annotations

__all__ = ["RingBusy", "SKIP_UD"]

#: user_data of an SQE whose preparation failed (``Ring.queue`` turns it into a NOP); a ring's
#: owner uses it for its own SQEs too (cancel requests). 0 is not allowed by the binding.
SKIP_UD = 1


class RingBusy(OSError):
    """The kernel refused to take more SQEs (EBUSY/EAGAIN: its CQ overflowed). Nothing was
    queued: reap completions, then queue again (rule 5)."""
