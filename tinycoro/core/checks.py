"""Argument checks shared by every layer: one helper per kind of value, one wording per error.

Wrong arguments fail at the call with a message that names the parameter and the value
(TypeError for the wrong kind of value, ValueError for a value out of range), before anything
reaches a ring or another thread.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable, Literal, overload

__all__ = ["CONTEXTS_VAR", "DEFAULT_CONTEXTS", "default_contexts", "DISPATCH", "is_int", "check_int", "check_seconds", "check_contexts", "check_dispatch", "env_int"]

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


#: What ``contexts=None`` means under the GIL (and on a free-threaded build running with it
#: turned back on): one context (docs/design.md rule 15).
DEFAULT_CONTEXTS = 1
#: The environment variable that, when set, is what ``contexts=None`` means in this process:
#: scripts, the notebook's default scheduler and cluster engines alike.
CONTEXTS_VAR = "TINYCORO_CONTEXTS"


def default_contexts() -> int:
    """What ``contexts=None`` means here: the one place that decides it (rule 15).

    ``TINYCORO_CONTEXTS`` first, when set (a positive int; anything else is refused with its
    name). Else, where the GIL is off at run time (a free-threaded build, no extension turned
    it back on), one context per CPU this process may run on: contexts then run Python in
    parallel, and a second one ran CPU-bound coroutines 1.99x one (docs/benchmarks-log.md,
    "Free-threaded 3.13t: what contexts=None means"). Else one, :data:`DEFAULT_CONTEXTS`:
    under the GIL every context needs the GIL to run Python and one context already overlaps
    any number of io_uring operations, so a second adds no CPU and costs some per operation
    (docs/benchmarks-log.md, "Contexts: what a second one costs"). Read at each call, so a
    variable set after import counts.
    """
    n = env_int(CONTEXTS_VAR, lambda n: n >= 1, "a positive int")
    if n is not None:
        return n
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        count = getattr(os, "process_cpu_count", None)  # 3.13+: the affinity mask, PYTHON_CPU_COUNT
        return max(1, (count() if count is not None else None) or 1)
    return DEFAULT_CONTEXTS


def env_int(name: str, valid: Callable[[int], bool], requirement: str) -> int | None:
    """The whole number environment variable *name* holds, None when unset or blank;
    ValueError naming the variable and *requirement* for anything *valid* refuses."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = None
    if n is None or not valid(n):
        raise ValueError(f"{name} must be {requirement}, got {raw!r}")
    return n


def check_contexts(contexts: Any) -> int:
    """A scheduler's context count: a positive int, or None for :func:`default_contexts`."""
    if contexts is None:
        return default_contexts()
    if not is_int(contexts) or contexts < 1:
        raise ValueError(f"contexts must be a positive int or None, got {contexts!r}")
    return contexts


def check_dispatch(dispatch: Any) -> str:
    """A dispatch policy name, one of :data:`DISPATCH`."""
    if dispatch not in DISPATCH:
        raise ValueError(f"dispatch must be one of {DISPATCH}, got {dispatch!r}")
    return dispatch
