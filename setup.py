"""Build the optional compiled modules (everything else is in pyproject.toml): the ring,
``tinycoro._cring``; the per-thread state, ``tinycoro._clocal``; the page-cache read,
``tinycoro._cfile``.

The ring includes the header ``liburing.h`` that the ``liburing`` binding bundles (its inline
helpers and the kernel's structs; nothing is linked, and the built ring imports no module of
the binding), so it needs Cython and liburing at build time (both are in ``[build-system]
requires``). It is optional: when Cython, the binding or the C compiler is missing, or the
compile fails, the install still succeeds and tinycoro runs on the pure-Python ring
(``tinycoro.uring.COMPILED`` is then False). The build says so on stderr. ``_clocal`` and
``_cfile`` need only Cython and libc; without them ``tinycoro.core.local`` uses a
``threading.local`` and ``tinycoro.io`` calls ``os.preadv``.

``TINYCORO_PURE=1`` builds none of them: the same variable that forces the pure-Python runtime
when tinycoro runs. Its name is defined once, in ``tinycoro/compiled.py``, which is loaded here
from the source tree (it imports only the standard library).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

SOURCE = os.path.join("tinycoro", "_cring.pyx")
# Every module built here declares that it runs without the GIL (Cython >= 3.1): on a
# free-threaded CPython, importing one that does not turns the GIL back on for the whole
# process. What makes that declaration true is docs/design.md's synchronisation rules; on a
# GIL build the directive changes nothing.
DIRECTIVES = {"freethreading_compatible": True}
# The same declaration as a C macro, which Cython's output honours over the directive: a .c
# left in the tree by a build from before the directive (cythonize regenerates it only when
# its source changes) declares it too.
MACROS = [
    ("CYTHON_FREETHREADING_COMPATIBLE", "1"),
    # Module globals (``_local``, ``YIELD``, a class a hot path names) read through a cache
    # keyed by the module dict's version tag, which Cython uses by default only before 3.12:
    # there each read was a dict lookup. CPython 3.12 and 3.13 still maintain the tag
    # (deprecated, PEP 699); 3.14 dropped it, and on the free-threaded build Cython turns the
    # cache off itself.
    ("CYTHON_USE_DICT_VERSIONS", "(PY_VERSION_HEX < 0x030E0000)"),
]
# Plain Cython + libc: these need no binding.
PLAIN_SOURCES = {
    "tinycoro._clocal": os.path.join("tinycoro", "_clocal.pyx"),
    "tinycoro._cfile": os.path.join("tinycoro", "_cfile.pyx"),
}
# Hot modules compiled from their own .py source, each with an augmenting .pxd beside it that
# declares its classes and hot attributes (rule 14 of docs/design.md, as python-zeroconf and yarl do).
# Where they are not built, the .py runs interpreted; ``tinycoro.compiled.SOURCE_MODULES`` is
# the list, shared with the run-time switch.


def _compiled_module() -> ModuleType:
    """``tinycoro/compiled.py`` of this source tree, without importing the package."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tinycoro", "compiled.py")
    spec = importlib.util.spec_from_file_location("_tinycoro_compiled_at_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _warn(msg: str) -> None:
    sys.stderr.write(f"tinycoro: {msg}; installing with the pure-Python ring\n")


def _liburing_dir() -> str | None:
    """The installed binding's package directory, without importing it."""
    spec = importlib.util.find_spec("liburing")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


class OptionalBuildExt(build_ext):
    """build_ext that compiles the extensions in parallel, reports a failed compile and carries
    on without that extension, and records what each built module was compiled from.

    A failed extension is dropped from ``self.extensions``, so that an editable install does
    not then try to copy its missing library into the source tree, and no output lists it. The
    C compiles run one per core: they are most of an install's time (a dozen Cython modules).
    """

    def build_extensions(self) -> None:
        extensions: list = getattr(self, "extensions")  # untyped in setuptools' stubs
        self.check_extensions_list(extensions)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # gcc runs outside the GIL
            errors = list(pool.map(self._try_build, extensions))
        failed = set()
        for ext, error in zip(extensions, errors):
            if error is not None:
                sys.stderr.write(f"tinycoro: building {ext.name} failed ({type(error).__name__}: "
                                 f"{error}); it runs interpreted\n")
                failed.add(ext.name)
        # A compiled module checks the compiled types of the modules its .pxd cimports when it
        # is imported: where one of them failed, it must run interpreted too. Its library was
        # built alongside, so it is removed, or a wheel would still ship it.
        dropped = True
        while dropped:
            dropped = False
            for ext in extensions:
                missing = _cimports(ext.name) & failed
                if missing and ext.name not in failed:
                    sys.stderr.write(f"tinycoro: not using {ext.name}: {sorted(missing)} failed\n")
                    failed.add(ext.name)
                    dropped = True
        for ext in extensions:
            path = self.get_ext_fullpath(ext.name)
            if ext.name in failed and os.path.exists(path):
                os.remove(path)
        self.extensions = [ext for ext in extensions if ext.name not in failed]

    def run(self) -> None:
        super().run()
        self._write_build_record()

    def _write_build_record(self) -> None:
        """Write this Python's entry of ``tinycoro/_built_from.json`` (``compiled.build_key``):
        each built module's name -> the hash of its source when the build began
        (``_HASHED_BEFORE_BUILD``, ``compiled.source_hash``). The run time judges an in-place build stale by it, never by file times, which an install
        rewrites. It goes beside the built modules in
        the build folder (so a wheel carries it) and, for an in-place or editable build, into
        the source tree too."""
        compiled = _compiled_module()
        source_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tinycoro")
        record = {
            ext.name: _HASHED_BEFORE_BUILD[ext.name]
            for ext in getattr(self, "extensions")
            if ext.name.startswith("tinycoro.")
        }
        folders = {os.path.join(self.build_lib, "tinycoro")}
        if self.inplace:
            folders.add(source_dir)
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, compiled.BUILD_RECORD)
            # other Pythons' builds in the same tree keep their entries (compiled.build_key)
            builds = compiled.read_build_records(path)
            builds[compiled.build_key()] = record
            with open(path, "w") as f:
                f.write(json.dumps(builds, indent=1, sort_keys=True) + "\n")

    def _try_build(self, ext: Any) -> Exception | None:
        try:
            self.build_extension(ext)
        except Exception as e:  # noqa: BLE001 - any compiler failure means: that module runs interpreted
            args = ext.extra_compile_args
            if _TLS_DIALECT not in args:
                return e
            # A compiler that refuses the flag (clang before 19) builds _clocal without it:
            # every compiled hot module cimports _clocal, so without it none would be used.
            ext.extra_compile_args = [a for a in args if a != _TLS_DIALECT]
            return self._try_build(ext)
        return None


