"""tinycoro awaitables inside a running asyncio event loop: the driver installed into the traps.

Where no tinycoro engine runs on the thread, a trap is handed to :func:`run_trap`, which turns it
into asyncio futures of the running loop:

* an :class:`~tinycoro.core.traps.Op` goes to a ring *hosted* by that loop (:class:`LoopHost`):
  one io_uring instance per loop, created on first use, whose eventfd is a reader of the loop
  (``loop.add_reader``), so completions are reaped in a loop callback. SQEs prepared during one
  loop iteration are submitted together by one ``call_soon`` flush;
* a :class:`~tinycoro.core.traps.Park` waits on the asyncio task's stand-in, an
  :class:`AioWaiter`, whose ``wake`` (called by a primitive on any thread) reaches the loop
  through ``loop.call_soon_threadsafe``;
* ``YIELD`` is a bare ``yield`` (``sleep(0)``); ``await task`` waits for its done callback;
* a :class:`~tinycoro.core.deadlines.Sleep` (``tc.sleep``) waits on the loop's own timers, as
  ``asyncio.sleep`` does, for the deadline taken at the call; nothing of it is in the kernel.

Cancellation keeps the tinycoro rules. Cancelling the asyncio task while an operation is in the
kernel submits an io_uring cancel and waits for the operation's completion before
``CancelledError`` is raised, so no buffer is freed while the kernel may still write into it
(rule 8). A parked waiter cancelled after a primitive handed it something (a lock, a
permit) gives it back through the ticket's ``undo``. What nothing can give back (bytes, an
Event's value, a joined task's outcome) is returned (a joined failure raised) and the cancel
asked for again, for the task's next await, as in tinycoro.

Lifetime: the hosted ring closes with the loop: ``asyncio.run`` and ``uvloop.run`` call
``loop.shutdown_asyncgens()`` first, and a one-step async generator the host registers closes
the ring in its ``finally``; a ``weakref.finalize`` on the loop is the backstop.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time
import weakref
from typing import Any, Generator

from .. import uring
from ..core.deadlines import Sleep
from ..core.ring import RingOwner
from ..core.task import Task
from ..core.traps import YIELD, Op, Park, install_driver
from .guard import refusing

HOST_RING_ENTRIES = 256
_get_running_loop = asyncio._get_running_loop  # the C accessor asyncio itself uses; no raise
_current_task = asyncio.current_task
_CancelledError = asyncio.CancelledError
_perf = time.perf_counter
_LONGEST_WAIT = 86400.0  # a longer sleep (math.inf) waits again: no loop sees an endless delay


class _Pending:
    """The waiter of one operation in the hosted ring (the op's ``task``): the future its
    awaiting asyncio task waits on, and the result once the CQE has arrived."""

    __slots__ = ("fut", "res", "done")

    def __init__(self, fut: asyncio.Future) -> None:
        self.fut = fut
        self.res = 0
        self.done = False


class LoopHost(RingOwner):
    """The tinycoro side of one asyncio loop: its hosted ring and the ops in flight on it.

    A :class:`~tinycoro.core.ring.RingOwner`, as an engine is: the in-flight table and the
    steps on it (queue, submit, reap, cancel, drain) are the same code. What differs is said
    here: a completion resolves an asyncio future (:meth:`_deliver`), SQEs are submitted by one
    loop callback per iteration (:meth:`_flush`), and the ring's eventfd is a reader of the loop.

    Created, with its ring, on the loop's thread at the first operation there, and used only on
    that thread (rule 2). Holds the loop weakly, so the finalizer on the loop can run once
    the loop is gone. Once closed (the loop shut down its async generators, or was collected) it
    stays closed: an operation started on that loop afterwards fails with RuntimeError instead
    of opening a ring that nothing would close.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        ring = uring.Ring(HOST_RING_ENTRIES)
        try:
            ring.notify_on(True)  # the loop waits on the eventfd: every CQE must signal it
            loop.add_reader(ring.efd, self._on_readable)
        except BaseException:
            ring.close()
            raise
        RingOwner.__init__(self, ring)
        self._loop_ref = weakref.ref(loop)
        self.closed = False
        self._flush_scheduled = False
        self._keeper: Any = None
        self._finalizer = weakref.finalize(loop, _finalize, self)
        self._register_keeper()

    def _register_keeper(self) -> None:
        # Step an async generator once on this thread while the loop runs: the loop's
        # firstiter hook adds it to the (weak) set that shutdown_asyncgens() closes, and its
        # finally closes the ring. It is stepped here, not awaited: the caller is mid-trap.
        # The finalizer hook is ours for that one step: the loop's would be a bound method
        # of the loop, stored in the generator, and keep the loop alive through this host
        # (held by the weakref.finalize backstop), so that backstop could never run.
        agen = _keeper(self)
        hooks = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=_finish_keeper)
        try:
            agen.asend(None).send(None)
        except StopIteration:
            pass
        finally:
            sys.set_asyncgen_hooks(*hooks)
        self._keeper = agen

    def start(self, op: Op, loop: asyncio.AbstractEventLoop) -> _Pending:
        """Prepare *op*'s SQE; it is submitted at the end of this loop iteration."""
        if self.closed:
            raise RuntimeError("tinycoro's ring for this event loop is closed (the loop is closing)")
        p = _Pending(loop.create_future())
        error = self._enter(op, p)
        # Also after a bad argument: the ring queued a NOP with SKIP_UD in the SQE's place
        # (rule 11), which has to reach the kernel all the same.
        self._schedule_flush(loop)
        if error is not None:
            raise error
        return p

    # -- what RingOwner leaves to its owner ---------------------------------------------------
    def _deliver(self, done: list) -> None:
        """A completion (``op, res``: two entries of *done*) is the result of the op's future,
        whatever it is: ``_perform``, on the awaiting task, decides what a cancelled task sees."""
        for i in range(0, len(done), 2):
            op, res = done[i], done[i + 1]
            p = op.task
            op.task = None
            if p is None:  # abandoned by close(): nobody takes what it returns
                self._orphaned(op, res)
                continue
            p.res = res
            p.done = True
            if not p.fut.done():
                p.fut.set_result(res)

    def _wait_for_cqe(self) -> None:
        if not self.ring.cq_ready():
            try:
                os.eventfd_read(self.ring.efd)  # notifications are on: every CQE writes it
            except InterruptedError:
                pass

    def _cancel_op(self, op: Any) -> None:
        RingOwner._cancel_op(self, op)
        loop = self._loop_ref()
        if loop is not None and not self.closed:  # close() drains: it submits by itself
            self._schedule_flush(loop)

    # -- the engine-like seam closing.PendingOps uses (rule 10) -----------------------
    # cancel_op(op), the other half of it, is RingOwner's.
    def call_soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread; any thread."""
        loop = self._loop_ref()
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: its ops were drained already
            pass

    # -- the loop's side -----------------------------------------------------------------------
    def _schedule_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed:
            return
        self._submit()
        if self.unsubmitted:  # the kernel wanted completions reaped first: again next time
            loop = self._loop_ref()
            if loop is not None:
                self._schedule_flush(loop)

    def _on_readable(self) -> None:
        if self.closed:
            return
        try:
            os.eventfd_read(self.ring.efd)
        except (BlockingIOError, InterruptedError):
            pass
        self._reap()

    # -- teardown ------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel what is still in the kernel, wait for its completions, close the ring."""
        if self.closed:
            return
        self.closed = True
        agen, self._keeper = self._keeper, None
        if agen is not None:  # finish it here, so its finalizer hook never runs on a dead loop
            try:
                agen.aclose().send(None)
            except (StopIteration, RuntimeError):
                pass
        self._finalizer.detach()
        ring = self.ring
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(ring.efd)
            except Exception:  # noqa: BLE001 - a loop being torn down; the ring goes anyway
                pass
        self._drain()
        ring.close()


