"""What a connection costs to set up and leaves behind once closed: an accepted socket knows
its family, type and protocol without asking the kernel again; a closed stream leaves
nothing for the cyclic garbage collector.

A server with 10,000 connections that come and go spends most of its CPU in the collector
when each closed stream leaves a reference cycle (its spare ops and their lists, the
multishot's parking ticket): the cycles live on until a full collection walks every live
object of the process. Closing a stream breaks them, so its objects go as soon as the last
reference does."""

from __future__ import annotations

import gc
import os
import socket

import pytest

import tinycoro as tc

from helpers.streams import tcp_pair

pytestmark = pytest.mark.timeout(60)

# the per-stream objects that must never be left in a cycle
_STREAM_PARTS = {"SendallOp", "RecvCall", "MultishotRecv", "RecvOp", "Park", "PendingOps"}


def _cyclic_garbage(run) -> set[str]:
    """The names of the types among what *run()* left as cyclic garbage."""
    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _exchange(contexts: int, server_closes_first: bool) -> None:
    async def main():
        client, server = await tcp_pair()
        for _ in range(3):  # sends and recvs, single or multishot: their spares are used
            await client.sendall(b"ping")
            assert await server.recv(100) == b"ping"
            await server.sendall(b"pong")
            assert await client.recv(100) == b"pong"
        first, second = (server, client) if server_closes_first else (client, server)
        await first.close()
        assert await second.recv(100) == b""  # EOF: the multishot has ended
        await second.close()

    with tc.Scheduler(contexts) as sched:
        sched.run_sync(main(), timeout=50)


@pytest.mark.parametrize("server_closes_first", [False, True])
def test_a_closed_stream_leaves_no_reference_cycle(contexts, server_closes_first):
    left = _cyclic_garbage(lambda: _exchange(contexts, server_closes_first))
    assert not left & _STREAM_PARTS, sorted(left)


@pytest.mark.parametrize("family", ["ipv4", "ipv6", "unix"])
def test_an_accepted_socket_has_its_family_type_and_protocol(family, tmp_path):
    # Given to socket.socket() by the listener (no getsockopt per connection): they must be
    # what the kernel would have said.
    if family == "ipv6" and not socket.has_ipv6:
        pytest.skip("no IPv6")

    async def main():
        if family == "unix":
            path = os.fspath(tmp_path / "s")
            lst = await tc.net.listen_unix(path)
            client = await tc.net.connect_unix(path)
        else:
            host = "::1" if family == "ipv6" else "127.0.0.1"
            try:
                lst = await tc.net.listen(host, 0)
            except OSError as e:
                pytest.skip(f"cannot listen on {host}: {e}")
            client = await tc.net.connect(host, lst.port)
        conn = await lst.accept()
        try:
            sock = conn._sock
            assert sock.family == sock.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
            assert sock.type == sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
            assert sock.proto == sock.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL)
            await client.sendall(b"x")
            assert await conn.recv(10) == b"x"
        finally:
            for s in (conn, client, lst):
                await s.close()

    tc.run(main(), contexts=1)
