"""The few message shapes the client and the engine side share, all carried by ipyparallel.

* Tasks travel in ordinary ``apply_request`` messages of ``engine.start_tasks``, several per
  request: the submits made to one engine before the client's IO thread next turns go
  together (each request costs the engine's shell and IOPub threads about a millisecond of GIL
  time, whatever it carries). Each task's function and arguments ride in it packed by
  cloudpickle (:func:`pack`), so a function defined in a notebook travels with the globals it
  names; a function several tasks call travels once. The engine replies at once, when the
  tasks are started, with each one's task id or why it did not start.
* Each task's output and its outcome travel on IOPub under a parent header of the task's own
  (:func:`task_parent`: the request's, with the task's token as msg_id), so the client routes
  them per task although the tasks shared a request. The outcome is a ``data_message``
  (ipyparallel's own message for data an engine publishes) under ``RESULT_KEY``.
* Stats probes and cancels are ``CONTROL_REQUEST`` messages on the control channel, which an
  engine serves on its control thread: they never queue behind a busy shell.
"""

from __future__ import annotations

import dataclasses
import pickle
import traceback
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
