"""A local cluster's processes: starting a controller and engines on this host for
:func:`tinycoro.cluster.start`, and stopping every one of them (and their children) again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from functools import partial
from typing import Any, Awaitable, Iterable, TypeVar

import ipyparallel as ipp

from . import internals
from .errors import NestedCluster
from .info import EngineInfo
from .progress import StartProgress

T = TypeVar("T")

# The GIL switch interval of the engines start() makes (seconds; CPython's default is 0.005).
# A context computing on an engine keeps the GIL for a switch interval at a time, and the
# kernel's own threads (shell, IOPub, control) need it for every message they handle: each
# wait is up to one interval, a message takes several. With 5 ms, 8 submits to one busy engine
# trickled in and its context sat idle between them: 8 CPU-bound tasks ran at 0.48-0.60x of
# the same tasks in one process; with 0.5 ms at 0.82-0.85x (benchmark workload 7, and
# docs/benchmarks-log.md). The cost is more GIL hand-overs while the kernel is busy, none when idle.
ENGINE_SWITCH_INTERVAL = 0.0005

# In the environment of the engines launch() starts, and so of every process they start in
# turn (a script a task runs, say): its value is the pid of the process that started the
# cluster. start() refuses to run where it is set (refuse_nested_start).
ENGINE_MARKER = "TINYCORO_CLUSTER_ENGINE"


def refuse_nested_start() -> None:
    """Raise NestedCluster (a RuntimeError) if this process is an engine, or was started by
    one of a tinycoro cluster. Checked by start() before anything is spawned: an engine that
    starts a cluster starts engines running the same code, which start clusters of their
    own; such a chain once grew to ~270 engine processes before memory ran out. Connecting
    to a running cluster starts no process and stays allowed."""
    starter = os.environ.get(ENGINE_MARKER)
    if starter is not None:
        where = (f"inside an engine of a tinycoro cluster (or a process one started; the "
                 f"cluster of process {starter}: {ENGINE_MARKER} is set in its environment)")
    elif _in_ipyparallel_engine():
        where = f"inside an engine (an ipyparallel engine, pid {os.getpid()})"
    else:
        return
    raise NestedCluster(
        f"tc.cluster.start() refused: this code runs {where}. An engine that starts a "
        "cluster starts engines of its own, which may do the same: a chain of processes that "
        "grows until memory runs out. To do more work from a task on an engine, run it on "
        "this engine's scheduler (tc.spawn, tc.when_all), or return it to the process that "
        "started the cluster and send it from there (cluster.submit, cluster.map), as Dask "
        "does work from a worker with worker_client rather than a new cluster. If an engine "
        "ran it by importing a module whose functions it was sent (a script that starts its "
        "cluster at the top), start the cluster under `if __name__ == \"__main__\":`. A "
        f"process that must start a cluster of its own anyway can unset {ENGINE_MARKER} first."
    )


def _in_ipyparallel_engine() -> bool:
    """Whether this process is an ipyparallel engine (``ipengine``, whoever launched it):
    its application object exists. Only looked up if ipyparallel's engine was imported."""
    app = sys.modules.get("ipyparallel.engine.app")
    return app is not None and bool(app.IPEngine.initialized())


