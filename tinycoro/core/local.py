"""Per-thread runtime state: which engine this thread drives and which task it is running.

:data:`thread_state` is its public name, for the layers above the core (sync, io, net,
channel, aio, kernel_ext) and :mod:`tinycoro.lowlevel`: they read ``thread_state.engine`` and
``thread_state.task`` directly, an attribute read instead of a function call on the hot paths.
Only the engine (and :func:`tinycoro.lowlevel.outside_engine`) writes them. Inside the core
the same object is ``_local``.

``_local.engine`` and ``_local.task`` are read on every trap and by every Mutex lock and unlock,
and the engine writes ``_local.task`` on every step, so their cost matters. The compiled
``tinycoro._clocal.Local`` keeps each in a C thread-local pointer: ~170 instructions per access
against ~620 for a ``threading.local`` subclass attribute (callgrind, CPython 3.11). Where it is
not built, or with ``TINYCORO_PURE=1`` (the one switch of :mod:`tinycoro.compiled`, which
runs the suites on the pure-Python ring and on this fallback together), the ``threading.local``
below does the same job. Both behave alike: per thread, ``None`` until set. ``COMPILED`` says
which is in use.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .. import compiled


class _Local(threading.local):
    engine = None  # the Engine this thread runs, or None outside tinycoro
    task = None  # the Task being stepped right now


def _make() -> tuple[Any, bool]:
    module = compiled.load("_clocal")
    if module is None:
        return _Local(), False
    return module.Local(), True


_local, COMPILED = _make()
thread_state = _local
"""This thread's ``engine`` and ``task`` (``None`` outside tinycoro): see the module doc."""


def _running_task_py() -> Any:
    return _local.task


def _compiled_or(name: str, twin: Callable[..., Any]) -> Callable[..., Any]:
    """``_clocal``'s function *name* where the compiled per-thread state is in use, else its
    Python *twin* over ``thread_state``: compiled callers cimport the C one under the same name."""
    module = compiled.load("_clocal") if COMPILED else None
    return getattr(module, name) if module is not None else twin


running_task = _compiled_or("running_task", _running_task_py)
"""``thread_state.task`` as a call: a compiled hot path that cimports ``_clocal.running_task``
under this name reads the C thread-local directly (~20 instructions, not ~150; the page-cache
read_at does, once per read)."""


def _running_engine_py() -> Any:
    return _local.engine


running_engine = _compiled_or("running_engine", _running_engine_py)
"""``thread_state.engine`` as a call: a compiled hot path that cimports
``_clocal.running_engine`` under this name reads the C thread-local directly (a send's and a
recv's first look at their context)."""


def _set_running_task_py(task: Any) -> None:
    _local.task = task


set_running_task = _compiled_or("set_running_task", _set_running_task_py)
"""``thread_state.task = task`` as a call: the engine writes it at every step, and compiled it
cimports ``_clocal.set_running_task`` under this name, a C store (~20 instructions, not ~165)."""
