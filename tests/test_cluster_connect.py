"""tc.cluster.connect on a cluster that ipyparallel started on its own (engines without the
extension preloaded, as ``ipcluster start`` leaves them): connect loads tinycoro there, the
cluster is used as a started one is, and stop() detaches without stopping someone else's
cluster."""

from __future__ import annotations

import os

import psutil
import pytest

ipp = pytest.importorskip("ipyparallel")

import tinycoro as tc
from helpers.runtime import wait_until
import helpers.cluster_tasks as h
import helpers.cluster as cs

pytestmark = pytest.mark.timeout(240)

T = 30


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory):
    with cs.plain_ipyparallel_cluster(tmp_path_factory.mktemp("profile")) as (ipc, client):
        yield ipc, client


def test_connect_uses_an_existing_cluster_and_stop_leaves_it_running(plain_cluster):
    ipc, client = plain_cluster
    assert client[:].apply_sync(h.tinycoro_loaded) == [False, False]

    cluster = tc.cluster.connect(client)
    try:
        assert [e.id for e in cluster.engines] == [0, 1]
        assert client[:].apply_sync(h.tinycoro_loaded) == [True, True]
        assert cluster.submit(h.add, 1, 2).result(T) == 3

        async def main():
            return await cluster.map(h.item_and_pid, range(4), limit=1)

        assert {p for _, p in tc.run(main())} == {e.pid for e in cluster.engines}
        assert sorted(cluster.stats()) == [0, 1]
        with pytest.raises(ValueError, match="boom"):
            cluster.submit(h.boom, "boom").result(T)
    finally:
        cluster.stop()
    # the cluster is not ours: it still runs, and the client still works as before
    assert client[:].apply_sync(h.tinycoro_loaded) == [True, True]
    with pytest.raises(RuntimeError, match="stopped"):
        cluster.submit(h.add, 1, 2)
    # connecting again works (the engines keep their agent)
    again = tc.cluster.connect(client)
    try:
        assert again.submit(h.add, 2, 2).result(T) == 4
    finally:
        again.stop()


def test_a_second_handle_on_one_client_is_refused_and_the_first_keeps_working(plain_cluster):
    """The client's IOPub stream has one handler: a second handle would take the first one's
    outcomes away (its next result would never come). It is refused before it touches
    anything, and the first handle works on; after the first one's stop, connecting works."""
    _, client = plain_cluster
    first = tc.cluster.connect(client)
    try:
        with pytest.raises(RuntimeError, match="already carries a tinycoro cluster"):
            tc.cluster.connect(client)
        assert first.submit(h.add, 1, 2).result(T) == 3
        assert tc.cluster.latest() is first
    finally:
        first.stop()
    second = tc.cluster.connect(client)
    try:
        assert second.submit(h.add, 2, 3).result(T) == 5
    finally:
        second.stop()
    assert first.stopped and second.stopped


def test_on_a_connected_cluster_engine_loss_comes_without_a_pid_watch(plain_cluster):
    """No pid watch here (the engines need not be on this host): the engine's task channel
    closing, or the controller's notice that it left (its nanny tells it at once), whichever
    comes first, fails the engine's tasks with EngineLost; the controller's takes the engine
    out."""
    import signal

    _, client = plain_cluster
    cluster = tc.cluster.connect(client)
    orphans = []
    try:
        assert cluster._watcher is None
        victim = cluster.engines[1]
        # its nanny outlives it for a while, out of the fixture's reach: ended below
        orphans = psutil.Process(victim.pid).children(recursive=True)
        t = cluster.submit(h.sleep_forever, engine=victim.id)
        assert cluster.submit(h.add, 1, 1, engine=victim.id).result(T) == 2  # it runs there
        # the engine's word that t started, which can come after add's outcome (another
        # stream): a task the client never saw start is lost "before it said it started" instead
        wait_until(t.running, timeout=T, what="the engine's word that the task started")
        os.kill(victim.pid, signal.SIGKILL)
        with pytest.raises(tc.cluster.EngineLost, match="left the cluster|task channel closed"):
            t.result(10)
        wait_until(lambda: [e.id for e in cluster.engines] == [0], timeout=T,
                   what="the controller's word that the engine left")
        assert cluster.submit(h.add, 2, 3).result(T) == 5
    finally:
        cluster.stop()
        cs.kill_leftovers(orphans)
