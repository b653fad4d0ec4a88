"""5. TCP echo: 50 connections, 64 B and 4 KiB messages, closed loop, driven by echo_load.

The C load generator (``benchmarks/echo_load.c``, carried in this repository) is compiled once
with the system C compiler into the git-ignored ``build/benchmarks/``, and so are the two C
servers of the limit rows: ``echo_epoll.c`` (one thread, epoll, one recv and one send per
message) and ``echo_uring.c`` (one thread, io_uring, one recv and one send SQE per message).
They show what the kernel and the load generator allow on this machine, and their CPU per
request is the floor a Python server's is set against. Each server runs in its own process
(see :mod:`benchmarks.echo_server`), started once per run and kept warm; the repetitions
alternate between servers. Without gcc or a source, the rows are reported as skipped with the
reason.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from .config import Config
from .echo_procs import (  # noqa: F401 - the old names, kept importable from here
    CProgramMissing, EchoLoadMissing, EchoServer, build_c, build_c_server, build_echo_load, run_load,
)
from .harness import Case, Ratio, Series
from .instructions import echo_instructions
from .peers import URINGIO, missing, uringio_python

NAME = "echo"
WORKLOAD = "TCP echo"
SIZES = (64, 4096)
# "uvloop streams" is asyncio's streams API on uvloop's loop: the like-for-like peer of a
# coroutine-per-connection API; "uvloop protocol" (callbacks) is the fastest a Python loop goes.
# "C epoll" and "C io_uring" are the limit rows: no Python server can pass them, and the gap
# in CPU per request is what a Python runtime adds to the kernel's share.
C_EPOLL, C_URING = "C epoll", "C io_uring"
PEERS = ("asyncio streams", "asyncio protocol", "uvloop streams", "uvloop protocol", URINGIO, C_EPOLL, C_URING)
_KIND = {
    "tinycoro": "tinycoro",
    "asyncio streams": "asyncio-streams",
    "asyncio protocol": "asyncio-protocol",
    "uvloop streams": "uvloop-streams",
    "uvloop protocol": "uvloop-protocol",
    URINGIO: URINGIO,  # benchmarks/uringio_peer.py in its own virtual environment
    C_EPOLL: "c-epoll",  # benchmarks/echo_epoll.c
    C_URING: "c-uring",  # benchmarks/echo_uring.c
}
# targets: >= 1.0x uvloop protocol (0.85x is the floor), >= 1.5x uvloop streams, >= 2x uringio,
# >= 2.5x asyncio streams
TARGETS = {"asyncio streams": 2.5, "uvloop streams": 1.5, "uvloop protocol": 1.0, URINGIO: 2.0}


def servers(
    stack: ExitStack, kinds: dict[str, tuple[str, Any]],
    start: Callable[[str, Any], EchoServer] = EchoServer,
) -> dict[str, EchoServer | str]:
    """Start one server per label: ``{label: (kind, arg)}``, each ``start(kind, arg)`` (an
    echo server of *arg* contexts by default). A server that cannot start maps to its skip
    reason instead."""
    out: dict[str, EchoServer | str] = {}
    for label, (kind, arg) in kinds.items():
        if kind.startswith("uvloop") and missing("uvloop"):
            out[label] = missing("uvloop")  # type: ignore[assignment]
            continue
        try:
            srv = start(kind, arg)
        except RuntimeError as e:
            out[label] = str(e)
            continue
        stack.callback(srv.close)
        out[label] = srv
    return out


def series_for(
    exe: Path | None, srv: EchoServer | str, cfg: Config, size: int, label: str,
    instructions: float | None = None,
) -> Series:
    if isinstance(srv, str):
        return Series(label, skip=srv)
    port, pid = srv.port, srv.proc.pid
    return Series(
        label,
        lambda: run_load(exe, port, cfg.echo_conns, size, cfg.echo_seconds, pid),  # type: ignore[arg-type]
        instructions=instructions,
    )


# Servers whose instructions per 64 B request are counted (callgrind, once per run): tinycoro
# on every run but --tiny, its two uvloop peers and the C limit rows on full runs.
COUNTED = {
    "full": ("tinycoro", "uvloop streams", "uvloop protocol", C_EPOLL, C_URING),
    "quick": ("tinycoro",),
}


def instructions(cfg: Config, labels: tuple[str, ...]) -> dict[str, float]:
    """User-space instructions per 64 B echo request, by label, for the servers this mode
    counts (see :data:`COUNTED`); none where valgrind is missing. Instruction counts do not
    move with the machine's load the way rates and CPU times do."""
    out: dict[str, float] = {}
    for label in COUNTED.get(cfg.mode, ()):
        if label not in labels or (_KIND[label].startswith("uvloop") and missing("uvloop")):
            continue
        value, _note = echo_instructions(_KIND[label], seconds=2.0, conns=cfg.echo_conns)
        if value is not None:
            out[label] = value
    return out


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    labels = ("tinycoro",) + PEERS
    targets = TARGETS
    uringio_python(create=cfg.mode != "tiny")  # decided once per run, before any server starts
    try:
        exe: Path | None = build_echo_load()
        skip = None
    except EchoLoadMissing as e:
        exe, skip = None, str(e)
    counted = instructions(cfg, labels) if exe else {}
    running = servers(stack, {lb: (_KIND[lb], cfg.contexts) for lb in labels}) if exe else {}
    cases = []
    for size in SIZES:
        name = f"{size} B" if size < 1024 else f"{size // 1024} KiB"
        series = [
            series_for(exe, running[lb], cfg, size, lb, counted.get(lb) if size == 64 else None)
            if exe else Series(lb)
            for lb in labels
        ]
        ratios = [Ratio("tinycoro", p, targets.get(p) if size == 64 else None) for p in PEERS]
        cases.append(Case(WORKLOAD, f"{name}, {cfg.echo_conns} conns", "req/s", series, ratios, skip=skip))
    return cases
