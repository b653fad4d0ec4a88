"""The task channel: submits and outcomes go straight between the client and each engine's
scheduler (a socket the engine's tinycoro serves), not through ipykernel's shell and the
controller; on real engines. Results, remote errors with their traceback, cancel, ``engine=``
and ``map``; the channel's own tasks stay out of ``tasks()``; an engine whose channel cannot be
reached keeps the ipyparallel path and says so; and an engine killed mid-task fails the tasks
sent by its channel at once, also on a connected cluster, where no pid watcher looks."""

from __future__ import annotations

import logging
import os
import signal
import threading

import psutil
import pytest

ipp = pytest.importorskip("ipyparallel")

import tinycoro as tc
from helpers.runtime import wait_until
import helpers.cluster_tasks as h
import helpers.cluster as cs

pytestmark = pytest.mark.timeout(240)

START = 120
T = 30
NOTICED = 10  # ipyparallel's heartbeat would take ~35 s: only the channel can say it this soon


@pytest.fixture(scope="module")
def cluster():
    with cs.started_cluster(2, timeout=START) as (c, _):
        yield c


def requests_sent(cluster) -> int:
    """Every request this client sent through ipyparallel (apply requests are recorded)."""
    return len(cluster.client.history)


def test_every_engine_has_a_channel_and_submits_skip_ipyparallel(cluster):
    assert sorted(cluster.channels) == [e.id for e in cluster.engines]
    before = requests_sent(cluster)
    assert [cluster.submit(h.add, i, 1, engine=i % 2).result(T) for i in range(6)] == list(
        range(1, 7))

    async def main():
        return await cluster.map(h.item_and_pid, range(8), limit=2)

    got = tc.run(main())
    assert [x for x, _ in got] == list(range(8))
    assert {p for _, p in got} == {e.pid for e in cluster.engines}
    assert requests_sent(cluster) == before  # not one apply request for 14 tasks


def test_a_task_sent_by_the_channel_runs_under_the_channels_own_request(cluster):
    # A batch from the channel has no shell request: its tasks go under one the engine made
    # for the channel, not whatever request the serving task's context last held (the set-up
    # apply request this client sent through ipyparallel at start, which lives on there).
    header, engine_session = cluster.submit(h.kernel_request, engine=0).result(T)
    assert header["session"] == engine_session, "the task runs under a request of the client's"
    assert header["msg_id"] not in cluster.client.history


def test_a_remote_error_comes_home_with_its_traceback_by_the_channel(cluster):
    before = requests_sent(cluster)
    t = cluster.submit(h.boom, "by the channel", engine=1)
    with pytest.raises(ValueError, match="by the channel") as info:
        t.result(T)
    cause = info.value.__cause__
    assert isinstance(cause, tc.cluster.RemoteTraceback)
    assert "cluster_tasks.py" in cause.text and "in boom" in cause.text
    # one that cannot be pickled comes back as a RemoteError with its text
    from ipyparallel.error import RemoteError

    with pytest.raises(RemoteError, match="no pickle for me"):
        cluster.submit(h.raise_unpicklable, engine=0).result(T)
    assert requests_sent(cluster) == before


def test_cancel_reaches_a_task_started_by_the_channel(cluster):
    key = "channel-cancel"
    t = cluster.submit(h.guarded, key, engine=0)
    wait_until(lambda: cluster.submit(h.read_state, key, engine=0).result(T) == "waiting",
               timeout=T, what="the task to run")
    wait_until(t.running, timeout=T, what="the engine to ack the task")
    assert t.cancel()
    with pytest.raises(tc.Cancelled):
        t.result(T)
    assert cluster.submit(h.read_state, key, engine=0).result(T) == "cancelled+finally"


def test_tasks_lists_the_users_tasks_not_the_channels(cluster):
    t = cluster.submit(h.sleep_forever, engine=1)
    try:
        wait_until(t.running, timeout=T, what="the engine to ack the task")
        listed = cluster.tasks()
        assert [i.name for i in listed[1]] == ["sleep_forever"]
        assert listed[0] == ()
    finally:
        t.cancel()
    with pytest.raises(tc.Cancelled):
        t.result(T)


def _count_batches(monkeypatch) -> dict[int, int]:
    """Batches sent on each engine's channel from now on, by engine id."""
    from tinycoro.cluster.channel import ChannelClient

    sent: dict[int, int] = {}
    original = ChannelClient.send

    def send(self, payload):
        sent[self.eid] = sent.get(self.eid, 0) + 1
        return original(self, payload)

    monkeypatch.setattr(ChannelClient, "send", send)
    return sent


def _io_thread_turned(cluster) -> None:
    """Return once the client's IO thread has run what was queued on it before this call."""
    from tinycoro.cluster.internals import ClientSeam

    turned = threading.Event()
    ClientSeam(cluster.client).call_soon(turned.set)
    assert turned.wait(T)


