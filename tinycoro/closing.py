"""What closing a descriptor must do: end the operations pending on it, and release it for sure.

io_uring holds its own reference to the file of every in-flight operation, so closing the
descriptor does not end another task's pending ``recv``, ``accept`` or ``read``. Each resource
therefore keeps a :class:`PendingOps`: the operations awaited on it right now, with the engine
each runs on. Its operations are :class:`ResourceOp` objects, awaitables that enter themselves
there when they start and leave when they complete, in the awaiting task's one frame. ``close()`` marks it closed and asks every such engine, on its own thread
(rule 2), to cancel the operation in the kernel; the awaiting task turns the cancelled
completion into :class:`~tinycoro.core.errors.ClosedResourceError` (rule 10). It is not a
``tc.Cancelled``: closing a resource does not cancel the task that waited on it.

Operations are cancelled one by one (by their user_data), not with ``io_uring_prep_cancel_fd``:
the descriptor number is released right after, and a cancel by number that reached the ring
later could hit an unrelated file that reused the number.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Generator

from .core.errors import ClosedResourceError, oserror
from .core.local import thread_state as _local
from .core.traps import Op, run_outside, foreign_owner, perform_raw
from .uring import prep_close  # bound once: no module attribute lookup per close

__all__ = ["PendingOps", "ResourceOp", "close_fd"]

CLOSED_WHILE_WAITING = "the resource was closed while this operation waited on it"

_closing = threading.Lock()  # only close() takes it: closing is rare, operations are not


def _cancel_on_owner(engine, op: Op) -> None:
    engine.cancel_op(op)


class PendingOps:
    """The io_uring operations in flight on one resource, and whether it has been closed.

    An operation either sees the resource closed before it starts or is in the set that
    ``close()`` cancels. No lock orders the two: each side writes first and reads second
    (an op's ``__await__`` adds the op, then reads ``closed``; ``close`` sets ``closed``, then copies the
    set), and under the GIL every one of those steps is atomic and seen in program order, so
    at least one side sees the other (Dekker's argument; both may, which is harmless: an op
    that never reached a ring is not in flight, and ``cancel_op`` ignores it). A
    ``threading.Lock`` here cost two acquisitions per operation, about 1 us on the CI machine,
    and stalled on every GIL hand-over when tasks on two contexts shared one file.
    """

    __slots__ = ("_ops", "closed", "_error")

    def __init__(self, error: Callable[[], BaseException]) -> None:
        self._ops: dict[Op, Any] = {}  # op -> the engine (or loop host) it runs on
        self.closed = False
        self._error = error  # builds the exception for "used after close"

    def __len__(self) -> int:
        return len(self._ops)

    def check(self) -> None:
        if self.closed:
            raise self._error()

    def close(self) -> bool:
        """Mark closed and cancel every pending operation; False if it was closed already."""
        with _closing:  # two closers race to be the one that closes: only one may
            if self.closed:
                return False
            self.closed = True
        pending = list(self._ops.items())
        for op, engine in pending:
            if engine is None:  # awaited outside any task: its trap refuses it, nothing to cancel
                continue
            # The op may still be between its trap and its SQE on that engine's thread; a call
            # queued now runs at the engine's next turn, after that step has placed the SQE.
            engine.call_soon(_cancel_on_owner, engine, op)
        return True


class ResourceOp(Op):
    """An operation on a resource that ``close()`` can end (rule 10): ``await`` it for
    its result, ``OSError`` if it fails, ``tc.ClosedResourceError`` if the resource is closed
    before it starts or while it is pending.

    The close-tracking is done in the op's own ``__await__``, around its one yield: the op
    enters its resource's :class:`PendingOps` before it yields (so ``close()`` finds it, or
    it sees ``closed``), and leaves it once resumed, by its completion or by an interrupt.
    Subclasses with a result of their own (a stream's recv) use the same two steps,
    ``_enter`` and ``_failure``, around their own yield.
    """

    __slots__ = ("pending",)

    def __init__(
        self, pending: PendingOps, prep: Callable[..., None], *args: Any, returns_fd: bool = False
    ) -> None:
        self._fill_for(pending, prep, args, returns_fd)

    def _fill_for(
        self, pending: PendingOps, prep: Callable[..., None], args: tuple, returns_fd: bool = False
    ) -> None:
        """What ``__init__`` does, with the prep's arguments as one tuple: for the constructors
        of subclasses (see ``Op._fill``)."""
        self._fill(prep, args, returns_fd)
        self.pending = pending

    def _enter(self) -> Any:
        """Enter the resource's pending set before the first yield; the current engine (None
        in an asyncio task, whose op runs on its loop's hosted ring). ClosedResourceError if
        the resource is closed already. The caller leaves with ``del self.pending._ops[self]``
        once resumed. A plain call, not a generator: the op's await stays one frame."""
        return self._enter_on(_local.engine)

    def _enter_on(self, engine: Any) -> Any:
        """:meth:`_enter` for a caller that has read the current engine already (a thread-local
        read, ~140 instructions compiled)."""
        pending = self.pending
        pending._ops[self] = engine if engine is not None else foreign_owner()
        if pending.closed:
            del pending._ops[self]
            raise pending._error()
        return engine

    def _failure(self, res: int) -> BaseException:
        """The error for a negative result: the close's doing, or the errno's."""
        if self.pending.closed:
            return ClosedResourceError(CLOSED_WHILE_WAITING)
        return oserror(res, self.what)

    def __await__(self) -> Generator[Any, Any, Any]:
        # The steps of _result_on, written out: this await stays one frame (it is every
        # resource op's, on the engine's hot path).
        engine = self._enter()
        try:
            if engine is not None:
                res = yield self
            else:
                res = yield from run_outside(self)
        finally:
            del self.pending._ops[self]
        if res < 0:
            raise self._failure(res)
        return res

    def _result_on(self, engine: Any) -> Generator[Any, Any, int]:
        """The op's one wait on *engine* (None: an asyncio task), for a caller that prepares
        the op and makes its own result of the count (a bulk recv's bytes, a fallback recv):
        enter the pending set, yield, leave it, and the count, or the error for a negative
        one."""
        self._enter_on(engine)
        try:
            if engine is not None:
                res = yield self
            else:
                res = yield from run_outside(self)
        finally:
            del self.pending._ops[self]
        if res < 0:
            raise self._failure(res)
        return res


async def close_fd(fd: int) -> None:
    """Close *fd* with an io_uring close, and with ``os.close`` only when that close certainly
    did not run.

    Once its SQE reached the ring, the kernel's close may have released the number, even when
    it then reports a failure (a close that fails with EINTR or EIO has released it too), and
    another thread may own the number a moment later: a second close could end that thread's
    file. So after the op entered the ring, the outcome is the kernel's, whatever arrives in
    its place; the ring never cancels a close (:meth:`~tinycoro.core.ring.RingOwner.cancel_op`
    ignores one), so it does run, and an interrupt that arrives meanwhile goes to the next
    await. Only when the task is interrupted before its SQE is queued (a second ``cancel()``,
    ``stop(timeout=0)``, the shutdown after DeadlockError) is the descriptor closed here
    synchronously (closing a file or a socket does not block), and the interrupt goes on
    (rule 10: a close always releases its descriptor). In a task its scheduler abandons (stop
    past its timeout, DeadlockError), the close is ``os.close`` at once: no await can suspend
    there.
    """
    task = _local.task
    if task is not None and task.abandoning():
        # The task is being abandoned (rule 13): its engine has stopped and the await
        # below could not complete. Close here and now, so the finally block runs on.
        try:
            os.close(fd)
        except OSError:
            pass
        return
    op = Op(prep_close, fd)
    try:
        res = await perform_raw(op)
    except BaseException:
        if op.ud == 0:  # interrupted before the op was queued: the kernel never saw the close
            try:
                os.close(fd)
            except OSError:
                pass
        raise
    if res < 0:
        raise oserror(res)
