"""4. File: 4 KiB random reads and writes, 64 in flight, on a file of 64 MiB (page cache warm).

Peers:

* ``tinycoro``: 64 tasks, each ``await f.read_at(4096, off)`` / ``f.write_at(buf, off)`` on one
  shared :class:`tc.io.AsyncFile` (the offsets make them safe to share). Reads of cached pages
  complete inline (``preadv2(RWF_NOWAIT)``, every 16th read of a step yields), misses and
  writes go through io_uring; ``TINYCORO_FILE_READS=ring`` measures the ring-only path;
* ``asyncio executor``: 64 tasks, each ``await loop.run_in_executor(None, os.pread, fd, 4096,
  off)`` (or ``os.pwrite``) on the default thread pool: how asyncio code does file I/O;
* ``aiofiles``: 64 tasks, each with its own ``aiofiles.open`` handle (a shared handle's position
  would race), ``await f.seek(off)`` then ``await f.read(4096)`` / ``f.write(buf)``: aiofiles has
  no positional read, so this is its idiomatic random access (two thread hops per operation);
* ``uringio`` (reads only): 64 tasks on uringio's io_uring event loop, each ``await
  f.read(size=4096, offset=off)`` on one shared file, in uringio's own virtual environment
  (Python >= 3.12; see :mod:`benchmarks.uringio_peer`);
* ``sync os.pread``: a plain loop of ``os.pread`` / ``os.pwrite`` on the calling thread, one at
  a time (no concurrency at all): the floor that no runtime overhead can beat on a page-cache hit;
* ``sync preadv NOWAIT`` (reads only): a plain loop of ``os.preadv(fd, (buf,), off,
  os.RWF_NOWAIT)`` into one reused buffer: the non-blocking read a runtime must use for a
  cached page (it never waits for the disk), from Python, with no runtime at all. It is the
  honest limit of tinycoro's inline reads, which make this very call (and return a bytes
  object each: a new one, the pread loop's allocation, which this loop does not pay, unless
  the bytes the last read returned has been dropped, which is then filled again).

Every series performs the same random 4 KiB-aligned offsets (a fixed seed); each is timed
inside its loop, after the file is open. The concurrent series split them into one share per
task (:func:`shares`), made before the clock starts as the loops' one list is, each share's
offsets in the order its task reads them as the loops' are (the same work per read: see
:func:`shares`).
"""

from __future__ import annotations

import array
import asyncio
import os
import random
import shutil
import subprocess
import tempfile
import time
from contextlib import ExitStack
from typing import Any, Callable

import tinycoro as tc

from .config import Config, checkout_env
from .harness import Case, Ratio, Sample, Series
from .peers import ASYNCIO, URINGIO, missing, run_on, run_tc, uringio_python

NAME = "file"
WORKLOAD = "file 4 KiB random"
BLOCK = 4096
NOWAIT = "sync preadv NOWAIT"  # the limit row of cached reads

_cache: dict[int, str] = {}


def test_file(cfg: Config, stack: ExitStack) -> str:
    """Path of a file of ``cfg.file_mib`` MiB in a fresh temp dir, created once and read once
    so that it sits in the page cache. Removed when *stack* closes."""
    size = cfg.file_mib << 20
    if size in _cache:
        return _cache[size]
    d = tempfile.mkdtemp(prefix="tinycoro-bench-")
    path = os.path.join(d, "data.bin")
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(cfg.file_mib):
            f.write(chunk)
    with open(path, "rb") as warm:  # warm the page cache
        while warm.read(1 << 22):
            pass
    _cache[size] = path

    def _cleanup() -> None:
        _cache.pop(size, None)
        shutil.rmtree(d, ignore_errors=True)

    stack.callback(_cleanup)
    return path


def offsets(cfg: Config, n: int, seed: int = 5) -> list[int]:
    blocks = (cfg.file_mib << 20) // BLOCK
    rng = random.Random(seed)
    return [rng.randrange(blocks) * BLOCK for _ in range(n)]


