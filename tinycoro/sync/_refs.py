"""Whether an object has no holder but the one asking: the seam that lets a compiled
primitive hand out its spare awaitable again instead of allocating one per acquisition.

Compiled code cimports this module's .pxd under the same name, where ``unshared(o)`` is the C
test ``Py_REFCNT(o) == 2`` under the GIL: the caller's local variable and the one field it read
the object from are then its only holders, nothing else can see it, so changing its fields and
handing it out again is indistinguishable from handing out a fresh one. Without the GIL another
thread may be between reading that count and taking its own reference, so there, and
interpreted (where references are everywhere and the saving would be nil), ``unshared`` always
says no and callers allocate.
"""

from __future__ import annotations

#: Whether :func:`unshared` can ever say yes (compiled, on a build with the GIL): callers keep
#: a spare only then (without the GIL, two threads writing one spare field would race).
REUSE: bool = False


def unshared(_o: object) -> bool:
    """Is *_o* held only by the caller's local variable and the field it was read from?
    Interpreted: never (module doc). Compiled, pass a local variable, not a global or an
    attribute, which Cython copies into a temporary reference first (a count of 3)."""
    return False
