"""TLS over tinycoro streams (ssl.SSLContext over ssl.MemoryBIO), with the self-signed certificate
of conftest's ``tls_cert`` fixture."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import ssl
import threading

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.runtime import open_fds, opened_since
from helpers.tls import tls_pair

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl binary"),
]


async def _echo(conn):
    async with conn:
        while data := await conn.recv():
            await conn.sendall(data)


def test_tls_echo_1mib(server_ctx, client_ctx, contexts):
    payload = os.urandom(1 << 20)

    async def main():
        lst = await tc.net.listen(ssl=server_ctx)
        srv_task = tc.spawn(_accept_and_echo(lst))
        conn = await tc.net.connect("127.0.0.1", lst.port, ssl=client_ctx,
                                    server_hostname="localhost")
        assert conn.ssl_object.version() in ("TLSv1.2", "TLSv1.3")

        async def sender():
            for i in range(0, len(payload), 100_000):
                await conn.sendall(payload[i : i + 100_000])

        s = tc.spawn(sender())
        got = bytearray()
        while len(got) < len(payload):
            chunk = await conn.recv()
            assert chunk
            got += chunk
        await s
        await conn.close()
        await srv_task
        await lst.close()
        return bytes(got)

    before = open_fds()
    got = tc.run(main(), contexts=contexts)
    assert not opened_since(before)
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()


async def _accept_and_echo(lst):
    conn = await lst.accept()
    await _echo(conn)


def test_blocking_ssl_client_in_a_thread(server_ctx, client_ctx):
    payload = os.urandom(300_000)
    box = {}

    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with client_ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(payload)
                got = bytearray()
                while len(got) < len(payload):
                    got += s.recv(65536)
                box["got"] = bytes(got)
                s.unwrap()  # a clean TLS close_notify

    async def main():
        lst = await tc.net.listen(ssl=server_ctx)
        t = threading.Thread(target=client, args=(lst.port,))
        t.start()
        conn = await lst.accept()
        await _echo(conn)  # ends at the client's close_notify
        t.join()
        await lst.close()

    tc.run(main(), contexts=2)
    assert box["got"] == payload


def test_client_refuses_an_untrusted_certificate_and_the_server_goes_on(server_ctx, client_ctx,
                                                                        caplog):
    async def main():
        lst = await tc.net.listen(ssl=server_ctx)
        accepted = tc.spawn(lst.accept())
        with pytest.raises(ssl.SSLCertVerificationError):
            await tc.net.connect("127.0.0.1", lst.port, ssl=ssl.create_default_context())
        with pytest.raises(ssl.SSLCertVerificationError):  # right CA, wrong name
            await tc.net.connect("127.0.0.1", lst.port, ssl=client_ctx,
                                 server_hostname="example.com")
        # The server dropped those two and still accepts the next, trusted client.
        good = await tc.net.connect("127.0.0.1", lst.port, ssl=client_ctx,
                                    server_hostname="localhost")
        conn = await accepted
        await good.sendall(b"trusted")
        assert await conn.recv() == b"trusted"
        for c in (good, conn, lst):
            await c.close()

    before = open_fds()
    with caplog.at_level(logging.WARNING, logger="tinycoro"):
        tc.run(main(), contexts=1)
    assert not opened_since(before)
    assert sum("TLS handshake" in r.getMessage() for r in caplog.records) == 2


def test_peer_closing_without_close_notify_reads_as_eof(server_ctx, client_ctx):
    async def main():
        lst, client, conn = await tls_pair(server_ctx, client_ctx)
        await client.sendall(b"last words")
        # A TCP FIN without a TLS close_notify first (closing the socket outright could turn
        # into a reset: the server's TLS 1.3 session tickets sit unread in the client).
        await client._raw.shutdown_write()
        assert await conn.recv() == b"last words"
        assert await conn.recv() == b""
        await conn.close()
        await client.close()
        await lst.close()

    tc.run(main(), contexts=1)


def test_close_ends_a_pending_tls_recv(server_ctx, client_ctx, contexts):
    async def main():
        lst, client, conn = await tls_pair(server_ctx, client_ctx)
        r = tc.spawn(conn.recv())
        await wait_blocked(r)
        await conn.close()
        with pytest.raises(tc.ClosedResourceError):
            await r
        assert await client.recv() == b""  # close_notify reached the client
        await client.close()
        await lst.close()

    tc.run(main(), contexts=contexts)


def test_tls_sendfile(server_ctx, client_ctx, tmp_path):
    data = os.urandom(700_000)
    (tmp_path / "f").write_bytes(data)

    async def main():
        lst = await tc.net.listen(ssl=server_ctx)
        accepted = tc.spawn(lst.accept())
        client = await tc.net.connect("localhost", lst.port, ssl=client_ctx)
        conn = await accepted
        async with await tc.io.open(tmp_path / "f") as f:
            assert await conn.sendfile(f, 100, 500_000) == 500_000
        await conn.close()
        got = bytearray()
        while chunk := await client.recv():
            got += chunk
        await client.close()
        await lst.close()
        return bytes(got)

    assert tc.run(main(), contexts=1) == data[100:500_100]


def test_ssl_argument_errors():
    async def main():
        with pytest.raises(TypeError, match="ssl"):
            await tc.net.connect("127.0.0.1", 1, ssl="yes")
        with pytest.raises(ValueError, match="server_hostname"):
            await tc.net.connect("127.0.0.1", 1, server_hostname="x")

    tc.run(main(), contexts=1)
