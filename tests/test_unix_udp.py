"""Unix-domain streams, UDP, IPv6, host names and sendfile through io_uring."""

from __future__ import annotations

import hashlib
import os
import socket
import threading

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.runtime import open_fds, opened_since

pytestmark = pytest.mark.timeout(60)


def _has_ipv6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback here")


async def _echo(conn):
    async with conn:
        while data := await conn.recv():
            await conn.sendall(data)


async def _serve(lst, n):
    handlers = [tc.spawn(_echo(await lst.accept())) for _ in range(n)]
    for h in handlers:
        await h


async def _echo_client(connect, payload, chunk=65536):
    """Send *payload* in chunks while receiving the echo; return what came back."""
    conn = await connect()
    got = []

    async def sender():
        for i in range(0, len(payload), chunk):
            await conn.sendall(payload[i : i + chunk])
        await conn.shutdown_write()

    s = tc.spawn(sender())
    while data := await conn.recv():
        got.append(data)
    await s
    await conn.close()
    return b"".join(got)


# -- Unix-domain streams --------------------------------------------------------------------------
def test_unix_echo_1mib_with_20_clients(tmp_path, contexts):
    path = tmp_path / "echo.sock"
    n = 20
    payloads = [os.urandom(1 << 20) for _ in range(2)]

    async def main():
        lst = await tc.net.listen_unix(path)
        assert isinstance(lst, tc.net.UnixListener) and os.path.exists(path)
        server = tc.spawn(_serve(lst, n))
        clients = [
            tc.spawn(_echo_client(lambda: tc.net.connect_unix(path), payloads[i % 2]))
            for i in range(n)
        ]
        results = [await c for c in clients]
        await server
        await lst.close()
        return results

    before = open_fds()
    results = tc.run(main(), contexts=contexts)
    assert not opened_since(before)
    for i, got in enumerate(results):
        assert hashlib.sha256(got).digest() == hashlib.sha256(payloads[i % 2]).digest(), i
    assert not path.exists()  # the listener removed its socket file


def test_unix_errors(tmp_path):
    async def main():
        with pytest.raises(FileNotFoundError):
            await tc.net.connect_unix(tmp_path / "nobody")
        (tmp_path / "plain").write_bytes(b"")
        with pytest.raises(ConnectionRefusedError):
            await tc.net.connect_unix(tmp_path / "plain")
        lst = await tc.net.listen_unix(str(tmp_path / "s"))
        with pytest.raises(OSError):  # EADDRINUSE: the path exists
            await tc.net.listen_unix(tmp_path / "s")
        with pytest.raises(ValueError, match="too long"):
            await tc.net.connect_unix("/" + "x" * 200)
        await lst.close()
        await lst.close()

    tc.run(main(), contexts=1)


# -- UDP ------------------------------------------------------------------------------------------
def test_udp_100_datagrams_with_their_addresses(contexts):
    async def sender(u, dest, i0):
        for i in range(i0, i0 + 50):
            assert await u.sendto(b"datagram %d" % i, dest) == len(b"datagram %d" % i)

    async def main():
        server = await tc.net.udp()
        a = await tc.net.udp()
        b = await tc.net.udp("127.0.0.1", 0)
        dest = ("127.0.0.1", server.port)
        senders = [tc.spawn(sender(a, dest, 0)), tc.spawn(sender(b, dest, 50))]
        got = [await server.recvfrom() for _ in range(100)]
        for s in senders:
            await s
        ports = (a.port, b.port)
        for u in (server, a, b):
            await u.close()
        return got, ports

    got, (pa, pb) = tc.run(main(), contexts=contexts)
    assert sorted(int(d.split()[1]) for d, _ in got) == list(range(100))
    for data, addr in got:
        i = int(data.split()[1])
        assert addr == ("127.0.0.1", pa if i < 50 else pb)


def test_udp_truncates_at_max_bytes_and_replies():
    async def main():
        server = await tc.net.udp()
        client = await tc.net.udp()
        await client.sendto(b"0123456789", ("127.0.0.1", server.port))
        data, addr = await server.recvfrom(4)
        assert data == b"0123"  # the rest of the datagram is discarded, as recvfrom(2) does
        await server.sendto(b"reply", addr)
        assert await client.recvfrom() == (b"reply", ("127.0.0.1", server.port))
        await client.sendto(b"", ("127.0.0.1", server.port))  # empty datagrams exist
        assert (await server.recvfrom())[0] == b""
        for u in (server, client):
            await u.close()

    tc.run(main(), contexts=1)


def test_udp_from_a_plain_socket_in_a_thread():
    # The other end is the standard library, in another thread.
    async def main():
        u = await tc.net.udp()
        box = {}

        def peer():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"hello", ("127.0.0.1", u.port))
                box["reply"] = s.recvfrom(100)[0]

        t = threading.Thread(target=peer)
        t.start()
        data, addr = await u.recvfrom()
        await u.sendto(data.upper(), addr)
        t.join()
        await u.close()
        return box["reply"]

    assert tc.run(main(), contexts=1) == b"HELLO"


