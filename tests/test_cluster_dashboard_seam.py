"""tinycoro.cluster finds its dashboard through the entry-point seam, never by a static import
of the notebook layer above it: the installed provider is the notebook layer's refresher; run
from a clone without an install (no entry points at all) the seam falls back to the notebook
layer's module by name; with neither, ``cluster.dashboard()`` fails with an error that says what
to install."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("ipyparallel")

from tinycoro.cluster import dashboard  # noqa: E402


def test_the_installed_provider_is_the_notebook_layers_refresher():
    from tinycoro.kernel_ext.cluster_dashboard import ClusterRefresher

    assert dashboard.refresher_factory() is ClusterRefresher


def test_without_the_entry_point_the_notebook_layer_is_found_by_name(monkeypatch):
    # What a checkout run from PYTHONPATH sees: no distribution metadata, so no entry points.
    from tinycoro.kernel_ext.cluster_dashboard import ClusterRefresher

    monkeypatch.setattr(dashboard, "entry_points", lambda group: [])
    assert dashboard.refresher_factory() is ClusterRefresher


def test_the_fallback_names_what_the_project_declares():
    # One provider, named twice (pyproject.toml for an install, the seam for a checkout):
    # they must not drift apart.
    try:
        import tomllib
    except ImportError:  # pragma: no cover
        pytest.skip("tomllib is Python 3.11+")
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    declared = meta["project"]["entry-points"][dashboard.ENTRY_POINT_GROUP]
    assert list(declared.values()) == [dashboard.DEFAULT_PROVIDER]


def test_no_provider_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(dashboard, "entry_points", lambda group: [])
    # the notebook layer is not importable either (None in sys.modules: ImportError on import)
    monkeypatch.setitem(sys.modules, "tinycoro.kernel_ext.cluster_dashboard", None)
    with pytest.raises(RuntimeError, match="no cluster dashboard is installed.*tinycoro.cluster_dashboard"):
        dashboard.refresher_factory()
