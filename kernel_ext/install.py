"""Install a "Python 3 (tinycoro)" kernelspec: an ipykernel that loads the extension at start.

    python -m tinycoro.kernel_ext install [--user | --sys-prefix | --prefix DIR] [--name NAME]
                                [--display-name TEXT] [--contexts N] [--dispatch D]
                                [--python PATH [--force-gil-off]]
    python -m tinycoro.kernel_ext uninstall [--name NAME]

The kernel runs this interpreter (``sys.executable``), or ``--python PATH``, with
``--ext=tinycoro``, so every cell can ``await`` tinycoro awaitables without ``%load_ext``.
``--contexts``/``--dispatch`` go into the kernel's environment as
``TINYCORO_CONTEXTS``/``TINYCORO_DISPATCH``.

A free-threaded interpreter (3.13t) gets a kernel of its own, "tinycoro-ft", shown as "Python
3.13t (tinycoro, free-threaded)". Before writing anything the installer starts that interpreter
once and imports what the kernel imports (ipykernel, tinycoro, the extension): a module that
does not declare it can run without the GIL turns the GIL back on for the whole process, and
the installer then refuses, naming the module. ``--force-gil-off`` installs anyway with
``PYTHON_GIL=0`` in the kernel's environment, and says so in the kernel's display name.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Sequence

from tinycoro.compiled import FREE_THREADED
from tinycoro.core.checks import DISPATCH, check_contexts, check_dispatch

__all__ = [
    "DEFAULT_NAME", "DISPLAY_NAME", "EXTRA_ARGUMENTS", "FT_NAME", "Interpreter", "probe",
    "kernel_json", "install", "main",
]

DEFAULT_NAME = "tinycoro"
DISPLAY_NAME = "Python 3 (tinycoro)"
FT_NAME = "tinycoro-ft"  # a free-threaded kernel, beside the GIL one rather than in its place
EXTRA_ARGUMENTS = ["--ext=tinycoro"]  # appended to ipykernel's own launch command
# What the kernel imports before its first cell: the GIL must still be off after them.
KERNEL_MODULES = ("ipykernel.kernelapp", "ipykernel.ipkernel", "tinycoro", "tinycoro.kernel_ext.extension")

# Run in the kernel's interpreter: which of KERNEL_MODULES are missing, and which module (if
# any) turned the GIL on -- CPython names it in a RuntimeWarning as it loads the module. Its
# own reading of the build and the GIL, not tinycoro.compiled's: that interpreter may lack
# tinycoro, which is what the probe is there to report.
_PROBE = """
import importlib, json, sys, sysconfig, warnings
out = {"version": "%d.%d" % sys.version_info[:2], "missing": [], "warnings": [],
       "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED"))}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except ImportError as e:
            out["missing"].append(f"{name} ({e})")
out["warnings"] = [str(w.message) for w in caught]
out["gil"] = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
print(json.dumps(out))
"""
_GIL_WARNING = re.compile(r"interpreter lock \(GIL\) has been enabled to load module '([^']+)'")


@dataclass
class Interpreter:
    """What :func:`probe` found about a kernel's interpreter."""

    python: str
    version: str  # "3.13"
    free_threaded: bool
    gil: bool  # the GIL is on after importing what the kernel imports, no override
    gil_on_by: list[str]  # the modules that turned it on (free-threaded builds)

    def display_name(self, forced: bool) -> str:
        if not self.free_threaded:
            return DISPLAY_NAME
        gil = ", GIL forced off" if forced else ""
        return f"Python {self.version}t (tinycoro, free-threaded{gil})"


