"""The engine side of tc.cluster (``tinycoro.cluster.engine``) where no cluster is needed: the
check an engine makes before it starts submitted tasks."""

from __future__ import annotations

import pytest

pytest.importorskip("ipyparallel")

import tinycoro as tc
from tinycoro.core import get_default_scheduler, set_default_scheduler


@pytest.fixture
def default_scheduler():
    before = get_default_scheduler()
    sched = tc.Scheduler(1)
    sched.start()
    set_default_scheduler(sched)
    try:
        yield sched
    finally:
        set_default_scheduler(before)
        sched.stop()


def test_an_engine_checks_its_scheduler_runs_without_a_stats_snapshot(default_scheduler, monkeypatch):
    # Every request that starts tasks asks whether the scheduler runs; a full stats snapshot
    # (every context's counters and busy samples) cost about 5% of the engine's main thread.
    from tinycoro.cluster.engine import Agent

    def snapshot(self):
        raise AssertionError("the running check took a full stats snapshot")

    monkeypatch.setattr(tc.Scheduler, "stats", snapshot)
    assert Agent.scheduler() is default_scheduler


def test_an_engine_whose_scheduler_stopped_refuses_tasks_saying_so(default_scheduler):
    from tinycoro.cluster.engine import Agent

    default_scheduler.stop()
    with pytest.raises(RuntimeError, match="scheduler is not running.*%tinycoro restart"):
        Agent.scheduler()
    set_default_scheduler(None)
    with pytest.raises(RuntimeError, match="scheduler is not running"):
        Agent.scheduler()


def test_a_tasks_parent_keeps_the_request_header_not_the_batchs_buffers():
    # A task's parent (its output and outcome go under it) lives as long as the task; the
    # request's buffers are the pickled functions and arguments of every task of its batch.
    from tinycoro.cluster.messages import task_parent

    request = {
        "header": {"msg_id": "request", "msg_type": "apply_request", "session": "s"},
        "parent_header": {}, "metadata": {}, "content": {}, "buffers": [b"x" * 1024] * 8,
    }
    parent = task_parent(request, "token")
    assert parent["header"] == {"msg_id": "token", "msg_type": "apply_request", "session": "s"}
    assert not parent["buffers"]
    assert request["header"]["msg_id"] == "request" and len(request["buffers"]) == 8


# -- serve_here: one engine's part of Cluster.serve, run here on a plain scheduler ----------
def _serve_here_round(contexts, handler, clients):
    """Run ``serve_here(handler)`` (one listener) on *contexts* contexts, run ``clients(port)``
    against it, cancel the server; return what the clients returned."""
    import socket

    from tinycoro.cluster.engine import serve_here

    with socket.socket() as s:  # a free port; SO_REUSEPORT lets the listener take it at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main():
        server = tc.spawn(serve_here(handler, "127.0.0.1", port, 1))
        while True:  # the listener is up once a connection goes through (the first is served)
            try:
                conn = await tc.net.connect("127.0.0.1", port)
                break
            except ConnectionRefusedError:
                await tc.yield_now()
        try:
            return await clients(port, conn)
        finally:
            server.cancel()
            try:
                await server
            except tc.Cancelled:
                pass

    return tc.run(main(), contexts=contexts)


async def _read_to_eof(conn):
    data = b""
    async with conn:
        while chunk := await conn.recv(1024):
            data += chunk
    return data


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_serve_here_runs_the_handler_as_the_connections_task_itself(contexts):
    # The handler's coroutine is the connection's task, not awaited from a wrapper: every
    # resume through a wrapper frame cost 70-500 instructions per echo round trip (callgrind),
    # which two plain server processes on one port do not pay.
    import inspect
    import sys

    async def handler(conn):
        await conn.recv(1)  # resumed by the engine: what is below this frame now is the runtime
        frame, outer = sys._getframe(1), []
        while frame is not None:
            if frame.f_code.co_flags & inspect.CO_COROUTINE:
                outer.append(frame.f_code.co_name)
            frame = frame.f_back
        await conn.sendall(repr(outer).encode())

    async def clients(port, conn):
        await conn.sendall(b"x")
        return await _read_to_eof(conn)

    assert _serve_here_round(contexts, handler, clients) == b"[]"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_serve_here_closes_the_connection_however_the_handler_ends(contexts, caplog):
    # returned without closing, raised, or still waiting when the server is cancelled: each
    # connection is closed (its client reads to the end) without the handler closing it
    ended = tc.Event()

    async def handler(conn):
        what = await conn.recv(1)
        if what == b"r":
            await conn.sendall(b"returned")
            return
        if what == b"e":
            await conn.sendall(b"raised")
            raise ValueError("a failing handler")
        ended.set()
        await tc.Event().wait()  # until cancelled

    async def clients(port, first):
        out = []
        for conn, what in ((first, b"r"), (await tc.net.connect("127.0.0.1", port), b"e")):
            await conn.sendall(what)
            out.append(await _read_to_eof(conn))
        return out

    assert _serve_here_round(contexts, handler, clients) == [b"returned", b"raised"]

    async def parked_clients(port, conn):
        await conn.sendall(b"w")
        await ended.wait()
        return conn

    conn = _serve_here_round(contexts, handler, parked_clients)  # cancelled: closed by then

    async def after():
        return await _read_to_eof(conn)

    assert tc.run(after(), contexts=1) == b""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_serve_here_a_handler_that_cannot_be_called_fails_each_connection_not_the_server(contexts):
    # a wrong signature raises at the call, before any task: each connection is closed and
    # its task fails with the TypeError, and the listener goes on accepting
    async def handler(conn, extra):
        await conn.sendall(b"never")

    async def clients(port, first):
        out = [await _read_to_eof(first)]
        out.append(await _read_to_eof(await tc.net.connect("127.0.0.1", port)))
        return out

    assert _serve_here_round(contexts, handler, clients) == [b"", b""]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_serve_here_a_handler_that_returns_no_coroutine_fails_each_connection_not_the_server(
        contexts):
    # a plain function (not ``async def``) returns None: nothing to run as the connection's
    # task. Each connection is closed and the listener goes on accepting, as when awaiting
    # the handler's result failed inside a connection's own task.
    calls = []

    def handler(conn):
        calls.append(conn)

    async def clients(port, first):
        out = [await _read_to_eof(first)]
        out.append(await _read_to_eof(await tc.net.connect("127.0.0.1", port)))
        return out

    assert _serve_here_round(contexts, handler, clients) == [b"", b""]
    assert len(calls) == 2
