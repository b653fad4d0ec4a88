"""What other threads read of an engine for statistics: ``Scheduler.stats()`` and ``tasks()``.

Plain reads of an engine's counters and tables from any thread, without the engine's locks: a
snapshot may be a step behind, never an inconsistent object (the engine replaces what it
updates as a whole, such as its busy samples; that replacement is taken under a short lock
the engine holds once per ``BUSY_STEP``; and an op in flight is described under the lock its
owner holds while ops leave the in-flight table, ``RingOwner.describe_inflight``, since the
owner refills a reused op's fields in place: docs/design.md, "Synchronisation"). Nothing here
runs on the engine's own path, so none of it is compiled or costs the engine anything.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Collection

from .deadlines import Sleep
from .stats import ContextStats, TaskInfo
from .timeshare import awake_share
from .traps import Op, Park, ops_waited_by
from .waits import SLEEP, park_words, sleep_words

if TYPE_CHECKING:  # pragma: no cover
    from collections import deque

    from .engine import Engine
    from .task import Task

__all__ = ["task_infos", "waiting_of", "sleeps", "busy", "thread_times", "context_stats", "guest_stats"]


def task_infos(engine: "Engine", now: float, starting: Collection[Task] = ()) -> list[TaskInfo]:
    """What each live task is doing, read from another thread without locks: a snapshot
    that may be a step behind, never an inconsistent object. The words are built here,
    by the caller (core/waits.py), so describing waits costs the engine nothing.

    *starting*: the tasks admitted toward *engine* whose spawning step's turn is not over
    (rule 18). Read after ``live`` and before ``ready``, the order in which a task passes
    through them, so a live task not yet running is found in one of the two."""
    live = list(engine.live)
    first = {id(t) for t in list(starting)}
    ready = _ids(engine.ready)
    uds: dict[int, int] = {}
    waits = _waits(engine, live, uds)
    out = []
    for t, waiting in zip(live, waits):
        try:
            # An op is described only while still in flight (RingOwner.describe_inflight):
            # a stream's ops are refilled for their next use once their CQE is in.
            seen = engine.describe_inflight(uds[id(waiting)], waiting) if isinstance(waiting, Op) else None
            if seen is not None:
                state, what = ("sleeping" if seen[0] == SLEEP else "io"), seen[1]
            elif type(waiting) is Park:
                if type(waiting.what) is Sleep:  # tc.sleep: a deadline in the engine's heap
                    state, what = "sleeping", sleep_words(waiting.what.seconds, waiting.what.when)
                elif isinstance(waiting.what, Op):  # the next CQE of an op in flight for
                    # several awaits (one that completes many times, RingOwner.arm): I/O
                    state, what = "io", waiting.what.describe()
                else:
                    state, what = "parked", park_words(waiting.what)
            else:  # ready or running; or its op completed since the table was copied
                key = id(t)
                state = "ready" if key in ready else "starting" if key in first else "running"
                what = ""
        except Exception as e:  # noqa: BLE001 - a snapshot never fails for a description
            state, what = "parked" if type(waiting) is Park else "io", type(e).__name__
        out.append(TaskInfo(t.id, t.name, engine.id, state, what, max(0.0, now - t._born)))
    return out


def _ids(tasks: "deque[Task]") -> set[int]:
    """The ids of the tasks in a deque its owner appends to and pops from meanwhile. Under
    the GIL ``list()`` copies it in one step; without the GIL the copy iterates it (so does
    ``deque.copy()``) and fails when the owner changes it between two items: a few tries,
    then none (its tasks then read "running", a snapshot's error, never an exception)."""
    for _ in range(8):
        try:
            return {id(t) for t in list(tasks)}
        except RuntimeError:  # "deque mutated during iteration"
            continue
    return set()


def _waits(engine: "Engine", tasks: list[Task], uds: dict[int, int] | None = None) -> list:
    """The ``Park`` or ``Op`` each of *tasks* waits on (None: ready or running), from the
    owner's tables, never from ``Task._waiting``: the owner allocates what it stores there
    and drops it at the task's next step, so another thread that loads the field and then
    takes a reference may take it on a freed object (a free-threaded build;
    docs/freethreading-tsan.md, finding 12). A copy of a dict is taken under the dict's own
    lock and holds references, and the owner puts a task's ``Park`` or ``Op`` in its table
    before it stores ``_waiting``, so what is read here was whole when it was published.
    Costs the owner nothing: it keeps those tables anyway. *uds*, if given, gets the
    user_data each op found was in flight under (``id(op)`` -> its key in the table copy),
    never read from the op, whose ``ud`` the owner rewrites at each use."""
    parked = dict(engine.parked)
    out = [parked.get(t) for t in tasks]
    rest = [i for i, w in enumerate(out) if w is None]
    if rest:
        table = list(engine.inflight.items())
        ops = ops_waited_by([tasks[i] for i in rest], [op for _, op in table])
        for i, op in zip(rest, ops):
            out[i] = op
        if uds is not None:
            uds.update((id(op), ud) for ud, op in table)
    return out


def waiting_of(engine: "Engine", task: Task) -> object:
    """``Task.waiting_on()`` read from a thread other than *engine*'s: the same as
    ``task._waiting``, through the owner's tables (:func:`_waits` says why)."""
    return _waits(engine, [task])[0]


def sleeps(engine: "Engine") -> int:
    """Tasks in a ``tc.sleep`` now (parked on a deadline of the engine's heap): counted when
    asked, any thread."""
    return sum(1 for ticket in list(engine.parked.values()) if type(ticket.what) is Sleep)


def busy(engine: "Engine", now: float) -> float:
    """Share of the last second (up to *now*, a perf_counter() reading) that *engine* spent
    awake, running tasks, in [0, 1]; any thread, no side effect
    (:mod:`tinycoro.core.timeshare`)."""
    with engine._samples_lock:  # the tuple is replaced under it (Engine.__init__ says why)
        samples = engine._samples
    return awake_share(samples, engine.sleep_total, engine.sleep_since, now)


def thread_times(native_id: int | None) -> tuple[float, float]:
    """Seconds the thread *native_id* (of this process) has run on a CPU and has waited,
    runnable, for one: the kernel's schedstat, any thread. A per-thread CPU clock
    (``pthread_getcpuclockid``) gives the first only, and needs the thread alive: this is one
    read, and a thread gone (or no schedstat) reads (0, 0)."""
    if native_id is None:
        return 0.0, 0.0
    try:  # os.open/os.read, no file object: about 12 us a context (open() took 20)
        fd = os.open(f"/proc/self/task/{native_id}/schedstat", os.O_RDONLY)
        try:
            ran, waited = os.read(fd, 128).split()[:2]
        finally:
            os.close(fd)
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def context_stats(engine: "Engine", id: int, busy: float = 0.0, cpu: float = 0.0,
                  cpu_wait: float = 0.0) -> ContextStats:
    """One engine's counters in a context's words. A tc.sleep is a deadline in the engine's
    heap, its task parked on it: counted as a timer in flight (and one started, among ops) as
    when sleeps were kernel timeouts, so that in_io and io_ops, which leave sleeps out, read
    the same; not as parked."""
    n = sleeps(engine)
    return ContextStats(
        id=id, queued=len(engine.ready), io_pending=engine.unsubmitted,
        io_inflight=engine.inflight_count() + n, parked=max(0, len(engine.parked) - n),
        tasks_run=engine.tasks_run, busy=busy, stop_flag=engine.stop_flag,
        sleeping=engine.sleeping, ops=engine.ops + engine.timers, sleeps=n,
        timers=engine.timers, multishot_enobufs=engine.nobufs_endings,
        multishot_rearms=engine.rearms, cpu=cpu, cpu_wait=cpu_wait,
    )


def guest_stats(engine: "Engine") -> ContextStats:
    """What a guest engine (a notebook's cells' own context) holds and has done, in a
    context's words; its busy share is left at 0 (its thread is lent, not its own)."""
    return context_stats(engine, -1)
