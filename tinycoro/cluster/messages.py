"""The few message shapes the client and the engine side share. Submits and outcomes take the
task channel (:mod:`.channel`) where an engine has one; what follows is ipyparallel's path,
which the rest always takes and the tasks take without a channel.

* Tasks travel in ordinary ``apply_request`` messages of ``engine.start_tasks``, several per
  request: the submits made to one engine before the client's IO thread next turns go
  together (each request costs the engine's shell and IOPub threads about a millisecond of GIL
  time, whatever it carries). Each task's function and arguments ride in it packed by
  cloudpickle (:func:`pack`), so a function defined in a notebook travels with the globals it
  names; a function several tasks call travels once. The engine replies at once, when the
  tasks are started, with each one's task id or why it did not start.
* Each task's output travels on IOPub under a parent header of the task's own
  (:func:`task_parent`: the request's, with the task's token as msg_id), so the client routes
  it per task although the tasks shared a request. Outcomes travel in ``data_message``
  messages (ipyparallel's own message for data an engine publishes), each ``{RESULT_KEY: (token,
  outcome)}`` serialised by ipyparallel, several in one message: those of every task of an
  engine that ended while its IOPub thread was busy (the tasks of a round end in one turn),
  one outcome's buffers after the other's.
* Stats probes and cancels are ``CONTROL_REQUEST`` messages on the control channel, which an
  engine serves on its control thread: they never queue behind a busy shell.
"""

from __future__ import annotations

import dataclasses
import pickle
import traceback
import types
from functools import partial
from typing import Any

from ..core import Cancelled, ContextStats, SchedulerStats, TaskInfo

CONTROL_REQUEST = "tinycoro_request"
CONTROL_REPLY = "tinycoro_reply"
RESULT_KEY = "tinycoro_result"

# outcome kinds
OK = "ok"
OK_PACKED = "ok-packed"  # a value plain pickle could not send, packed by cloudpickle
ERROR = "error"
CANCELLED = "cancelled"


def pack(obj: Any) -> bytes:
    """*obj* pickled by cloudpickle: functions and classes of ``__main__`` (a notebook, a
    script) and dynamic ones (lambdas, closures) by value with the globals they name; those of
    importable modules, and modules themselves, by reference. ``pickle.loads`` unpacks it
    where cloudpickle is installed."""
    import cloudpickle

    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def pack_function(fn: Any) -> bytes:
    """*fn* packed (:func:`pack`); when that fails, a TypeError that names the function and
    the global, closed-over variable or default of it that cannot be pickled (found by trying
    each), chained from cloudpickle's error, which names only a type."""
    try:
        return pack(fn)
    except Exception as e:
        culprit = _unpicklable_part(fn)
        if culprit is None:
            raise
        name = getattr(fn, "__qualname__", None) or repr(fn)
        raise TypeError(
            f"{name}() cannot be sent to the engines: {culprit}, which cannot be pickled "
            f"({e}); create it inside the function, or pass what it needs as arguments"
        ) from e


def _kind(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _unpicklable_part(fn: Any, depth: int = 0) -> str | None:
    """Which part of *fn* does not pickle, in words; None if none is found (or not a function
    shipped by value). Functions of the same module it names are searched too (a few deep)."""
    while isinstance(fn, partial):
        for i, arg in enumerate(fn.args):
            if not _pickles(arg):
                return f"argument {i} of its functools.partial (a {_kind(arg)})"
        fn = fn.func
    if not isinstance(fn, types.FunctionType):
        fn = getattr(type(fn), "__call__", None)
        if not isinstance(fn, types.FunctionType):
            return None
    codes = [fn.__code__]
    names: list[str] = []
    while codes:  # the function's code and the code nested in it (closures, lambdas)
        code = codes.pop()
        names += [n for n in code.co_names if n not in names]
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    for name in names:
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if _pickles(value):
            continue
        if (isinstance(value, types.FunctionType) and depth < 3
                and value.__module__ == fn.__module__):
            inner = _unpicklable_part(value, depth + 1)
            if inner is not None:
                return f"the global function {name!r} it calls uses {inner.removeprefix('it uses ')}"
        return f"it uses the global {name!r} (a {_kind(value)})"
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # not set yet
            continue
        if not _pickles(value):
            return f"it closes over {var!r} (a {_kind(value)})"
    for value in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
        if not _pickles(value):
            return f"a default argument of it (a {_kind(value)})"
    return None


def _pickles(value: Any) -> bool:
    try:
        pack(value)
    except Exception:  # noqa: BLE001 - any failure is what we look for
        return False
    return True


def without_buffers(request: dict) -> dict:
    """A shallow copy of an apply *request* without its buffers (the pickled functions and
    arguments of every task of its batch), for what lives as long as one of its tasks."""
    return dict(request, buffers=[])


def task_parent(request: dict, token: str) -> dict:
    """The parent header a task's output and outcome go under: the apply request's that
    carried it, with the task's *token* as msg_id (a shallow copy; the request is unchanged),
    :func:`without_buffers`: the parent lives as long as the task."""
    header = dict(request.get("header") or {})
    header["msg_id"] = token
    return dict(without_buffers(request), header=header)


def error_outcome(exc: BaseException) -> tuple:
    """``(ERROR, pickled exception or None, type name, message, traceback text)``.

    The exception travels pickled when it can (so the client re-raises the same type); its
    traceback always travels as text, since frames cannot.
    """
    try:  # cloudpickle: an exception class a notebook defined (shipped by value) goes back too
        data: bytes | None = pack(exc)
    except Exception:  # noqa: BLE001 - an unpicklable exception still travels as text
        data = None
    # The traceback starts where the task's coroutine does, not in the engine that stepped it.
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and str(
        tb.tb_frame.f_globals.get("__name__", "")
    ).startswith("tinycoro.core."):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return (ERROR, data, type(exc).__name__, str(exc), text)


def outcome_of(exc: BaseException | None, value: Any) -> tuple:
    if exc is None:
        return (OK, value)
    if isinstance(exc, Cancelled):
        return (CANCELLED,)
    return error_outcome(exc)


def stats_to_dict(stats: SchedulerStats) -> dict:
    """JSON-safe, for a control reply."""
    return dataclasses.asdict(stats)


def stats_from_dict(d: dict) -> SchedulerStats:
    d = dict(d)
    d["contexts"] = tuple(ContextStats(**c) for c in d["contexts"])
    return SchedulerStats(**d)


def tasks_to_list(tasks: tuple[TaskInfo, ...]) -> list[dict]:
    return [dataclasses.asdict(t) for t in tasks]


def tasks_from_list(items: list[dict]) -> tuple[TaskInfo, ...]:
    return tuple(TaskInfo(**d) for d in items)
