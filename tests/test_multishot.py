"""A stream's recv through one multishot recv and the ring's own provided-buffer ring
(docs/io.md "Multishot recv"), and the single recv it falls back to: real loopback
sockets, both paths, on 1, 2 and 4 contexts.

The path is chosen per ring: ``TINYCORO_MULTISHOT=0`` when the scheduler's rings are created
forces the single recv (the fixture below), as does the pure-Python ring (``TINYCORO_PURE=1``),
which never has the buffer ring.
"""

from __future__ import annotations

import errno
import itertools
import socket
import types

import pytest

import tinycoro as tc
from tinycoro import uring
from tinycoro.net import multishot
from tinycoro.testing import wait_blocked

from helpers.runtime import cancel_and_wait
from helpers.streams import tcp_pair

MULTISHOT = multishot.AVAILABLE  # the compiled ring and the compiled multishot module


@pytest.fixture
def path(recv_path: str) -> str:
    """Which recv the streams of this test use (conftest's ``recv_path``)."""
    return recv_path


async def _recv_to_eof(stream, sizes: tuple[int, ...]) -> bytearray:
    """Every byte until EOF, asking recv for each of *sizes* in turn: no chunk is longer than
    asked for."""
    got = bytearray()
    wants = itertools.cycle(sizes)
    while True:
        want = next(wants)
        chunk = await stream.recv(want)
        assert len(chunk) <= want
        if not chunk:
            return got
        got += chunk


def _armed(stream) -> bool:
    ms = stream._ms
    return ms is not None and ms.armed


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
        client, server = await tcp_pair()

        async def send():
            view = memoryview(blob)
            step = 70001
            for i in range(0, len(view), step):
                await client.sendall(view[i:i + step])
            await client.shutdown_write()

        sender = tc.spawn(send())
        got = await _recv_to_eof(server, (7, 65536, 1, 100000, 4096))
        assert await server.recv() == b""  # EOF stays EOF
        await sender
        await client.close()
        await server.close()
        return got

    assert tc.run(main(), contexts=contexts) == blob


