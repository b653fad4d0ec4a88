"""Where ``Cluster.dashboard()`` gets its widget: from the notebook layer, through a named seam.

The dashboard is ipywidgets code and lives in the notebook layer (``tinycoro.kernel_ext``),
which sits above this package and imports it. This package never imports that layer by name in
its code: it names the seam, the entry-point group :data:`ENTRY_POINT_GROUP`, and the notebook
layer declares in the project's metadata (``pyproject.toml``) which of its classes provides it.
Another package could provide a dashboard the same way.

A checkout run from ``PYTHONPATH`` without an install has no metadata, hence no entry points.
There the seam uses :data:`DEFAULT_PROVIDER`, the very entry point the project declares (a test
keeps the two equal), loaded as the entry-point machinery would load it.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable

__all__ = ["DEFAULT_PROVIDER", "ENTRY_POINT_GROUP", "refresher_factory"]

ENTRY_POINT_GROUP = "tinycoro.cluster_dashboard"
# What pyproject.toml declares in that group, as "module:attribute".
DEFAULT_PROVIDER = "tinycoro.kernel_ext.cluster_dashboard:ClusterRefresher"


def refresher_factory() -> Callable[[Any], Any]:
    """The provider's refresher class: called with a cluster, it makes the one refresher thread
    that serves every dashboard of that cluster (its ``dashboard()`` makes a widget; ``stop()``
    ends it). The first installed provider by name; without any (a checkout that is not
    installed), :data:`DEFAULT_PROVIDER`. RuntimeError, saying what to install, when that does
    not load either."""
    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    provider = found[0] if found else EntryPoint("default", DEFAULT_PROVIDER, ENTRY_POINT_GROUP)
    try:
        factory: Callable[[Any], Any] = provider.load()
    except ImportError as e:
        if found:  # an installed provider that does not import: its own error says why
            raise
        raise RuntimeError(
            f"no cluster dashboard is installed (nothing provides the entry point group "
            f"{ENTRY_POINT_GROUP!r}, and {DEFAULT_PROVIDER} does not import: {e}): reinstall "
            "tinycoro (pip install 'tinycoro[jupyter,cluster]')"
        ) from e
    return factory
