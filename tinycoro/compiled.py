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
run time, or when an in-place build no longer matches its source (an edit or a pull since the
build), :func:`force_pure_sources` (called first thing by ``import tinycoro``) puts a finder
ahead of that choice which loads the ``.py``; :func:`note_sources` records, after the package is
imported, which of them run compiled (a module that does not is in :data:`fallbacks`, keyed by
its full name, with the reason).

**What a build was built from.** The build writes :data:`BUILD_RECORD` beside the package: the
SHA-256 of each compiled module's source (its ``.py`` or ``.pyx``, its ``.pxd``, and every
``.pxd`` of the package those cimport, transitively: a header-only one's structs and inline
functions are compiled into the module; :func:`source_files`), taken when it was compiled, kept
per interpreter (:func:`build_key`). A rebuild regenerates the C of each module whose source
no longer matches the record (:func:`stale_modules`), whatever the file times say. Staleness is judged by those hashes, never by file times (an install writes
the ``.py`` files after the built modules, so times say nothing there), and only where a source
tree is present: a checkout built in place or installed editable, where an edit can outrun the
build. An installed wheel or ``pip install .`` has no source tree beside it and trusts its
own build.

**Free-threaded CPython.** Every module the build compiles declares that it runs without the
GIL (``setup.py``). Importing an extension module that does not declare it turns the GIL on for
the whole process; :func:`note_gil` (called after the package is imported, and when a pure ring
first imports the binding) warns when that happened since tinycoro's import began, naming the
extension modules that loaded then (in practice the liburing binding, which only the
pure-Python ring imports, built without ``-DCYTHON_FREETHREADING_COMPATIBLE=1``: docs/design.md,
"The liburing binding"), and :func:`gil_state` says which build runs, for a banner.

This module imports nothing of tinycoro's and nothing outside the standard library, so that
``setup.py`` can load it from the source tree before anything is built.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import sys
import sysconfig
from types import ModuleType
from typing import Any, Mapping, Sequence

__all__ = [
    "PURE_VAR", "DEPRECATED_VARS", "SOURCE_MODULES", "pure_requested", "load", "fallbacks",
    "describe", "force_pure_sources", "note_sources", "is_compiled", "BUILD_RECORD",
    "source_hash", "source_files", "cimported", "stale_modules", "build_key", "read_build_records", "FREE_THREADED", "gil_enabled", "gil_state", "note_gil", "BINDING_FIX",
    "import_binding",
]

#: Whether this interpreter is a free-threaded build (``--disable-gil``), GIL on or off now.
FREE_THREADED: bool = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def gil_enabled() -> bool:
    """Whether the GIL is enabled now (always, on a build that has one)."""
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


# What was loaded before tinycoro's own import began (this module is its first): the GIL's state
# then, and the extension modules already there (not tinycoro's to answer for).
_gil_at_start = gil_enabled()
_modules_at_start = frozenset(sys.modules)

#: The one command that rebuilds the liburing binding so that it declares it runs without the GIL.
BINDING_FIX = ("CFLAGS=-DCYTHON_FREETHREADING_COMPATIBLE=1 pip install --no-cache-dir "
               "--force-reinstall --no-deps liburing==2024.5.3")

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
    "tinycoro.net.ops",
    "tinycoro.net.multishot",
    "tinycoro.net.stream",
    "tinycoro.buffers",
    "tinycoro.io.direct",
    "tinycoro.io.ops",
    "tinycoro.io.file",
    "tinycoro.io.whole",
    "tinycoro.sync._lot",
    "tinycoro.sync.mutex",
    "tinycoro.sync.semaphore",
    "tinycoro.sync.event",
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


#: The file, in the package folder, that maps each interpreter's :func:`build_key` to its
#: compiled modules' full names -> the hash of the source each was compiled from (written by
#: setup.py's build_ext, read by :func:`_stale`).
BUILD_RECORD = "_built_from.json"


