"""Scheduler: N contexts (one thread + one engine each), dispatch, and the stop protocol.
Size: dispatch, the stop protocol and the lifecycle (start, loop, shutdown) read and write the
same lock, flags and token; split, each part would need the others' state.

The stop protocol (docs/design.md, stop protocol, from tinyCoro): each context has a stop flag, 1 while it has
work and 0 once it reached its terminal state; the scheduler's stop token counts the contexts
whose flag is 1. Both change only under ``_lock``:

* an idle context (no ready task, nothing in the kernel, nobody parked) clears its flag once
  and decrements the token;
* a submit from another thread to a context whose flag is 0 sets it and increments the token
  *before* the task becomes visible to that context, in the same critical section as the push,
  so the context cannot go idle between the two;
* a task admitted now and pushed at the end of the spawning step's turn (rule 18) is
  *starting* toward its context from its admission to its push: the flag is set at
  admission, and a context with a task starting toward it does not clear its flag, so the
  token cannot reach 0 in between, whoever the spawner is (a guest engine has no flag);
* when the token reaches 0 in ``loop()`` mode, nothing anywhere can create work any more: the
  scheduler stops accepting, asks every context to stop, and ``loop()`` joins them.

A context's own thread spawning onto itself needs no lock: its flag is necessarily 1 while it
runs a task.
"""

from __future__ import annotations

import collections.abc
import contextvars
import inspect
import itertools
import logging
import threading
import time
import types
from typing import Any, Callable, Coroutine

from . import ki, readers, traps
from .checks import DISPATCH, check_contexts, check_dispatch, check_int, check_seconds
from .engine import Engine
from .errors import Cancelled, DeadlockError
from .local import _local
from .stats import ContextStats, FailureInfo, SchedulerStats, TaskInfo
from .task import DONE, Task, describe

log = logging.getLogger("tinycoro")

__all__ = ["DISPATCH", "Scheduler", "before_blocking"]  # DISPATCH: for the notebook layer

_CoroutineType = types.CoroutineType
_Coroutine = collections.abc.Coroutine
_sched_ids = itertools.count()
INTERRUPT_UNWIND = 1.0  # seconds cancelled tasks get to unwind after Ctrl-C, then are closed
WARN_EVERY = 10.0  # seconds of deadlock state between two warnings when no timeout is given


def _check_coro(coro: Any, where: str) -> Any:
    """*coro* if it is a coroutine; an operation's awaitable (``stream.recv()`` returns one,
    rule 14) wrapped in a coroutine that awaits it; TypeError for anything else."""
    if isinstance(coro, traps.OP_AWAITABLES):
        return traps.await_op(coro)
    # collections.abc, not inspect: a coroutine compiled by Cython is one (rule 14)
    if not isinstance(coro, _Coroutine):
        hint = ""
        if inspect.iscoroutinefunction(coro):
            hint = f"; call it first: {where}({getattr(coro, '__name__', 'fn')}())"
        raise TypeError(f"{where}() takes a coroutine object, got {coro!r}{hint}")
    return coro


def before_blocking() -> None:
    """Call before blocking the calling thread inside a step (a notebook cell may call
    ``run_sync``, ``stop()`` or a blocking ``result()``): the tasks that step spawned onto
    contexts are pushed now, since the end of its turn, where they would be (rule 18), cannot
    come while the thread waits. Nothing outside a step, or when the step deferred nothing."""
    engine = _local.engine
    while engine is not None and engine.deferred:  # (a deferred call may defer another)
        _call_each(engine.take_deferred())


def _call_each(calls: list[tuple[Callable[..., Any], tuple]]) -> None:
    for fn, args in calls:
        fn(*args)


def _check_timeout(name: str, value: Any) -> float | None:
    """A timeout in seconds: None (no limit) or a number >= 0."""
    value = check_seconds(name, value, allow_none=True)
    if value is not None and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


