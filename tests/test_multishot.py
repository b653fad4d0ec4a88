"""A stream's recv through one multishot recv and the ring's own provided-buffer ring (issue 20,
item 3; docs/io.md "Multishot recv"), and the single recv it falls back to: real loopback
sockets, both paths, on 1, 2 and 4 contexts.

The path is chosen per ring: ``TINYCORO_MULTISHOT=0`` when the scheduler's rings are created
forces the single recv (the fixture below), as does the pure-Python ring (``TINYCORO_PURE=1``),
which never has the buffer ring.
"""

from __future__ import annotations

import errno
import socket

import pytest

import tinycoro as tc
from tinycoro import net, uring
from tinycoro.testing import wait_blocked

from helpers.runtime import cancel_and_wait

MULTISHOT = uring.COMPILED  # the compiled ring is the one that can


@pytest.fixture(params=["multishot", "single"])
def path(request, monkeypatch) -> str:
    """Which recv the streams of this test use; skips the multishot one on the pure ring."""
    if request.param == "multishot":
        if not MULTISHOT:
            pytest.skip("the pure-Python ring always takes the single recv")
        monkeypatch.delenv(uring.MULTISHOT_ENV, raising=False)
    else:
        monkeypatch.setenv(uring.MULTISHOT_ENV, "0")
    return request.param


def _armed(stream) -> bool:
    ms = stream._ms
    return ms is not None and ms.armed


async def _pair():
    lst = await tc.net.listen("127.0.0.1", 0)
    accepting = tc.spawn(lst.accept())
    client = await tc.net.connect("127.0.0.1", lst.port)
    server = await accepting
    await lst.close()
    return client, server


def test_echo_50_clients(path, contexts):
    """Many connections, many messages each: every byte back, in order, on either path; the
    multishot stays armed between messages (no recv SQE per message)."""
    n_clients, rounds = 50, 20
    armed_seen: list[bool] = []

    async def handle(conn):
        async with conn:
            while True:
                data = await conn.recv()
                if not data:
                    return
                armed_seen.append(_armed(conn))
                await conn.sendall(data)

    async def client(port, i):
        async with await tc.net.connect("127.0.0.1", port) as conn:
            got = []
            for r in range(rounds):
                msg = f"client {i} round {r}|".encode()
                await conn.sendall(msg)
                buf = b""
                while len(buf) < len(msg):
                    chunk = await conn.recv(4096)
                    assert chunk, "server closed early"
                    buf += chunk
                got.append(buf)
            return got

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0)

        async def serve():
            handlers = [tc.spawn(handle(await lst.accept())) for _ in range(n_clients)]
            for h in handlers:
                await h

        server = tc.spawn(serve())
        clients = [tc.spawn(client(lst.port, i)) for i in range(n_clients)]
        results = [await c for c in clients]
        await server
        await lst.close()
        return results

    results = tc.run(main(), contexts=contexts)
    for i, got in enumerate(results):
        assert got == [f"client {i} round {r}|".encode() for r in range(rounds)]
    if path == "multishot":
        assert all(armed_seen)  # every message came through the armed multishot
    else:
        assert not any(armed_seen)


def test_bulk_transfer_in_order_and_max_bytes(path, contexts):
    """4 MiB in odd-sized sends, read back with small and large max_bytes: nothing lost,
    nothing reordered, no recv returns more than it asked for (a chunk larger than max_bytes
    stays at the queue's head)."""
    blob = bytes(range(256)) * (4 * 4096)

    async def main():
        client, server = await _pair()

        async def send():
            view = memoryview(blob)
            step = 70001
            for i in range(0, len(view), step):
                await client.sendall(view[i:i + step])
            await client.shutdown_write()

        sender = tc.spawn(send())
        got = bytearray()
        sizes = (7, 65536, 1, 100000, 4096)
        k = 0
        while True:
            want = sizes[k % len(sizes)]
            k += 1
            chunk = await server.recv(want)
            assert len(chunk) <= want
            if not chunk:
                break
            got += chunk
        assert await server.recv() == b""  # EOF stays EOF
        await sender
        await client.close()
        await server.close()
        return bytes(got)

    assert tc.run(main(), contexts=contexts) == blob


