"""A big whole-file read on two cores: the kernel copies one half on its io-wq worker while
the caller copies the other, each into its offset of the one buffer the read returns.

Why: a cached read is a memory copy plus the page faults of a fresh destination buffer,
done by one thread in the builtin ``open().read()``. ``IOSQE_ASYNC`` sends a read straight
to the ring's io-wq worker (a kernel thread of this process), so the back half is copied
there while the front half is read inline from the page cache as before. Measured on the
2-core machine (cached, the process given the CPU to approximate a quiet machine): 512 MiB in
159-166 ms against the builtin's 220-232 ms, 32-64 MiB 1.40-1.44x, 12 MiB 1.06x (0.82x
unsplit), for ~1.15x the builtin's CPU. io-wq runs such work on one worker (three ``IOSQE_ASYNC`` chunks
took one worker's time in a row), so a second async chunk gains nothing: two halves.

Both halves are the calling task's: the back half is started with no task suspended on it
(:class:`BackHalf`, through the engine's ``arm_now``: the core's seam for an operation whose
completion goes to the op, not to a waiting task), and the caller reads the front half itself
meanwhile, then waits for the back's completion if it is not in yet. No helper task: none that
a dashboard counts, that the scheduler's stop protocol waits for, or that goes on copying into
the buffer on another context after a cancelled read has returned.

Cancel safety (rule 8): the back half's op holds its view (and so the buffer) in the engine's
in-flight table until its completion is in. A read that fails or is interrupted, in either
half, cancels the back half in the kernel and waits for its completion before the exception
leaves :func:`fill` (the wait cannot itself be interrupted: its ``abort`` only asks the
kernel), so when a cancelled ``read_file`` returns nothing writes into the buffer any more,
and the buffer is never handed out. Only an engine that abandons its tasks (shutdown) skips the
wait: it drains its ring before it closes their coroutines, and again after, for a split read
that a ``finally`` block started there (its back half goes in before its await is refused).
"""

from __future__ import annotations

import errno
import os
from typing import Any, Awaitable

from ..buffers import MAX_RW
from ..closing import ResourceOp
from ..core.local import thread_state as _local
from ..core.traps import Park, park
from ..core.waits import size
from ..uring import prep_read

__all__ = ["PARALLEL_MIN", "BackHalf", "fill", "whole_fill"]

#: Whole-file reads of at least this many bytes (from the position) are split in two halves;
#: smaller ones are read as before. Below it read_file reads a cached file at the call, and a
#: split's extra op and wait (~0.1 ms) are what the second core saves (docs/io.md).
PARALLEL_MIN = 8 << 20
IOSQE_ASYNC = 1 << 4  # IOSQE_ASYNC_BIT (4): "go to io-wq at once, do not try inline"
_PAGE = 4096


def _prep_read_async(sqe: Any, fd: int, buf: Any, nbytes: int, offset: int) -> None:
    """prep_read, then IOSQE_ASYNC: the kernel copies on its worker, not in the submit."""
    prep_read(sqe, fd, buf, nbytes, offset)
    sqe.flags |= IOSQE_ASYNC


def _undo(_res: Any) -> None:
    """The ticket's undo: a back half that completed after its reader was interrupted has
    nothing to give back (its buffer is the failed read's own, never handed out)."""


