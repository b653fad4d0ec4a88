"""Install a "Python 3 (tinycoro)" kernelspec: an ipykernel that loads the extension at start.

    python -m kernel_ext install [--user | --sys-prefix | --prefix DIR] [--name NAME]
                                [--display-name TEXT] [--contexts N] [--dispatch D]
    python -m kernel_ext uninstall [--name NAME]

The kernel runs this interpreter (``sys.executable``) with ``--ext=tinycoro``, so every cell
can ``await`` tinycoro awaitables without ``%load_ext``. ``--contexts``/``--dispatch`` go into
the kernel's environment as ``TINYCORO_CONTEXTS``/``TINYCORO_DISPATCH``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any, Sequence

from tinycoro.core.scheduler import DISPATCH

__all__ = ["DEFAULT_NAME", "DISPLAY_NAME", "kernel_json", "install", "main"]

DEFAULT_NAME = "tinycoro"
DISPLAY_NAME = "Python 3 (tinycoro)"


def kernel_json(
    display_name: str = DISPLAY_NAME,
    contexts: int | None = None,
    dispatch: str | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """The kernel.json contents of the tinycoro kernelspec."""
    spec: dict[str, Any] = {
        "argv": [
            python or sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--ext=tinycoro",
        ],
        "display_name": display_name,
        "language": "python",
        "metadata": {"debugger": True},
    }
    env = {}
    if contexts is not None:
        env["TINYCORO_CONTEXTS"] = str(contexts)
    if dispatch is not None:
        env["TINYCORO_DISPATCH"] = dispatch
    if env:
        spec["env"] = env
    return spec


def install(
    name: str = DEFAULT_NAME,
    *,
    user: bool = False,
    prefix: str | None = None,
    display_name: str = DISPLAY_NAME,
    contexts: int | None = None,
    dispatch: str | None = None,
) -> str:
    """Write the kernelspec and install it with jupyter_client; return the installed path."""
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        os.mkdir(path)
        with open(os.path.join(path, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump(kernel_json(display_name, contexts, dispatch), f, indent=1)
            f.write("\n")
        _copy_logos(path)
        return KernelSpecManager().install_kernel_spec(path, name, user=user, prefix=prefix)


def _copy_logos(dest: str) -> None:
    """Reuse ipykernel's Python logos so the launcher shows an icon (best effort)."""
    try:
        import shutil

        from ipykernel.kernelspec import RESOURCES
    except ImportError:  # pragma: no cover
        return
    for fname in os.listdir(RESOURCES):
        if fname.startswith("logo-"):
            shutil.copy(os.path.join(RESOURCES, fname), dest)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kernel_ext", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("install", help=f'install the "{DISPLAY_NAME}" kernelspec')
    where = i.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user only")
    where.add_argument("--sys-prefix", action="store_true", help="install into sys.prefix (venv)")
    where.add_argument("--prefix", help="install under PREFIX/share/jupyter/kernels")
    i.add_argument("--name", default=DEFAULT_NAME, help="kernelspec name (default %(default)s)")
    i.add_argument("--display-name", default=DISPLAY_NAME, help="name shown in Jupyter")
    i.add_argument("--contexts", type=int, default=None, help="contexts of the default scheduler")
    i.add_argument("--dispatch", choices=DISPATCH, default=None, help="dispatch policy")
    u = sub.add_parser("uninstall", help="remove the kernelspec")
    u.add_argument("--name", default=DEFAULT_NAME)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "install":
        if args.contexts is not None and args.contexts < 1:
            print("--contexts must be a positive int", file=sys.stderr)
            return 2
        prefix = sys.prefix if args.sys_prefix else args.prefix
        path = install(
            args.name,
            user=args.user,
            prefix=prefix,
            display_name=args.display_name,
            contexts=args.contexts,
            dispatch=args.dispatch,
        )
        print(f"Installed kernelspec {args.name!r} ({args.display_name}) in {path}")
        return 0
    from jupyter_client.kernelspec import KernelSpecManager

    try:
        KernelSpecManager().remove_kernel_spec(args.name)
    except KeyError:  # NoSuchKernel is a KeyError too
        print(f"No kernelspec named {args.name!r}", file=sys.stderr)
        return 1
    print(f"Removed kernelspec {args.name!r}")
    return 0
