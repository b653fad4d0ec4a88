"""1. Task switch: ``tc.yield_now()`` vs ``asyncio.sleep(0)`` on asyncio and uvloop.

Two cases: a ping-pong of two tasks that yield to each other, and many tasks that each yield a
few times (the reference workload, "1000 tasks x 100"). The rate is yields per second, timed inside
the running loop (loop creation and teardown are not counted, on either side).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack

import tinycoro as tc

from .config import Config
from .harness import Case, Ratio, Sample, Series
from .peers import ASYNCIO, UVLOOP, missing, run_on, run_tc

NAME = "switch"
WORKLOAD = "task switch"


async def _tc_yielder(n: int) -> None:
    y = tc.yield_now
    for _ in range(n):
        await y()


async def _tc_main(tasks: int, yields: int) -> Sample:
    t0 = time.perf_counter()
    spawned = [tc.spawn(_tc_yielder(yields)) for _ in range(tasks)]
    for t in spawned:
        await t
    return Sample(tasks * yields / (time.perf_counter() - t0))


async def _aio_yielder(n: int) -> None:
    s = asyncio.sleep
    for _ in range(n):
        await s(0)


async def _aio_main(tasks: int, yields: int) -> Sample:
    t0 = time.perf_counter()
    await asyncio.gather(*[asyncio.create_task(_aio_yielder(yields)) for _ in range(tasks)])
    return Sample(tasks * yields / (time.perf_counter() - t0))


def _case(cfg: Config, label: str, tasks: int, yields: int) -> Case:
    ctx = cfg.contexts
    return Case(
        WORKLOAD,
        label,
        "yields/s",
        [
            Series("tinycoro", lambda: run_tc(_tc_main(tasks, yields), ctx)),
            Series("asyncio", lambda: run_on(ASYNCIO, _aio_main(tasks, yields))),
            Series("uvloop", lambda: run_on(UVLOOP, _aio_main(tasks, yields)), skip=missing("uvloop")),
        ],
        [Ratio("tinycoro", "asyncio", 1.0), Ratio("tinycoro", "uvloop", 2.0)],  # the latest targets
    )


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    return [
        _case(cfg, "ping-pong, 2 tasks", 2, cfg.pingpong_yields),
        _case(cfg, f"{cfg.many_tasks} tasks x {cfg.many_yields}", cfg.many_tasks, cfg.many_yields),
    ]
