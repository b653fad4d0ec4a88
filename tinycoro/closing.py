"""What closing a descriptor must do: end the operations pending on it, and release it for sure.

io_uring holds its own reference to the file of every in-flight operation, so closing the
descriptor does not end another task's pending ``recv``, ``accept`` or ``read``. Each resource
therefore keeps a :class:`PendingOps`: the operations awaited on it right now, with the engine
each runs on. Its operations are :class:`ResourceOp` objects, awaitables that enter themselves
there when they start and leave when they complete, in the awaiting task's one frame. ``close()`` marks it closed and asks every such engine, on its own thread
(rule 2), to cancel the operation in the kernel; the awaiting task turns the cancelled
completion into :class:`~tinycoro.core.errors.ClosedResourceError` (rule 10). It is not a
``tc.Cancelled``: closing a resource does not cancel the task that waited on it.

A stream's reused recv and send ops do not enter the set's dict: each has a fixed slot in its
:class:`PendingOps` (``ResourceOp.slot``), written as it starts and cleared as it ends, which
``close()`` reads with the dict (:meth:`PendingOps.in_flight`). Entering the dict and leaving it
were ~330 of a 64 B echo request's instructions; with the slots the 50-connection echo went from
5,830 to 5,420 instructions per request (callgrind, compiled, 3.11). A slot is the op's alone
while it is in flight, by what makes the op exclusive already: the stream's receive token for
its recv, the spare list for its send (an op a sendall makes when the spare is out uses the
dict).

Operations are cancelled one by one (by their user_data), not with ``io_uring_prep_cancel_fd``:
the descriptor number is released right after, and a cancel by number that reached the ring
later could hit an unrelated file that reused the number.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Generator

from .core import fence
from .core.errors import ClosedResourceError, oserror
from .core.local import thread_state as _local
from .core.traps import Op, run_outside, foreign_owner, perform_raw
from .uring import prep_close  # bound once: no module attribute lookup per close

__all__ = ["IN_SET", "PendingOps", "RECV_SLOT", "ResourceOp", "SEND_SLOT", "close_fd"]

# Where a ResourceOp stands in its PendingOps while in flight (ResourceOp.slot): in the dict, or
# in one of the two fixed slots, each used by one op at a time (the module doc says which).
IN_SET = 0
RECV_SLOT = 1
SEND_SLOT = 2
# the same as C integers where compiled (closing.pxd): compared with a module object, each was a
# look-up and a boxed compare per operation
_IN_SET = IN_SET
_RECV_SLOT = RECV_SLOT

CLOSED_WHILE_WAITING = "the resource was closed while this operation waited on it"

_closing = threading.Lock()  # only close() takes it: closing is rare, operations are not


def _cancel_on_owner(engine, op: Op) -> None:
    engine.cancel_op(op)


class PendingOps:
    """The io_uring operations in flight on one resource, and whether it has been closed.

    An op in flight is in the dict ``_ops`` (op -> the engine, or loop host, it runs on) or,
    for a stream's reused recv and send, in a fixed slot (``_recv_op`` with ``_recv_on``,
    ``_send_op`` with ``_send_on``); :meth:`in_flight` reads both, and it is all ``close()``
    reads. An operation either sees the resource closed before it starts or is among what
    ``close()`` cancels. No lock orders the two: each side writes first and reads second
    (an op's ``__await__`` enters the op, then reads ``closed``; ``close`` sets ``closed``,
    then reads what is in flight), and under the GIL every one of those steps is atomic and
    seen in program order, so at least one side sees the other (Dekker's argument; both may,
    which is harmless: an op that never reached a ring is not in flight, and ``cancel_op``
    ignores it). Without the GIL a full fence (``core/fence``) sits between each side's
    write and its read, as for rule 4. A slot is two fields: the engine is stored before the
    op (a fence between them without the GIL), and read after it, so that a reader that sees
    the op sees where it runs. A ``threading.Lock`` here cost two acquisitions per
    operation, about 1 us on the CI machine, and stalled on every GIL hand-over when tasks
    on two contexts shared one file.
    """

    __slots__ = ("_ops", "closed", "_error", "_recv_op", "_recv_on", "_send_op", "_send_on")

    def __init__(self, error: Callable[[], BaseException]) -> None:
        self._ops: dict[Op, Any] = {}  # op -> the engine (or loop host) it runs on
        self.closed = False
        self._error = error  # builds the exception for "used after close"
        # the fixed slots: the op while in flight, and where it runs (ResourceOp.slot)
        self._recv_op: Any = None
        self._recv_on: Any = None
        self._send_op: Any = None
        self._send_on: Any = None

    def __len__(self) -> int:
        return len(self.in_flight())

    def check(self) -> None:
        if self.closed:
            raise self._error()

    def in_flight(self) -> list[tuple[Any, Any]]:
        """``(op, engine)`` of every operation in flight now: the dict's (one copy, one step
        under its lock without the GIL), then each slot's op and the engine read after it."""
        found = list(self._ops.items())
        op = self._recv_op
        if op is not None:
            if fence.FREE_THREADED:
                fence.full()
            found.append((op, self._recv_on))
        op = self._send_op
        if op is not None:
            if fence.FREE_THREADED:
                fence.full()
            found.append((op, self._send_on))
        return found

    def close(self) -> bool:
        """Mark closed and cancel every pending operation; False if it was closed already."""
        with _closing:  # two closers race to be the one that closes: only one may
            if self.closed:
                return False
            self.closed = True
        if fence.FREE_THREADED:
            fence.full()  # the write of closed before the reads of what is in flight
        for op, engine in self.in_flight():
            if engine is None:  # awaited outside any task: its trap refuses it, nothing to cancel
                continue  # (or a slot's op that left between the two reads: nothing to cancel)
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
    Subclasses with a result of their own (a stream's recv) use the same steps, ``_enter``,
    ``_leave_pending`` and ``_failure``, around their own yield. ``slot`` says where in the
    pending set the op stands: ``IN_SET``, the dict, unless its stream made it one of its two
    reused ops (``RECV_SLOT``, ``SEND_SLOT``).
    """

    __slots__ = ("pending", "slot")

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
        self.slot = _IN_SET

    def _enter(self) -> Any:
        """Enter the resource's pending set before the first yield; the current engine (None
        in an asyncio task, whose op runs on its loop's hosted ring). ClosedResourceError if
        the resource is closed already. The caller leaves with :meth:`_leave_pending` once
        resumed. A plain call, not a generator: the op's await stays one frame."""
        return self._enter_on(_local.engine)

    def _enter_on(self, engine: Any) -> Any:
        """:meth:`_enter` for a caller that has read the current engine already (a thread-local
        read, ~140 instructions compiled)."""
        pending = self.pending
        on = engine if engine is not None else foreign_owner()
        slot = self.slot
        if slot == _IN_SET:
            pending._ops[self] = on
        elif slot == _RECV_SLOT:
            pending._recv_on = on  # before the op: a reader that sees the op sees this
            if fence.FREE_THREADED:
                fence.full()
            pending._recv_op = self
        else:
            pending._send_on = on
            if fence.FREE_THREADED:
                fence.full()
            pending._send_op = self
        if fence.FREE_THREADED:
            fence.full()  # the op entered before closed is read (the class doc of PendingOps)
        if pending.closed:
            self._leave_pending()
            raise pending._error()
        return engine

    def _leave_pending(self) -> None:
        """Out of the pending set, once resumed (also after a failed :meth:`_enter_on`'s
        entry). A slot's op first, then its engine: see :meth:`PendingOps.in_flight`."""
        pending = self.pending
        slot = self.slot
        if slot == _IN_SET:
            del pending._ops[self]
        elif slot == _RECV_SLOT:
            pending._recv_op = None
            pending._recv_on = None
        else:
            pending._send_op = None
            pending._send_on = None

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
            self._leave_pending()
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
            self._leave_pending()
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
