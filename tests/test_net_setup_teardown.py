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
import sys
import threading

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


def test_a_stream_dropped_unclosed_leaves_its_spare_sendall_to_reference_counting():
    # A stream's spare sendall op is in no reference cycle, so a stream that is dropped
    # without close() (a handler that forgot it) takes it with it at once, not at the next
    # full collection. (Seen failing while the op referred back to the stream's list that
    # held it: both were left as cyclic garbage.) The spare recv call and its list, and the
    # multishot and its parking ticket, are still cycles, broken by close().
    def run():
        async def main():
            client, server = await tcp_pair()
            await client.sendall(b"x")
            assert await server.recv(10) == b"x"
            await server.close()
            client._sock.close()  # the descriptor, so that dropping the stream warns of nothing

        with tc.Scheduler(1) as sched:
            sched.run_sync(main(), timeout=50)

    left = _cyclic_garbage(run)
    assert "SendallOp" not in left, sorted(left)


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


@pytest.mark.parametrize("how", ["listen", "from_socket", "ipv6"])
def test_an_accepted_tcp_stream_has_nodelay(how):
    # The listener sets TCP_NODELAY once on the listening socket, which Linux copies to each
    # socket it accepts, instead of one setsockopt per accepted connection.
    if how == "ipv6" and not socket.has_ipv6:
        pytest.skip("no IPv6")

    async def main():
        if how == "from_socket":
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.bind(("127.0.0.1", 0))
            raw.listen()
            lst = tc.net.TcpListener.from_socket(raw)
        else:
            host = "::1" if how == "ipv6" else "127.0.0.1"
            try:
                lst = await tc.net.listen(host, 0)
            except OSError as e:
                pytest.skip(f"cannot listen on {host}: {e}")
        client = await tc.net.connect(lst.host, lst.port)
        conn = await lst.accept()
        try:
            assert conn._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert client._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        finally:
            for s in (conn, client, lst):
                await s.close()

    tc.run(main(), contexts=1)


class _TaggedStream(tc.net.TcpStream):
    """A stream subclass of a user's, with a method and attributes of its own."""

    def tagged(self) -> str:
        return f"{self.tag}:{self.fileno()}"


