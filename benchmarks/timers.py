"""Many concurrent sleeps: tc.sleep against asyncio.sleep on asyncio and uvloop.

``python -m benchmarks.timers [--count 100000] [--longest 0.2] [--rounds 3] [--other PATH]``

Each task sleeps a random time in [0, longest) (one seed, the same delays for every
runtime), and the main task waits for all of them: wall time and the process's CPU time
from the first spawn to the last resumption (user and system time of every thread: on a
loaded machine the wall time mostly measures the other processes). Every measurement runs in a fresh process, and
the runtimes take turns round after round, so a load that comes and goes on the machine
falls on all of them alike. ``--other PATH`` (repeatable) adds the tinycoro of another source tree (an
older checkout, built in place) as one more runtime, to compare two versions in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def _delays(count: int, longest: float) -> list[float]:
    rng = random.Random(20261129)
    return [rng.uniform(0, longest) for _ in range(count)]


def _tinycoro(delays: list[float], contexts: int) -> tuple[float, float]:
    import tinycoro as tc

    async def main() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        tasks = [tc.spawn(tc.sleep(d)) for d in delays]
        for t in tasks:
            await t
        return time.perf_counter() - t0, time.process_time() - c0

    return tc.run(main(), contexts=contexts)


def _asyncio(delays: list[float], uvloop: bool) -> tuple[float, float]:
    import asyncio

    async def main() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*[asyncio.create_task(asyncio.sleep(d)) for d in delays])
        return time.perf_counter() - t0, time.process_time() - c0

    if uvloop:
        import uvloop as uv

        return uv.run(main())
    return asyncio.run(main())


def _one(runtime: str, count: int, longest: float, contexts: int) -> None:
    delays = _delays(count, longest)
    if runtime.startswith("tinycoro"):
        wall, cpu = _tinycoro(delays, contexts)
    else:
        wall, cpu = _asyncio(delays, uvloop=runtime == "uvloop")
    print(json.dumps({"wall": wall, "cpu": cpu}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.timers", description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--longest", type=float, default=0.2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--contexts", type=int, default=1, help="tinycoro's contexts (default: 1)")
    p.add_argument("--no-peers", action="store_true", help="tinycoro trees only: no asyncio, uvloop")
    p.add_argument("--other", action="append", default=[], metavar="PATH",
                   help="source tree of another tinycoro to compare (built in place); repeatable")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        _one(args.one, args.count, args.longest, args.contexts)
        return 0
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runtimes = [("tinycoro", here)] + ([] if args.no_peers else [("asyncio", here), ("uvloop", here)])
    for i, other in enumerate(args.other, 1):
        runtimes.insert(i, (f"tinycoro ({os.path.basename(os.path.abspath(other))})", os.path.abspath(other)))
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in runtimes}
    for _ in range(args.rounds):
        for name, tree in runtimes:
            env = dict(os.environ, PYTHONPATH=tree)
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.timers", "--one", name.split()[0],
                 "--count", str(args.count), "--longest", str(args.longest),
                 "--contexts", str(args.contexts)],
                cwd=here, env=env, capture_output=True, text=True, check=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            results[name].append((r["wall"], r["cpu"]))
    print(f"{args.count} concurrent sleeps of 0-{args.longest * 1000:.0f} ms, {args.rounds} rounds "
          f"(alternating, a fresh process each), tinycoro on {args.contexts} context(s)")
    for name, rs in results.items():
        walls, cpus = [w for w, _ in rs], [c for _, c in rs]
        print(f"  {name:18} wall {min(walls):.2f}-{max(walls):.2f} s (median {statistics.median(walls):.2f})"
              f"   cpu {min(cpus):.2f}-{max(cpus):.2f} s (median {statistics.median(cpus):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
