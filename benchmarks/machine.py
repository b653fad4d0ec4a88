"""A description of the machine and software a run was measured on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata

PACKAGES = ("tinycoro", "liburing", "uvloop", "aiofiles", "matplotlib")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _nproc() -> str:
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(os.cpu_count())


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if not gcc:
        return "not found"
    try:
        out = subprocess.run([gcc, "--version"], capture_output=True, text=True, check=True).stdout
        return out.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def _runtime() -> str:
    """Which of tinycoro's modules run compiled: a run on a Python whose build fell back to
    the interpreted source measures something else, and must say so."""
    import tinycoro  # noqa: F401 - loads the runtime, compiled or not
    from tinycoro import compiled

    return compiled.describe()


def describe() -> list[tuple[str, str]]:
    """(name, value) pairs: CPU, cores, kernel, Python, packages, compiler."""
    rows = [
        ("CPU", _cpu_model()),
        ("cores (nproc)", _nproc()),
        ("kernel", platform.release()),
        ("io_uring_disabled", _read("/proc/sys/kernel/io_uring_disabled")),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
    ]
    rows += [(p, _version(p)) for p in PACKAGES]
    rows.append(("tinycoro runtime", _runtime()))
    rows.append(("gcc (echo_load -O2)", _gcc()))
    return rows


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages: the machine is shared, this shows how busy it was."""
    return _read("/proc/loadavg").rsplit(" ", 2)[0]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "n/a"
