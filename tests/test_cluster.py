"""tc.cluster on a real local ipyparallel cluster of two engines (started once for the module):
submit and await from plain Python, tinycoro and asyncio, remote exceptions, cancel, map,
serve, stats while an engine is busy, the ipyparallel internals used, and bad input. Engine
loss, serve across a stop and the lifecycle are in test_cluster_loss.py, output in the
submitting cell in test_cluster_kernel.py.

Every wait is on an outcome, a reply or runtime state; timeouts only bound a broken build.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import socket
import threading

import pytest

pytest.importorskip("ipyparallel")

import tinycoro as tc
from helpers.runtime import run_as_cell, wait_until
import helpers.cluster_tasks as h
import helpers.cluster as cs

pytestmark = pytest.mark.timeout(180)  # the first test also waits for the cluster to start

START = 120  # engines may take 10-30 s to come up on a loaded 2-core machine
T = 30  # bound on any one remote call


@pytest.fixture(scope="module")
def cluster():
    with cs.started_cluster(2, contexts=1, timeout=START) as (c, _):
        yield c


# -- engines, submit, await --------------------------------------------------------------------
def test_engines_started_here_hand_the_gil_over_often(cluster):
    # A context computing on an engine holds the GIL for the switch interval at a time; the
    # kernel's own threads need it for every message (the next submit, replies, output), so
    # with CPython's 5 ms default a busy engine took its submissions in at a trickle.
    from tinycoro.cluster.local import ENGINE_SWITCH_INTERVAL

    got = {e.id: cluster.submit(h.switch_interval, engine=e.id).result(T) for e in cluster.engines}
    assert got == {e.id: ENGINE_SWITCH_INTERVAL for e in cluster.engines}


def test_two_engines_each_with_its_own_process(cluster):
    engines = cluster.engines
    assert [e.id for e in engines] == [0, 1]
    assert len({e.pid for e in engines}) == 2
    assert all(e.host == socket.gethostname() for e in engines)
    with pytest.raises(dataclasses.FrozenInstanceError):
        engines[0].pid = 1
    # each runs the function in its own process: the pid it reports is the one listed
    for e in engines:
        assert cluster.submit(h.pid, engine=e.id).result(T) == e.pid


def test_the_controller_of_a_started_cluster_keeps_no_task_records(cluster):
    # Outcomes come home on IOPub; a Hub storing every request, reply and output (ipyparallel's
    # default) only costs the controller CPU per submit and memory for the cluster's life.
    assert cluster.submit(h.add, 1, 2).result(T) == 3
    with pytest.raises(Exception, match="NoData|NoDB|doesn't store"):
        cluster.client.hub_history()


def test_submit_and_result_from_plain_python(cluster):
    t = cluster.submit(h.add, 2, b=3)
    assert t.result(T) == 5
    assert t.done()
    assert t.engine in {e.id for e in cluster.engines}
    assert t.result(0) == 5  # a finished task answers at once, again


def test_what_a_task_prints_arrives_before_its_outcome(cluster, capsys):
    # The engine buffers stdout (ipykernel flushes it every 0.2 s); the outcome goes out after
    # that buffer, so result() returns with the output already written here.
    assert cluster.submit(h.print_then_return, "printed last thing").result(T) == "printed last thing"
    assert "printed last thing" in capsys.readouterr().out


def test_a_task_end_does_not_hold_its_context_up_behind_the_iopub_thread(cluster):
    # The outcome of an ending task goes out through the engine's IOPub thread, which needs the
    # GIL the busy context holds; the context must not wait for that thread to run its other
    # tasks (a blocking flush per task end made 8 short tasks on one engine wait at each end).
    assert cluster.submit(h.context_runs_on_while_iopub_is_held).result(2 * T) is True


def test_a_running_task_keeps_no_buffer_of_its_request(cluster):
    # The task's context is a copy of the apply request's; ipykernel keeps that request (with
    # every pickled function and argument of the batch) as its parent in a ContextVar, which
    # would then live as long as the task.
    assert cluster.submit(h.parent_buffers, b"x" * 100).result(T) == 0


def test_await_from_a_tinycoro_task(cluster):
    async def main():
        a = cluster.submit(h.add, 1, 2, engine=0)
        b = cluster.submit(h.add, 3, 4, engine=1)
        return await a + await b, tc.current_task() is not None

    assert tc.run(main(), contexts=2) == (10, True)


def test_tasks_on_every_context_submit_and_await_at_once(cluster, contexts):
    async def one(i):
        return await cluster.submit(h.add, i, 1000)

    async def main():
        return await tc.when_all(*(one(i) for i in range(40)))

    assert tc.run(main(), contexts=contexts) == [i + 1000 for i in range(40)]


def test_await_from_asyncio(cluster):
    async def main():
        return await asyncio.wait_for(_awaited(cluster.submit(h.add, "a", "b")), T)

    assert asyncio.run(main()) == "ab"


async def _awaited(remote):
    return await remote


def test_engine_none_spreads_over_both_engines(cluster):
    # the engine with the fewest of our tasks in flight: two tasks that stay in flight
    # until cancelled land on different engines
    a = cluster.submit(h.sleep_forever)
    b = cluster.submit(h.sleep_forever)
    try:
        assert {a.engine, b.engine} == {0, 1}
    finally:
        a.cancel()
        b.cancel()
    for t in (a, b):
        with pytest.raises(tc.Cancelled):
            t.result(T)


def test_result_timeout_leaves_the_task_running(cluster):
    t = cluster.submit(h.sleep_forever)
    with pytest.raises(TimeoutError):
        t.result(0)
    assert not t.done()
    t.cancel()
    with pytest.raises(tc.Cancelled):
        t.result(T)


# -- exceptions ----------------------------------------------------------------------------
def test_remote_exception_is_raised_here_with_its_remote_traceback(cluster):
    t = cluster.submit(h.boom, "went wrong over there", engine=1)
    with pytest.raises(ValueError, match="went wrong over there") as info:
        t.result(T)
    cause = info.value.__cause__
    assert isinstance(cause, tc.cluster.RemoteTraceback)
    assert "cluster_tasks.py" in cause.text and "in boom" in cause.text
    assert "tinycoro/core/" not in cause.text  # from the task's frame, not the engine's step
    assert f"engine 1 ({cluster.engines[1].host}:{cluster.engines[1].pid})" in str(cause)

    async def main():
        with pytest.raises(ValueError, match="again") as info:
            await cluster.submit(h.boom, "again")
        return info.value.__cause__

    assert isinstance(tc.run(main()), tc.cluster.RemoteTraceback)


def _spin_until_done(t, limit=5_000_000):
    """Stay in the calling step (no await) until *t* is done, or for *limit* looks: the time a
    submit's outcome needs to come back, were it sent before the step is over."""
    for _ in range(limit):
        if t.done():
            return