def _cimports(name: str) -> set[str]:
    """The modules of this package that *name*'s .pxd cimports: a compiled module checks their
    compiled types at import, so it is built only with them. The parser is the build record's
    (``compiled.cimported``), so the two never disagree on what a module depends on."""
    pxd = os.path.join(*name.split(".")) + ".pxd"
    if not os.path.exists(pxd):
        return set()
    with open(pxd, encoding="utf-8") as f:
        return _compiled_module().cimported(name, f.read())


#: Each compiled module's source hash, taken before cythonize reads any source: the build
#: record holds these, so a source edited while the build runs is recorded as it was when it
#: was compiled, and the edit makes the build stale (hashed after the compile, the record
#: vouched for code the build never saw).
_HASHED_BEFORE_BUILD: dict[str, str] = {}
#: The modules whose source (``compiled.source_files``: with the .pxd files they cimport) is not
#: what this Python's last build recorded: cythonize regenerates their C whatever the file times
#: say. Its own scan misses a ``from . cimport fence``, so a changed header-only .pxd left the
#: old C of its dependants in place.
_FORCE: set[str] = set()


def _extensions() -> list:
    compiled = _compiled_module()
    var = compiled.pure_requested()
    if var is not None:
        _warn(f"{var} is set")
        return []
    source_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tinycoro")
    for ext_name in (*PLAIN_SOURCES, "tinycoro._cring", *compiled.SOURCE_MODULES):
        _HASHED_BEFORE_BUILD[ext_name] = compiled.source_hash(source_dir, ext_name)
    record = compiled.read_build_records(os.path.join(source_dir, compiled.BUILD_RECORD))
    _FORCE.update(compiled.stale_modules(source_dir, record.get(compiled.build_key(), {})))
    return _ring_extension() + _plain_extensions() + _source_extensions()


