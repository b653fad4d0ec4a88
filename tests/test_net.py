"""TCP on loopback through io_uring: echo, errors, cancellation of a pending recv."""

from __future__ import annotations

import errno
import socket

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.runtime import cancel_and_wait


async def echo_server(lst, n_conns):
    async def handle(conn):
        async with conn:
            while True:
                data = await conn.recv()
                if not data:
                    return
                await conn.sendall(data)

    handlers = [tc.spawn(handle(await lst.accept())) for _ in range(n_conns)]
    for h in handlers:
        await h


def test_echo_listener_and_50_clients(contexts):
    n_clients, rounds = 50, 20

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
            return i, got

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0)
        server = tc.spawn(echo_server(lst, n_clients))
        clients = [tc.spawn(client(lst.port, i)) for i in range(n_clients)]
        results = sorted([await c for c in clients])
        await server
        await lst.close()
        return results

    results = tc.run(main(), contexts=contexts)
    assert [i for i, _ in results] == list(range(n_clients))
    for i, got in results:
        assert got == [f"client {i} round {r}|".encode() for r in range(rounds)]


def test_large_transfer_and_eof(contexts):
    payload = bytes(range(256)) * 4096  # 1 MiB

    async def main():
        lst = await tc.net.listen()

        async def sink():
            conn = await lst.accept()
            chunks = []
            while data := await conn.recv(65536):
                chunks.append(data)
            await conn.close()
            return b"".join(chunks)

        s = tc.spawn(sink())
        conn = await tc.net.connect("127.0.0.1", lst.port)
        await conn.sendall(payload)
        await conn.shutdown_write()
        received = await s
        assert await conn.recv() == b""  # the sink closed: EOF
        await conn.close()
        await lst.close()
        return received

    assert tc.run(main(), contexts=contexts) == payload


def test_connection_refused():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now

    async def main():
        await tc.net.connect("127.0.0.1", port)

    with pytest.raises(ConnectionRefusedError) as info:
        tc.run(main(), contexts=1)
    assert info.value.errno == errno.ECONNREFUSED


def test_cancel_pending_recv_keeps_the_stream_intact(contexts):
    # The recv is cancelled in the kernel; Cancelled reaches the task only after the kernel
    # posted the recv's completion, so the stream's buffer is free and no byte is lost: data
    # sent afterwards arrives whole at the next recv.
    async def main():
        lst = await tc.net.listen()
        client = await tc.net.connect("127.0.0.1", lst.port)
        server_side = await lst.accept()
        r = tc.spawn(server_side.recv())
        await wait_blocked(r)  # its recv op is on its context's ring
        await cancel_and_wait(r)
        await client.sendall(b"after cancel")
        got = await server_side.recv()
        for c in (client, server_side, lst):
            await c.close()
        return got

    assert tc.run(main(), contexts=contexts) == b"after cancel"


def test_concurrent_recv_on_one_stream_is_refused():
    async def main():
        lst = await tc.net.listen()
        client = await tc.net.connect("127.0.0.1", lst.port)
        conn = await lst.accept()
        first = tc.spawn(conn.recv())
        await wait_blocked(first)
        with pytest.raises(RuntimeError, match="already receiving"):
            await conn.recv()
        await client.sendall(b"x")
        assert await first == b"x"
        for c in (client, conn, lst):
            await c.close()

    tc.run(main(), contexts=1)


def test_argument_errors():
    async def main():
        with pytest.raises(ValueError, match="port"):
            await tc.net.connect("127.0.0.1", 70000)
        with pytest.raises(TypeError, match="host"):
            await tc.net.listen(b"127.0.0.1")
        lst = await tc.net.listen()
        conn = await tc.net.connect("127.0.0.1", lst.port)
        with pytest.raises(ValueError, match="max_bytes"):
            await conn.recv(0)
        with pytest.raises(TypeError, match="not str"):
            await conn.send("text")
        await conn.close()
        with pytest.raises(OSError, match="closed"):
            await conn.recv()
        await lst.close()
        with pytest.raises(OSError, match="closed"):
            await lst.accept()

    tc.run(main(), contexts=1)


def test_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")

    async def main():
        lst = await tc.net.listen("::1", 0)
        s = tc.spawn(echo_server(lst, 1))
        async with await tc.net.connect("::1", lst.port) as c:
            await c.sendall(b"v6")
            got = await c.recv()
        await s
        await lst.close()
        return got

    assert tc.run(main(), contexts=1) == b"v6"


def test_send_nowait_takes_what_fits_then_refuses_with_eagain():
    """send_nowait never waits for the peer: a socket whose buffer is full refuses at once with
    BlockingIOError (EAGAIN), and the stream stays usable."""

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0)
        accepting = tc.spawn(lst.accept())
        c = await tc.net.connect("127.0.0.1", lst.port)
        s = await accepting
        assert await c.send_nowait(b"hi") == 2
        assert await s.recv() == b"hi"
        with pytest.raises(BlockingIOError) as info:
            for _ in range(10_000):  # the peer never reads: the buffers fill up
                await c.send_nowait(b"x" * 65536)
        assert info.value.errno == errno.EAGAIN
        with pytest.raises(TypeError, match="send_nowait"):
            await c.send_nowait("text")
        await c.close()
        with pytest.raises(tc.ClosedResourceError):
            await c.send_nowait(b"late")
        await s.close()
        await lst.close()

    tc.run(main(), contexts=1)
