"""Which of tinycoro's optional compiled modules run, and why a pure-Python fallback runs instead.

tinycoro has three optional Cython modules, each with a pure-Python twin of the same behaviour:
the ring's per-operation calls (``_cring``, twin ``uring.PyRing``), the per-thread state
(``_clocal``, twin a ``threading.local``) and the page-cache read (``_cfile``, twin
``os.preadv``). This module is the one place that decides which runs: every user asks
:func:`load`, which imports the compiled module or records why it did not.

One variable switches them all, at build time and at run time: ``TINYCORO_PURE=1``. Set while
installing (``setup.py`` reads it through :func:`pure_requested`), nothing is compiled; set
when running, the compiled modules that are there are not used (CI runs the suites both ways).
The names of earlier releases, ``TINYCORO_PURE_RING`` (run time) and ``TINYCORO_NO_EXTENSION``
(build time), are still accepted, at both times, and are deprecated.

This module imports nothing of tinycoro's and nothing outside the standard library, so that
``setup.py`` can load it from the source tree before anything is built.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Mapping

__all__ = ["PURE_VAR", "DEPRECATED_VARS", "pure_requested", "load", "fallbacks", "describe"]

#: The one switch: set (to anything but "" or "0") it forces the pure-Python runtime.
PURE_VAR = "TINYCORO_PURE"
#: Earlier names of the same switch, still honoured; use ``TINYCORO_PURE``.
DEPRECATED_VARS = ("TINYCORO_PURE_RING", "TINYCORO_NO_EXTENSION")

#: Compiled module name (``"_cring"``, ...) -> why its pure-Python twin runs in this process.
#: A module absent from it and loaded by :func:`load` runs compiled.
fallbacks: dict[str, str] = {}
_loaded: dict[str, ModuleType] = {}


def pure_requested(environ: Mapping[str, str] | None = None) -> str | None:
    """The name of the variable that asks for the pure-Python runtime, or None."""
    env = os.environ if environ is None else environ
    for name in (PURE_VAR, *DEPRECATED_VARS):
        if env.get(name, "") not in ("", "0"):
            return name
    return None


def load(name: str) -> ModuleType | None:
    """``tinycoro.<name>`` compiled, or None after recording in :data:`fallbacks` why not.

    Besides ImportError (not built: a pure install; or a missing symbol), a compiled module
    built against another version of a binary it cimports fails with the ValueError that
    Cython raises for a changed type size ("may indicate binary incompatibility"): either way
    the pure twin runs and the reason is kept.
    """
    if name in _loaded:
        return _loaded[name]
    if name in fallbacks:
        return None
    var = pure_requested()
    if var is not None:
        fallbacks[name] = f"{var} is set"
        return None
    try:
        module = importlib.import_module(f"tinycoro.{name}")
    except (ImportError, ValueError) as exc:
        fallbacks[name] = f"tinycoro.{name} is not available ({type(exc).__name__}: {exc})"
        return None
    _loaded[name] = module
    return module


def describe() -> str:
    """One line for a start-up banner: which modules run compiled, and why others do not."""
    if not fallbacks:
        return "compiled runtime" if _loaded else "runtime not loaded yet"
    if not _loaded:
        reasons = sorted(set(fallbacks.values()))
        return "pure-Python runtime (" + "; ".join(reasons) + ")"
    pure = ", ".join(sorted(fallbacks))
    return f"compiled runtime except {pure} (" + "; ".join(sorted(set(fallbacks.values()))) + ")"