def test_submits_made_in_a_row_leave_in_one_batch_per_engine(cluster, monkeypatch):
    # The IO thread used to send whatever was queued as soon as it got the GIL, which the
    # first submit's wake-up of it handed over: the other submits of the row went alone, a
    # batch each (8 for 8 tasks, seen), each with its own start, ack and outcome frames.
    # Plain Python's row leaves when the submitter blocks on a result (or after the window).
    import tinycoro.cluster.api as api

    monkeypatch.setattr(api, "FLUSH_WINDOW", 3600.0)  # only the blocking result() sends
    sent = _count_batches(monkeypatch)
    first = cluster.submit(h.add, 0, 1, engine=0)
    _io_thread_turned(cluster)  # it had its chance to send the first one alone
    assert first.stage == "waiting to be sent"
    rest = [cluster.submit(h.add, i, 1, engine=i % 2) for i in range(1, 8)]
    assert [t.result(T) for t in [first, *rest]] == list(range(1, 9))
    assert sent == {0: 1, 1: 1}


def test_a_submit_nothing_blocks_on_still_leaves(cluster, monkeypatch):
    sent = _count_batches(monkeypatch)
    t = cluster.submit(h.add, 20, 22, engine=1)
    wait_until(t.done, timeout=T, what="the task to be sent and end, awaited by nothing")
    assert t.result(0) == 42 and sent == {1: 1}


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory):
    """A cluster ipyparallel started on its own (reached with connect: no pid watcher)."""
    with cs.plain_ipyparallel_cluster(tmp_path_factory.mktemp("profile")) as (ipc, client):
        yield ipc, client


def test_an_unreachable_channel_keeps_the_ipyparallel_path_and_says_so(plain_cluster, monkeypatch,
                                                                       caplog):
    _, client = plain_cluster
    monkeypatch.setenv("TINYCORO_CLUSTER_CHANNEL_HOST", "192.0.2.1")  # TEST-NET: not ours
    with caplog.at_level(logging.WARNING, logger="tinycoro"):
        cluster = tc.cluster.connect(client)
    try:
        assert cluster.channels == {}
        said = [r.getMessage() for r in caplog.records if "no task channel" in r.getMessage()]
        assert len(said) == 2 and "ipyparallel" in said[0]
        before = len(client.history)
        assert cluster.submit(h.add, 2, 3).result(T) == 5
        assert len(client.history) == before + 1  # by an apply request
        with pytest.raises(ValueError, match="boom"):
            cluster.submit(h.boom, "boom").result(T)
    finally:
        cluster.stop()


def test_stop_closes_the_channels_and_their_threads(plain_cluster):
    _, client = plain_cluster
    before = set(threading.enumerate())  # another cluster's channels may be open here
    cluster = tc.cluster.connect(client)
    ports = {int(where.rsplit(":", 1)[1]) for where in cluster.channels.values()}
    assert ports and cluster.submit(h.add, 1, 1).result(T) == 2
    assert [t for t in set(threading.enumerate()) - before if t.name.startswith("tinycoro-channel")]
    cluster.stop()
    assert not [t for t in set(threading.enumerate()) - before
                if t.name.startswith("tinycoro-channel")]
    mine = psutil.Process().net_connections(kind="tcp")
    assert not [c for c in mine if c.raddr and c.raddr.port in ports]


@pytest.mark.parametrize("contexts", [2, 4])
def test_engines_of_several_contexts_serve_the_channel(contexts):
    with cs.started_cluster(1, contexts=contexts, timeout=START) as (c, _):
        assert list(c.channels) == [c.engines[0].id]

        async def main():
            return await tc.when_all(*(_awaited(c.submit(h.add, i, 1000)) for i in range(40)))

        assert tc.run(main(), contexts=2) == [i + 1000 for i in range(40)]
        assert len(c.stats()[c.engines[0].id].contexts) == contexts


async def _awaited(remote):
    return await remote


def test_an_engine_killed_mid_task_fails_what_its_channel_carried(plain_cluster):
    # last of those on plain_cluster: it leaves it one engine
    _, client = plain_cluster
    cluster = tc.cluster.connect(client)
    try:
        victim, survivor = cluster.engines
        assert sorted(cluster.channels) == [victim.id, survivor.id]
        doomed = cluster.submit(h.sleep_forever, engine=victim.id)
        wait_until(doomed.running, timeout=T, what="the victim to ack the task")
        os.kill(victim.pid, signal.SIGKILL)
        # Two witnesses see the death, the closed channel and the controller's unregistration,
        # and whichever is first fails the task: either way it ends, named, and the channel goes.
        with pytest.raises(tc.cluster.EngineLost,
                           match="task channel closed|left the cluster") as info:
            doomed.result(NOTICED)
        assert "while running 'sleep_forever'" in str(info.value)
        wait_until(lambda: victim.id not in cluster.channels, timeout=T,
                   what="the victim's channel to close")
        assert cluster.submit(h.add, 20, 22, engine=survivor.id).result(T) == 42
    finally:
        cluster.stop()
