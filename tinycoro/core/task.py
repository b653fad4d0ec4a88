"""Task: a native coroutine bound to one context for life (rule 1)."""

from __future__ import annotations

import contextvars
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Generator, Protocol, runtime_checkable

from . import fence
from .errors import Cancelled
from .local import _local
from .readers import waiting_of
from .traps import Park, consume_budget, join_outside

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine

log = logging.getLogger("tinycoro")

_ids = itertools.count(1)
_perf = time.perf_counter

# A task's outcome is decided on its own context while other threads register interest in it
# (a join, a done callback) or queue interrupts for it. Each task's lock orders those few
# attribute writes; it is never held across an await. The locks are striped by task id (a
# task takes one of _STRIPES at creation), so tasks on different contexts rarely share one and
# creating a task allocates no lock.
_STRIPES = 64
_locks = tuple(threading.Lock() for _ in range(_STRIPES))
_Context = contextvars.Context
_copy_context = contextvars.copy_context
# the joiner list of a task nobody has joined yet (Task._joiners): shared, never appended to
_NO_JOINERS: list = []

PENDING, DONE = "pending", "done"


@runtime_checkable
class Waker(Protocol):
    """What stands on a primitive's waiter list: something the primitive can wake.

    A tinycoro :class:`Task` is one; so is an asyncio task's stand-in (``tc.aio``'s
    ``AioWaiter``), which reaches its loop through ``call_soon_threadsafe``. ``wake(value)``
    is called at most once per park, from any thread, by whoever took the waiter off the list
    (baton passing, rule 6); *value* is what the waiter's ``park`` returns. ``id`` and
    ``name`` name it in reprs and deadlock reports. ``isinstance(x, Waker)`` checks that
    those three are there (not their types).
    """

    @property
    def id(self) -> object: ...

    @property
    def name(self) -> str: ...

    def wake(self, value: Any = None) -> None: ...


def describe(task: "Waker | None") -> str:
    """A task's short name, ``<Task 3 'name'>`` (or ``None``). Unlike ``repr(task)`` it does
    not name what the task waits on, which may be a primitive whose repr names its owner task:
    with a lock-order deadlock, that would recurse."""
    if task is None:
        return "None"
    return f"<Task {task.id} {task.name!r}>"


