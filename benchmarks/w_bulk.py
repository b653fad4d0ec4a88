"""5c. Bulk transfer over one loopback TCP connection, received with ``recv(1 MiB)``.

A blocking sender thread writes the same bytes in every series, so what differs is only the
receiver: tinycoro's default receive path (the multishot recv; a ``recv(n)`` returns up to
*n* of what is queued), tinycoro's single recv (``TINYCORO_MULTISHOT=0``), and a blocking
socket read in a second thread, the limit row (``sock.recv(1 MiB)`` in a loop: one copy into
a new bytes object per call, as a tinycoro recv returns one). Sizes: 1 GiB in a full run,
less in quick and tiny runs; the rate is MB/s of payload received.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import ExitStack

import tinycoro as tc

from .config import Config
from .harness import Case, Ratio, Sample, Series

NAME = "bulk"
WORKLOAD = "bulk transfer, one connection"
MIB = 1 << 20
TOTAL_MIB = {"full": 1024, "quick": 256, "tiny": 8}
CHUNK = MIB  # each send, and each recv's max_bytes
BLOCKING = "blocking sockets, 2 threads"
SINGLE = "tinycoro single recv"
TARGET = 0.9  # tinycoro >= 0.9x blocking sockets in threads


def _sender(port: int, total: int, ready: threading.Event) -> threading.Thread:
    """A thread that connects to *port* and sends *total* bytes in CHUNK sends, then closes."""

    def run() -> None:
        block = os.urandom(CHUNK)
        with socket.create_connection(("127.0.0.1", port)) as s:
            ready.wait(30)
            left = total
            while left:
                n = min(left, CHUNK)
                s.sendall(block[:n] if n < CHUNK else block)
                left -= n

    t = threading.Thread(target=run, name="bulk-sender", daemon=True)
    t.start()
    return t


async def _tc_receive(total: int) -> float:
    lst = await tc.net.listen("127.0.0.1", 0)
    ready = threading.Event()
    sender = _sender(lst.port, total, ready)
    conn = await lst.accept()
    await lst.close()
    got = 0
    t0 = time.perf_counter()
    ready.set()
    async with conn:
        recv = conn.recv
        while True:
            data = await recv(CHUNK)
            if not data:
                break
            got += len(data)
    elapsed = time.perf_counter() - t0
    sender.join(30)
    assert got == total, (got, total)
    return elapsed


def _tc(total: int, contexts: int, multishot: bool) -> Sample:
    # TINYCORO_MULTISHOT is read as each ring is created: set around this run's scheduler
    old = os.environ.get("TINYCORO_MULTISHOT")
    if not multishot:
        os.environ["TINYCORO_MULTISHOT"] = "0"
    try:
        elapsed = tc.run(_tc_receive(total), contexts=contexts)
    finally:
        if old is None:
            os.environ.pop("TINYCORO_MULTISHOT", None)
        else:
            os.environ["TINYCORO_MULTISHOT"] = old
    return Sample(total / elapsed / 1e6)


def _blocking(total: int) -> Sample:
    with socket.create_server(("127.0.0.1", 0)) as lst:
        ready = threading.Event()
        sender = _sender(lst.getsockname()[1], total, ready)
        conn, _ = lst.accept()
    got = 0
    t0 = time.perf_counter()
    ready.set()
    with conn:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            got += len(data)
    elapsed = time.perf_counter() - t0
    sender.join(30)
    assert got == total, (got, total)
    return Sample(total / elapsed / 1e6)


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    total = TOTAL_MIB.get(cfg.mode, TOTAL_MIB["full"]) * MIB
    ctx = cfg.contexts
    return [
        Case(
            WORKLOAD,
            f"{total // MIB:,} MiB, recv({CHUNK // MIB} MiB)",
            "MB/s",
            [
                Series("tinycoro", lambda: _tc(total, ctx, True)),
                Series(SINGLE, lambda: _tc(total, ctx, False)),
                Series(BLOCKING, lambda: _blocking(total)),
            ],
            [Ratio("tinycoro", BLOCKING, TARGET), Ratio("tinycoro", SINGLE)],
        )
    ]
