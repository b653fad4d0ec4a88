"""One awaitable per operation (rule 14): a stream's recv and sendall, a
listener's accept and a file's ring reads and writes are each the awaitable their call returns, so an
operation costs the awaiting coroutine one generator frame, not a chain of wrapper coroutines.
Around that: the stream's reused ops are really reused, an op is still what ``tc.spawn`` and
``asyncio.create_task`` take, and a stream is freed without the cycle collector."""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
import weakref

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.streams import tcp_pair  # a connected (client, server) pair of TcpStreams

pytestmark = pytest.mark.timeout(60)

_GEN_FLAGS = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _net_frames(*names: str) -> list[str]:
    """*names*, the Python frames of tinycoro.net.ops's op awaitables, or none where that module runs
    compiled (rule 14: a compiled ``__await__`` is a C generator, with no frame)."""
    from tinycoro.net import ops

    return _frames_of(ops, names)


def _file_frames(*names: str) -> list[str]:
    """*names*, the Python frames of a file's read path (tinycoro.io.file and tinycoro.io.ops,
    compiled or interpreted together), or none where they run compiled."""
    from tinycoro.io import ops

    return _frames_of(ops, names)


def _frames_of(module, names) -> list[str]:
    from tinycoro import compiled

    return [] if compiled.is_compiled(module) else list(names)


def _qualname(frame) -> str:
    """The frame's function as ``Class.method`` (``co_qualname`` from 3.11; on 3.10, from the
    class of the method's ``self``)."""
    code = frame.f_code
    name = getattr(code, "co_qualname", None)
    if name is None:
        owner = frame.f_locals.get("self")
        name = code.co_name if owner is None else f"{type(owner).__name__}.{code.co_name}"
    return name


class _FrameCounter:
    """Counts the generator and coroutine frames tinycoro creates while it traces
    (sys.settrace on the context's thread; a frame is new the first time its 'call' event is
    seen; the test's own coroutines are left out)."""

    def __init__(self) -> None:
        self.seen: dict[int, object] = {}  # keeps the frames alive: ids are not reused
        self.created: list[str] = []

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if (event == "call" and code.co_flags & _GEN_FLAGS and id(frame) not in self.seen
                and code.co_filename != __file__):
            self.seen[id(frame)] = frame
            self.created.append(_qualname(frame))
        return None


def test_recv_and_sendall_each_cost_at_most_one_generator_frame():
    # On the old code each of them created three (Stream.recv, PendingOps.perform,
    # perform_raw): the chain rule 14 removes. A sendall that the socket takes whole at once
    # makes none: its __await__ sends and returns an iterator that is already done.
    async def main():
        client, server = await tcp_pair()
        await client.sendall(b"warm")
        await server.recv(64)
        counter = _FrameCounter()
        sys.settrace(counter)
        try:
            await client.sendall(b"ping")
            got = await server.recv(64)
        finally:
            sys.settrace(None)
        for s in (client, server):
            await s.close()
        return got, counter.created

    got, created = tc.run(main(), contexts=1)
    assert got == b"ping"
    assert created == _net_frames("RecvOp.__await__")