def test_a_failure_awaited_by_the_step_that_submitted_it_is_not_reported(cluster, capsys, tiny_switch_interval):
    # The outcome can come back while the step that submitted is still on its way to the
    # await (here: held in a spin until it has): whether anything awaits is asked once that
    # step is over, in the submitter's own order.
    async def in_tinycoro():
        t = cluster.submit(h.boom, "awaited by its submitter", engine=0)
        _spin_until_done(t)
        with pytest.raises(ValueError, match="awaited by its submitter"):
            await t

    async def in_asyncio():
        t = cluster.submit(h.boom, "awaited by its submitter", engine=1)
        _spin_until_done(t)
        with pytest.raises(ValueError, match="awaited by its submitter"):
            await asyncio.wait_for(_awaited(t), T)

    tc.run(in_tinycoro(), contexts=2)
    assert "nothing awaited" not in capsys.readouterr().err, "reported from a tinycoro task"
    asyncio.run(in_asyncio())
    assert "nothing awaited" not in capsys.readouterr().err, "reported from an asyncio task"


def test_a_failure_plain_python_takes_after_it_ended_is_not_reported(cluster, capsys):
    # Plain Python has no step to wait for: the outcome can come back before the line that
    # submitted reaches result(), which still takes it. Only a handle dropped with its failure
    # untaken is one nothing awaited (as asyncio reports a future's exception never retrieved).
    t = cluster.submit(h.boom, "taken late", engine=0)
    wait_until(t.done, timeout=T, what="the failure to come back")
    with pytest.raises(ValueError, match="taken late"):
        t.result(T)
    assert "nothing awaited" not in capsys.readouterr().err


