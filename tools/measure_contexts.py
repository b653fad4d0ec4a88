"""What a second context gives on this interpreter: CPU-bound coroutines and a pure echo on 1
and 2 contexts, alternating, medians (docs/design.md rule 15 was decided from this).

    python tools/measure_contexts.py [RUNS]

Prints, per workload and context count, the median wall time (or request rate) and the median
CPU time of the process (every thread: what the run cost, whatever else loads the machine).
Run it on the build in question (a free-threaded one with the GIL off, say) and say the load
average beside the numbers: on a loaded machine the wall times understate any speed-up.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tinycoro as tc  # noqa: E402

TASKS, CHUNKS, SPIN = 8, 50, 20_000


async def _spin() -> None:
    for _ in range(CHUNKS):
        n = 0
        for i in range(SPIN):
            n += i
        await tc.sleep(0)


async def _cpu_main() -> None:
    for t in [tc.spawn(_spin()) for _ in range(TASKS)]:
        await t


def cpu_bound(contexts: int) -> tuple[float, float]:
    """(wall, CPU) seconds of 8 coroutines of 50 chunks of a 20,000-iteration loop."""
    w0, c0 = time.perf_counter(), time.process_time()
    tc.run(_cpu_main(), contexts=contexts)
    return time.perf_counter() - w0, time.process_time() - c0


def echo(contexts: int, exe: Path, seconds: float = 2.0) -> tuple[float, float]:
    """(requests/s, server CPU us per request) of the tinycoro echo server, 50 connections
    of 64 B requests from the repository's C load generator."""
    from benchmarks import echo_procs

    server = echo_procs.EchoServer("tinycoro", contexts)
    try:
        s = echo_procs.run_load(exe, server.port, 50, 64, seconds, server_pid=server.proc.pid)
    finally:
        server.close()
    return s.value, sum(s.cpu_us)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(f"{sys.version.split()[0]} GIL {'on' if gil else 'off'}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {runs} runs alternating")
    from benchmarks import echo_procs

    exe = echo_procs.build_echo_load()
    got: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(runs):
        for n in (1, 2):
            got.setdefault(("cpu", n), []).append(cpu_bound(n))
        for n in (1, 2):
            got.setdefault(("echo", n), []).append(echo(n, exe))
    for (what, n), samples in got.items():
        a = statistics.median(s[0] for s in samples)
        b = statistics.median(s[1] for s in samples)
        if what == "cpu":
            print(f"cpu-bound {n} ctx: wall {a:.3f} s  CPU {b:.3f} s  (walls {[round(s[0], 3) for s in samples]})")
        else:
            print(f"echo      {n} ctx: {a:,.0f} req/s  server CPU {b:.1f} us/req  (rates {[round(s[0]) for s in samples]})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
