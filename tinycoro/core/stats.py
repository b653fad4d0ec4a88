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


@dataclass(frozen=True)
class SchedulerStats:
    stop_token: int  # number of contexts whose stop flag is 1
    accepting: bool
    running: bool
    contexts: tuple[ContextStats, ...]
