"""RemoteTask: the client's handle on a task that runs on an engine."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import pickle
import sys
import threading
from functools import partial
from typing import Any, Callable, Generator, Protocol

from ipyparallel.error import EngineError, RemoteError

from .. import lowlevel
from ..core import Cancelled, current_context
from ..sync import Event
from . import homes
from .errors import EngineLost, RemoteTraceback
from .messages import CANCELLED, ERROR, OK, OK_PACKED
from .shipped import readable

_PENDING, _DONE = "pending", "done"
_submit_order = itertools.count()  # for listings only: a tie from a free-threaded race is harmless


class TaskHost(Protocol):
    """What a :class:`RemoteTask` asks of the cluster that submitted it (``api.Cluster`` is
    one): the seam that keeps this module from importing the cluster's."""

    def cancel_remote(self, task: "RemoteTask") -> None:
        """Ask the task's engine to cancel it; never waits."""

    def forget(self, task: "RemoteTask") -> None:
        """The task has ended: route nothing more to it."""

    def send_queued(self) -> None:
        """Send the submits still queued, on this thread (about to block on a result)."""

    def engine_name(self, eid: int) -> str:
        """``engine 1 (host:pid)``, also for an engine lost since."""

    def engine_lost(self, eid: int, why: str) -> None:
        """A reply says engine *eid* died (*why*): it counts as lost from now on."""