def test_queue_is_bounded_when_nobody_reads(path):
    """A sender faster than the reader: the multishot stops once the stream holds
    multishot.QUEUE_LIMIT bytes (the rest waits in the socket, TCP holds the sender back), and the
    reader's next recvs arm it again; every byte arrives in order."""
    total = 8 * 1024 * 1024
    blob = bytes(range(251)) * (total // 251 + 1)
    blob = blob[:total]

    async def main():
        client, server = await tcp_pair()
        sender = tc.spawn(client.sendall(blob))
        first = await server.recv(1)
        # The sender is blocked on a full socket once the stream stopped taking data.
        await wait_blocked(sender)
        if path == "multishot":
            ms = server._ms
            while ms.armed:  # the stop (an async cancel) is on its way: let it land
                await tc.yield_now()
            assert ms.queued <= multishot.QUEUE_LIMIT + uring.MULTISHOT_BUFFERS * uring.MULTISHOT_BUFFER_SIZE
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
        client, server = await tcp_pair()
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
        client, server = await tcp_pair()
        await client.sendall(b"a")
        assert await server.recv() == b"a"
        await client.sendall(b"b")  # arrives on the armed multishot, queued
        if path == "multishot":
            while server._ms.head is None:
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
        client, server = await tcp_pair()
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


def test_recv_call_awaits_as_its_own_iterator(path):
    """On the multishot path a recv() call is its own awaitable's iterator (no generator per
    recv): its await parks, wakes with the bytes and hands the call back to the stream's spare;
    an iterator taken and closed before its first step leaves the call reusable."""
    if path != "multishot":
        pytest.skip("only the multishot path has the call iterate itself")

    async def main():
        client, server = await tcp_pair()
        call = server.recv(64)
        assert call.__await__() is call
        call.close()  # not started: nothing taken, the call can be awaited again
        waiting = tc.spawn(_await(call))
        await wait_blocked(waiting)
        await client.sendall(b"one")
        assert await waiting == b"one"
        assert server.recv(64) is call  # back in the spare once its await ended
        await client.sendall(b"two")
        assert await call == b"two"
        await client.close()
        await server.close()

    tc.run(main(), contexts=1)


async def _await(aw):
    return await aw


@types.coroutine
def _stop_of(it, first):
    """Drive the iterator *it* by hand (its first step by *first*: ``next`` or a
    ``send(None)``, the rest by ``send``), passing its traps to the engine; the
    ``StopIteration`` that ended it, kept."""
    try:
        trap = first(it)
        while True:
            trap = it.send((yield trap))
    except StopIteration as e:
        return e


@pytest.mark.parametrize("first", [next, lambda it: it.send(None)], ids=["next", "send"])
def test_recv_call_stop_iterations_kept_stay_theirs(path, first):
    """The StopIteration that ends a recv call's steps is the caller's to keep: a later recv
    ends with its own (compiled, one spare instance is reused only while nobody holds it),
    and each carries its own bytes as ``value`` and ``args``."""

    async def main():
        client, server = await tcp_pair()
        kept = []
        for word in (b"one", b"two", b"three"):
            await client.sendall(word)
            kept.append(await _stop_of(server.recv(64).__await__(), first))
        assert [e.value for e in kept] == [b"one", b"two", b"three"]
        assert [e.args for e in kept] == [(b"one",), (b"two",), (b"three",)]
        assert len({id(e) for e in kept}) == 3
        await client.sendall(b"four")
        assert await server.recv(64) == b"four"  # the await after them: its own bytes
        assert kept[-1].value == b"three"
        await client.close()
        await server.close()

    tc.run(main(), contexts=1)


def test_sendall_await_ends_with_none_each_way(path):
    """A sendall's await returns None however it is resumed: awaited, and driven by hand
    through ``send`` (compiled, the C method that 3.12+ resumes an await by when the value
    sent is not None)."""

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            assert await client.sendall(b"ab") is None
            stop = await _stop_of(client.sendall(b"cd").__await__(), lambda it: it.send(None))
            assert stop.value is None and stop.args in ((), (None,))
            got = b""
            while len(got) < 4:
                got += await server.recv()
            assert got == b"abcd"

    tc.run(main(), contexts=1)


def test_recv_call_awaited_twice_at_once(path, contexts):
    """The same recv() call awaited by two tasks at once: the second await is refused as
    another receiver, the first still gets the bytes, and the stream receives on."""

    async def main():
        client, server = await tcp_pair()
        call = server.recv(64)
        first = tc.spawn(_await(call))
        await wait_blocked(first)
        with pytest.raises(RuntimeError, match="already receiving"):
            await call
        await client.sendall(b"x")
        assert await first == b"x"
        await client.sendall(b"y")
        assert await server.recv(64) == b"y"
        await client.close()
        await server.close()

    tc.run(main(), contexts=contexts)


def test_recv_call_cancelled_before_its_bytes_then_reused(path, contexts):
    """A parked recv cancelled (its call's throw): the token goes back, the call returns to
    the spare, and the next recv (that same call, reused) gets the bytes."""

    async def main():
        client, server = await tcp_pair()
        for i in range(5):
            waiting = tc.spawn(_await(server.recv(16)))
            await wait_blocked(waiting)
            await cancel_and_wait(waiting)
            await client.sendall(b"c%d" % i)
            assert await server.recv(16) == b"c%d" % i
        await client.close()
        await server.close()

    tc.run(main(), contexts=contexts)


def test_readers_on_many_contexts_keep_order(path, contexts):
    """Successive recvs from tasks that may run on different contexts: the multishot moves
    to the ring of the context that receives (stopped on the old one first), and the bytes
    come out in the order they were sent."""
    n = 200

    async def main():
        client, server = await tcp_pair()

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
    from helpers.runtime import open_fds, opened_since

    streams = []

    async def holder(ready):
        client, server = await tcp_pair()
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
    assert not opened_since(before)


@pytest.mark.parametrize("size", [65536, 1 << 20], ids=["recv", "bulk-recv"])
def test_peer_reset_is_an_oserror(path, size):
    """An error CQE (the peer reset the connection) reaches the recv as OSError(ECONNRESET):
    a default-sized recv and a bulk one (1 MiB: its own op, straight into the bytes) alike."""

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0)
        accepting = tc.spawn(lst.accept())
        raw = socket.create_connection(("127.0.0.1", lst.port))
        server = await accepting
        await lst.close()
        raw.sendall(b"hi")
        assert await server.recv(size) == b"hi"
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        raw.close()  # RST
        with pytest.raises(OSError) as info:
            while await server.recv(size):
                pass
        assert info.value.errno == errno.ECONNRESET
        await server.close()

    tc.run(main(), contexts=1)


