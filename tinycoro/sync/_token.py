"""A lock's free token: a set that holds the int 0 while the lock is free, taken and given
back as single atomic steps (sync/mutex.py's module doc says why the uncontended path needs
nothing more).

``take(token)`` removes the 0 and says whether it was there: of two threads that take at once
exactly one gets it (a compare-and-set). ``give(token)`` puts it back; giving twice still
leaves one 0, so not even a misused unlock can make two.

Compiled code cimports this module's .pxd under the same name, where both are the set's own
C calls (``PySet_Discard``, ``PySet_Add``): no method call, no Python-level exception when the
token is gone, so no thread-state read for a ``try`` (on 3.12 and later a call into the shared
libpython's thread-local storage, for every lock). Each is one step under the GIL and under the
set's own lock without it. This is the interpreted twin: the same two steps through the set's
methods.
"""

from __future__ import annotations


def take(token: set) -> bool:
    """Take the token if it is there: True if this call took it."""
    try:
        token.remove(0)
    except KeyError:
        return False
    return True


def give(token: set) -> None:
    """Put the token back (it may be there already: there is still one)."""
    token.add(0)
