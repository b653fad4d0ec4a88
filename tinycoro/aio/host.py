"""tinycoro awaitables inside a running asyncio event loop: the driver installed into the traps.

Where no tinycoro engine runs on the thread, a trap is handed to :func:`run_trap`, which turns it
into asyncio futures of the running loop:

* an :class:`~tinycoro.core.traps.Op` goes to a ring *hosted* by that loop (:class:`LoopHost`):
  one io_uring instance per loop, created on first use, whose eventfd is a reader of the loop
  (``loop.add_reader``), so completions are reaped in a loop callback. SQEs prepared during one
  loop iteration are submitted together by one ``call_soon`` flush;
* a :class:`~tinycoro.core.traps.Park` waits on the asyncio task's stand-in, an
  :class:`AioWaiter`, whose ``_wake`` (called by a primitive on any thread) reaches the loop
  through ``loop.call_soon_threadsafe``;
* ``YIELD`` is a bare ``yield`` (asyncio's ``sleep(0)``), and ``await task`` of a tinycoro Task
  waits for its done callback.

Cancellation keeps the tinycoro rules. Cancelling the asyncio task while an operation is in the
kernel submits an io_uring cancel and waits for the operation's completion before
``CancelledError`` is raised, so no buffer is freed while the kernel may still write into it
(DESIGN rule 8). A parked waiter cancelled after a primitive handed it something (a lock, a
permit) gives it back through the ticket's ``undo``. When the kernel operation or the wake had
already produced a result that nothing can give back (bytes received, an Event's value), the
result is returned and the cancellation is requested again, to be raised at the task's next
await: the way a tinycoro task sees it, and nothing is lost.

Lifetime: the hosted ring closes when the loop closes. ``asyncio.run`` and ``uvloop.run`` call
``loop.shutdown_asyncgens()`` before ``loop.close()``; the host registers a one-step async
generator with the loop, whose ``finally`` closes the ring then. A ``weakref.finalize`` on the
loop is the backstop for loops closed without that call.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import sys
import threading
import weakref
from typing import Any, Generator

from .. import uring
from ..core.task import Task
from ..core.traps import YIELD, Op, Park, install_driver
from .guard import refusing

HOST_RING_ENTRIES = 256
_SKIP_UD = uring.SKIP_UD  # user_data of our own cancel SQEs (and of a failed prep's NOP)
_get_running_loop = asyncio._get_running_loop  # the C accessor asyncio itself uses; no raise
_current_task = asyncio.current_task
_CancelledError = asyncio.CancelledError


class _Pending:
    """One operation in the hosted ring: the op (which keeps its buffers alive), the future its
    awaiting task waits on, and the result once the CQE has arrived."""

    __slots__ = ("op", "fut", "res", "done")

    def __init__(self, op: Op, fut: asyncio.Future) -> None:
        self.op = op
        self.fut = fut
        self.res = 0
        self.done = False


class LoopHost:
    """The tinycoro side of one asyncio loop: its hosted ring and the ops in flight on it.

    Lives on the loop's thread (DESIGN rule 2: only that thread touches the ring). Holds the
    loop weakly, so the finalizer on the loop can run once the loop is gone. Once closed (the
    loop shut down its async generators, or was collected) it stays closed: an operation
    started on that loop afterwards fails with RuntimeError instead of opening a ring that
    nothing would close.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop_ref = weakref.ref(loop)
        self.ring: uring.Ring | None = None
        self.closed = False
        self.inflight: dict[int, _Pending] = {}
        self._ids = itertools.count(_SKIP_UD + 1)
        self._flush_scheduled = False
        self._cqes: list[tuple[int, int]] = []
        self._keeper = None
        self._finalizer = weakref.finalize(loop, _finalize, self)

    # -- the ring ------------------------------------------------------------------------------
    def _open_ring(self, loop: asyncio.AbstractEventLoop) -> uring.Ring:
        if self.closed:
            raise RuntimeError("tinycoro's ring for this event loop is closed (the loop is closing)")
        ring = uring.Ring(HOST_RING_ENTRIES)
        try:
            ring.notify_on(True)  # the loop waits on the eventfd: every CQE must signal it
            loop.add_reader(ring.efd, self._on_readable)
        except BaseException:
            ring.close()
            raise
        self.ring = ring
        self._register_keeper()
        return ring

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
        ring = self.ring or self._open_ring(loop)
        ud = next(self._ids)
        try:
            self._queue(ring, op.prep, op.args, ud)
        except BaseException:
            # A bad argument: the ring queued a NOP with SKIP_UD in the SQE's place (rule 11),
            # whose completion nothing waits for; it still has to reach the kernel.
            self._schedule_flush(loop)
            raise
        op.ud = ud
        op.cancelling = False  # an op may be reused once its CQE is in (net.Stream does)
        p = _Pending(op, loop.create_future())
        self.inflight[ud] = p
        self._schedule_flush(loop)
        return p

    def _queue(self, ring: uring.Ring, prep: Any, args: tuple, ud: int) -> None:
        """``ring.queue``; when the kernel takes no more SQEs (its CQ overflowed), reap, then
        queue again (rule 5), as the engine does."""
        while True:
            try:
                return ring.queue(prep, args, ud)
            except uring.RingBusy:
                self._reap()

    # -- the engine-like seam closing.PendingOps uses (DESIGN rule 10) -----------------------
    def call_soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread; any thread."""
        loop = self._loop_ref()
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: its ops were drained already
            pass

    def cancel_op(self, op: Op) -> None:
        """Loop thread: cancel *op* in the kernel if it is in flight here (a resource closed
        under it). Its awaiting task gets -ECANCELED as its result, not a CancelledError."""
        p = self.inflight.get(op.ud) if op.ud else None
        loop = self._loop_ref()
        if p is not None and p.op is op and loop is not None:
            self.cancel(p, loop)

    def cancel(self, p: _Pending, loop: asyncio.AbstractEventLoop) -> None:
        op = p.op
        if p.done or op.cancelling or self.ring is None:
            return
        op.cancelling = True
        self._queue(self.ring, uring.prep_cancel, (op.ud, 0), _SKIP_UD)
        self._schedule_flush(loop)

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        ring = self.ring
        if ring is None or ring.closed:
            return
        try:
            ring.submit()
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.EAGAIN):
                raise
            # The kernel wants completions reaped first: reap, then try again (rule 5).
            self._reap()
            loop = self._loop_ref()
            if loop is not None:
                self._schedule_flush(loop)

    def _on_readable(self) -> None:
        ring = self.ring
        if ring is None or ring.closed:
            return
        try:
            os.eventfd_read(ring.efd)
        except (BlockingIOError, InterruptedError):
            pass
        self._reap()

    def _reap(self) -> None:
        out = self._cqes
        self.ring.reap(out)
        inflight = self.inflight
        for ud, res in out:
            p = inflight.pop(ud, None)
            if p is None:
                continue
            p.res = res
            p.done = True
            fut = p.fut
            if not fut.done():
                fut.set_result(res)
        out.clear()

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
        ring, self.ring = self.ring, None
        if ring is None:
            return
        loop = self._loop_ref()
        if loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(ring.efd)
            except Exception:  # noqa: BLE001 - a loop being torn down; the ring goes anyway
                pass
        _drain(ring, self.inflight)
        ring.close()


def _drain(ring: uring.Ring, inflight: dict[int, _Pending]) -> None:
    """Cancel every op still in the kernel and block until all their CQEs are in (rule 8)."""
    for p in inflight.values():
        if not p.op.cancelling:
            p.op.cancelling = True
            ring.queue(uring.prep_cancel, (p.op.ud, 0), _SKIP_UD)
    out: list[tuple[int, int]] = []
    while True:
        ring.submit()
        ring.reap(out)
        for ud, res in out:
            p = inflight.pop(ud, None)
            if p is not None:
                p.res, p.done = res, True
                if res >= 0 and p.op.returns_fd:  # nobody is left to take the descriptor
                    try:
                        os.close(res)
                    except OSError:
                        pass
        out.clear()
        if not inflight:
            return
        if not ring.cq_ready():
            try:
                os.eventfd_read(ring.efd)  # notifications are on: every CQE writes it
            except InterruptedError:
                pass


def _finalize(host: LoopHost) -> None:
    # weakref.finalize backstop: the loop was collected without shutdown_asyncgens().
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
    return host is not None and host.ring is not None


# -- asyncio tasks as waiters of tinycoro primitives ----------------------------------------
_NOTHING = object()
_waiters_lock = threading.Lock()
_waiters: "weakref.WeakKeyDictionary[asyncio.Task, AioWaiter]" = weakref.WeakKeyDictionary()
_waiter_ids = itertools.count(1)


class AioWaiter:
    """An asyncio task's stand-in on tinycoro waiter lists and as a Mutex owner.

    ``_wake(value)`` may be called from any thread (a primitive's baton pass on a tinycoro
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

    def _wake(self, value: Any = None) -> None:
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


def _recancel() -> None:
    """Ask again for the cancellation that this await absorbed, for the task's next await.

    ``uncancel()`` first keeps the task's count of cancel requests as it was, so that
    ``asyncio.timeout`` still recognises its own cancellation at the next await.
    """
    task = _current_task()
    if task is None:
        return
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()
    task.cancel()


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
        host.cancel(p, loop)
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

    task._add_done_callback(done)
    try:
        yield from fut
    except _CancelledError:
        task._unjoin(done)
        raise


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


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
    if kind is Task:
        return _join(trap, loop)
    return None


def current_owner() -> LoopHost | None:
    """The host of this thread's running loop (traps' ``owner`` hook)."""
    loop = _get_running_loop()
    return host_for(loop) if loop is not None else None


def install() -> None:
    install_driver(run_trap, current_waiter, current_owner, refusing)
