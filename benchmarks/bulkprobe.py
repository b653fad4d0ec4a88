"""Where the bulk row's receiver CPU goes: tinycoro ``recv(1 MiB)`` against a blocking
``socket.recv(1 MiB)``, alternated, each sample a fresh process (so its getrusage and its
system-call counts are the receiver's transfer and start-up only).

``python -m benchmarks.bulkprobe --mib 256 --rounds 4 [--pause 0.0005] [--syscalls]``

Per MiB received it prints the receiver's CPU (user + system, getrusage: the scheduler's exact
runtime; the split is apportioned by ticks), its minor faults, its recv calls, and with
``--syscalls`` the counts of ``recvfrom``, ``io_uring_enter``, ``read`` and all system calls
(``perf stat`` tracepoints over the whole command: both processes' start-up is in them, the
same for both series, so compare differences). ``--pause S`` has the sender sleep S seconds
after each 1 MiB send: the receiver then finds the socket empty at every recv, which is what a
quiet machine's bulk row does most of the time (neither receiver is busy 60 % of its wall
time there) and what a loaded machine's rarely does (the receiver is the slower side).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from typing import Any

import tinycoro as tc

from . import w_bulk

MIB = w_bulk.MIB
CHUNK = w_bulk.CHUNK
TRACEPOINTS = ("syscalls:sys_enter_recvfrom", "syscalls:sys_enter_io_uring_enter",
               "syscalls:sys_enter_read", "raw_syscalls:sys_enter")


class _PausingSender(w_bulk._Sender):
    """The bulk row's sender, sleeping *pause* seconds after every send when *pause* > 0."""

    def __init__(self, port: int, total: int, pause: float) -> None:
        script = w_bulk._SEND
        if pause > 0:
            script = script.replace("import os,", "import time, os,").replace(
                "left -= n", f"left -= n; time.sleep({pause!r})")
        self.proc = subprocess.Popen([sys.executable, "-c", script, str(port), str(total), str(CHUNK)],
                                     stdin=subprocess.PIPE)


def _usage() -> tuple[float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


def _drain_blocking(total: int, pause: float) -> tuple[float, int, int]:
    with socket.create_server(("127.0.0.1", 0)) as lst:
        sender = _PausingSender(lst.getsockname()[1], total, pause)
        conn, _ = lst.accept()
    got = calls = 0
    start = _usage()
    sender.go()
    with conn:
        while True:
            data = conn.recv(CHUNK)
            calls += 1
            if not data:
                break
            got += len(data)
    end = _usage()
    sender.join()
    assert got == total, (got, total)
    return end[0] - start[0], end[1] - start[1], calls


async def _drain_tinycoro(total: int, pause: float) -> tuple[float, int, int]:
    lst = await tc.net.listen("127.0.0.1", 0)
    sender = _PausingSender(lst.port, total, pause)
    conn = await lst.accept()
    await lst.close()
    got = calls = 0
    start = _usage()
    sender.go()
    async with conn:
        recv = conn.recv
        while True:
            data = await recv(CHUNK)
            calls += 1
            if not data:
                break
            got += len(data)
    end = _usage()
    sender.join()
    assert got == total, (got, total)
    return end[0] - start[0], end[1] - start[1], calls


def _one(series: str, mib: int, pause: float) -> dict[str, float]:
    """One sample in this process: per MiB, CPU in us, minor faults, recv calls."""
    total = mib * MIB
    if series == "blocking":
        cpu, faults, calls = _drain_blocking(total, pause)
    else:
        cpu, faults, calls = tc.run(_drain_tinycoro(total, pause), contexts=1)
    return {"cpu_us": cpu / mib * 1e6, "faults": faults / mib, "recvs": calls / mib}


def _sample(series: str, mib: int, pause: float, syscalls: bool) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.bulkprobe", "--one", series, "--mib", str(mib),
           "--pause", str(pause)]
    counts: dict[str, float] = {}
    if syscalls:
        cmd = ["perf", "stat", "-x", ",", "-o", "/dev/stderr", "-e", ",".join(TRACEPOINTS), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    if syscalls:
        for line in proc.stderr.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] in TRACEPOINTS and fields[0].isdigit():
                name = fields[2].split("sys_enter_")[-1] if "sys_enter_" in fields[2] else "syscalls"
                counts[name] = int(fields[0]) / mib
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    result.update(counts)
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bulkprobe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.0, help="sender's sleep after each MiB (s)")
    ap.add_argument("--syscalls", action="store_true", help="count system calls with perf stat")
    ap.add_argument("--one", choices=("blocking", "tinycoro"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.one, args.mib, args.pause)))
        return
    if args.syscalls and shutil.which("perf") is None:
        ap.error("--syscalls needs perf")
    rows: dict[str, list[dict[str, Any]]] = {"blocking": [], "tinycoro": []}
    for r in range(args.rounds):
        for series in rows:
            s = _sample(series, args.mib, args.pause, args.syscalls)
            rows[series].append(s)
            print(f"round {r + 1} {series:9} " + " ".join(f"{k} {v:.2f}" for k, v in s.items()), flush=True)
    ratios = sorted(t["cpu_us"] / b["cpu_us"] for t, b in zip(rows["tinycoro"], rows["blocking"]))
    print(f"tinycoro / blocking CPU per MiB, rounds sorted: {', '.join(f'{x:.2f}' for x in ratios)} "
          f"(median {ratios[len(ratios) // 2]:.2f}); load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