class Task:
    """A coroutine scheduled on one context. ``await task`` joins it.

    Only the owning context steps the coroutine. Other threads reach the task through
    :meth:`wake` (rescheduling it on its own context), :meth:`interrupt` and :meth:`cancel`.

    A Task is a :class:`Waker`: the low-level methods (:meth:`wake`, :meth:`interrupt`,
    :meth:`withdraw`, :meth:`add_done_callback`, :meth:`remove_done_callback`) are what
    primitives and integrations outside the core build on (docs/lowlevel.md,
    :mod:`tinycoro.lowlevel`); application code uses ``await``, ``cancel`` and ``result``.
    """

    __slots__ = (
        "_coro",
        "_coro_send",
        "id",
        "name",
        "_engine",
        "_state",
        "_resume_value",
        "_resume_exc",
        "_result",
        "_exception",
        "_waiting",
        "_interrupts",
        "_joiners",
        "_retrieved",
        "_born",
        "_lock",
        "_context",
        "__weakref__",
    )

    def __init__(
        self,
        coro: Any,
        engine: "Engine",
        name: str | None = None,
        context: contextvars.Context | None = None,
        on_done: Callable[["Task"], None] | None = None,
    ) -> None:
        """*context*: the ``contextvars.Context`` every step runs in (default: a copy of the
        caller's, rule 9). *on_done*: a done callback registered before the task can
        run, so its outcome is observed from the start (never reported as unobserved)."""
        self._coro = coro
        # Its coroutine's send, bound by the engine at the first step and kept: the engine
        # resumes the task with it at every step, and binding it each time cost a method
        # object per step. Not bound here: a task that finishes in its first step (most
        # spawned helpers) gains nothing from it, and a bound method per task not yet
        # started is one more object for the garbage collector to walk. None once done.
        self._coro_send: Any = None
        self.id = i = next(_ids)
        self._lock = _locks[i % _STRIPES]
        self._context = _copy_context() if context is None else context
        if not name:
            name = getattr(coro, "__qualname__", None) or type(coro).__name__
        self.name: str = name
        self._engine = engine
        self._state = PENDING
        self._resume_value: Any = None  # sent into the coroutine at its next step
        self._resume_exc: BaseException | None = None  # thrown into it instead, if set
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiting: Any = None  # the Op or Park it is suspended on, for cancel and reports
        # Interrupts requested and not yet delivered (cancel, a timeout's signal, a notebook's
        # KeyboardInterrupt), oldest first; None when there are none (the common case, and the
        # one the engine tests on every trap). One is delivered per await.
        self._interrupts: list[BaseException] | None = None
        # Tasks parked in our await, and done callbacks; None once done (nothing may join).
        # _NO_JOINERS (shared, never appended to) until the first: most tasks (a connection's
        # handler) are never joined, and a list each was one more object per open connection
        # for every full collection of the cyclic collector to walk.
        self._joiners: list[Task | Callable[[Task], None]] | None = (
            _NO_JOINERS if on_done is None else [on_done]
        )
        self._retrieved = False
        self._born = _perf()

    # -- public API ------------------------------------------------------------------------
    @property
    def context(self) -> int | None:
        """Id of the context this task runs on (None for a notebook cell's own engine)."""
        return self._engine.id

    def done(self) -> bool:
        return self._state is DONE

    def result(self) -> Any:
        """The return value; re-raises the task's exception; RuntimeError if not done yet."""
        if self._state is not DONE:
            raise RuntimeError(f"{self!r} has not finished yet")
        if fence.FREE_THREADED:
            # DONE was read unlocked: without the GIL, the outcome _finish wrote before it
            # is seen once the lock it set DONE under is taken (docs/design.md,
            # "Synchronisation, with and without the GIL"); compiled, nothing under the GIL
            self._lock.acquire()
            self._lock.release()
        if self._exception is not None:
            if self._retrieved:  # perhaps reported as unawaited: it is awaited now after all
                self._engine.failure_taken(self.id)
            self._retrieved = True
            raise self._exception
        self._retrieved = True
        return self._result

    def exception(self) -> BaseException | None:
        if self._state is not DONE:
            raise RuntimeError(f"{self!r} has not finished yet")
        if fence.FREE_THREADED:  # as in result()
            self._lock.acquire()
            self._lock.release()
        self._retrieved = True
        return self._exception


    def cancelled(self) -> bool:
        return self._state is DONE and isinstance(self._exception, Cancelled)

    def cancel(self) -> bool:
        """Ask for ``tc.Cancelled`` to be raised at the task's pending await. Any thread.

        Returns False if the task has already finished. The in-flight operation, if any, is
        cancelled in the kernel; its buffer stays alive until its completion arrives.
        """
        # Named: whoever awaits it later sees which task it was, not a bare "Cancelled: ".
        return self.interrupt(Cancelled(f"task {self.name!r} was cancelled"))

    def __await__(self) -> Generator[Any, Any, Any]:
        if self._state is not DONE:
            me = _local.task
            if me is None:  # an asyncio task, say: the installed driver waits (traps seam)
                yield from join_outside(self)
                return self.result()
            if me is self:
                raise RuntimeError(f"{self!r} cannot await itself")
            with self._lock:
                joiners = self._joiners  # None once DONE (set under this lock)
                if joiners is not None:
                    self._join(joiners, me)
            if joiners is not None:
                yield from Park(lambda: self.remove_done_callback(me), self).__await__()
                return self.result()
        # A join of a task that is done completes at once: an operation like any other (rule
        # 16), so a loop of them lets the context's other tasks run, and a cancel or timeout
        # due is raised here.
        yield from consume_budget()
        return self.result()

    def __repr__(self) -> str:
        state = self._state
        w = self.waiting_on() if state is not DONE else None  # a repr may be taken anywhere
        if w is not None:
            what = getattr(w, "what", None) or w
            # A task waiting on a task is named briefly: a join cycle must not recurse.
            state = f"waiting on {describe(what) if type(what) is Task else repr(what)}"
        return f"<Task {self.id} {self.name!r} on context {self._engine.id}: {state}>"

    # -- low level (tinycoro.lowlevel; docs/lowlevel.md) ----------------------------------------
    @property
    def engine(self) -> "Engine":
        """The engine this task belongs to for life (rule 1): where its deadlines are kept
        and its calls run (``engine.call_soon``)."""
        return self._engine

    def waiting_on(self) -> Any:
        """The ``Op`` or ``Park`` the task is suspended on; None while it is ready or
        running (read from any thread: a snapshot)."""
        if _local.engine is self._engine:  # the owner's thread: its own field, as it stands
            return self._waiting
        # Another thread reads what the owner published in its tables, never the field it
        # replaces at every suspension (core/readers.py, waiting_of).
        return waiting_of(self._engine, self)

    def abandoning(self) -> bool:
        """True while this task's engine abandons it (a shutdown closes its coroutine, rule
        13): an await can no longer suspend, so a ``finally`` block that releases a resource
        must do it synchronously (``tinycoro.closing.close_fd``)."""
        return self._engine.abandoning

    def wake(self, value: Any = None) -> None:
        """Resume this parked task with *value* (what its ``park`` returns), on its own context.
        Any thread; at most once per park, by whoever took the task off its waiter list.

        The :class:`Waker` protocol's one method: a primitive wakes whatever stands on its
        waiter list this way, a Task or another event loop's stand-in (``tc.aio``).
        """
        self._resume_value = value
        engine = self._engine  # typed where compiled (task.pxd): push is then a C call
        engine.push(self)

    def interrupt(self, exc: BaseException) -> bool:
        """Queue *exc* to be raised at the task's pending await; any thread. False if the task
        has finished. ``cancel()`` is ``interrupt(tc.Cancelled())``.

        The pending io_uring operation is cancelled in the kernel (its buffer stays alive
        until its completion arrives), or the task is taken off the waiter list it is parked
        on. Interrupts queue up instead of replacing each other: a ``cancel()`` that arrives
        while a timeout's signal is pending is delivered at the next await after it. A second
        plain cancel while one is pending is a no-op.
        """
        with self._lock:
            if self._state is DONE:
                return False
            pending = self._interrupts
            if pending is None:
                self._interrupts = [exc]
            elif type(exc) is Cancelled and any(type(e) is Cancelled for e in pending):
                return True
            else:
                pending.append(exc)
                return True
        self._engine.call_soon(self._engine.deliver_cancel, self)
        return True

    def withdraw(self, exc: BaseException) -> bool:
        """Take back *exc*, queued by :meth:`interrupt`, if it is still pending (identity);
        True if it was.

        Owner thread only (a scope withdraws its own signal as it exits): so between the
        engine's ``abort()`` of a park and its ``_take_interrupt()`` nothing can withdraw.
        """
        with self._lock:
            pending = self._interrupts
            if pending:
                for i, e in enumerate(pending):
                    if e is exc:
                        del pending[i]
                        if not pending:
                            self._interrupts = None
                        return True
        return False

    def _take_interrupt(self) -> BaseException | None:
        """The oldest pending interrupt, removed from the queue (owner thread)."""
        with self._lock:
            pending = self._interrupts
            if not pending:
                return None
            exc = pending.pop(0)
            if not pending:
                self._interrupts = None
            return exc

    def remove_done_callback(self, fn: "Task | Callable[[Task], None]") -> bool:
        """Unregister *fn* (added by :meth:`add_done_callback`); True if it was still there."""
        with self._lock:
            joiners = self._joiners
            if joiners is not None and fn in joiners:
                joiners.remove(fn)
                return True
        return False

    def add_done_callback(self, fn: Callable[["Task"], None]) -> None:
        """Call ``fn(task)`` when the task is done (on the task's context, right after its
        last step), or now if it is done already. *fn* must not block. If it raises, the
        error is reported with the task and the other callbacks and joiners still run
        (rule 17), as asyncio reports a raising callback through its exception handler."""
        with self._lock:
            joiners = self._joiners  # None once DONE (set under this lock)
            if joiners is not None:
                self._join(joiners, fn)
        if joiners is None:
            self._run_callback(fn)

    def _join(self, joiners: list, joiner: Any) -> None:
        """Add *joiner* to *joiners*, the task's list read under its lock (held here): the
        task's own list made now if it had none yet."""
        if joiners is _NO_JOINERS:
            self._joiners = [joiner]
        else:
            joiners.append(joiner)

    def _run_callback(self, fn: Callable[["Task"], None]) -> None:
        """``fn(self)``; what it raises is reported, not passed on (rule 17): a callback runs
        inside the runtime's own frames, where a raise would end the context. As in asyncio,
        KeyboardInterrupt and SystemExit are the exceptions: they go on."""
        try:
            fn(self)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - reported with the task; the others run on
            self._engine.report_callback_error(self, fn, e)

    def _finish(self, result: Any, exc: BaseException | None) -> bool:
        """Runtime internal: record the outcome and wake every joiner on its own context (owner
        thread only). Returns whether anything (a joiner, a done callback) was waiting for it."""
        self._result = result
        self._exception = exc
        self._coro = None
        self._coro_send = None
        self._waiting = None
        with self._lock:
            self._state = DONE
            joiners, self._joiners = self._joiners, None
        assert joiners is not None  # a task finishes once
        escaped: BaseException | None = None
        for j in joiners:
            if isinstance(j, Task):
                j.wake(None)
            else:
                try:
                    self._run_callback(j)
                except BaseException as e:  # KeyboardInterrupt, SystemExit: after the others
                    if escaped is None:
                        escaped = e
        if escaped is not None:
            raise escaped
        return bool(joiners)

    def __del__(self) -> None:
        exc = self._exception
        if self._state is DONE and exc is not None and not self._retrieved:
            if not isinstance(exc, Cancelled):
                # No traceback formatting here: __del__ may run inside another ast.parse (GC
                # during pytest's assertion rewriting, say), and CPython 3.11's traceback
                # module parses source, which then fails with "AST constructor recursion depth
                # mismatch". The innermost frame still says where it failed.
                tb = exc.__traceback__
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                where = (
                    f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}"
                    if tb is not None
                    else ""
                )
                log.error("exception in %r was never retrieved: %r%s", self, exc, where)


def wake_waiter(waiter: Waker, value: Any = None) -> None:
    """``waiter.wake(value)`` for whatever stands on a waiter list: compiled, a C call for a
    :class:`Task` (task.pxd; a module that cimports this makes it without a method lookup,
    ~300 instructions on each completion that wakes a task), by name for another
    :class:`Waker` (``tc.aio``'s stand-in)."""
    if type(waiter) is Task:
        task = waiter
        task.wake(value)
    else:
        waiter.wake(value)
