"""4b. File reads from inside an asyncio program: tinycoro's hosted ring against aiofiles and the
executor, all three in the same kind of program (the asyncio host's use case).

The workload is w_file's: 4 KiB random reads of a page-cached file, 64 in flight, same offsets.
Every series is an ordinary asyncio program (``asyncio.run`` / ``uvloop.run``) with 64 asyncio
tasks; only what the tasks await differs:

* ``tinycoro in asyncio`` / ``tinycoro in uvloop``: ``await f.read_at(4096, off)`` on one shared
  ``tc.io.AsyncFile``; the reads go to the io_uring ring hosted by the running loop (its eventfd
  is a reader of the loop), with no tinycoro Scheduler anywhere;
* ``asyncio executor`` and ``aiofiles``: exactly w_file's series.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack

import tinycoro as tc

from .config import Config
from .harness import Case, Ratio, Sample, Series
from .peers import ASYNCIO, UVLOOP, missing, run_on
from .w_file import BLOCK, _aiofiles_random_io, _executor_random_io, offsets, shares, test_file

NAME = "aio_file"
WORKLOAD = "file reads inside asyncio"


async def _tc_in_asyncio(path: str, parts: list[list[int]]) -> Sample:
    f = await tc.io.open(path, "rb")  # opened on the loop's hosted ring (created here)

    async def reader(i: int) -> None:
        read_at = f.read_at
        for off in parts[i]:
            await read_at(BLOCK, off)

    try:
        ops = sum(map(len, parts))
        t0 = time.perf_counter()
        await asyncio.gather(*[reader(i) for i in range(len(parts))])
        return Sample(ops / (time.perf_counter() - t0))
    finally:
        await f.close()


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    path = test_file(cfg, stack)
    offs = offsets(cfg, cfg.file_ops, seed=5)
    k = cfg.inflight
    parts = shares(offs, k)  # one share per task, made before the clock (w_file.shares)
    aio_parts = shares(offs[: cfg.aiofiles_ops], k)
    series = [
        Series("tinycoro in asyncio", lambda: run_on(ASYNCIO, _tc_in_asyncio(path, parts))),
        Series(
            "tinycoro in uvloop",
            lambda: run_on(UVLOOP, _tc_in_asyncio(path, parts)),
            skip=missing("uvloop"),
        ),
        Series("asyncio executor", lambda: run_on(ASYNCIO, _executor_random_io(path, parts, False))),
        Series(
            "aiofiles",
            lambda: run_on(ASYNCIO, _aiofiles_random_io(path, aio_parts, False)),
            skip=missing("aiofiles"),
        ),
    ]
    return [
        Case(
            WORKLOAD,
            f"reads, {k} in flight, {cfg.file_mib} MiB",
            "ops/s",
            series,
            [
                Ratio("tinycoro in asyncio", "asyncio executor", None),
                Ratio("tinycoro in asyncio", "aiofiles", None),
            ],
        )
    ]
