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

Besides those three, the hot modules listed in :data:`SOURCE_MODULES` may be compiled from
their own ``.py`` source, with an augmenting ``.pxd`` beside each (rule 14): the build
puts a ``.so`` next to the ``.py``, which Python's import then prefers. With the variable set at
run time, or when a build is older than its source (a stale build after an edit or a pull),
:func:`force_pure_sources` (called first thing by ``import tinycoro``) puts a finder ahead of
that choice which loads the ``.py``; :func:`note_sources` records, after the package is
imported, which of them run compiled (a module that does not is in :data:`fallbacks`, keyed by
its full name, with the reason).

This module imports nothing of tinycoro's and nothing outside the standard library, so that
``setup.py`` can load it from the source tree before anything is built.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any, Mapping, Sequence

__all__ = [
    "PURE_VAR", "DEPRECATED_VARS", "SOURCE_MODULES", "pure_requested", "load", "fallbacks",
    "describe", "force_pure_sources", "note_sources", "is_compiled",
]

#: The one switch: set (to anything but "" or "0") it forces the pure-Python runtime.
PURE_VAR = "TINYCORO_PURE"
#: Earlier names of the same switch, still honoured; use ``TINYCORO_PURE``.
DEPRECATED_VARS = ("TINYCORO_PURE_RING", "TINYCORO_NO_EXTENSION")

#: Compiled module name (``"_cring"``, ...) -> why its pure-Python twin runs in this process.
#: A module absent from it and loaded by :func:`load` runs compiled.
fallbacks: dict[str, str] = {}
_loaded: dict[str, ModuleType] = {}

#: The modules that setup.py compiles from their own .py (with the .pxd beside each), by their
#: full names. Frame-based code (tinycoro.core.ki, the notebook runner) is never among them.
SOURCE_MODULES: tuple[str, ...] = (
    "tinycoro.core.ring",
    "tinycoro.core.traps",
    "tinycoro.core.task",
    "tinycoro.core.deadlines",
    "tinycoro.core.engine",
    "tinycoro.closing",
    "tinycoro.net",
)


def is_compiled(module: ModuleType) -> bool:
    """Whether *module* was loaded from a compiled extension rather than its .py."""
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class _SourceFinder:
    """A meta path finder that loads the .py of :data:`SOURCE_MODULES` even where a compiled
    build of it lies beside it (``TINYCORO_PURE`` at run time)."""

    @staticmethod
    def find_spec(fullname: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if fullname not in SOURCE_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for folder in path:
            source = os.path.join(folder, leaf)
            if os.path.exists(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def _stale_build(root: str) -> str | None:
    """The first module of :data:`SOURCE_MODULES` whose build lies beside an older .py or .pxd
    (the source changed since ``setup.py build_ext``), as a reason; None when none does."""
    for name in SOURCE_MODULES:
        base = os.path.join(root, *name.split(".")[1:])
        built = [base + s for s in importlib.machinery.EXTENSION_SUFFIXES if os.path.exists(base + s)]
        if not built:
            continue
        sources = [p for p in (base + ".py", base + ".pxd") if os.path.exists(p)]
        if max(map(os.path.getmtime, sources)) > min(map(os.path.getmtime, built)):
            return f"{name} changed since it was built (rebuild: setup.py build_ext --inplace)"
    return None


def force_pure_sources() -> None:
    """Make every module of :data:`SOURCE_MODULES` import from its .py (call it before any of
    them is imported) when ``TINYCORO_PURE`` is set, or when one of their builds is older
    than its source: a stale build would run code that is no longer the source, and the
    modules cimport each other's types, so they run compiled all together or not at all."""
    var = pure_requested()
    why = f"{var} is set" if var is not None else _stale_build(os.path.dirname(__file__))
    if why is None:
        return
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
    for name in SOURCE_MODULES:
        fallbacks[name] = why


def note_sources() -> None:
    """Record, for each module of :data:`SOURCE_MODULES` imported by now, whether it runs
    compiled (in ``_loaded``) or interpreted (why, in :data:`fallbacks`)."""
    for name in SOURCE_MODULES:
        module = sys.modules.get(name)
        if module is None or name in fallbacks:
            continue
        if is_compiled(module):
            _loaded[name] = module
        else:
            fallbacks[name] = "not built: its .py runs interpreted"


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
