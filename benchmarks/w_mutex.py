"""3. Mutex: uncontended and 100-task contended lock/unlock, ``tc.Mutex`` vs ``asyncio.Lock``.

Uncontended: one task locks and unlocks in a loop. Contended: 100 tasks each take the lock,
yield once while holding it (so the other 99 queue up behind it), and release it; the rate is
lock acquisitions per second, yields included on both sides.

Written against the API of docs/design.md (``await m.lock(); m.unlock()``, ``async with m``). While
``tc.Mutex`` does not exist yet the tinycoro side is skipped with that reason.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack

import tinycoro as tc

from .config import Config
from .harness import Case, Ratio, Sample, Series
from .peers import ASYNCIO, run_on, run_tc

NAME = "mutex"
WORKLOAD = "mutex"


def mutex_missing() -> str | None:
    if not hasattr(tc, "Mutex"):
        return "tc.Mutex does not exist yet (tinycoro/sync is being written)"
    return None


async def _tc_uncontended(n: int) -> Sample:
    m = tc.Mutex()
    t0 = time.perf_counter()
    for _ in range(n):
        await m.lock()
        m.unlock()
    return Sample(n / (time.perf_counter() - t0))


async def _tc_contended(tasks: int, iters: int) -> Sample:
    m = tc.Mutex()
    y = tc.yield_now

    async def worker() -> None:
        for _ in range(iters):
            async with m:
                await y()

    t0 = time.perf_counter()
    spawned = [tc.spawn(worker()) for _ in range(tasks)]
    for t in spawned:
        await t
    return Sample(tasks * iters / (time.perf_counter() - t0))


async def _aio_uncontended(n: int) -> Sample:
    lock = asyncio.Lock()
    t0 = time.perf_counter()
    for _ in range(n):
        await lock.acquire()
        lock.release()
    return Sample(n / (time.perf_counter() - t0))


async def _aio_contended(tasks: int, iters: int) -> Sample:
    lock = asyncio.Lock()
    s = asyncio.sleep

    async def worker() -> None:
        for _ in range(iters):
            async with lock:
                await s(0)

    t0 = time.perf_counter()
    await asyncio.gather(*[asyncio.create_task(worker()) for _ in range(tasks)])
    return Sample(tasks * iters / (time.perf_counter() - t0))


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    ctx, n, k, iters = cfg.contexts, cfg.mutex_uncontended, cfg.mutex_tasks, cfg.mutex_iters
    skip = mutex_missing()
    return [
        Case(
            WORKLOAD,
            "uncontended, 1 task",
            "lock+unlock/s",
            [
                Series("tinycoro", lambda: run_tc(_tc_uncontended(n), ctx), skip=skip),
                Series("asyncio.Lock", lambda: run_on(ASYNCIO, _aio_uncontended(n))),
            ],
            [Ratio("tinycoro", "asyncio.Lock", 1.0)],  # the latest target (0.8 before)
        ),
        Case(
            WORKLOAD,
            f"contended, {k} tasks",
            "lock+unlock/s",
            [
                Series("tinycoro", lambda: run_tc(_tc_contended(k, iters), ctx), skip=skip),
                Series("asyncio.Lock", lambda: run_on(ASYNCIO, _aio_contended(k, iters))),
            ],
            [Ratio("tinycoro", "asyncio.Lock")],
        ),
    ]
