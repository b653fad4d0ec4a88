"""tinycoro.cluster finds its dashboard through the entry-point seam, never by importing the
notebook layer above it: the installed provider is the notebook layer's refresher, and with no
provider ``cluster.dashboard()`` fails with an error that says what to install."""

from __future__ import annotations

import pytest

pytest.importorskip("ipyparallel")

from tinycoro.cluster import dashboard  # noqa: E402


def test_the_installed_provider_is_the_notebook_layers_refresher():
    from tinycoro.kernel_ext.cluster_dashboard import ClusterRefresher

    assert dashboard.refresher_factory() is ClusterRefresher


def test_no_provider_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(dashboard, "entry_points", lambda group: [])
    with pytest.raises(RuntimeError, match="no cluster dashboard is installed.*tinycoro.cluster_dashboard"):
        dashboard.refresher_factory()