def test_a_failure_plain_python_drops_untaken_is_reported_once_the_handle_goes(cluster, capsys):
    import gc

    t = cluster.submit(h.boom, "dropped untaken", engine=1)
    wait_until(t.done, timeout=T, what="the failure to come back")
    del t
    gc.collect()
    err = capsys.readouterr().err
    assert err.count("failed and nothing awaited it") == 1 and "dropped untaken" in err


def test_a_finished_task_is_not_kept_alive_by_the_cluster(cluster):
    # ipyparallel keeps each request's future, with its done callbacks, for the client's life:
    # a callback holding the request's tasks kept every handle, and its outcome, alive.
    import gc
    import weakref

    t = cluster.submit(h.add, [0] * 1000, [1])
    assert len(t.result(T)) == 1001
    ref = weakref.ref(t)
    del t
    gc.collect()
    wait_until(lambda: ref() is None, timeout=T, what="the finished task to be freed")


def test_an_await_from_a_task_the_submitting_asyncio_step_made_is_in_time(cluster, capsys, tiny_switch_interval):
    # asyncio.wait_for (and gather) await in a task of their own, which starts on the loop's
    # next pass; an outcome back before then is not a failure nothing awaited. A task that
    # nothing awaits is still reported.
    async def main():
        t = cluster.submit(h.boom, "awaited through wait_for", engine=0)
        _spin_until_done(t)
        with pytest.raises(ValueError):
            await asyncio.wait_for(_awaited(t), T)
        dropped = cluster.submit(h.boom, "awaited by nobody", engine=1)
        for _ in range(30_000):  # until its outcome is back (bounded: about T seconds)
            if dropped.done():
                break
            await asyncio.sleep(0.001)
        for _ in range(3):  # the question is asked on the loop, two passes on
            await asyncio.sleep(0)

    asyncio.run(main())
    # The IO thread asks after it has marked the task done (which the loop above saw), so the
    # report may come a moment later; with the loop closed by then, it is made at once.
    err = ""

    def reported() -> bool:
        nonlocal err
        err += capsys.readouterr().err
        return "awaited by nobody" in err

    wait_until(reported, timeout=T, what="the report of the failure nothing awaited")
    assert "nothing awaited it" in err and "awaited through wait_for" not in err


def test_result_in_the_step_that_submitted_returns_the_outcome(cluster):
    # result() blocks the step that submitted (a notebook cell's, on its guest engine, or an
    # asyncio task's): the request must not wait for that step to end.
    async def in_asyncio():
        return cluster.submit(h.add, 1, 2).result(T)

    async def cell():
        return cluster.submit(h.add, 3, 4).result(T)

    assert asyncio.run(in_asyncio()) == 3
    assert run_as_cell(cell()).result() == 7


def test_an_exception_that_cannot_travel_arrives_as_a_remote_error(cluster):
    from ipyparallel.error import RemoteError

    with pytest.raises(RemoteError, match="no pickle for me") as info:
        cluster.submit(h.raise_unpicklable).result(T)
    assert "raise_unpicklable" in info.value.__cause__.text


# -- cancel --------------------------------------------------------------------------------
def test_cancel_raises_cancelled_at_the_remote_await_and_runs_its_finally(cluster):
    key = "cancel-1"
    t = cluster.submit(h.guarded, key, engine=0)
    wait_until(lambda: cluster.submit(h.read_state, key, engine=0).result(T) == "waiting",
               timeout=T, what="the remote task to wait")
    assert t.cancel()
    with pytest.raises(tc.Cancelled):
        t.result(T)
    assert not t.cancel()  # already ended
    # what the remote task saw, read by a later task on the same engine
    assert cluster.submit(h.read_state, key, engine=0).result(T) == "cancelled+finally"


