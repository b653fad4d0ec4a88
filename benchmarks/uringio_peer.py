"""The uringio side of the benchmarks, run by the uringio virtual environment's Python (>= 3.12).

uringio (PyPI) is an asyncio event loop in C on io_uring with its own socket and file objects
(its loop has no ``create_server``, so the echo server uses its sockets directly)::

    python -m benchmarks.uringio_peer echo                       # prints READY <port>, serves
    python -m benchmarks.uringio_peer file PATH OFFSETS INFLIGHT # prints rate=<reads/s>

OFFSETS is a file of native 8-byte integers (``array('q')``), the same offsets the other
file series read. Imports nothing from tinycoro, so it runs outside tinycoro's environment.
"""

from __future__ import annotations

import array
import asyncio
import socket
import sys
import time

import uringio

BLOCK = 4096


def _free_port() -> int:
    # uringio's sockets do not report the port they bound; take a free one first
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _echo() -> None:
    port = _free_port()
    lst = await uringio.prep_socket()
    await lst.bind("127.0.0.1", port)
    await lst.listen(1024)
    sys.stdout.write(f"READY {port}\n")
    sys.stdout.flush()

    async def handle(conn: "uringio.Socket") -> None:
        try:
            while True:
                data = await conn.recv(65536)
                if not data:
                    break
                view = memoryview(data)
                while view:
                    view = view[await conn.send(view):]
        except OSError:
            pass  # the load generator resets its connections when a run ends
        finally:
            await conn.close()

    tasks = set()
    while True:
        conn = await lst.accept()
        t = asyncio.ensure_future(handle(conn))
        tasks.add(t)
        t.add_done_callback(tasks.discard)


async def _file(path: str, offsets_path: str, inflight: int) -> float:
    offs = array.array("q")
    with open(offsets_path, "rb") as f:
        offs.frombytes(f.read())
    # one share per task, made before the clock, as tinycoro's (w_file.shares)
    parts = [offs[i::inflight].tolist() for i in range(inflight)]
    f = await uringio.open_file(path=path)

    async def reader(i: int) -> None:
        read = f.read
        for off in parts[i]:
            await read(size=BLOCK, offset=off)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*[reader(i) for i in range(inflight)])
        return len(offs) / (time.perf_counter() - t0)
    finally:
        await f.close()


def main(argv: list[str]) -> None:
    if argv[:1] == ["echo"]:
        asyncio.run(_echo(), loop_factory=uringio.UringioLoop)  # type: ignore[call-arg]  # 3.12+
    elif argv[:1] == ["file"] and len(argv) == 4:
        rate = asyncio.run(_file(argv[1], argv[2], int(argv[3])),  # type: ignore[call-arg]  # 3.12+
                           loop_factory=uringio.UringioLoop)
        print(f"rate={rate:.1f}")
    else:
        raise SystemExit("usage: python -m benchmarks.uringio_peer {echo | file PATH OFFSETS INFLIGHT}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
