"""Tokens: the right to do something that only one task at a time may do (hold a mutex,
receive on a stream), taken and given back as single atomic steps; and free lists of spare
objects, taken from the same way.

A token is a list holding one element while it is free and none while it is taken (``new()``
makes a free one). ``take(token)`` removes the element and says whether it was there: of two
threads that take at once exactly one gets it (a compare-and-set). ``give(token)`` puts it
back, and giving twice still leaves one, so not even a misused release can make two.
``spare(spares)`` takes the last object of a free list, or returns None when it is empty.

These are the steps of every uncontended lock and every recv, so their cost is each
request's. Compiled code cimports this module's .pxd under the same name, where each is a few
C statements on the list's own fields: no method call, no exception raised and caught when
the token or the list is gone, so no ``try`` and no read of the thread state it saves the
exception state into (on 3.12 and later a call into the shared libpython's thread-local
storage). Under the GIL such a step runs no Python code, so no other thread runs inside it;
without the GIL it runs under the list's own lock, as ``list.pop`` does. This is the
interpreted twin: the same steps through the list's methods, each one C call.
"""

from __future__ import annotations

from typing import Any

_ONE = (None,)


def new() -> list:
    """A free token."""
    return [None]


def take(token: list) -> bool:
    """Take the token if it is there: True if this call took it."""
    try:
        token.pop()
    except IndexError:
        return False
    return True


def give(token: list) -> None:
    """Put the token back (it may be there already: there is still one)."""
    token[:] = _ONE  # one C call, as pop is: an append could make two


def spare(spares: list) -> Any:
    """The last object of the free list *spares*, taken from it, or None if it is empty."""
    try:
        return spares.pop()
    except IndexError:
        return None