def probe(python: str, timeout: float = 120.0) -> Interpreter:
    """Start *python* once, without any ``PYTHON_GIL`` override, and import what the kernel
    imports. Raises ValueError when it is not a Python that has ipykernel and tinycoro."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    try:
        done = subprocess.run([python, "-c", _PROBE, *KERNEL_MODULES], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except OSError as e:
        raise ValueError(f"cannot run {python}: {e.strerror}") from None
    try:
        out = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ValueError(f"{python} is not a Python 3 interpreter: {done.stderr.strip()[-300:]}") from None
    if out["missing"]:
        raise ValueError(f"{python} cannot run the tinycoro kernel, it lacks "
                         f"{'; '.join(out['missing'])}: pip install ipykernel tinycoro there")
    # A module loaded at start-up (a .pth file, sitecustomize) warned on stderr, before the probe
    by = [m.group(1) for w in [*out["warnings"], done.stderr] for m in _GIL_WARNING.finditer(w)]
    return Interpreter(python, out["version"], out["free_threaded"], out["gil"], by)


def _check_gil(interp: Interpreter, force_gil_off: bool) -> dict[str, str]:
    """The environment the GIL needs: none when it stays off by itself (the goal: every module
    declares it runs without it); ``PYTHON_GIL=0`` only when asked and a module forces it on."""
    if force_gil_off and not (interp.free_threaded and interp.gil):
        raise ValueError(f"--force-gil-off: not needed, the GIL is already "
                         f"{'off' if interp.free_threaded else 'part of'} {interp.python}")
    if interp.free_threaded and interp.gil and not force_gil_off:
        by = ", ".join(interp.gil_on_by) or "a module the kernel imports"
        raise ValueError(
            f"in {interp.python} importing {by} turns the GIL back on (it does not declare it "
            "can run without it): rebuild it for free-threading, or pass --force-gil-off to run "
            "the kernel with PYTHON_GIL=0"
        )
    return {"PYTHON_GIL": "0"} if force_gil_off else {}


def _overrides(
    display_name: str | None,
    contexts: int | None,
    dispatch: str | None,
    python: str | None = None,
    force_gil_off: bool = False,
) -> tuple[dict[str, Any], bool]:
    """What the tinycoro kernelspec changes in ipykernel's: the name, the interpreter (when
    another one's), and the environment that configures the default scheduler (validated
    here, before anything is written); and whether that interpreter is free-threaded."""
    env = _scheduler_env(contexts, dispatch)
    if python is not None:
        # Jupyter starts kernels from its own working directory: a path typed relative to
        # the clone would name nothing there (absolute, not resolved: a venv's python is a
        # symlink whose own path is what selects the venv)
        python = os.path.abspath(python)
    extra: dict[str, Any] = {}
    free_threaded = False
    # Another interpreter, or a free-threaded one (this 3.13t venv included): start it once to
    # see what it is and that the GIL stays off in it. A GIL build's own kernel needs no probe.
    if python is not None or force_gil_off or FREE_THREADED:
        interp = probe(python or sys.executable)
        env.update(_check_gil(interp, force_gil_off))
        free_threaded = interp.free_threaded
        display_name = display_name or interp.display_name(force_gil_off)
    if python is not None:
        from ipykernel.kernelspec import make_ipkernel_cmd

        extra["argv"] = make_ipkernel_cmd(executable=python, extra_arguments=EXTRA_ARGUMENTS)
    spec = {"display_name": display_name or DISPLAY_NAME, **extra, **({"env": env} if env else {})}
    return spec, free_threaded


def _scheduler_env(contexts: int | None, dispatch: str | None) -> dict[str, str]:
    """The environment that configures the kernel's default scheduler, validated."""
    env = {}
    if contexts is not None:
        env["TINYCORO_CONTEXTS"] = str(check_contexts(contexts))
    if dispatch is not None:
        env["TINYCORO_DISPATCH"] = check_dispatch(dispatch)
    return env