def test_cancel_right_after_submit_cancels_once_the_engine_started_it(cluster):
    key = "cancel-2"
    t = cluster.submit(h.guarded, key, engine=1)
    t.cancel()  # before the engine even replied: sent once it has started the task
    with pytest.raises(tc.Cancelled):
        t.result(T)
    assert cluster.submit(h.read_state, key, engine=1).result(T) in (
        None,  # cancelled before its first step: its body never ran
        "cancelled+finally",
    )


# -- submits made together ------------------------------------------------------------------
class _RoutedOut:
    """A stdout that writes into the list the current context names: shows in which
    submitter's context each remote task's output was written here."""

    def __init__(self, sink):
        self.sink = sink

    def write(self, text):
        target = self.sink.get(None)  # None: not a task's output
        if target is not None:
            target.append(text)
        return len(text)

    def flush(self):
        pass


def test_submits_made_together_travel_to_their_engine_as_one_request(cluster, monkeypatch):
    # Each request costs the engine's shell and IOPub threads about a millisecond of GIL time
    # (dispatch, busy/idle status, two stream flushes, the reply) while its contexts compute:
    # submits queued for one engine before the client's IO thread next turns go as one
    # request. Holding that thread makes "together" certain here. Each task still has its own
    # outcome, output (in its own submitter's context), start failure and cancel.
    import contextvars

    sink = contextvars.ContextVar("sink")
    monkeypatch.setattr("sys.stdout", _RoutedOut(sink))
    outs, tasks = [], []
    with cs.io_thread_held(cluster, T):
        for i in range(5):
            ctx = contextvars.copy_context()
            out: list = []
            ctx.run(sink.set, out)
            outs.append(out)
            tasks.append(ctx.run(cluster.submit, h.request_and_print, f"<{i}>", engine=0))
        failing = cluster.submit(h.boom, "fails alone", engine=0)
        refused = cluster.submit(h.add, h.RefusedOnTheEngine(), 1, engine=0)
        key = "batched-cancel"
        cancelled = cluster.submit(h.guarded, key, engine=0)
        cancelled.cancel()
    requests = {t.result(T) for t in tasks}
    assert len(requests) == 1, f"5 submits made together reached the engine as {len(requests)} requests"
    for i, out in enumerate(outs):
        assert "".join(out) == f"<{i}>"
    with pytest.raises(ValueError, match="fails alone"):
        failing.result(T)
    with pytest.raises(ValueError, match="does not unpack here") as info:
        refused.result(T)
    assert isinstance(info.value.__cause__, tc.cluster.RemoteTraceback)
    with pytest.raises(tc.Cancelled):
        cancelled.result(T)
    assert cluster.submit(h.read_state, key, engine=0).result(T) in (None, "cancelled+finally")
    assert len({t.msg_id for t in tasks + [failing, refused, cancelled]}) == 1


def test_outcomes_waiting_for_the_engines_iopub_thread_come_home_as_one_message(cluster, monkeypatch):
    # Every message costs the engine's IOPub thread, the controller's relay and Hub, and this
    # client's IO thread a fraction of a millisecond of CPU, on the cores the engines compute
    # on: the outcomes of tasks that end while the IOPub thread is busy (the tasks of one
    # round end in one turn) go together. The engine holds its IOPub thread until 4 tasks have
    # ended behind it, which makes "together" certain here; each task still gets its own.
    batches: list[int] = []
    decode = cluster._seam.decode

    def counting(frames):
        msg = decode(frames)
        if msg["header"]["msg_type"] == "data_message":
            batches.append(len(msg["buffers"]))
        return msg

    monkeypatch.setattr(cluster._seam, "decode", counting)
    # Outcomes come by IOPub on ipyparallel's path (an engine without a task channel, and a
    # task that printed): these tasks take it.
    monkeypatch.setattr(cluster, "_channels", {})
    key = "outcomes-together"
    with cs.io_thread_held(cluster, T):  # the 5 submits leave as one request
        holder = cluster.submit(h.hold_iopub_until_ended, key, 4, engine=0)
        tasks = [cluster.submit(h.end_once_iopub_is_held, key, i, engine=0) for i in range(4)]
    assert holder.result(T) == "held"
    assert [t.result(T) for t in tasks] == [0, 1, 2, 3]
    assert len(batches) == 1, f"5 outcomes waiting at once came home as {len(batches)} messages"


