"""Where ``Cluster.dashboard()`` gets its widget: from the notebook layer, through a named seam.

The dashboard is ipywidgets code and lives in the notebook layer (``tinycoro.kernel_ext``),
which sits above this package and imports it. This package never imports that layer back: it
names the seam, the entry-point group :data:`ENTRY_POINT_GROUP`, and the notebook layer declares
in the project's metadata (``pyproject.toml``) which of its classes provides it. Another package
could provide a dashboard the same way.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Callable

__all__ = ["ENTRY_POINT_GROUP", "refresher_factory"]

ENTRY_POINT_GROUP = "tinycoro.cluster_dashboard"


def refresher_factory() -> Callable[[Any], Any]:
    """The provider's refresher class: called with a cluster, it makes the one refresher thread
    that serves every dashboard of that cluster (its ``dashboard()`` makes a widget; ``stop()``
    ends it). RuntimeError, saying what to install, when nothing provides one."""
    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    if not found:
        raise RuntimeError(
            f"no cluster dashboard is installed (nothing provides the entry point group "
            f"{ENTRY_POINT_GROUP!r}): reinstall tinycoro (pip install 'tinycoro[jupyter,cluster]')"
        )
    factory: Callable[[Any], Any] = found[0].load()
    return factory
