"""Instructions per await of the trap layer's own awaitables, counted by callgrind:
``python -m benchmarks.trapcost [NAME ...]``.

Each workload is one task awaiting the same thing in a loop on one context, under callgrind: a
warm-up, then loops of two lengths, with a dump of the counts after each; the difference of
the two loops' counts, divided by the difference of their lengths, is the cost of one await
with the loop's start and end cancelled out (as ``--pingpong`` does with two runs). The loops
are interpreted, the same before and after a change to the compiled awaitables:

* ``budget``: ``await consume_budget()`` (rule 16's gate; every ``INLINE_BUDGET``-th yields);
* ``budget-yield``: the gate with the step's budget spent first, so every await yields once;
* ``yield``: ``await yield_now()`` with the same budget store, the floor ``budget-yield``
  pays besides the gate's own work;
* ``ready``: ``await Ready(value)`` (a result known at once, through the gate);
* ``op``: ``await Op(prep_nop)``, a ring round trip with an int result;
* ``write``: ``await f.write_at(64 bytes, 0)`` on a temporary file (a ``RingWrite``);
* ``ring-read``: ``await f.read_at(64, 0)`` through the ring (``TINYCORO_FILE_READS=ring``,
  a ``RingRead``);
* ``mutex``: an uncontended ``await m.lock(); m.unlock()`` (the gate's yield every
  ``INLINE_BUDGET``-th lock);
* ``spawn-join``: ``await tc.spawn(coroutine that returns at once)``.

Independent of the machine's load, so it compares runs on a busy machine and across Python
versions. Not part of the timed harness: no peer runs these.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any, Awaitable, Callable

from .instructions import CallgrindFailed, callgrind_totals


def _workloads(path: str) -> dict[str, Callable[[int], Awaitable[Any]]]:
    import tinycoro as tc
    from tinycoro.core.local import thread_state as _local
    from tinycoro.core.traps import Op, Ready, consume_budget, yield_now
    from tinycoro.io import FILE_READS_ENV
    from tinycoro.uring import prep_nop

    from .instructions import lock_unlock as mutex

    async def budget(n: int) -> None:
        for _ in range(n):
            await consume_budget()

    async def budget_yield(n: int) -> None:
        engine = _local.engine
        for _ in range(n):
            engine.inline_left = 0
            await consume_budget()

    async def plain_yield(n: int) -> None:
        engine = _local.engine
        for _ in range(n):
            engine.inline_left = 0
            await yield_now()

    async def ready(n: int) -> None:
        r = Ready(7)
        for _ in range(n):
            await r

    async def op(n: int) -> None:
        for _ in range(n):
            await Op(prep_nop)

    async def write(n: int) -> None:
        f = await tc.io.open(path, "r+b")
        data = b"x" * 64
        for _ in range(n):
            await f.write_at(data, 0)
        await f.close()

    async def ring_read(n: int) -> None:
        os.environ[FILE_READS_ENV] = "ring"  # read at open: this file's reads take the ring
        try:
            f = await tc.io.open(path, "rb")
        finally:
            del os.environ[FILE_READS_ENV]
        for _ in range(n):
            await f.read_at(64, 0)
        await f.close()

    async def nothing() -> None:
        pass

    async def spawn_join(n: int) -> None:
        for _ in range(n):
            await tc.spawn(nothing())

    return {
        "budget": budget, "budget-yield": budget_yield, "yield": plain_yield, "ready": ready,
        "op": op, "write": write, "ring-read": ring_read, "mutex": mutex, "spawn-join": spawn_join,
    }


NAMES = ("budget", "budget-yield", "yield", "ready", "op", "write", "ring-read", "mutex", "spawn-join")
# callgrind dumps its counts as the child enters this C function (os.getppid), which nothing
# else calls: one dump after each phase of each workload.
_MARK = "os_getppid"


def run(names: list[str], lengths: tuple[int, int], path: str) -> None:
    """The child: for each of *names*, a warm-up, then a loop of each of *lengths*, with a
    callgrind dump after each, all in one task on one context."""
    import tinycoro as tc

    loops = _workloads(path)

    async def main() -> None:
        for name in names:
            await loops[name](100)  # warm-up: imports, caches, the file opened once
            os.getppid()
            for n in lengths:
                await loops[name](n)
                os.getppid()

    tc.run(main(), contexts=1)


def count(names: list[str], lengths: tuple[int, int] = (2000, 10000)) -> dict[str, float] | None:
    """Instructions per await of each of *names*: the difference of its two loops' counts,
    divided by the difference of their lengths (one callgrind run for all)."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "data")
        with open(path, "wb") as f:
            f.write(b"y" * 4096)
        child = ["benchmarks.trapcost", "--run", ",".join(names), f"{lengths[0]},{lengths[1]}", path]
        try:
            totals = callgrind_totals(child, f"--dump-before={_MARK}", timeout=1800)
        except CallgrindFailed as e:
            raise SystemExit(str(e)) from None
    # dump k (from 1) ends the part before the k-th mark: per workload, the warm-up, then
    # one per length
    out_counts = {}
    for i, name in enumerate(names):
        _, first, second = totals[3 * i:3 * i + 3]
        out_counts[name] = (second - first) / (lengths[1] - lengths[0])
    return out_counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.trapcost", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=list(NAMES), help=f"workloads ({', '.join(NAMES)})")
    ap.add_argument("--run", nargs=3, metavar=("NAMES", "LENGTHS", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        a, b = args.run[1].split(",")
        run(args.run[0].split(","), (int(a), int(b)), args.run[2])
        return 0
    import tinycoro as tc

    traps = sys.modules["tinycoro.core.traps"]
    print(f"Python {sys.version.split()[0]}, {'compiled' if tc.compiled.is_compiled(traps) else 'pure'}")
    counts = count(args.names)
    if counts is None:
        print("valgrind (callgrind) not installed")
        return 1
    for name, value in counts.items():
        print(f"{name:>13}: {value:,.0f} instructions per await")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
