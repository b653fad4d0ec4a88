"""Jupyter integration for tinycoro: ``%load_ext tinycoro``.

Loading the extension (``tinycoro.load_ipython_extension`` forwards here):

* starts a default long-lived :class:`tinycoro.Scheduler` (``TINYCORO_CONTEXTS`` /
  ``TINYCORO_DISPATCH`` configure it; ``%tinycoro restart -n N --dispatch D`` changes it) and
  makes it the one ``tc.spawn`` falls back to; a task of it that fails while nothing awaits it
  prints its traceback in the cell that spawned it (:func:`tinycoro.kernel_ext.extension.report_failure`);
* installs :class:`tinycoro.kernel_ext.runner.CellRunner` as ``shell.loop_runner`` with ``autoawait``
  on, so a cell can ``await`` tinycoro awaitables at top level; the cell runs on the kernel's
  main thread, the tasks it spawns on the scheduler's contexts;
* registers the ``%tinycoro`` magic (:mod:`tinycoro.kernel_ext.magics`);
* lets the rest of the cell that loads it ``await`` tinycoro awaitables too (IPython chose that
  cell's runner before the extension existed; see ``Extension._hand_over_loading_cell``).

Unloading stops the scheduler (cancelling what is left), restores the previous ``loop_runner``
and ``autoawait``, removes the magic and leaves no tinycoro thread behind. Loading twice is a
no-op; ``%reload_ext tinycoro`` unloads and loads again.

Installed as the subpackage ``tinycoro.kernel_ext`` (the folder ``kernel_ext/`` of the repository).
Layering: this package imports :mod:`tinycoro`; tinycoro never imports it (its extension hooks
import it lazily). ipywidgets is imported only by :mod:`tinycoro.kernel_ext.dashboard`.
"""

from __future__ import annotations

import weakref
from typing import Any

from .extension import Extension, default_config

__all__ = ["Extension", "get_extension", "load_ipython_extension", "unload_ipython_extension"]

_loaded: "weakref.WeakKeyDictionary[Any, Extension]" = weakref.WeakKeyDictionary()


def get_extension(shell: Any = None) -> Extension | None:
    """The loaded extension of *shell* (default: the running IPython), or None."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return None
    return _loaded.get(shell)


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext tinycoro`` (or ``%load_ext tinycoro.kernel_ext``)."""
    if shell in _loaded:
        return  # loading twice (under either name) is harmless
    from .magics import TinycoroMagics

    contexts, dispatch = default_config()
    ext = Extension(shell, contexts, dispatch)
    try:
        shell.register_magics(TinycoroMagics(shell, ext))
    except BaseException:
        ext.close()
        raise
    _loaded[shell] = ext


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext tinycoro``: stop the scheduler and undo everything loading did."""
    popped = _loaded.pop(shell, None)
    if popped is None:
        return
    ext: Extension = popped
    manager = shell.magics_manager
    for kind in ("line", "cell"):
        table = manager.magics[kind]
        fn = table.get("tinycoro")
        if fn is not None and getattr(fn, "__self__", None) is not None and getattr(
            fn.__self__, "ext", None
        ) is ext:
            del table["tinycoro"]
    magics = manager.registry.pop("TinycoroMagics", None)
    try:
        if magics is not None:
            magics.close()  # a cluster started from this notebook stops with the extension
    finally:
        ext.close()
