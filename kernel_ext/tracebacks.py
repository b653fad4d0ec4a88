"""Tracebacks about the user's code: the runtime's own frames left out.

An interrupted ``await tc.sleep(30)``, a failed task joined with ``await task`` and a task
that failed in the background would otherwise show frames of ``tinycoro/core/runtime.py``,
``traps.py``, the engine and ``kernel_ext/cell_loop.py``: code the user did not write and
cannot act on. IPython and pytest hide a frame whose locals hold ``__tracebackhide__``; IPython
still shows the innermost one, which for an interrupt is always the runtime's. So the
extension takes the runtime's frames (modules ``tinycoro*`` and ``kernel_ext*``, and any frame
that sets ``__tracebackhide__ = True``) out of the traceback object itself before IPython
formats it, for every error a cell shows while the extension is loaded, and for the failures
:func:`tinycoro.kernel_ext.extension.report_failure` prints.

The switch to see them again, for debugging tinycoro itself: ``%env TINYCORO_TRACEBACK=full``
(or the variable in the kernel's environment); it is read at each traceback.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import traceback
import types
from typing import Any, Callable

__all__ = ["ENV", "format_failure", "install", "show", "show_runtime", "strip", "user_traceback"]

ENV = "TINYCORO_TRACEBACK"  # "full": keep the runtime's frames
_RUNTIME = ("tinycoro", "kernel_ext")


def show_runtime() -> bool:
    """Whether the user asked to see the runtime's frames (``TINYCORO_TRACEBACK=full``)."""
    return os.environ.get(ENV, "").strip().lower() == "full"


def _is_runtime(frame: types.FrameType) -> bool:
    module = frame.f_globals.get("__name__", "")
    if isinstance(module, str) and module.partition(".")[0] in _RUNTIME:
        return True
    # IPython's own bottom frame says "__ipython_bottom__": it stays (tb_offset counts it)
    return frame.f_locals.get("__tracebackhide__") is True


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """*tb* without the runtime's frames; *tb* itself if nothing else would be left."""
    entries = []
    while tb is not None:
        if not _is_runtime(tb.tb_frame):
            entries.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    if not entries:
        return None
    out: types.TracebackType | None = None
    for frame, lasti, lineno in reversed(entries):
        out = types.TracebackType(out, frame, lasti, lineno)
    return out


def strip(exc: BaseException) -> BaseException:
    """Take the runtime's frames out of *exc*'s traceback and those of the exceptions chained
    to it (``__cause__``, ``__context__``); returns *exc*. Does nothing under the switch."""
    if show_runtime():
        return exc
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        tb = e.__traceback__
        if tb is not None:
            kept = user_traceback(tb)
            if kept is not None:
                e.__traceback__ = kept
        todo += [e.__cause__, e.__context__]
    return exc


def show(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list:
    """IPython custom exception handler: show the error as IPython would, without the
    runtime's frames (see the module doc)."""
    strip(value)
    tb = value.__traceback__ if not show_runtime() else tb
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    return []  # shown already


def install(shell: Any) -> Callable[[], None]:
    """Show every error of a cell through :func:`show` while the extension is loaded; returns
    the undo. Leaves another extension's custom handler alone."""
    if getattr(shell, "custom_exceptions", None) != ():
        return lambda: None

    def restore() -> None:
        if shell.custom_exceptions == (BaseException,):
            shell.set_custom_exc((), None)  # IPython's own default state

    shell.set_custom_exc((BaseException,), show)
    return restore


# IPython's formatter takes ~20 ms a traceback (stack_data reads and highlights the source), on
# the context thread that reports the failure: a storm of failing tasks must not stall it, so
# beyond RICH_PER_SECOND a second the plain Python format (~0.1 ms) is used.
RICH_PER_SECOND = 10
_rich_times: collections.deque[float] = collections.deque(maxlen=RICH_PER_SECOND)
_rich_lock = threading.Lock()


def _rich_allowed() -> bool:
    now = time.monotonic()
    with _rich_lock:
        if len(_rich_times) == RICH_PER_SECOND and now - _rich_times[0] < 1.0:
            return False
        _rich_times.append(now)
        return True


def format_failure(exc: BaseException, shell: Any = None) -> str:
    """The traceback of a task's failure as text, as the shell formats a cell's error (cell
    references such as "Cell In[2], line 3", the kernel's colours); plain Python formatting
    without a shell. Runtime frames left out unless switched on."""
    strip(exc)
    if shell is not None and _rich_allowed():
        try:
            from IPython.core import ultratb

            own = shell.InteractiveTB
            # A formatter of its own: this runs on a context thread, the shell's may be busy.
            formatter = ultratb.AutoFormattedTB(mode=own.mode, theme_name=shell.colors)
            stb = formatter.structured_traceback(type(exc), exc, exc.__traceback__, tb_offset=0)
            return formatter.stb2text(stb) + "\n"
        except Exception:  # noqa: BLE001 - another IPython: fall back to Python's format
            pass
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