def _finalize(host: LoopHost) -> None:  # the backstop: the loop went without shutdown_asyncgens()
    host.close()


def _finish_keeper(agen: Any) -> None:
    # The keeper was dropped unfinished (its host was collected): run its finally here.
    try:
        agen.aclose().send(None)
    except (StopIteration, RuntimeError):
        pass


async def _keeper(host: LoopHost):
    try:
        yield
    finally:
        host.close()


# -- which host serves this thread's running loop ------------------------------------------
_hosts_lock = threading.Lock()
_hosts: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopHost]" = weakref.WeakKeyDictionary()
_cache = threading.local()  # (loop weakref, host) of the last lookup on this thread


def host_for(loop: asyncio.AbstractEventLoop) -> LoopHost:
    """The host of *loop* (the running loop of this thread), created on first use."""
    c = getattr(_cache, "pair", None)
    if c is not None and c[0]() is loop:
        return c[1]
    with _hosts_lock:
        host = _hosts.get(loop)
        if host is None:
            host = _hosts[loop] = LoopHost(loop)
    _cache.pair = (host._loop_ref, host)  # weakly: the cache must not keep a loop alive
    return host


def hosted_ring_open(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether *loop* has a tinycoro ring open (for tests and diagnostics)."""
    with _hosts_lock:
        host = _hosts.get(loop)
    return host is not None and not host.ring.closed


# -- asyncio tasks as waiters of tinycoro primitives ----------------------------------------
_NOTHING = object()
_waiters_lock = threading.Lock()
_waiters: "weakref.WeakKeyDictionary[asyncio.Task, AioWaiter]" = weakref.WeakKeyDictionary()
_waiter_ids = itertools.count(1)


class AioWaiter:
    """An asyncio task's stand-in on tinycoro waiter lists and as a Mutex owner.

    ``wake(value)`` may be called from any thread (a primitive's baton pass on a tinycoro
    context); the value reaches the asyncio task through its loop. A wake may arrive before the
    task has parked (between the primitive's enqueue and the park): it is kept for the park.
    """

    __slots__ = ("id", "name", "_loop", "_thread", "_fut", "_early", "_ticket", "__weakref__")

    def __init__(self, task: asyncio.Task, loop: asyncio.AbstractEventLoop) -> None:
        self.id = f"aio-{next(_waiter_ids)}"
        self.name = task.get_name()
        self._loop = loop
        self._thread = threading.get_ident()
        self._fut: asyncio.Future | None = None
        self._early: Any = _NOTHING
        self._ticket: Park | None = None

    def __repr__(self) -> str:
        return f"<asyncio task {self.name!r}>"

    def wake(self, value: Any = None) -> None:
        if threading.get_ident() == self._thread:
            self._deliver(value)
            return
        try:
            self._loop.call_soon_threadsafe(self._deliver, value)
        except RuntimeError:
            # The loop is closed: nobody will take what was handed over; give it back.
            ticket = self._ticket
            if ticket is not None and ticket.undo is not None:
                ticket.undo(value)

    def interrupt(self, exc: BaseException) -> bool:  # own thread; as Task.interrupt queues one
        """Ask again for a cancel an await absorbed (a FIFO read's bytes are its result)."""
        return isinstance(exc, _CancelledError) and _recancel()

    def _deliver(self, value: Any) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            self._fut = None
            fut.set_result(value)
        else:
            self._early = value

    def _take_early(self) -> Any:
        v, self._early = self._early, _NOTHING
        return v

    def park(self, ticket: Park) -> Generator[Any, Any, Any]:
        v = self._take_early()
        if v is not _NOTHING:
            return v
        self._ticket = ticket
        try:
            fut = self._fut = self._loop.create_future()
            try:
                return (yield from fut)
            except _CancelledError:
                v = self._outcome(fut)
                if v is _NOTHING:
                    if ticket.abort():
                        raise  # off the list: nothing was handed over
                    v = yield from self._wait_for_wake()  # popped: the wake is on its way
                return _handed_over(ticket, v)
        finally:
            self._ticket = None

    def _outcome(self, fut: asyncio.Future) -> Any:
        """After a cancel: the value a wake delivered, on *fut* or kept early, if any."""
        self._fut = None
        if fut.done() and not fut.cancelled():  # woken, then cancelled before it ran again
            return fut.result()
        return self._take_early()

    def _wait_for_wake(self) -> Generator[Any, Any, Any]:
        """Wait for a wake that is certain to come, whatever cancellations arrive meanwhile."""
        v = self._take_early()
        if v is not _NOTHING:
            return v
        while True:
            fut = self._fut = self._loop.create_future()
            try:
                return (yield from fut)
            except _CancelledError:
                v = self._outcome(fut)
                if v is not _NOTHING:
                    return v


def _handed_over(ticket: Park, value: Any) -> Any:
    """A wake delivered to a task being cancelled: give back what it carries if the primitive
    can take it back (raise CancelledError), else keep it and cancel at the next await."""
    if ticket.undo is not None:
        ticket.undo(value)
        raise _CancelledError()
    _recancel()
    return value


def _recancel() -> bool:
    """Ask again for the cancel this await absorbed, for the task's next await (False: no task).
    ``uncancel()`` first keeps the task's count of cancel requests, so that ``asyncio.timeout``
    still recognises its own cancellation at the next await."""
    task = _current_task()
    if task is None:
        return False
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()
    task.cancel()
    return True


def current_waiter() -> AioWaiter | None:
    """The stand-in of the asyncio task running on this thread (traps' ``waiter`` hook)."""
    loop = _get_running_loop()
    if loop is None:
        return None
    task = _current_task(loop)
    if task is None:
        return None
    with _waiters_lock:
        w = _waiters.get(task)
        if w is None:
            w = _waiters[task] = AioWaiter(task, loop)
    return w


# -- the driver ------------------------------------------------------------------------------
def _perform(op: Op, loop: asyncio.AbstractEventLoop) -> Generator[Any, Any, int]:
    host = host_for(loop)
    p = host.start(op, loop)
    try:
        return (yield from p.fut)
    except _CancelledError:
        if p.done:  # the CQE is in: the operation is over
            if p.res < 0:
                raise
            _recancel()
            return p.res
        host.cancel_op(op)
        while not p.done:  # the buffer stays with the op until the kernel is done with it
            p.fut = loop.create_future()
            try:
                yield from p.fut
            except _CancelledError:
                pass
        if p.res < 0:
            # Any failure of an op we asked the kernel to cancel is the cancel's doing
            # (-ECANCELED, or -EINTR from an operation blocked in the kernel), as in the engine.
            raise
        _recancel()  # it completed anyway: keep the result (bytes, a descriptor); cancel later
        return p.res


def _join(task: Task, loop: asyncio.AbstractEventLoop) -> Generator[Any, Any, None]:
    fut = loop.create_future()

    def done(_t: Task) -> None:  # on the task's context (or here, if it is already done)
        try:
            loop.call_soon_threadsafe(_resolve, fut)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    task.add_done_callback(done)
    try:
        yield from fut
    except _CancelledError:
        if task.remove_done_callback(done) or task.cancelled():
            raise  # still running (it goes on, unwaited for here), or nothing to hand over
        _recancel()  # its outcome was handed over: kept (a failure dropped is never retrieved)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _sleep(trap: Sleep, loop: asyncio.AbstractEventLoop) -> Generator[Any, Any, None]:
    """``tc.sleep`` in an asyncio task: until ``trap.when`` (``perf_counter`` at the call), on
    the loop's timers; again if the loop woke it early (uvloop counts whole milliseconds)."""
    while True:  # on a timer even if already due: ending in this step passes earlier deadlines
        fut = loop.create_future()
        handle = loop.call_later(min(max(trap.when - _perf(), 0.0), _LONGEST_WAIT), _resolve, fut)
        try:
            yield from fut
        finally:  # after a cancel: nothing of it stays in the loop
            handle.cancel()
        if trap.when <= _perf():
            return


def _yield() -> Generator[None, None, None]:
    yield  # a bare yield is asyncio's sleep(0): back of the loop's ready queue


def run_trap(trap: Any) -> Generator[Any, Any, Any] | None:
    """The traps' ``run`` hook: a generator serving *trap* on this thread's running asyncio
    loop, or None when no asyncio loop runs here (the caller then raises its usual error)."""
    loop = _get_running_loop()
    if loop is None:
        return None
    kind = type(trap)
    if isinstance(trap, Op):  # any kind of op (a stream's recv, a file's read)
        return _perform(trap, loop)
    if kind is Park:
        w = current_waiter()
        if w is None:  # a loop callback, not a task: nothing can be woken
            return None
        return w.park(trap)
    if trap is YIELD:
        return _yield()
    if kind is Sleep:
        return _sleep(trap, loop)
    if kind is Task:
        return _join(trap, loop)
    return None


def current_owner() -> LoopHost | None:
    """The host of this thread's running loop (traps' ``owner`` hook)."""
    loop = _get_running_loop()
    return host_for(loop) if loop is not None else None


def install() -> None:
    install_driver(run_trap, current_waiter, current_owner, refusing)
