"""Statistics snapshots: frozen, cheap to build, safe to hand to another thread (widgets)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextStats:
    id: int
    queued: int  # tasks in the ready queue
    io_pending: int  # SQEs prepared but not yet handed to the kernel
    io_inflight: int  # operations the kernel holds
    parked: int  # tasks waiting on a primitive or a join (the wait count)
    tasks_run: int  # tasks finished on this context
    busy: float  # fraction of wall time spent awake over the last interval, in [0, 1]
    stop_flag: int  # 1 = has work, 0 = reached its terminal state
    sleeping: bool
    ops: int = 0  # io_uring operations completed on this context, cumulative (for rates)


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
    state: str  # "ready", "running", "io" (an io_uring operation or timer) or "parked"
    waits_on: str  # the operation, or the primitive waited on; "" when ready or running
    age: float  # seconds since the task was created


@dataclass(frozen=True)
class FailureInfo:
    """A task that ended with an exception other than ``tc.Cancelled`` nobody was waiting for."""

    id: int
    name: str
    context: int | None
    error: str  # the exception's first line, e.g. "ValueError: boom"
    when: float  # time.time() when it ended
