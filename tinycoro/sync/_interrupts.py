"""What a primitive does when a second interrupt reaches a task that must not stop yet.

A task's pending interrupts queue up (``Task.interrupt``; one is delivered per await). Two
kinds exist:

* a real cancellation (``tc.Cancelled`` from ``task.cancel()``, or anything else thrown in);
* a :class:`ScopeSignal`: a private ``Cancelled`` subclass that a scope (``tc.timeout``,
  ``tc.TaskGroup``) delivers to its own task and turns back into its meaning (``TimeoutError``,
  the child's failure) when the ``async with`` block exits.

Some code must keep awaiting after it was interrupted: ``Condition.wait`` has to re-acquire its
mutex before it may raise, ``when_all`` has to wait for the children it cancelled. Interrupts
that arrive meanwhile are caught and merged with :func:`keep_one`: one is kept and re-raised at
the end, and a scope signal that loses is marked dropped on its scope, which re-delivers it when
the next scope exits (see ``tinycoro.scopes``), so a timeout cannot silently vanish.
"""

from __future__ import annotations

from ..core.errors import Cancelled


class ScopeSignal(Cancelled):
    """The interrupt a scope delivers to its own task (a ``Cancelled``, so cleanup written for
    cancellation runs); the scope's ``__aexit__`` recognises it by identity."""

    def __init__(self, scope: object) -> None:
        super().__init__()
        self.scope = scope

    def __str__(self) -> str:
        return f"interrupted by {self.scope!r}"


def keep_one(kept: BaseException | None, new: BaseException) -> BaseException:
    """Merge interrupt *new* into *kept*: a real cancellation wins over a scope signal,
    otherwise the first one wins; a losing scope signal is marked dropped on its scope."""
    if kept is None:
        return new
    if isinstance(kept, ScopeSignal) and not isinstance(new, ScopeSignal):
        kept, new = new, kept
    if isinstance(new, ScopeSignal) and new is not kept:
        new.scope._signal_dropped()  # type: ignore[attr-defined]
    return kept
