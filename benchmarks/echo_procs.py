"""The processes of the echo workloads: the C programs (the load generator and the two C echo
servers of the limit rows), built on demand; one echo server process of any kind; one closed-loop
run of the load generator against it.

The echo workload (:mod:`benchmarks.w_echo`), the instruction counts
(:mod:`benchmarks.instructions`), the system call counts (:mod:`benchmarks.syscalls`) and the
profiles (:mod:`benchmarks.profile`) all drive servers through this module; it imports none of
them, so the dependencies between them point one way.
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
from pathlib import Path

from .config import BUILD_DIR, C_SERVERS, ECHO_LOAD_SRC, REPO, checkout_env
from .harness import Sample
from .peers import URINGIO, uringio_python

__all__ = [
    "CProgramMissing",
    "EchoLoadMissing",
    "build_c",
    "build_echo_load",
    "build_c_server",
    "EchoServer",
    "run_load",
    "cpu_seconds",
]

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
        module: str = "benchmarks.echo_server",
    ) -> None:
        self.kind = kind
        # *wrap* runs the server under a tool (valgrind, for instructions per request); *module*
        # is another server of the same command line (benchmarks.http_server)
        cmd = list(wrap or []) + [sys.executable, "-m", module, kind, str(contexts)]
        penv = checkout_env()
        if kind in C_SERVERS:  # one thread whatever *contexts* says: the limit of one core
            try:
                cmd = list(wrap or []) + [str(build_c_server(kind))]
            except CProgramMissing as e:
                raise RuntimeError(str(e)) from None
        elif kind == URINGIO:
            py, why = uringio_python()
            if py is None:
                raise RuntimeError(why)
            cmd = [py, "-m", "benchmarks.uringio_peer", "echo"]
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


def cpu_seconds(pid: int) -> tuple[float, float]:
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
    before = cpu_seconds(server_pid) if server_pid else None
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
        after = cpu_seconds(server_pid)  # type: ignore[arg-type]
        requests = rps * seconds
        cpu = ((after[0] - before[0]) / requests * 1e6, (after[1] - before[1]) / requests * 1e6)
    return Sample(rps, p99_us=p99, p50_us=p50, cpu_us=cpu)
