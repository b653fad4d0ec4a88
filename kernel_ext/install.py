"""Install a "Python 3 (tinycoro)" kernelspec: an ipykernel that loads the extension at start.

    python -m tinycoro.kernel_ext install [--user | --sys-prefix | --prefix DIR] [--name NAME]
                                [--display-name TEXT] [--contexts N] [--dispatch D]
    python -m tinycoro.kernel_ext uninstall [--name NAME]

The kernel runs this interpreter (``sys.executable``) with ``--ext=tinycoro``, so every cell
can ``await`` tinycoro awaitables without ``%load_ext``. ``--contexts``/``--dispatch`` go into
the kernel's environment as ``TINYCORO_CONTEXTS``/``TINYCORO_DISPATCH``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, Sequence

from tinycoro.core.checks import DISPATCH, check_contexts, check_dispatch

__all__ = ["DEFAULT_NAME", "DISPLAY_NAME", "EXTRA_ARGUMENTS", "kernel_json", "install", "main"]

DEFAULT_NAME = "tinycoro"
DISPLAY_NAME = "Python 3 (tinycoro)"
EXTRA_ARGUMENTS = ["--ext=tinycoro"]  # appended to ipykernel's own launch command


def _overrides(display_name: str, contexts: int | None, dispatch: str | None) -> dict[str, Any]:
    """What the tinycoro kernelspec changes in ipykernel's: the name, and the environment that
    configures the default scheduler (validated here, before anything is written)."""
    env = {}
    if contexts is not None:
        env["TINYCORO_CONTEXTS"] = str(check_contexts(contexts))
    if dispatch is not None:
        env["TINYCORO_DISPATCH"] = check_dispatch(dispatch)
    return {"display_name": display_name, **({"env": env} if env else {})}


def kernel_json(
    display_name: str = DISPLAY_NAME, contexts: int | None = None, dispatch: str | None = None
) -> dict[str, Any]:
    """The kernel.json contents of the tinycoro kernelspec: ipykernel's spec for this
    interpreter (``ipykernel.kernelspec.get_kernel_dict``) plus ``--ext=tinycoro``."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = get_kernel_dict(extra_arguments=EXTRA_ARGUMENTS)
    spec.update(_overrides(display_name, contexts, dispatch))
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
    """Write the kernelspec with ipykernel's writer (kernel.json and logos) and install it with
    jupyter_client; return the installed path."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    overrides = _overrides(display_name, contexts, dispatch)
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
        prefix = sys.prefix if args.sys_prefix else args.prefix
        try:
            path = install(
                args.name,
                user=args.user,
                prefix=prefix,
                display_name=args.display_name,
                contexts=args.contexts,
                dispatch=args.dispatch,
            )
        except ValueError as e:  # from tinycoro.core.checks, before anything was written
            print(f"--contexts/--dispatch: {e}", file=sys.stderr)
            return 2
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
