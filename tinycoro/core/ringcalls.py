"""The compiled ring's per-operation calls, made by its owner without a Python-level call.

Compiled, a ring's owner (:class:`tinycoro.core.ring.RingOwner`) calls ``queue``,
``complete``, ``submit``, ``sq_ready`` and ``cq_ready`` of the compiled ring through a table of
C function pointers that the ring hands out (``RingCore.c_calls``): ``ringcalls.queue(calls,
ring, ...)`` is a C call (``ringcalls.pxd``, which a module cimports under this name). Bound
once and called through Python's generic call, ``ring.queue(...)`` cost ~200 instructions per
operation beyond its own work (the call, the argument parse; callgrind, CPython 3.11).

Interpreted there is no table (the owner keeps 0 and calls the ring's methods): these twins
are never reached, and say so if they are.
"""

from __future__ import annotations

from typing import Any


def _compiled_only() -> RuntimeError:
    return RuntimeError("ringcalls: the compiled ring's call table is used only compiled")


def queue(calls: int, ring: Any, prep: Any, args: tuple, ud: int) -> int:
    """``ring.queue(prep, args, ud)`` through the table (compiled only)."""
    raise _compiled_only()


def complete(calls: int, ring: Any, slots: list, free: list, standing: dict, done: list,
             shots: list) -> int:
    """``ring.complete(...)`` through the table (compiled only)."""
    raise _compiled_only()


def submit(calls: int, ring: Any) -> int:
    """``ring.submit()`` through the table (compiled only)."""
    raise _compiled_only()


def sq_ready(calls: int, ring: Any) -> int:
    """``ring.sq_ready()`` through the table (compiled only)."""
    raise _compiled_only()


def cq_ready(calls: int, ring: Any) -> int:
    """``ring.cq_ready()`` through the table (compiled only)."""
    raise _compiled_only()
