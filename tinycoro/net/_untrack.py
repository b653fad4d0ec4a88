"""Taking an object out of the cyclic collector's view, where it can be in no cycle.

Every object the collector tracks is walked by each full collection, and with many open
connections those walks were most of a server's CPU (docs/benchmarks-profiles.md, "The
connection-count axis"). Some objects CPython tracks cannot be part of a cycle: a list that
only ever holds ints, a weak reference without a callback (it refers to nothing strongly).
Compiled code cimports ``_untrack.pxd`` under this module's name (as ``iterslots``), where
:func:`untracked` is ``PyObject_GC_UnTrack``. This is the pure-Python twin: Python has no way
to untrack an object, so it returns the object as it is (tracked, which is only slower).
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def untracked(obj: T) -> T:
    """*obj*, no longer tracked by the cyclic collector where compiled. Only for an object
    that can never refer to something that refers back to it (the module doc)."""
    return obj
