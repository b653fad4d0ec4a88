"""Argument checks shared by every layer: one helper per kind of value, one wording per error.

Wrong arguments fail at the call with a message that names the parameter and the value
(TypeError for the wrong kind of value, ValueError for a value out of range), before anything
reaches a ring or another thread.
"""

from __future__ import annotations

import math
from typing import Any, Literal, overload

__all__ = ["DEFAULT_CONTEXTS", "DISPATCH", "is_int", "check_int", "check_seconds", "check_contexts", "check_dispatch"]

DISPATCH = ("round_robin", "least_loaded")


def is_int(value: Any) -> bool:
    """True for an ``int`` that is not a ``bool`` (``True`` is an int to Python, not to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, min: int | None = None, max: int | None = None) -> int:
    """*value* as an int within ``[min, max]``; TypeError / ValueError naming *name* otherwise."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if (min is not None and value < min) or (max is not None and value > max):
        lo = "" if min is None else f"{min} <= "
        hi = "" if max is None else f" <= {max}"
        raise ValueError(f"{name} must be {lo}{name}{hi}, got {value!r}")
    return value


@overload
def check_seconds(name: str, value: Any, *, allow_none: Literal[False] = ...) -> float: ...
@overload
def check_seconds(name: str, value: Any, *, allow_none: bool) -> float | None: ...
def check_seconds(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """A number of seconds (int or float, not bool, not NaN); ``None`` only if *allow_none*."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        what = "a number of seconds or None" if allow_none else "a number of seconds"
        raise TypeError(f"{name} must be {what}, got {value!r}")
    return float(value)


DEFAULT_CONTEXTS = 1


def check_contexts(contexts: Any) -> int:
    """A scheduler's context count: a positive int, or None for :data:`DEFAULT_CONTEXTS` (1).

    One, not ``os.cpu_count()``: every context needs the GIL to run Python, and one context
    already overlaps any number of io_uring operations, so on I/O-bound work a second context
    adds no CPU and costs some per operation (more sleeps and wake-ups, the interpreter's state
    moving between cores): measured on echo, docs/benchmarks-log.md ("Contexts: what a second one costs"). More
    contexts are an explicit choice, for tasks that spend long stretches outside the GIL;
    more cores come from processes (docs/design.md rule 15).
    """
    if contexts is None:
        return DEFAULT_CONTEXTS
    if not is_int(contexts) or contexts < 1:
        raise ValueError(f"contexts must be a positive int or None, got {contexts!r}")
    return contexts


def check_dispatch(dispatch: Any) -> str:
    """A dispatch policy name, one of :data:`DISPATCH`."""
    if dispatch not in DISPATCH:
        raise ValueError(f"dispatch must be one of {DISPATCH}, got {dispatch!r}")
    return dispatch
