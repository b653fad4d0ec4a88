"""Where an echo server's threads wait for the GIL, by what they were doing before they asked.

``python -m benchmarks.profile --gilwait [--contexts 2] [--seconds 2]`` starts the tinycoro
echo server, drives it with echo_load and records, with ``perf`` (root: it adds uprobes), each
call of the interpreter's ``take_gil`` (its entry and its return) in the server's threads,
their system-call exits and their scheduler switches. Each wait is put under the call the
thread came back from before it asked:

* ``io_uring_enter``: a submit that released the GIL (a peer context was awake), or a sleep
  that waits in the ring;
* ``read`` / ``ppoll``: the sleep point (``wakeword.wait``), woken;
* ``sched_yield``: a hand-over's end (the GIL given to a peer, now wanted back) or the sleep
  point's one yield (``Engine._peer_awake``);
* ``eval loop``: no system call since the thread last had the GIL: the interpreter dropped it
  on a peer's request after the switch interval.

and split into the time the thread was ready to run but had no CPU (preempted, or woken by
another thread of the server and not yet running) and the rest, the wait for the holder to let
go. That split is what a loaded machine moves; the waits that last a switch interval are the
GIL's own. Two contexts' tail latency (the echo's p99) is made of the long waits here.

The uprobes cost each ``take_gil`` a trap or two, so the server runs slower while recorded;
compare old and new code by alternating runs of this tool, not by its request rate.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import echo_procs

GROUP = "tinycoro_gil"  # the uprobes' event group, removed again after each recording
# x86-64 system call numbers of the calls a context makes around its GIL-free sections
_NAMES = {0: "read", 7: "poll", 23: "select", 24: "sched_yield", 202: "futex", 271: "ppoll",
          426: "io_uring_enter"}
_URETPROBE = 335  # the kernel's own call that returns from a uretprobe: not the thread's
_EVENT = re.compile(r"^\s*\S+\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
_SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==>")
_WAKEUP = re.compile(r"\bpid=(\d+)\b")
EVAL_LOOP = "eval loop (switch interval)"
LONG_US = 1000.0  # a wait this long or longer is counted apart


@dataclass
class Waits:
    """GIL waits by cause: each a (total, of which without a CPU) pair of microseconds."""

    requests: float = 0.0
    rps: float = 0.0
    p99_us: float = 0.0
    by_cause: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: collections.defaultdict(list))


def parse(script: str, waits: Waits) -> None:
    """Fill *waits* from the text of ``perf script`` over the events :func:`record` asks for."""
    last: dict[int, str] = {}  # per thread: the call it last came back from, or "gil"
    asked: dict[int, tuple[float, str]] = {}  # per thread in take_gil: since when, and why
    off: dict[int, tuple[float, str]] = {}  # per thread switched out: since when, its state
    woken: dict[int, float] = {}  # per thread: when a thread of the server woke it
    nocpu: dict[int, float] = collections.defaultdict(float)  # inside the current wait
    for line in script.splitlines():
        m = _EVENT.match(line)
        if m is None:
            continue
        tid, t, name, rest = int(m[1]), float(m[2]) * 1e6, m[3], m[4]
        if name == "sched:sched_wakeup":
            w = _WAKEUP.search(rest)
            if w is not None:
                woken[int(w[1])] = t
            continue
        if name == "sched:sched_switch":
            s = _SWITCH.search(rest)
            if s is not None and int(s[1]) == tid:
                off[tid] = (t, s[2])
                woken.pop(tid, None)
            continue
        # any other event: the thread runs now
        if tid in off:
            since, state = off.pop(tid)
            ready = since if state.startswith("R") else woken.pop(tid, None)
            if ready is not None and tid in asked:
                nocpu[tid] += t - max(ready, since)
        if name == "raw_syscalls:sys_exit":
            nr = int(rest.split()[1])
            # a futex inside take_gil is the wait itself, not what the thread came back from
            if nr not in (_URETPROBE, -1) and tid not in asked:
                last[tid] = _NAMES.get(nr, f"syscall {nr}")
        elif name == f"{GROUP}:take":
            cause = last.get(tid, "?")
            asked[tid] = (t, EVAL_LOOP if cause == "gil" else cause)
            nocpu[tid] = 0.0
            last[tid] = "gil"
        elif name.startswith(f"{GROUP}:taken") and tid in asked:
            t0, cause = asked.pop(tid)
            waits.by_cause[cause].append((t - t0, min(nocpu.pop(tid, 0.0), t - t0)))
            last[tid] = "gil"


def _library(pid: int) -> str:
    """The file that holds the interpreter of process *pid*: its libpython, else itself."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1]
        if "libpython" in path and path.startswith("/"):
            return path
    return os.readlink(f"/proc/{pid}/exe")


