"""Sends that complete at once do not go through the ring (issue 11): the fast path is taken,
the ring takes over when the socket buffer is full, bytes stay in order across the two, errors
keep their errno, close and cancel behave as before, and a sending loop cannot starve its
context."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

import tinycoro as tc
from tinycoro import net
from tinycoro.testing import wait_blocked

pytestmark = pytest.mark.timeout(60)


def _ops(sched: tc.Scheduler) -> int:
    """io_uring completions reaped on every context so far."""
    return sum(c.ops for c in sched.stats().contexts)


def _small_buffers(stream, sndbuf: int = 16384, rcvbuf: int = 16384) -> None:
    """Shrink the kernel's socket buffers, so that a MiB cannot fit in them at once."""
    with socket.fromfd(stream.fileno(), socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)


async def _pair():
    lst = await tc.net.listen()
    client = await tc.net.connect("127.0.0.1", lst.port)
    server = await lst.accept()
    await lst.close()
    return client, server


async def _read_exactly(stream, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        data = await stream.recv(65536)
        assert data, f"EOF after {got} of {n} bytes"
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def _run(coro_fn, contexts: int):
    with tc.Scheduler(contexts) as sched:
        return sched.run_sync(coro_fn(sched), timeout=50)


def test_a_send_that_fits_never_reaches_the_ring(contexts):
    msgs = [bytes([i]) * (1 + i) for i in range(20)]

    async def main(sched):
        client, server = await _pair()
        before = _ops(sched)
        for m in msgs[:10]:
            await client.sendall(m)  # the bytes fast path
        await client.sendall(bytearray(msgs[10]))  # the buffer-protocol path
        await client.sendall(memoryview(msgs[11]))
        for m in msgs[12:]:
            assert await client.send(m) == len(m)
        after = _ops(sched)
        got = await _read_exactly(server, sum(map(len, msgs)))
        for s in (client, server):
            await s.close()
        return after - before, got

    ring_ops, got = _run(main, contexts)
    assert ring_ops == 0  # not one send went through the ring
    assert got == b"".join(msgs)


def test_a_full_socket_buffer_falls_back_to_the_ring(contexts):
    big = bytes(range(256)) * 4096  # 1 MiB: far more than both small buffers hold

    async def main(sched):
        client, server = await _pair()
        _small_buffers(client)
        _small_buffers(server)
        before = _ops(sched)
        sender = tc.spawn(client.sendall(big))
        await wait_blocked(sender)  # suspended on a ring send: the peer reads nothing yet
        got = await _read_exactly(server, len(big))
        await sender
        after = _ops(sched)
        for s in (client, server):
            await s.close()
        return after - before, got

    ring_ops, got = _run(main, contexts)
    assert ring_ops > 0
    assert got == big


def test_bytes_stay_in_order_across_fast_and_ring_sends(contexts):
    # Numbered records, small ones (taken at once) between large ones (partly taken at once,
    # the rest through the ring while the reader, maybe on another context, drains).
    sizes = [8, 300_000, 16, 40, 200_000, 8, 8, 500_000, 64] * 3
    records = [struct.pack("!I", i) + bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream = b"".join(records)

    async def main(sched):
        client, server = await _pair()
        _small_buffers(client, sndbuf=16384)
        _small_buffers(server, rcvbuf=16384)

        async def write():
            for i, r in enumerate(records):
                if i % 3 == 0:
                    await client.sendall(r)
                elif i % 3 == 1:
                    await client.sendall(bytearray(r))
                else:
                    view = memoryview(r)
                    while view:
                        view = view[await client.send(view):]

        w = tc.spawn(write())
        got = await _read_exactly(server, len(stream))
        await w
        for s in (client, server):
            await s.close()
        return got

    assert _run(main, contexts) == stream


def test_peer_reset_raises_the_oserror_with_its_errno(contexts):
    async def main(sched):
        client, server = await _pair()
        # The peer aborts: SO_LINGER 0 makes its close send a RST instead of a FIN.
        with socket.fromfd(server.fileno(), socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await server.close()
        try:  # wait until the RST has arrived
            assert await client.recv() == b""
        except ConnectionResetError:
            pass
        errors = []
        for data in (b"x" * 64, bytearray(64), memoryview(b"y" * 64)):
            try:
                await client.sendall(data)
            except OSError as e:
                errors.append(e)
        await client.close()
        return errors

    errors = _run(main, contexts)
    assert len(errors) == 3
    for e in errors:
        assert not isinstance(e, tc.ClosedResourceError)
        assert e.errno in (errno.EPIPE, errno.ECONNRESET)


def test_send_on_a_closed_stream_raises_closed_resource_error():
    async def main(sched):
        client, server = await _pair()
        await client.close()
        for call, data in (
            (client.sendall, b"abc"),
            (client.sendall, bytearray(b"abc")),
            (client.send, b"abc"),
            (client.send, memoryview(b"abc")),
        ):
            with pytest.raises(tc.ClosedResourceError):
                await call(data)
        await server.close()

    _run(main, 1)


def test_close_ends_a_send_pending_in_the_ring(contexts):
    big = b"z" * (1 << 20)

    async def main(sched):
        client, server = await _pair()
        _small_buffers(client)
        _small_buffers(server)
        sender = tc.spawn(client.sendall(big))
        await wait_blocked(sender)

        async def closer():
            await client.close()

        await tc.spawn(closer())  # round robin: maybe from another context
        with pytest.raises(tc.ClosedResourceError):
            await sender
        await server.close()

    _run(main, contexts)


def test_a_pending_cancel_is_delivered_before_anything_is_sent():
    # A cancel (here a timeout that expires at the first await) requested before the send is
    # delivered at it, as when every send went through the ring: the bytes are not sent.
    async def main(sched):
        client, server = await _pair()
        with pytest.raises(TimeoutError):
            async with tc.timeout(0):
                await client.sendall(b"lost")
        with pytest.raises(TimeoutError):
            async with tc.timeout(0):
                await client.send(b"lost too")
        await client.sendall(b"kept")
        got = await server.recv()
        for s in (client, server):
            await s.close()
        return got

    assert _run(main, 1) == b"kept"


def test_a_sending_loop_lets_the_other_tasks_of_its_context_run():
    # The sender's sends all fit in the socket buffer, so none has to wait; still, after a
    # bounded number of them it suspends and the other ready task on its context runs.
    n = 4 * net._SENDS_PER_STEP

    async def main(sched):
        client, server = await _pair()
        ran = []

        async def other():
            ran.append(True)

        async def sender():
            for i in range(n):
                await client.sendall(b"x")
                if ran:
                    return i + 1
            return n

        s = tc.spawn(sender())  # contexts=1: both are ready on this context, sender first
        o = tc.spawn(other())
        sent_before_other_ran = await s
        await o
        got = await _read_exactly(server, sent_before_other_ran)
        for st in (client, server):
            await st.close()
        return sent_before_other_ran, got

    sent, got = _run(main, 1)
    assert sent <= net._SENDS_PER_STEP + 1
    assert got == b"x" * sent


def test_a_stream_shared_by_tasks_on_every_context(contexts):
    # Senders on every context write numbered records to one stream; each record is sent by
    # one sendall, so records never interleave, whichever path each send takes.
    per_task, tasks = 200, 8

    async def main(sched):
        client, server = await _pair()

        async def write(t):
            for i in range(per_task):
                await client.sendall(struct.pack("!HH", t, i) + b"." * 28)

        writers = [tc.spawn(write(t)) for t in range(tasks)]
        got = await _read_exactly(server, 32 * per_task * tasks)
        for w in writers:
            await w
        for s in (client, server):
            await s.close()
        return got

    got = _run(main, contexts)
    seen = {}
    for off in range(0, len(got), 32):
        t, i = struct.unpack("!HH", got[off:off + 4])
        assert got[off + 4:off + 32] == b"." * 28
        assert seen.get(t, -1) == i - 1  # each task's records arrive in its order
        seen[t] = i
    assert seen == {t: per_task - 1 for t in range(tasks)}


def test_a_stream_under_a_default_socket_timeout_never_blocks_its_context():
    # socket.setdefaulttimeout gives new sockets a timeout, and CPython's send() then polls
    # for room before it sends: on a full buffer that would hold the context's thread for the
    # whole timeout. The stream clears the timeout, so the send suspends its task instead.
    async def main(sched):
        client, server = await _pair()
        _small_buffers(client)
        _small_buffers(server)
        first = tc.spawn(client.sendall(b"t" * (1 << 20)))
        await wait_blocked(first)  # the buffer is full now
        second = tc.spawn(client.send(b"x"))
        await wait_blocked(second)  # would only happen after 20 s with the thread stuck
        got = await _read_exactly(server, (1 << 20) + 1)
        await first
        assert await second == 1
        for s in (client, server):
            await s.close()
        return got

    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(20)
    try:
        got = _run(main, 1)
    finally:
        socket.setdefaulttimeout(old)
    assert got.count(b"x") == 1 and got.count(b"t") == 1 << 20
