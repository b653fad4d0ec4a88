"""The core layer: tasks, traps, engines, contexts, the scheduler and the stop protocol."""

from .engine import Engine
from .errors import Cancelled, ChannelClosed, ClosedResourceError, DeadlockError
from .runtime import (
    current_context,
    current_task,
    get_default_scheduler,
    run,
    set_default_scheduler,
    sleep,
    spawn,
    yield_now,
)
from .scheduler import Scheduler
from .stats import ContextStats, FailureInfo, SchedulerStats, TaskInfo
from .task import Task

__all__ = [
    "Cancelled",
    "ChannelClosed",
    "ClosedResourceError",
    "ContextStats",
    "DeadlockError",
    "FailureInfo",
    "Engine",
    "Scheduler",
    "SchedulerStats",
    "Task",
    "TaskInfo",
    "current_context",
    "current_task",
    "get_default_scheduler",
    "run",
    "set_default_scheduler",
    "sleep",
    "spawn",
    "yield_now",
]