class BackHalf(ResourceOp):
    """The back half of a split read: one ring read started while its task runs on (a
    :class:`~tinycoro.core.ring.MultiOp` of one completion, armed on the task's own engine).

    Its completion is kept here (``res``) and wakes the task when it is parked waiting for it
    (:meth:`result`, :meth:`settle`). Everything runs on that engine's thread (rule 2): the task never leaves
    its engine, and the engine reaps, delivers and cancels there, so no field is shared
    between threads. In the file's :class:`~tinycoro.closing.PendingOps` while in flight, so
    closing the file cancels it (rule 10)."""

    __slots__ = ("res", "done", "waiter", "engine")

    def __init__(self, file: Any, view: memoryview, offset: int) -> None:
        # The prep is looked up here, not bound at import: a test wraps it.
        self._fill_for(file._ops, _prep_read_async, (file._fd, view, min(len(view), MAX_RW), offset))
        self.what = file.name
        self.res = 0
        self.done = False
        self.waiter: Any = None
        self.engine: Any = None

    def start(self) -> None:
        """Enter the file's pending set and start the read in the kernel now (not at the
        turn's end: the caller goes on reading the front half meanwhile)."""
        engine = self._enter()  # ClosedResourceError if the file is closed already
        error = engine.arm_now(self)
        if error is not None:
            del self.pending._ops[self]
            raise error
        self.engine = engine

    # -- the MultiOp seam (core.ring): the engine's thread ---------------------------------
    def completion(self, res: int, data: Any, more: bool) -> None:
        self.res = res
        self.done = True
        self.pending._ops.pop(self, None)
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            waiter.wake(res)

    def failed(self, exc: BaseException) -> None:
        """Not reached (completion does not raise); were it, the read fails, not hangs."""
        if not self.done:
            self.completion(-errno.EIO, None, False)

    def finished(self) -> None:
        pass

    def awaited(self) -> bool:
        return True  # its task reads the front half or waits for it: work in flight either way

    def describe(self) -> str:
        args = self.args
        return (f"read {size(args[2])} at {args[3]} from {os.path.basename(self.what)}"
                " (the back half of a split read, on the kernel's worker)")

    def _waits_on(self) -> str:
        """What a parked reader waits on, for ``TaskInfo.waits_on``."""
        return self.describe()

    # -- the reader's side ----------------------------------------------------------------------
    def _abort(self) -> bool:
        """The ticket's abort (the parked reader was interrupted): ask the kernel to cancel
        the read, and keep the reader parked: its completion wakes it, and only then is the
        buffer the reader's again (the interrupt is delivered at that wake)."""
        if not self.done:
            self.engine.cancel_op(self)
            if self.engine.abandoning:
                # Its engine is closing the reader's coroutine (rule 13) and reaps nothing
                # until it drains its ring, which waits for this completion (rule 8): no wake
                # comes before, so the reader is off now (kept, it was waited for in vain).
                self.waiter = None
                return True
        return False

    # Both waits keep the reader parked until the completion (see _abort). At the result's
    # wake an interrupt that came meanwhile is raised (undo: the count is moot); at the
    # settling wait after a failure it is left for the next await, so the exception the read
    # is raising is the one that leaves it. Each ticket is made for its wait and not kept: on
    # the op, its bound abort would make a cycle that kept the buffer (the bytes the read
    # returns) alive until the collector ran.
    async def result(self) -> int:
        """The read's byte count, once its completion is in (waiting for it if need be)."""
        if not self.done:
            self.waiter = _local.task
            await park(Park(self._abort, self, _undo))
        return self.res

    async def settle(self) -> None:
        """After the reader failed or was interrupted: cancel the read in the kernel and wait
        for its completion, which nothing else ends (the ticket's abort never lets go before
        it, and an interrupt arriving meanwhile waits for the next await). Not done in a
        task its engine abandons, where no await could complete: the engine drains its ring
        (every completion in) after it closed the task's coroutine."""
        if self.done:
            return
        self.engine.cancel_op(self)
        task = _local.task
        if task.abandoning():  # the engine's drain after the close waits for it (op holds buffer)
            return
        self.waiter = task
        await park(Park(self._abort, self))


def whole_fill(file: Any, view: memoryview, offset: int) -> Awaitable[int]:
    """What fills a whole read's buffer *view* from *offset* of *file*: :func:`fill`, split in
    two, when it is big and the caller is a tinycoro task (an asyncio task's reads run on its
    loop's ring, which arms no op without a waiter); else ``file._fill``, as before."""
    if len(view) >= PARALLEL_MIN and _local.task is not None:
        return fill(file, view, offset)
    return file._fill(view, offset)


async def fill(file: Any, view: memoryview, offset: int) -> int:
    """Fill *view* from *offset* of *file* (an open, readable, buffered AsyncFile), short only
    at EOF: the back half by one ``IOSQE_ASYNC`` ring read started first, the front half by
    the caller through ``file._fill`` meanwhile (inline from the page cache, misses through
    the ring). A file that shrank meanwhile gives the bytes before its new end; what it gained
    past *view* is the caller's to read."""
    size = len(view)
    half = (size // 2) & ~(_PAGE - 1)
    rear = view[half:]
    back = BackHalf(file, rear, offset + half)
    back.start()
    try:
        got_front = await file._fill(view[:half], offset)
        got_back = await back.result()
    except BaseException:
        await back.settle()
        raise
    if got_back < 0:
        raise back._failure(got_back)  # its errno (or the file's close)
    if got_front < half:  # EOF inside the front half: the file shrank; its bytes before EOF
        return got_front
    if 0 < got_back < len(rear):  # short: EOF, or past what one read(2) moves; read on
        got_back += await file._fill(rear[got_back:], offset + half + got_back)
    return half + got_back
