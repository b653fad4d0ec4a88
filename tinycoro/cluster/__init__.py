"""tinycoro on an ipyparallel cluster: many processes (and hosts), one tinycoro scheduler each.

Under the GIL, contexts in one process overlap I/O but do not add CPU (rule 15); engines
do. Each engine is an IPython kernel with the tinycoro extension loaded, so a task submitted
here runs as a task of the engine's scheduler, its output comes home to the cell that submitted
it, and ``%px`` cells on the engines can ``await`` as notebook cells do.

    import tinycoro as tc

    cluster = tc.cluster.start(2)            # two local engines, one context each
    t = cluster.submit(work, 10)             # work: an async function (it travels by
                                             # cloudpickle, with the globals it names)
    print(await t)                           # or t.result(timeout) from plain Python
    cluster.stop()

Modules: :mod:`.api` (``Cluster``, ``start``, ``connect``, ``latest``), :mod:`.registry` (which
clusters this process has), :mod:`.output` and :mod:`.homes` (a remote task's output at home,
also its children's after it ended), :mod:`.shipped` (remote tracebacks read back to the cells), :mod:`.dashboard` (the seam to the
notebook layer's dashboard), :mod:`.remote` (``RemoteTask``),
:mod:`.engine` (what runs on each engine), :mod:`.channel` (the task channel), :mod:`.local` (a local cluster's processes),
:mod:`.internals` (every private name of ipyparallel and ipykernel used, checked),
:mod:`.progress`, :mod:`.watch`, :mod:`.messages`, :mod:`.errors`, :mod:`.info`.

This package is the optional extra ``tinycoro[cluster]``; ``import tinycoro`` never imports it
(``tc.cluster`` imports it on first use).
"""

from __future__ import annotations

try:
    import ipyparallel  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "tinycoro.cluster needs ipyparallel, an optional extra: pip install 'tinycoro[cluster]'"
    ) from e

from .api import Cluster, connect, latest, start
from .errors import EngineLost, NestedCluster, RemoteTraceback, UnsupportedVersion
from .info import EngineInfo, EngineLoad
from .remote import RemoteTask

__all__ = [
    "Cluster",
    "EngineInfo",
    "EngineLoad",
    "EngineLost",
    "NestedCluster",
    "RemoteTask",
    "RemoteTraceback",
    "UnsupportedVersion",
    "connect",
    "latest",
    "start",
]
