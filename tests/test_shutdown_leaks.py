"""What an abandoned task owns is released when its scheduler gives up on it
(rule 13), and two argument checks that used to differ between sibling calls.

An abandoned task is one the scheduler closes instead of letting it finish: ``tc.run`` raising
DeadlockError, ``stop()`` past its timeout. Its ``async with`` exits run while the engine shuts
down, where no await can suspend; the descriptor must still be released then and there, not
whenever the garbage collector gets round to the half-closed coroutine.
"""

from __future__ import annotations

import array
import contextlib
import gc
import logging
import os
import socket

import pytest

import tinycoro as tc

from helpers.runtime import open_fds, opened_since
from helpers.tls import tls_pair


pytestmark = pytest.mark.timeout(60)

EOF_WAIT = 10.0  # seconds the peer waits for EOF before the test fails


@contextlib.contextmanager
def no_gc():
    """Keep the cyclic GC out of the way: a descriptor released only when a half-closed
    coroutine is collected must count as leaked."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _plain_listener() -> socket.socket:
    """A listener outside any scheduler: the peer that must see EOF."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    return lsock


def _assert_peers_see_eof(lsock: socket.socket, n: int) -> None:
    for _ in range(n):
        peer, _ = lsock.accept()
        with peer:
            peer.settimeout(EOF_WAIT)  # a leaked descriptor: socket.timeout fails the test
            assert peer.recv(1) == b""


def _unclean(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "did not close cleanly" in r.getMessage()]


def test_deadlock_error_releases_the_socket_of_a_task_parked_in_async_with(contexts, caplog):
    # A task parked forever inside `async with conn:`. tc.run raises
    # DeadlockError and closes the coroutine; its `async with` exit awaits conn.close(), which
    # could not suspend there ("coroutine ignored GeneratorExit"). One stream was then closed
    # only by the coroutine's finalizer; of two nested ones the outer stayed open for good and
    # its peer never saw EOF.
    n = 2 * contexts  # tasks on every context
    lsock = _plain_listener()
    port = lsock.getsockname()[1]
    finished = []

    async def holder(i, connected):
        try:
            conn = await tc.net.connect("127.0.0.1", port)
            async with conn, await tc.net.connect("127.0.0.1", port):
                connected.count_down()
                await tc.Event().wait()  # nobody will ever set it
        finally:
            finished.append(i)  # the finally block runs to its end

    async def main():
        connected = tc.Latch(n)
        tasks = [tc.spawn(holder(i, connected)) for i in range(n)]
        await connected.wait()
        for t in tasks:
            await t

    caplog.set_level(logging.WARNING, logger="tinycoro")
    with lsock, no_gc():
        before = open_fds()
        with pytest.raises(tc.DeadlockError):
            tc.run(main(), contexts=contexts, deadlock_timeout=0.3)
        _assert_peers_see_eof(lsock, 2 * n)
        assert sorted(finished) == list(range(n))
        assert not opened_since(before)
    assert _unclean(caplog) == []


def test_stop_releases_every_kind_of_resource_an_abandoned_task_holds(tmp_path, contexts, caplog):
    # stop(timeout=0) abandons tasks at once; each holds a stream, a listener, a Unix listener,
    # a UDP socket and a file in nested `async with` blocks, plus one closed in a `finally`
    # after another close: every close completes, none is left to the GC.
    n = contexts
    lsock = _plain_listener()
    port = lsock.getsockname()[1]
    path = tmp_path / "data"
    path.write_bytes(b"x")
    finished = []

    async def holder(i, ready):
        conn = await tc.net.connect("127.0.0.1", port)
        other = await tc.net.connect("127.0.0.1", port)
        try:
            async with conn, await tc.net.listen() as lst, await tc.net.udp() as u:
                async with await tc.net.listen_unix(tmp_path / f"s{i}") as ul:
                    async with await tc.io.open(path, "rb") as f:
                        assert not (lst.closed or u.closed or ul.closed or f.closed)
                        ready.count_down()
                        await tc.Event().wait()
        finally:
            await other.close()
            finished.append(i)

    caplog.set_level(logging.WARNING, logger="tinycoro")
    with lsock, no_gc():
        before = open_fds()
        s = tc.Scheduler(contexts)
        s.start()
        ready = tc.Latch(n)
        tasks = [s.submit(holder(i, ready)) for i in range(n)]
        s.run_sync(ready.wait(), timeout=10)
        s.stop(timeout=0)
        assert all(t.cancelled() for t in tasks)
        _assert_peers_see_eof(lsock, 2 * n)
        assert sorted(finished) == list(range(n))
        assert not opened_since(before)
        assert not any(tmp_path.glob("s*"))  # the Unix listeners removed their socket files
    assert _unclean(caplog) == []