def build_key() -> str:
    """This interpreter's key in :data:`BUILD_RECORD`: its extension-module suffix
    (``.cpython-312-x86_64-linux-gnu.so``). Each Python builds its own modules side by side in
    one source tree, so each is judged by the record of its own build."""
    return sysconfig.get_config_var("EXT_SUFFIX") or importlib.machinery.EXTENSION_SUFFIXES[0]


def read_build_records(path: str) -> dict[str, dict[str, str]]:
    """The builds recorded in the :data:`BUILD_RECORD` file at *path*, by :func:`build_key`;
    {} when it is missing or unreadable. An entry that is not one build's record (a file
    written before records were kept per Python mapped names to hashes directly) is left out:
    it vouches for no build. Read by the run time's staleness check and by setup.py, which
    adds its own Python's entry and keeps the others'."""
    import json

    try:
        with open(path) as f:
            builds = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(builds, dict):
        return {}
    return {key: record for key, record in builds.items() if isinstance(record, dict)}


#: A cimport in a .pxd or .pyx, comments stripped: ``from X cimport a, b`` (also in parentheses
#: over lines), or ``cimport X``.
_CIMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+cimport[ \t]+(\([^)]*\)|[^\n]*)|cimport[ \t]+([^\n]*))",
    re.MULTILINE,
)


def cimported(name: str, text: str) -> set[str]:
    """The full names that the .pxd or .pyx text of module *name* cimports, each imported name
    counted as a possible module too (``from . cimport fence`` cimports ``<package>.fence``).
    Cython's own dependency scan (``Cython.Build.Dependencies``) reads ``from . cimport fence``
    as a cimport from the package above, and is not there at run time, so it is not used."""
    text = re.sub(r"#[^\n]*", "", text)
    out: set[str] = set()
    for m in _CIMPORT.finditer(text):
        source, listed, plain = m.groups()
        if plain is not None:
            out.update(word.split()[0] for word in plain.split(",") if word.strip())
            continue
        dots = len(source) - len(source.lstrip("."))
        if dots:  # one dot is this module's package, each more one level up
            base = name.split(".")[:-dots]
            source = ".".join(base + ([source[dots:]] if source[dots:] else []))
        out.add(source)
        for word in listed.strip("()").split(","):
            if word.strip():
                out.add(f"{source}.{word.split()[0]}")
    return out