def test_accept_and_file_ring_operations_skip_the_wrapper_coroutines(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abcdefgh" * 512)

    def traced(counter, aw):
        async def run():
            sys.settrace(counter)
            try:
                return await aw
            finally:
                sys.settrace(None)
        return run()

    async def main():
        lst = await tc.net.listen()
        client = await tc.net.connect("127.0.0.1", lst.port)
        frames = {}
        frames["accept"] = _FrameCounter()
        conn = await traced(frames["accept"], lst.accept())
        f = await tc.io.open(path, "r+b")
        f._inline = False  # the ring path, not the page-cache read done inline
        frames["read_at"] = _FrameCounter()
        data = await traced(frames["read_at"], f.read_at(8, 8))
        buf = bytearray(8)
        frames["readinto_at"] = _FrameCounter()
        n = await traced(frames["readinto_at"], f.readinto_at(buf, 16))
        frames["write_at"] = _FrameCounter()
        w = await traced(frames["write_at"], f.write_at(b"ABCDEFGH", 0))
        for c in (f, conn, client, lst):
            await c.close()
        return {k: v.created for k, v in frames.items()}, (data, n, bytes(buf), w)

    created, results = tc.run(main(), contexts=1)
    assert results == (b"abcdefgh", 8, b"abcdefgh", 8)
    assert path.read_bytes()[:16] == b"ABCDEFGHabcdefgh"
    assert created == {
        "accept": _net_frames("AcceptOp.__await__"),
        "read_at": [],  # a ring read inside a task is its own iterator: no generator at all
        "readinto_at": [],
        "write_at": _file_frames("RingWrite.__await__"),
    }


def test_a_streams_sendall_and_recv_reuse_their_ops(contexts):
    # The reused op goes back to the stream when its await is over; were the token not given
    # back, every sendall would build a new op (a bug seen while writing these ops).
    async def main():
        client, server = await tcp_pair()
        sends, recvs = [], []
        for i in range(3):
            op = client.sendall(b"x%d" % i)
            sends.append(op)
            await op
            op = server.recv(2)
            recvs.append(op)
            assert await op == b"x%d" % i
        for s in (client, server):
            await s.close()
        return sends, recvs

    sends, recvs = tc.run(main(), contexts=contexts)
    assert sends[0] is sends[1] is sends[2]
    assert recvs[0] is recvs[1] is recvs[2]


def test_a_sendall_awaited_twice_is_refused_and_sends_once():
    async def main():
        client, server = await tcp_pair()
        op = client.sendall(b"once")
        await op
        with pytest.raises(RuntimeError, match="awaited already"):
            await op
        await client.sendall(b"!")
        got = b""
        while len(got) < 5:
            got += await server.recv()
        for s in (client, server):
            await s.close()
        return got

    assert tc.run(main(), contexts=1) == b"once!"


def test_empty_sends_need_no_operation():
    async def main():
        client, server = await tcp_pair()
        results = (await client.sendall(b""), await client.send(b""), await client.sendall(bytearray()))
        for s in (client, server):
            await s.close()
        return results

    assert tc.run(main(), contexts=1) == (None, 0, None)


def test_ops_are_what_spawn_and_asyncio_create_task_take(contexts):
    async def main():
        client, server = await tcp_pair()
        r = tc.spawn(server.recv())
        s = tc.spawn(client.sendall(b"spawned"))
        await s
        got = await r
        empty = await tc.spawn(client.sendall(b""))
        for c in (client, server):
            await c.close()
        return got, empty

    assert tc.run(main(), contexts=contexts) == (b"spawned", None)

    async def aio_main():
        client, server = await tcp_pair()
        r = asyncio.create_task(server.recv())
        await asyncio.create_task(client.sendall(b"in asyncio"))
        got = await r
        for c in (client, server):
            await c.close()
        return got

    assert asyncio.run(aio_main()) == b"in asyncio"


def test_a_stream_is_freed_without_the_cycle_collector():
    # The stream holds its reused ops, so they must not hold the stream (a cycle would keep
    # its 64 KiB buffer until a collection): they refer to it weakly.
    async def main():
        client, server = await tcp_pair()
        await client.sendall(b"x")
        await server.recv()
        await server.close()
        ref = weakref.ref(server)
        del server
        freed = ref() is None
        await client.close()
        return freed

    gc.disable()
    try:
        assert tc.run(main(), contexts=1) is True
    finally:
        gc.enable()


def test_close_under_a_pending_recv_op_raises_closed_resource_error(contexts):
    async def main():
        client, server = await tcp_pair()
        r = tc.spawn(server.recv())
        await wait_blocked(r)
        await server.close()
        with pytest.raises(tc.ClosedResourceError):
            await r
        with pytest.raises(tc.ClosedResourceError):
            await server.recv()
        with pytest.raises(tc.ClosedResourceError):
            await server.sendall(b"late")
        await client.close()

    tc.run(main(), contexts=contexts)
