"""5c. Bulk transfer over one loopback TCP connection, received with ``recv(1 MiB)``.

A blocking sender (a child process: :class:`_Sender` says why) writes the same bytes in every
series, so what differs is only the receiver: tinycoro's default receive path (the multishot recv; a ``recv(n)`` returns up to
*n* of what is queued), tinycoro's single recv (``TINYCORO_MULTISHOT=0``), and a blocking
socket read in a thread, the limit row (``sock.recv(1 MiB)`` in a loop: one copy into
a new bytes object per call, as a tinycoro recv returns one). Sizes: 4 GiB in a full run,
less in quick and tiny runs; the rate is MB/s of payload received. 4 GiB, not 1: at ~5 GB/s a
1 GiB sample lasted 0.2 s, and four quiet full runs of one day put tinycoro at 1.00x, 0.94x,
1.02x and 0.90x the blocking read (each series' samples spread 8-13 % within one run), while
the receiver's CPU per MiB stayed 1.25-1.37x the blocking read's in all four (1.25x in the
0.90x run): the rate is the sender's (neither receiver is busy 60 % of the wall time), and a
0.2 s sample is as long as one neighbour's burst or one unlucky placement of sender and
receiver on the two cores. The same bytes for every series, so no series gains by it. The
CPU column is this process's (the receiver's, every thread) user and system time per MiB over the transfer alone:
on a loaded machine the rate moves with the neighbours, the CPU per byte much less.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from contextlib import ExitStack

import tinycoro as tc

from .config import Config
from .harness import Case, Ratio, Sample, Series

NAME = "bulk"
WORKLOAD = "bulk transfer, one connection"
MIB = 1 << 20
TOTAL_MIB = {"full": 4096, "quick": 256, "tiny": 8}  # the module doc says why 4 GiB
CHUNK = MIB  # each send, and each recv's max_bytes
BLOCKING = "blocking socket"
SINGLE = "tinycoro single recv"
TARGET = 0.9  # tinycoro >= 0.9x blocking sockets in threads


_SEND = """
import os, socket, sys
port, total, chunk = map(int, sys.argv[1:4])
block = os.urandom(chunk)
with socket.create_connection(("127.0.0.1", port)) as s:
    sys.stdin.read(1)  # the receiver has accepted: go
    left = total
    while left:
        n = min(left, chunk)
        s.sendall(block[:n] if n < chunk else block)
        left -= n
"""


class _Sender:
    """A process that connects to *port* and sends *total* bytes in CHUNK sends once told to
    go, then closes. A process, not a thread of this one: a sender thread would compete with
    the receiver for this process's GIL, which a blocking ``recv`` releases in every call and
    an engine busy copying does not, so the rows would measure the GIL's switch interval."""

    def __init__(self, port: int, total: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SEND, str(port), str(total), str(CHUNK)],
                                     stdin=subprocess.PIPE)

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"g")
        self.proc.stdin.close()

    def join(self) -> None:
        self.proc.wait(120)


def _cpu_per_mib(start: resource.struct_rusage, total: int) -> tuple[float, float]:
    """The process's (user, system) CPU since *start*, in us per MiB of *total*. getrusage, not
    os.times: its total is the scheduler's exact runtime (os.times counts 10 ms ticks, 39 us per
    MiB of a quick run's 256 MiB), though the user/system split is still apportioned by ticks."""
    end = resource.getrusage(resource.RUSAGE_SELF)
    mib = total / MIB
    return ((end.ru_utime - start.ru_utime) / mib * 1e6, (end.ru_stime - start.ru_stime) / mib * 1e6)


async def _tc_receive(total: int) -> tuple[float, tuple[float, float]]:
    lst = await tc.net.listen("127.0.0.1", 0)
    sender = _Sender(lst.port, total)
    conn = await lst.accept()
    await lst.close()
    got = 0
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    sender.go()
    async with conn:
        recv = conn.recv
        while True:
            data = await recv(CHUNK)
            if not data:
                break
            got += len(data)
    elapsed = time.perf_counter() - t0
    used = _cpu_per_mib(cpu, total)
    sender.join()
    assert got == total, (got, total)
    return elapsed, used


def _tc(total: int, contexts: int, multishot: bool) -> Sample:
    # TINYCORO_MULTISHOT is read as each ring is created: set around this run's scheduler
    old = os.environ.get("TINYCORO_MULTISHOT")
    if not multishot:
        os.environ["TINYCORO_MULTISHOT"] = "0"
    try:
        elapsed, cpu = tc.run(_tc_receive(total), contexts=contexts)
    finally:
        if old is None:
            os.environ.pop("TINYCORO_MULTISHOT", None)
        else:
            os.environ["TINYCORO_MULTISHOT"] = old
    return Sample(total / elapsed / 1e6, cpu_us=cpu)


def _blocking(total: int) -> Sample:
    with socket.create_server(("127.0.0.1", 0)) as lst:
        sender = _Sender(lst.getsockname()[1], total)
        conn, _ = lst.accept()
    got = 0
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    sender.go()
    with conn:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            got += len(data)
    elapsed = time.perf_counter() - t0
    used = _cpu_per_mib(cpu, total)
    sender.join()
    assert got == total, (got, total)
    return Sample(total / elapsed / 1e6, cpu_us=used)


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    total = TOTAL_MIB.get(cfg.mode, TOTAL_MIB["full"]) * MIB
    ctx = cfg.contexts
    return [
        Case(
            WORKLOAD,
            f"{total // MIB:,} MiB, recv({CHUNK // MIB} MiB); CPU per MiB",
            "MB/s",
            [
                Series("tinycoro", lambda: _tc(total, ctx, True)),
                Series(SINGLE, lambda: _tc(total, ctx, False)),
                Series(BLOCKING, lambda: _blocking(total)),
            ],
            [Ratio("tinycoro", BLOCKING, TARGET), Ratio("tinycoro", SINGLE)],
        )
    ]
