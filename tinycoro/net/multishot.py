"""A stream's ``recv`` through one multishot recv (docs/io.md, "Multishot recv"): the
receive path that completes many times, behind the core's seam for such operations
(:class:`tinycoro.core.ring.MultiOp`: arm, each completion, the final one, cancel, whether
anyone waits).
Size: the multishot and the recv call that steps through it share fields a recv and a
completion on two contexts meet in (below), declared together in one .pxd, and the call's
steps are the multishot's look; apart, each would reach into the other's layout.

Compiled from this source with ``multishot.pxd`` beside it, and used only so: a recv and a
completion on two contexts meet in a few field reads and writes (the waiter slot, the armed
state, the queue's byte count) that are each atomic only in compiled code under the GIL
(interpreted, a read-modify-write of a field can be split by a thread switch). On a
free-threaded build nothing makes a sequence of C steps atomic, so there each of those
sequences runs under the stream's own lock (``lock``; ``None`` under the GIL, where
``if fence.FREE_THREADED:`` compiles to no instruction): a recv and a completion on two
contexts then take the waiter slot one at a time, and exactly one of them wakes the recv
(docs/design.md, "Synchronisation, with and without the GIL"). :data:`AVAILABLE` says whether
streams may use it: the compiled ring (the only one with provided buffers) and this module
compiled. Elsewhere every recv is the single one of :class:`tinycoro.net.ops.RecvOp`, which
keeps the same contract.
"""

from __future__ import annotations

import collections
import errno
import sys
import threading
import weakref
from typing import Any, Generator

from .. import compiled, uring
from ..closing import CLOSED_WHILE_WAITING
from ..core import fence, iterslots, tokens
from ..core.errors import ClosedResourceError
from ..core.local import running_engine, running_task
from ..core.local import thread_state as _local
from ..core.task import wake_waiter
from ..core.traps import YIELD, Park, foreign_waiter, run_outside, thrown
from .ops import BulkRecvOp, InlineOp, RecvLimit, already_receiving, peer_of

__all__ = ["AVAILABLE", "MultishotRecv", "QUEUE_LIMIT", "RecvCall"]

#: Whether streams receive through a multishot: the ring can, and this module's code runs
#: compiled (the module doc says why both).
AVAILABLE: bool = uring.COMPILED and compiled.is_compiled(sys.modules[__name__])

#: Bytes a stream may hold received and not yet read before its multishot recv is stopped:
#: past it, the data waits in the socket's own buffer and TCP's window holds the sender back,
#: as with a single recv that nobody issues. The recv that empties the queue arms it again.
#: Read once, at import (its C twin below): a constant, not a setting.
QUEUE_LIMIT = 256 * 1024
# Its C twin, and the errnos as C ints (multishot.pxd): compared with a C integer (a count, a
# want, a CQE's res), the module objects boxed that integer on every compare
_QUEUE_LIMIT = QUEUE_LIMIT
_ENOBUFS = -errno.ENOBUFS
_ECANCELED = -errno.ECANCELED
_EINVAL = -errno.EINVAL
_EIO = errno.EIO
# What a recv does after a look at its stream (MultishotRecv._look)
_TAKE = 0
_SPEND = 1
_SINGLE = 2
_PARK = 3
# Where a RecvCall's own steps are (RecvCall.state)
_IDLE = 0  # not awaited (in the stream's spare, or made and not awaited yet)
_HANDED = 1  # its __await__ returned it: the first step starts the recv
_SPENDING = 2  # yielded once, its budget spent, before taking queued bytes
_PARKED = 3  # parked on the multishot's ticket
_DELEGATED = 4  # a generator runs it (``sub``): the single recv, or no engine on the thread


def _stop_multishot(engine: Any, op: "MultishotRecv") -> None:
    engine.cancel_op(op)  # on the engine's thread (call_soon): it owns the ring (rule 2)


