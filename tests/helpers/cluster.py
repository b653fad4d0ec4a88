"""Fixture helpers for the cluster tests: a started cluster whose engines can import
tests/helpers/cluster_tasks.py, a look at every process and port a cluster holds, and an
engine's description for the dashboards' tests."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil

TESTS = str(Path(__file__).resolve().parent.parent)  # tests/, holding the helpers package


@dataclass(frozen=True)
class Engine:
    """An engine as ``tc.cluster.EngineInfo`` describes one (id, host, pid), for the
    dashboards' tests: ``tinycoro.cluster`` itself needs ipyparallel, which they do not."""

    id: int
    host: str
    pid: int


@contextlib.contextmanager
def engines_can_import_helpers() -> Iterator[None]:
    """Engines inherit our environment: put tests/ on their PYTHONPATH (and ours)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, old) if p)
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


@contextlib.contextmanager
def started_cluster(n: int, **kwargs) -> Iterator[tuple]:
    """``(cluster, its processes)``: a local cluster of *n* engines that can import
    tests/helpers/cluster_tasks.py, stopped on exit (also after a failing test); whatever a failed
    stop leaves running is killed, so no process outlives the tests."""
    import tinycoro as tc

    with engines_can_import_helpers():
        cluster = tc.cluster.start(n, **kwargs)
    procs = processes(cluster)
    try:
        yield cluster, procs
    finally:
        try:
            cluster.stop()
        finally:
            if not gone(procs):
                kill_leftovers(procs)


@contextlib.contextmanager
def io_thread_held(cluster, timeout: float) -> Iterator[None]:
    """Hold the client's IO thread (ipyparallel's, which sends requests and brings replies
    and registration notices) for the body: submits made inside leave together once it ends,
    and no reply or unregistration is handled meanwhile. Released on exit, also after a
    failure, so that a failing test does not hold it for *timeout* seconds more."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # on the client's IO thread
        held.set()
        release.wait(timeout)

    cluster.client._io_loop.add_callback(hold)
    try:
        assert held.wait(timeout), "the client's IO thread never ran the hold"
        yield
    finally:
        release.set()


@contextlib.contextmanager
def plain_ipyparallel_cluster(profile_dir) -> Iterator[tuple]:
    """``(ipyparallel cluster, its client)``: two engines that ipyparallel started on its own
    (tinycoro reaches them with connect: no pid watcher), stopped on exit; no process of it
    outlives the tests."""
    import ipyparallel as ipp

    with engines_can_import_helpers():
        ipc = ipp.Cluster(n=2, profile_dir=str(profile_dir), delay=0, log_level=40)
        client = ipc.start_and_connect_sync()
    pids = client[:].apply_sync(os.getpid) + [ipc.controller.pid]
    procs = [psutil.Process(p) for p in pids]
    procs += [c for p in procs for c in p.children(recursive=True)]
    try:
        yield ipc, client
    finally:
        client.close()
        ipc.stop_cluster_sync()
        # ipyparallel's stop does not wait for the engines' nannies (each notices its engine's
        # exit at its next poll, seconds later): no process outlives us
        psutil.wait_procs(procs, timeout=0.5)
        kill_leftovers(procs)


def processes(cluster) -> list[psutil.Process]:
    """The controller, the engines and their children (the engines' nannies)."""
    roots = [e.pid for e in cluster.engines] + [cluster.controller_pid]
    out = []
    for pid in roots:
        p = psutil.Process(pid)
        out.append(p)
        out.extend(p.children(recursive=True))
    return out


def listening_ports(procs: list[psutil.Process]) -> set[int]:
    ports = set()
    for p in procs:
        for c in p.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN:
                ports.add(c.laddr.port)
    return ports


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def gone(procs: list[psutil.Process]) -> bool:
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def kill_leftovers(procs: list[psutil.Process]) -> None:
    """Last resort of a fixture teardown after a failed stop: no process outlives a test."""
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
