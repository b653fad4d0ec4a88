"""7. O_DIRECT: 4 KiB random reads that reach the device, 64 in flight, against fio.

Page-cache reads never block, so they cannot show what io_uring is for; O_DIRECT reads always
go to the device. Peers:

* ``tinycoro``: 64 tasks on one context, each with its own ``tc.io.aligned_buffer(4096)``,
  doing ``await f.readinto_at(buf, off)`` on one file opened with ``tc.io.open(path, "rb",
  direct=True)``;
* ``fio io_uring``: ``fio --ioengine=io_uring --iodepth=64 --direct=1``, the device's reach
  from a C program with the same depth;
* ``fio psync``: ``fio --ioengine=psync --direct=1``, one blocking ``pread`` at a time.

The file lives in the temp directory (it must be on a file system that supports O_DIRECT; the
case says so and skips where it does not). fio is the Debian package ``fio``; without it the fio
rows say "skipped: fio not installed".
"""

from __future__ import annotations

import argparse
import inspect
import json
import mmap
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack

import tinycoro as tc

from .config import QUICK, Config
from .harness import Case, Ratio, Sample, Series
from .instructions import CallgrindFailed, callgrind_totals
from .peers import run_tc
from .w_file import offsets, shares, tc_timed_workers

NAME = "direct"
WORKLOAD = "O_DIRECT 4 KiB random"
BLOCK = 4096


def tc_missing() -> str | None:
    """Why tinycoro cannot run this workload yet, or None."""
    io = tc.io
    has_open = "direct" in inspect.signature(io.open).parameters
    if not (has_open and hasattr(io, "aligned_buffer") and hasattr(io.AsyncFile, "readinto_at")):
        return ("tinycoro has no O_DIRECT reads yet (needs tc.io.open(..., direct=True), "
                "tc.io.aligned_buffer and AsyncFile.readinto_at)")
    return None


def fio_missing() -> str | None:
    return None if shutil.which("fio") else "fio not installed (apt-get install fio)"


def direct_file(cfg: Config, stack: ExitStack) -> tuple[str | None, str | None]:
    """(path, None) of a fresh ``cfg.direct_mib`` MiB file that O_DIRECT can read, or
    (None, reason). Removed when *stack* closes."""
    d = tempfile.mkdtemp(prefix="tinycoro-bench-direct-")
    stack.callback(shutil.rmtree, d, True)
    path = os.path.join(d, "direct.bin")
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(cfg.direct_mib):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        return None, f"O_DIRECT not supported in {d}: {e.strerror}"
    try:
        buf = mmap.mmap(-1, BLOCK)  # page-aligned
        os.preadv(fd, [buf], 0)
    except OSError as e:
        return None, f"O_DIRECT reads fail in {d}: {e.strerror}"
    finally:
        os.close(fd)
    # the pages written above are cached; O_DIRECT bypasses them, but drop them anyway
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    return path, None


async def tc_direct_reads(path: str, parts: list[list[int]]) -> Sample:
    """One task per share of *parts* (w_file.shares: made before the clock, as fio draws its
    offsets in C), each reading into its own aligned buffer."""
    f = await tc.io.open(path, "rb", direct=True)

    async def reader(i: int) -> None:
        buf = tc.io.aligned_buffer(BLOCK)
        readinto_at = f.readinto_at
        for off in parts[i]:
            if await readinto_at(buf, off) != BLOCK:
                raise RuntimeError(f"short O_DIRECT read at {off}")

    try:
        return await tc_timed_workers(reader, parts)
    finally:
        await f.close()