@needs_ipv6
def test_udp_and_tcp_over_ipv6(contexts):
    async def main():
        server = await tc.net.udp("::1", 0)
        client = await tc.net.udp("::1")
        await client.sendto(b"v6", ("::1", server.port))
        data, addr = await server.recvfrom()
        assert data == b"v6" and addr == ("::1", client.port)
        with pytest.raises(ValueError, match="family"):
            await client.sendto(b"x", ("127.0.0.1", server.port))
        for u in (server, client):
            await u.close()
        lst = await tc.net.listen("::1", 0)
        srv = tc.spawn(_serve(lst, 1))
        got = await _echo_client(lambda: tc.net.connect("::1", lst.port), b"six" * 1000)
        await srv
        await lst.close()
        return got

    assert tc.run(main(), contexts=contexts) == b"six" * 1000


def test_host_names_are_resolved_off_the_context_thread(contexts):
    # 'localhost' goes through getaddrinfo on a helper thread; the context keeps running
    # other tasks meanwhile (here: the listener's accept is served on the same scheduler).
    resolver_threads = set()
    real = socket.getaddrinfo

    def spy(*args, **kwargs):
        resolver_threads.add(threading.current_thread().name)
        return real(*args, **kwargs)

    async def main():
        lst = await tc.net.listen("localhost", 0)
        srv = tc.spawn(_serve(lst, 1))
        host = "localhost"
        got = await _echo_client(lambda: tc.net.connect(host, lst.port), b"by name")
        await srv
        await lst.close()
        u = await tc.net.udp("localhost")
        await u.sendto(b"me", ("localhost", u.port))
        assert (await u.recvfrom())[0] == b"me"
        await u.close()
        with pytest.raises(socket.gaierror):
            await tc.net.connect("no-such-host.invalid", 80)
        return got

    socket.getaddrinfo = spy
    try:
        assert tc.run(main(), contexts=contexts) == b"by name"
    finally:
        socket.getaddrinfo = real
    assert resolver_threads and all(not n.startswith("tinycoro-") for n in resolver_threads)


# -- sendfile -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sendfile") / "ten_mib"
    data = os.urandom(10 << 20)
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize(
    "offset, count",
    [(0, None), (12345, None), (0, 3_000_000), (777, 5_000_001), (10 << 20, None), (0, 0)],
    ids=["all", "offset", "count", "offset_count", "at_eof", "zero"],
)
def test_sendfile_10mib(big_file, contexts, offset, count):
    path, data = big_file

    async def sink(lst):
        conn = await lst.accept()
        chunks = []
        while chunk := await conn.recv():
            chunks.append(chunk)
        await conn.close()
        return b"".join(chunks)

    async def main():
        lst = await tc.net.listen()
        s = tc.spawn(sink(lst))
        conn = await tc.net.connect("127.0.0.1", lst.port)
        async with await tc.io.open(path) as f:
            if count is None:
                sent = await conn.sendfile(f, offset)
            else:
                sent = await conn.sendfile(f, offset=offset, count=count)
            assert await f.read(5) == data[:5]  # the file's own position was not moved
        await conn.close()
        received = await s
        await lst.close()
        return sent, received

    before = open_fds()
    sent, received = tc.run(main(), contexts=contexts)
    assert not opened_since(before)  # the splice pipe is closed too
    expected = data[offset:] if count is None else data[offset : offset + count]
    assert sent == len(expected)
    assert hashlib.sha256(received).digest() == hashlib.sha256(expected).digest()


def test_sendfile_over_a_unix_stream_and_errors(tmp_path):
    src = tmp_path / "src"
    src.write_bytes(b"abcdef" * 1000)

    async def main():
        lst = await tc.net.listen_unix(tmp_path / "s")
        client = await tc.net.connect_unix(tmp_path / "s")
        conn = await lst.accept()
        async with await tc.io.open(src) as f:
            assert await client.sendfile(f, 6, 12) == 12
        assert await conn.recv() == b"abcdefabcdef"
        with pytest.raises(TypeError, match="fileno"):
            await client.sendfile(b"not a file")
        with pytest.raises(ValueError, match="count"):
            await client.sendfile(0, count=-1)
        for c in (client, conn, lst):
            await c.close()

    tc.run(main(), contexts=1)


def test_close_ends_a_recv_on_a_unix_stream(tmp_path, contexts):
    async def main():
        lst = await tc.net.listen_unix(tmp_path / "s")
        client = await tc.net.connect_unix(tmp_path / "s")
        conn = await lst.accept()
        r = tc.spawn(conn.recv())
        await wait_blocked(r)
        await conn.close()
        with pytest.raises(tc.ClosedResourceError):
            await r
        for c in (client, lst):
            await c.close()

    tc.run(main(), contexts=contexts)


def test_connect_tries_each_address_of_a_name(monkeypatch):
    # The resolver's answer is fixed here (a name with an IPv6 address where nothing listens,
    # then the IPv4 one where the listener is); the connections are real.
    real = socket.getaddrinfo

    def two_addresses(host, port, *args, **kwargs):
        if host != "dual.test":
            return real(host, port, *args, **kwargs)
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)

    async def main():
        lst = await tc.net.listen("127.0.0.1", 0)
        conn = await tc.net.connect("dual.test", lst.port)
        peer = await lst.accept()
        await conn.sendall(b"second address")
        got = await peer.recv()
        for c in (conn, peer, lst):
            await c.close()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
        probe.close()
        with pytest.raises(ConnectionRefusedError):  # every address refused: the last error
            await tc.net.connect("dual.test", free)
        return got

    before = open_fds()
    assert tc.run(main(), contexts=1) == b"second address"
    assert not opened_since(before)
