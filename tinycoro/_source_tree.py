"""``tinycoro.kernel_ext`` when tinycoro runs from a clone (``PYTHONPATH=clone``, no install).

The notebook layer's folder, ``kernel_ext/``, sits beside the ``tinycoro/`` folder in the
repository, and an install maps it to the subpackage ``tinycoro.kernel_ext`` (pyproject.toml's
``package-dir``; an editable install's own finder does the same), so no package with a generic
top-level name lands in site-packages. Run straight from a clone, nothing maps it: the finder
below does, for that one name, when the folder layout is the repository's. An installed tinycoro
has ``tinycoro/kernel_ext/`` inside the package and never installs the finder.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from importlib.machinery import ModuleSpec

NAME = "tinycoro.kernel_ext"


class _NotebookLayerFinder:
    """A meta path finder for ``tinycoro.kernel_ext`` in the clone's ``kernel_ext/`` folder;
    nothing else (its submodules are found through the package's ``__path__``, as usual).
    Not derived from ``importlib.abc.MetaPathFinder``: importing that costs ~10 ms at every
    ``import tinycoro``, and the import system needs only ``find_spec``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: Any = None
    ) -> ModuleSpec | None:
        if fullname != NAME:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(
            fullname,
            os.path.join(self.folder, "__init__.py"),
            submodule_search_locations=[self.folder],
        )

    def __repr__(self) -> str:
        return f"<tinycoro source-tree finder for {NAME} in {self.folder}>"


def map_notebook_layer(package_dir: str) -> None:
    """Install the finder if *package_dir* (tinycoro's folder) is in a clone, not installed."""
    if os.path.isdir(os.path.join(package_dir, "kernel_ext")):
        return  # installed: the subpackage is there
    root = os.path.dirname(package_dir)
    folder = os.path.join(root, "kernel_ext")
    if not (
        os.path.isfile(os.path.join(folder, "__init__.py"))
        and os.path.isfile(os.path.join(root, "pyproject.toml"))
    ):
        return
    if any(isinstance(f, _NotebookLayerFinder) for f in sys.meta_path):
        return
    # First: another (editable) install's finder may map the name to a different checkout.
    sys.meta_path.insert(0, _NotebookLayerFinder(folder))