@pytest.mark.skipif(not uring.COMPILED, reason="the compiled ring only")
def test_ring_buffer_ring_setup_and_checks(monkeypatch):
    """The ring registers its buffer ring once; bad sizes are refused; the forced fallback
    leaves the ring without one; closing unmaps it."""
    monkeypatch.delenv(uring.MULTISHOT_ENV, raising=False)  # rings that may have one
    ring = uring.CRing(8)
    try:
        with pytest.raises(ValueError):
            ring.multishot_setup(3, 4096)  # not a power of two
        with pytest.raises(ValueError):
            ring.multishot_setup(8, 0)
        assert ring.multishot_ready()
        assert ring.multishot
        assert ring.multishot_setup(8, 4096) == 0  # once: the first answer stands
        assert ring.buffer_bytes == uring.multishot_buffers() * uring.MULTISHOT_BUFFER_SIZE
    finally:
        ring.close()
    # closing unmaps the buffers and leaves the ring without multishot
    assert ring.buffer_bytes == 0
    assert not ring.multishot

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
        client, server = await tcp_pair()
        await client.sendall(b"x")
        assert await server.recv() == b"x"
        return client, server

    streams = tc.run(main(), contexts=contexts)
    for s in streams:
        s._sock.close()  # never closed through tinycoro: the run had ended


# -- one receive contract on every path ------------------------------------------------------
@pytest.mark.timeout(30)
def test_open_stream_does_not_hide_a_deadlock(path, contexts):
    """A stream that has received once stays open (its multishot armed) while the only task
    waits on an Event nobody sets: no task waits on the multishot, so it is not work and the
    watchdog raises DeadlockError, as it does on the single recv path."""

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv() == b"x"
            await tc.Event().wait()

    with pytest.raises(tc.DeadlockError):
        tc.run(main(), contexts=contexts, deadlock_timeout=0.5)


@pytest.mark.timeout(30)
def test_recv_waiting_on_the_network_is_not_a_deadlock(path):
    """The other half of that contract: a task that waits in recv for a peer outside the
    scheduler is waiting for I/O, not deadlocked. The peer (a plain thread) sends only once
    the context has slept with the recv parked for several watchdog periods."""
    import threading
    import time

    from helpers.runtime import wait_until

    sched = tc.Scheduler(1)
    box = {}

    async def main(port):
        conn = await tc.net.connect("127.0.0.1", port)
        async with conn:
            await conn.sendall(b"a")
            assert await conn.recv() == b"a"  # armed from here on (multishot path)
            return await conn.recv()

    with socket.create_server(("127.0.0.1", 0)) as lsock:
        def peer():
            raw, _ = lsock.accept()
            with raw:
                raw.sendall(raw.recv(1))
                wait_until(lambda: sched.stats().contexts[0].sleeping, what="the context asleep")
                time.sleep(1.5)  # three watchdog periods with only the recv waiting
                raw.sendall(b"late")
                box["sent"] = True
                raw.recv(1)  # until the client closes

        t = threading.Thread(target=peer)
        t.start()
        task = sched.submit(main(lsock.getsockname()[1]))
        sched.loop(deadlock_timeout=0.5)
        t.join()
    assert box.get("sent") and task.result() == b"late"


