"""System calls per echo request, counted by strace or perf, for tinycoro's server and the C ones.

``python -m benchmarks.profile --syscalls tinycoro c-uring [--seconds S] [--tool perf]``
starts each echo server, warms it up with echo_load, attaches the tool to every thread of it,
drives it for *S* seconds and detaches, then divides the calls made by the requests served.

* ``strace`` (the default): ``strace -f -y``, every call with its descriptor's kind, so reads
  and writes on an eventfd (one context waking another) are told apart from reads and writes
  of anything else, which ``strace -c`` cannot do. Every system call stops the server twice, so
  it serves a fraction of its usual rate, and a server that batches (one ``io_uring_enter``
  for all the completions of a turn) batches differently than at full speed.
* ``perf``: ``perf stat`` on the syscall tracepoints, counted in the kernel without stopping
  the server, so the batching is that of full speed; reads and writes on an eventfd are told
  apart by a filter on the descriptors that are eventfds when the count starts.

Both servers of a comparison are measured alike, one after the other.
"""

from __future__ import annotations

import collections
import math
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

from . import echo_procs
from .config import C_SERVERS

# The columns of the comparison: the calls an echo server's hot path is made of.
COLUMNS = (
    "io_uring_enter",
    "io_uring_enter that waits",  # of the above: min_complete > 0 (a sleep, or a submit and wait)
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
_ENTER_WAIT = re.compile(r"^\d+\s+io_uring_enter\(\d+<[^>]*>, \d+, [1-9]")


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
            if _ENTER_WAIT.match(line):
                out["io_uring_enter that waits"] += 1
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
    """Stop strace or perf: on SIGINT each detaches from every thread and writes its output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


# perf's tracepoints per column, a filter after the name where one is needed; "all" is every call
_PERF_EVENTS = {
    "io_uring_enter": ["syscalls:sys_enter_io_uring_enter"],
    "io_uring_enter that waits": ["syscalls:sys_enter_io_uring_enter min_complete > 0"],
    "send": [f"syscalls:sys_enter_{n}" for n in ("sendto", "sendmsg", "sendmmsg")],
    "recv": [f"syscalls:sys_enter_{n}" for n in ("recvfrom", "recvmsg", "recvmmsg")],
    "epoll_wait": ["syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait"],
    "all": ["raw_syscalls:sys_enter"],
}


def _eventfds(pid: int) -> list[int]:
    """The descriptors of process *pid* that are eventfds."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[eventfd]":
                out.append(int(fd))
        except OSError:
            continue  # closed meanwhile
    return out


def _perf_start(perf: str, pid: int, out: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``perf stat`` on the syscall tracepoints of every thread of *pid*; return it and
    the column of each event it will report, in order (the eventfd reads and writes are the
    read and write tracepoints filtered on the descriptors that are eventfds)."""
    cmd = [perf, "stat", "-x", ",", "-o", out, "-p", str(pid)]
    columns: list[str] = []  # perf reports the events in the order given, one line each
    for col, events in _PERF_EVENTS.items():
        for ev in events:
            name, _, cond = ev.partition(" ")
            cmd += ["-e", name] + (["--filter", cond] if cond else [])
            columns.append(col)
    efds = _eventfds(pid)
    if efds:
        fd_filter = " || ".join(f"fd == {fd}" for fd in efds)
        for name in ("read", "write"):
            cmd += ["-e", f"syscalls:sys_enter_{name}", "--filter", fd_filter]
            columns.append(f"eventfd {name}")
    # perf starts with its counters off (-D -1) and turns them on when told through its control
    # fifo, acknowledging on the other: counting has begun when the acknowledgement arrives.
    # Both fifos are opened read-write here, which never blocks, whether perf is up or not.
    ctl_path, ack_path = out + ".ctl", out + ".ack"
    os.mkfifo(ctl_path)
    os.mkfifo(ack_path)
    ctl, ack = os.open(ctl_path, os.O_RDWR), os.open(ack_path, os.O_RDWR)
    try:
        cmd[2:2] = ["-D", "-1", "--control", f"fifo:{ctl_path},{ack_path}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        os.write(ctl, b"enable\n")
        r, _, _ = select.select([ack], [], [], 30)
        if not r or not os.read(ack, 16).startswith(b"ack"):
            _detach(proc)
            raise RuntimeError("perf stat did not start counting (no tracepoints here?)")
    finally:
        os.close(ctl)
        os.close(ack)
    return proc, columns


def _perf_counts(out: str, columns: list[str]) -> collections.Counter[str]:
    """Calls by column from ``perf stat -x ,`` output: one ``count,unit,event,...`` line per
    event, in the order of *columns* (a count perf could not take reads ``<not counted>``)."""
    calls: collections.Counter[str] = collections.Counter()
    lines = [ln for ln in Path(out).read_text().splitlines() if ln.count(",") >= 2 and not ln.startswith("#")]
    for col, line in zip(columns, lines):
        value = line.split(",")[0].strip()
        calls[col] += int(value) if value.isdigit() else 0
    named = sum(calls[c] for c in COLUMNS if c not in ("all", "io_uring_enter that waits"))
    calls["other"] = max(calls["all"] - named, 0)
    return calls


def count(
    kind: str, seconds: float = 2.0, conns: int = 50, size: int = 64, contexts: int = 1, tool: str = "strace"
) -> SyscallCount:
    """The system calls echo server *kind* (on *contexts* contexts, where it has them) makes
    while echo_load drives it for *seconds*, counted by *tool* (``strace`` or ``perf``).
    Raises RuntimeError when the tool or the load generator is missing."""
    path = shutil.which(tool)
    if tool not in ("strace", "perf") or path is None:
        raise RuntimeError(f"{tool} not installed (apt-get install {tool})")
    exe = echo_procs.build_echo_load()
    srv = echo_procs.EchoServer(kind, contexts)
    try:
        echo_procs.run_load(exe, srv.port, conns, size, 0.5)  # warm-up: connections, caches
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "trace")
            if tool == "perf":
                tracer, column = _perf_start(path, srv.proc.pid, out)
            else:
                tracer = _attach(path, srv.proc.pid, out)
            try:
                sample = echo_procs.run_load(exe, srv.port, conns, size, seconds)
            finally:
                _detach(tracer)
            calls = _perf_counts(out, column) if tool == "perf" else classify(Path(out).read_text())
    finally:
        srv.close()
    label = kind if contexts == 1 or kind in C_SERVERS else f"{kind}, {contexts} contexts"
    # echo_load's window ends at the first event past *seconds*, so its rate times *seconds* is
    # at most the round trips it counted; floored, the rate's last printed digit cannot make it
    # one more than that (a count per request of 0.99994 where every request made its send).
    return SyscallCount(label, math.floor(sample.value * seconds), sample.value, calls)


def table(counts: list[SyscallCount]) -> str:
    """A markdown table: one row per column of :data:`COLUMNS`, one column per server."""
    head = "| per request | " + " | ".join(c.kind for c in counts) + " |"
    sep = "| --- |" + " --- |" * len(counts)
    rows = [f"| {col} | " + " | ".join(f"{c.per_request(col):.3f}" for c in counts) + " |" for col in COLUMNS]
    rate = "| (req/s while counted) | " + " | ".join(f"{c.rps_traced:,.0f}" for c in counts) + " |"
    others = []
    for c in counts:
        named = sorted(((n, k[len("other: "):]) for k, n in c.calls.items() if k.startswith("other: ")), reverse=True)
        if named and c.requests:  # strace names each call; perf counts only the columns
            others.append(f"{c.kind}, other: " + ", ".join(f"{name} {n / c.requests:.4f}" for n, name in named[:6]))
    return "\n".join([head, sep, *rows, rate] + (["", *others] if others else []))


def main(kinds: list[str], seconds: float, contexts: int = 1, tool: str = "strace") -> int:
    counts = []
    for kind in kinds:
        try:
            counts.append(count(kind, seconds, contexts=contexts, tool=tool))
        except (RuntimeError, echo_procs.CProgramMissing) as e:
            print(f"{kind}: {e}")
    if counts:
        how = "perf stat, syscall tracepoints" if tool == "perf" else "strace -f -y"
        print(f"system calls per echo request (64 B, 50 connections, {seconds:g} s, {how})")
        print(table(counts))
    return 0 if len(counts) == len(kinds) else 1
