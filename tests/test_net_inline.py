"""Operations that complete at once (rule 16): a send the socket takes whole and a recv that
finds bytes queued return without suspending, and spend the engine's cooperative budget, so a
task that never has to wait still lets the other tasks of its context run every
INLINE_BUDGET operations, and a cancel still lands at its next await."""

from __future__ import annotations

import socket
import threading

import pytest

import tinycoro as tc
from tinycoro.core.engine import INLINE_BUDGET
from tinycoro.net import multishot

from tinycoro.testing import wait_blocked

from helpers.budget import gaps, loop_beside_counter
from helpers.streams import tcp_pair
from helpers.sync import spawn_here

pytestmark = pytest.mark.timeout(60)

MSG = b"m" * 64


class _Drain:
    """A plain listening socket whose accepted connection a thread reads to EOF, so that a
    tinycoro stream connected to it can send small messages without ever filling its buffer
    (the reader is no task: nothing it does needs the tested context)."""

    def __init__(self) -> None:
        self.lst = socket.create_server(("127.0.0.1", 0))
        self.port = self.lst.getsockname()[1]
        self.received = 0
        self.thread = threading.Thread(target=self._run, name="drain", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.lst.accept()
        with conn:
            while data := conn.recv(65536):
                self.received += len(data)
        self.lst.close()

    def join(self) -> int:
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.received


def _context_ops(sched: tc.Scheduler, context: int) -> int:
    return sched.stats().contexts[context].ops


def test_sends_the_socket_takes_at_once_do_not_go_through_the_ring(contexts):
    """200 small sendalls and sends to a peer that drains: each completes inline, so the
    sender's context completes no io_uring operation for any of them."""
    n = 200
    drain = _Drain()

    with tc.Scheduler(contexts) as sched:
        async def main():
            conn = await tc.net.connect("127.0.0.1", drain.port)
            here = tc.current_context()
            before = _context_ops(sched, here)
            for i in range(n):
                if i % 2:
                    await conn.sendall(MSG)
                else:
                    assert await conn.send(MSG) == len(MSG)
            after = _context_ops(sched, here)
            await conn.close()
            return after - before

        through_ring = sched.run_sync(main(), timeout=50)
    assert drain.join() == n * len(MSG)
    assert through_ring == 0, f"{through_ring} of {n} sends went through the ring"


def test_a_sender_that_never_blocks_cannot_starve_its_context(contexts):
    """One task sends small messages in a loop to a peer that drains them; another task on
    the same context counts its own steps. The counter finishes, and between two of its
    steps the sender completes at most INLINE_BUDGET sends (then it yields)."""
    limit = 100_000  # bounds the test if the sender never let the counter run
    drain = _Drain()

    with tc.Scheduler(contexts) as sched:
        async def main():
            conn = await tc.net.connect("127.0.0.1", drain.port)
            sent, seen = await loop_beside_counter(lambda: conn.sendall(MSG), limit)
            await conn.close()
            return sent, seen

        sent, seen = sched.run_sync(main(), timeout=50)
    assert drain.join() == sent * len(MSG)
    assert sent < limit, "the counter never ran while the sender sent"
    assert max(gaps(seen)) <= INLINE_BUDGET, gaps(seen)


def test_a_task_woken_by_io_runs_within_a_budget_of_inline_sends(contexts):
    """A task waits in a recv for bytes that only the sender's own sends bring. Each of
    those sends completes inline (nothing else is ready, nothing is queued), so the recv's
    completion sits in the ring until the sender's context ends its turn: the budget's
    yield ends it within INLINE_BUDGET sends, and the waiter runs."""
    limit = 1000  # 64 KB: fits the socket buffers, so only the budget can stop the loop

    with tc.Scheduler(contexts) as sched:
        async def main():
            client, server = await tcp_pair()
            woke = [False]

            async def waiter():
                await server.recv(1)
                woke[0] = True

            w = spawn_here(waiter())
            await wait_blocked(w)  # in its recv, submitted by the end of the turn it ran in
            sends = 0
            while not woke[0] and sends < limit:
                await client.sendall(MSG)
                sends += 1
            await w
            for s in (client, server):
                await s.close()
            return sends

        sends = sched.run_sync(main(), timeout=50)
    assert sends <= INLINE_BUDGET + 1, f"the waiter ran only after {sends} sends"


@pytest.mark.parametrize("path", ["multishot", "single"])
def test_a_reader_of_queued_bytes_cannot_starve_its_context(contexts, path, monkeypatch):
    """A task reads 4 KiB one byte at a time. A task on the same context that counts its
    steps sees at most INLINE_BUDGET + 1 recvs between two of them, and the bytes arrive
    whole and in order. Each path is checked for the premise that makes the bound hold: on
    the multishot path the bytes wait in the stream's queue and almost every recv(1)
    completes at once (so the budget is what bounds the gap); on the single recv every
    recv(1) is a ring operation that suspends (so the gap is bounded without a budget; an
    inline recv added to that path must spend the budget, and this case then checks it)."""
    if path == "single":
        monkeypatch.setenv("TINYCORO_MULTISHOT", "0")
    elif not multishot.AVAILABLE:
        pytest.skip("the multishot recv needs the compiled runtime")
    payload = bytes(range(256)) * 16

    with tc.Scheduler(contexts) as sched:
        async def main():
            client, server = await tcp_pair()
            got = bytearray()
            done = tc.Event()

            async def reader():
                while len(got) < len(payload):
                    data = await server.recv(1)
                    assert data
                    got.extend(data)

            async def counter():
                seen = []
                while not done.is_set() and len(seen) < 10_000:
                    seen.append(len(got))
                    await tc.yield_now()
                return seen

            await client.sendall(payload)
            here = tc.current_context()
            before = _context_ops(sched, here)
            r = spawn_here(reader())
            c = spawn_here(counter())
            await r
            ring_ops = _context_ops(sched, here) - before
            done.set()
            seen = await c
            for s in (client, server):
                await s.close()
            return bytes(got), seen, ring_ops

        got, seen, ring_ops = sched.run_sync(main(), timeout=50)
    assert got == payload
    if path == "single":
        assert ring_ops >= len(payload), f"only {ring_ops} ring ops for {len(payload)} recvs"
    else:
        assert ring_ops < len(payload) // 16, f"{ring_ops} ring ops: the recvs did not complete at once"
    assert max(gaps(seen)) <= INLINE_BUDGET + 1, max(gaps(seen))


def test_a_cancel_reaches_a_sender_that_never_blocks(contexts):
    """Inline sends do not suspend, but the budget's yield does: a cancel lands there, and
    the stream stays usable (every byte the peer got is a whole message)."""
    drain = _Drain()

    with tc.Scheduler(contexts) as sched:
        async def main():
            conn = await tc.net.connect("127.0.0.1", drain.port)
            started = tc.Event()
            sent = [0]

            async def sender():
                while True:
                    await conn.sendall(MSG)
                    sent[0] += 1
                    if sent[0] == 100:
                        started.set()

            t = tc.spawn(sender())
            await started.wait()
            t.cancel()
            with pytest.raises(tc.Cancelled):
                await t
            await conn.sendall(MSG)
            await conn.close()
            return sent[0] + 1

        sent = sched.run_sync(main(), timeout=50)
    assert drain.join() == sent * len(MSG)


def test_an_inline_send_keeps_its_errno(contexts):
    """A send to a peer that has reset the connection fails inline with the errno the
    kernel gave (EPIPE or ECONNRESET), as the ring's send would."""
    with tc.Scheduler(contexts) as sched:
        async def main():
            client, server = await tcp_pair()
            with socket.fromfd(server.fileno(), socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            await server.close()  # linger 0: the close sends a reset
            with pytest.raises(OSError) as info:
                for _ in range(100):
                    await client.sendall(MSG)
            await client.close()
            return info.value

        err = sched.run_sync(main(), timeout=50)
    assert isinstance(err, (BrokenPipeError, ConnectionResetError)), repr(err)


def test_the_inline_sends_pure_twin_answers_with_a_negative_errno():
    """The inline send (``_nbsend.send``) answers a refusal with its negative errno, not an
    exception, so that its caller needs no except clause: -EAGAIN for a full socket, -EPIPE
    once the peer is gone; the bytes it took otherwise (the compiled twin is the same, and
    the two tests above run it)."""
    import errno

    from tinycoro.net import _nbsend

    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        flags = socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0)
        assert _nbsend.send(a, a.fileno(), MSG, flags) == len(MSG)
        for _ in range(100_000):  # bounded: the buffer fills long before
            res = _nbsend.send(a, a.fileno(), MSG * 64, flags)
            if res < 0:
                break
        assert res == -errno.EAGAIN
        b.close()
        assert _nbsend.send(a, a.fileno(), MSG, flags) in (-errno.EPIPE, -errno.ECONNRESET)


def _queue_connections(port: int, n: int) -> list[socket.socket]:
    """*n* plain client sockets connected to *port*: the kernel completes each handshake into
    the listener's backlog, whether or not anything accepts yet."""
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def test_accepts_of_queued_connections_do_not_go_through_the_ring(contexts):
    """Connections already in the listener's backlog are accepted at once (a non-blocking
    accept, as uvloop's accept loop does): a server that a crowd connects to all at once sets
    each one up without an SQE, a CQE and a turn of its context; only the first accept, which
    cannot know that a crowd is queued, is the ring's."""
    n = 40

    with tc.Scheduler(contexts) as sched:
        async def main():
            lst = await tc.net.listen("127.0.0.1", 0, backlog=n)
            clients = _queue_connections(lst.port, n)
            here = tc.current_context()
            before = _context_ops(sched, here)
            conns = [await lst.accept() for _ in range(n)]
            after = _context_ops(sched, here)
            for c in conns:
                await c.sendall(b"x")
            got = [c.recv(1) for c in clients]
            for c in conns:
                await c.close()
            for c in clients:
                c.close()
            await lst.close()
            return after - before, got

        through_ring, got = sched.run_sync(main(), timeout=50)
    assert got == [b"x"] * n
    assert through_ring <= 1, f"{through_ring} of {n} accepts went through the ring"


def test_an_acceptor_that_never_waits_cannot_starve_its_context(contexts):
    """A crowd in the backlog: each accept completes at once, and spends the budget, so a
    task on the acceptor's context runs at least every INLINE_BUDGET accepts."""
    n = 120

    with tc.Scheduler(contexts) as sched:
        async def main():
            lst = await tc.net.listen("127.0.0.1", 0, backlog=n)
            clients = _queue_connections(lst.port, n)
            conns = []

            async def accept_one():
                conns.append(await lst.accept())

            done, seen = await loop_beside_counter(accept_one, n)
            for c in conns:
                await c.close()
            for c in clients:
                c.close()
            await lst.close()
            return done, seen

        done, seen = sched.run_sync(main(), timeout=50)
    assert done == n or seen[-1] < n
    # and maybe one more that suspended and was resumed at the step's start: the first
    # accept, the ring's (it cannot know a crowd is queued)
    assert max(gaps(seen)) <= INLINE_BUDGET + 1, gaps(seen)


def test_an_accept_that_waits_still_completes_through_the_ring(contexts):
    """Nothing queued: the accept waits for the next connection (the listener's socket is
    non-blocking for the inline attempt; the ring's accept still waits for one)."""
    with tc.Scheduler(contexts) as sched:
        async def main():
            lst = await tc.net.listen("127.0.0.1", 0)
            task = spawn_here(lst.accept())
            await wait_blocked(task)
            # the kernel completes the handshake into the backlog: no task needs to run
            client = socket.create_connection(("127.0.0.1", lst.port))
            conn = await task
            await conn.sendall(b"y")
            got = client.recv(1)  # sent whole before sendall returned
            client.close()
            await conn.close()
            await lst.close()
            return got

        assert sched.run_sync(main(), timeout=50) == b"y"