def test_an_abandoned_tls_stream_closes_its_socket(server_ctx, client_ctx, contexts):
    # A TLS close sends close_notify, an await the abandoned task cannot make: it is refused,
    # and the socket under it is closed all the same.
    async def holder(ready):
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        async with lst, client, server:
            ready.count_down()
            await tc.Event().wait()

    with no_gc():
        before = open_fds()
        s = tc.Scheduler(contexts)
        s.start()
        ready = tc.Latch(1)
        task = s.submit(holder(ready))
        s.run_sync(ready.wait(), timeout=10)
        s.stop(timeout=0)
        assert task.cancelled()
        assert not opened_since(before)


def test_an_await_in_an_abandoned_finally_is_refused_and_leaves_no_dead_waiter(contexts, caplog):
    # An abandoned task whose finally block awaits something else than a close (a semaphore
    # nobody releases) gets GeneratorExit there at once; it is off the semaphore's waiter list
    # (rule 13), so a permit released later goes to a live task, and its own finally runs.
    n = 2 * contexts
    sem = tc.Semaphore(0)
    reached = []

    async def holder(i, ready):
        try:
            ready.count_down()
            await tc.Event().wait()
        finally:
            try:
                await sem.acquire()
                reached.append(("acquired", i))
            finally:
                reached.append(("finally", i))

    caplog.set_level(logging.WARNING, logger="tinycoro")
    s = tc.Scheduler(contexts)
    s.start()
    ready = tc.Latch(n)
    tasks = [s.submit(holder(i, ready)) for i in range(n)]
    s.run_sync(ready.wait(), timeout=10)
    s.stop(timeout=0)
    assert all(t.cancelled() for t in tasks)
    assert sorted(reached) == [("finally", i) for i in range(n)]
    assert _unclean(caplog) == []

    async def take():
        async with tc.timeout(10):
            await sem.acquire()
        return "permit"

    async def give_and_take():
        taker = tc.spawn(take())
        sem.release()
        return await taker

    assert tc.run(give_and_take(), contexts=contexts) == "permit"


def test_a_close_on_a_running_scheduler_still_goes_through_the_ring():
    # The synchronous close is for abandoned tasks only: an ordinary close is an io_uring
    # operation, counted in the context's completed ops.
    async def listen():
        return await tc.net.listen()

    with tc.Scheduler(1) as s:
        lst = s.run_sync(listen(), timeout=10)
        ops = s.stats().contexts[0].ops
        s.run_sync(lst.close(), timeout=10)
        assert s.stats().contexts[0].ops == ops + 1


# -- the same bad input gets the same error from sibling calls ---------------------------------
def test_a_too_long_unix_path_is_a_value_error_naming_path_and_limit_for_both_calls(tmp_path):
    long = tmp_path / ("x" * 200)

    async def main():
        for call in (tc.net.listen_unix, tc.net.connect_unix):
            with pytest.raises(ValueError, match=r"path .*too long.* at most 107 bytes") as ei:
                await call(long)
            assert str(long) in str(ei.value), call.__name__
        # 107 bytes is the limit itself: accepted (a listener there, a client connecting to it)
        edge = os.fsencode(tmp_path)
        edge = os.fsdecode(edge + b"/" + b"y" * (107 - len(edge) - 1))
        async with await tc.net.listen_unix(edge) as lst:
            async with await tc.net.connect_unix(edge) as c, await lst.accept() as s:
                await c.sendall(b"ok")
                assert await s.recv() == b"ok"

    before = open_fds()
    tc.run(main(), contexts=1)
    assert not opened_since(before)


def _non_contiguous():
    return [memoryview(bytearray(16))[::2], memoryview(array.array("i", range(8)))[::2]]


def test_a_non_contiguous_buffer_is_a_type_error_naming_the_parameter(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes(range(64)))

    async def main():
        async with await tc.io.open(path, "r+b") as f:
            for buf in _non_contiguous():
                with pytest.raises(TypeError, match=r"readinto\(\).*\bbuf\b.*non-contiguous"):
                    await f.readinto(buf)
                with pytest.raises(TypeError, match=r"readinto_at\(\).*\bbuf\b.*non-contiguous"):
                    await f.readinto_at(buf, 0)
                with pytest.raises(TypeError, match=r"write\(\).*\bdata\b.*non-contiguous"):
                    await f.write(buf)
                with pytest.raises(TypeError, match=r"write_at\(\).*\bdata\b.*non-contiguous"):
                    await f.write_at(buf, 0)
            assert await f.read_at(64, 0) == bytes(range(64))  # nothing was written
        lst = await tc.net.listen()
        async with await tc.net.connect("127.0.0.1", lst.port) as c, await lst.accept() as s:
            for buf in _non_contiguous():
                for name, call in (("send", c.send), ("sendall", c.sendall)):
                    with pytest.raises(TypeError, match=rf"{name}\(\).*\bdata\b.*non-contiguous"):
                        await call(buf)
            await c.sendall(b"after")  # the stream is fine
            assert await s.recv() == b"after"
        await lst.close()
        async with await tc.net.udp() as u:
            for buf in _non_contiguous():
                with pytest.raises(TypeError, match=r"sendto\(\).*\bdata\b.*non-contiguous"):
                    await u.sendto(buf, ("127.0.0.1", u.port))

    tc.run(main(), contexts=1)
