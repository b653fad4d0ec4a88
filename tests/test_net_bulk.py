"""Bulk reads on a stream: ``recv(n)`` with n of at least ``BULK_RECV`` bytes, which the
compiled runtime receives straight into the bytes object it returns (``BulkRecvOp`` and
``tinycoro._cfile.Receiving``) and the pure runtime through the stream's reused buffer; on
both receive paths (multishot and single recv) and on 1, 2 and 4 contexts."""

from __future__ import annotations

import select
import socket
import threading

import pytest

import tinycoro as tc
from tinycoro import compiled
from tinycoro.core.engine import INLINE_BUDGET
from tinycoro.net import ops
from tinycoro.testing import wait_blocked

from helpers.budget import gaps, loop_beside_counter
from helpers.runtime import cancel_and_wait
from helpers.streams import tcp_pair

MIB = 1 << 20
_cfile = compiled.load("_cfile")


@pytest.fixture
def path(recv_path: str) -> str:
    """Which recv the streams of this test use (conftest's ``recv_path``)."""
    return recv_path


def test_bulk_recv_returns_what_came_as_bytes(path, contexts):
    """recv(1 MiB) and recv(BULK_RECV) over 8 MiB sent in odd pieces: each result is a bytes
    object of at most n, together the bytes sent in order; b"" at EOF. Where the build can,
    the op is the bulk one (no second copy), elsewhere the reused-buffer one."""
    blob = bytes(range(251)) * (8 * MIB // 251)

    async def main():
        client, server = await tcp_pair()
        kind = type(server._single_recv(MIB)).__name__

        async def send():
            view = memoryview(blob)
            for i in range(0, len(view), 199_999):
                await client.sendall(view[i:i + 199_999])
            await client.shutdown_write()

        sender = tc.spawn(send())
        got = bytearray()
        wants = (MIB, ops.BULK_RECV, 3 * MIB)
        i = 0
        while True:
            want = wants[i % len(wants)]
            i += 1
            chunk = await server.recv(want)
            assert type(chunk) is bytes and len(chunk) <= want
            if not chunk:
                break
            got += chunk
        assert await server.recv(MIB) == b""
        await sender
        await client.close()
        await server.close()
        return kind, bytes(got)

    kind, got = tc.run(main(), contexts=contexts)
    assert got == blob
    assert kind == ("BulkRecvOp" if ops.bulk_recv_available() else "RecvOp")


def test_cancelled_bulk_recv_loses_no_data(path, contexts):
    """A bulk recv cancelled while it waits (the kernel has its buffer): cancelled in the
    kernel before taking anything, and the next recv gets what arrived."""

    async def main():
        client, server = await tcp_pair()
        for i in range(20):
            waiting = tc.spawn(server.recv(MIB))
            await wait_blocked(waiting)
            await cancel_and_wait(waiting)
            msg = b"m%d" % i
            await client.sendall(msg)
            assert await server.recv(MIB) == msg
        await client.close()
        await server.close()

    tc.run(main(), contexts=contexts)


def test_close_under_waiting_bulk_recv(path, contexts):
    """close() while a bulk recv waits: the recv raises ClosedResourceError, not an errno."""

    async def main():
        client, server = await tcp_pair()
        waiting = tc.spawn(server.recv(MIB))
        await wait_blocked(waiting)
        await server.close()
        with pytest.raises(tc.ClosedResourceError):
            await waiting
        await client.close()

    tc.run(main(), contexts=contexts)


def test_concurrent_bulk_recv_is_refused(path):
    """Two tasks may not receive on one stream at once, bulk reads included."""

    async def main():
        client, server = await tcp_pair()
        waiting = tc.spawn(server.recv(MIB))
        await wait_blocked(waiting)
        with pytest.raises(RuntimeError, match="already receiving"):
            await server.recv(MIB)
        await client.sendall(b"x")
        assert await waiting == b"x"
        await client.close()
        await server.close()

    tc.run(main(), contexts=1)


@pytest.mark.skipif(_cfile is None, reason="tinycoro._cfile, compiled only")
def test_receiving_buffer_is_taken_once_and_shrunk():
    """A Receiving exports its bytes' storage while nobody has taken them; take(n) returns
    them cut to n, once; with an export alive it refuses (the storage may move)."""
    r = _cfile.receiving(1000)
    assert len(r) == 1000
    view = memoryview(r)
    view[:5] = b"hello"
    with pytest.raises(BufferError, match="exported"):
        r.take(5)
    view.release()
    with pytest.raises(ValueError, match="out of range"):
        r.take(1001)
    data = r.take(5)
    assert type(data) is bytes and data == b"hello"
    with pytest.raises(BufferError, match="taken"):
        r.take(5)
    with pytest.raises(BufferError, match="taken"):
        memoryview(r)
    assert len(r) == 0
    whole = _cfile.receiving(3)
    memoryview(whole)[:] = b"abc"
    assert whole.take(3) == b"abc"
    assert _cfile.receiving(7).take(0) == b""
    with pytest.raises(ValueError):
        _cfile.receiving(0)


def test_bulk_recv_stops_an_armed_multishot(path, contexts):
    """A bulk recv on a stream whose multishot a small recv armed, with nothing queued: the
    multishot is stopped and the bulk recv is one single recv (all the socket holds, in one
    copy), not a wait for the multishot's next 64 KiB chunk; the bytes stay whole and in
    order, and a small recv after it arms the multishot again."""
    if path != "multishot":
        pytest.skip("a multishot recv's decision only")
    blob = bytes(range(251)) * 400  # less than the queue's limit: no back-pressure stop

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv(100) == b"x"
            assert server._ms.armed
            waiting = tc.spawn(server.recv(MIB))
            await wait_blocked(waiting)
            await client.sendall(blob)
            got = bytearray(await waiting)
            armed_after_bulk = server._ms.armed
            while len(got) < len(blob):
                got += await server.recv(MIB)
            await client.sendall(b"z")
            assert await server.recv(100) == b"z"
            return bytes(got), armed_after_bulk, server._ms.armed

    got, armed_after_bulk, armed_again = tc.run(main(), contexts=contexts)
    assert got == blob
    assert not armed_after_bulk
    assert armed_again


def test_bulk_recv_cancelled_while_it_stops_the_multishot(path, contexts):
    """A bulk recv cancelled while the multishot it stopped winds down (or while its single
    recv waits): nothing is lost, and the recvs after it, small and bulk, get what arrived."""
    if path != "multishot":
        pytest.skip("a multishot recv's decision only")

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            for i in range(10):
                await client.sendall(b"a")
                assert await server.recv(100) == b"a"  # arms the multishot
                waiting = tc.spawn(server.recv(MIB))
                await wait_blocked(waiting)
                await cancel_and_wait(waiting)
                msg = b"m%d" % i
                await client.sendall(msg)
                assert await server.recv(MIB if i % 2 else 100) == msg

    tc.run(main(), contexts=contexts)


def _readable(stream) -> None:
    """Block (bounded) until the kernel has bytes or the EOF queued on *stream*'s socket."""
    ready, _, _ = select.select([stream.fileno()], [], [], 30)
    assert ready, "nothing arrived"


@pytest.mark.skipif(not ops.bulk_recv_available(), reason="the bulk recv op, compiled only")
def test_bulk_recv_of_queued_bytes_takes_no_ring_op(path, contexts):
    """A bulk recv that finds bytes queued (as a bulk reader does on most calls) takes them
    with one non-blocking recv(2) made at the call, into the bytes it returns: its context
    completes no io_uring operation for it; the EOF that is queued likewise. A recv that
    finds nothing still waits on the ring and gets what comes."""
    blob = bytes(range(251)) * 1000

    with tc.Scheduler(contexts) as sched:
        async def main():
            client, server = await tcp_pair()
            here = tc.current_context()
            await client.sendall(blob)
            got = bytearray()
            queued_ops = 0
            while len(got) < len(blob):  # the kernel may queue the bytes in pieces
                _readable(server)
                before = sched.stats().contexts[here].ops
                got += await server.recv(MIB)
                queued_ops += sched.stats().contexts[here].ops - before
            waiting = tc.spawn(server.recv(MIB))
            await wait_blocked(waiting)
            await client.sendall(b"late")
            late = await waiting
            await client.shutdown_write()
            _readable(server)
            before = sched.stats().contexts[here].ops
            eof = await server.recv(MIB)
            eof_ops = sched.stats().contexts[here].ops - before
            await client.close()
            await server.close()
            return got, queued_ops, late, eof, eof_ops

        got, queued_ops, late, eof, eof_ops = sched.run_sync(main(), timeout=50)
    assert got == blob
    assert queued_ops == 0, f"{queued_ops} ring ops for a recv of queued bytes"
    assert late == b"late"
    assert eof == b"" and eof_ops == 0


def test_a_bulk_reader_of_queued_bytes_cannot_starve_its_context(path, contexts):
    """A task reads a 64 MiB transfer (a thread sends it with a blocking socket, so bytes are
    queued at most calls) with recv(1 MiB) beside a task of its context that counts its
    steps: the counter keeps running, at most INLINE_BUDGET + 1 recvs between two of its
    steps, and the bytes arrive whole."""
    total = 64 * MIB
    block = bytes(range(256)) * (MIB // 256)

    async def main():
        lst = await tc.net.listen()
        plain = socket.create_connection(("127.0.0.1", lst.port))
        server = await lst.accept()
        await lst.close()

        def send():
            with plain:
                for _ in range(total // MIB):
                    plain.sendall(block)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        got = [0]
        ok = [True]

        async def recv():
            data = await server.recv(MIB)
            if data:
                start = got[0] % 256
                ok[0] = ok[0] and data[:1] == bytes([start])
            got[0] += len(data)

        reads, seen = await loop_beside_counter(recv, limit=total)
        while got[0] < total:  # the counter may end first; the rest, alone
            await recv()
        await server.close()
        sender.join(30)
        return got[0], ok[0], reads, seen

    got, ok, reads, seen = tc.run(main(), contexts=contexts)
    assert got == total and ok
    assert max(gaps(seen)) <= INLINE_BUDGET + 1, max(gaps(seen))
