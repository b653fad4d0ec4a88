"""4c. Whole files: ``await tc.io.read_file(path)`` of one big cached file, and of 10,000 small
ones, against the builtin ``open(path, "rb").read()`` (the first call a notebook user makes).

Cases:

* ``big file``: one file (512 MiB full, 64 MiB quick), in MiB/s; ``read_file`` on one context,
  the builtin on the calling thread, ``aiofiles.open`` + ``read()`` on asyncio (its thread);
* ``small files``: 10,000 files of 2 KiB, in files/s; ``read_file`` one after another and 64
  at a time (64 tasks, each a share of the names), the builtin loop, and aiofiles 64 at a time;
* ``big file, peak memory``: the growth of the peak RSS (``VmHWM``) of a fresh child process
  while it reads the big file once, as a multiple of the file's size; lower is better (1.0:
  the file held once, as the builtin holds it). Reported for information. (Not
  ``ru_maxrss``: a child inherits its parent's peak through fork and exec, and the harness's
  process is bigger than the file.)

Every repetition first reads the files through a reused buffer, untimed, so that they are in
the page cache whatever other processes evicted meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from typing import Callable

import tinycoro as tc

from .config import REPO, Config
from .harness import Case, Ratio, Sample, Series
from .peers import ASYNCIO, missing, run_on, run_tc

NAME = "wholefile"
WORKLOAD = "whole file"
SMALL = 2048
INFLIGHT = 64
_SIZES = {"full": (512, 10_000), "quick": (64, 10_000), "tiny": (1, 200)}  # (MiB, small files)


def _sizes(cfg: Config) -> tuple[int, int]:
    return _SIZES.get(cfg.mode, _SIZES["full"])


def _make_files(cfg: Config, stack: ExitStack) -> tuple[str, list[str]]:
    """The big file and the small ones, in a fresh temp dir removed when *stack* closes."""
    mib, count = _sizes(cfg)
    d = tempfile.mkdtemp(prefix="tinycoro-bench-whole-")
    stack.callback(shutil.rmtree, d, True)
    big = os.path.join(d, "big.bin")
    chunk = os.urandom(1 << 20)
    with open(big, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
    names = []
    for i in range(count):
        names.append(os.path.join(d, f"s{i:05d}"))
        with open(names[-1], "wb") as f:
            f.write(os.urandom(SMALL))
    return big, names


def _warm(paths: list[str]) -> None:
    """Read *paths* into the page cache through one reused buffer (untimed)."""
    buf = bytearray(1 << 20)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            off = 0
            while n := os.preadv(fd, (buf,), off):
                off += n
        finally:
            os.close(fd)


# -- one big file ----------------------------------------------------------------------------
async def _tc_big(path: str) -> float:
    t0 = time.perf_counter()
    data = await tc.io.read_file(path)
    dt = time.perf_counter() - t0
    assert len(data) == os.path.getsize(path)
    return dt


def _builtin_big(path: str) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    dt = time.perf_counter() - t0
    assert len(data) == os.path.getsize(path)
    return dt


async def _aiofiles_big(path: str) -> float:
    import aiofiles

    t0 = time.perf_counter()
    async with aiofiles.open(path, "rb") as f:
        data = await f.read()
    dt = time.perf_counter() - t0
    assert len(data) == os.path.getsize(path)
    return dt


def _mib_per_s(path: str, run: Callable[[], float]) -> Sample:
    _warm([path])
    dt = run()
    return Sample(os.path.getsize(path) / dt / 2**20)


# -- many small files ------------------------------------------------------------------------
async def _tc_small(names: list[str], inflight: int) -> Sample:
    read_file = tc.io.read_file

    async def reader(share: list[str]) -> None:
        for p in share:
            await read_file(p)

    t0 = time.perf_counter()
    if inflight == 1:
        await reader(names)
    else:
        tasks = [tc.spawn(reader(names[i::inflight])) for i in range(inflight)]
        for t in tasks:
            await t
    return Sample(len(names) / (time.perf_counter() - t0))


def _builtin_small(names: list[str]) -> Sample:
    t0 = time.perf_counter()
    for p in names:
        with open(p, "rb") as f:
            f.read()
    return Sample(len(names) / (time.perf_counter() - t0))


async def _aiofiles_small(names: list[str], inflight: int) -> Sample:
    import aiofiles

    async def reader(share: list[str]) -> None:
        for p in share:
            async with aiofiles.open(p, "rb") as f:
                await f.read()

    t0 = time.perf_counter()
    await asyncio.gather(*[reader(names[i::inflight]) for i in range(inflight)])
    return Sample(len(names) / (time.perf_counter() - t0))


# -- peak memory, in a child -----------------------------------------------------------------
def _hwm() -> int:
    """This process's peak resident set so far, in bytes (its own: VmHWM starts at exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _peak_child(how: str, path: str) -> None:
    """In a fresh process: read *path* once by *how*; print the peak RSS growth / file size."""
    size = os.path.getsize(path)
    if how == "tinycoro":
        with tc.Scheduler(1) as s:
            s.run_sync(tc.sleep(0))  # the context and its ring first: not the read's memory
            before = _hwm()
            data = s.run_sync(tc.io.read_file(path))
            after = _hwm()
    elif how == "builtin":
        before = _hwm()
        with open(path, "rb") as f:
            data = f.read()
        after = _hwm()
    else:  # aiofiles
        import aiofiles

        async def read() -> bytes:
            async with aiofiles.open(path, "rb") as f:
                return await f.read()

        loop = asyncio.new_event_loop()
        loop.run_until_complete(asyncio.sleep(0))
        before = _hwm()
        data = loop.run_until_complete(read())
        after = _hwm()
        loop.close()
    assert len(data) == size
    print(f"peak={(after - before) / size:.4f}")