def test_recv_1_over_a_queued_chunk_copies_each_byte_once(path):
    """recv(1) over one large queued chunk copies what it returns, not the rest of the chunk
    each time (that was quadratic in the chunk's size)."""
    if path != "multishot":
        pytest.skip("only the multishot path queues chunks")
    copied = [0]

    class Chunk(bytes):
        """A chunk that counts the bytes each slice of it copies."""

        def __getitem__(self, key):
            out = bytes.__getitem__(self, key)
            if isinstance(key, slice):
                copied[0] += len(out)
                return Chunk(out)
            return out

    size = 16384

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv() == b"x"
            ms = server._ms
            chunk = Chunk(bytes(range(256)) * (size // 256))
            assert ms.head is None
            ms.head = chunk  # as a completion queues it on the empty queue
            ms.queued += size
            got = bytearray()
            while len(got) < size:
                got += await server.recv(1)
            assert bytes(got) == bytes(chunk)

    tc.run(main(), contexts=1)
    assert copied[0] <= 2 * size, f"{copied[0]} bytes copied to return {size}"


def test_sendall_made_and_never_awaited_keeps_the_fast_path(path):
    """A sendall that is made and dropped unawaited holds nothing of the stream's: the next
    sendalls still go through the stream's one reusable op."""

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            client.sendall(b"never sent")  # made, never awaited
            first = client.sendall(b"one")
            await first
            second = client.sendall(b"two")
            assert second is first  # the reusable op, back for the next sendall
            await second
            got = b""
            while len(got) < 6:
                got += await server.recv()
            assert got == b"onetwo"

    tc.run(main(), contexts=1)


# -- the multishot's completions: a raising handler, buffer exhaustion, an old kernel --------
def _needs_multishot(path):
    if path != "multishot":
        pytest.skip("a multishot recv's completions only")


def test_raising_completion_fails_the_stream(path, caplog):
    """A completion handler that raises (injected through the ring owner's completion_hook
    seam) took bytes with it: the stream is failed, not left to go on with a hole in its
    data. The raise is reported with its stream (rule 17), the recv that was waiting and every
    later one raise an OSError naming why (the original error as its cause), bytes that
    arrive later are never returned, the CQE is not handled twice (no buffer given back twice,
    the ring's own count does not drift) and close leaves nothing in flight."""
    _needs_multishot(path)
    from tinycoro import lowlevel

    raised = []

    def hook(op, res, data, more):
        if not raised and data:
            raised.append(data)
            raise ValueError("handler failed")
        return res, data

    async def main():
        client, server = await tcp_pair()
        engine = lowlevel.current_engine()
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv() == b"x"
            engine.completion_hook = hook
            try:
                waiting = tc.spawn(server.recv())
                await wait_blocked(waiting)
                await client.sendall(b"lost")
                errors = []
                try:
                    await waiting
                except OSError as e:
                    errors.append(e)
                await client.sendall(b"after")
                for _ in range(2):
                    try:
                        await server.recv()
                    except OSError as e:
                        errors.append(e)
            finally:
                engine.completion_hook = None
        assert engine.own_inflight == 0
        assert not engine.inflight
        return errors

    with caplog.at_level("ERROR", logger="tinycoro"):
        errors = tc.run(main(), contexts=1)
    assert raised == [b"lost"]
    assert len(errors) == 3
    for e in errors:
        assert e.errno == errno.EIO and "handler failed" in str(e), e
        assert isinstance(e.__cause__, ValueError)
    reports = [r for r in caplog.records if "recv from 127.0.0.1" in r.getMessage()]
    assert len(reports) == 1 and isinstance(reports[0].exc_info[1], ValueError)


def test_raising_final_completion_fails_the_stream(path, caplog):
    """The last CQE of a multishot (here EOF) whose handler raises: the multishot still ends
    (out of the in-flight table, the stream's waiter woken), the raise is reported, and the
    waiting recv raises naming why instead of arming again as if nothing was lost."""
    _needs_multishot(path)
    from tinycoro import lowlevel

    failed = []

    def hook(op, res, data, more):
        if not more and not failed:
            failed.append(res)
            raise ValueError("final handler failed")
        return res, data

    async def main():
        client, server = await tcp_pair()
        engine = lowlevel.current_engine()
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv() == b"x"
            engine.completion_hook = hook
            try:
                waiting = tc.spawn(server.recv())
                await wait_blocked(waiting)
                await client.shutdown_write()
                with pytest.raises(OSError, match="final handler failed"):
                    await waiting
            finally:
                engine.completion_hook = None
        assert engine.own_inflight == 0 and not engine.inflight

    with caplog.at_level("ERROR", logger="tinycoro"):
        tc.run(main(), contexts=1)
    assert failed == [0]  # the EOF's CQE
    assert sum("recv from" in r.getMessage() for r in caplog.records) == 1


def test_a_stream_holds_only_what_its_receive_path_uses(path):
    """Where the ring takes a multishot, the stream receives into the ring's buffers and
    holds no 64 KiB buffer (nor a single recv op) of its own; with TINYCORO_MULTISHOT=0 read
    when the ring was made, the stream has no multishot at all and makes its buffer at the
    first recv. Bytes arrive either way."""

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            assert server._rbuf is None and server._recv_op is None
            assert (server._ms is not None) == (path == "multishot")
            await client.sendall(b"ping")
            assert await server.recv() == b"ping"
            if path == "multishot":
                assert server._rbuf is None and server._recv_op is None
            else:
                assert len(server._rbuf) == 65536

    tc.run(main(), contexts=1)


def test_tiny_buffer_pool_ends_and_rearms(path, contexts, monkeypatch):
    """Two provided buffers for four busy streams: multishots end with ENOBUFS and are armed
    again by the next recv; every byte arrives intact, and the statistics count both."""
    _needs_multishot(path)
    monkeypatch.setenv(uring.MULTISHOT_BUFFERS_ENV, "2")
    size = 1 << 20
    blobs = [bytes([i]) * 7 + bytes(range(256)) * (size // 256) for i in range(4)]

    async def pair_transfer(blob):
        client, server = await tcp_pair()
        async with client, server:
            sender = tc.spawn(client.sendall(blob))
            got = bytearray()
            while len(got) < len(blob):
                got += await server.recv()
            await sender
            return bytes(got)

    async def main():
        return await tc.when_all(*(pair_transfer(b) for b in blobs))

    s = tc.Scheduler(contexts)
    task = s.submit(main())
    s.loop()
    assert task.result() == blobs
    stats = s.stats().contexts
    assert sum(c.multishot_enobufs for c in stats) > 0
    assert sum(c.multishot_rearms for c in stats) >= sum(c.multishot_enobufs for c in stats)


def test_buffer_pool_knob_is_checked(monkeypatch):
    """The pool size must be a power of two the kernel takes; anything else is refused with
    a message naming the variable."""
    monkeypatch.setenv(uring.MULTISHOT_BUFFERS_ENV, "3")
    with pytest.raises(ValueError, match=uring.MULTISHOT_BUFFERS_ENV):
        uring.multishot_buffers()
    monkeypatch.setenv(uring.MULTISHOT_BUFFERS_ENV, "8")
    assert uring.multishot_buffers() == 8


def test_old_kernel_switches_to_single_recv(path, contexts):
    """A kernel with the buffer ring but without the multishot recv answers -EINVAL to the
    first one: the waiting recv takes the single path, the ring queues no more multishots,
    and every byte arrives. Simulated without such a kernel and without a switch in the
    ring: the stream's multishot is queued as a NOP (its op's prep and args, set on this one
    stream), whose one CQE (no "more") the engine's completion_hook turns into that -EINVAL.
    If the switch-over broke, the multishot would be armed again and again: the hook lets
    the third one through as what it is (res 0, EOF), and the recv that returns it fails."""
    _needs_multishot(path)
    from tinycoro import lowlevel

    refused = []

    def refuse(op, res, data, more):
        if op.prep is uring.prep_nop and not more and len(refused) < 2:
            refused.append(res)
            return -errno.EINVAL, None
        return res, data

    async def main():
        engine = lowlevel.current_engine()
        client, server = await tcp_pair()
        async with client, server:
            engine.completion_hook = refuse
            try:
                ms = server._ms
                ms.prep, ms.args = uring.prep_nop, ()
                sender = tc.spawn(client.sendall(b"abc" * 1000))
                got = bytearray()
                while len(got) < 3000:
                    data = await server.recv()
                    assert data, "the refused multishot was armed again"
                    got += data
                await sender
            finally:
                engine.completion_hook = None
            assert not ms.armed
            assert not engine.multishot_ready()
            assert not engine.multishot_possible()
        return bytes(got)

    assert tc.run(main(), contexts=1) == b"abc" * 1000
    assert refused == [0]  # the NOP's result, refused once


def test_multishot_only_where_its_code_runs_compiled():
    """The multishot's cross-thread steps are atomic only compiled: streams use it only when
    the compiled ring and the compiled multishot module both run. A child process in which
    that module alone runs interpreted (a partial build) makes streams with the single recv."""
    import subprocess
    import sys
    import textwrap

    from tinycoro import compiled

    # on a free-threaded build too: there its shared steps run under the stream's lock
    # (docs/design.md, "Synchronisation, with and without the GIL")
    assert multishot.AVAILABLE == (uring.COMPILED and compiled.is_compiled(multishot))
    code = textwrap.dedent("""
        import importlib.util, os, sys
        class OnlyMultishotPure:  # the .py of that one module, the build of every other
            @staticmethod
            def find_spec(name, path=None, target=None):
                if name != "tinycoro.net.multishot" or not path:
                    return None
                return importlib.util.spec_from_file_location(
                    name, os.path.join(path[0], "multishot.py"))
        sys.meta_path.insert(0, OnlyMultishotPure)
        import tinycoro as tc
        from tinycoro import compiled
        from tinycoro import uring
        from tinycoro.net import multishot
        assert not compiled.is_compiled(multishot)
        async def main():
            lst = await tc.net.listen()
            acc = tc.spawn(lst.accept())
            c = await tc.net.connect("127.0.0.1", lst.port)
            s = await acc
            print(s._ms is None)
            for x in (c, s, lst):
                await x.close()
        tc.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# -- each recv's own limit, and what one recv returns ------------------------------------------
def _unread(stream) -> int:
    """Bytes received for *stream* and not read yet: its multishot's queue, else the socket's
    own buffer (FIONREAD)."""
    import fcntl
    import struct
    import termios

    ms = stream._ms
    if ms is not None and ms.armed:
        return ms.queued
    raw = fcntl.ioctl(stream.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return struct.unpack("i", raw)[0]


async def _until_unread(stream, n: int) -> None:
    for _ in range(100_000):
        if _unread(stream) >= n:
            return
        await tc.yield_now()
    raise AssertionError(f"{_unread(stream)} bytes unread, waited for {n}")


def test_parked_recv_keeps_its_own_limit(path, contexts):
    """A recv(5) parked for data keeps its limit of 5 when another task's recv(100) is
    refused meanwhile ("another task is already receiving"), and a recv(5) made first and
    awaited after a recv(100) was made keeps its 5 too: each call's limit is its own."""

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            if path == "multishot":
                await client.sendall(b"x")
                assert await server.recv() == b"x"  # armed: the next recv parks on it
            parked = tc.spawn(server.recv(5))
            await wait_blocked(parked)
            with pytest.raises(RuntimeError, match="already receiving"):
                await server.recv(100)
            await client.sendall(b"y" * 100)
            first = await parked
            made_first = server.recv(5)
            server.recv(100)  # made, never awaited
            await _until_unread(server, 100 - len(first))
            second = await made_first
            return first, second

    first, second = tc.run(main(), contexts=contexts)
    assert first == b"y" * 5 and second == b"y" * 5


def test_recv_returns_up_to_n_of_what_is_queued(path, contexts):
    """Three messages queued before a recv(n): one recv returns all of them when n allows
    (not one chunk per recv), and at most n of them when it does not."""
    msgs = [bytes([65 + i]) * 100 for i in range(3)]

    async def main():
        client, server = await tcp_pair()
        async with client, server:
            await client.sendall(b"x")
            assert await server.recv() == b"x"
            for m in msgs:
                await client.sendall(m)
                await _until_unread(server, 100 * (msgs.index(m) + 1))
            whole = await server.recv(1000)
            for m in msgs:
                await client.sendall(m)
                await _until_unread(server, 100 * (msgs.index(m) + 1))
            parts = [await server.recv(250), await server.recv(250)]
            return whole, parts

    whole, parts = tc.run(main(), contexts=contexts)
    assert whole == b"".join(msgs)
    assert parts == [b"".join(msgs)[:250], b"".join(msgs)[250:]]


def test_large_and_small_recvs_interleaved_keep_order(path, contexts):
    """recv(1 MiB) and recv(300,000) take the single recv while no multishot is armed, small
    ones arm it: 8 MiB read back with the two mixed arrive whole and in order, no recv over
    its limit."""
    blob = bytes(range(251)) * (8 * 1024 * 1024 // 251)

    async def main():
        client, server = await tcp_pair()

        async def send():
            view = memoryview(blob)
            for i in range(0, len(view), 99991):
                await client.sendall(view[i:i + 99991])
            await client.shutdown_write()

        sender = tc.spawn(send())
        got = await _recv_to_eof(server, (1 << 20, 7, 300_000, 65536, 1, 1 << 20, 4096))
        await sender
        await client.close()
        await server.close()
        return got

    assert tc.run(main(), contexts=contexts) == blob