def test_tasks_ending_in_one_turn_wake_the_engines_iopub_thread_once_after_the_turn(cluster):
    # Asking for the IOPub thread hands the GIL over (a message on its event pipe); asked at
    # each task end, it sent the first outcome alone while the turn's other tasks waited for
    # the GIL to end. Asked once the turn is over, the turn's outcomes go together.
    assert cluster.submit(h.iopub_wakes_for_tasks_ending_in_one_turn, 3, engine=1).result(T) == [3]


def test_tasks_of_a_function_that_does_not_unpack_each_fail_with_the_same_traceback(cluster):
    # The tasks of one request share a function, unpacked once: one that does not unpack on
    # the engine fails each task calling it with the same outcome, not with one exception
    # re-raised per task, whose traceback grew by a frame at every raise.
    with cs.io_thread_held(cluster, T):  # the three submits travel as one request
        fn = h.FunctionRefusedOnTheEngine()
        tasks = [cluster.submit(fn, engine=0) for _ in range(3)]
    texts = set()
    for t in tasks:
        with pytest.raises(ValueError, match="does not unpack here") as info:
            t.result(T)
        texts.add(str(info.value.__cause__))
    assert len({t.msg_id for t in tasks}) == 1
    assert len(texts) == 1, "the tasks' tracebacks differ:\n" + "\n---\n".join(sorted(texts))


def test_a_submit_through_a_closed_client_is_refused_at_the_call(cluster, monkeypatch):
    # A submit is queued for the client's IO thread; with the client closed that thread is
    # gone, and a task queued there would wait for ever.
    monkeypatch.setattr(type(cluster._seam), "closed", property(lambda seam: True))
    with pytest.raises(OSError, match="client of this cluster was closed"):
        cluster.submit(h.add, 1, 2)
    monkeypatch.undo()
    assert cluster.submit(h.add, 1, 2).result(T) == 3


# -- map -----------------------------------------------------------------------------------
def test_map_returns_results_in_order_from_both_engines(cluster):
    async def main():
        return await cluster.map(h.item_and_pid, range(10), limit=2)

    out = tc.run(main())
    assert [x for x, _ in out] == list(range(10))
    assert {p for _, p in out} == {e.pid for e in cluster.engines}


def test_map_limit_caps_what_is_in_flight_per_engine(cluster):
    seen: list[int] = []

    async def main():
        # stats probes while the map runs: never more than `limit` tasks of ours in flight
        # on one engine (our own count, which is what submit balances by)
        async def probe():
            while True:
                with cluster._lock:
                    seen.append(max(len(s) for s in cluster._by_engine.values()))
                await tc.sleep(0.001)

        p = tc.spawn(probe())
        try:
            return await cluster.map(h.item_and_pid, range(12), limit=1)
        finally:
            p.cancel()

    assert [x for x, _ in tc.run(main(), contexts=2)] == list(range(12))
    assert max(seen) == 1


def test_map_raises_the_first_failure_and_cancels_the_rest(cluster):
    key = "map-cancel"
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(T)
    # item 0 waits until cancelled (recording that it was); item 1 fails when we say so
    fn = h.WaitOrFailWhenReleased(key, lst.getsockname()[1])
    try:
        with tc.Scheduler(1) as s:
            mapping = s.submit(cluster.map(fn, [0, 1], limit=1))
            peer, _ = lst.accept()  # item 1 runs
            wait_until(lambda: "waiting" in _states(cluster, key), timeout=T,
                       what="item 0 to wait")
            with peer:
                peer.sendall(b"x")
                with pytest.raises(RuntimeError, match="item 1 is bad"):
                    s.run_sync(_join(mapping), timeout=T)
    finally:
        lst.close()
    wait_until(lambda: "cancelled+finally" in _states(cluster, key), timeout=T,
               what="the other map task to be cancelled")

    async def in_asyncio():
        return await cluster.map(h.boom, ["from asyncio"], limit=1)

    with pytest.raises(ValueError, match="from asyncio"):
        asyncio.run(in_asyncio())


