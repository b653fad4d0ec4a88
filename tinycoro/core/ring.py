"""The owner of one io_uring: its table of operations in flight and the steps every owner takes.

Two things own a ring: a context's :class:`~tinycoro.core.engine.Engine` and the asyncio host
(:class:`tinycoro.aio.host.LoopHost`). Both are a :class:`RingOwner`, which holds the in-flight
table (a list of slots, each an op or None; an op's user_data names its slot) and does, once
for both:

* start an op: a free slot of the table, its user_data from that slot, its SQE queued, the op
  in the slot with its *waiter* (``op.task``: the task, or whatever the owner resumes);
* queue while the ring is busy (``RingBusy``: the kernel's CQ overflowed): reap, queue again
  (rule 5); a prep that raises leaves a NOP with ``SKIP_UD`` behind, counted as our own;
* submit, reaping first when the kernel answers EBUSY/EAGAIN;
* cancel an op in the kernel with an async-cancel SQE of our own (``SKIP_UD``), counted in
  ``own_inflight`` until its CQE is reaped;
* reap: the ring hands back ``op, res`` (two entries of one flat list) for each op of the
  table that completed, its slot free again (the completion contract in
  :mod:`tinycoro.uring`), and the count of our own CQEs; the ops go to
  the owner's :meth:`RingOwner._deliver`, which decides what the waiter sees (the engine: a
  task's result or interrupt; the host: an asyncio future's result); an op whose waiter was
  abandoned at shutdown goes to :meth:`RingOwner._orphaned`, which closes the descriptor it
  returned, if it returns one;
* drain: cancel everything in flight and wait for every CQE (rule 8), through the owner's
  :meth:`RingOwner._wait_for_cqe`;
* an operation that completes many times (a :class:`MultiOp`, such as a stream's multishot
  recv): :meth:`RingOwner.arm` starts it with no task as its waiter and enters it in
  ``standing``, the one table of such ops, which the ring reads to tell their CQEs apart
  from the single ops' and leaves by itself at the last; each CQE is marked seen before
  anything runs (rule 17), and the owner passes each to the op's ``completion`` and, after
  the last, calls its ``finished``; one that raises is reported with the op, the op is told
  (``failed``: a stream's receive fails, since its bytes have a hole) and the next runs. It is cancelled
  like any op (``cancel_op``), and it is work in flight only while someone waits on it
  (``awaited``): :meth:`RingOwner.waited_inflight` is what the stop protocol and the deadlock
  watchdog count, so an armed receive that nobody awaits never hides a deadlock nor keeps a
  context from going idle.

The subclass provides ``_deliver`` and ``_wait_for_cqe``, and submits when it sees fit (the
engine at the end of a turn, the host in a loop callback). Everything here runs on the thread
that owns the ring (rule 2). Plain class, ``__slots__``, no closures: the hot calls (start and
reap) stay cheap, and they are compiled from this source with ``ring.pxd`` beside it (rule 14).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from typing import Any, Callable, Optional

from .. import _ringdefs, compiled, uring
from . import cqwatch, fence, ringcalls
from .ringseams import IoRing, MultiOp

__all__ = ["IoRing", "MultiOp", "RingOwner"]

log = logging.getLogger("tinycoro")
_prep_cancel = uring.prep_cancel
_prep_close = uring.prep_close
_SKIP_UD = uring.SKIP_UD
_MULTI_UD_TAG = _ringdefs.MULTI_UD_TAG
# Whether the owner holds ``RingOwner._flight_lock`` while ops leave the table: without the GIL
# (a field read is not one step), and interpreted (a refill is several bytecodes, between which
# the GIL may switch); not compiled under the GIL (RingOwner.describe_inflight says why).
_COMPILED: bool = compiled.is_compiled(sys.modules[__name__])
_LOCKED_REAP: bool = fence.FREE_THREADED or not _COMPILED
_RingBusy = uring.RingBusy


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class RingOwner:
    """One ring, the ops in flight on it and our own SQEs.

    The in-flight table is ``_slots``, a list of two entries per slot: the op in flight there
    (None: free) and the slot's user_data, an even int made once with the slot, which is the
    index of the op's entry (``tinycoro._ringdefs``). A free slot's user_data is on ``_free``,
    which :meth:`_enter` takes from (the last freed first: its line is likely still in the
    cache); the ring's reap puts it back. No dict is filled and emptied per operation (at
    10,000 connections one keyed by user_data rehashed every few thousand operations and
    missed the cache at each look-up), and no int is made per operation either. ``inflight``
    (user_data -> op) is a copy of it for readers (tests, statistics, shutdown);
    :meth:`inflight_count` and :meth:`holds` are the owner's questions.

    ``unsubmitted``: SQEs queued since the last submit. ``own_inflight``: our own SQEs in the
    kernel (cancel requests, placeholder NOPs of failed preps), whose CQEs match no op.
    ``ops``: CQEs reaped, cumulative (for statistics). ``standing``: the :class:`MultiOp`
    ops in flight (user_data -> op), also in the slots: entered by :meth:`arm`, left
    at the op's last CQE by the ring's ``complete``. ``rearms``: MultiOps started again after
    an earlier one of theirs ended; ``nobufs_endings``: MultiOps the kernel ended because the
    ring's provided buffers ran out, counted by the op that knows buffers (a stream's
    multishot recv); both cumulative, for statistics. ``completion_hook``: a test seam, None
    in use (see :meth:`_complete_multi`).
    """

    __slots__ = ("ring", "_slots", "_free", "unsubmitted", "own_inflight", "ops", "_done",
                 "standing", "_shots", "rearms", "nobufs_endings", "completion_hook",
                 "_flight_lock", "_ring_queue", "_ring_complete", "_ring_cq_ready", "_ring_submit",
                 "_ring_sq_ready", "cq_high",
                 "_cq_watch", "_calls")

    def __init__(self, ring: IoRing) -> None:
        self.ring = ring
        # Compiled over the compiled ring, its C call table (core/ringcalls.py); else 0, and its
        # methods bound once (by name, ~280 instructions a call on 3.12): the helpers pick.
        calls = getattr(ring, "c_calls", None) if _COMPILED else None
        self._calls = calls() if calls is not None else 0
        if not self._calls:  # with the table they stay None (compiled: never set otherwise)
            self._ring_queue = ring.queue
            self._ring_complete = ring.complete
            self._ring_cq_ready = ring.cq_ready
            self._ring_submit = ring.submit
            self._ring_sq_ready = ring.sq_ready
        # A submit that leaves at least this many CQEs unreaped reaps them at once (0: never;
        # see _submit): half the completion queue of a ring that says how large it is.
        self.cq_high = getattr(ring, "cq_entries", 0) // 2
        # Compiled over the compiled ring: where _reap reads whether the CQ is empty without
        # calling complete() (core/cqwatch.py says why); 0 (always call it) otherwise
        watch = getattr(ring, "cq_watch", None) if _COMPILED else None
        self._cq_watch = watch() if watch is not None else 0
        # slot 0 is SKIP_UD's (our own SQEs), never an op's
        self._slots: list[Any] = [None, 0]
        self._free: list[int] = []
        self.unsubmitted = 0
        self.own_inflight = 0
        self.ops = 0
        self._done: list[Any] = []  # what the ring's complete() hands back: op, res, op, res...
        self.standing: dict[int, Any] = {}
        self._shots: list[Any] = []  # the multishot CQEs complete() hands back, 4 entries each
        self.rearms = 0
        self.nobufs_endings = 0
        self.completion_hook: Optional[Callable[[Any, int, Any, bool], tuple]] = None
        # Held while ops leave the table (:meth:`_reap`) on a free-threaded build, and by a
        # reader that describes an op in flight (:meth:`describe_inflight`): an op may be
        # refilled for its next use only after it left, so under this lock its fields stay.
        self._flight_lock = threading.Lock()

    # -- what the owner provides ---------------------------------------------------------------
    def _deliver(self, done: list) -> None:
        """For each ``op, res`` of *done* (two entries each: no tuple per completion, which
        fed the collector's young generation at many connections; the op has left the
        table): take the op's waiter
        (``op.task``) and set ``op.task = None`` (an op kept for reuse keeps nobody alive),
        then decide what the waiter sees of *res*; an op whose waiter is None was abandoned
        and goes to :meth:`_orphaned`."""
        raise NotImplementedError

    def _wait_for_cqe(self) -> None:
        """Block until a completion may be there to reap (``_drain``)."""
        raise NotImplementedError

    # -- submission ----------------------------------------------------------------------------
    def _enter(self, op: Any, waiter: Any, tag: int = 0) -> BaseException | None:
        """Queue *op*'s SQE under a fresh user_data (with the bits of *tag* set) and put it in
        the table with *waiter* as ``op.task``. Returns what its prep raised (the op is then
        not in flight), else None."""
        slot = ud = self._take_slot()
        if tag:  # not `ud | 0`: that makes a new int of every user_data past 256
            ud |= tag
        op.ud = ud
        try:
            self._queue_sqe(op.prep, op.args, ud)
        except BaseException as e:  # noqa: BLE001 - sorted out off the hot path
            error = self._queue_failed(e, op.prep, op.args, ud)
            if error is not None:
                self._free.append(slot)
                return error
        else:
            self.unsubmitted += 1
        op.task = waiter
        op.cancelling = False  # an op may be reused once its CQE is in (net.Stream does)
        self._slots[slot] = op
        return None

    def _take_slot(self) -> Any:
        """A slot of the in-flight table for an op about to start: its user_data, the slot's
        own int (the last freed first: its line is likely still in the cache), or a new
        slot's when none is free. The op goes in ``_slots[ud]`` once its SQE is queued."""
        free = self._free
        if free:
            if fence.FREE_THREADED:  # pop_keep would call list.pop by name there
                return free.pop()
            return ringcalls.pop_keep(free)  # compiled, its storage stays (ringcalls.pxd)
        ud = len(self._slots)  # a new slot: its op's entry and its user_data, that entry's index
        self._slots.append(None)
        self._slots.append(ud)
        return ud

    def _queue(self, prep: Callable[..., Any], args: tuple, ud: int) -> BaseException | None:
        """Queue one SQE on the ring; return what ``prep`` raised, if it did."""
        try:
            self._queue_sqe(prep, args, ud)
        except BaseException as e:  # noqa: BLE001 - see _queue_failed
            return self._queue_failed(e, prep, args, ud)
        self.unsubmitted += 1
        return None

    def _queue_failed(
        self, e: BaseException, prep: Callable[..., Any], args: tuple, ud: int
    ) -> BaseException | None:
        """``ring.queue`` raised *e*. RingBusy: the kernel takes no more SQEs until its CQ
        overflow is reaped; reap and queue again (rule 5). Anything else is what ``prep``
        raised: a bad argument is the caller's error (rule 11), returned; the ring has queued a
        NOP with ``SKIP_UD`` in that SQE's place, so the kernel never sees it half-prepared."""
        if isinstance(e, _RingBusy):
            self._reap()
            return self._queue(prep, args, ud)
        self.own_inflight += 1
        self.unsubmitted += 1
        return e

    def _submit(self) -> None:
        """Hand the queued SQEs to the kernel. EBUSY/EAGAIN: it wants completions reaped first
        (CQ overflow); never drop work (rule 5): reap, and the SQEs stay for the next submit."""
        try:
            self.unsubmitted = self._submit_sqes()
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.EAGAIN):
                raise
            self._reap()
            return
        # The kernel posts completions while it runs a submit (the task work of earlier ones),
        # and the owner reaps at its turn's end; a turn that resumes thousands of tasks submits
        # hundreds of times first. When the CQ is full, the kernel ends every multishot recv
        # that has a CQE to post (no IORING_CQE_F_MORE), and each is armed again by its next
        # recv: at 10,000 echo connections on one context, 7 re-arms per 100 requests. Reaping
        # here once the CQ is half full keeps it from filling, whatever the connection count.
        if self.cq_high and self._cq_ready() >= self.cq_high:
            self._reap()

    def _queue_sqe(self, prep: Callable[..., Any], args: tuple, ud: int) -> int:
        """The ring's ``queue(prep, args, ud)``, raising what it raises: 0."""
        if self._calls:
            return ringcalls.queue(self._calls, self.ring, prep, args, ud)
        self._ring_queue(prep, args, ud)
        return 0

    def _submit_sqes(self) -> int:
        """The ring's ``submit()``, then its ``sq_ready()``: the SQEs it left queued. One helper
        for both: interpreted, each is a Python call (~500 instructions, callgrind 3.11)."""
        if self._calls:
            ringcalls.submit(self._calls, self.ring)
            return ringcalls.sq_ready(self._calls, self.ring)
        self._ring_submit()
        return self._ring_sq_ready()

    def _cq_ready(self) -> int:
        """The ring's ``cq_ready()``: CQEs posted and not yet reaped."""
        if self._calls:
            return ringcalls.cq_ready(self._calls, self.ring)
        return self._ring_cq_ready()

    def _set_release_gil(self, on: bool) -> int:
        """``ring.release_gil = on``: whether its next submit lets the GIL go. 0."""
        if not self._calls:
            self.ring.release_gil = on
            return 0
        ringcalls.set_release_gil(self._calls, self.ring, on)
        return 0

    def arm(self, op: Any, rearm: bool = False) -> BaseException | None:
        """Start *op*, a :class:`MultiOp`, with no task as its waiter: its CQEs go to its
        ``completion`` until the last. *rearm*: an earlier run of it has ended (counted in
        ``rearms``). Returns what its prep raised (then it is not in flight), else None."""
        error = self._enter(op, None, _MULTI_UD_TAG)  # the ring's reap looks for the tag
        if error is None:
            self.standing[op.ud] = op
            if rearm:
                self.rearms += 1
        return error

    def multishot_ready(self) -> bool:
        """Whether this ring can arm a multishot receive now (a compiled ring with its
        provided-buffer pool, on a kernel that has not refused one)."""
        return self.ring.multishot_ready()

    def multishot_possible(self) -> bool:
        """Whether a multishot receive may still be armed on this ring: a stream made here
        asks, once, whether to receive through one at all (no setup happens)."""
        return self.ring.multishot_possible()

    def multishot_refused(self) -> None:
        """The kernel refused a multishot receive (-EINVAL: an old kernel): from now on this
        ring receives with single recvs."""
        self.ring.multishot_refused()

    def waited_inflight(self) -> int:
        """Nonzero when some operation in flight is one someone waits on: any op of the table
        but a :class:`MultiOp` nobody awaits (an armed receive is no work by itself). Any
        thread (the deadlock watchdog asks from its own): a snapshot. Its callers ask only
        whether there is one, so it stops at the first: the watchdog's question every 50 ms
        asked each of 10,000 armed receives in turn (~2% of a server's samples while its
        connections were set up), where the first one asked is awaited."""
        n = self.inflight_count()
        standing = self.standing
        if not standing or n > len(standing):  # standing ops are in the table too
            return n
        for op in list(standing.values()):
            if op.awaited():
                return 1
        return 0

    # -- completion ----------------------------------------------------------------------------
    def _reap(self) -> None:
        """Reap every ready CQE: count our own, finish orphans, deliver the rest, hand each
        multishot CQE to its op. The lists the ring fills are emptied whatever happens."""
        if self._cq_watch and cqwatch.idle(self._cq_watch):
            return  # nothing posted nor held back: complete() would reap nothing
        done = self._done
        shots = self._shots
        # A finally, not `except BaseException: clear; raise`: compiled, an except clause
        # saves the thread's handled exception as its try begins, a read of the thread state
        # (a call into libpython's thread-local storage on 3.12 and later) on every reap
        reaped = False
        try:
            if _LOCKED_REAP:  # describe_inflight says why
                with self._flight_lock:
                    n = self._complete(done, shots)
            else:
                n = self._complete(done, shots)
            reaped = True
        finally:
            if not reaped:  # pragma: no cover - the ring raises only on memory exhaustion
                done.clear()
                shots.clear()
        if shots:
            self._complete_multi(shots)
        if not n:
            return
        self.ops += n
        own = n - (len(done) >> 1)  # two entries per op
        if own:
            self.own_inflight -= own
        if done:
            try:
                self._deliver(done)
            finally:
                done.clear()

    def _complete(self, done: list, shots: list) -> int:
        """The ring's ``complete()`` over this owner's tables: the CQEs it counted."""
        if self._calls:
            return ringcalls.complete(self._calls, self.ring, self._slots, self._free,
                                      self.standing, done, shots)
        return self._ring_complete(self._slots, self._free, self.standing, done, shots)

    def describe_inflight(self, ud: int, op: Any) -> tuple[str, str] | None:
        """Any thread: the prep's name and ``op.describe()`` of *op* while it is still in
        flight here under *ud* (a key of ``inflight``, the copy the caller took), else None (it
        completed meanwhile: its task is ready or running).

        Why here: an op is reused once its CQE is in (a stream's recv and sendall), and its
        owner refills ``prep``, ``args`` and ``what`` then, so a reader that held the op from
        a copy of the table could see two operations' fields mixed, and, without the GIL,
        take a reference to a field the owner has just let go (compiled, a field is a plain
        pointer). While the op is in flight nothing writes those fields, so the reader looks
        it up under ``_flight_lock``, which the owner holds while ops leave the table
        (:meth:`_reap`), and reads it there: it stays in flight until the lock is let go.
        Compiled under the GIL the owner takes no lock (``_LOCKED_REAP``: nothing on its
        path): there a refill is one C step that no thread switch splits (``Op._fill``, or one
        store of ``args``), ``Op.describe`` reads the prep, args and what in one C call and a
        subclass's describe reads ``args`` once; the op may then have completed after the
        look, and the words are of its next use, whole."""
        with self._flight_lock:
            if not self._holds_at(ud, op):
                return None
            return getattr(op.prep, "__name__", ""), op.describe()

    @property
    def inflight(self) -> dict[int, Any]:
        """The ops in flight, user_data -> op: a copy of the table, for readers (statistics,
        shutdown, tests). Any thread: the list is copied in one step (under its lock where
        there is no GIL), and each key is made from the op's slot and ``standing`` (whether
        it was armed), never read from the op, whose ``ud`` the owner rewrites at each use.
        The owner's own questions are :meth:`inflight_count` and :meth:`holds`."""
        standing = self.standing
        table = {}
        slots = list(self._slots)
        for ud in range(2, len(slots), 2):
            op = slots[ud]
            if op is not None:
                if standing.get(ud | _MULTI_UD_TAG) is op:
                    ud |= _MULTI_UD_TAG
                table[ud] = op
        return table

    def inflight_count(self) -> int:
        """How many ops are in flight (standing ones included): every slot but the free ones
        and slot 0. Any thread: a snapshot."""
        return (len(self._slots) >> 1) - len(self._free) - 1

    def holds(self, op: Any) -> bool:
        """Whether *op* is in flight here: in the slot its user_data names (an op reused
        since it completed is there only under its new user_data)."""
        return self._holds_at(op.ud, op)

    def _holds_at(self, ud: int, op: Any) -> bool:
        """Whether *op* is in the slot *ud* names (0, no op's user_data, names none)."""
        slots = self._slots
        slot = ud - (ud & _MULTI_UD_TAG)
        return 0 < slot < len(slots) and slots[slot] is op

    def _complete_multi(self, shots: list) -> None:
        """Hand each CQE of a :class:`MultiOp` (already marked seen by the ring, and at the
        last out of ``standing``: rule 17) to its op, and call ``finished`` after its last;
        one that raises is reported with its op, which is told (``failed``), and the others
        go on. ``completion_hook`` (a
        test seam) sees each first, as ``hook(op, res, data, more) -> (res, data)``, and may
        change or raise in its place."""
        hook = self.completion_hook
        try:
            # op, res, data, more: four entries per CQE (uring.py, the completion contract)
            n = len(shots)
            for i in range(0, n, 4):
                op = shots[i]
                res = shots[i + 1]
                data = shots[i + 2]
                more = shots[i + 3]
                try:
                    if hook is not None:
                        res, data = hook(op, res, data, more)
                    # A MultiOp is an Op (its contract): compiled, the typed local makes its
                    # completion Op's C method (ring.pxd), where by name each call was a type
                    # lookup and an argument parse.
                    mop = op
                    mop.completion(res, data, more)
                except Exception as e:  # noqa: BLE001 - reported; the ring carries on (rule 17)
                    self._completion_failed(op, e)
                if not more:
                    try:
                        op.finished()
                    except Exception as e:  # noqa: BLE001 - as above
                        self._completion_failed(op, e)
        finally:
            shots.clear()

    def _completion_failed(self, op: Any, exc: BaseException) -> None:
        try:
            what = op.describe()
        except Exception:  # noqa: BLE001 - the report must not fail too
            what = repr(op)
        log.error("tinycoro: a completion of %s raised; the operation is failed",
                  what, exc_info=(type(exc), exc, exc.__traceback__))
        try:
            op.failed(exc)
        except Exception:  # noqa: BLE001 - reported; the ring carries on (rule 17)
            log.exception("tinycoro: failing %s raised too", what)

    def _orphaned(self, op: Any, res: int) -> None:
        """*op* completed after its waiter was abandoned (shutdown): nobody will take what it
        returns, so a descriptor it returned is closed here instead of leaking."""
        if res >= 0 and op.returns_fd:
            _close_quietly(res)

    # -- cancellation and teardown -------------------------------------------------------------
    def cancel_op(self, op: Any) -> None:
        """Owner thread: ask the kernel to cancel *op* if it is still in flight here.

        The seam the I/O layer uses when a resource is closed under an operation that another
        task awaits (rule 10). The op's waiter then sees ``-ECANCELED`` as its result (or
        the op's real result if it completed first); no interrupt is delivered to it.
        A close is never cancelled (see :meth:`_cancel_op`).
        """
        if self.holds(op):
            self._cancel_op(op)

    def _cancel_op(self, op: Any) -> None:
        """Queue an async-cancel of *op* (in flight here), once.

        Never for a close: whether a cancelled close released its number cannot be told
        from its result (a close that fails may have released it), and a close does not
        wait on anything, so it is left to complete; an interrupt waiting for its task goes
        to the next await (``tinycoro.closing.close_fd`` relies on this)."""
        if op.cancelling or op.prep is _prep_close:
            return
        op.cancelling = True
        error = self._queue(_prep_cancel, (op.ud, 0), _SKIP_UD)
        if error is not None:  # pragma: no cover - cancel64 takes two ints; cannot fail
            raise error
        self.own_inflight += 1

    def _drain(self) -> None:
        """Cancel every op still in the kernel and wait for all their CQEs, ours included
        (rule 8: no buffer is let go while the kernel may use it). Their waiters are
        abandoned: each op completes as an orphan."""
        for op in list(self._slots)[::2]:
            if op is not None:
                op.task = None
                self._cancel_op(op)
        while self.inflight_count() or self.own_inflight:
            if self.unsubmitted:
                self._submit()
            self._reap()
            if self.inflight_count() or self.own_inflight:
                self._wait_for_cqe()