class LoopThread:
    """An asyncio loop on a daemon thread, for the ipyparallel.Cluster that owns the local
    processes: its launchers watch their processes from the loop that started them, so that
    loop must keep running for the cluster's life (whatever loop the caller has, if any)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tc-cluster-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class LocalProcesses:
    """What a cluster started by :func:`launch` owns, and stops in :meth:`stop`."""

    def __init__(self) -> None:
        self.loop = LoopThread()
        self.profile_dir = tempfile.mkdtemp(prefix="tinycoro-cluster-")
        self.ipp_cluster: Any = None
        # Every process of the cluster, taken when it is up: an engine's nanny is its child,
        # and outlives it for a while when the engine is killed (reparented, out of reach).
        self.processes: list[Any] = []

    @property
    def controller_pid(self) -> int | None:
        controller = getattr(self.ipp_cluster, "controller", None)
        pid = getattr(controller, "pid", None)
        return pid if isinstance(pid, int) and pid > 0 else None

    def take_processes(self, engines: Iterable[EngineInfo]) -> None:
        self.processes = _process_trees(self._root_pids(engines))

    def _root_pids(self, engines: Iterable[EngineInfo]) -> set[int]:
        roots = {e.pid for e in engines if e.host == socket.gethostname()}
        if self.ipp_cluster is not None:
            roots |= internals.launcher_pids(self.ipp_cluster)
        return roots

    def stop(self, client: Any, engines: Iterable[EngineInfo]) -> None:
        """Stop the engines and controller and wait until every one of their processes (and
        children: the engines' nannies) has exited; then the loop thread and the profile."""
        import psutil

        seen = {p.pid for p in self.processes}
        procs = self.processes + [p for p in _process_trees(self._root_pids(engines))
                                  if p.pid not in seen]
        try:
            if client is not None:
                client.close()
            if self.ipp_cluster is not None:
                self.loop.run(self.ipp_cluster.stop_cluster(), 60)
        finally:
            # What ipyparallel's stop leaves are the engines' nannies (and an engine slow to
            # exit): a nanny notices its engine's exit only at its next poll, ~5 s later. They
            # are ours and have nothing left to do: after a moment, SIGTERM, then SIGKILL.
            alive = procs
            for sig, grace in ((None, 0.5), (signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
                for p in alive if sig is not None else ():
                    try:
                        p.send_signal(sig)
                    except psutil.NoSuchProcess:
                        pass
                _, alive = psutil.wait_procs(alive, timeout=grace)
                if not alive:
                    break
            self.loop.close()
            shutil.rmtree(self.profile_dir, ignore_errors=True)


def launch(n: int, contexts: int, timeout: float,
           progress: StartProgress) -> tuple[internals.ClientSeam, LocalProcesses]:
    """Start a controller and *n* engines (all at once) with the tinycoro extension preloaded;
    return the seam of a connected ``ipyparallel.Client`` (its names checked; the caller checked
    the version before) once every engine has registered. On any failure (a timeout included)
    every process started is stopped before the error is raised."""
    owned = LocalProcesses()
    client: Any = None
    try:
        async def make() -> Any:
            # A profile of its own (removed at stop) keeps ~/.ipython untouched; delay=0:
            # engines get the controller's connection info in their environment.
            # --nodb: the controller's Hub keeps no record of each request, reply and output
            # (by default it stores all of them, result buffers included, up to 1 GiB for
            # the cluster's life). Nothing here reads them: outcomes come home on IOPub. It
            # cost the controller ~0.2 ms of CPU per submit, a share of a core that two
            # engines on two cores need.
            return ipp.Cluster(n=n, profile_dir=owned.profile_dir, delay=0,
                               controller_args=["--nodb"], log_level=logging.ERROR,
                               engine_timeout=int(timeout))

        owned.ipp_cluster = owned.loop.run(make())
        progress.doing("starting the controller")
        owned.loop.run(owned.ipp_cluster.start_controller(), timeout)
        progress.doing(f"starting {n} engine process{'es' * (n != 1)}")  # not a plain -s
        owned.loop.run(owned.ipp_cluster.start_engines(
            n,
            engine_args=["--IPKernelApp.extensions=tinycoro"],
            environment={"TINYCORO_CONTEXTS": str(contexts),
                         "TINYCORO_ENGINE_SWITCH_INTERVAL": str(ENGINE_SWITCH_INTERVAL),
                         ENGINE_MARKER: str(os.getpid())},
        ), timeout)
        client = owned.loop.run(owned.ipp_cluster.connect_client(), timeout)
        seam = internals.ClientSeam(client)
        progress.doing("engine processes importing IPython, ipyparallel and tinycoro",
                       partial(_engine_activity, owned))

        def registered(event: dict) -> None:
            if event.get("event") == "register":
                progress.engine_up(int(event["id"]))

        seam.on_registration(registered)
        try:
            for eid in list(client.ids):  # those that registered before we listened
                progress.engine_up(eid)
            if not progress.wait(timeout):
                raise TimeoutError(_slow_engines(client, owned, n, timeout))
        finally:
            seam.remove_registration(registered)
        return seam, owned
    except BaseException:
        owned.stop(client, [])
        raise


def _engine_activity(owned: LocalProcesses) -> str:
    """How the engine processes are getting on, for the start progress: how many run and the
    CPU time they have used (it grows while they import; it stalls if they are stuck)."""
    import psutil

    controller = owned.controller_pid
    running, cpu = 0, 0.0
    for pid in internals.launcher_pids(owned.ipp_cluster) - {controller}:
        try:
            launched = psutil.Process(pid)
            running += 1
            # the launched process is the engine's nanny; the engine itself is its child
            for p in [launched, *launched.children(recursive=True)]:
                cpu += sum(p.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return f"{running} running, {cpu:.1f} s CPU so far"


def _slow_engines(client: Any, owned: LocalProcesses, n: int, timeout: float) -> str:
    """Which engines did not come up in time, and what their processes are doing."""
    import psutil

    up = list(client.ids)
    try:
        # bounded: this runs because something is already slow, and must not hang on it
        up_pids = set(client[up].apply_async(os.getpid).get(timeout=5)) if up else set()
    except Exception:  # noqa: BLE001 - only for the message
        up_pids = set()
    lines = [f"{n - len(up)} of {n} engines did not come up within {timeout:g} s "
             f"(up: {len(up)})"]
    controller = owned.controller_pid
    for pid in sorted(internals.launcher_pids(owned.ipp_cluster) - up_pids - {controller}):
        try:
            p = psutil.Process(pid)
            cpu = sum(p.cpu_times()[:2])
            lines.append(f"  engine process {pid}: {p.status()}, {cpu:.1f} s CPU, not registered")
        except psutil.NoSuchProcess:
            lines.append(f"  engine process {pid}: exited before it registered")
    return "\n".join(lines)


def _process_trees(pids: set[int]) -> list[Any]:
    import psutil

    out: list[Any] = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(p)
            out.extend(p.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return out