def _states(cluster, key):
    return [cluster.submit(h.read_state, key, engine=e.id).result(T) for e in cluster.engines]


def test_map_of_nothing(cluster):
    assert tc.run(cluster.map(h.add, [])) == []


# -- serve ---------------------------------------------------------------------------------
def _accepting_everywhere(cluster, port) -> bool:
    listed = cluster.tasks()
    return len(listed) == 2 and all(
        any(i.waits_on == f"accept on 127.0.0.1:{port}" for i in infos)
        for infos in listed.values()
    )


def test_serve_spreads_connections_over_both_engines(cluster):
    port = cs.free_port()

    async def client():
        conn = await tc.net.connect("127.0.0.1", port)
        async with conn:
            data = b""
            while chunk := await conn.recv():
                data += chunk
        return int(data)

    async def clients():
        return await tc.when_all(*(client() for _ in range(100)))

    with tc.Scheduler(2) as s:
        server = s.submit(cluster.serve(h.reply_pid, port))
        # ready once every engine has its accept in flight (runtime state, not a sleep)
        wait_until(lambda: _accepting_everywhere(cluster, port), timeout=T, what="both engines to listen")
        pids = s.run_sync(clients(), timeout=T)
        server.cancel()
        with pytest.raises(tc.Cancelled):
            s.run_sync(_join(server), timeout=T)
    assert len(pids) == 100
    assert set(pids) == {e.pid for e in cluster.engines}
    # serve returns once the engines have closed their listeners: the port is free again
    assert cs.port_is_free(port)


async def _join(task):
    return await task


def test_serve_with_several_listeners_per_engine(cluster):
    port = cs.free_port()
    # each engine's task channel keeps a receive in flight: counted from there
    base = {eid: sum(c.io_inflight for c in s.contexts) for eid, s in cluster.stats().items()}

    def listening(n):
        stats = cluster.stats()
        return len(stats) == 2 and all(
            sum(c.io_inflight for c in s.contexts) >= base[eid] + n for eid, s in stats.items()
        )

    async def client():
        conn = await tc.net.connect("127.0.0.1", port)
        async with conn:
            return int(await conn.recv())

    async def clients():
        return await tc.when_all(*(client() for _ in range(40)))

    with tc.Scheduler(1) as s:
        server = s.submit(cluster.serve(h.reply_pid, port, contexts=2))
        wait_until(lambda: listening(2), timeout=T, what="two accepts in flight per engine")
        assert set(s.run_sync(clients(), timeout=T)) == {e.pid for e in cluster.engines}
        server.cancel()
        with pytest.raises(tc.Cancelled):
            s.run_sync(_join(server), timeout=T)
    assert cs.port_is_free(port)


def test_serve_raises_what_an_engine_raised_and_stops_the_others(cluster):
    # a socket on the port without SO_REUSEPORT: every engine's listen fails
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as info:
            tc.run(cluster.serve(h.reply_pid, port))
    assert info.value.errno == errno.EADDRINUSE
    assert "serve_here" in info.value.__cause__.text
    assert cs.port_is_free(port)


# -- stats -----------------------------------------------------------------------------------
def test_each_engines_load_says_whether_its_gil_is_enabled(cluster):
    """What the dashboard needs to flag an engine GIL-bound only where there is a GIL: the
    engines run this interpreter, so their GIL is as this process's."""
    from tinycoro import compiled

    loads = cluster.load(timeout=T)
    assert sorted(loads) == [0, 1]
    assert [load.gil for load in loads.values()] == [compiled.gil_enabled()] * 2


