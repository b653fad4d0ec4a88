"""A deque's append, popleft and length as functions of the deque, for the engine's loop and
the ops that look at its ready queue: a push and a step each, per request on the echo.

Interpreted, they are the deque type's own methods (``deques.append(d, x)`` is ``d.append(x)``).
Compiled, ``deques.pxd`` (cimported under this module's name) makes them direct C calls of the
same C functions: through a bound method each call went through the generic call protocol,
~126 instructions a push on 3.12 (callgrind), and a truth test of the untyped deque through the
type's slots. Not a compiled module itself.
"""

from __future__ import annotations

from collections import deque

__all__ = ["append", "init", "popleft", "size"]

append = deque.append
popleft = deque.popleft
size = len  # deque's length; the builtin is the quicker call interpreted


def init() -> None:
    """Compiled, find the deque type's C functions (once per module that calls them, as it is
    imported); interpreted, there is nothing to find."""
