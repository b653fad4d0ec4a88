"""A stream's reused send and recv ops stand in their PendingOps' fixed slots while in flight,
not in its dict (closing.py): close() still finds and ends them, beside ops in the dict, from
any context, and they leave the slot when they end (rule 10)."""

from __future__ import annotations

import socket

import pytest

import tinycoro as tc
from tinycoro.closing import IN_SET, RECV_SLOT, SEND_SLOT
from tinycoro.testing import wait_blocked

from helpers.streams import tcp_pair

pytestmark = pytest.mark.timeout(60)

BIG = b"z" * (1 << 20)  # more than small socket buffers take: the send waits in the ring


def _small_buffers(stream) -> None:
    with socket.fromfd(stream.fileno(), socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)


def _run(coro_fn, contexts: int):
    with tc.Scheduler(contexts) as sched:
        return sched.run_sync(coro_fn(), timeout=50)


def test_the_spare_sendall_waits_in_the_send_slot_and_close_ends_it(contexts):
    async def main():
        client, server = await tcp_pair()
        _small_buffers(client)
        _small_buffers(server)
        spare = client._send_spare[0]
        assert spare.slot == SEND_SLOT
        sender = tc.spawn(client.sendall(BIG))
        await wait_blocked(sender)
        pending = client._ops
        assert pending._send_op is spare and not pending._ops  # the slot, not the dict
        assert len(pending) == 1

        async def closer():
            await client.close()

        await tc.spawn(closer())  # round robin: maybe from another context
        with pytest.raises(tc.ClosedResourceError):
            await sender
        assert pending._send_op is None and pending._send_on is None
        assert len(pending) == 0
        await server.close()

    _run(main, contexts)


def test_a_second_sendall_at_once_uses_the_dict_and_close_ends_both(contexts):
    async def main():
        client, server = await tcp_pair()
        _small_buffers(client)
        _small_buffers(server)
        first = tc.spawn(client.sendall(BIG))  # takes the spare op: the slot
        await wait_blocked(first)
        second = tc.spawn(client.sendall(BIG))  # the spare is out: an op of its own
        await wait_blocked(second)
        pending = client._ops
        assert pending._send_op is not None
        assert [op.slot for op in pending._ops] == [IN_SET]
        assert len(pending) == 2
        await client.close()
        for sender in (first, second):
            with pytest.raises(tc.ClosedResourceError):
                await sender
        assert len(pending) == 0
        await server.close()

    _run(main, contexts)


def test_the_single_recv_waits_in_the_recv_slot_and_close_ends_it(contexts, monkeypatch):
    monkeypatch.setenv("TINYCORO_MULTISHOT", "0")  # the single recv on every runtime

    async def main():
        client, server = await tcp_pair()
        for max_bytes in (100, 200):  # a new max_bytes makes a new recv op: the slot again
            r = tc.spawn(server.recv(max_bytes))
            await wait_blocked(r)
            op = server._recv_op
            assert op.slot == RECV_SLOT and server._ops._recv_op is op
            assert not server._ops._ops and len(server._ops) == 1
            await client.sendall(b"x")
            assert await r == b"x"
            assert server._ops._recv_op is None and len(server._ops) == 0
        r = tc.spawn(server.recv())
        await wait_blocked(r)

        async def closer():
            await server.close()

        await tc.spawn(closer())
        with pytest.raises(tc.ClosedResourceError):
            await r
        assert server._ops._recv_op is None
        await client.close()

    _run(main, contexts)