def test_stats_answer_while_an_engine_runs_a_long_cell(cluster):
    """A %px-style cell on engine 0 awaits our socket (so it is blocked in its await for as
    long as we say); stats and tasks still come from both engines."""
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(T)
    port = lst.getsockname()[1]
    rc = cluster.client
    cell = rc[0].execute(
        "import tinycoro as tc\n"
        f"conn = await tc.net.connect('127.0.0.1', {port})\n"
        "await conn.recv(1)\n"
        "await conn.close()\n",
        block=False,
    )
    sleeper = cluster.submit(h.sleep_forever, engine=1)
    try:
        peer, _ = lst.accept()  # the cell is running, and now waits for our byte
        with peer:
            wait_until(lambda: [t.name for t in cluster.tasks().get(1, ())] == ["sleep_forever"],
                       timeout=T, what="engine 1's task to run")
            stats = cluster.stats(timeout=T)
            assert sorted(stats) == [0, 1]
            assert all(isinstance(v, tc.SchedulerStats) and v.running for v in stats.values())
            tasks = cluster.tasks(timeout=T)
            assert tasks[0] == ()  # the cell runs on the engine's main thread, not a task
            [info] = tasks[1]
            assert isinstance(info, tc.TaskInfo)
            assert info.name == "sleep_forever" and info.waits_on  # its wording: the core's
            assert not cell.ready()  # the cell still waits: the probe did not queue behind it
            peer.sendall(b"x")
        cell.get(timeout=T)
    finally:
        lst.close()
        sleeper.cancel()
    with pytest.raises(tc.Cancelled):
        sleeper.result(T)


# -- the private names of ipyparallel and ipykernel ----------------------------------------------
def test_the_internals_used_exist_in_the_installed_versions(cluster):
    from tinycoro.cluster import internals

    internals.check_client(cluster.client)  # raises UnsupportedVersion naming what is missing
    assert cluster.client[:].apply_sync(h.engine_internals_ok) == [True, True]


def test_a_notebook_function_travels_by_value_and_a_module_one_by_reference(cluster):
    """What cloudpickle ships: a function made here (a closure) with the values it names; a
    module's function by name (the engine imports helpers.cluster_tasks)."""
    from tinycoro.cluster.messages import pack

    offset = 1000

    async def shifted(x):
        await tc.sleep(0)
        return await h.add(x, offset)

    assert cluster.submit(shifted, 5).result(T) == 1005
    assert b"helpers.cluster_tasks" in pack(h.add) and len(pack(h.add)) < 200


# -- bad input -------------------------------------------------------------------------------
def test_bad_input_is_refused_at_the_call(cluster):
    coro = h.add(1, 2)
    with pytest.raises(TypeError, match="not a coroutine object"):
        cluster.submit(coro)
    with pytest.raises(TypeError, match="async function"):
        cluster.submit(h.not_async)
    with pytest.raises(TypeError, match="async function"):
        cluster.submit(42)
    with pytest.raises(ValueError, match="engine 7 is unknown"):
        cluster.submit(h.add, 1, 2, engine=7)
    with pytest.raises(TypeError, match="engine must be an int"):
        cluster.submit(h.add, 1, 2, engine="0")
    with pytest.raises(ValueError, match="limit"):
        tc.run(cluster.map(h.add, [1], limit=0))
    with pytest.raises(ValueError, match="port"):
        tc.run(cluster.serve(h.reply_pid, 0))
    with pytest.raises(TypeError, match="ipyparallel.Client"):
        tc.cluster.connect("not a client")
    threads = set(threading.enumerate())
    with pytest.raises(ValueError, match="n must be"):
        tc.cluster.start(0)
    with pytest.raises(ValueError, match="contexts must be"):
        tc.cluster.start(1, contexts=0)
    with pytest.raises(TypeError, match="n must be an int"):
        tc.cluster.start(1.5)
    assert set(threading.enumerate()) == threads  # refused before anything started
    with pytest.raises(TypeError, match="pickle"):  # arguments travel pickled
        cluster.submit(h.add, threading.Lock(), 1)
    assert cluster.submit(h.add, 1, 1).result(T) == 2  # and nothing was left half-sent


def test_map_in_asyncio_with_a_limit(cluster):
    async def main():
        return await asyncio.wait_for(cluster.map(h.item_and_pid, range(6), limit=1), T)

    out = asyncio.run(main())
    assert [x for x, _ in out] == list(range(6))


def test_result_inside_a_tinycoro_task_is_refused(cluster):
    t = cluster.submit(h.add, 1, 1)

    async def main():
        with pytest.raises(RuntimeError, match="await it"):
            t.result()
        return await t

    assert tc.run(main()) == 2
