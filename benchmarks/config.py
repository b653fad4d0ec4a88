"""Sizes for a full run, ``--quick`` and the hidden ``--tiny`` (smoke test) mode."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH``: what every child
    that runs ``python -m benchmarks.<module>`` (on this or another interpreter) is given."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
BUILD_DIR = REPO / "build" / "benchmarks"  # git-ignored (build/)
ECHO_LOAD_SRC = REPO / "benchmarks" / "echo_load.c"  # the project's own load generator
# The C echo servers of the limit rows: server kind -> program (benchmarks/<program>.c)
C_SERVERS = {"c-epoll": "echo_epoll", "c-uring": "echo_uring"}
# The Python version whose run draws docs/benchmarks.png, the chart the README shows; a run on
# another version draws benchmarks-py<version>.png beside it.
REFERENCE_PYTHON = "3.11"


@dataclass(frozen=True)
class Config:
    mode: str  # "full", "quick" or "tiny"
    reps: int  # measured repetitions per series
    warmup: int  # discarded repetitions per series before them
    # 1. task switch: 2-task ping-pong and many tasks x few yields
    pingpong_yields: int  # per task
    many_tasks: int
    many_yields: int
    # 2. spawn + join
    spawn_tasks: int
    # 3. mutex
    mutex_uncontended: int  # lock/unlock pairs by one task
    mutex_tasks: int  # contending tasks
    mutex_iters: int  # lock/unlock pairs per contending task
    # 4. file
    file_mib: int
    file_ops: int  # random 4 KiB operations per repetition (io_uring, executor, sync)
    aiofiles_ops: int  # aiofiles is slow: fewer ops keep one repetition short
    inflight: int
    # 4b. O_DIRECT
    direct_mib: int
    direct_ops: int  # random 4 KiB reads per repetition (fio psync does a quarter of them)
    # 5. echo
    echo_conns: int
    echo_seconds: float
    # 6. scaling
    scale_contexts: tuple[int, ...] = (1, 2, 4)
    # 7. cluster scaling (2 ipyparallel engines)
    cluster_engines: int = 2
    cluster_yields: int = 400_000  # yield_now rounds with arithmetic, all parts together
    cluster_parts: int = 8  # tasks they are split in
    # batches of cluster_yields, one after another, timed as one repetition: a batch takes
    # 40-80 ms, too short to measure alone on a shared machine (benchmarks/w_cluster.py)
    cluster_batches: int = 10
    cluster_roundtrips: int = 200  # trivial submits (and ipyparallel applies) in a row
    contexts: int = 1  # contexts for workloads 1-5 (asyncio is one thread too)
    profile: bool = False

    def with_(self, **kw: object) -> "Config":
        return replace(self, **kw)  # type: ignore[arg-type]


FULL = Config(
    mode="full",
    reps=5,
    warmup=1,
    pingpong_yields=200_000,
    many_tasks=1000,
    many_yields=200,
    spawn_tasks=100_000,
    mutex_uncontended=300_000,
    mutex_tasks=100,
    mutex_iters=2_000,
    file_mib=64,
    file_ops=60_000,
    aiofiles_ops=20_000,
    inflight=64,
    direct_mib=256,
    direct_ops=60_000,
    echo_conns=50,
    echo_seconds=3.0,
    profile=True,
)

QUICK = FULL.with_(
    mode="quick",
    reps=3,
    warmup=0,
    pingpong_yields=50_000,
    many_tasks=1000,
    many_yields=50,
    spawn_tasks=100_000,
    mutex_uncontended=100_000,
    mutex_iters=500,
    file_ops=40_000,
    aiofiles_ops=6_000,
    direct_ops=30_000,
    echo_seconds=1.0,
    cluster_yields=200_000,
    cluster_batches=3,
    cluster_roundtrips=100,
    profile=False,
)

# Smoke-test sizes: exercise every code path in seconds; the numbers mean nothing.
TINY = FULL.with_(
    mode="tiny",
    reps=1,
    warmup=0,
    pingpong_yields=500,
    many_tasks=20,
    many_yields=5,
    spawn_tasks=500,
    mutex_uncontended=500,
    mutex_tasks=10,
    mutex_iters=5,
    file_mib=1,
    file_ops=512,
    aiofiles_ops=128,
    direct_mib=4,
    direct_ops=256,
    echo_seconds=0.2,
    cluster_yields=4_000,
    cluster_batches=1,
    cluster_roundtrips=5,
    profile=False,
)


def pick(quick: bool, tiny: bool) -> Config:
    """``--tiny`` or ``TINYCORO_BENCH_TINY=1`` wins over ``--quick``."""
    if tiny or os.environ.get("TINYCORO_BENCH_TINY") == "1":
        return TINY
    return QUICK if quick else FULL
