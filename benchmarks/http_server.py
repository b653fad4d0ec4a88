"""A minimal HTTP/1.1 keep-alive responder for the request/response rows of
:mod:`benchmarks.w_conns`: ``python -m benchmarks.http_server KIND [CONTEXTS]`` prints
``READY <port>`` and answers every request (whatever ends in a blank line) with one fixed
200 response, on tinycoro (a task per connection, ``recv`` and ``sendall``) or on uvloop's
protocol path (``data_received`` and ``write``). Pipelined requests in one read get one
response each. No parsing beyond the blank line: what is measured is the receive and send
path at a request/response pattern, not an HTTP parser. Even so the responder's own work
(:func:`_answers`: the call, ``bytes.count`` and ``rfind`` with their argument parsing) is
~4,100 instructions per request on 3.11 in either server, more than uvloop's whole echo path,
and at many connections it pushes more of tinycoro's longer per-request path out of the L1
caches: why these rows sit a few percent below the echo rows (docs/benchmarks-profiles.md).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Callable

from .echo_server import _protocol_main, serve_tinycoro

KINDS = ("tinycoro", "uvloop-protocol")
BODY = b"Hello, World!"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY
)
REQUEST_END = b"\r\n\r\n"


def _answers(pending: bytes, data: bytes, respond: Callable[[int], bytes] | None = None) -> tuple[bytes, bytes]:
    """(what to send, what stays pending) once *data* has arrived after *pending*: for *n*
    complete requests, ``respond(n)``, or without *respond* the fixed response *n* times
    (inline: no call more on the measured rows' path than the peer's)."""
    buf = pending + data if pending else data
    n = buf.count(REQUEST_END)
    if not n:
        return b"", buf
    return RESPONSE * n if respond is None else respond(n), buf[buf.rfind(REQUEST_END) + 4:]


async def serve_requests(conn: Any, respond: Callable[[int], bytes] | None = None) -> None:
    """Serve one tinycoro connection, a task per connection: each read's complete requests
    are answered in one send (see :func:`_answers`). The skeleton of every request/response
    server here; the JSON server passes its *respond*."""
    recv, sendall = conn.recv, conn.sendall
    pending = b""
    try:
        while True:
            data = await recv(65536)
            if not data:
                break
            out, pending = _answers(pending, data, respond)
            if out:
                await sendall(out)
    except OSError:
        pass  # the load generator resets its connections when a run ends
    finally:
        await conn.close()


class HttpProtocol(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        out, self.pending = _answers(self.pending, data)
        if out:
            self.transport.write(out)  # type: ignore[attr-defined]


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in KINDS:
        raise SystemExit(f"usage: python -m benchmarks.http_server {{{','.join(KINDS)}}} [CONTEXTS]")
    if argv[0] == "tinycoro":
        serve_tinycoro(int(argv[1]) if len(argv) > 1 else 1, serve_requests)
    else:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        asyncio.run(_protocol_main(HttpProtocol))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