class Scheduler:
    """N contexts, each one thread with its own engine (ready queue + io_uring ring + eventfd).

    ``submit`` works from any thread, before or during ``loop()``. ``loop()`` returns when all
    work is done; ``start()``/``stop()`` run it long-lived instead (notebooks).

    *contexts* is how many context threads to run; None means
    :func:`~tinycoro.core.checks.default_contexts`: ``TINYCORO_CONTEXTS`` if set, else one
    per CPU with the GIL off, else one: under the GIL extra contexts add no CPU and, on
    I/O-bound work, cost some (docs/design.md rule 15). Under the GIL, ask for more when tasks
    spend long stretches outside it; scale past one core with processes (``tc.cluster``).
    """

    def __init__(
        self,
        contexts: int | None = None,
        *,
        dispatch: str = "round_robin",
        ring_entries: int = 256,
    ) -> None:
        contexts = check_contexts(contexts)
        dispatch = check_dispatch(dispatch)
        check_int("ring_entries", ring_entries, min=1, max=32768)
        self.id = next(_sched_ids)
        # Called as failure_hook(task, exc) on the task's context thread, inside the task's
        # contextvars.Context, when a task fails (not tc.Cancelled) with nothing awaiting it.
        # None: logged at ERROR on the "tinycoro" logger, with the traceback.
        self.failure_hook: Callable[[Task, BaseException], None] | None = None
        self.dispatch = dispatch
        self.ring_entries = ring_entries
        self._lock = threading.Lock()
        self._token = 0
        self._accepting = True
        # True while a stop (or Ctrl-C's shutdown) cancels the tasks left, before the contexts
        # are told to stop: a spawn by one of those tasks then starts cancelled (_submit).
        self._unwinding = False
        self._mode: str | None = None  # None, "loop" or "long"
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._crash: BaseException | None = None
        self._closed = False
        self._rr = itertools.count()
        self._engines: list[Engine] = []
        # Per context: the tasks admitted toward it and not pushed yet (rule 18, "starting").
        # Changed under _lock; read without it by dispatch and tasks().
        self._starting: dict[Engine, set[Task]] = {}
        # Called once each, in order, when the scheduler shuts down, after its context threads
        # have been joined (tc.aio stops the scheduler's companion asyncio loop this way).
        self.at_shutdown: list[Callable[[], None]] = []
        # Each says whether work outside the contexts (an asyncio call) may still wake a
        # parked task; while one does, "every context idle" is not a deadlock.
        self.busy_elsewhere: list[Callable[[], bool]] = []
        try:
            for i in range(contexts):
                self._engines.append(Engine(i, self, ring_entries))
                self._starting[self._engines[-1]] = set()
        except BaseException:
            for e in self._engines:
                e.close()
            raise

    def __repr__(self) -> str:
        return (
            f"<Scheduler {self.id} contexts={len(self._engines)} dispatch={self.dispatch} "
            f"token={self._token} mode={self._mode}>"
        )

    @property
    def contexts(self) -> int:
        return len(self._engines)

    # -- submitting work ----------------------------------------------------------------------
    def submit(
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> Task:
        """Schedule *coro* on one context (chosen by the dispatch policy); any thread.

        The task runs in *context* (a ``contextvars.Context``), or in a copy of the calling
        thread's current context (rule 9).
        """
        return self.submit_watched(coro, None, name=name, context=context)

    def submit_watched(
        self,
        coro: Coroutine[Any, Any, Any],
        on_done: Callable[[Task], None] | None,
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> Task:
        """:meth:`submit`, with *on_done* registered as a done callback before the task can
        run: whoever passes it takes care of the outcome, so a failure is never reported as
        unobserved (``run_sync``, ``tc.run``'s main task, task groups)."""
        return self._submit(coro, on_done, name, context, defer=True)

    def _submit(
        self,
        coro: Coroutine[Any, Any, Any],
        on_done: Callable[[Task], None] | None,
        name: str | None,
        context: contextvars.Context | None,
        defer: bool,
    ) -> Task:
        """:meth:`submit_watched`; *defer*: a task spawned by a step of another context starts
        at the end of the spawner's turn (rule 18), else at once (``run_sync``, which blocks
        its caller, a notebook cell's step, until the task ends)."""
        if type(coro) is not _CoroutineType:  # exact-type test first: ~5x cheaper than inspect
            coro = _check_coro(coro, "submit")
        if context is not None and type(context) is not contextvars.Context:
            coro.close()
            raise TypeError(f"context must be a contextvars.Context or None, got {context!r}")
        engines = self._engines
        engine = engines[0] if len(engines) == 1 else self._pick()
        task = Task(coro, engine, name, context, on_done)
        if engine.thread_ident == threading.get_ident() and self._accepting:
            engine.live.add(task)  # own context: its flag is 1 while it runs (see module doc)
            engine.ready.append(task)
            return task
        spawner = _local.engine
        ours = spawner is not None and spawner.scheduler is self
        with self._lock:
            unwound = not self._accepting
            # Only a task of our contexts is being unwound by a stop: a guest engine's (a
            # notebook cell's) is not, and is told why its spawn fails.
            if unwound and not (self._unwinding and ours and not spawner.guest):
                coro.close()
                raise RuntimeError(
                    "this Scheduler no longer accepts work: its loop() has finished or it was "
                    "stopped; create a new Scheduler"
                )
            if unwound:
                # One of our tasks spawns while a stop cancels them all. As a task spawned into
                # a trio nursery being cancelled is, the child is cancelled (before its first
                # step, like any task cancelled before it starts): a RuntimeError at the call
                # would be one more failure in code the stop is unwinding, reported to whoever
                # pressed Ctrl-C. (The task is new, its lock nobody else's yet: taken under
                # ours, it cannot invert an order.)
                task.interrupt(Cancelled(f"task {task.name!r} was spawned as its scheduler stopped"))
            if not defer or not ours:
                engine.live.add(task)  # from here a stop() finishes it, wherever it is
                self._push_locked(engine, task)
                return task
            # Spawned by a step of another context (or a notebook cell's guest engine): it
            # starts once that step's turn is over, as it would on the spawner's own context.
            # The step may still be on its way to awaiting it; a task pushed now could fail
            # first on the other thread, and be reported as a failure nothing awaited. Until
            # then it is starting toward *engine*: it counts in its load, tasks() says so, and
            # the context keeps its stop flag (module doc). Starting before live: tasks()
            # reads live first, so a task it finds there is in one of the two.
            self._starting[engine].add(task)
            engine.live.add(task)
            if not engine.stop_flag:
                engine.stop_flag = 1
                self._token += 1
        spawner.defer(self._push_deferred, engine, task)
        return task

    def _push_deferred(self, engine: Engine, task: Task) -> None:
        """Make *task* (already in ``engine.live``) ready on *engine*: the end of a deferred
        spawn. A task that a stop finished meanwhile stays finished. Pushed before it leaves
        ``_starting``: a ``tasks()`` that missed it there finds it ready, or running."""
        with self._lock:
            if task._state is not DONE:
                self._push_locked(engine, task)
            self._starting[engine].discard(task)

    def _push_locked(self, engine: Engine, task: Task) -> None:
        if not engine.stop_flag:
            engine.stop_flag = 1
            self._token += 1
        engine.push(task)

    def _pick(self) -> Engine:
        engines = self._engines
        if self.dispatch == "round_robin":
            return engines[next(self._rr) % len(engines)]
        starting = self._starting
        # What is starting toward a context is its load too: a burst of spawns in one step
        # is all starting until the step's turn ends, and would otherwise all go to one.
        return min(engines, key=lambda e: e.load() + len(starting[e]))

    def context_idle(self, engine: Engine) -> None:
        """The engine's seam into the stop protocol: *engine* (one of ours, on its own thread)
        has nothing ready, in flight or parked. Clears its stop flag once (module doc)."""
        with self._lock:
            if engine.ready or engine.calls or self._starting[engine] or not engine.stop_flag:
                return
            engine.stop_flag = 0
            self._token -= 1
            if self._token == 0 and self._mode == "loop":
                self._finish_locked()

    def peers(self, engine: Engine) -> tuple[Engine, ...]:
        """The engine's seam to the other contexts: every engine of this scheduler but
        *engine*. ``Engine._peer_awake`` reads whether one of them is awake: a context about to
        sleep while another runs yields the CPU first, and a submit releases the GIL only
        then."""
        return tuple(e for e in self._engines if e is not engine)

    def _finish_locked(self) -> None:
        self._accepting = self._unwinding = False
        for e in self._engines:
            e.request_stop()
        self._done.set()

    # -- running ------------------------------------------------------------------------------
    def _start_threads(self) -> None:
        for e in self._engines:
            t = threading.Thread(
                target=self._thread_main,
                args=(e,),
                name=f"tinycoro-{self.id}-ctx{e.id}",
                daemon=True,
            )
            self._threads.append(t)
        for t in self._threads:
            t.start()

    def _thread_main(self, engine: Engine) -> None:
        try:
            with traps.context_thread():  # what asyncio code awaited in a task sees here
                engine.run()
        except BaseException as e:  # a runtime bug: stop everything and report it from loop()
            log.exception("tinycoro context %s crashed", engine.id)
            with self._lock:
                self._crash = e
                self._finish_locked()
            err = RuntimeError(f"tinycoro context {engine.id} crashed: {e!r}")
            err.__cause__ = e
            try:
                engine.abandon(err)
            except BaseException:  # noqa: BLE001 - already reporting the crash
                log.exception("while abandoning the tasks of crashed context %s", engine.id)

    def loop(self, deadlock_timeout: float | None = None) -> None:
        """Run until the stop token reaches 0 (all work done), then join every context.

        Raises :class:`DeadlockError` if, for *deadlock_timeout* seconds, every context was idle
        with no I/O or timer pending while tasks stayed parked. Without a timeout, that state
        is logged as a warning every 10 seconds instead.
        """
        deadlock_timeout = _check_timeout("deadlock_timeout", deadlock_timeout)
        if _local.engine is not None:
            raise RuntimeError("loop() cannot run inside a tinycoro task; await the work instead")
        if self._mode is not None:
            raise RuntimeError(f"loop() needs a fresh Scheduler; this one is in {self._mode!r} mode")
        if self._closed:
            raise RuntimeError("this Scheduler is closed")
        self._mode = "loop"
        # Ctrl-C on the main thread is recorded, never raised inside this bookkeeping (docs/design.md
        # rule 12); it wakes _watch through a call on context 0 (ki.SigintDeferred).
        with ki.defer_sigint() as interrupt:
            with self._lock:
                if self._token == 0:
                    self._finish_locked()
            if not interrupt.pending:  # interrupted while the caller set up: start nothing
                self._start_threads()
            interrupt.set_waker(self._wake_on_interrupt)
            deadlock: DeadlockError | None = None
            try:
                if not interrupt.pending:
                    deadlock = self._watch(deadlock_timeout, interrupt)
            except BaseException:  # KeyboardInterrupt where no handler could be installed
                self._shutdown(cancel_timeout=INTERRUPT_UNWIND)
                raise
            finally:
                interrupt.set_waker(None)
            if interrupt.pending:  # like asyncio.run: cancel, unwind, join, then raise
                self._shutdown(cancel_timeout=INTERRUPT_UNWIND)
                raise KeyboardInterrupt
        self._shutdown(cancel_timeout=0.0)
        if self._crash is not None:
            raise RuntimeError("a tinycoro context crashed") from self._crash
        if deadlock is not None:
            raise deadlock

    def _wake_on_interrupt(self) -> None:
        """From the SIGINT handler (main thread, any bytecode): wake ``_watch`` at once.

        Only lock-free steps are allowed here, so the wake-up is a call queued on context 0
        (deque append + eventfd write); that context sets ``_done`` from its own thread. A
        context held by its task runs no call: ``_watch``'s poll sees the interrupt then.
        """
        self._engines[0].call_soon(self._done.set)

    def _watch(
        self, deadlock_timeout: float | None, interrupt: ki.SigintDeferred
    ) -> DeadlockError | None:
        """Wait for the token to reach 0 or an interrupt, watching for the all-parked state."""
        poll = 0.05 if deadlock_timeout is None else min(0.05, max(deadlock_timeout / 10, 0.005))
        since = None
        marker = None
        warned_at = 0.0
        while not self._done.wait(poll) and not interrupt.pending:
            state = self._stalled()
            now = time.monotonic()
            if state is None:
                since = None
                continue
            if since is None or state != marker:
                since, marker, warned_at = now, state, 0.0
                continue
            stalled = now - since
            if deadlock_timeout is not None and stalled >= deadlock_timeout:
                err = self._deadlock_error(stalled)
                with self._lock:
                    self._finish_locked()
                return err
            if deadlock_timeout is None and stalled - warned_at >= WARN_EVERY:
                warned_at = stalled
                log.warning("%s", self._deadlock_error(stalled))
        return None

    def _stalled(self) -> tuple[int, ...] | None:
        """A progress marker if every context sleeps with only parked tasks, else None."""
        parked = 0
        for e in self._engines:
            # waited_inflight: an armed receive nobody awaits is no I/O anybody waits for
            if not e.sleeping or e.ready or e.calls or e.unsubmitted or e.waited_inflight():
                return None
            if e.deadlines.pending():  # a timeout scope will wake a parked task
                return None
            if self._starting[e]:  # a spawning step is still on its turn: work to come
                return None
            parked += len(e.parked)
        if not parked or any(busy() for busy in self.busy_elsewhere):
            return None
        return tuple(e.wakeups for e in self._engines) + tuple(e.steps for e in self._engines)

    def _deadlock_error(self, seconds: float) -> DeadlockError:
        entries = []
        for e in self._engines:
            for _ in range(3):
                try:
                    items = list(e.parked.items())
                    break
                except RuntimeError:  # changed while copying; the state is no longer stalled
                    items = []
            for task, ticket in items:
                what = ticket.what
                # The task by name only: its repr names what it waits on, said once below.
                name = f"<Task {task.id} {task.name!r} on context {e.id}>"
                entries.append((name, describe(what) if type(what) is Task else repr(what)))
        lines = "\n".join(f"  {t} waits on {w}" for t, w in entries)
        msg = (
            f"deadlock: for {seconds:.1f} s every context was idle with no I/O or timer pending, "
            f"yet {len(entries)} task(s) stay parked and nothing in the scheduler can wake them:\n"
            f"{lines}"
        )
        return DeadlockError(msg, entries)

    def start(self) -> "Scheduler":
        """Long-lived mode: start the context threads; idle contexts sleep until stop()."""
        if self._mode is not None:
            raise RuntimeError(f"start() needs a fresh Scheduler; this one is in {self._mode!r} mode")
        if self._closed:
            raise RuntimeError("this Scheduler is closed")
        self._mode = "long"
        self._start_threads()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop accepting work, cancel every task left, wait up to *timeout* s for them to
        unwind, then stop the contexts, join their threads and close the rings."""
        timeout = _check_timeout("timeout", timeout)
        if _local.engine is not None and _local.engine.scheduler is self and not getattr(
            _local.engine, "guest", False
        ):
            raise RuntimeError("stop() cannot be called from one of this scheduler's own tasks")
        # A task the calling step spawned must reach its context to be cancelled there and
        # unwind; left for the end of the step's turn, which this wait blocks, it never would.
        before_blocking()
        self._shutdown(cancel_timeout=5.0 if timeout is None else timeout)

    def _shutdown(self, cancel_timeout: float) -> None:
        if self._closed:
            return
        with self._lock:
            self._unwinding = self._accepting  # not when the run had already finished
            self._accepting = False
        if self._threads and cancel_timeout > 0:
            deadline = time.monotonic() + cancel_timeout
            cancelled: set[Task] = set()
            while True:
                # Each pass cancels, once, every task that is live now: a task a context
                # spawns on itself checks _accepting without the lock, so it may become live
                # just after an earlier pass, and left uncancelled it would run on until the
                # deadline and be closed instead of unwinding.
                for e in self._engines:
                    for task in list(e.live):
                        if task not in cancelled:
                            cancelled.add(task)
                            task.cancel()
                if not any(e.live for e in self._engines) or time.monotonic() >= deadline:
                    break
                if self._crash is not None:
                    break
                time.sleep(0.002)  # shutdown path only: tasks are unwinding their finally blocks
        with self._lock:
            self._finish_locked()
        for t in self._threads:
            t.join()
        self._closed = True
        hooks, self.at_shutdown = self.at_shutdown, []
        for fn in hooks:
            try:
                fn()
            except Exception:  # noqa: BLE001 - one hook's failure must not skip the rest
                log.exception("in a shutdown hook of %r", self)
        for e in self._engines:
            if not self._threads:  # never ran: tasks submitted before are closed here
                e.abandon(None)
            e.close()

    def __del__(self) -> None:
        # A Scheduler that never ran still holds N rings and eventfds. (A running one cannot
        # be collected: its context threads reference it.)
        try:
            if not self._closed and not self._threads:
                self._shutdown(cancel_timeout=0.0)
        except Exception:  # noqa: BLE001 - interpreter shutdown; nothing left to report to
            pass

    def __enter__(self) -> "Scheduler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run_sync(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """From a thread that is not one of this scheduler's contexts: run *coro* on the
        scheduler and block until it returns (or raise what it raised).

        On *timeout* the task is cancelled and ``TimeoutError`` raised.
        """
        timeout = _check_timeout("timeout", timeout)
        coro = _check_coro(coro, "run_sync")
        if _local.engine is not None and not getattr(_local.engine, "guest", False):
            coro.close()
            raise RuntimeError("run_sync() would block a tinycoro context; await the coroutine")
        if self._mode != "long":
            coro.close()
            raise RuntimeError("run_sync() needs a started Scheduler (start() or `with`)")
        done = threading.Event()
        task = self._submit(coro, lambda _t: done.set(), None, None, defer=False)
        self._hand_over_deferred(task)
        if not done.wait(timeout):
            task.cancel()
            done.wait(1.0)
            raise TimeoutError(f"run_sync: {task.name} did not finish within {timeout} s")
        return task.result()

    def _hand_over_deferred(self, task: Task) -> None:
        """run_sync's half of rule 18, for a caller that is a step (a notebook cell): what the
        step spawned cannot wait for the end of its turn, which the blocked caller never
        reaches, nor start at once: ``t = tc.spawn(f()); run_sync(g(t))`` would let ``t``
        fail on another context before ``g`` awaits it (a failure reported as unawaited, 1
        in 2 on 2 contexts). It starts at the end of the turn in which *task* takes its first
        step, on *task*'s context: the call below runs at the top of a turn, and *task* is
        ready by then. A call a stopping context drops leaves nothing unfinished: the tasks
        are live on this scheduler, and its stop finishes them."""
        spawner = _local.engine
        if spawner is None or not spawner.deferred:
            return
        if spawner.scheduler is not self:  # its spawns go elsewhere: no order to keep here
            before_blocking()
            return
        engine = task.engine
        engine.call_soon(engine.defer, _call_each, spawner.take_deferred())

    # -- statistics ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True while its context threads run (started and not yet stopped); any thread. What
        ``stats().running`` says, without the snapshot of every context."""
        return bool(self._threads) and not self._closed

    def stats(self) -> SchedulerStats:
        """A consistent-enough snapshot for widgets and tests; any thread, no locks, and no
        side effect (each engine keeps its own busy samples)."""
        now = time.perf_counter()
        running = self.running
        ctxs = tuple(self._context_stats(i, e, now, running) for i, e in enumerate(self._engines))
        return SchedulerStats(
            stop_token=self._token,
            accepting=self._accepting,
            running=running,
            contexts=ctxs,
            failed=sum(e.failed for e in self._engines),
        )

    def _context_stats(self, i: int, e: Engine, now: float, running: bool) -> ContextStats:
        busy = readers.busy(e, now) if running else 0.0
        return readers.context_stats(e, i, busy, **self._thread_times(i, running))

    def _thread_times(self, i: int, running: bool) -> dict[str, float]:
        """Context *i*'s thread's time on a CPU and waiting for one (``ContextStats``)."""
        threads = self._threads
        thread = threads[i] if running and i < len(threads) else None
        cpu, wait = readers.thread_times(thread.native_id if thread is not None else None)
        return {"cpu": cpu, "cpu_wait": wait}

    def tasks(self) -> tuple[TaskInfo, ...]:
        """A snapshot of every live task (id, name, context, state, what it waits on, age),
        oldest first; any thread."""
        now = time.perf_counter()
        infos = [
            i for e in self._engines for i in readers.task_infos(e, now, self._starting[e])
        ]
        infos.sort(key=lambda i: i.id)
        return tuple(infos)

    def failures(self) -> tuple[FailureInfo, ...]:
        """The most recent unobserved task failures (see ``SchedulerStats.failed``), oldest
        first; any thread."""
        out = [f for e in self._engines for f in list(e.failures)]
        out.sort(key=lambda f: f.when)
        return tuple(out)
