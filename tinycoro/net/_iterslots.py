"""A compiled awaitable's steps without a generator and without a raised exception per result.

An awaitable that is its own iterator (``__await__`` returns it) ends its await by raising
``StopIteration(result)`` from ``__next__``. Compiled by Cython, that raise leaves through the
function's error exit, which records a traceback entry (a frame and a code object: ~2,900
instructions per recv on the echo, callgrind), where a Cython generator's ``return`` sets the
exception without one. :func:`install` gives such a class C slots that skip it: ``__next__``
(``tp_iternext``) sets ``StopIteration`` directly, and ``am_send`` (which CPython 3.10 and 3.11
use for ``await`` where a type has it) returns the result with no exception at all.

This is the pure-Python twin: ``install`` does nothing, and the class's own ``__next__`` runs.
Compiled code cimports ``_iterslots.pxd`` under this module's name (as ``fence``), where
``install`` is the C function. The class's Python-level ``__next__``, ``send``, ``throw`` and
``close`` stay what they are (``__next__`` called by name runs the class's own).
"""

from __future__ import annotations

from typing import Any, Callable


def install(cls: type, step: Callable[[Any, Any], Any], result: Callable[[Any], Any]) -> None:
    """Compiled: *cls*'s ``tp_iternext`` and ``am_send`` run ``step(obj, value)`` (*value*
    None for ``__next__``, what was sent for ``am_send``), which returns the trap to yield, or *obj* itself once the await is over, when ``result(obj)`` is what it
    returns. Interpreted: nothing (the class's ``__next__`` does the same)."""
