"""A stop that abandons many parked tasks whose wakes are already queued (rule 13).

At a stop, the drain cancels every armed multishot receive first, and each one's last
completion wakes the recv parked on it: the wake is queued on the engine's ready queue before
the engine takes its parked tasks off their waiter lists, so each ticket's ``abort()`` says
"a wake is on its way" and the engine waits for that wake to have arrived. It looked for it
with ``task in ready``, a scan of the ready queue per task: quadratic in the parked tasks
(908M instructions at 6,000 idle connections). These tests hold the behaviour at large counts
(every task unwound, every handed-over value given back) and count the entries read, never the
time taken."""

from __future__ import annotations

import collections
import socket
import time

import pytest

import tinycoro as tc
from tinycoro import lowlevel as ll
from tinycoro.core.engine import ArrivedWakes
from tinycoro.net import multishot

pytestmark = pytest.mark.timeout(120)

MANY = 3000


class _Task:  # stands in for a task: a hashable object compared by identity
    __slots__ = ()


def test_arrived_wakes_reads_each_entry_once():
    ready: collections.deque = collections.deque(_Task() for _ in range(MANY))
    arrived = ArrivedWakes(ready)
    for task in list(ready):
        assert task in arrived
    late = [_Task() for _ in range(MANY)]
    for task in late:  # wakes that arrive one by one while the engine waits for them
        assert task not in arrived
        ready.append(task)
        assert task in arrived
    assert arrived.read == 2 * MANY  # every entry read once, none scanned again


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_stop_gives_back_what_queued_wakes_handed_over(contexts):
    """Each task's abort finds its wake queued already (the waker popped it and woke it):
    the stop must give back every value those wakes handed over, once, and unwind each task."""
    given_back = []
    unwound = []
    parked = []

    async def waiter(i):
        me = ll.current_task()

        def abort():
            me.wake(("permit", i))  # popped and woken: the wake is queued before abort returns
            return False

        try:
            parked.append(i)
            await ll.park(ll.Park(abort, "a permit", given_back.append))
        finally:
            unwound.append(i)

    sched = tc.Scheduler(contexts).start()
    tasks = [sched.submit(waiter(i)) for i in range(MANY)]
    deadline = time.monotonic() + 60
    while sum(c.parked for c in sched.stats().contexts) < MANY:
        assert time.monotonic() < deadline, "the tasks never parked"
        time.sleep(0.01)
    sched.stop(timeout=0)  # no cancel pass: every task is abandoned while parked
    assert sorted(given_back) == [("permit", i) for i in range(MANY)]
    assert sorted(unwound) == list(range(MANY))
    assert all(t.done() and t.cancelled() for t in tasks)


@pytest.mark.skipif(not multishot.AVAILABLE, reason="the multishot recv is compiled only")
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_stop_with_many_idle_connections_unwinds_every_task(contexts):
    """Idle connections, each with a task parked in recv on its armed multishot: the stop's
    drain wakes each recv as its multishot ends, then takes every task off and closes it."""
    unwound = []

    async def hold(conn):
        try:
            async with conn:
                await conn.recv(100)
        finally:
            unwound.append(conn)

    async def serve(lst):
        async with lst:
            for _ in range(MANY):
                tc.spawn(hold(await lst.accept()))

    sched = tc.Scheduler(contexts).start()
    lst = sched.run_sync(tc.net.listen("127.0.0.1", 0, backlog=1024), timeout=30)
    server = sched.submit(serve(lst))
    clients = [socket.create_connection(lst.getsockname()) for _ in range(MANY)]
    try:
        deadline = time.monotonic() + 60
        while not server.done() or sum(c.parked for c in sched.stats().contexts) < MANY:
            assert time.monotonic() < deadline, "the connections never went idle in recv"
            time.sleep(0.01)
        sched.stop(timeout=0)
        assert len(unwound) == MANY
        assert all(conn.closed for conn in unwound)  # each descriptor released by its exit
        assert all(c.parked == 0 and c.queued == 0 for c in sched.stats().contexts)
    finally:
        for c in clients:
            c.close()
