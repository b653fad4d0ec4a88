"""Which clusters this process has: the one each ipyparallel Client carries, and the kernel's
most recent one (:func:`latest`), which the ``%tinycoro cluster`` magics act on whether a magic
or a cell made it. A :class:`~tinycoro.cluster.api.Cluster` records itself here as it starts
and stops; this module knows it only as :class:`Registered` (``api`` imports this module, never
the other way)."""

from __future__ import annotations

import threading
from typing import Any, Protocol


class Registered(Protocol):
    """What the registry needs of a cluster (``api.Cluster`` is one): the seam that keeps this
    module from importing the one that records itself here."""

    @property
    def stopped(self) -> bool:
        """True once it has stopped."""

__all__ = ["claim", "latest", "let_go", "running", "unclaim"]

_registry_lock = threading.Lock()
_on_client: dict[int, Registered] = {}  # id(ipyparallel.Client) -> its live Cluster
_running: list[Registered] = []  # the clusters not stopped yet, oldest first
_last_stopped: Registered | None = None


def latest() -> Registered | None:
    """The cluster this process started or connected most recently that still runs; if none
    runs, the one stopped last (so that a tool can say it is stopped); None before any.

    The ``%tinycoro cluster`` magics act on it, whether it was made by a magic or by
    :func:`start`/:func:`connect` in a cell."""
    with _registry_lock:
        return _running[-1] if _running else _last_stopped


def let_go(cluster: Registered) -> None:
    """A tool that acted on a stopped *cluster* is done with it (``%tinycoro cluster stop``):
    :func:`latest` no longer returns it, in this shell or a new one."""
    global _last_stopped
    with _registry_lock:
        if _last_stopped is cluster:
            _last_stopped = None


def claim(client: Any, cluster: Registered) -> None:
    """*cluster* carries *client* from now on; RuntimeError when another live one does."""
    with _registry_lock:
        other = _on_client.get(id(client))
        if other is not None:
            raise RuntimeError(
                f"this ipyparallel.Client already carries a tinycoro cluster ({other!r}): use "
                "that one, or stop() it before connecting again"
            )
        _on_client[id(client)] = cluster


def running(cluster: Registered) -> None:
    """*cluster* is up: the most recent one from now on."""
    with _registry_lock:
        _running.append(cluster)


def unclaim(client: Any, cluster: Registered) -> None:
    """*cluster* has stopped (or never started): *client* is free, and a running *cluster*
    becomes the one stopped last."""
    global _last_stopped
    with _registry_lock:
        if _on_client.get(id(client)) is cluster:
            del _on_client[id(client)]
        if cluster in _running:
            _running.remove(cluster)
            _last_stopped = cluster