def test_queue_is_bounded_when_nobody_reads(path):
    """A sender faster than the reader: the multishot stops once the stream holds
    _MS_QUEUE_LIMIT bytes (the rest waits in the socket, TCP holds the sender back), and the
    reader's next recvs arm it again; every byte arrives in order."""
    total = 8 * 1024 * 1024
    blob = bytes(range(251)) * (total // 251 + 1)
    blob = blob[:total]

    async def main():
        client, server = await _pair()
        sender = tc.spawn(client.sendall(blob))
        first = await server.recv(1)
        # The sender is blocked on a full socket once the stream stopped taking data.
        await wait_blocked(sender)
        if path == "multishot":
            ms = server._ms
            while ms.armed:  # the stop (an async cancel) is on its way: let it land
                await tc.yield_now()
            assert ms.queued <= net._MS_QUEUE_LIMIT + uring.MULTISHOT_BUFFERS * uring.MULTISHOT_BUFFER_SIZE
        got = bytearray(first)
        while len(got) < total:
            got += await server.recv()
        await sender
        await client.close()
        await server.close()
        return bytes(got)

    assert tc.run(main(), contexts=1) == blob


def test_close_under_armed_multishot(path, contexts):
    """close() while a recv waits on an armed multishot: the recv fails with
    ClosedResourceError, the multishot's last CQE has come in (the ring holds none), and the
    stream's pending set is empty: nothing the kernel may still write into is let go."""

    async def main():
        client, server = await _pair()
        await client.sendall(b"one")
        assert await server.recv() == b"one"
        waiting = tc.spawn(server.recv())
        await wait_blocked(waiting)
        await server.close()
        with pytest.raises(tc.ClosedResourceError):
            await waiting
        assert not _armed(server)
        assert len(server._ops) == 0
        with pytest.raises(tc.ClosedResourceError):
            await server.recv()
        await client.close()

    tc.run(main(), contexts=contexts)


def test_close_with_data_queued_and_nobody_waiting(path):
    """Data queued on the stream, the multishot armed, no recv waiting: close() cancels it;
    a recv after close fails as on any closed stream."""

    async def main():
        client, server = await _pair()
        await client.sendall(b"a")
        assert await server.recv() == b"a"
        await client.sendall(b"b")  # arrives on the armed multishot, queued
        if path == "multishot":
            while not server._ms.queue:
                await tc.yield_now()
        await server.close()
        with pytest.raises(tc.ClosedResourceError):
            await server.recv()
        while len(server._ops):  # the cancel's CQE may come after the close's
            await tc.yield_now()
        assert not _armed(server)
        await client.close()

    tc.run(main(), contexts=1)


def test_cancelled_recv_loses_no_data(path, contexts):
    """A recv cancelled while it waits: the multishot stays armed (or the single recv was
    cancelled in the kernel before taking anything), and the next recv gets what arrived."""

    async def main():
        client, server = await _pair()
        for i in range(20):
            waiting = tc.spawn(server.recv())
            await wait_blocked(waiting)
            await cancel_and_wait(waiting)
            msg = b"m%d" % i
            await client.sendall(msg)
            assert await server.recv() == msg
        await client.close()
        await server.close()

    tc.run(main(), contexts=contexts)


def test_readers_on_many_contexts_keep_order(path, contexts):
    """Successive recvs from tasks that may run on different contexts: the multishot moves
    to the ring of the context that receives (stopped on the old one first), and the bytes
    come out in the order they were sent."""
    n = 200

    async def main():
        client, server = await _pair()

        async def send():
            for i in range(n):
                await client.sendall(b"%05d" % i)
            await client.shutdown_write()

        sender = tc.spawn(send())
        got = bytearray()
        while True:
            chunk = await tc.spawn(server.recv(5))  # a new task each time: any context
            if not chunk:
                break
            got += chunk
        await sender
        await client.close()
        await server.close()
        return bytes(got)

    assert tc.run(main(), contexts=contexts) == b"".join(b"%05d" % i for i in range(n))


def test_shutdown_with_armed_multishot(path, contexts):
    """The scheduler stops while a task waits on an armed multishot: the engine cancels it and
    waits for its last CQE before the ring (and its buffer ring) goes; the abandoned task's
    ``async with`` closes the stream; no fd or thread is left (checked here and by conftest)."""
    from helpers.runtime import open_fds

    streams = []

    async def holder(ready):
        client, server = await _pair()
        streams.append(server)
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv() == b"x"
            ready.count_down()
            await server.recv()

    before = open_fds()
    s = tc.Scheduler(contexts)
    s.start()
    ready = tc.Latch(1)
    task = s.submit(holder(ready))
    s.run_sync(ready.wait(), timeout=10)
    s.run_sync(wait_blocked(task), timeout=10)
    if path == "multishot":
        assert _armed(streams[0])
    s.stop(timeout=0)
    assert task.cancelled()
    assert not _armed(streams[0])
    assert open_fds() == before


def test_peer_reset_is_an_oserror(path):
    """An error CQE (the peer reset the connection) reaches the recv as OSError(ECONNRESET)."""

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0)
        accepting = tc.spawn(lst.accept())
        raw = socket.create_connection(("127.0.0.1", lst.port))
        server = await accepting
        await lst.close()
        raw.sendall(b"hi")
        assert await server.recv() == b"hi"
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        raw.close()  # RST
        with pytest.raises(OSError) as info:
            while await server.recv():
                pass
        assert info.value.errno == errno.ECONNRESET
        await server.close()

    tc.run(main(), contexts=1)


@pytest.mark.skipif(not MULTISHOT, reason="the compiled ring only")
def test_ring_buffer_ring_setup_and_checks():
    """The ring registers its buffer ring once; bad sizes are refused; the forced fallback
    leaves the ring without one; closing unmaps it."""
    ring = uring.CRing(8)
    try:
        with pytest.raises(ValueError):
            ring.multishot_setup(3, 4096)  # not a power of two
        with pytest.raises(ValueError):
            ring.multishot_setup(8, 0)
        assert ring.multishot_ready()
        assert ring.multishot
        assert ring.multishot_setup(8, 4096) == 0  # once: the first answer stands
        assert ring.multishot_inflight() == 0
    finally:
        ring.close()
    assert not ring.multishot or ring.closed

    off = uring.CRing(8)
    try:
        off.multishot_off()
        assert not off.multishot_ready()
    finally:
        off.close()


def test_pure_ring_has_no_multishot():
    ring = uring.PyRing(8)
    try:
        assert not ring.multishot_ready()
    finally:
        ring.close()


def test_run_ends_with_a_stream_left_open(path, contexts):
    """An armed multishot with nobody receiving is no work: tc.run returns once main does,
    with the stream still open (it hung before the engine counted such a context idle)."""

    async def main():
        client, server = await _pair()
        await client.sendall(b"x")
        assert await server.recv() == b"x"
        return client, server

    streams = tc.run(main(), contexts=contexts)
    for s in streams:
        s._sock.close()  # never closed through tinycoro: the run had ended
