"""The only places where a coroutine yields to its engine (cf. trio's ``_traps``, curio's traps).

A tinycoro coroutine suspends by yielding one of three things:

* an :class:`Op`: "prepare this SQE on my context's ring, resume me with the CQE's ``res``";
* a :class:`Park`: "I have put myself on a waiter list; resume me when someone calls
  ``task._wake(value)``"; ``abort`` lets the engine take the task back off the list on cancel;
* ``YIELD``: "put me at the back of the ready queue".

Everything else (sleep, files, sockets, every primitive) is built from these. Each trap checks
that it runs inside a tinycoro task, so awaiting one elsewhere fails at the call with a message
that says why, instead of confusing the foreign event loop.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from .errors import oserror
from .local import _local


class Op:
    """One io_uring operation: ``prep(sqe, *args)`` fills its SQE.

    The op keeps ``args`` (buffers, paths, timespecs, socket addresses) alive until its CQE has
    arrived, even when the task that started it was cancelled meanwhile (DESIGN rule 8); the
    engine holds the op in its in-flight table until then.

    ``returns_fd``: a successful result is a new descriptor (accept, openat). If the op
    completes after its task was abandoned (shutdown), the engine closes that descriptor
    instead of leaking it.
    """

    __slots__ = ("prep", "args", "task", "ud", "cancelling", "what", "returns_fd")

    def __init__(self, prep: Callable[..., None], *args: Any, returns_fd: bool = False) -> None:
        self.prep = prep
        self.args = args
        self.task = None
        self.ud = 0
        self.cancelling = False
        self.what = None
        self.returns_fd = returns_fd

    def __repr__(self) -> str:
        name = getattr(self.prep, "__name__", "op").replace("io_uring_prep_", "")
        return f"<Op {name} ud={self.ud}>"


class Park:
    """A parked task's ticket. ``abort()`` runs on the task's own context when the task is
    cancelled while parked; it returns True if it took the waiter off its list (so no wake will
    come) and False if a wake is already on its way. ``undo(value)`` gives back what a wake
    handed over (a lock, a permit) when the task turns out to have been cancelled meanwhile.
    ``what`` names the thing waited on, for deadlock reports and statistics."""

    __slots__ = ("abort", "undo", "what")

    def __init__(
        self,
        abort: Callable[[], bool],
        what: object,
        undo: Callable[[Any], None] | None = None,
    ) -> None:
        self.abort = abort
        self.undo = undo
        self.what = what


class _Yield:
    __slots__ = ()

    def __repr__(self) -> str:
        return "YIELD"


YIELD = _Yield()

_OUTSIDE = (
    "{} awaited outside a tinycoro task: run it with tc.run(...), Scheduler.submit(...) or "
    "tc.spawn(...), or %load_ext tinycoro in a notebook"
)


def _check(what: str) -> None:
    if getattr(_local, "engine", None) is None:
        raise RuntimeError(_OUTSIDE.format(what))


@types.coroutine
def perform(op: Op):
    """Run *op* on the current context's ring; return its result, raise ``OSError`` if < 0."""
    if _local.engine is None:
        _check(repr(op))
    res = yield op
    if res < 0:
        raise oserror(res, op.what)
    return res


@types.coroutine
def perform_raw(op: Op):
    """Like :func:`perform` but return a negative result instead of raising (timeouts)."""
    if _local.engine is None:
        _check(repr(op))
    return (yield op)


@types.coroutine
def park(ticket: Park):
    """Suspend until woken; return the value the waker passed to ``task._wake``."""
    if _local.engine is None:
        _check(f"waiting on {ticket.what!r}")
    return (yield ticket)


@types.coroutine
def yield_now() -> types.GeneratorType:
    """Go to the back of the ready queue, letting every other ready task run first."""
    if _local.engine is None:
        _check("tc.yield_now()")
    yield YIELD