def kernel_json(
    display_name: str | None = None,
    contexts: int | None = None,
    dispatch: str | None = None,
    *,
    python: str | None = None,
    force_gil_off: bool = False,
) -> dict[str, Any]:
    """The kernel.json contents of the tinycoro kernelspec: ipykernel's spec for this
    interpreter, or *python* (``ipykernel.kernelspec.get_kernel_dict``), plus
    ``--ext=tinycoro``."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = get_kernel_dict(extra_arguments=EXTRA_ARGUMENTS)
    spec.update(_overrides(display_name, contexts, dispatch, python, force_gil_off)[0])
    return spec


def install(
    name: str | None = None,
    *,
    user: bool = False,
    prefix: str | None = None,
    display_name: str | None = None,
    contexts: int | None = None,
    dispatch: str | None = None,
    python: str | None = None,
    force_gil_off: bool = False,
) -> str:
    """Write the kernelspec with ipykernel's writer (kernel.json and logos) and install it with
    jupyter_client; return the installed path. *python* is the kernel's interpreter (default
    this one); *name* defaults to "tinycoro", or "tinycoro-ft" for a free-threaded one."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    overrides, free_threaded = _overrides(display_name, contexts, dispatch, python, force_gil_off)
    if name is None:
        name = FT_NAME if free_threaded else DEFAULT_NAME
    with tempfile.TemporaryDirectory() as tmp:
        path = write_kernel_spec(
            os.path.join(tmp, name), overrides=overrides, extra_arguments=EXTRA_ARGUMENTS
        )
        return KernelSpecManager().install_kernel_spec(path, name, user=user, prefix=prefix)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tinycoro.kernel_ext", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("install", help=f'install the "{DISPLAY_NAME}" kernelspec')
    where = i.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user only")
    where.add_argument("--sys-prefix", action="store_true", help="install into sys.prefix (venv)")
    where.add_argument("--prefix", help="install under PREFIX/share/jupyter/kernels")
    i.add_argument("--name", default=None,
                   help=f"kernelspec name (default {DEFAULT_NAME}, {FT_NAME} for a free-threaded Python)")
    i.add_argument("--display-name", default=None, help="name shown in Jupyter")
    i.add_argument("--python", default=None, metavar="PATH",
                   help="the kernel's interpreter, e.g. a 3.13t venv's python (default this one)")
    i.add_argument("--force-gil-off", action="store_true",
                   help="run a free-threaded kernel with PYTHON_GIL=0 when a module it imports "
                        "turns the GIL on (refused otherwise)")
    i.add_argument("--contexts", type=int, default=None, help="contexts of the default scheduler")
    i.add_argument("--dispatch", choices=DISPATCH, default=None, help="dispatch policy")
    u = sub.add_parser("uninstall", help="remove the kernelspec")
    u.add_argument("--name", default=DEFAULT_NAME)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "install":
        prefix = sys.prefix if args.sys_prefix else args.prefix
        try:
            _scheduler_env(args.contexts, args.dispatch)  # the cheap checks first, named as such
        except ValueError as e:
            print(f"--contexts/--dispatch: {e}", file=sys.stderr)
            return 2
        try:
            path = install(
                args.name,
                user=args.user,
                prefix=prefix,
                display_name=args.display_name,
                contexts=args.contexts,
                dispatch=args.dispatch,
                python=args.python,
                force_gil_off=args.force_gil_off,
            )
        except ValueError as e:  # from the interpreter's probe, before anything was written
            print(f"tinycoro.kernel_ext install: {e}", file=sys.stderr)
            return 2
        with open(os.path.join(path, "kernel.json")) as f:
            spec = json.load(f)
        print(f"Installed kernelspec {os.path.basename(path)!r} ({spec['display_name']}) in {path}")
        return 0
    from jupyter_client.kernelspec import KernelSpecManager

    try:
        KernelSpecManager().remove_kernel_spec(args.name)
    except KeyError:  # NoSuchKernel is a KeyError too
        print(f"No kernelspec named {args.name!r}", file=sys.stderr)
        return 1
    print(f"Removed kernelspec {args.name!r}")
    return 0
