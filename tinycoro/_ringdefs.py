"""What the pure-Python ring (``uring.py``) and the compiled one (``_cring.pyx``) share: the
placeholder user_data, the busy error, and the knobs of the multishot receive's buffer pool.

Its own module so that the compiled ring imports these without importing ``tinycoro.uring``,
which imports the compiled ring: no import cycle between the two (``tinycoro.compiled`` loads
``_cring``, ``uring`` re-exports both names).
"""

from __future__ import annotations

import os

__all__ = [
    "RingBusy", "SKIP_UD", "MULTI_UD_TAG", "CQ_ENTRIES", "MULTISHOT_ENV", "MULTISHOT_BUFFERS", "MULTISHOT_BUFFER_SIZE",
    "MULTISHOT_BUFFERS_ENV", "multishot_buffers", "multishot_wanted",
]

#: user_data of an SQE whose preparation failed (``Ring.queue`` turns it into a NOP); a ring's
#: owner uses it for its own SQEs too (cancel requests). 0 is not allowed by the binding.
SKIP_UD = 1

#: A bit set in the user_data of every operation that completes many times (``RingOwner.arm``)
#: and of no other op: the ring tells a CQE of such an op (one of the owner's *standing*
#: table) by this bit and the op in its slot, with no look-up in that table. The lowest bit:
#: without it, an op's user_data is the index of its entry in its owner's in-flight table,
#: a list of two entries per slot (the op, or None, and the slot's user_data: even), where a
#: dict keyed by user_data was looked up, filled and emptied once per operation (at 10,000
#: connections it rehashed every few thousand operations and missed the cache; the
#: completion contract in ``tinycoro.uring``). SKIP_UD has the bit too, and its slot (0)
#: never holds an op.
MULTI_UD_TAG = 1


class RingBusy(OSError):
    """The kernel refused to take more SQEs (EBUSY/EAGAIN: its CQ overflowed). Nothing was
    queued: reap completions, then queue again (rule 5)."""


#: The compiled ring's completion queue (IORING_SETUP_CQSIZE): every armed multishot recv may
#: post a CQE in one turn, and the kernel ends a multishot that finds the CQ full, so the CQ
#: holds one per connection up to this many (16 bytes each: 256 KiB per ring). With the
#: default twice 256 entries, 1,000 echo connections ended ~8,000 multishots a second, each
#: armed again by its next recv. A single recv in flight per stream overflows it no more either.
CQ_ENTRIES = 16384

#: ``TINYCORO_MULTISHOT=0`` forces the single recv everywhere (tests of the fallback, or a
#: kernel whose multishot recv misbehaves); read when a ring is created.
MULTISHOT_ENV = "TINYCORO_MULTISHOT"
#: The provided buffers of a ring's multishot recvs: how many and how large, shared by every
#: stream of the ring. The kernel consumes them incrementally (IOU_PBUF_RING_INC, 6.12): a
#: receive takes from the head buffer only the bytes it wrote, so the pool holds this many
#: bytes of CQEs between two reaps whatever the number of connections (10,000 requests of
#: 64 B are 640 KiB), and a buffer returns to the kernel once it is full and copied out. Each
#: CQE carries at most one buffer's worth; a recv(n) joins what is queued. 64 x 64 KiB = 4 MiB
#: of address space per ring, touched as data arrives; it does not grow with connections.
#: (A kernel without incremental buffers spends one whole buffer per CQE.)
MULTISHOT_BUFFERS = 64
MULTISHOT_BUFFER_SIZE = 65536
#: ``TINYCORO_MULTISHOT_BUFFERS=N`` sets how many buffers a ring's pool holds (a power of two,
#: at most 32768), read when a ring is created: more for many busy streams per context (the
#: statistics' ``multishot_enobufs`` say when the pool runs dry), fewer to test exhaustion.
MULTISHOT_BUFFERS_ENV = "TINYCORO_MULTISHOT_BUFFERS"


def multishot_buffers() -> int:
    """The pool size ``TINYCORO_MULTISHOT_BUFFERS`` asks for, else ``MULTISHOT_BUFFERS``;
    ValueError naming the variable for anything but a power of two in [1, 32768]."""
    raw = os.environ.get(MULTISHOT_BUFFERS_ENV, "").strip()
    if not raw:
        return MULTISHOT_BUFFERS
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 0 < n <= 32768 or n & (n - 1):
        raise ValueError(
            f"{MULTISHOT_BUFFERS_ENV} must be a power of two from 1 to 32768, got {raw!r}"
        )
    return n


def multishot_wanted() -> bool:
    """False when ``TINYCORO_MULTISHOT`` says 0 (or off/false/no): rings created and streams
    made meanwhile receive with single recvs."""
    return os.environ.get(MULTISHOT_ENV, "1").strip().lower() not in ("0", "off", "false", "no")