def _peak(how: str, path: str) -> Sample:
    _warm([path])
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.w_wholefile", how, path],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0 or not out.stdout.startswith("peak="):
        raise RuntimeError(f"peak memory child failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    return Sample(float(out.stdout.split("=", 1)[1]))


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    big, names = _make_files(cfg, stack)
    mib, count = _sizes(cfg)
    ctx = cfg.contexts
    no_aiofiles = missing("aiofiles")

    def big_series(label: str, fn: Callable[[], float], skip: str | None = None) -> Series:
        return Series(label, lambda: _mib_per_s(big, fn), skip=skip)

    big_case = Case(
        WORKLOAD, f"one big file, {mib} MiB", "MiB/s",
        [
            big_series("tinycoro", lambda: run_tc(_tc_big(big), ctx)),
            big_series("builtin open().read()", lambda: _builtin_big(big)),
            big_series("aiofiles", lambda: run_on(ASYNCIO, _aiofiles_big(big)), no_aiofiles),
        ],
        [Ratio("tinycoro", "builtin open().read()", 1.0), Ratio("tinycoro", "aiofiles", None)],
    )

    def warm_then(fn: Callable[[], Sample]) -> Sample:
        _warm(names)
        return fn()

    small_case = Case(
        WORKLOAD, f"{count:,} small files of {SMALL // 1024} KiB", "files/s",
        [
            Series("tinycoro", lambda: warm_then(lambda: run_tc(_tc_small(names, 1), ctx))),
            Series(f"tinycoro {INFLIGHT} at a time",
                   lambda: warm_then(lambda: run_tc(_tc_small(names, INFLIGHT), ctx))),
            Series("builtin open().read()", lambda: warm_then(lambda: _builtin_small(names))),
            Series(f"aiofiles {INFLIGHT} at a time",
                   lambda: warm_then(lambda: run_on(ASYNCIO, _aiofiles_small(names, INFLIGHT))),
                   skip=no_aiofiles),
        ],
        [
            Ratio("tinycoro", "builtin open().read()", 1.0),
            Ratio(f"tinycoro {INFLIGHT} at a time", "builtin open().read()", 1.0),
            Ratio(f"tinycoro {INFLIGHT} at a time", f"aiofiles {INFLIGHT} at a time", None),
        ],
    )
    memory_case = Case(
        WORKLOAD, f"one big file, {mib} MiB: peak memory (lower is better)", "x file size",
        [
            Series("tinycoro", lambda: _peak("tinycoro", big)),
            Series("builtin open().read()", lambda: _peak("builtin", big)),
            Series("aiofiles", lambda: _peak("aiofiles", big), skip=no_aiofiles),
        ],
        [Ratio("tinycoro", "builtin open().read()", None)],
    )
    return [big_case, small_case, memory_case]


if __name__ == "__main__":
    _peak_child(sys.argv[1], sys.argv[2])