def shares(offs: list[int], k: int) -> list[list[int]]:
    """*offs* split between *k* tasks, task i's share ``offs[i::k]``, made before any clock
    starts and with its own int objects, allocated in the order its task reads them.

    The sequential loops walk one list whose ints were allocated in the order they are read.
    A task that sliced ``offs[i::k]`` itself did more per read, for no reason of the runtime:
    the 64 slices were made (each offset's int touched once more) and freed inside the timed
    region, and each task walked every k-th int of the shared list, a cold cache line per
    read (cachegrind: ~5 of the 7.3 L1 data read misses per tinycoro read were those, against
    the loop's 2.7 in all). With its own share, each task reads its offsets as the loop does."""
    return [array.array("q", offs[i::k]).tolist() for i in range(k)]


# -- tinycoro ----------------------------------------------------------------------------------
async def tc_random_io(path: str, parts: list[list[int]], write: bool) -> Sample:
    """One task per share of *parts*, all on one AsyncFile."""
    f = await tc.io.open(path, "r+b" if write else "rb")
    buf = b"w" * BLOCK

    async def reader(i: int) -> None:
        read_at = f.read_at
        for off in parts[i]:
            await read_at(BLOCK, off)

    async def writer(i: int) -> None:
        write_at = f.write_at
        for off in parts[i]:
            await write_at(buf, off)

    try:
        return await tc_timed_workers(writer if write else reader, parts)
    finally:
        await f.close()


async def tc_timed_workers(worker: Callable[[int], Any], parts: list[list[int]]) -> Sample:
    """Spawn ``worker(i)`` as a tinycoro task for each share i of *parts*, join them; the
    shares' offsets per second."""
    ops = sum(map(len, parts))
    t0 = time.perf_counter()
    tasks = [tc.spawn(worker(i)) for i in range(len(parts))]
    for t in tasks:
        await t
    return Sample(ops / (time.perf_counter() - t0))


# -- asyncio + thread pool ---------------------------------------------------------------------
async def _executor_random_io(path: str, parts: list[list[int]], write: bool) -> Sample:
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
    buf = b"w" * BLOCK

    async def worker(i: int) -> None:
        run = loop.run_in_executor
        if write:
            for off in parts[i]:
                await run(None, os.pwrite, fd, buf, off)
        else:
            for off in parts[i]:
                await run(None, os.pread, fd, BLOCK, off)

    try:
        ops = sum(map(len, parts))
        t0 = time.perf_counter()
        await asyncio.gather(*[worker(i) for i in range(len(parts))])
        return Sample(ops / (time.perf_counter() - t0))
    finally:
        os.close(fd)


# -- aiofiles ----------------------------------------------------------------------------------
async def _aiofiles_random_io(path: str, parts: list[list[int]], write: bool) -> Sample:
    import aiofiles

    buf = b"w" * BLOCK
    files = [await aiofiles.open(path, "r+b" if write else "rb") for _ in parts]

    async def worker(i: int) -> None:
        f = files[i]
        if write:
            for off in parts[i]:
                await f.seek(off)
                await f.write(buf)
        else:
            for off in parts[i]:
                await f.seek(off)
                await f.read(BLOCK)

    try:
        ops = sum(map(len, parts))
        t0 = time.perf_counter()
        await asyncio.gather(*[worker(i) for i in range(len(parts))])
        return Sample(ops / (time.perf_counter() - t0))
    finally:
        for f in files:
            await f.close()


# -- plain synchronous loop --------------------------------------------------------------------
def _sync_random_io(path: str, offs: list[int], write: bool) -> Sample:
    fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
    buf = b"w" * BLOCK
    try:
        t0 = time.perf_counter()
        if write:
            pwrite = os.pwrite
            for off in offs:
                pwrite(fd, buf, off)
        else:
            pread = os.pread
            for off in offs:
                pread(fd, BLOCK, off)
        return Sample(len(offs) / (time.perf_counter() - t0))
    finally:
        os.close(fd)


