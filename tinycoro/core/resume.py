"""One step of a task's coroutine: resume it with a value inside the task's own
``contextvars.Context`` (rule 9), and get what it yields next; StopIteration when it returns.

Interpreted, this is ``task._context.run(coro.send, value)`` with ``coro.send`` bound once
per task (``Task._coro_send``: binding it at every step allocated a method object each time).
Compiled, the engine cimports ``resume.pxd`` under this module's name (as it does ``fence``),
where :func:`send` is C: the context entered and left with ``PyContext_Enter`` /
``PyContext_Exit`` and the coroutine resumed through ``PyIter_Send`` (its ``am_send`` slot),
which is what ``Context.run`` and ``coroutine.send`` do, without the two calls through
their Python method objects and their argument parsing in between (~300 instructions per step,
callgrind, CPython 3.11). Same behaviour: a context already entered elsewhere raises the same
RuntimeError. One difference: interpreted, a coroutine that returns raises
``StopIteration(value)`` (what ``coroutine.send`` does); compiled, :func:`send` returns
a marker, which :func:`returned` tells from any trap, and leaves the value in ``task._resume_value``, as ``PyIter_Send``'s
``PYGEN_RETURN`` hands it over. A StopIteration raised there passed through two Cython
functions on its way to the engine's handler, and each built a traceback entry for it: two
per finished task (~1.7k instructions, callgrind, CPython 3.11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .task import Task

__all__ = ["returned", "send"]

# What a compiled send returns when the coroutine returned (resume.pxd): a private object, so
# no trap a coroutine yields can be taken for it. Interpreted, send never returns it.
_RETURNED = object()


def send(task: "Task", value: Any) -> Any:
    """Resume *task*'s coroutine with *value* inside its context; return what it yields."""
    bound = task._coro_send
    if bound is None:
        bound = task._coro_send = task._coro.send
    return task._context.run(bound, value)


def returned(y: Any) -> bool:
    """Whether :func:`send`'s *y* says the coroutine returned (its value in the task's
    ``_resume_value``); compiled only: interpreted, a return raised StopIteration."""
    return y is _RETURNED
