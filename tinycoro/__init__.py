"""tinycoro: a coroutine runtime on io_uring.

A :class:`Scheduler` owns N contexts; each context is one thread with its own engine (a ready
queue, one io_uring ring, one eventfd). Tasks are native ``async def`` coroutines.

    import tinycoro as tc

    async def main():
        data = await tc.io.read_file("/etc/hostname")
        return data

    print(tc.run(main()))
"""

from ._source_tree import map_notebook_layer

map_notebook_layer(__path__[0])  # tinycoro.kernel_ext from a clone: see _source_tree

from . import compiled as _compiled

_compiled.force_pure_sources()  # TINYCORO_PURE: before any compiled-from-source module loads

from . import io, net
from .core import (
    Cancelled,
    ChannelClosed,
    ClosedResourceError,
    ContextStats,
    DeadlockError,
    FailureInfo,
    Scheduler,
    SchedulerStats,
    Task,
    TaskInfo,
    current_context,
    current_task,
    get_default_scheduler,
    run,
    set_default_scheduler,
    sleep,
    spawn,
    yield_now,
)
from .uring import IoUringUnavailable
from . import sync
from .channel import Channel
from .combinators import TaskGroup, when_all, when_any
from .scopes import timeout
from .sync import Condition, Event, Latch, Mutex, Semaphore, WaitGroup
from .aio import aio  # the function; the package stays importable as tinycoro.aio.host/bridge
from . import lowlevel

_compiled.note_sources()
_compiled.note_gil()  # a free-threaded interpreter whose GIL this import turned on: say why

__version__ = "0.1.0"

__all__ = [
    "Cancelled",
    "Channel",
    "ChannelClosed",
    "ClosedResourceError",
    "Condition",
    "ContextStats",
    "DeadlockError",
    "FailureInfo",
    "Event",
    "IoUringUnavailable",
    "Latch",
    "Mutex",
    "Scheduler",
    "SchedulerStats",
    "Semaphore",
    "Task",
    "TaskInfo",
    "TaskGroup",
    "WaitGroup",
    "aio",
    "current_context",
    "current_task",
    "get_default_scheduler",
    "io",
    "lowlevel",
    "net",
    "run",
    "set_default_scheduler",
    "sleep",
    "spawn",
    "sync",
    "timeout",
    "when_all",
    "when_any",
    "yield_now",
]


def __getattr__(name: str):
    """``tc.cluster`` imports :mod:`tinycoro.cluster` on first use: ``import tinycoro`` never
    imports ipyparallel (the optional extra ``tinycoro[cluster]``)."""
    if name == "cluster":
        import importlib

        return importlib.import_module(".cluster", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython):  # pragma: no cover - exercised by the kernel tests
    """``%load_ext tinycoro``: the notebook layer lives in tinycoro.kernel_ext, imported only
    here."""
    from .kernel_ext import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython):  # pragma: no cover
    from .kernel_ext import unload_ipython_extension as _unload

    _unload(ipython)
