"""2. Spawn + join of many trivial tasks: ``tc.spawn`` + ``await task`` vs
``asyncio.create_task`` + ``asyncio.gather`` on asyncio and uvloop.

tinycoro has no gather in its public API yet, so its side joins each task with ``await``,
which is the more expensive of the two ways to join (one park per task still running).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack

import tinycoro as tc

from .config import Config
from .harness import Case, Ratio, Sample, Series
from .peers import ASYNCIO, UVLOOP, missing, run_on, run_tc

NAME = "spawn"
WORKLOAD = "spawn + join"


async def _trivial() -> int:
    return 1


async def _tc_main(n: int) -> Sample:
    t0 = time.perf_counter()
    spawn = tc.spawn
    tasks = [spawn(_trivial()) for _ in range(n)]
    total = 0
    for t in tasks:
        total += await t
    assert total == n
    return Sample(n / (time.perf_counter() - t0))


async def _aio_main(n: int) -> Sample:
    t0 = time.perf_counter()
    create = asyncio.create_task
    results = await asyncio.gather(*[create(_trivial()) for _ in range(n)])
    assert sum(results) == n
    return Sample(n / (time.perf_counter() - t0))


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    n, ctx = cfg.spawn_tasks, cfg.contexts
    return [
        Case(
            WORKLOAD,
            f"{n:,} trivial tasks",
            "tasks/s",
            [
                Series("tinycoro", lambda: run_tc(_tc_main(n), ctx)),
                Series("asyncio", lambda: run_on(ASYNCIO, _aio_main(n))),
                Series("uvloop", lambda: run_on(UVLOOP, _aio_main(n)), skip=missing("uvloop")),
            ],
            [Ratio("tinycoro", "asyncio", 1.0), Ratio("tinycoro", "uvloop", 1.5)]  # the latest targets
        )
    ]
