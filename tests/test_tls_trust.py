"""TLS streams you can rely on under concurrency, close and timeouts:
full-duplex transfers, close and listener close ending what waits at once, the errors of a
closed stream, and a send cut by a timeout refusing further sends instead of corrupting the
stream. Certificates come from conftest's ``tls_cert`` fixture."""

from __future__ import annotations

import os
import socket
import ssl

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked
from tinycoro.uring import prep_recv, prep_recv_multishot

from helpers.runtime import cancel_and_wait, open_fds, opened_since
from helpers.tls import tls_pair

pytestmark = pytest.mark.timeout(90)

# Far more than loopback's socket buffers hold: a send of this much to a peer that does not
# read blocks until the peer reads or the stream closes.
BLOCKING = 32 << 20
# Enough to block a sendall once _small_buffers has shrunk the kernel's buffers to 16 KiB, and
# little enough that reading it back stays quick on a loaded machine (32 MiB through TLS in
# 16 KiB steps took over 10 s on the pure runtime at a load average of 27).
BEHIND_SMALL_BUFFERS = 1 << 20
# The bound on what must end "at once" (a recv beside a blocked sendall, a close, a listener's
# close): done wrong, each waits for a peer that never reads or speaks, for ever, so the bound
# only tells a hang from progress and is no speed check (on the pure runtime, 4 contexts, load
# average 34: a recv there took 0.1 ms, a close ending three waiters 22 ms at worst in 30 runs).
HANG = 30


async def _read_exactly(stream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await stream.recv()
        assert chunk, f"EOF after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def test_tls_full_duplex_10mib_each_way(server_ctx, client_ctx, contexts):
    """Both ends send 10 MiB while receiving the other's 10 MiB, at the same time: a receiver
    never waits behind its own side's sender, which is blocked until the peer reads."""
    n = 10 << 20
    payloads = {"client": os.urandom(n), "server": os.urandom(n)}

    async def duplex(stream, mine: bytes) -> bytes:
        async with tc.TaskGroup() as g:
            g.spawn(stream.sendall(mine))
            return await _read_exactly(stream, n)

    async def main():
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        async with tc.timeout(HANG):
            got = await tc.when_all(duplex(client, payloads["client"]),
                                    duplex(server, payloads["server"]))
        for c in (client, server, lst):
            await c.close()
        return got

    before = open_fds()
    to_client, to_server = tc.run(main(), contexts=contexts)
    assert not opened_since(before)
    assert to_client == payloads["server"]
    assert to_server == payloads["client"]


def _small_buffers(sender, receiver) -> None:
    """Shrink the kernel's buffers between two TLS streams, so that one 256 KiB write of a
    sendall cannot fit in them and blocks until the receiver reads (loopback's autotuned
    buffers would take megabytes first)."""
    sender._raw._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    receiver._raw._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)


def test_tls_recv_is_not_held_up_by_a_blocked_sendall(server_ctx, client_ctx, contexts):
    async def main():
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        _small_buffers(server, client)
        sender = tc.spawn(server.sendall(b"x" * BEHIND_SMALL_BUFFERS))  # the client does not read
        await wait_blocked(sender)
        await client.sendall(b"ping")
        async with tc.timeout(HANG):
            assert await server.recv() == b"ping"
        await _read_exactly(client, BEHIND_SMALL_BUFFERS)
        await sender
        for c in (client, server, lst):
            await c.close()

    tc.run(main(), contexts=contexts)


@pytest.fixture
def pha_contexts(tls_cert):
    """Server and client contexts for TLS 1.3 post-handshake authentication: the server asks
    for the client's certificate after the handshake, whenever it likes."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(*tls_cert)
    server.load_verify_locations(cafile=str(tls_cert[0]))
    server.verify_mode = ssl.CERT_REQUIRED
    server.post_handshake_auth = True
    client = ssl.create_default_context(cafile=str(tls_cert[0]))
    client.load_cert_chain(*tls_cert)
    client.post_handshake_auth = True
    return server, client


def test_output_of_a_recv_goes_out_behind_a_blocked_sendall(pha_contexts, contexts):
    """A recv whose TLS read produces output (here the client's answer to a post-handshake
    certificate request) while a sendall on the same stream is blocked: the recv returns at
    once, and the sendall's task puts that output on the wire after its own bytes."""

    async def main():
        lst, client, server = await tls_pair(*pha_contexts)
        _small_buffers(client, server)
        sender = tc.spawn(client.sendall(b"x" * BEHIND_SMALL_BUFFERS))  # the server does not read
        await wait_blocked(sender)
        assert server.ssl_object.getpeercert() is None
        server.ssl_object.verify_client_post_handshake()  # goes out with the next send
        await server.sendall(b"who are you?")
        async with tc.timeout(HANG):
            assert await client.recv() == b"who are you?"
        await _read_exactly(server, BEHIND_SMALL_BUFFERS)
        await sender
        await client.sendall(b"end")  # behind the client's answer on the wire
        assert await server.recv() == b"end"
        assert server.ssl_object.getpeercert()["subject"] == ((("commonName", "localhost"),),)
        for c in (client, server, lst):
            await c.close()

    tc.run(main(), contexts=contexts)