# _clocal's thread-locals through TLS descriptors (its C says why) on x86-64; other targets keep
# their default (aarch64's is descriptors already). gcc takes the flag, clang only from 19 on:
# where the compiler refuses it, _clocal is built without it (OptionalBuildExt._try_build).
# glibc before 2.40 does not keep vector registers across a descriptor's slow path (its
# BZ #31372): harmless here, as none of _clocal's functions that reach a thread-local uses one
# (objdump of gcc 12's builds for 3.10 to 3.13 and 3.13t).
_TLS_DIALECT = "-mtls-dialect=gnu2"
_TLS_ARGS = {"tinycoro._clocal": (_TLS_DIALECT,)} if platform.machine() == "x86_64" else {}


def _plain_extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []  # _ring_extension said so (or the binding was missing first)
    from setuptools import Extension

    out = []
    for name, source in PLAIN_SOURCES.items():
        ext = Extension(name, [source], extra_compile_args=["-O2", *_TLS_ARGS.get(name, ())],
                        define_macros=MACROS, optional=True)
        try:
            out += cythonize([ext], quiet=True, compiler_directives=DIRECTIVES, force=name in _FORCE)
        except Exception as e:  # noqa: BLE001 - that module's pure-Python fallback is used
            sys.stderr.write(f"tinycoro: cythonizing {source} failed ({type(e).__name__}: {e})\n")
    return out


def _source_extensions() -> list:
    """The hot modules, compiled from their .py with the .pxd beside each; each one on its own,
    so that one that fails to cythonize or compile leaves the others compiled."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []  # _ring_extension said so
    from setuptools import Extension

    out = []
    skipped: set[str] = set()  # and with them every module whose .pxd cimports one of them
    for name in _compiled_module().SOURCE_MODULES:
        source = os.path.join(*name.split(".")) + ".py"
        if _cimports(name) & skipped:
            skipped.add(name)
            continue
        if not os.path.exists(source[:-3] + ".pxd"):
            # Compiled without its declarations, a module is slower than interpreted (DESIGN
            # rule 14): an sdist that lost the .pxd builds it not at all.
            sys.stderr.write(f"tinycoro: {source[:-3]}.pxd is missing; {name} runs interpreted\n")
            skipped.add(name)
            continue
        ext = Extension(name, [source], extra_compile_args=["-O2"], define_macros=MACROS,
                        optional=True)
        try:
            out += cythonize(
                [ext],
                quiet=True,
                force=name in _FORCE,
                # The .pxd declares the types; annotations stay Python's: typed by them, a
                # ``flag: bool`` parameter would take 1 silently and skip the check that
                # refuses it (rule 11), an ``int`` one would refuse with Cython's message.
                compiler_directives={"language_level": "3", "annotation_typing": False, **DIRECTIVES},
            )
        except Exception as e:  # noqa: BLE001 - that module runs interpreted
            sys.stderr.write(f"tinycoro: cythonizing {source} failed ({type(e).__name__}: {e})\n")
            skipped.add(name)
    return out


def _ring_extension() -> list:
    pkg = _liburing_dir()
    if pkg is None:
        _warn("the liburing binding is not importable at build time")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed at build time")
        return []
    from setuptools import Extension

    ext = Extension(
        "tinycoro._cring",
        [SOURCE],
        # the header only: _cring.pyx includes "liburing.h" (build time, not run time)
        include_dirs=[os.path.join(pkg, "include")],
        extra_compile_args=["-O2"], define_macros=MACROS,
        optional=True,
    )
    try:
        return cythonize([ext], quiet=True, compiler_directives=DIRECTIVES,
                         force="tinycoro._cring" in _FORCE)
    except Exception as e:  # noqa: BLE001 - a Cython error also means: no compiled ring
        _warn(f"cythonizing {SOURCE} failed ({type(e).__name__}: {e})")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
