"""Scopes: ``timeout`` and the base of ``TaskGroup``, a region of one task's code that another
thread may interrupt.

The interrupt is ``task.interrupt(signal)`` with the scope's own
:class:`~tinycoro.sync._interrupts.ScopeSignal` (a ``tc.Cancelled`` subclass, so cleanup written
for cancellation runs); the engine delivers it at the task's pending await, cancelling an
in-flight io_uring op in the kernel or aborting a parked wait. The scope's ``__aexit__`` turns
its own signal (recognised by identity) back into what it means: ``TimeoutError``, or the
child's failure.

The race that matters: the interrupt may be fired *just as the body finishes*. The firing thread
and ``__aexit__`` decide under the scope's lock: either the scope is still armed, and the firing
thread sets the task's pending interrupt inside that critical section; or ``__aexit__`` got there
first and the scope will never fire. So when ``__aexit__`` finds the scope fired, the signal is
already either delivered (it is the exception passing through) or still pending on the task, and
a pending one is withdrawn (``task.withdraw``). Nothing can leak past the block.

The core queues interrupts (one is delivered per await), so none is ever dropped there. Code that
must keep awaiting after an interrupt (``Condition.wait`` re-taking its mutex, ``when_all``
waiting for the children it cancelled) merges the ones that arrive meanwhile with ``keep_one``; a
scope whose signal lost such a merge marks itself dropped, and whenever a scope exits it
re-delivers the outermost dropped signal of the scopes enclosing it, so e.g. an outer timeout
that fired while an inner one was being handled still takes effect.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from .core.checks import check_seconds
from .core.local import thread_state
from .core.task import Task
from .sync._interrupts import ScopeSignal

__all__ = ["IDLE", "Scope", "timeout"]


IDLE, _ARMED, _FIRED, _EXITED = "idle", "armed", "fired", "exited"
_NEVER = 1e15  # seconds: a timeout this long (~30 million years) is no deadline at all
_perf = time.perf_counter

# The innermost active scope of each task. Only a task's own thread reads or writes its entry
# (scopes are entered and exited by the task itself), so plain dict operations suffice.
_innermost: dict[Task, "Scope"] = {}


class Scope:
    """Base of the scopes: enter/fire/exit bookkeeping, described in the module docstring."""

    __slots__ = ("_lock", "_state", "_task", "_signal", "_outer", "_dropped", "_fired")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = IDLE
        self._task: Task | None = None
        self._signal: ScopeSignal | None = None
        self._outer: Scope | None = None
        self._dropped = False
        self._fired = False

    def _enter(self) -> Task:
        task = thread_state.task
        if task is None:
            raise RuntimeError(f"async with {type(self).__name__}: only inside a tinycoro task")
        if self._state is not IDLE:
            raise RuntimeError(f"{self!r} cannot be entered twice; make a new one")
        self._task = task
        self._signal = ScopeSignal(self)
        self._outer = _innermost.get(task)
        _innermost[task] = self
        self._state = _ARMED
        return task

    def _fire(self) -> None:
        """Interrupt the body if it is still running; any thread."""
        with self._lock:
            if self._state is not _ARMED:
                return
            self._state = _FIRED
            self._fired = True
            task, signal = self._task, self._signal
            assert task is not None and signal is not None  # set by _enter, before _ARMED
            task.interrupt(signal)

    def _signal_dropped(self) -> None:
        """Our delivered signal was swallowed by a merge (``keep_one``); re-deliver later."""
        with self._lock:
            if self._state is _FIRED:
                self._dropped = True

    def _exit(self, exc: BaseException | None) -> bool:
        """Close the scope (owner thread); True if *exc* is this scope's own signal."""
        with self._lock:
            fired = self._state is _FIRED
            self._state = _EXITED
        task, signal = self._task, self._signal
        assert task is not None and signal is not None  # only an entered scope is exited
        outer = self._outer
        if outer is None:
            _innermost.pop(task, None)
        else:
            _innermost[task] = outer
        if fired:
            task.withdraw(signal)  # fired as the body finished: never leak it
        # Re-deliver the outermost enclosing signal that was dropped, if any.
        target = None
        s = outer
        while s is not None:
            if s._dropped and s._state is _FIRED:
                target = s
            s = s._outer
        if target is not None:
            with target._lock:
                if target._state is _FIRED:
                    target._dropped = False
                    assert target._signal is not None  # a fired scope was entered
                    task.interrupt(target._signal)
        return exc is not None and exc is signal

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._state}>"


class timeout(Scope):
    """``async with tc.timeout(seconds): ...`` raises ``TimeoutError`` if the block runs longer.

    The pending operation is cancelled (an io_uring op in the kernel, a primitive wait by
    aborting it) and unwinding code sees ``tc.Cancelled``; the block's exit turns that into
    ``TimeoutError``. ``seconds`` of ``None`` or ``inf`` means no limit; ``<= 0`` expires at the
    first await. If the deadline passes just as the block finishes, the block completes
    normally and nothing is delivered later (``expired()`` then tells it fired).

    The deadline is kept by the task's own engine (a heap of deadlines per context, as trio
    keeps one per run): each turn, and at the bounded sleep point, the engine fires the scopes
    whose time has passed, on the task's own thread. An expired deadline is queued as an
    interrupt at once, so it is delivered at the very next await.
    """

    __slots__ = ("_seconds", "_entry")

    def __init__(self, seconds: float | None) -> None:
        super().__init__()
        self._seconds = check_seconds("seconds", seconds, allow_none=True)
        self._entry: list | None = None

    async def __aenter__(self) -> "timeout":
        task = self._enter()
        s = self._seconds
        if s is None or s >= _NEVER:
            return self
        if s <= 0:
            self._fire()  # delivered at the first await, every time
        else:
            self._entry = task.engine.deadlines.add(_perf() + s, self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ours = self._exit(exc)
        entry = self._entry
        if entry is not None:
            self._entry = None
            assert self._task is not None  # a deadline entry exists only once entered
            self._task.engine.deadlines.remove(entry)
        if ours:
            # One TimeoutError where the body was interrupted, as asyncio.timeout and
            # trio.fail_after show it: the signal's traceback (through the await it cut
            # short), and the signal itself, an internal Cancelled, kept as the context but
            # not shown ("from None").
            error = TimeoutError(f"timed out after {self._seconds} s")
            assert exc is not None  # ours: the signal is what passes through
            raise error.with_traceback(exc.__traceback__) from None

    def expired(self) -> bool:
        """True if the deadline fired while the block ran (whether or not it interrupted it)."""
        return self._fired

    def __repr__(self) -> str:
        return f"<timeout {self._seconds} s {self._state}>"