class RemoteTask:
    """A task submitted to an engine (``Cluster.submit``).

    ``await t`` works in a tinycoro task, a notebook cell and asyncio (it waits on a
    ``tc.Event``, which all three can await); ``t.result(timeout)`` blocks plain Python.
    A remote exception is re-raised here as itself, with the remote traceback as its
    ``__cause__`` (a :class:`RemoteTraceback`); ``EngineLost`` if the engine died first;
    ``tc.Cancelled`` after ``cancel()``. A failure nothing here awaits is reported on stderr in
    the context that submitted it, i.e. in the submitting notebook cell (rule 9). Whether
    anything awaits it is asked where the submitter runs, once its current step is over
    (:func:`after_submitting_step`): an outcome can come back while the step that submitted
    the task is still on its way to awaiting it. Plain Python has no step: there, as asyncio
    does for a future's exception never retrieved, the failure is reported when the handle is
    dropped with it untaken.
    """

    def __init__(self, cluster: TaskHost, engine: int, token: str, name: str,
                 context: contextvars.Context,
                 after_step: Callable[[Callable[[], None]], None] | None = None) -> None:
        self._cluster = cluster
        self.engine: int = engine  # the engine's id, the key of Cluster.stats()
        self.name = name
        self.msg_id: str | None = None  # of the apply request that started it (and others)
        self.remote_id: int | None = None  # its task id on the engine, once it started
        self._token = token
        self._seq = next(_submit_order)  # submit order, for listings
        self._ctx = context
        self._lock = threading.Lock()
        self._state = _PENDING
        self._value: Any = None
        self._exc: BaseException | None = None
        self._started = False  # the engine has started it (its apply request replied)
        self._cancel_requested = False
        self._observed = False  # a caller (map, serve) takes care of the outcome
        self._after_step = after_step  # None: plain Python, reported when dropped untaken
        self._untaken: BaseException | None = None  # the failure __del__ reports, if any
        self._retrieved = False  # its outcome was returned or raised to a caller
        self._asked = False  # whether anything awaits a failure was asked (once)
        self._waiters = 0  # awaits and result() calls in progress
        self._callbacks: list[Callable[["RemoteTask"], None]] = []
        self._event = Event()
        self._finished = threading.Event()

    # -- public API --------------------------------------------------------------------------
    def done(self) -> bool:
        return self._state is _DONE

    def running(self) -> bool:
        """True once its engine has said it started the task, until it ends (as
        ``concurrent.futures.Future.running``). An outcome can arrive before that word: a task
        that ended so soon is done and was never seen running."""
        return self._started and self._state is not _DONE

    def cancel(self) -> bool:
        """Ask for ``tc.Cancelled`` at the remote task's pending await (its ``finally`` blocks
        run there). False if it has already ended. Any thread; does not wait."""
        with self._lock:
            if self._state is _DONE:
                return False
            first = not self._cancel_requested
            self._cancel_requested = True
            send = first and self._started
        if send:  # otherwise sent when the engine says it has started the task
            self._cluster.cancel_remote(self)
        return True

    def result(self, timeout: float | None = None) -> Any:
        """Block until the task ends; its value, or raise its exception. TimeoutError after
        *timeout* seconds (the task keeps running). Not from inside a tinycoro task: await."""
        if current_context() is not None:
            raise RuntimeError("RemoteTask.result() would block a tinycoro context; await it")
        lowlevel.before_blocking()  # a cell's step may have spawned what the task needs
        if self.msg_id is None:  # not sent yet: its row of submits leaves now, in one batch
            self._cluster.send_queued()
        with self._lock:
            self._waiters += 1
        try:
            if not self._finished.wait(timeout):
                raise TimeoutError(f"{self!r} did not finish within {timeout} s")
        finally:
            with self._lock:
                self._waiters -= 1
        return self._outcome()

    def __await__(self) -> Generator[Any, Any, Any]:
        with self._lock:
            self._waiters += 1
        try:
            yield from self._event.wait().__await__()
        finally:
            with self._lock:
                self._waiters -= 1
        return self._outcome()

    def __repr__(self) -> str:
        return f"<RemoteTask {self.name!r} engine={self.engine} {self._state}>"

    @property
    def stage(self) -> str:
        """How far it got, in words: "waiting to be sent", "sent" (its engine has not said it
        started it yet), "running" or "done"."""
        if self._state is _DONE:
            return "done"
        if self._started:
            return "running"
        return "sent" if self.msg_id is not None else "waiting to be sent"

    # -- driven by the cluster (the client's IO thread, or the engine watcher) ----------------
    def _outcome(self) -> Any:
        self._retrieved = True
        if self._exc is not None:
            raise self._exc
        return self._value

    def _add_done_callback(self, fn: Callable[["RemoteTask"], None]) -> None:
        with self._lock:
            if self._state is not _DONE:
                self._callbacks.append(fn)
                return
        fn(self)

    def _acked(self, reply: Any) -> None:
        """The engine's answer for this task in its request's reply: started (its task id),
        the error outcome of why it did not start (this task alone), or an exception (the
        request as a whole failed)."""
        if isinstance(reply, tuple):  # messages.error_outcome: raised as its own type with
            self._finish(None, self._exception_from(reply))  # the remote traceback, as a body's
            return
        # The engine died under the request: ipyparallel says so with an EngineError, or, when
        # the controller still held the request, a RemoteError that names one.
        # The cluster hears of it first: whoever sees this EngineLost finds the engine gone.
        if isinstance(reply, EngineError) or (
            isinstance(reply, RemoteError) and reply.ename == "EngineError"
        ):
            self._cluster.engine_lost(self.engine, "it died under the request")
            self._finish(None, EngineLost(
                f"{self._where()} was lost before it said it started {self.name!r}"))
            return
        if isinstance(reply, BaseException):  # e.g. the function could not be unpickled there
            self._finish(None, reply)
            return
        with self._lock:
            self._started = True
            self.remote_id = reply if isinstance(reply, int) else None
            send = self._cancel_requested and self._state is not _DONE
        if send:
            self._cluster.cancel_remote(self)

    def _resolve(self, outcome: tuple) -> None:
        """The outcome the engine published when the task ended."""
        kind = outcome[0]
        if kind == OK:
            self._finish(outcome[1], None)
        elif kind == OK_PACKED:
            self._finish(pickle.loads(outcome[1]), None)
        elif kind == CANCELLED:
            self._finish(None, Cancelled())
        elif kind == ERROR:
            self._finish(None, self._exception_from(outcome))
        else:  # pragma: no cover - a newer engine side
            self._finish(None, RuntimeError(f"unknown outcome {kind!r} from {self._where()}"))

    def _finish(self, value: Any, exc: BaseException | None) -> bool:
        """Record the outcome (the first one wins) and wake every waiter."""
        with self._lock:
            if self._state is _DONE:
                return False
            self._value, self._exc = value, exc
            self._state = _DONE
            unawaited = self._waiters == 0 and not self._observed
            callbacks, self._callbacks = self._callbacks, []
            # used once, here: it holds the submitting task (or loop), which a handle kept
            # in a variable must not keep
            after_step, self._after_step = self._after_step, _now
        self._finished.set()
        self._event.set()
        # What its children on the engine print from now on still comes home (homes.route):
        # remembered before the cluster forgets the token, so no message falls between.
        homes.remember(self._token, self._ctx)
        self._cluster.forget(self)
        for fn in callbacks:
            fn(self)
        if exc is not None and unawaited and not isinstance(exc, Cancelled):
            if after_step is None:
                self._untaken = exc
            else:
                after_step(partial(self._report_unawaited, exc))
        return True

    def __del__(self) -> None:
        # A plain-Python submitter's failure: taken by result() any time before the handle
        # goes, reported if it goes untaken (_report_unawaited asks whether it was taken).
        exc = getattr(self, "_untaken", None)  # None too if __init__ did not get that far
        if exc is not None:
            self._report_unawaited(exc)

    def _report_unawaited(self, exc: BaseException) -> None:
        """Once the submitting step is over: report *exc* if nothing awaits the task or has
        taken its outcome meanwhile. Once, from whichever thread gets here first."""
        with self._lock:
            if self._asked or self._waiters or self._retrieved:
                return
            self._asked = True
        self._in_submitter(self._report, exc)

    def _in_submitter(self, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` in the context captured at submit (which holds, in a notebook,
        the submitting cell's parent header). A copy each time: a Context can be entered by one
        thread at a time, and the IO thread and the engine watcher may both get here."""
        self._ctx.copy().run(fn, *args)

    def _where(self) -> str:
        return self._cluster.engine_name(self.engine)

    def _lost(self, why: str) -> EngineLost:
        """Its engine was lost (*why*): the error says how far the task got, as far as we know."""
        if self._started:
            when = f"while running {self.name!r}"
        elif self.msg_id is None:  # still queued here: it never reached the engine
            when = f"before {self.name!r} could start"
        else:
            when = f"before it said it started {self.name!r}"
        return EngineLost(f"{self._where()} was lost ({why}) {when}")

    def _exception_from(self, outcome: tuple) -> BaseException:
        _, data, ename, evalue, text = outcome
        exc: Any = None
        if data is not None:
            try:
                exc = pickle.loads(data)
            except Exception:  # noqa: BLE001 - e.g. its class does not exist here
                exc = None
        if not isinstance(exc, BaseException):
            exc = RemoteError(ename, evalue, text)
        exc.__cause__ = RemoteTraceback(readable(text), f"{self.name} failed on {self._where()}")
        return exc

    def _report(self, exc: BaseException) -> None:
        """A failure nothing awaited: say so on stderr, in the submitter's context (so a
        notebook shows it in the cell that submitted the task)."""
        cause = exc.__cause__
        detail = cause.text if isinstance(cause, RemoteTraceback) else f"{type(exc).__name__}: {exc}\n"
        try:
            sys.stderr.write(
                f"tinycoro: remote task {self.name!r} on {self._where()} failed and nothing "
                f"awaited it:\n{detail}"
            )
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - a closed stderr must not break the client's IO thread
            pass


def _now(fn: Callable[[], None]) -> None:
    fn()


def after_submitting_step() -> Callable[[Callable[[], None]], None] | None:
    """Where the caller (about to submit) runs, a way to call a function there once the
    caller's current step is over. For the report of a failure nothing awaited: the outcome
    can come back on the client's IO thread while the step that submitted the task is still
    on its way to awaiting it, so the question is asked in the submitter's own order.

    * A tinycoro task (a notebook cell's guest engine included): on its context, at the
      start of the context's next turn; at once if the task has ended (a guest engine that
      ran a finished cell may not turn again soon; it runs what is queued as it returns).
    * asyncio code (and a notebook's plain cells, which run in the kernel's loop): on the
      loop, two passes on, after the first step of any task the submitting step made
      (``asyncio.wait_for`` and ``gather`` await in a task of their own). A closed loop: now.
    * Plain Python: None, for "when the handle is dropped with the failure untaken": the
      line that submitted may take the outcome with result() any time later.
    """
    engine = lowlevel.current_engine()
    task = lowlevel.current_task()
    if engine is not None and task is not None:
        def on_context(fn: Callable[[], None]) -> None:
            engine.call_soon(fn)
            if task.done():  # ended before the call could be queued behind its last step
                fn()
        return on_context
    loop = asyncio._get_running_loop()
    if loop is not None:
        def on_loop(fn: Callable[[], None]) -> None:
            try:
                loop.call_soon_threadsafe(loop.call_soon, fn)
            except RuntimeError:  # the loop is closed
                fn()
        return on_loop
    return None