class MultishotRecv(InlineOp):
    """A stream's ``recv`` through one multishot recv.

    Armed by the first recv on a context whose ring has a provided-buffer ring, the kernel's
    multishot recv stays in flight and posts a CQE for each chunk that arrives, with the data
    in one of the ring's buffers. The ring copies it out and gives the buffer back to the
    kernel; the engine hands the chunk to :meth:`completion` on its thread: it goes on the
    stream's queue and a recv waiting for it is woken. A recv that finds the queue non-empty
    returns without suspending and without an SQE (spending one unit of the engine's
    cooperative budget, rule 16); one that finds it empty parks (no SQE either). An armed multishot that no recv waits on is no work (:meth:`awaited`): the stop
    protocol and the deadlock watchdog see only the recv that parks on it.

    The multishot ends with its last CQE (no ``IORING_CQE_F_MORE``, then :meth:`finished`):
    at EOF (queued as ``b""``), on an error (queued, raised by the recv that reaches it),
    when the ring ran out of buffers (ENOBUFS, not an error: the next recv that empties the
    queue arms it again, and the context's statistics count both), when the queue holds more
    than ``QUEUE_LIMIT`` bytes (stopped by an async cancel, for back-pressure), when a recv
    comes from another context (stopped there, armed again here) and when the stream closes
    (``close()`` cancels it like any pending operation: it is in the stream's PendingOps
    while armed). Where no ring can (the pure ring, an asyncio task, ``TINYCORO_MULTISHOT=0``,
    an old kernel) the recv is the single one of :class:`~tinycoro.net.ops.RecvOp`.
    """

    __slots__ = ("head", "rest", "queued", "offset", "armed", "stopping", "engine", "waiter",
                 "ticket", "token", "owner", "waited", "was_armed", "broken", "lock")

    def __init__(self, stream: Any) -> None:
        self._fill_for(stream._ops, uring.prep_recv_multishot, (stream._fd,))
        # The queue of what arrived and no recv has taken yet: its first item, then a deque of
        # the rest, made the first time a second item is queued. A deque per stream was
        # 624 bytes even empty and one more object for every full collection to walk; at
        # 64 B request/response a stream's queue holds at most one chunk at a time.
        # Invariant: head is None => the queue is empty (rest is None or empty).
        self.head: Any = None
        self.rest: collections.deque[Any] | None = None
        self.queued = 0  # bytes in the queue, not yet read
        self.offset = 0  # bytes of the queue's first chunk already read
        self.armed = False  # the multishot is in the kernel (on self.engine's ring)
        self.stopping = False  # a cancel of it is on its way
        self.was_armed = False  # armed before: the next arm is a re-arm (statistics)
        self.engine: Any = None
        self.waiter: Any = None  # the task parked for the next chunk
        # The parking ticket, whose abort is this object itself (``__call__``): a bound method
        # would be one more object per open stream for every full collection to walk. None
        # once the stream is closed (let_go).
        self.ticket: Any = Park(self, self)
        # Set when a completion raised (failed): the exception, queued behind the bytes that
        # came before it; from then on every recv raises instead of returning bytes after a hole.
        self.broken: Any = None
        self.token = stream._recv_token
        self.owner = weakref.ref(stream)
        self.waited = False
        # What makes each of the recv's and the completions' steps on the shared fields one
        # step where the GIL does not (the module doc): only on a free-threaded build.
        self.lock: Any = threading.Lock() if fence.FREE_THREADED else None

    def describe(self) -> str:
        return f"recv from {peer_of(self.owner)}"

    def __repr__(self) -> str:
        return f"<recv (multishot) from {peer_of(self.owner)}>"

    def __call__(self) -> bool:
        """The ticket's abort: the parked recv was cancelled; off the waiter slot, unless a
        wake is on its way."""
        return self._take_waiter() is not None

    def _take_waiter(self) -> Any:
        """The recv parked on the slot, taken off it (None if none is): a test, then a clear,
        made one step (under ``lock`` on a free-threaded build), so that of a completion, the
        last completion, a failure, a cancel and the recv looking again, one takes it."""
        if fence.FREE_THREADED:
            self.lock.acquire()
        waiter = self.waiter
        self.waiter = None
        if fence.FREE_THREADED:
            self.lock.release()
        return waiter

    # -- the core's seam (MultiOp), on the engine's thread ----------------------------------
    def awaited(self) -> bool:
        """Whether a recv waits on this multishot now (then it is work in flight)."""
        return self.waiter is not None

    def completion(self, res: int, data: Any, more: bool) -> None:
        """One CQE of the multishot: *data* (a bytes copy of its buffer) or *res* (0 at EOF,
        or a negative errno); *more* False on the last one, after which :meth:`finished`.
        The queue, its count and the waiter change as one step (under ``lock`` on a
        free-threaded build); the wake and the calls to the engine come after it."""
        stop = refused = False
        waiter = None
        if fence.FREE_THREADED:
            self.lock.acquire()
        if self.broken is None:  # else the stream has a hole: nothing after it is returned
            if data is not None:
                self._push(data)
                self.queued += len(data)
                if more and self.queued > _QUEUE_LIMIT and not self.stopping:
                    self.stopping = stop = True
            elif res == 0:
                self._push(b"")  # EOF
            elif res == _ENOBUFS:
                # The ring's provided buffers ran out: the kernel ended the multishot (not an
                # error; the next recv that empties the queue arms it again). Counted here, the
                # one place that knows buffers, in the context's statistics (multishot_enobufs).
                if not more:
                    self.engine.nobufs_endings += 1  # the engine's own counter: its thread
            elif res == _EINVAL and self.head is None and not self.queued:
                # The kernel has the buffer ring (5.19) but not the multishot recv (6.0): this
                # ring receives with single recvs from now on; the waiting recv takes that path.
                refused = True
            elif res < 0 and res != _ECANCELED:
                self._push(res)  # an error, raised when a recv reaches it
            if more and self.head is not None:
                waiter = self.waiter
                self.waiter = None
        if fence.FREE_THREADED:
            self.lock.release()
        if stop:
            self.engine.call_soon(_stop_multishot, self.engine, self)
        if refused:
            self.engine.multishot_refused()
        if waiter is not None:
            wake_waiter(waiter, None)  # compiled, a C call for a task (core/task)

    def failed(self, exc: BaseException) -> None:
        """A completion of this multishot raised (the owner has reported it): the bytes it
        carried are lost, so the stream is failed rather than left to go on with a hole in
        its data. What was queued before still reads; then every recv raises an OSError
        (EIO) naming *exc*; later completions are dropped, and the multishot is stopped."""
        stop = None
        if fence.FREE_THREADED:
            self.lock.acquire()
        if self.broken is not None:
            if fence.FREE_THREADED:
                self.lock.release()
            return
        self.broken = exc
        self._push(exc)  # after the good bytes; _take never pops it
        if self.armed and not self.stopping and self.engine is not None:
            self.stopping = True
            stop = self.engine
        waiter = self.waiter
        self.waiter = None
        if fence.FREE_THREADED:
            self.lock.release()
        if stop is not None:
            stop.call_soon(_stop_multishot, stop, self)
        if waiter is not None:
            waiter.wake(None)

    def finished(self) -> None:
        """The multishot's last CQE has been handled (also when its completion raised): it
        is out of the kernel, so out of the stream's pending set, and a waiting recv looks
        again (arms it again, or takes what was queued). One step with the recv's look (under
        ``lock`` on a free-threaded build): a recv that sees it disarmed may arm it at once,
        on its own context, and must find the stream's pending set and fields already reset."""
        if fence.FREE_THREADED:
            self.lock.acquire()
        self.armed = False
        self.stopping = False
        self.engine = None
        self.pending._ops.pop(self, None)
        waiter = self.waiter
        self.waiter = None
        if fence.FREE_THREADED:
            self.lock.release()
        if waiter is not None:
            waiter.wake(None)

    def let_go(self) -> None:
        """The stream is closed (``pending.closed`` set): drop the parking ticket, whose
        ``abort`` and ``what`` are this object, a cycle that
        only a full collection would free. Only while no recv runs: the receive token taken
        here means none parks now, and every later recv sees the close before it would park."""
        token = self.token
        if not tokens.take(token):  # a recv runs: it ends on the close; the collector frees the rest
            return
        self.ticket = None
        tokens.give(token)

    # -- the recv --------------------------------------------------------------------------------
    def _push(self, item: Any) -> None:
        """*item* at the end of the queue (as one step with the recv's look and take: under
        ``lock`` on a free-threaded build)."""
        if self.head is None:
            self.head = item
            return
        rest = self.rest
        if rest is None:
            rest = self.rest = collections.deque()
        rest.append(item)

    def _pop(self) -> None:
        """The queue's first item off it: the next one, if any, becomes its head."""
        rest = self.rest
        self.head = rest.popleft() if rest else None

    def _take(self, want: int) -> bytes:
        """Up to *want* bytes of what is queued, or the error queued in their place.

        A chunk read in parts is sliced from ``offset``, so each byte is copied once; queued
        chunks that fit are joined (one recv returns what is there, as a single recv returns
        what the socket holds), stopping at an error or EOF, which the next recv reaches."""
        item = self.head
        if type(item) is not bytes:
            if type(item) is int:
                self._pop()
                raise self._failure(item)
            if isinstance(item, BaseException):
                raise _broken(item)  # stays queued: every later recv raises too
        start = self.offset
        left = len(item) - start
        if left > want:
            self.offset = start + want
            self.queued -= want
            return item[start:start + want]
        self._pop()
        self.offset = 0
        first = item[start:] if start else item
        if left == want or not left or self.head is None:
            self.queued -= left
            return first
        parts = [first]
        got = left
        while self.head is not None and got < want:
            item = self.head
            if type(item) is not bytes or not item:
                break  # an error or EOF: the next recv reaches it
            n = len(item)
            if got + n > want:
                n = want - got
                self.offset = n
                parts.append(item[:n])
                got = want
                break
            self._pop()
            parts.append(item)
            got += n
        self.queued -= got
        return b"".join(parts)

    def _look(self, engine: Any, want: int) -> int:
        """One look of a recv at the stream (the recv's every step goes through it, whoever
        drives it: :class:`RecvCall` on a context, :meth:`recv` elsewhere): what the recv does
        next, one of ``_TAKE`` (bytes are queued: take them), ``_SPEND`` (queued, but the
        engine's budget is spent: yield once first), ``_SINGLE`` (take the single recv) and
        ``_PARK`` (the waiter is set: park on ``ticket``); raises if the stream is closed."""
        pending = self.pending
        while True:
            if pending.closed:
                if self.waited:
                    raise ClosedResourceError(CLOSED_WHILE_WAITING)
                raise pending._error()
            if self.head is not None:
                # Bytes queued when the recv began: it completes without suspending, and
                # spends one unit of the engine's budget (rule 16); at zero it yields once
                # first, so a task that reads queued bytes in a loop (recv(1) over a 64 KiB
                # chunk, say) still lets its context's other tasks run, and a cancel due lands
                # there, before a byte is taken. Then it looks again: the stream may have been
                # closed meanwhile. A recv that parked and was woken with the bytes did
                # suspend: no charge (the echo's every request, where the call cost ~300
                # instructions).
                if engine is not None and not self.waited and not self._spend(engine):
                    return _SPEND
                return _TAKE
            # Nothing queued, as seen: the decision (arm, stop elsewhere, single recv, or
            # park) and the waiter set, as one step with the completions' (under ``lock`` on a
            # free-threaded build). The waiter is set before the stop below reaches the other
            # context, and the state is looked at again after it is set: a last CQE handled on
            # another context in between either finds the waiter (and its wake is on its way:
            # park to take it) or left the state changed (take the waiter back and loop).
            # running_task(): compiled, a C read (multishot.pxd), not the descriptor's lookup
            waiter = running_task() if engine is not None else foreign_waiter()
            stop = None
            single = again = False
            if fence.FREE_THREADED:
                self.lock.acquire()
            try:
                if self.head is not None:
                    again = True  # queued meanwhile: loop to take it
                elif self.armed:
                    if (engine is not self.engine or want >= _QUEUE_LIMIT) and not self.stopping:
                        # armed on another context's ring: stopped there (its chunks so far
                        # come first), then armed on this one. A bulk read stops it too, and
                        # then takes the single recv (its chunks so far first): parked on the
                        # multishot, a reader faster than the sender got one buffer-sized
                        # chunk per recv, copied twice.
                        self.stopping = True
                        stop = self.engine
                elif engine is None or want >= _QUEUE_LIMIT or not engine.multishot_ready():
                    # A recv that asks for at least what the queue may hold (bulk reads:
                    # recv(1 MiB)) takes the single recv while nothing is armed: the kernel
                    # copies all the socket holds in one operation, where the multishot would
                    # bring it in buffer-sized CQEs to be joined (half the rate).
                    single = True
                else:
                    self._arm(engine)
                if not (single or again):
                    self.waited = True
                    self.waiter = waiter
            finally:
                if fence.FREE_THREADED:
                    self.lock.release()
            if single:
                return _SINGLE
            if again:
                continue
            if stop is not None:
                stop.call_soon(_stop_multishot, stop, self)
            if (self.head is not None or not self.armed) and waiter is not None and self._take_waiter() is not None:
                continue
            return _PARK

    def recv(self, want: int) -> Generator[Any, Any, bytes]:
        """The receive of one ``recv(want)`` call as a generator: the path of a recv awaited
        outside any context (an asyncio task) and of a call awaited twice at once; a task
        on a context runs :class:`RecvCall`'s own steps instead (no generator to make)."""
        token = self.token
        if not tokens.take(token):
            raise already_receiving(self.pending, self.owner)
        # Looked up once: a task runs on one context for life (rule 1), and a recv awaited
        # outside any (an asyncio task) stays there.
        engine = _local.engine
        self.waited = False
        try:
            while True:
                step = self._look(engine, want)
                if step == _TAKE:
                    return self._take_locked(want)
                if step == _SPEND:
                    yield YIELD
                    self._spend(engine)  # a new step: this recv counts in its budget
                    self.waited = True  # once: the look after it is not charged again
                    continue  # the stream may have been closed meanwhile
                if step == _SINGLE:
                    return (yield from self._single(engine, want))
                try:
                    if engine is not None:
                        yield self.ticket
                    else:
                        yield from run_outside(self.ticket)
                finally:
                    self.waiter = None
        finally:
            token.append(0)

    def _take_locked(self, want: int) -> bytes:
        """:meth:`_take`, as one step with the completions that append and count (under
        ``lock`` on a free-threaded build: both change ``queued``)."""
        if fence.FREE_THREADED:
            self.lock.acquire()
        try:
            return self._take(want)
        finally:
            if fence.FREE_THREADED:
                self.lock.release()

    def _arm(self, engine: Any) -> None:
        """Start the multishot on *engine*'s ring (the seam's arm); in the stream's
        PendingOps until its last CQE, so that close() cancels it."""
        self._enter()  # ClosedResourceError if closed meanwhile (then nothing was queued)
        error = engine.arm(self, self.was_armed)
        if error is not None:
            del self.pending._ops[self]
            raise error
        self.engine = engine
        self.armed = True
        self.was_armed = True

    def _bulk_single(self, want: int) -> Any:
        """The stream's :class:`~tinycoro.net.ops.BulkRecvOp` for a single recv of *want*
        bytes, or None where the single recv is RecvOp's (a smaller *want*, or the pure
        runtime): what a :class:`RecvCall` tries inline without a generator."""
        if want < _QUEUE_LIMIT:
            return None
        stream = self.owner()
        if stream is None:  # pragma: no cover - the awaiting task holds the stream
            raise ClosedResourceError(CLOSED_WHILE_WAITING)
        op = stream._single_recv(want)
        return op if type(op) is BulkRecvOp else None

    def _single(self, engine: Any, want: int) -> Generator[Any, Any, bytes]:
        """One recv into the stream's buffer, as :class:`~tinycoro.net.ops.RecvOp` does (the
        fallback where the ring takes no multishot)."""
        stream = self.owner()
        if stream is None:  # pragma: no cover - the awaiting task holds the stream
            raise ClosedResourceError(CLOSED_WHILE_WAITING)
        op = stream._single_recv(want)
        if type(op) is BulkRecvOp:
            return (yield from op.receive(engine))  # straight into the bytes returned
        res = yield from op._result_on(engine)
        return bytes(op.view[:res])


