"""What a ring's owner (:class:`tinycoro.core.ring.RingOwner`) needs of the things beside it:
of a ring (:class:`IoRing`: ``uring.PyRing`` and ``uring.CRing`` both are one) and of an
operation that completes many times (:class:`MultiOp`: a stream's multishot recv, a split
read's back half). Interfaces only, kept apart from the owner's code; ``core.ring`` re-exports
both."""

from __future__ import annotations

from typing import Any, Callable, Protocol

__all__ = ["IoRing", "MultiOp"]


class MultiOp(Protocol):
    """An operation that completes many times (one SQE, a CQE per event until the last): the
    seam through which a layer above runs one without the core knowing what it is. It is a
    :class:`~tinycoro.core.traps.Op` that overrides ``completion`` (which the owner calls as
    Op's C method where compiled), ``failed`` and ``finished``.

    Started with :meth:`RingOwner.arm`; in flight (in the owner's ``inflight`` table) until
    its last CQE. Everything below runs on the owner's thread (rule 2)."""

    ud: int

    def completion(self, res: int, data: Any, more: bool) -> None:
        """One CQE: *res* and, for a CQE that used one of the ring's provided buffers, a
        bytes copy of it (the buffer is back with the kernel already); *more* is False on
        the last. Should not raise; if it does, the owner reports it, tells the op
        (:meth:`failed`) and carries on."""

    def failed(self, exc: BaseException) -> None:
        """Its :meth:`completion` (or :meth:`finished`) raised *exc*, already reported: what
        that CQE carried is lost, and the op decides what that means (a byte stream fails,
        since going on would hand out its data with a hole in it)."""

    def finished(self) -> None:
        """After the last completion (also when that one raised): the op is out of flight."""

    def awaited(self) -> bool:
        """Whether a task waits on this op now: only then is it work (stop protocol, deadlock
        watchdog). Any thread may ask."""

    def describe(self) -> str:
        """What the op is, in a user's words (for the report of a completion that raised)."""


class IoRing(Protocol):
    """What a ring's owner needs of a ring: ``uring.PyRing`` and ``uring.CRing`` both are one."""

    efd: int
    # Whether submit() enters the kernel without the GIL (the compiled ring; the pure ring's
    # binding keeps it whatever this says): the engine sets it per submit (Engine._submit).
    release_gil: bool

    @property
    def closed(self) -> bool: ...

    def queue(self, prep: Callable[..., Any], args: tuple, ud: int) -> None:
        """Queue one SQE filled by ``prep(sqe, *args)`` with user_data *ud*; on a raising
        prep, leave a NOP with ``SKIP_UD`` and re-raise; RingBusy, queueing nothing, when the
        kernel takes no more SQEs."""

    def set_return_word(self, word: bytearray | None) -> None:
        """Have a submit that releases the GIL set ``word[0]`` to 2 from the system call's
        return until it has the GIL back (core/wakeword.py); None: no word."""

    def submit(self) -> int:
        """Hand the queued SQEs to the kernel; OSError(EBUSY/EAGAIN) when it wants reaping."""

    def sq_ready(self) -> int:
        """SQEs queued and not yet handed to the kernel."""

    def cq_ready(self) -> int:
        """CQEs posted and not yet reaped; not 0 either when the kernel holds completions
        back for the owner to have posted (the compiled ring: DEFER_TASKRUN's task work)."""

    def enable(self) -> None:
        """Owner thread, before anything is queued: make the calling thread the ring's one
        issuer, if it was set up for one (``Ring(entries, single_issuer=True)``)."""

    def complete(self, slots: list, free: list, standing: dict, done: list, shots: list) -> int:
        """The completion contract (:mod:`tinycoro.uring`): reap every CQE, move each op of
        *slots* that completed to *done* as two entries, ``op, res``, its slot set to None and
        appended to *free*, and append each CQE of an op of *standing* (a multishot) to
        *shots* as ``op, res, data, more`` (its last one frees its slot the same way and
        takes the op out of *standing*); return the CQEs reaped that are not multishots'."""

    def notify_on(self, enabled: bool) -> None:
        """Let completions write the eventfd, or not."""

    def multishot_ready(self) -> bool:
        """Whether a multishot receive can be armed on this ring now."""

    def multishot_possible(self) -> bool:
        """Whether one may still be, without setting anything up (not forced off, not
        refused by the kernel)."""

    def multishot_refused(self) -> None:
        """The kernel refused a multishot receive: use single receives from now on."""

    def close(self) -> None: ...
