"""System calls per echo request, counted by strace, for tinycoro's server and the C ones.

``python -m benchmarks.profile --syscalls tinycoro c-uring [--seconds S]`` starts each echo
server, warms it up with echo_load, attaches ``strace -f -y`` to every thread of it, drives it
for *S* seconds and detaches, then divides the calls made by the requests served. ``-y`` names
each descriptor's kind, so reads and writes on an eventfd (one context waking another's) are
told apart from reads and writes of anything else, which ``strace -c`` cannot do.

The counts are what a server does per request, not how fast: under strace every system call
stops the server twice, so it serves a fraction of its usual rate, and a server that batches
(one ``io_uring_enter`` for every connection ready in a turn) finds more ready per turn than
it would at full speed. Both servers of a comparison are measured alike, one after the other.
"""

from __future__ import annotations

import collections
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import w_echo

# The columns of the comparison: the calls an echo server's hot path is made of.
COLUMNS = (
    "io_uring_enter",
    "eventfd read",
    "eventfd write",
    "send",
    "recv",
    "epoll_wait",
    "other",
    "all",
)
_SEND = {"send", "sendto", "sendmsg", "sendmmsg"}
_RECV = {"recv", "recvfrom", "recvmsg", "recvmmsg"}
# "1234 name(" begins a call (complete, or "<unfinished ...>"); "<... name resumed>" lines
# continue one already counted
_CALL = re.compile(r"^\d+\s+(\w+)\((\d+<[^>]*>)?")


@dataclass
class SyscallCount:
    """The calls a server made while it served *requests* requests."""

    kind: str
    requests: float
    rps_traced: float  # echo_load's rate while the server was traced
    calls: collections.Counter[str] = field(default_factory=collections.Counter)

    def per_request(self, column: str) -> float:
        return self.calls[column] / self.requests if self.requests else 0.0


def classify(trace: str) -> collections.Counter[str]:
    """Calls by column (see :data:`COLUMNS`) in the text of an ``strace -f -y`` trace."""
    out: collections.Counter[str] = collections.Counter()
    for line in trace.splitlines():
        m = _CALL.match(line)
        if m is None:
            continue  # a resumed call, a signal, an exit
        name, fd = m[1], m[2] or ""
        if name in ("read", "write") and "eventfd" in fd:
            col = f"eventfd {name}"
        elif name in _SEND:
            col = "send"
        elif name in _RECV:
            col = "recv"
        elif name in ("io_uring_enter", "epoll_wait", "epoll_pwait"):
            col = "epoll_wait" if name.startswith("epoll") else name
        else:
            col = "other"
            out[f"other: {name}"] += 1  # named below the table
        out[col] += 1
        out["all"] += 1
    return out


def _attach(strace: str, pid: int, out: str, timeout: float = 30.0) -> subprocess.Popen[str]:
    """Start strace on every thread of *pid* and return once it has attached to them (strace
    says "Process N attached with K threads" on its stderr when it has)."""
    proc = subprocess.Popen(
        [strace, "-f", "-y", "-o", out, "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    attached, deadline = False, time.monotonic() + timeout
    while not attached:
        left = deadline - time.monotonic()
        r, _, _ = select.select([proc.stderr], [], [], max(left, 0))
        line = proc.stderr.readline() if r else ""
        if not line:
            _detach(proc)
            raise RuntimeError(f"strace did not attach to {pid}: {line.strip() or 'timed out'}")
        attached = " attached" in line
    return proc


def _detach(proc: subprocess.Popen[str]) -> None:
    """Stop strace: on SIGINT it detaches from every thread and flushes its output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def count(kind: str, seconds: float = 2.0, conns: int = 50, size: int = 64) -> SyscallCount:
    """The system calls echo server *kind* (one context) makes while echo_load drives it for
    *seconds*. Raises RuntimeError when strace or the load generator is missing."""
    strace = shutil.which("strace")
    if strace is None:
        raise RuntimeError("strace not installed (apt-get install strace)")
    exe = w_echo.build_echo_load()
    srv = w_echo.EchoServer(kind, 1)
    try:
        w_echo.run_load(exe, srv.port, conns, size, 0.5)  # warm-up: connections, caches
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "trace")
            tracer = _attach(strace, srv.proc.pid, out)
            try:
                sample = w_echo.run_load(exe, srv.port, conns, size, seconds)
            finally:
                _detach(tracer)
            calls = classify(Path(out).read_text())
    finally:
        srv.close()
    return SyscallCount(kind, sample.value * seconds, sample.value, calls)


def table(counts: list[SyscallCount]) -> str:
    """A markdown table: one row per column of :data:`COLUMNS`, one column per server."""
    head = "| per request | " + " | ".join(c.kind for c in counts) + " |"
    sep = "| --- |" + " --- |" * len(counts)
    rows = [f"| {col} | " + " | ".join(f"{c.per_request(col):.3f}" for c in counts) + " |" for col in COLUMNS]
    rate = "| (req/s under strace) | " + " | ".join(f"{c.rps_traced:,.0f}" for c in counts) + " |"
    others = []
    for c in counts:
        named = sorted(((n, k[len("other: "):]) for k, n in c.calls.items() if k.startswith("other: ")), reverse=True)
        listed = ", ".join(f"{name} {n / c.requests:.4f}" for n, name in named[:6]) if c.requests else ""
        others.append(f"{c.kind}, other: {listed or 'none'}")
    return "\n".join([head, sep, *rows, rate, "", *others])


def main(kinds: list[str], seconds: float) -> int:
    counts = []
    for kind in kinds:
        try:
            counts.append(count(kind, seconds))
        except (RuntimeError, w_echo.CProgramMissing) as e:
            print(f"{kind}: {e}")
    if counts:
        print(f"system calls per echo request (64 B, 50 connections, {seconds:g} s under strace -f -y)")
        print(table(counts))
    return 0 if len(counts) == len(kinds) else 1
