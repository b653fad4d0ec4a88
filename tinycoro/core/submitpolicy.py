"""When a turn hands its SQEs to the kernel before its end: the engine's ``SUBMIT_EARLY``.

A turn queues SQEs as its tasks run and submits them together at its end, one
``io_uring_enter`` per batch; a long turn submits every ``SUBMIT_EARLY`` SQEs instead, so that
a device is not left idle while the rest of the turn runs (``Engine._start``).

``TINYCORO_SUBMIT_EARLY=N`` sets that count (read once, as the engine is imported), for A/B
runs. Why it is a setting: on the 50-connection echo the replies of a turn are sends queued on
the ring, and the client gets none of them until the turn's end, so client and server take
turns instead of overlapping. With N = 2 the client's CPU per request fell from 5.8-6.1 us to
4.8-4.9 us (uvloop's protocol server: 4.9-5.0) and the server served 3-4x more requests in
alternating runs on a heavily loaded machine (docs/benchmarks-profiles.md, "The end-of-turn
submit"); a quiet machine has not measured it yet. O_DIRECT reads and writes do not wait for
it: they go at once (``Op.eager``), which is what N = 1 gave them (64 in flight: 81.7-92.7k
reads/s against 83.7-86.5k with 16, at ~2 us more system time per read), without a system
call per SQE for everything else (docs/benchmarks-log.md, 2026-11-30 14:09).
"""

from __future__ import annotations

from .checks import env_int

__all__ = ["DEFAULT_SUBMIT_EARLY", "SUBMIT_EARLY_ENV", "submit_early"]

DEFAULT_SUBMIT_EARLY = 16
SUBMIT_EARLY_ENV = "TINYCORO_SUBMIT_EARLY"


def submit_early() -> int:
    """The count ``TINYCORO_SUBMIT_EARLY`` asks for, else :data:`DEFAULT_SUBMIT_EARLY`;
    ValueError naming the variable for anything but a whole number from 1 to 65536."""
    n = env_int(SUBMIT_EARLY_ENV, lambda n: 0 < n <= 65536, "a whole number from 1 to 65536")
    return DEFAULT_SUBMIT_EARLY if n is None else n
