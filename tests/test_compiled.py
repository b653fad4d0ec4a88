"""tinycoro.compiled: the one place that chooses compiled or pure-Python modules, and says why."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import types
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import tinycoro
from tinycoro import compiled


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"TINYCORO_PURE": "0"}, None),
        ({"TINYCORO_PURE": ""}, None),
        ({"TINYCORO_PURE": "1"}, "TINYCORO_PURE"),
        ({"TINYCORO_PURE_RING": "1"}, "TINYCORO_PURE_RING"),  # deprecated names still work
        ({"TINYCORO_NO_EXTENSION": "1"}, "TINYCORO_NO_EXTENSION"),
        ({"TINYCORO_PURE": "1", "TINYCORO_PURE_RING": "1"}, "TINYCORO_PURE"),
    ],
)
def test_pure_requested_reads_the_one_variable_and_its_deprecated_names(env, expected):
    assert compiled.pure_requested(env) == expected


def test_a_binary_mismatch_falls_back_and_says_why(tmp_path, monkeypatch):
    for var in (compiled.PURE_VAR, *compiled.DEPRECATED_VARS):  # this run may be a pure one
        monkeypatch.delenv(var, raising=False)
    # What Cython raises when a cimported type changed size under a built module is a
    # ValueError, not an ImportError; the loader must fall back on it too. A real module that
    # raises it at import stands for such a binary here.
    (tmp_path / "_mismatched.py").write_text(
        "raise ValueError('tinycoro._mismatched.X size changed, may indicate binary incompatibility')\n"
    )
    (tmp_path / "_missing_symbol.py").write_text("raise ImportError('undefined symbol: io_uring_x')\n")
    tinycoro.__path__.append(str(tmp_path))
    try:
        assert compiled.load("_mismatched") is None
        assert compiled.load("_missing_symbol") is None
        assert "binary incompatibility" in compiled.fallbacks["_mismatched"]
        assert "ValueError" in compiled.fallbacks["_mismatched"]
        assert "undefined symbol" in compiled.fallbacks["_missing_symbol"]
        assert "_mismatched" in compiled.describe()
    finally:
        tinycoro.__path__.remove(str(tmp_path))
        for name in ("_mismatched", "_missing_symbol"):
            compiled.fallbacks.pop(name, None)
            sys.modules.pop(f"tinycoro.{name}", None)


def test_every_compiled_module_in_use_is_recorded():
    # Each of the three modules is either loaded or has a reason; uring's names agree.
    from tinycoro import uring

    for name in ("_cring", "_clocal", "_cfile"):
        assert (compiled.load(name) is None) == (name in compiled.fallbacks)
    assert uring.COMPILED == ("_cring" not in compiled.fallbacks)
    assert uring.WHY_PURE == compiled.fallbacks.get("_cring")


@pytest.mark.timeout(60)
def test_the_variable_makes_every_module_pure_and_the_record_says_so():
    code = textwrap.dedent(
        """
        import sys
        import tinycoro, tinycoro.io.pagecache as pagecache
        from tinycoro import compiled, uring
        from tinycoro.core import local
        print(uring.COMPILED, local.COMPILED, pagecache.pread_nowait is pagecache.pread_nowait_py)
        print(sorted(compiled.fallbacks.items()))
        print(compiled.describe())
        print([compiled.is_compiled(sys.modules[n]) for n in compiled.SOURCE_MODULES])
        print([sys.modules[n].__file__.endswith(".py") for n in compiled.SOURCE_MODULES])
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYCORO_")}
    env["TINYCORO_PURE"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "False False True"
    names = sorted(("_cfile", "_clocal", "_cring", *compiled.SOURCE_MODULES))
    assert lines[1] == str([(n, "TINYCORO_PURE is set") for n in names])
    assert lines[2] == "pure-Python runtime (TINYCORO_PURE is set)"
    # the modules compiled from their .py run from the .py, even where a build lies beside it
    assert lines[3] == str([False] * len(compiled.SOURCE_MODULES))
    assert lines[4] == str([True] * len(compiled.SOURCE_MODULES))


def test_every_module_compiled_from_source_is_recorded():
    # Each hot module compiled from its .py (rule 14) is recorded as compiled, or as
    # interpreted with the reason; the record agrees with the module actually imported.
    assert compiled.SOURCE_MODULES
    for name in compiled.SOURCE_MODULES:
        module = sys.modules[name]  # import tinycoro imported every one of them
        if compiled.is_compiled(module):
            assert name not in compiled.fallbacks
            assert name in compiled.describe() or "except" not in compiled.describe()
        else:
            assert name in compiled.fallbacks, name
            assert module.__file__.endswith(".py")


def test_frame_based_modules_are_never_compiled():
    # Interrupt protection walks Python frames (rule 12): a compiled frame-walker, or a
    # compiled module whose frames it must see, would silently change where a signal lands.
    assert "tinycoro.core.ki" not in compiled.SOURCE_MODULES
    assert not any(n.startswith("tinycoro.kernel_ext") for n in compiled.SOURCE_MODULES)


@pytest.mark.timeout(60)
def test_the_compiled_ring_imports_without_tinycoro_uring():
    # No import cycle: _cring takes what it shares with the pure ring from tinycoro._ringdefs.
    # The child imports it under a bare package, with tinycoro.uring blocked.
    if "_cring" in compiled.fallbacks:
        pytest.skip(f"compiled ring not in use: {compiled.fallbacks['_cring']}")
    code = textwrap.dedent(
        f"""
        import sys, types
        pkg = types.ModuleType("tinycoro")
        pkg.__path__ = [{os.path.dirname(tinycoro.__file__)!r}]
        sys.modules["tinycoro"] = pkg
        sys.modules["tinycoro.uring"] = None  # importing it now raises ImportError
        import tinycoro._cring as c
        print(c.RingCore.__name__, sorted(m for m in sys.modules if m.startswith("tinycoro")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.split(" ", 1) == ["RingCore", "['tinycoro', 'tinycoro._cring', 'tinycoro._ringdefs', 'tinycoro.uring']\n"]


def _fake_build(package: Path, name: str, source: str) -> None:
    """Lay out *name*'s source and an (empty) built module under *package*, tinycoro's folder."""
    base = package.joinpath(*name.split(".")[1:])
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_name(base.name + ".py").write_text(source)
    base.with_name(base.name + importlib.machinery.EXTENSION_SUFFIXES[0]).write_bytes(b"")


def _built_checkout(root: Path) -> tuple[Path, str, Path]:
    """A checkout at *root* (setup.py and pyproject.toml beside the package) with the first
    source module built from ``x = 1``: its package folder, module name and source file."""
    (root / "setup.py").write_text("")
    (root / "pyproject.toml").write_text("")
    package = root / "tinycoro"
    name = compiled.SOURCE_MODULES[0]
    _fake_build(package, name, "x = 1\n")
    return package, name, package.joinpath(*name.split(".")[1:]).with_suffix(".py")


def _record(package: Path, **hashes: str) -> None:
    package.joinpath(compiled.BUILD_RECORD).write_text(json.dumps({compiled.build_key(): hashes}))


def test_a_source_tree_build_is_judged_by_the_hash_of_its_source_not_file_times(tmp_path):
    # In a checkout, a .so beside a .py that changed since the build would run code that is no
    # longer the source: the build is stale, and the reason names the command that rebuilds.
    package, name, source = _built_checkout(tmp_path)
    _record(package, **{name: compiled.source_hash(str(package), name)})
    os.utime(source, (4_000_000_000, 4_000_000_000))  # newer than the build: times say nothing
    assert compiled._judge_build(str(package)) is None
    source.write_text("x = 2\n")
    why = compiled._judge_build(str(package))
    assert why is not None and f"{name} changed since it was built" in why
    assert f"rebuild: cd {tmp_path} && python setup.py build_ext --inplace" in why
    package.joinpath(compiled.BUILD_RECORD).unlink()  # a build from before records existed
    why = compiled._judge_build(str(package))
    assert why is not None and f"{name} has no build record" in why


def test_each_python_is_judged_by_its_own_build_of_a_shared_source_tree(tmp_path):
    # Two Pythons build their modules side by side in one checkout (foo.cpython-311-*.so and
    # foo.cpython-312-*.so). A rebuild for one must not vouch for the other's older modules,
    # which would then run code that is no longer the source while calling themselves current.
    package, name, source = _built_checkout(tmp_path)
    old = compiled.source_hash(str(package), name)
    source.write_text("x = 2\n")
    new = compiled.source_hash(str(package), name)
    package.joinpath(compiled.BUILD_RECORD).write_text(json.dumps({
        compiled.build_key(): {name: old},  # this Python built before the edit
        ".cpython-399-other.so": {name: new},  # another one rebuilt since
    }))
    why = compiled._judge_build(str(package))
    assert why is not None and f"{name} changed since it was built" in why
    package.joinpath(compiled.BUILD_RECORD).write_text(json.dumps({name: new}))  # one record for all
    why = compiled._judge_build(str(package))
    assert why is not None and f"{name} has no build record" in why


def _editable_install_of(site: Path, root: Path) -> None:
    """A dist-info under *site* saying tinycoro is installed editable from *root*, with the
    URL written as pip writes it (``pip._internal.utils.urls.path_to_url``): percent-encoded."""
    info = site / "tinycoro-0.1.0.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: tinycoro\nVersion: 0.1.0\n")
    url = urllib.parse.urljoin("file:", urllib.request.pathname2url(str(root)))
    assert "%20" in url and "%C3%A9" in url  # what the comparison used to miss
    info.joinpath("direct_url.json").write_text(
        json.dumps({"url": url, "dir_info": {"editable": True}})
    )


def test_the_rebuild_command_of_a_checkout_under_a_path_with_a_space_and_an_accent(
    tmp_path, monkeypatch
):
    # pip percent-encodes direct_url.json's URL; the command must be quoted for the shell.
    root = tmp_path / "my checkout é"
    root.mkdir()
    command = compiled._rebuild_command(str(root))  # not installed from there: build in place
    assert shlex.split(command) == [
        "cd", str(root), "&&", "python", "setup.py", "build_ext", "--inplace"
    ], command
    site = tmp_path / "site"
    _editable_install_of(site, root)
    monkeypatch.syspath_prepend(str(site))
    command = compiled._rebuild_command(str(root))
    assert shlex.split(command) == ["pip", "install", "-e", str(root)], command


def test_an_installed_build_trusts_itself(tmp_path):
    # Installed (no checkout around the package), a build has no source to fall behind: an
    # install writes the .py files after the built modules, and no record is compared.
    package = tmp_path / "site-packages" / "tinycoro"
    name = compiled.SOURCE_MODULES[0]
    _fake_build(package, name, "x = 1\n")
    _record(package, **{name: "not the hash of anything"})
    assert compiled._judge_build(str(package)) is None


@pytest.mark.timeout(120)
@pytest.mark.skipif(bool(compiled.fallbacks), reason="this environment's build does not run compiled")
def test_a_fresh_non_editable_install_runs_compiled(tmp_path):
    # What `pip install .` and a wheel do to the package: its files copied into site-packages,
    # the .py files written after the built modules. Run from elsewhere, that copy must report
    # the compiled runtime, with no fallback.
    site = tmp_path / "site-packages"
    source = Path(tinycoro.__file__).parent
    shutil.copytree(source, site / "tinycoro", ignore=shutil.ignore_patterns("__pycache__", "*.c"))
    later = time.time() + 60
    for py in (site / "tinycoro").rglob("*.py"):
        os.utime(py, (later, later))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYCORO_")}
    env["PYTHONPATH"] = str(site)
    code = "import tinycoro, tinycoro.compiled as c; print(tinycoro.__file__); print(c.describe())"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == [str(site / "tinycoro" / "__init__.py"), "compiled runtime"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pure", [False, True], ids=["as-built", "pure"])
def test_the_demo_says_which_runtime_runs_in_its_first_line(pure):
    # README command 1's first line is where a user learns the install fell back to the
    # pure-Python runtime (no compiler, no Cython, a stale build): it is compiled.describe().
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYCORO_")}
    if pure:
        env["TINYCORO_PURE"] = "1"
    args = ["-n", "1", "--files", "1", "--file-kib", "4", "--clients", "1", "--rounds", "1", "--timers", "1"]
    out = subprocess.run([sys.executable, "-m", "tinycoro", *args], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    first = out.stdout.splitlines()[0]
    if pure:
        expected = "pure-Python runtime (TINYCORO_PURE is set)"
    else:  # what an import in the same environment says (this process may run pure)
        code = "import tinycoro, tinycoro.compiled as c; print(c.describe())"
        expected = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
    assert first.endswith(", " + expected), first


def test_every_compiled_module_that_imports_fence_cimports_it_too():
    # ``if fence.FREE_THREADED: fence.full()`` compiles to nothing under the GIL only where
    # the module's .pxd cimports fence (its names are then C macros); without it, every
    # such line is a module global lookup, an attribute lookup and a truth test, compiled.
    import re

    root = Path(__file__).resolve().parents[1]
    for name in compiled.SOURCE_MODULES:
        source = (root / Path(*name.split("."))).with_suffix(".py")
        if not re.search(r"^from \.+(core )?import fence$", source.read_text(), re.M):
            continue
        pxd = source.with_suffix(".pxd").read_text()
        assert re.search(r"^from \.+(core )?cimport fence$", pxd, re.M), name


def test_every_augmenting_pxd_ships_in_the_sdist_and_the_wheel():
    # setup.py compiles a module only with its .pxd beside it (without, it is slower than
    # interpreted), so a .pxd the package data leaves out makes every install from the sdist
    # or a wheel run that module interpreted. pyproject.toml's package-data must match them all.
    import fnmatch

    try:
        import tomllib
    except ImportError:  # Python 3.10
        pytest.skip("tomllib is Python 3.11+")
    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for name in compiled.SOURCE_MODULES:
        package, _, leaf = name.rpartition(".")
        patterns = data.get("*", []) + data.get(package, [])
        assert any(fnmatch.fnmatch(leaf + ".pxd", p) for p in patterns), (name, patterns)
        assert (root / Path(*name.split("."))).with_suffix(".pxd").exists(), name


def _setup_py(monkeypatch) -> dict:
    """setup.py's globals, loaded without building anything. Its build command is what the
    callers test; a venv that got tinycoro from a wheel (pip builds in an isolated
    environment) has no setuptools to load it with: they are skipped there."""
    import runpy

    setuptools = pytest.importorskip("setuptools")
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    monkeypatch.delenv(compiled.PURE_VAR, raising=False)
    monkeypatch.setattr(setuptools, "setup", lambda **kw: kw)  # load setup.py, build nothing
    return runpy.run_path(str(root / "setup.py"))


@pytest.mark.timeout(300)
def test_the_build_record_holds_the_source_as_it_was_when_the_build_began(tmp_path, monkeypatch):
    # A source edited while a build runs (cythonize has read it, the C compiler is busy) must
    # leave that build stale: the record holds the hash taken before the build read anything,
    # not one taken after the compile, which would vouch for code the build never saw.
    setuptools = pytest.importorskip("setuptools")  # (a venv from a wheel has none: _setup_py)

    root = Path(__file__).resolve().parent.parent
    name = "tinycoro._cring"
    before = compiled.source_hash(str(root / "tinycoro"), name)
    build_ext = _setup_py(monkeypatch)["OptionalBuildExt"]
    # the source changes now, after the build began: every later look at it sees the edit
    at_build = build_ext._write_build_record.__globals__
    edited = at_build["_compiled_module"]()
    monkeypatch.setattr(edited, "source_hash", lambda *_a: "edited during the build")
    monkeypatch.setitem(at_build, "_compiled_module", lambda: edited)
    cmd = build_ext(setuptools.Distribution())
    cmd.extensions = [types.SimpleNamespace(name=name)]
    cmd.build_lib, cmd.inplace = str(tmp_path), False
    cmd._write_build_record()
    record = json.loads((tmp_path / "tinycoro" / compiled.BUILD_RECORD).read_text())
    assert record[compiled.build_key()] == {name: before}


@pytest.mark.timeout(300)
def test_a_compiler_that_refuses_the_tls_dialect_still_builds_clocal(monkeypatch):
    # _clocal asks for TLS descriptors on x86-64 (-mtls-dialect=gnu2), which gcc takes and
    # clang only from 19 on. Every compiled hot module cimports _clocal, so a compiler that
    # refused the flag must still build it, without the flag: failed, it took them all along.
    setuptools = pytest.importorskip("setuptools")  # (a venv from a wheel has none: _setup_py)
    from setuptools import Extension
    from setuptools.errors import CompileError

    ns = _setup_py(monkeypatch)
    flags = ns["_TLS_ARGS"].get("tinycoro._clocal", ())
    if not flags:
        pytest.skip("the TLS dialect is asked for on x86-64 only")
    built, tried = [], []

    def build_extension(ext):  # as clang 18 answers the flag; _cfile fails whatever it gets
        tried.append(list(ext.extra_compile_args))
        if ext.name != "tinycoro._clocal":
            raise CompileError("some other error")
        if any(a.startswith("-mtls-dialect") for a in ext.extra_compile_args):
            raise CompileError("unsupported argument 'gnu2' to option '-mtls-dialect='")
        built.append(ext.name)

    cmd = ns["OptionalBuildExt"](setuptools.Distribution())
    monkeypatch.setattr(cmd, "build_extension", build_extension)
    clocal = Extension("tinycoro._clocal", ["_clocal.c"], extra_compile_args=["-O2", *flags])
    assert cmd._try_build(clocal) is None
    assert built == ["tinycoro._clocal"] and clocal.extra_compile_args == ["-O2"]
    assert tried == [["-O2", *flags], ["-O2"]]
    # a module that fails for any other reason is tried once, and its error kept
    other = Extension("tinycoro._cfile", ["_cfile.c"], extra_compile_args=["-O2"])
    assert isinstance(cmd._try_build(other), CompileError)
    assert tried[2:] == [["-O2"]]


def _checkout_cimporting_headers(root: Path) -> Path:
    """A checkout at *root* whose built engine cimports header-only .pxd files the three ways
    the package writes it: ``from . cimport a, b``, ``from ..pkg cimport a`` and
    ``from .mod cimport Name``, with a second module that cimports the engine; its package."""
    (root / "setup.py").write_text("")
    (root / "pyproject.toml").write_text("")
    package = root / "tinycoro"
    _fake_build(package, "tinycoro.core.engine", "x = 1\n")
    _fake_build(package, "tinycoro.net.ops", "x = 1\n")
    core, net = package / "core", package / "net"
    core.joinpath("engine.pxd").write_text(
        "cimport cython\n# from . cimport not_a_dependency\n"
        "from . cimport fence, wakeword\nfrom .task cimport Task\n"
    )
    core.joinpath("task.pxd").write_text("cdef class Task:\n    cdef int x\n")
    core.joinpath("fence.pxd").write_text("cdef inline void fence() noexcept nogil:\n    pass\n")
    core.joinpath("wakeword.pxd").write_text("cdef struct Word:\n    int a\n")
    net.joinpath("ops.pxd").write_text(
        "from ..core.engine cimport Engine\nfrom ..core cimport fence\nfrom . cimport (\n    _nbsend,\n)\n"
    )
    net.joinpath("_nbsend.pxd").write_text("cdef inline int nbsend() noexcept:\n    return 0\n")
    return package


def test_the_recorded_sources_of_a_module_include_the_pxd_files_it_cimports(tmp_path):
    # A module compiled against a header-only .pxd (a struct's layout, an inline function) runs
    # that .pxd's old code until it is rebuilt: the .pxd is part of its source, directly and
    # through the modules it cimports, however the cimport is spelled.
    package = _checkout_cimporting_headers(tmp_path)
    core, net = package / "core", package / "net"
    rel = lambda name: sorted(  # noqa: E731
        os.path.relpath(p, package) for p in compiled.source_files(str(package), name)
    )
    assert rel("tinycoro.core.engine") == [
        "core/engine.pxd", "core/engine.py", "core/fence.pxd", "core/task.pxd", "core/wakeword.pxd",
    ]
    assert rel("tinycoro.net.ops") == [
        "core/engine.pxd", "core/fence.pxd", "core/task.pxd", "core/wakeword.pxd",
        "net/_nbsend.pxd", "net/ops.pxd", "net/ops.py",
    ]
    for header in (core / "wakeword.pxd", core / "fence.pxd", net / "_nbsend.pxd"):
        names = ["tinycoro.net.ops"] + (["tinycoro.core.engine"] if header.parent == core else [])
        before = {n: compiled.source_hash(str(package), n) for n in ("tinycoro.core.engine", "tinycoro.net.ops")}
        _record(package, **before)
        assert compiled._judge_build(str(package)) is None
        header.write_text(header.read_text() + "    int b\n")
        assert compiled.stale_modules(str(package), before) == set(names), header
        why = compiled._judge_build(str(package))
        assert why is not None and "changed since it was built" in why, header


def test_the_real_modules_record_the_header_only_pxd_files_they_cimport():
    package = Path(compiled.__file__).parent
    files = lambda name: {  # noqa: E731
        os.path.relpath(p, package) for p in compiled.source_files(str(package), name)
    }
    assert {"core/fence.pxd", "core/wakeword.pxd"} <= files("tinycoro.core.engine")
    assert {"net/_nbsend.pxd", "core/iterslots.pxd", "core/wakeword.pxd"} <= files("tinycoro.net.ops")
    assert {"_clocal.pxd", "_cfile.pxd", "core/fence.pxd"} <= files("tinycoro.io.file")