def test_close_ends_blocked_tls_sends_and_recvs_at_once(server_ctx, client_ctx, contexts):
    """A sendall blocked by a peer that does not read, a second sendall queued behind it and a
    pending recv all end with ClosedResourceError, and close itself does not wait for them."""

    async def main():
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        _small_buffers(server, client)
        first = tc.spawn(server.sendall(b"x" * BEHIND_SMALL_BUFFERS))
        await wait_blocked(first)
        second = tc.spawn(server.sendall(b"y" * 1000))
        receiver = tc.spawn(server.recv())
        await wait_blocked(second, receiver)
        async with tc.timeout(HANG):
            await server.close()
            for t in (first, second, receiver):
                with pytest.raises(tc.ClosedResourceError):
                    await t
        await client.close()
        await lst.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


async def _in_handshake(task) -> None:
    """Until *task* (a TLS accept) waits for the client's handshake bytes, not for a
    connection: it is blocked on a recv."""
    while True:
        await wait_blocked(task)
        waiting = task._waiting
        if getattr(waiting, "prep", None) is prep_recv:
            return
        # parked on the stream's multishot recv (docs/io.md): its ticket names the op
        if getattr(getattr(waiting, "what", None), "prep", None) is prep_recv_multishot:
            return
        await tc.yield_now()  # blocked on the accept, whose completion is on its way


def test_listener_close_ends_an_accept_stuck_in_a_handshake(server_ctx, contexts, caplog):
    """A client that connects and never speaks: closing the listener ends accept() at once."""

    async def main():
        lst = await tc.net.listen(ssl=server_ctx)
        accepting = tc.spawn(lst.accept())
        mute = await tc.net.connect("127.0.0.1", lst.port)  # plain TCP: never says hello
        await _in_handshake(accepting)
        async with tc.timeout(HANG):
            await lst.close()
            with pytest.raises(tc.ClosedResourceError):
                await accepting
        assert await mute.recv() == b""  # the server side of it was closed
        await mute.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)
    # The listener was closed: not a handshake failure worth a warning.
    assert not [r for r in caplog.records if "TLS handshake" in r.getMessage()]


def test_closed_tls_stream_raises_closed_resource_error(server_ctx, client_ctx, tmp_path,
                                                        contexts):
    (tmp_path / "f").write_bytes(b"data")

    async def main():
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        await server.close()
        assert server.closed
        async with await tc.io.open(tmp_path / "f") as f:
            for call in (server.recv(), server.send(b"a"), server.sendall(b"a"),
                         server.sendfile(f)):
                with pytest.raises(tc.ClosedResourceError):
                    await call
        await server.close()  # closing twice is a no-op
        await client.close()
        await lst.close()

    tc.run(main(), contexts=contexts)


def test_timeout_cut_tls_sendall_refuses_further_sends(server_ctx, client_ctx, tmp_path,
                                                       contexts):
    """A timeout that cuts a sendall mid-record leaves part of a TLS record on the wire: the
    stream then refuses every send with BrokenPipeError (no later bytes could be decoded by
    the peer), still receives, and the peer reads complete records, then EOF, and never
    stalls."""
    payload = os.urandom(BLOCKING)
    (tmp_path / "f").write_bytes(b"data")

    async def main():
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        with pytest.raises(TimeoutError):
            async with tc.timeout(0.3):  # the client does not read: sendall blocks, is cut
                await server.sendall(payload)
        async with tc.timeout(HANG):  # the client reads the few MiB that got out first
            async with await tc.io.open(tmp_path / "f") as f:
                for call in (server.sendall(b"after"), server.send(b"after"),
                             server.sendfile(f)):
                    with pytest.raises(BrokenPipeError, match="cut"):
                        await call
            await client.sendall(b"ping")  # receiving still works
            assert await server.recv() == b"ping"
            await server.close()
            got = bytearray()
            while chunk := await client.recv():
                got += chunk
        assert 0 < len(got) < len(payload)
        assert bytes(got) == payload[: len(got)]  # complete records only, no garbage
        await client.close()
        await lst.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_a_sendall_cut_while_waiting_for_its_turn_leaves_the_stream_whole(server_ctx,
                                                                        client_ctx, contexts):
    """Nothing of a sendall cancelled behind another one was encrypted: the stream goes on."""

    async def main():
        lst, client, server = await tls_pair(server_ctx, client_ctx)
        _small_buffers(server, client)
        first = tc.spawn(server.sendall(b"x" * BEHIND_SMALL_BUFFERS))
        await wait_blocked(first)
        queued = tc.spawn(server.sendall(b"never"))
        await wait_blocked(queued)
        await cancel_and_wait(queued)
        async with tc.timeout(HANG):
            assert await _read_exactly(client, BEHIND_SMALL_BUFFERS) == b"x" * BEHIND_SMALL_BUFFERS
            await first
            await server.sendall(b"after")
            assert await client.recv() == b"after"
        for c in (client, server, lst):
            await c.close()

    tc.run(main(), contexts=contexts)