def _sync_preadv_nowait(path: str, offs: list[int]) -> Sample:
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(BLOCK)
    iov = (buf,)
    try:
        t0 = time.perf_counter()
        preadv, nowait = os.preadv, os.RWF_NOWAIT
        for off in offs:
            # The file is cached, yet RWF_NOWAIT now and then refuses a page that is (about 1
            # read in 5,000 here): read it as a runtime must, waiting, rather than end the row
            try:
                preadv(fd, iov, off, nowait)
            except BlockingIOError:
                preadv(fd, iov, off)
        return Sample(len(offs) / (time.perf_counter() - t0))
    finally:
        os.close(fd)


# -- uringio, in its own interpreter -------------------------------------------------------------
def _uringio_reads(path: str, offs_path: str, inflight: int) -> Sample:
    py, why = uringio_python()
    if py is None:
        raise RuntimeError(why)
    out = subprocess.run(
        [py, "-m", "benchmarks.uringio_peer", "file", path, offs_path, str(inflight)],
        env=checkout_env(), capture_output=True, text=True, timeout=300,
    )
    if out.returncode != 0 or not out.stdout.startswith("rate="):
        raise RuntimeError(f"uringio reads failed ({out.returncode}): {out.stderr.strip()[-200:]}")
    return Sample(float(out.stdout.split("=", 1)[1]))


def _offsets_file(offs: list[int], stack: ExitStack) -> str:
    fd, name = tempfile.mkstemp(prefix="tinycoro-bench-offsets-")
    with os.fdopen(fd, "wb") as f:
        array.array("q", offs).tofile(f)
    stack.callback(os.unlink, name)
    return name


def _case(cfg: Config, path: str, write: bool, stack: ExitStack) -> Case:
    offs = offsets(cfg, cfg.file_ops, seed=7 if write else 5)
    k, ctx = cfg.inflight, cfg.contexts
    parts = shares(offs, k)
    aio_parts = shares(offs[: cfg.aiofiles_ops], k)

    def tc_fn() -> Sample:
        return run_tc(tc_random_io(path, parts, write), ctx)

    def ex_fn() -> Sample:
        return run_on(ASYNCIO, _executor_random_io(path, parts, write))

    def af_fn() -> Sample:
        return run_on(ASYNCIO, _aiofiles_random_io(path, aio_parts, write))

    def sy_fn() -> Sample:
        return _sync_random_io(path, offs, write)

    kind = "writes" if write else "reads"
    # targets: >= 0.7x the blocking pread loop (0.6x before), >= 2.5x uringio
    # and >= 0.95x the non-blocking limit (a preadv NOWAIT loop)
    targets: dict[str, float | None] = {
        "asyncio executor": 5.0, "aiofiles": 10.0, "sync os.pread": 0.7, URINGIO: 2.5,
        NOWAIT: 0.95,
    }
    if write:  # the file targets are for reads; writes are reported for information
        targets = {}
    series: list[tuple[str, Callable[[], Sample], str | None]] = [
        ("tinycoro", tc_fn, None),
        ("asyncio executor", ex_fn, None),
        ("aiofiles", af_fn, missing("aiofiles")),
        ("sync os.pread" if not write else "sync os.pwrite", sy_fn, None),
    ]
    if not write:
        series.append((NOWAIT, lambda: _sync_preadv_nowait(path, offs), None))
        offs_path = _offsets_file(offs, stack)
        why = uringio_python(create=cfg.mode != "tiny")[1]
        series.append((URINGIO, lambda: _uringio_reads(path, offs_path, k), why))
    return Case(
        WORKLOAD,
        f"{kind}, {k} in flight, {cfg.file_mib} MiB",
        "ops/s",
        [Series(label, fn, skip=skip) for label, fn, skip in series],
        [Ratio("tinycoro", label, targets.get(label)) for label, _, _ in series[1:]],
    )


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    path = test_file(cfg, stack)
    return [_case(cfg, path, False, stack), _case(cfg, path, True, stack)]
