"""The echo servers, one process each: ``python -m benchmarks.echo_server KIND [CONTEXTS]``.

KIND is one of ``tinycoro``, ``asyncio-streams``, ``asyncio-protocol``, ``uvloop-streams``,
``uvloop-protocol``.
Each binds 127.0.0.1 on a free port, prints ``READY <port>`` and serves until killed. Every
server echoes whatever it receives, as soon as it receives it, with the idiom its library
recommends:

* tinycoro: one task per connection, ``recv`` into the stream's reused buffer, ``sendall``;
* asyncio streams: ``start_server`` + ``reader.read`` / ``writer.write`` / ``await drain()``;
* asyncio / uvloop protocol: ``transport.write(data)`` inside ``data_received``;
* uvloop streams: the asyncio streams server above on uvloop's loop, the like-for-like peer of
  a coroutine API (a coroutine per connection awaiting each read and write).

uvloop runs with its event loop policy.

With ``TINYCORO_BENCH_PROFILE=<path>`` the tinycoro server profiles its context thread with
cProfile for ``TINYCORO_BENCH_PROFILE_SECS`` seconds (default 5), then writes the stats to
*path* and keeps serving. With ``TINYCORO_BENCH_REUSE_PORT=<port>`` (0: a free one) it
listens with ``SO_REUSEPORT``: several server processes on one port, as ``cluster.serve`` puts
the engines (workload 7's control series).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Callable, Coroutine

KINDS = ("tinycoro", "asyncio-streams", "asyncio-protocol", "uvloop-streams", "uvloop-protocol")
HOST = "127.0.0.1"
BACKLOG = 1024


def _ready(port: int) -> None:
    sys.stdout.write(f"READY {port}\n")
    sys.stdout.flush()


# -- tinycoro ----------------------------------------------------------------------------------
async def tinycoro_echo(conn: Any) -> None:
    """Serve one tinycoro connection (a module-level function, so that ``cluster.serve`` in
    workload 7 can send it to engines by reference)."""
    recv, sendall = conn.recv, conn.sendall
    try:
        while True:
            data = await recv(65536)
            if not data:
                break
            await sendall(data)
    except OSError:
        pass  # the load generator resets its connections when a run ends
    finally:
        await conn.close()


def serve_tinycoro(contexts: int, handle: Callable[[Any], Coroutine[Any, Any, None]] = tinycoro_echo) -> None:
    """Listen, print ``READY <port>``, and serve each connection accepted with a task running
    ``handle(conn)`` on *contexts* contexts (the echo by default; the request/response servers
    pass theirs)."""
    import tinycoro as tc

    async def profile_for(path: str, seconds: float) -> None:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()  # this context's thread: with 1 context, every handler runs here
        await tc.sleep(seconds)
        prof.disable()
        prof.dump_stats(path + ".tmp")
        os.rename(path + ".tmp", path)  # the parent waits for this name; serving goes on

    async def main() -> None:
        # TINYCORO_BENCH_REUSE_PORT=<port> (0: a free one) listens with SO_REUSEPORT, so that
        # several of these processes share one port as cluster.serve's engines do
        shared = os.environ.get("TINYCORO_BENCH_REUSE_PORT")
        listener = await tc.net.listen(HOST, int(shared or 0), backlog=BACKLOG,
                                       reuse_port=shared is not None)
        profile = os.environ.get("TINYCORO_BENCH_PROFILE")
        if profile:
            secs = float(os.environ.get("TINYCORO_BENCH_PROFILE_SECS", "5"))
            tc.spawn(profile_for(profile, secs))
        _ready(listener.port)
        while True:
            conn = await listener.accept()
            tc.spawn(handle(conn))

    tc.run(main(), contexts=contexts)


# -- asyncio / uvloop --------------------------------------------------------------------------
async def _streams_main() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, HOST, 0, backlog=BACKLOG)
    _ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


class EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


async def _protocol_main(protocol: Callable[[], asyncio.Protocol] = EchoProtocol) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(protocol, HOST, 0, backlog=BACKLOG)
    _ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in KINDS:
        raise SystemExit(f"usage: python -m benchmarks.echo_server {{{','.join(KINDS)}}} [CONTEXTS]")
    kind = argv[0]
    if kind == "tinycoro":
        serve_tinycoro(int(argv[1]) if len(argv) > 1 else 1)
    elif kind == "asyncio-streams":
        asyncio.run(_streams_main())
    elif kind == "asyncio-protocol":
        asyncio.run(_protocol_main())
    else:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        asyncio.run(_streams_main() if kind == "uvloop-streams" else _protocol_main())


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
