"""A compiled awaitable's steps without a generator, and without an exception per result
where the interpreter allows.

An awaitable that is its own iterator (``__await__`` returns it) ends its await by raising
``StopIteration(result)`` from ``__next__`` or ``send``. Compiled by Cython, that raise leaves
through the function's error exit, which records a traceback entry (a frame and a code
object: ~2,900 instructions per recv on the echo, callgrind), where a Cython generator's
``return`` sets the exception without one. :func:`install` gives such a class C slots that
skip it, for each way an await is resumed:

* ``am_send`` returns the result with no exception at all: the interpreter's ``await`` on
  3.10 and 3.11 (``PyIter_Send``), and on every version a compiled coroutine's ``await``;
* ``tp_iternext``, which 3.12 and later resume an await through when the value sent is None:
  a None result is "exhausted" (NULL, no exception), any other sets ``StopIteration`` itself;
* ``send``, a C method, which 3.12 and later call by name when the value sent is not None (an
  op's result): it sets ``StopIteration`` itself, where a compiled ``def send`` paid the
  traceback entry on every such await.

A step returns what to yield, or, once the await is over, its end marker: the object itself,
for an awaitable that never yields itself (a ready value, the gate's yield, a stream's recv
call); :data:`END` for one that does (an op yields itself as its trap, so "it returned the
object" would not tell its yield from its end).

3.12 keeps an exception only as an instance, so each ``StopIteration`` set was one allocated
and torn down; under the GIL the compiled modules share one spare and reuse it while nobody
else holds it (iterslots.pxd says when).

It lives in core, beside the traps, whose own awaitables (``Ready``, ``consume_budget``'s
yield) use it as the stream's (net) do: core cannot import net.

This is the pure-Python twin: ``install`` does nothing, and the class's own ``__next__`` and
``send`` run, each one call of :func:`advance`. Compiled code cimports ``iterslots.pxd``
under this module's name (as ``fence``), where ``install`` is the C function and ``advance``
an inline C one. The class's ``__next__``, ``throw`` and ``close`` called by name stay the
class's own.
"""

from __future__ import annotations

from typing import Any, Callable


class _End:
    __slots__ = ()

    def __repr__(self) -> str:
        return "iterslots.END"


END: Any = _End()
"""The end marker of an awaitable that yields itself (``install(..., end=END)``): never a trap."""

_spare_stop_slot: Any = None
"""Compiled on 3.12+ with the GIL: a capsule of the one slot where the compiled modules keep
their spare ``StopIteration`` (iterslots.pxd), set by the first module that installs a class.
One for all, so that the module that reuses an await's value can take it back from the spare
whichever module's await ended with it."""


def install(
    cls: type,
    step: Callable[[Any, Any], Any],
    result: Callable[[Any], Any],
    send: Callable[[Any, Any], Any],
    end: Any = None,
) -> None:
    """Compiled: *cls*'s ``tp_iternext`` and ``am_send`` run ``step(obj, value)`` (*value*
    None for ``__next__``, what was sent for ``am_send``), and its ``send`` method runs
    ``send(obj, value)``; each returns the trap to yield, or *end* (*obj* itself when None)
    once the await is over, when ``result(obj)`` is what it returns. Up to four classes per
    compiled module. The slots are *cls*'s own, but a subclass inherits them and its
    ``send``, as any method: one whose ``__await__`` is its own must answer its steps
    (``Op``'s do). Interpreted: nothing (the class's ``__next__`` and ``send`` do the
    same, through :func:`advance`)."""


def advance(
    obj: Any,
    value: Any,
    step: Callable[[Any, Any], Any],
    result: Callable[[Any], Any],
    end: Any = None,
) -> Any:
    """One step of *obj*'s await as its C slots take it, for its ``__next__`` and ``send``
    called by name (and interpreted): what ``step(obj, value)`` yields, or
    ``StopIteration(result(obj))`` once it returns *end* (*obj* itself when None)."""
    y = step(obj, value)
    if y is (obj if end is None else end):
        raise StopIteration(result(obj))
    return y


def held_only(obj: Any, n: int) -> bool:
    """Whether *obj* has no references but the *n* its caller knows of, so that it may be
    reused: compiled under the GIL, its reference count; free-threaded (a count read by one
    thread says nothing about another's) and interpreted, never (False)."""
    return False
