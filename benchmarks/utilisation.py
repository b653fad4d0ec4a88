"""Where an echo server's time goes: ``python -m benchmarks.profile --utilisation tinycoro
uvloop-protocol [--seconds S]``.

A server that spends less CPU per request than another and still serves fewer requests per
second is idle part of the time, or its requests wait somewhere. This runs each server
(alternating, ``REPS`` rounds, 64 B x 50 connections) and reports per run, from /proc, what
the CPU time alone does not say:

* ``util``: the server's user + system CPU over the wall time (every thread), and ``runq``:
  the time its threads were runnable but not running (schedstat), over wall. On a quiet
  2-core machine util + runq near 1 means the server is the bottleneck; well below, it
  sleeps while requests are on their way (a convoy between it and the client);
* ``sleeps/req``: voluntary context switches per request (blocking waits), ``preempt/req``:
  involuntary ones (the client woken on this CPU);
* the load generator's CPU per request and over wall (``os.wait4``'s rusage): a server's
  way of answering (one send per reply, or a batch per turn) changes the client's cost.

A kind may carry environment settings for its server, ``KIND:VAR=VALUE[+VAR=VALUE]``, so that
one run alternates variants of one server (``tinycoro:TINYCORO_RING_FLAGS=plain``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from . import echo_procs

REPS = 3
_OUT = re.compile(r"rps=(\S+) p50_us=(\S+) p99_us=(\S+)")
COLUMNS = ("req/s", "p50 us", "util", "runq", "CPU us/req", "sleeps/req", "preempt/req",
           "client CPU us/req", "client util")


def parse_kind(spec: str) -> tuple[str, dict[str, str]]:
    """``KIND:VAR=VALUE+VAR=VALUE`` -> (KIND, {VAR: VALUE}); ValueError on a setting
    without ``=``."""
    kind, _, settings = spec.partition(":")
    env = {}
    for item in filter(None, settings.split("+")):
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"{spec!r}: give settings as VAR=VALUE, joined by '+'")
        env[name] = value
    return kind, env


def thread_counters(pid: int) -> dict[str, int]:
    """Summed over the threads of *pid*: CPU ticks, schedstat run and wait ns, switches."""
    tot = dict(ticks=0, run_ns=0, wait_ns=0, vol=0, invol=0)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            sched = (task / "schedstat").read_text().split()
            status = (task / "status").read_text()
        except OSError:  # a thread that just ended
            continue
        tot["ticks"] += int(stat[11]) + int(stat[12])
        tot["run_ns"] += int(sched[0])
        tot["wait_ns"] += int(sched[1])
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                tot["vol"] += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                tot["invol"] += int(line.split()[1])
    return tot


def one_run(exe: Path, srv: echo_procs.EchoServer, seconds: float, conns: int = 50,
            size: int = 64) -> dict[str, float]:
    """One echo_load run against *srv*: the columns of :data:`COLUMNS`."""
    before = thread_counters(srv.proc.pid)
    t0 = time.perf_counter()
    load = subprocess.Popen([str(exe), "127.0.0.1", str(srv.port), str(conns), str(size),
                             f"{seconds:g}"], stdout=subprocess.PIPE, text=True)
    assert load.stdout is not None
    out = load.stdout.read()
    load.stdout.close()
    _, status, usage = os.wait4(load.pid, 0)
    load.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    wall = time.perf_counter() - t0
    after = thread_counters(srv.proc.pid)
    m = _OUT.search(out)
    if load.returncode or m is None:
        raise RuntimeError(f"echo_load failed ({load.returncode}): {out.strip()}")
    d = {k: after[k] - before[k] for k in after}
    n = float(m[1]) * seconds
    client = usage.ru_utime + usage.ru_stime
    cpu = d["ticks"] / os.sysconf("SC_CLK_TCK")
    return {
        "req/s": float(m[1]), "p50 us": float(m[2]), "util": cpu / wall,
        "runq": d["wait_ns"] / 1e9 / wall, "CPU us/req": cpu / n * 1e6,
        "sleeps/req": d["vol"] / n, "preempt/req": d["invol"] / n,
        "client CPU us/req": client / n * 1e6, "client util": client / seconds,
    }


def main(kinds: list[str], seconds: float, contexts: int = 1, reps: int = REPS) -> int:
    exe = echo_procs.build_echo_load()
    servers: dict[str, echo_procs.EchoServer] = {}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    try:
        for spec in kinds:
            kind, env = parse_kind(spec)
            servers[spec] = srv = echo_procs.EchoServer(kind, contexts, env=env)
            echo_procs.run_load(exe, srv.port, 50, 64, 0.5)  # warm-up: connections, caches
        for _ in range(reps):  # alternating: the machine's load falls on every server alike
            for spec in kinds:
                runs[spec].append(one_run(exe, servers[spec], seconds))
    finally:
        for srv in servers.values():
            srv.close()
    print(f"echo 64 B x 50 connections, {seconds:g} s runs, {reps} alternating; medians")
    print("| server | " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " --- |" * len(COLUMNS))
    for spec, xs in runs.items():
        med = [sorted(x[c] for x in xs)[len(xs) // 2] for c in COLUMNS]
        print(f"| {spec} | " + " | ".join(f"{v:.3g}" for v in med) + " |")
    return 0