def _never_queued(sqe: Any) -> None:
    """The prep of a :class:`RecvCall`, which the ring never runs (its await does the work)."""
    raise RuntimeError("a stream's recv call is awaited, never queued on a ring")


def _broken(exc: BaseException) -> OSError:
    """What a recv on a failed stream raises (a new one each time: one raised twice would
    grow its traceback), *exc* as its cause."""
    error = OSError(_EIO, f"the stream's receive failed: a completion raised "
                          f"{type(exc).__name__}: {exc}, and the bytes it carried were lost")
    error.__cause__ = exc
    return error


class RecvCall(RecvLimit):
    """One ``Stream.recv(max_bytes)`` call on the multishot path: the awaitable, holding this
    call's own limit. The stream's :class:`MultishotRecv` is shared by every call, so a limit
    kept there was overwritten by any later call (one refused with "another task is already
    receiving" too), and a parked ``recv(5)`` returned 100 bytes. An :class:`Op` for what
    takes operations (``tc.spawn(stream.recv())``, ``asyncio.create_task``), though never one
    the ring runs: its await runs the stream's multishot.

    **Its own iterator.** ``__await__`` returns the call itself, whose steps (``__next__``,
    ``send``, ``throw``, ``close``: those of a generator) run the recv: a look at the stream
    (:meth:`MultishotRecv._look`), then the bytes, a park on the multishot's ticket or one
    yield for the budget. A generator per recv (allocated, resumed, torn down) was ~1,400
    instructions of the echo's every request (callgrind). Where the receive needs a
    generator after all (the single recv, a recv outside any context) the call delegates to
    it (``sub``), as ``yield from`` would; a call awaited a second time while its first
    await runs gets a generator of its own (:meth:`MultishotRecv.recv`), as before.

    The stream keeps one spare (*spare*, a list, as its sendall does), taken by ``recv()``
    and given back when its await ends, so that the echo's every request allocates none: at
    10,000 connections each object a request allocates and parks is work for the cyclic
    garbage collector. A call is awaited once; one made and never awaited costs the stream
    nothing but the next call's allocation. One driven through the coroutine protocol by
    hand (``send``: ``tc.spawn(stream.recv())``, ``asyncio.create_task``) leaves the spare
    for good, since its driver may still hold it."""

    # and "want", its limit: RecvLimit's
    __slots__ = ("ms", "spare", "state", "limit", "engine", "held", "sub", "result")

    def __init__(self, ms: MultishotRecv, want: int, spare: Any = None) -> None:
        self._fill(_never_queued, ())  # no SQE of its own
        self.ms = ms
        self.want = want
        self.spare = spare
        self.state = _IDLE
        self.limit = 0  # the want of the recv running: recv() may refill `want` meanwhile
        self.engine: Any = None
        self.held = False  # holds the stream's receive token
        self.sub: Any = None
        self.result: Any = None  # the bytes of the recv just over, until its await takes them

    def __await__(self) -> Any:
        if self.state != _IDLE:  # awaited already, and that await has not ended
            return self.ms.recv(self.want)
        self.state = _HANDED
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        # Compiled, the C slots that iterslots installs run instead (for ``await``); this
        # is the same step, for a call by name and for the interpreted source.
        return iterslots.advance(self, None, _recv_step, _recv_result)

    def send(self, value: Any) -> Any:
        # Compiled, the C method that iterslots installs runs instead (3.12+ resumes an
        # await through it whenever the value sent is not None).
        return iterslots.advance(self, value, _recv_send, _recv_result)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = thrown(typ, val, tb)
        state = self.state
        if state == _DELEGATED:
            return self._throw_result(exc)
        if state == _PARKED:
            self.ms.waiter = None
        if state >= _SPENDING:
            self._end()
        else:  # not started: nothing to undo, as with a generator not started
            self.state = _IDLE
        raise exc

    def close(self) -> None:
        state = self.state
        if state == _DELEGATED:
            sub = self.sub
            self.sub = None
            try:
                sub.close()
            finally:
                self._end()
        elif state >= _SPENDING:
            if state == _PARKED:
                self.ms.waiter = None
            self._end()
        else:
            self.state = _IDLE

    def _step(self, value: Any) -> Any:
        """The recv's next step: the trap to yield, or the call itself once the recv is
        over, its bytes in ``result``."""
        state = self.state
        if state == _DELEGATED:
            return self._forward(value, None)
        ms = self.ms
        # The recv ends in this step (the finally ends it) unless it yields a trap or hands
        # over to a generator that ends it. A finally, not `except BaseException: end;
        # raise`: compiled, an except clause saves the thread's handled exception as its
        # try begins, a thread-state read (a call into libpython's thread-local storage on
        # 3.12 and later) on every step; a finally pays only when something raised.
        over = True
        try:
            if state == _PARKED:
                ms.waiter = None  # woken (or looking again): off the slot
            elif state == _SPENDING:
                ms._spend(self.engine)  # a new step: this recv counts in its budget
                ms.waited = True  # once: the look after it is not charged again
            else:
                engine = running_engine()  # compiled, a C read (multishot.pxd)
                if engine is None:  # outside any context: the generator's run_outside
                    self.sub = ms.recv(self.want)
                    self.state = _DELEGATED
                    over = False  # _forward ends it
                    return self._forward(None, None)
                if not tokens.take(ms.token):
                    raise already_receiving(ms.pending, ms.owner)
                self.held = True
                self.engine = engine
                self.limit = self.want
                ms.waited = False
            step = ms._look(self.engine, self.limit)
            if step == _TAKE:
                data = ms._take_locked(self.limit)
            elif step == _PARK:
                over = False
                self.state = _PARKED
                return ms.ticket
            elif step == _SPEND:
                over = False
                self.state = _SPENDING
                return YIELD
            else:
                # A bulk read tries its inline recv here, with no generator (most of them
                # end there); the ring's recv, or RecvOp's, is a generator's to step.
                op = ms._bulk_single(self.limit)
                at_once = None if op is None else op.attempt(self.engine)
                if at_once is None:
                    if op is None:
                        self.sub = ms._single(self.engine, self.limit)
                    else:
                        self.sub = op.receive(self.engine, True)
                    self.state = _DELEGATED
                    over = False  # _forward ends it
                    return self._forward(None, None)
                data = at_once
        finally:
            if over:
                self._end()
        self.result = data
        return self

    def _throw_result(self, exc: Any) -> Any:
        """``throw`` into a delegated recv: the trap it yields next, else its end."""
        y = self._forward(None, exc)
        if y is self:
            raise StopIteration(_recv_result(self))
        return y

    def _forward(self, value: Any, exc: Any) -> Any:
        """A step of the generator the call delegates to (``sub``): *exc* thrown into it, or
        *value* sent; its end is the call's."""
        try:
            if exc is None:
                return self.sub.send(value)
            return self.sub.throw(exc)
        except StopIteration as e:
            self._end()
            self.result = e.value
            return self
        except BaseException:
            self._end()
            raise

    def _end(self) -> None:
        """The recv is over: the token back (if this call took it), then the call back to
        the stream's spare for its next recv()."""
        self.sub = None
        self.engine = None
        self.state = _IDLE
        if self.held:
            self.held = False
            tokens.give(self.ms.token)
        spare = self.spare
        if spare is not None and not spare:
            spare.append(self)


def _recv_step(call: Any, value: Any) -> Any:
    """A :class:`RecvCall`'s next step, resumed with *value* (the trap to yield, or the call
    itself once its recv is over): compiled, a C function that the call's C slots run
    (iterslots)."""
    c = call
    return c._step(value)


def _recv_send(call: Any, value: Any) -> Any:
    """The step of a :class:`RecvCall`'s ``send``. The await's resumptions come through
    ``__next__`` (every trap of its own is resumed with None), and through ``send`` only with
    an op's result for a delegated generator; any other send is a driver's by hand: the call
    is not the stream's spare any more."""
    c = call
    if c.state != _DELEGATED:
        c.spare = None
    return c._step(value)


def _recv_result(call: Any) -> Any:
    """What the await of a :class:`RecvCall` whose recv is over returns, taken off it."""
    c = call
    data = c.result
    c.result = None
    return data


iterslots.install(RecvCall, _recv_step, _recv_result, _recv_send)