def run_fio(path: str, engine: str, depth: int, ops: int, size_mib: int) -> Sample:
    """One fio job of *ops* random 4 KiB O_DIRECT reads; its read IOPS."""
    cmd = [
        "fio", "--name=tinycoro-bench", f"--filename={path}", "--readonly", "--direct=1",
        "--rw=randread", f"--bs={BLOCK}", f"--ioengine={engine}", f"--iodepth={depth}",
        f"--size={size_mib}M", f"--io_size={ops * BLOCK}", "--norandommap",
        "--output-format=json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    report = json.loads(out.stdout[out.stdout.index("{"):])
    iops = float(report["jobs"][0]["read"]["iops"])
    if iops <= 0:
        raise RuntimeError("fio reported no reads")
    return Sample(iops)


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    k = cfg.inflight
    labels = ("tinycoro", "fio io_uring", "fio psync")
    # target: >= 0.95x fio io_uring (0.9x before)
    ratios = [Ratio("tinycoro", "fio io_uring", 0.95), Ratio("tinycoro", "fio psync", 4.0)]
    case = f"reads, {k} in flight, {cfg.direct_mib} MiB"
    path, skip = direct_file(cfg, stack)
    if path is None:
        return [Case(WORKLOAD, case, "ops/s", [Series(lb) for lb in labels], ratios, skip=skip)]
    offs = offsets(cfg.with_(file_mib=cfg.direct_mib), cfg.direct_ops, seed=11)
    parts = shares(offs, k)
    mib, ctx = cfg.direct_mib, cfg.contexts
    series = [
        Series("tinycoro", lambda: run_tc(tc_direct_reads(path, parts), ctx), skip=tc_missing()),
        Series("fio io_uring", lambda: run_fio(path, "io_uring", k, cfg.direct_ops, mib), skip=fio_missing()),
        # one read at a time: fewer of them keep a repetition about as long as the others
        Series("fio psync", lambda: run_fio(path, "psync", 1, cfg.direct_ops // 4, mib), skip=fio_missing()),
    ]
    return [Case(WORKLOAD, case, "ops/s", series, ratios)]


# -- instructions and CPU time per read ----------------------------------------------------------
# ``python -m benchmarks.w_direct --instructions`` counts the user-space instructions one
# O_DIRECT read costs tinycoro, under callgrind: the same reads as the tinycoro row (64 tasks,
# one context, each share made before the reads), run twice, with N and 3N reads; the difference
# of the two totals over 2N reads leaves out start-up, imports and shutdown. ``--cpu`` reports
# the reads' rate and the user and system CPU time per read, without valgrind (noisy on a shared
# machine; the kernel's part of a read shows only there).

def _reads(path: str, n: int, k: int = 64) -> None:
    """*n* random 4 KiB O_DIRECT reads of *path*, *k* tasks on one context; prints the rate
    and the user and system CPU time per read."""
    blocks = os.path.getsize(path) // BLOCK
    offs = [(i * 2654435761 % blocks) * BLOCK for i in range(n)]  # cheap, fixed, spread out
    parts = shares(offs, k)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    rate = run_tc(tc_direct_reads(path, parts), 1).value
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    user = (r1.ru_utime - r0.ru_utime) * 1e6 / n
    system = (r1.ru_stime - r0.ru_stime) * 1e6 / n
    print(f"{n} reads: {rate:,.0f} reads/s, user {user:.2f} us, system {system:.2f} us per read")


def direct_instructions(path: str, n: int = 2000) -> tuple[float | None, str]:
    """User-space instructions per tinycoro O_DIRECT read of *path* under callgrind, and how:
    ``(value, note)``, or ``(None, why not)``."""
    if shutil.which("valgrind") is None:
        return None, "valgrind (callgrind) not installed"
    path = os.path.abspath(path)  # (the runs start in the checkout's root)
    try:
        totals = [callgrind_totals(["benchmarks.w_direct", "--reads", str(reads), path])[-1]
                  for reads in (n, 3 * n)]
    except CallgrindFailed as e:
        return None, str(e)
    return (totals[1] - totals[0]) / (2 * n), f"({totals[1]:,} - {totals[0]:,}) / {2 * n:,} reads"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.w_direct",
                                 description="Instructions and CPU time per O_DIRECT read.")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--instructions", action="store_true",
                      help="user-space instructions per read, under callgrind")
    what.add_argument("--cpu", action="store_true", help="rate, user and system time per read")
    what.add_argument("--reads", type=int, help=argparse.SUPPRESS)  # callgrind's child
    ap.add_argument("path", nargs="?", help="an existing file to read (default: a new 64 MiB one)")
    ap.add_argument("-n", type=int, default=2000, help="reads (--instructions: N and 3N)")
    args = ap.parse_args(argv)
    if args.reads is not None:
        _reads(args.path, args.reads)
        return 0
    with ExitStack() as stack:
        path = args.path
        if path is None:
            path, skip = direct_file(QUICK.with_(direct_mib=64), stack)
            if path is None:
                print(f"skipped: {skip}")
                return 0
        if args.cpu:
            _reads(path, args.n)
        else:
            value, note = direct_instructions(path, args.n)
            print(f"{value:,.0f} instructions per read: {note}" if value else f"skipped: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
