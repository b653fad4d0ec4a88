"""The compiled ring's per-operation calls, made by its owner without a Python-level call.

Compiled, a ring's owner (:class:`tinycoro.core.ring.RingOwner`) calls ``queue``,
``complete``, ``submit``, ``sq_ready`` and ``cq_ready`` of the compiled ring, and sets its
``release_gil`` before a submit, through a table of C function pointers that the ring hands
out (``RingCore.c_calls``): ``ringcalls.queue(calls, ring, ...)`` is a C call
(``ringcalls.pxd``, which a module cimports under this name). Bound once and called through
Python's generic call, ``ring.queue(...)`` cost ~200 instructions per operation beyond its
own work (the call, the argument parse; callgrind, CPython 3.11).

The owner decides between the table and the ring's bound methods in one helper per call
(``RingOwner._queue_sqe``, ``_submit_sqes``, ``_cq_ready``, ``_complete``,
``_set_release_gil``), which every call site goes through. Interpreted there is no table (the
owner keeps 0 and calls the ring's bound methods): these twins, which call the ring by name,
are not reached there. ``pop_keep`` is the owner's
``free.pop()``, which compiled keeps the list's storage (``ringcalls.pxd`` says why).
"""

from __future__ import annotations

from typing import Any


def queue(calls: int, ring: Any, prep: Any, args: tuple, ud: int) -> int:
    """``ring.queue(prep, args, ud)``: 0."""
    ring.queue(prep, args, ud)
    return 0


def complete(calls: int, ring: Any, slots: list, free: list, standing: dict, done: list,
             shots: list) -> int:
    """``ring.complete(slots, free, standing, done, shots)``."""
    return ring.complete(slots, free, standing, done, shots)


def submit(calls: int, ring: Any) -> int:
    """``ring.submit()``."""
    return ring.submit()


def sq_ready(calls: int, ring: Any) -> int:
    """``ring.sq_ready()``."""
    return ring.sq_ready()


def cq_ready(calls: int, ring: Any) -> int:
    """``ring.cq_ready()``."""
    return ring.cq_ready()


def set_release_gil(calls: int, ring: Any, release_gil: bool) -> None:
    """``ring.release_gil = release_gil``."""
    ring.release_gil = release_gil


def pop_keep(free: list) -> Any:
    """``free.pop()``; compiled, without letting the list's storage go (ringcalls.pxd)."""
    return free.pop()