def source_files(package_dir: str, name: str) -> list[str]:
    """The source files of compiled module *name* (``"tinycoro.net"``, ``"tinycoro._cring"``)
    under *package_dir* (tinycoro's folder) that exist: its ``.py`` or ``.pyx``, its ``.pxd``,
    and every ``.pxd`` of the package that those cimport, transitively (a header-only one such
    as ``core/fence.pxd`` too: the module was compiled against its structs and inline
    functions)."""
    def path_of(module: str, suffix: str) -> str:
        return os.path.join(package_dir, *module.split(".")[1:]) + suffix

    found = [p for p in (path_of(name, ".py"), path_of(name, ".pyx")) if os.path.exists(p)]
    pending = [(name, p) for p in found if p.endswith(".pyx")] + [(name, path_of(name, ".pxd"))]
    seen: set[str] = set()
    while pending:
        module, path = pending.pop()
        if path in seen or not os.path.exists(path):
            continue
        seen.add(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for other in cimported(module, text):
            if other.split(".")[0] == name.split(".")[0]:
                pending.append((other, path_of(other, ".pxd")))
    return found + sorted(p for p in seen if p.endswith(".pxd"))


def stale_modules(package_dir: str, record: Mapping[str, str]) -> set[str]:
    """The modules named in *record* (one build's entry of :data:`BUILD_RECORD`) whose source,
    by :func:`source_hash`, is no longer the one recorded. setup.py recompiles them whatever
    the file times say."""
    return {name for name, digest in record.items() if digest != source_hash(package_dir, name)}


def source_hash(package_dir: str, name: str) -> str:
    """SHA-256 of the source of compiled module *name*, as the build records it."""
    import hashlib

    digest = hashlib.sha256()
    for path in source_files(package_dir, name):
        # named from the package folder: two header-only .pxd files may share a name
        digest.update(os.path.relpath(path, package_dir).encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
        digest.update(b"\0")
    return digest.hexdigest()


def _source_tree_root(package_dir: str) -> str | None:
    """The checkout *package_dir* lies in (the folder with ``setup.py`` and ``pyproject.toml``),
    or None for an installed package, which has no source to fall behind."""
    root = os.path.dirname(os.path.abspath(package_dir))
    if all(os.path.isfile(os.path.join(root, f)) for f in ("setup.py", "pyproject.toml")):
        return root
    return None


def _rebuild_command(root: str) -> str:
    """The shell command that rebuilds the compiled modules of the checkout at *root*, for its
    layout: an editable install of it is rebuilt by installing it again; a checkout run from
    ``PYTHONPATH`` by building in place (which needs Cython and the liburing binding)."""
    import json
    from importlib.metadata import distributions

    for dist in distributions(name="tinycoro"):  # a build's egg-info in *root* comes first
        try:
            info = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if info.get("dir_info", {}).get("editable") and _same_dir(info.get("url"), root):
            return f"pip install -e {shlex.quote(root)}"
    return f"cd {shlex.quote(root)} && python setup.py build_ext --inplace"


def _same_dir(url: Any, root: str) -> bool:
    """Whether *url*, a ``file:`` URL as pip writes it into ``direct_url.json`` (percent-encoded:
    a space is ``%20``, a non-ASCII letter its UTF-8 bytes), names the directory *root*."""
    import urllib.parse
    import urllib.request

    if not isinstance(url, str):
        return False
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return False
    path = urllib.request.url2pathname(parts.path)  # decodes the percent-encoding
    return os.path.normpath(path) == os.path.normpath(root)


def _unbuilt_tree() -> str | None:
    """The reason to give when tinycoro runs from a checkout that was never built in place
    (``pip install .`` builds into site-packages, and ``python -m`` from the checkout imports
    the checkout's copy instead), or None."""
    package_dir = os.path.dirname(__file__)
    root = _source_tree_root(package_dir)
    if root is None or any(_built(package_dir, n) for n in _ALL_COMPILED):
        return None
    return (
        f"running from the unbuilt source tree {root} "
        f"(pip install -e {shlex.quote(root)}, or run elsewhere)"
    )


def _built(package_dir: str, name: str) -> bool:
    base = os.path.join(package_dir, *name.split(".")[1:])
    return any(os.path.exists(base + s) for s in importlib.machinery.EXTENSION_SUFFIXES)


#: Every module the build may compile, by full name: the three twins and the hot modules.
_ALL_COMPILED = ("tinycoro._cring", "tinycoro._clocal", "tinycoro._cfile", *SOURCE_MODULES)
_stale_reason: list[str | None] = []  # computed once per process: [reason or None]


def _stale(package_dir: str) -> str | None:
    """Why this build must not run, as one reason naming the first module whose source changed
    and the command that rebuilds; None when each built module matches the source it was built
    from, or where there is no source tree (an installed package trusts its build). One build
    is judged as a whole: its modules cimport each other's types, and a half-stale build would
    mix two versions of the runtime."""
    if _stale_reason:
        return _stale_reason[0]
    _stale_reason.append(_judge_build(package_dir))
    return _stale_reason[0]


def _judge_build(package_dir: str) -> str | None:
    root = _source_tree_root(package_dir)
    if root is None:
        return None
    built = [n for n in _ALL_COMPILED if _built(package_dir, n)]
    if not built:
        return None
    record = read_build_records(os.path.join(package_dir, BUILD_RECORD)).get(build_key(), {})
    for name in built:
        if record.get(name) != source_hash(package_dir, name):
            what = "changed since it was built" if name in record else "has no build record"
            return f"stale build: {name} {what} (rebuild: {_rebuild_command(root)})"
    return None


def force_pure_sources() -> None:
    """Make every module of :data:`SOURCE_MODULES` import from its .py (call it before any of
    them is imported) when ``TINYCORO_PURE`` is set, or when, in a source tree, one of their
    builds no longer matches its source: a stale build would run code that is no longer the source, and the
    modules cimport each other's types, so they run compiled all together or not at all."""
    var = pure_requested()
    why = f"{var} is set" if var is not None else _stale(os.path.dirname(__file__))
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
            fallbacks[name] = _unbuilt_tree() or "not built: its .py runs interpreted"


def import_binding() -> ModuleType:
    """``import liburing``, one process at a time (an exclusive ``flock`` on the binding's
    folder, held for the import only; a no-op once it is imported).

    The binding's lazy loader, ``dynamic_import``, cannot read back the name cache it keeps in
    the binding's ``__pycache__`` (its reader fails on every read), so every import rescans the
    package and removes and rewrites that file. Processes importing at once (pytest-xdist's
    workers, a server's children) then race on it: the loser's ``remove`` raises
    ``FileNotFoundError``, and its ``liburing`` stays empty for the rest of the process (the
    loader records that it ran before it failed). tests/test_freethreaded_binding.py."""
    module = sys.modules.get("liburing")
    if module is not None and hasattr(module, "io_uring_get_sqe"):
        return module
    spec = importlib.util.find_spec("liburing")
    folder = list(spec.submodule_search_locations or [])[0] if spec is not None else None
    if folder is None:
        return importlib.import_module("liburing")  # not installed: its ImportError, as ever
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return importlib.import_module("liburing")
    finally:
        os.close(fd)  # closing it unlocks


def gil_state() -> str:
    """For a banner: "" on a GIL build; on a free-threaded one, whether the GIL is off now."""
    if not FREE_THREADED:
        return ""
    return "free-threaded, GIL on" if gil_enabled() else "free-threaded, GIL off"


def _turned_gil_on() -> list[str]:
    """The extension modules from outside the standard library loaded since tinycoro's import
    began, when the GIL was off then and is on now (one of them did not declare that it runs
    without it); else []. The standard library's all declare it."""
    if not FREE_THREADED or _gil_at_start or not gil_enabled():
        return []
    stdlib = tuple(os.path.join(sysconfig.get_path(k), "") for k in ("stdlib", "platstdlib"))
    return sorted(name for name, module in list(sys.modules.items())
                  if name not in _modules_at_start and module is not None and is_compiled(module)
                  and not (module.__file__ or "").startswith(stdlib))


def note_gil() -> None:
    """Warn once when importing tinycoro turned the GIL on in a free-threaded interpreter, naming
    the extension modules that loaded meanwhile and, where the liburing binding is among them,
    the command that rebuilds it (CPython's own warning names only the first module)."""
    suspects = _turned_gil_on()
    if not suspects or _warned_gil:
        return
    _warned_gil.append(True)
    import warnings

    binding = [n for n in suspects if n == "liburing" or n.startswith("liburing.")]
    others = [n for n in suspects if n not in binding]
    what = []
    if binding:
        more = f" and {len(binding) - 1} more" if len(binding) > 1 else ""
        what.append(f"the liburing binding ({binding[0]}{more}), which the pure-Python ring "
                    f"drives, was built without declaring that it runs without the GIL; "
                    f"rebuild it: {BINDING_FIX} (the compiled ring needs none of it)")
    if others:
        what.append(f"one of these extension modules does not declare it: {', '.join(others)}")
    warnings.warn("tinycoro: importing tinycoro turned the GIL on in this free-threaded "
                  "interpreter, so its contexts will not run Python in parallel: "
                  + "; ".join(what), RuntimeWarning, stacklevel=2)


_warned_gil: list[bool] = []


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
    stale = _stale(os.path.dirname(__file__))
    if stale is not None:
        fallbacks[name] = stale
        return None
    try:
        module = importlib.import_module(f"tinycoro.{name}")
    except (ImportError, ValueError) as exc:
        fallbacks[name] = _unbuilt_tree() or (
            f"tinycoro.{name} is not available ({type(exc).__name__}: {exc})"
        )
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
