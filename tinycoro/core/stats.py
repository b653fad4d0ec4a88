"""Statistics snapshots: frozen, cheap to build, safe to hand to another thread (widgets)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextStats:
    id: int
    queued: int  # tasks in the ready queue
    io_pending: int  # SQEs prepared but not yet handed to the kernel
    io_inflight: int  # operations the kernel holds, sleeps' timers included (see ``sleeps``)
    parked: int  # tasks waiting on a primitive or a join (the wait count)
    tasks_run: int  # tasks finished on this context
    busy: float  # fraction of wall time spent awake over the last interval, in [0, 1]
    stop_flag: int  # 1 = has work, 0 = reached its terminal state
    sleeping: bool
    ops: int = 0  # io_uring operations completed on this context, cumulative (for rates)
    # Sleeps are not I/O (DESIGN 4.2): tasks in a tc.sleep now (their timers are among
    # io_inflight), and timers started, cumulative (among ops once they complete). Counted
    # when the snapshot is taken / by tc.sleep itself, never by the engine's loop.
    sleeps: int = 0
    timers: int = 0

    @property
    def in_io(self) -> int:
        """Tasks' I/O operations started and not completed, sleeps left out."""
        return max(0, self.io_inflight + self.io_pending - self.sleeps)

    @property
    def io_ops(self) -> int:
        """I/O operations completed, cumulative, sleeps' timers left out (for rates)."""
        return max(0, self.ops - self.timers)


@dataclass(frozen=True)
class SchedulerStats:
    stop_token: int  # number of contexts whose stop flag is 1
    accepting: bool
    running: bool
    contexts: tuple[ContextStats, ...]
    # Tasks that ended with an exception other than tc.Cancelled that nobody had retrieved when
    # they ended; cumulative, never decreases.
    failed: int = 0


@dataclass(frozen=True)
class TaskInfo:
    """One live task, as ``Scheduler.tasks()`` saw it (for ``%tinycoro tasks`` and widgets)."""

    id: int
    name: str
    context: int | None
    # "ready", "running", "sleeping" (in tc.sleep), "io" (an io_uring operation) or "parked"
    # (on a primitive, a task group or a join)
    state: str
    # plain words (DESIGN 4.2): "sleep 2 ms (1.3 ms left)", "recv from 127.0.0.1:5000",
    # "Mutex held by 'holder' (3 waiting)", "when_all: 12 of 20 left"; "" when ready or running
    waits_on: str
    age: float  # seconds since the task was created


@dataclass(frozen=True)
class FailureInfo:
    """A task that ended with an exception other than ``tc.Cancelled`` nobody was waiting for."""

    id: int
    name: str
    context: int | None
    error: str  # the exception's first line, e.g. "ValueError: boom"
    when: float  # time.time() when it ended
