"""Running coroutines on the peers: asyncio's default loop and uvloop, and what is installed;
uringio in a virtual environment of its own (it needs Python >= 3.12)."""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Coroutine

import tinycoro as tc

from .config import BUILD_DIR, REPO

ASYNCIO = "asyncio"
UVLOOP = "uvloop"


def missing(module: str) -> str | None:
    """None if *module* can be imported, else a skip reason naming the extra to install."""
    if importlib.util.find_spec(module) is None:
        return f"{module} not installed (pip install -e '.[bench]')"
    return None


def run_on(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """Run *coro* to completion on a fresh event loop of kind *loop* ("asyncio" or "uvloop")."""
    if loop == ASYNCIO:
        return asyncio.run(coro)
    if loop == UVLOOP:
        import uvloop

        return uvloop.run(coro)  # a uvloop.Loop from uvloop's own loop factory
    raise ValueError(loop)


def run_tc(coro: Coroutine[Any, Any, Any], contexts: int) -> Any:
    """Run *coro* on a fresh tinycoro Scheduler with *contexts* contexts."""
    return tc.run(coro, contexts=contexts)


# -- uringio -------------------------------------------------------------------------------------
URINGIO = "uringio"
URINGIO_VENV = BUILD_DIR / "uringio-venv"
_uringio: tuple[str | None, str | None] | None = None


def _python312() -> str | None:
    """A Python >= 3.12 interpreter: $TINYCORO_BENCH_PY312, this one, one on PATH, or pyenv's."""
    if os.environ.get("TINYCORO_BENCH_PY312"):
        return os.environ["TINYCORO_BENCH_PY312"]
    if sys.version_info >= (3, 12):
        return sys.executable
    # 3.12 first: uringio 0.4.4 ships wheels for it (it fails to build on 3.13 here)
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", "3.1[2-9]*", "bin", "python3")))
    for name in ("python3.12", "python3.13"):
        path = shutil.which(name)
        if path and "/shims/" not in path:  # a pyenv shim fails unless a version is selected
            found.append(path)
    return found[0] if found else None


def uringio_python(create: bool = True) -> tuple[str | None, str | None]:
    """(python, None) for a virtual environment that has uringio, made on first use in
    ``build/benchmarks/uringio-venv`` (only an existing one with ``create=False``); or (None,
    why it cannot be had). The first answer holds for the rest of the run."""
    global _uringio
    if _uringio is None:
        _uringio = _make_uringio_venv(create)
    return _uringio


def _make_uringio_venv(create: bool) -> tuple[str | None, str | None]:
    py = URINGIO_VENV / "bin" / "python"
    probe = [str(py), "-c", "import uringio"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(py), None
    if not create:
        return None, "uringio's virtual environment is made by full and --quick runs only"
    base = _python312()
    if base is None:
        return None, "uringio needs Python >= 3.12 and none was found (set TINYCORO_BENCH_PY312)"
    try:
        URINGIO_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([base, "-m", "venv", "--clear", str(URINGIO_VENV)], check=True,
                       capture_output=True, text=True, timeout=300)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "uringio"], check=True,
                       capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", None) or str(e)
        lines = [ln for ln in str(err).strip().splitlines() if not ln.startswith("WARNING")]
        return None, f"uringio could not be installed: {(lines or ['?'])[-1][:160]}"
    if subprocess.run(probe, capture_output=True).returncode != 0:
        return None, "uringio installed but does not import"
    return str(py), None


# -- other Python versions -----------------------------------------------------------------------
def pyenv_python(version: str) -> str | None:
    """pyenv's interpreter of *version* (``"3.12"``: its newest 3.12.x), or None."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python3"))
    found = [p for p in found if os.path.basename(os.path.dirname(os.path.dirname(p)))[len(version) + 1 :].isdigit()]
    found.sort(key=lambda p: int(os.path.basename(os.path.dirname(os.path.dirname(p))).rsplit(".", 1)[1]))
    return found[-1] if found else None


# -- the free-threaded build -------------------------------------------------------------------
FREE_THREADED = "3.13t"  # the version name of the free-threaded build (``--python 3.13t``)


def is_free_threaded() -> bool:
    """Whether this interpreter is a free-threaded build (whether or not its GIL is on now)."""
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _ft_cache() -> Path:
    """Where tools/build_freethreaded_python.sh and .ci/run keep the free-threaded build and
    its binding wheel."""
    return Path(os.environ.get("TINYCORO_FT_CACHE") or os.path.expanduser("~/.cache/tinycoro"))


def freethreaded_base() -> tuple[str | None, str | None]:
    """(python, None) for the cached free-threaded CPython 3.13 that
    ``tools/build_freethreaded_python.sh`` builds (under ``$TINYCORO_FT_CACHE`` or
    ``~/.cache/tinycoro``); or (None, why not). A benchmark run never builds it: that takes
    minutes and root (a deb-src entry)."""
    cache = _ft_cache()
    py = cache / "python3.13t-release" / "bin" / "python3.13t"
    if not os.access(py, os.X_OK):
        return None, (f"no free-threaded Python 3.13 at {py} (build it once with "
                      "tools/build_freethreaded_python.sh, about 6 minutes)")
    return str(py), None


def _freethreaded_install(py: Path, repo: str) -> None:
    """Install this checkout compiled into the free-threaded venv *py* as ``.ci/run``'s
    ``ft_install`` does: the liburing binding from its free-threading wheel (built once into
    the shared cache with Cython's free-threading flag, else it declares nothing and importing
    it turns the GIL back on), then tinycoro without build isolation (an isolated build would
    build the binding once more). The peers' extras are not installed: uvloop and pyzmq have no
    3.13t wheels and do not build offline; their rows say they are missing."""
    cache = _ft_cache()
    wheels = cache / "wheels-ft"
    pip = [str(py), "-m", "pip", "install", "-q"]
    run = dict(check=True, capture_output=True, text=True, timeout=3600, cwd=repo)
    subprocess.run(pip + ["hypothesis<=6.150.0", "Cython>=3.1", "setuptools>=64"], **run)  # type: ignore[call-overload]
    found = sorted(wheels.glob("liburing-2024.5.3-*cp313t*.whl"))
    if not found:
        env = dict(os.environ, CFLAGS="-DCYTHON_FREETHREADING_COMPATIBLE=1")
        subprocess.run([str(py), "-m", "pip", "wheel", "-q", "--no-cache-dir", "--no-deps", "-w", str(wheels),
                        "liburing==2024.5.3"], env=env, **run)  # type: ignore[call-overload]
        found = sorted(wheels.glob("liburing-2024.5.3-*cp313t*.whl"))
    subprocess.run(pip + [str(found[-1])], **run)  # type: ignore[call-overload]
    subprocess.run(pip + ["--no-build-isolation", "-e", repo], **run)  # type: ignore[call-overload]


def _interpreted(py: Path) -> bool:
    """Whether tinycoro runs (partly) interpreted on *py*: a stale or missing build."""
    probe = "import sys, tinycoro.compiled as c; sys.exit(3 if c.fallbacks else 0)"
    return subprocess.run([str(py), "-c", probe], capture_output=True, cwd="/").returncode == 3


def _version_tuple(version: str) -> tuple[int, int]:
    """``"3.10"`` -> (3, 10); ``"3.13t"`` -> (3, 13)."""
    major, minor = version.rstrip("t").split(".")[:2]
    return int(major), int(minor)


def version_venv(version: str) -> Path:
    """Where the virtual environment for Python *version* lives (git-ignored)."""
    return BUILD_DIR / f"py{version}-venv"


def version_python(version: str, create: bool = True) -> tuple[str | None, str | None]:
    """(python, None) for a virtual environment of Python *version* with this checkout of
    tinycoro installed in it (editable, compiled for that version: the extension modules of
    each version sit side by side in the source tree) and the peers (``.[bench,cluster]``; on
    3.10 ``.[bench]`` alone: the cluster's ipykernel >= 7.4 needs 3.11, so 3.10's cluster rows
    are skipped), made on first use in ``build/benchmarks/py<version>-venv`` (only an existing one with
    ``create=False``); or (None, why it cannot be had). ``"3.13t"`` is the free-threaded build
    (:func:`freethreaded_base`), with tinycoro alone.
    A build that fell back to the interpreted source still runs: the report's machine table
    says which modules run compiled.
    """
    ft = version == FREE_THREADED
    py = version_venv(version) / "bin" / "python"
    probe = [str(py), "-c", "import tinycoro" if ft else "import tinycoro, uvloop"]
    if py.exists() and subprocess.run(probe, capture_output=True, cwd="/").returncode == 0:
        if ft and create and _interpreted(py):
            # the checkout changed since the build (a merge): a free-threaded figure of the
            # interpreted runtime would be compared against the compiled one of the GIL build
            repo = str(REPO)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-build-isolation", "-e", repo],
                           capture_output=True, text=True, timeout=3600, cwd=repo)
        return str(py), None
    if not create:
        return None, f"no Python {version} environment yet (full and --quick runs make it: build/benchmarks/py{version}-venv)"
    if ft:
        base, why = freethreaded_base()
        if base is None:
            return None, why
    else:
        base = pyenv_python(version)
    if base is None:
        return None, f"no Python {version} found under pyenv's versions (~/.pyenv/versions/{version}.*)"
    repo = str(REPO)
    try:
        py.parent.parent.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([base, "-m", "venv", "--clear", str(py.parent.parent)], check=True,
                       capture_output=True, text=True, timeout=300)
        if ft:
            _freethreaded_install(py, repo)
        else:
            extras = "bench" if _version_tuple(version) < (3, 11) else "bench,cluster"
            subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", f"{repo}[{extras}]"], check=True,
                           capture_output=True, text=True, timeout=3600, cwd=repo)
    except (OSError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", None) or str(e)
        lines = [ln for ln in str(err).strip().splitlines() if not ln.startswith("WARNING")]
        return None, f"Python {version}'s environment could not be made: {(lines or ['?'])[-1][:200]}"
    res = subprocess.run(probe, capture_output=True, text=True, cwd="/")
    if res.returncode != 0:
        return None, f"tinycoro installed on Python {version} but does not import: {res.stderr.strip()[-200:]}"
    return str(py), None
