"""The only places where a coroutine yields to its engine (cf. trio's ``_traps``, curio's traps).
Size: one compiled module, so that the awaitables share its typed steps and the budget's seam.

A tinycoro coroutine suspends by yielding one of three things:

* an :class:`Op`: "prepare this SQE on my context's ring, resume me with the CQE's ``res``".
  The op is itself the awaitable (rule 14) and, inside a task, its own iterator: ``await
  op`` yields the op and turns the result into the caller's answer, so an I/O call costs the
  awaiting coroutine one resumption, not a chain of wrapper coroutines (compiled, not even a
  generator: C slots, core/iterslots);
* a :class:`Park`: "I have put myself on a waiter list; resume me when someone calls
  ``task.wake(value)``"; ``abort`` lets the engine take the task back off the list on cancel;
* ``YIELD``: "put me at the back of the ready queue".

Everything else (sleep, files, sockets, every primitive) is built from these. An operation that
completes without suspending passes one gate, :func:`consume_budget` (rule 16: it spends the
engine's cooperative budget, and at zero, or with an interrupt due, yields once), or, on a hot
path that has asked the engine's ``spend_inline`` itself, awaits the gate only when that said
no: so a cancel or a timeout due is delivered at every operation. Each trap checks
that it runs inside a tinycoro task, so awaiting one elsewhere fails at the call with a message
that says why, instead of confusing the foreign event loop.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable, ContextManager, Generator

from . import iterslots
from .errors import oserror
from .iterslots import END
from .local import _local, running_engine, running_task


class _CoroutineProtocol:
    """``send``/``throw``/``close`` over the object's own ``__await__`` generator, so that an
    operation is also a ``collections.abc.Coroutine``: what ``asyncio.create_task`` and
    ``tc.spawn`` take (``asyncio.create_task(stream.recv())``). ``await op``, the hot path,
    does not go through these."""

    __slots__ = ()
    _gen: Any

    def send(self, value: Any) -> Any:
        gen = self._gen
        if gen is None:
            gen = self._gen = self.__await__()  # type: ignore[attr-defined]
        try:
            return gen.send(value)
        except BaseException:
            self._gen = None  # finished (or failed): the op may be awaited again
            raise

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        gen = self._gen
        if gen is None:
            gen = self._gen = self.__await__()  # type: ignore[attr-defined]
        try:
            if val is None and tb is None:
                return gen.throw(typ)
            return gen.throw(typ, val, tb)
        except BaseException:
            self._gen = None
            raise

    def close(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            gen.close()


# Where an op's await is (Op._state): the steps of an await that __await__ returned the op
# itself for (inside a task), as a generator's frame would hold them
_IDLE = 0  # not awaited through its steps (a generator's await, or none)
_HANDED = 1  # __await__ returned the op: its first step yields it
_WAITING = 2  # yielded to the engine: the next step takes the result


class Op(_CoroutineProtocol):
    """One io_uring operation: ``prep(sqe, *args)`` fills its SQE.

    The op keeps ``args`` (buffers, paths, timespecs, socket addresses) alive until its CQE has
    arrived, even when the task that started it was cancelled meanwhile (rule 8); the
    engine holds the op in its in-flight table until then.

    ``eager``: the engine hands its SQE to the kernel as the step that started it ends, not
    with the rest of the turn's batch (an O_DIRECT read or write: the device idles until it
    arrives).

    ``returns_fd``: a successful result is a new descriptor (accept, openat). If the op
    completes after its task was abandoned (shutdown), the engine closes that descriptor
    instead of leaking it.

    Inside a task, ``await op`` iterates the op itself (``_state`` holds where the await is,
    ``_res`` its result until the await takes it): compiled, C slots (core/iterslots) with
    :data:`~tinycoro.core.iterslots.END` as their end, since the op yields itself; a
    generator and, on 3.12+, a ``StopIteration`` per result cost ~3,400 instructions more
    per op on 3.13 than on 3.11. A subclass whose ``__await__`` is its own generator inherits
    those slots and ``send``: its steps, never handed the op, drive that generator, as the
    coroutine protocol did (:meth:`_by_hand`).
    """

    __slots__ = ("prep", "args", "task", "ud", "cancelling", "what", "returns_fd", "eager",
                 "_gen", "_state", "_res")

    def __init__(self, prep: Callable[..., None], *args: Any, returns_fd: bool = False) -> None:
        self._fill(prep, args, returns_fd)

    def _fill(self, prep: Callable[..., None], args: tuple, returns_fd: bool = False) -> None:
        """What ``__init__`` does, with the prep's arguments as one tuple. The constructors of
        subclasses call this (one C call when compiled): ``Op.__init__(self, prep, *args)``
        would pack and parse the arguments again at each level, on every operation."""
        self.prep = prep
        self.args = args
        self.task: Any = None  # its waiter: a Task, or what a ring owner resumes (core.ring)
        self.ud = 0
        self.cancelling = False
        self.what: Any = None  # what it names: a path or peer (errors, waits_on), a sleep's deadline
        self.returns_fd = returns_fd
        self.eager = False
        self._gen = None  # only for the coroutine protocol (see _by_hand)
        self._state = _IDLE
        self._res: Any = None

    def completion(self, res: int, data: Any, more: bool) -> None:
        """One CQE of an op that completes through its own code (a
        :class:`~tinycoro.core.ring.MultiOp`: a stream's multishot recv, a split read's back
        half), which overrides this. Declared here so that the ring's owner calls it as a C
        method where compiled (traps.pxd): by name, each was a type lookup and an argument
        parse, ~250 instructions per CQE on 3.13. An op the ring delivers to a task never
        gets one."""
        raise NotImplementedError(f"{type(self).__name__} is not a MultiOp")

    def describe(self) -> str:
        """What the operation does, in plain words ("recv from 127.0.0.1:5000", "sleep 2 ms
        (1.3 ms left)"), built from its prep name, args and ``what`` when a snapshot asks
        (``TaskInfo.waits_on``); never on the hot path."""
        from .waits import op_words  # only snapshots need it

        # The three in one C call: a thread switch cannot fall between them, so under the
        # GIL a reader (RingOwner.describe_inflight) never mixes two uses of a reused op.
        prep, args, what = _FIELDS(self)
        return op_words(prep, args, what)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._kind()} ud={self.ud}>"

    def _kind(self) -> str:
        return getattr(self.prep, "__name__", "op").replace("io_uring_prep_", "")

    def __await__(self) -> Generator[Any, Any, Any]:
        """Run the op on the current context's ring; its result, ``OSError`` if < 0.

        Inside a task, the op itself: its steps (:func:`_op_step`) yield it, then end with the
        result. Outside any task, or awaited again while an await of it runs, a generator of
        its own (:func:`_op_await`). Subclasses (a stream's recv, a resource's operations)
        override this to add what their call needs (close-tracking, turning the count into
        bytes) in this same frame.
        """
        # running_engine(): compiled, a C read of the thread-local (traps.pxd), where
        # ``_local.engine`` was a descriptor lookup on every await of an op
        if self._state != _IDLE or running_engine() is None:
            return _op_await(self)
        self._state = _HANDED
        return self  # type: ignore[return-value]  # an iterator will do

    # The coroutine protocol (``await`` takes the C slots that iterslots installs; these
    # serve a call by name, and the interpreted source).
    def __next__(self) -> Any:
        return iterslots.advance(self, None, _op_step, op_result, END)

    def send(self, value: Any) -> Any:
        return iterslots.advance(self, value, _op_step, op_result, END)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise the exception at the await: where the op waits on the engine (its result,
        when it comes, is the engine's to drop), or before its first step; into the
        generator of an await driven by hand."""
        if self._gen is None:
            self._state = _IDLE
            raise thrown(typ, val, tb)
        return _CoroutineProtocol.throw(self, typ, val, tb)

    def close(self) -> None:
        self._state = _IDLE
        _CoroutineProtocol.close(self)

    def _by_hand(self) -> Any:
        """The generator of an await that did not come through ``__await__`` (``send`` or
        ``next`` by name, as ``asyncio.create_task(op)`` drives a coroutine; every step of a
        subclass whose ``__await__`` is a generator of its own), made at its first step as
        ``await`` would make it and kept; None when ``__await__`` returned the op itself, whose
        own steps then run the await (its state says where they are)."""
        gen = self._gen
        if gen is None:
            it = self.__await__()
            if it is self:
                return None
            gen = self._gen = it
        return gen

    def _drive(self, gen: Any, value: Any) -> Any:
        """A step of the generator :meth:`_by_hand` keeps: what it yields, or END once it
        returned (its value in ``_res``), as the coroutine protocol's ``send`` did."""
        try:
            return gen.send(value)
        except StopIteration as e:
            self._gen = None  # finished: the op may be awaited again
            self._res = e.value
            return END
        except BaseException:
            self._gen = None
            raise


_FIELDS = operator.attrgetter("prep", "args", "what")  # Op.describe


def _op_await(op: Op) -> Generator[Any, Any, Any]:
    """An op's await as a generator: outside any task (the driver's ``run_outside``), and for
    an await of an op whose other await has not ended."""
    if _local.engine is None:
        res = yield from run_outside(op)
    else:
        res = yield op
    if res < 0:
        raise oserror(res, op.what)
    return res


def _op_step(op: Any, value: Any) -> Any:
    """An :class:`Op`'s next step (compiled, a C function its C slots run): the op to yield,
    then, resumed with the CQE's result, END (the result kept for :func:`op_result`), or the
    ``OSError`` of a negative one."""
    o = op
    state = o._state
    if state == _WAITING:
        o._state = _IDLE
        if value < 0:
            raise oserror(value, o.what)
        o._res = value
        return END
    if state == _HANDED:
        o._state = _WAITING
        return o
    gen = o._by_hand()
    if gen is None:
        return _op_step(o, value)
    return o._drive(gen, value)


def op_result(op: Any) -> Any:
    """The result of an await that its steps ended with END: what its last step kept in
    ``_res``, taken off the op (which then holds no reference to it). Compiled, a C function
    shared with the subclasses whose C slots end the same way (io/ops' ``RingRead``)."""
    o = op
    res = o._res
    o._res = None
    return res


iterslots.install(Op, _op_step, op_result, _op_step, END)


class _Raw(_CoroutineProtocol):
    """``await perform_raw(op)``: the op's result as is, negative errno included."""

    __slots__ = ("op", "_gen")

    def __init__(self, op: Op) -> None:
        self.op = op
        self._gen = None

    def __await__(self) -> Generator[Any, Any, int]:
        op = self.op
        if _local.engine is None:
            return (yield from run_outside(op))
        return (yield op)


class Ready:
    """An awaitable whose result is known at once (an empty send, say): awaiting it does not
    suspend, but it is an operation that completed at once like any other, so it passes
    :func:`consume_budget` (rule 16). Lets a call that returns an op return this instead
    where no op is needed. Stateless (sendall's answer for b"" is shared): ``__await__``
    passes the gate and returns the object, an iterator that ends at its first step, or the
    gate's :class:`_Spend`, carrying the value. Compiled, C slots (core/iterslots): no
    generator per await, and on 3.12+ no ``StopIteration`` made per result."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, Any, Any]:
        task = running_task()
        if task is None or _spend(task):
            return self
        return _spend_then(self.value)  # type: ignore[return-value]  # an iterator will do

    def __iter__(self) -> "Ready":
        return self

    # The coroutine protocol without state: each step ends the await (compiled, the C
    # slots and ``send`` that iterslots installs).
    def __next__(self) -> Any:
        return iterslots.advance(self, None, _ready_step, _ready_result)

    def send(self, value: Any) -> Any:
        return iterslots.advance(self, value, _ready_step, _ready_result)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise thrown(typ, val, tb)

    def close(self) -> None:
        pass


def _ready_step(ready: Any, value: Any) -> Any:  # (compiled, C functions Ready's slots run)
    return ready  # over at once


def _ready_result(ready: Any) -> Any:
    r = ready
    return r.value


iterslots.install(Ready, _ready_step, _ready_result, _ready_step)


class Done:
    """The awaitable of something already finished, with None as its result: awaiting it
    returns at its first step, without suspending, and makes no generator (``__await__``
    returns the object itself). Stateless: :data:`DONE` is shared. An uncontended lock
    returns it (tinycoro.sync), and so does :func:`checkpoint_if_cancelled` with nothing due.

    It also answers the coroutine protocol (``send``/``throw``/``close``) for code that drives
    an awaitable's ``__await__()`` by hand."""

    __slots__ = ()

    def __await__(self) -> "Done":
        return self

    def __iter__(self) -> "Done":
        return self

    def __next__(self) -> None:
        raise StopIteration  # compiled: NULL without an exception, i.e. "returned None"

    def send(self, _value: Any) -> None:
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> None:
        raise thrown(typ, val, tb)

    def close(self) -> None:
        pass


DONE = Done()


def thrown(typ: Any, val: Any, tb: Any) -> BaseException:
    """The exception that ``throw(typ, val, tb)`` raises (either calling convention)."""
    exc = val if val is not None else typ
    if isinstance(exc, type):
        exc = exc()
    return exc.with_traceback(tb) if tb is not None else exc


class Park:
    """A parked task's ticket. ``abort()`` runs on the task's own context when the task is
    cancelled while parked; it returns True if it took the waiter off its list (so no wake will
    come) and False if a wake is already on its way. ``undo(value)`` gives back what a wake
    handed over (a lock, a permit) when the task turns out to have been cancelled meanwhile.
    ``what`` names the thing waited on, for deadlock reports and statistics."""

    __slots__ = ("abort", "undo", "what")

    def __init__(
        self,
        abort: Callable[[], bool],
        what: object,
        undo: Callable[[Any], None] | None = None,
    ) -> None:
        self.abort = abort
        self.undo = undo
        self.what = what

    def __await__(self) -> Generator[Any, Any, Any]:
        """Park: suspend until woken; the value the waker passed to ``task.wake``."""
        if _local.engine is None:
            return (yield from run_outside(self))
        return (yield self)


class _Yield:
    __slots__ = ()

    def __repr__(self) -> str:
        return "YIELD"

    def __await__(self) -> Generator[Any, Any, None]:
        """Go to the back of the ready queue: an iterator over ``(YIELD,)``, which yields this
        trap once, not a generator. The engine resumes the task with None (the iterator then
        ends, and the await with it) or throws an interrupt, which an iterator without
        ``throw`` lets the awaiting coroutine raise right there. A generator per yield cost
        its creation and a C generator's resume and teardown, a seventh of a task switch
        (callgrind, 2-task yield ping-pong)."""
        if _local.engine is None:
            return run_outside(self)
        # An iterator is all that ``await`` needs; typing's Awaitable asks for a Generator.
        return iter(_YIELD_ONCE)  # type: ignore[return-value]


YIELD = _Yield()
_YIELD_ONCE = (YIELD,)

_OUTSIDE = (
    "{} awaited outside a tinycoro task: run it with tc.run(...), Scheduler.submit(...) or "
    "tc.spawn(...), or %load_ext tinycoro in a notebook"
)


# The seam for awaits where no engine runs on the thread (an asyncio task, say): a *driver*
# installed by a layer above (tinycoro.aio) runs the trap there. ``run(trap)`` returns a
# generator to ``yield from`` (it yields that event loop's own futures), or None when it cannot
# serve this thread; ``waiter()`` returns the task-like object that stands for the caller on a
# primitive's waiter list (a Waker: ``wake(value)``, ``id``, ``name``), or None. Only the
# ``_local.engine is None`` branches below consult it: the engine's hot path is unchanged.
# ``owner()`` returns what stands for the engine there: an object with ``call_soon(fn, *args)``
# (any thread) and ``cancel_op(op)`` (its own thread), as closing a resource needs (rule 10).
# ``context_thread()`` returns the context manager each context thread runs its engine in: the
# driver's layer makes asyncio code awaited inside a task fail there with the TypeError that
# names ``tc.aio`` (docs/design.md, API contract), instead of asyncio's "no running event loop".
_driver_run: Callable[[Any], Any] | None = None
_driver_waiter: Callable[[], Any] | None = None
_driver_owner: Callable[[], Any] | None = None
context_thread: Callable[[], ContextManager[Any]] = contextlib.nullcontext


def install_driver(
    run: Callable[[Any], Any],
    waiter: Callable[[], Any],
    owner: Callable[[], Any],
    thread: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
) -> None:
    """Install the driver for traps awaited outside any engine, and the context threads'
    context manager (see above)."""
    global _driver_run, _driver_waiter, _driver_owner, context_thread
    _driver_run, _driver_waiter, _driver_owner = run, waiter, owner
    context_thread = thread


def foreign_waiter() -> Any:
    """The caller's stand-in for waiter lists when it is not a tinycoro task, else None."""
    w = _driver_waiter
    return w() if w is not None else None


def foreign_owner() -> Any:
    """Where the caller's operations run when no engine runs on this thread, else None."""
    o = _driver_owner
    return o() if o is not None else None


def run_outside(trap: Any) -> Generator[Any, Any, Any]:
    """The generator that runs *trap* where no engine runs on this thread (an asyncio task),
    through the installed driver; RuntimeError naming what was awaited when none serves it.
    Awaitables built on the traps (the I/O ops) ``yield from`` it on their foreign path."""
    run = _driver_run
    gen = run(trap) if run is not None else None
    if gen is None:
        raise RuntimeError(_OUTSIDE.format(_describe(trap)))
    return gen


def _describe(trap: Any) -> str:
    """What was awaited, for the error message (built only on the error path)."""
    if isinstance(trap, Park):
        return f"waiting on {trap.what!r}"
    if trap is YIELD:
        return "tc.yield_now()"
    return repr(trap)


# What an I/O call may return instead of a coroutine; tc.spawn() and Scheduler.submit() take
# them too, wrapped by await_op (``tc.spawn(stream.recv())``).
OP_AWAITABLES = (Op, _Raw, Ready, Park, _Yield)


async def await_op(aw: Any) -> Any:
    """A coroutine that awaits *aw*, one of OP_AWAITABLES (for spawn and submit)."""
    return await aw


def ops_waited_by(tasks: list, ops: list) -> list:
    """For each of *tasks*, the op of *ops* whose ``task`` it is, or None: how another thread
    finds the I/O a task waits on from a copy of its engine's in-flight table (core/readers.py)
    without reading ``Task._waiting``, which the owner replaces at every suspension. One pass
    over each list: the tasks by address, then each op's ``task`` looked up there. Compiled,
    ``id(op.task)`` passes the field's pointer to ``id`` and takes no reference, so a field
    the owner rewrites (an op reused for another task) is never a pointer this thread
    increments; the ops and tasks themselves are held by the caller's copies."""
    where = {id(t): i for i, t in enumerate(tasks)}
    out: list = [None] * len(tasks)
    for op in ops:
        i = where.get(id(op.task))
        if i is not None and out[i] is None:  # the first op found, as a scan would
            out[i] = op
    return out


def perform_raw(op: Op) -> _Raw:
    """``await perform_raw(op)``: run *op* like ``await op``, but the result is the negative
    errno instead of an exception (a timeout's ``-ETIME``, a close's outcome)."""
    return _Raw(op)


def park(ticket: Park) -> Park:
    """``await park(ticket)``: suspend until woken; return the value the waker passed to
    ``task.wake``. The ticket is itself the awaitable (rule 14: traps are ``__await__``
    methods, which compile; never ``@types.coroutine`` generators)."""
    return ticket


def yield_now() -> _Yield:
    """``await yield_now()``: go to the back of the ready queue, letting every other ready
    task run first."""
    return YIELD


def _no_budget(_task: Any) -> bool:
    return True


# The budget's decision, ``core.engine.spend_inline(task)`` (rule 16), handed over by the
# engine module as it loads (install_budget): the engine imports this layer, not the other way
# round. Called directly, it costs half what ``engine.inline_ok()`` did (a bound method and a
# second read of the running task), which was ~1,350 instructions per join of a finished task.
_spend: Callable[[Any], bool] = _no_budget


def install_budget(spend: Callable[[Any], bool]) -> None:
    """The engine's seam: *spend(task)* decides whether *task* may complete one more operation
    without suspending, and counts it (``core.engine.spend_inline``)."""
    global _spend
    _spend = spend


class _Spend:
    """What :func:`consume_budget` returns when the budget is spent or an interrupt is due
    (and a :class:`Ready`'s await then): yield once to the engine (which raises a due
    interrupt right there, at the await), then, resumed in a new step, count the operation
    in that step's budget and end with ``value``. An iterator: no frame, and the interrupt is
    raised in the awaiting coroutine's own frame. Compiled, C slots (core/iterslots) and no
    type call (:func:`_spend_then`): a type call, ``__init__`` and a Python-level ``__next__``
    were most of the gate's own cost per yield. It keeps no task: the resumed step reads it."""

    __slots__ = ("value", "yielded")
    value: Any
    yielded: bool

    def __await__(self) -> Generator[Any, Any, Any]:
        # An iterator is all that ``await`` needs; typing's Awaitable asks for a Generator.
        return self  # type: ignore[return-value]

    def __iter__(self) -> "_Spend":
        return self

    def __next__(self) -> Any:  # compiled, the C slots that iterslots installs run instead
        return iterslots.advance(self, None, _spend_step, _spend_result)


def _spend_then(value: Any) -> _Spend:
    """A :class:`_Spend` ending with *value* (compiled, a C call: no type call)."""
    s = _Spend.__new__(_Spend)
    s.value = value
    s.yielded = False
    return s


def _spend_step(spend: Any, value: Any) -> Any:
    """``YIELD`` first; resumed, the operation counted in the new step's budget, and the
    :class:`_Spend` itself (its await is over)."""
    s = spend
    if not s.yielded:
        s.yielded = True
        return YIELD
    task = running_task()
    if task is not None:  # (None only for an iterator driven by hand outside any task)
        _spend(task)  # a new step: the operation counts in its budget
    return s


def _spend_result(spend: Any) -> Any:
    s = spend  # the value it carries: None for the gate, a Ready's value
    value = s.value
    s.value = None
    return value


iterslots.install(_Spend, _spend_step, _spend_result, _spend_step)


def consume_budget() -> "Done | _Spend":
    """``await consume_budget()``: the gate of every operation that completes without
    suspending (rule 16; tokio has the same name). It spends one unit of the engine's
    cooperative budget (``spend_inline``) and returns at once, or, when the step's budget
    is spent or a cancel or an expired timeout waits for the task's next await, yields once to
    the engine first: a due interrupt is raised there, before the operation starts, and a
    task whose operations never wait still lets its context's other tasks run every
    ``INLINE_BUDGET`` of them. Outside a tinycoro task (an asyncio task) there is no budget."""
    task = running_task()  # compiled, a C call (the descriptor read was ~140 instructions)
    if task is None or _spend(task):
        return DONE
    return _spend_then(None)


def checkpoint_if_cancelled() -> "_Yield | Done":
    """Take a cancel or an expired timeout that is on its way to this task here, by yielding
    once; return at once when none is (trio has the same name). For code that must not start
    something it could not then finish, such as encrypting a TLS record."""
    task = _local.task
    if task is not None and task._interrupts is not None:
        return YIELD
    return DONE


def join_outside(task: Any):
    """Wait for *task* to finish where no tinycoro task runs (``await task`` in asyncio)."""
    return run_outside(task)