def _perf(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def record(contexts: int = 2, seconds: float = 2.0, conns: int = 50, size: int = 64) -> Waits:
    """Record one run of the echo server on *contexts* contexts; RuntimeError if perf, its
    uprobes or the load generator are missing."""
    perf = shutil.which("perf")
    if perf is None:
        raise RuntimeError("perf not installed (apt-get install linux-perf)")
    exe = echo_procs.build_echo_load()
    srv = echo_procs.EchoServer("tinycoro", contexts)
    waits = Waits()
    try:
        echo_procs.run_load(exe, srv.port, conns, size, 0.5)  # warm-up: connections, caches
        lib = _library(srv.proc.pid)
        _perf(perf, "probe", "-q", "-d", f"{GROUP}:*")  # a run that was killed left them
        added = _perf(perf, "probe", "-q", "-x", lib, "-a", f"{GROUP}:take=take_gil",
                      "-a", f"{GROUP}:taken=take_gil%return")
        if added.returncode != 0:
            raise RuntimeError(f"perf probe on take_gil in {lib} failed: {added.stderr.strip()[:300]}")
        try:
            with tempfile.TemporaryDirectory() as d:
                data = os.path.join(d, "perf.data")
                # the return probe's name: perf adds "__return" to it (6.x), or not
                names = re.findall(rf"^\s*({GROUP}:\S+)", _perf(perf, "probe", "-l").stdout, re.M)
                events = sorted(names) + ["raw_syscalls:sys_exit", "sched:sched_switch",
                                          "sched:sched_wakeup"]
                cmd = [perf, "record", "-q", "-o", data, "-p", str(srv.proc.pid)]
                for ev in events:
                    cmd += ["-e", ev]
                rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                time.sleep(0.5)  # attached to every thread before the measured load starts
                try:
                    sample = echo_procs.run_load(exe, srv.port, conns, size, seconds)
                finally:
                    rec.send_signal(signal.SIGINT)
                    _, err = rec.communicate(timeout=120)
                if rec.returncode not in (0, -signal.SIGINT):
                    raise RuntimeError(f"perf record failed: {err.strip()[:300]}")
                script = _perf(perf, "script", "-i", data).stdout
        finally:
            _perf(perf, "probe", "-q", "-d", f"{GROUP}:*")
    finally:
        srv.close()
    waits.requests, waits.rps, waits.p99_us = sample.value * seconds, sample.value, sample.p99_us or 0.0
    parse(script, waits)
    return waits


def table(waits: Waits) -> str:
    """A markdown table: one row per cause, the longest total first."""
    rows = ["| came back from | waits per 1k req | p50 us | p99 us | max us | "
            f">= {LONG_US / 1000:g} ms | total ms | of which no CPU ms |",
            "| --- |" + " ---: |" * 7]
    for cause, ws in sorted(waits.by_cause.items(), key=lambda kv: -sum(w for w, _ in kv[1])):
        us = sorted(w for w, _ in ws)
        n = len(us)
        rows.append(
            f"| {cause} | {n / waits.requests * 1000 if waits.requests else 0:.2f} "
            f"| {us[n // 2]:.0f} | {us[min(n - 1, n * 99 // 100)]:.0f} | {us[-1]:.0f} "
            f"| {sum(u >= LONG_US for u in us)} | {sum(us) / 1000:.1f} "
            f"| {sum(c for _, c in ws) / 1000:.1f} |")
    return "\n".join(rows)


def main(contexts: int, seconds: float) -> int:
    try:
        waits = record(contexts, seconds)
    except RuntimeError as e:  # echo_procs.CProgramMissing included
        print(f"gilwait: {e}")
        return 1
    print(f"GIL waits of the tinycoro echo server, {contexts} contexts, 64 B x 50 connections, "
          f"{seconds:g} s under perf: {waits.rps:,.0f} req/s, p99 {waits.p99_us:,.0f} us")
    print(table(waits))
    if sum(len(w) for w in waits.by_cause.values()) < waits.requests / 1000:
        # seen once at load 30: perf attached to the threads after the load had ended
        print("(fewer than one wait per 1,000 requests: perf attached late; run it again)")
    return 0
