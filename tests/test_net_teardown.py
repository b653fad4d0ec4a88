"""What a connection leaves behind once closed: nothing for the cyclic garbage collector.

A server with 10,000 connections that come and go spends most of its CPU in the collector
when each closed stream leaves a reference cycle (its spare ops and their lists, the
multishot's parking ticket): the cycles live on until a full collection walks every live
object of the process. Closing a stream breaks them, so its objects go as soon as the last
reference does."""

from __future__ import annotations

import gc

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
