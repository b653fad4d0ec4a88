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

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from .config import BUILD_DIR, C_SERVERS, ECHO_LOAD_SRC, REPO, Config
from .harness import Case, Ratio, Sample, Series
from .peers import URINGIO, missing, uringio_env, uringio_python

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
_OUT = re.compile(r"rps=(\S+) p50_us=(\S+) p99_us=(\S+) errors=(\d+)")


class CProgramMissing(RuntimeError):
    """A C program of the benchmarks cannot be built here; the message says why."""


class EchoLoadMissing(CProgramMissing):
    pass


def _liburing_include() -> str | None:
    """The include directory of the installed liburing binding (it ships the kernel's
    ``io_uring.h``), found without importing the binding; None without it."""
    import importlib.util

    spec = importlib.util.find_spec("liburing")
    for root in (spec.submodule_search_locations or []) if spec else []:
        inc = Path(root) / "include"
        if (inc / "liburing" / "io_uring.h").is_file():
            return str(inc)
    return None


def build_c(name: str, src: Path, flags: tuple[str, ...] = ()) -> Path:
    """Compile the C program *src* into ``build/benchmarks/<name>`` unless it is up to date;
    return its path. Raises CProgramMissing with the reason it cannot be had."""
    if not src.is_file():
        raise CProgramMissing(f"{name} source not found at {src}")
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise CProgramMissing(f"no C compiler (gcc) to build {name}")
    for out_dir in (BUILD_DIR, Path(tempfile.gettempdir()) / "tinycoro-bench-build"):
        exe = out_dir / name
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            if exe.exists() and exe.stat().st_mtime >= src.stat().st_mtime:
                return exe
            tmp = out_dir / f".{name}.{os.getpid()}"  # a concurrent run never sees half a binary
            subprocess.run([gcc, "-O2", "-o", str(tmp), str(src), *flags], check=True, capture_output=True, text=True)
            os.replace(tmp, exe)
            return exe
        except PermissionError:
            continue  # a read-only checkout: build in the temp dir instead
        except subprocess.CalledProcessError as e:
            raise CProgramMissing(f"building {name} failed: {e.stderr.strip()[:200]}") from None
    raise CProgramMissing(f"no writable directory to build {name} in")


def build_echo_load(src: Path | None = None) -> Path:
    """Compile echo_load if needed; return its path. Raises EchoLoadMissing with the reason."""
    src = src or ECHO_LOAD_SRC
    if not src.is_file():
        raise EchoLoadMissing(f"load generator source not found at {src}")
    try:
        return build_c("echo_load", src, ("-lm",))
    except CProgramMissing as e:
        raise EchoLoadMissing(str(e)) from None


def build_c_server(kind: str) -> Path:
    """Compile the C echo server of *kind* (a key of ``config.C_SERVERS``) if needed; return its
    path. echo_uring takes ``io_uring.h`` from the liburing binding when it is installed (it
    is a dependency of tinycoro), else from the system's kernel headers."""
    name = C_SERVERS[kind]
    inc = _liburing_include() if kind == "c-uring" else None
    return build_c(name, REPO / "benchmarks" / f"{name}.c", (f"-I{inc}",) if inc else ())


class EchoServer:
    """One echo server process of a given kind; ``port`` once it printed READY."""

    def __init__(
        self,
        kind: str,
        contexts: int = 1,
        env: dict[str, str] | None = None,
        wrap: list[str] | None = None,
        ready_timeout: float = 20.0,
    ) -> None:
        self.kind = kind
        # *wrap* runs the server under a tool (valgrind, for instructions per request)
        cmd = list(wrap or []) + [sys.executable, "-m", "benchmarks.echo_server", kind, str(contexts)]
        penv = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if kind in C_SERVERS:  # one thread whatever *contexts* says: the limit of one core
            try:
                cmd = list(wrap or []) + [str(build_c_server(kind))]
            except CProgramMissing as e:
                raise RuntimeError(str(e)) from None
        elif kind == URINGIO:
            py, why = uringio_python()
            if py is None:
                raise RuntimeError(why)
            cmd, penv = [py, "-m", "benchmarks.uringio_peer", "echo"], uringio_env()
        penv.update(env or {})
        self.proc = subprocess.Popen(
            cmd, cwd=str(REPO), env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.port = self._wait_ready(timeout=ready_timeout)

    def _wait_ready(self, timeout: float) -> int:
        assert self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if r else ""
        if not line.startswith("READY "):
            # its message is read once it has ended (a live server could hold the pipe open),
            # and before close() closes the pipe
            self._stop()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            self.close()
            raise RuntimeError(f"{self.kind} echo server did not start: {line!r} {err.strip()[-300:]}")
        return int(line.split()[1])

    def _stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self._stop()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of every thread of process *pid* so far (Linux /proc)."""
    user = system = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that just ended
            continue
        user += int(fields[11])
        system += int(fields[12])
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def run_load(
    exe: Path, port: int, conns: int, size: int, seconds: float, server_pid: int | None = None,
    response: int | None = None,
) -> Sample:
    """One closed-loop run of echo_load; raises if it reports errors or no requests. With
    *server_pid*, also the server's user and system CPU time per request. With *response*,
    request/response mode: each request of *size* bytes is answered by *response* bytes."""
    before = _cpu_seconds(server_pid) if server_pid else None
    out = subprocess.run(
        [str(exe), "127.0.0.1", str(port), str(conns), str(size), f"{seconds:g}"]
        + ([str(response)] if response else []),
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    )
    m = _OUT.search(out.stdout)
    if out.returncode != 0 or m is None:
        raise RuntimeError(f"echo_load failed ({out.returncode}): {out.stdout.strip()} {out.stderr.strip()[:200]}")
    rps, p50, p99, errors = float(m[1]), float(m[2]), float(m[3]), int(m[4])
    if errors or rps <= 0:
        raise RuntimeError(f"echo_load saw errors={errors} rps={rps}")
    cpu = None
    if before is not None:
        after = _cpu_seconds(server_pid)  # type: ignore[arg-type]
        requests = rps * seconds
        cpu = ((after[0] - before[0]) / requests * 1e6, (after[1] - before[1]) / requests * 1e6)
    return Sample(rps, p99_us=p99, p50_us=p50, cpu_us=cpu)


def servers(stack: ExitStack, kinds: dict[str, tuple[str, int]]) -> dict[str, EchoServer | str]:
    """Start one server per label: ``{label: (kind, contexts)}``. A server that cannot start
    maps to its skip reason instead."""
    out: dict[str, EchoServer | str] = {}
    for label, (kind, contexts) in kinds.items():
        if kind.startswith("uvloop") and missing("uvloop"):
            out[label] = missing("uvloop")  # type: ignore[assignment]
            continue
        try:
            srv = EchoServer(kind, contexts)
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
    from .profile import echo_instructions

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