def test_a_stream_is_subclassed_and_given_attributes():
    # The per-call fields of a stream live in a C base class where compiled; a stream stays a
    # Python object a user can subclass and give attributes, as before.
    async def main():
        client, conn = await tcp_pair()
        mine = _TaggedStream(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        try:
            for s in (client, conn, mine):
                s.tag = "t"
                s.extra = [s]  # a cycle through the attribute dict, for the collector to find
                assert s.tag == "t" and "tag" in vars(s)
            assert mine.tagged() == f"t:{mine.fileno()}"
            await client.sendall(b"ping")
            assert await conn.recv(10) == b"ping"
        finally:
            for s in (client, conn, mine):
                vars(s).pop("extra", None)
                await s.close()
        assert mine.closed and mine.fileno() == -1

    tc.run(main(), contexts=1)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 makes every instance a dict")
def test_a_stream_has_no_attribute_dict_until_given_one():
    # A stream's fields are C fields (compiled) or inline attribute values (3.11+): an open
    # stream, receiving and sending, has no attribute dict, which was ~300 bytes per connection
    # where the compiled stream's __init__ set an attribute outside its C base. (Seen failing
    # with that __init__: gc.get_referents(stream) held a dict.)
    async def main():
        client, conn = await tcp_pair()
        try:
            await client.sendall(b"x")
            assert await conn.recv(10) == b"x"
            await conn.sendall(b"y")
            assert await client.recv(10) == b"y"
            # compiled, a stream on the single recv has one: its buffer and op are set on it
            return [
                type(r).__name__ for s in (client, conn) for r in gc.get_referents(s)
                if s._ms is not None or not is_compiled(stream)
            ]
        finally:
            await client.close()
            await conn.close()

    from tinycoro.compiled import is_compiled
    from tinycoro.net import stream

    assert "dict" not in tc.run(main(), contexts=1)


def test_a_streams_acyclic_parts_are_not_tracked():
    # The receive token (a list of at most one None) and the stream's weak reference (no
    # callback) can be in no cycle: where compiled, the collector's full collections do not walk
    # them. Nor does its PendingOps: the one cycle through it (its dict -> an op -> the op's
    # `pending`) lasts only while the op is awaited (a frame holds it) or in a ring (the engine
    # does).
    from tinycoro.compiled import is_compiled
    from tinycoro.net import stream

    async def main():
        client, conn = await tcp_pair()
        try:
            return [
                gc.is_tracked(s._recv_token) or gc.is_tracked(s._ref) or gc.is_tracked(s._ops)
                for s in (client, conn)
            ]
        finally:
            await client.close()
            await conn.close()

    assert tc.run(main(), contexts=1) == [not is_compiled(stream)] * 2


# What the cyclic collector tracks per open connection of a server that spawns a task per
# accepted stream and parks it in recv (the echo's steady state), with the multishot receive
# (compiled runtime: True) and with the single one. Every full collection walks each of them,
# and at 10,000 connections full collections were most of the server's CPU
# (docs/benchmarks-profiles.md, "The connection-count axis"). Measured 21.96 and 18.93 before
# the accepted socket object, the multishot's bound abort method and each task's empty joiner
# list went. The parked recv's generator and closure went when the recv call became its own
# iterator (measured 17.96 compiled, 17.94 pure). The compiled stream takes its receive token
# and weak reference out of the collector's view (they can be in no cycle): 15.96 compiled;
# 14.98 measured before the next step. The multishot's queue keeps its first chunk in a field
# and makes a deque only for a second one (a deque was 624 bytes even empty), and the batched
# sendall's RingSend comes from a free list while the send is in flight, where each stream's
# spare op kept one for good: 12.98 compiled, 16.96 pure (15.96 compiled with
# TINYCORO_MULTISHOT=0). The compiled stream takes its PendingOps out of the collector's view
# too (it can be in no garbage cycle), and the spare sendall's list (the op refers to it only
# while it is out of it: no cycle); a stream on the single recv makes no list for the
# multishot's recv calls: 11.28 compiled, 14.27 with TINYCORO_MULTISHOT=0, 16.25 pure (here
# ~0.3 of each is objects of the run that do not grow with the streams: by gc.get_objects
# over 2,000 streams, 12.08 -> 10.10 per stream). What is left: the stream, PendingOps's
# dict, the multishot and its parking ticket, the spare recv call and its list, the spare
# sendall op; the task, its coroutine and context. Keyed by whether the streams received
# through the multishot (compiled only).
_TRACKED_PER_STREAM = {True: 11, False: 16}


def _tracked_per_open_stream(n: int) -> tuple[float, bool]:
    """Collector-tracked objects per open server-side stream, *n* connections from plain
    sockets of another thread, each served by its own task parked in recv; and whether the
    streams received through the multishot."""
    clients: list[socket.socket] = []
    counts: list[int] = []
    multishot: set[bool] = set()

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0, backlog=n)
        served = tc.Event()
        echoed = [0]

        async def handle(conn):
            multishot.add(conn._ms is not None)
            try:
                while True:
                    data = await conn.recv(100)
                    if not data:
                        break
                    await conn.sendall(data)
                    echoed[0] += 1  # parks in recv within this step: nothing more is sent
                    if echoed[0] == n:
                        served.set()
            finally:
                await conn.close()

        async def accept():
            for _ in range(n):
                tc.spawn(handle(await lst.accept()))

        gc.collect()
        counts.append(len(gc.get_objects()))

        def dial():
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", lst.port))
                s.sendall(b"x")
                clients.append(s)

        dialer = threading.Thread(target=dial)
        acceptor = tc.spawn(accept())
        dialer.start()
        await served.wait()
        await acceptor
        dialer.join(30)  # its last sendall is done: every echo has been sent
        for s in clients:
            assert s.recv(10) == b"x"
        gc.collect()
        counts.append(len(gc.get_objects()))
        for s in clients:
            s.close()
        await lst.close()

    with tc.Scheduler(1) as sched:
        sched.run_sync(main(), timeout=50)
    # the dialer's own sockets (socket.socket objects, tracked) are not the server's
    assert len(multishot) == 1
    return (counts[1] - counts[0] - n) / n, multishot.pop()


def test_an_open_stream_keeps_few_objects_for_the_collector():
    from tinycoro.core import fence
    from tinycoro.net import multishot

    per_stream, through_multishot = _tracked_per_open_stream(100)
    budget = _TRACKED_PER_STREAM[through_multishot]
    # Where the interpreter tracks them (the C socket type on 3.13, say), the socket object and
    # the multishot's lock of a free-threaded build count too.
    probe = socket.SocketType()
    budget += gc.is_tracked(probe)
    probe.close()
    if multishot.AVAILABLE and fence.FREE_THREADED:
        budget += gc.is_tracked(threading.Lock())
    # Before 3.11 two more objects are the interpreter's: a suspended coroutine's frame (3.11
    # embeds it in the coroutine) and the stream's attribute dict (3.11 keeps attributes inline
    # until someone asks for __dict__).
    budget += 2 * (sys.version_info < (3, 11))
    assert per_stream <= budget + 0.5, (per_stream, budget)
