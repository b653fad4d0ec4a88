"""Instructions per echo request, counted by callgrind: ``python -m benchmarks.profile
--instructions KIND``, ``--pingpong`` and ``--mutex``.

Unlike a rate or a CPU time, an instruction count does not move with the machine's load, so it
compares runs made on a busy machine, and runs of one server under two Python versions.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tinycoro as tc

from . import echo_procs
from .config import REPO, checkout_env

_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.M)


def echo_instructions(
    kind: str = "tinycoro", seconds: float = 2.0, conns: int = 50, size: int = 64
) -> tuple[float | None, str]:
    """User-space instructions the echo server *kind* executes per request, counted by
    callgrind, and how: ``(value, note)``, or ``(None, why not)``.

    Unlike a rate or CPU time, an instruction count does not move with the machine's load, so
    it compares runs made on a busy machine. The server runs under ``valgrind
    --tool=callgrind``; its counters are zeroed after a warm-up (imports, the first
    connections), then echo_load drives it for *seconds* and the counters are dumped: the
    total over every thread of the server, kernel time excluded, divided by the requests.
    """
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        return None, "valgrind (callgrind) not installed"
    try:
        exe = echo_procs.build_echo_load()
    except echo_procs.EchoLoadMissing as e:
        return None, str(e)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        wrap = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"]
        srv = echo_procs.EchoServer(kind, 1, wrap=wrap, ready_timeout=300.0)
        try:
            pid = str(srv.proc.pid)
            echo_procs.run_load(exe, srv.port, conns, size, 1.0)  # warm-up: connections, caches
            subprocess.run([control, "--zero", pid], check=True, capture_output=True, timeout=60)
            sample = echo_procs.run_load(exe, srv.port, conns, size, seconds)
            subprocess.run([control, "--dump", pid], check=True, capture_output=True, timeout=60)
        finally:
            srv.close()
        dumps = sorted(
            (p for p in Path(d).iterdir() if p.name.startswith("cg.out")),
            key=lambda p: p.stat().st_mtime,
        )
        totals = [int(m[1]) for p in dumps for m in [_TOTALS.search(p.read_text())] if m]
    # the dump made on request comes first; the one valgrind writes at exit (after the zero)
    # holds the same counts plus the shutdown
    if not totals:
        return None, "callgrind wrote no counts"
    requests = sample.value * seconds
    return totals[0] / requests, f"{requests:,.0f} requests under callgrind ({sample.value:,.0f} req/s)"


def pingpong(n: int, size: int = 64) -> None:
    """*n* echo round trips over one loopback connection, client and server both tinycoro
    tasks on one context: a workload whose every turn is the same, whatever the machine's
    load, for :func:`pingpong_instructions`."""

    async def main() -> None:
        lst = await tc.net.listen("127.0.0.1", 0)

        async def serve() -> None:
            conn = await lst.accept()
            recv, sendall = conn.recv, conn.sendall
            while True:
                data = await recv(65536)
                if not data:
                    break
                await sendall(data)
            await conn.close()

        server = tc.spawn(serve())
        client = await tc.net.connect("127.0.0.1", lst.port)
        msg = b"x" * size
        for _ in range(n):
            await client.sendall(msg)
            await client.recv(65536)
        await client.close()
        await server
        await lst.close()

    tc.run(main(), contexts=1)


def mutex(n: int, kind: str = "tinycoro") -> None:
    """*n* uncontended lock/unlock pairs of one task: a ``tc.Mutex`` (*kind* ``tinycoro``) or
    an ``asyncio.Lock`` (``asyncio``), the loop of w_mutex's uncontended row, for
    :func:`mutex_instructions`."""
    if kind == "asyncio":
        import asyncio

        async def aio() -> None:
            lock = asyncio.Lock()
            for _ in range(n):
                await lock.acquire()
                lock.release()

        asyncio.run(aio())
        return

    tc.run(lock_unlock(n), contexts=1)


async def lock_unlock(n: int) -> None:
    """*n* uncontended ``await m.lock(); m.unlock()`` of one ``tc.Mutex``: :func:`mutex`'s
    loop, and ``benchmarks.trapcost``'s ``mutex``."""
    m = tc.Mutex()
    for _ in range(n):
        await m.lock()
        m.unlock()


class CallgrindFailed(RuntimeError):
    pass


def dumps_in(folder: Path, name: str) -> list[Path]:
    """The dumps callgrind wrote to ``--callgrind-out-file=folder/name``, in the order written:
    several (one per ``--dump-before=`` or ``callgrind_control --dump``, then one at exit) are
    *name*.1, *name*.2, ...; a run that made none wrote *name* alone, at exit."""
    numbered = sorted(folder.glob(f"{name}.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
    return numbered or [p for p in [folder / name] if p.exists()]


def callgrind_totals(child: list[str], *options: str, timeout: float = 900) -> list[int]:
    """Run ``python -m *child*`` from this checkout under callgrind (with *options*, e.g.
    ``--dump-before=``): the instruction totals of the dumps it wrote, in order (one, at exit,
    without such an option), with a fixed hash seed so that two runs count alike. Needs valgrind on the ``PATH``; CallgrindFailed if the run fails."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = [shutil.which("valgrind") or "valgrind", "--tool=callgrind",
               f"--callgrind-out-file={out}", "--quiet", *options, sys.executable, "-m", *child]
        # a fixed hash seed: with a random one the same code counted 8,140 and 8,523
        # instructions per O_DIRECT read in two runs (dicts and sets probe differently)
        env = dict(checkout_env(), PYTHONHASHSEED="0")
        res = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True,
                             timeout=timeout)
        totals = [int(m[1]) for p in dumps_in(Path(d), "cg.out") for m in [_TOTALS.search(p.read_text())] if m]
    if res.returncode != 0 or not totals:
        raise CallgrindFailed(f"callgrind run failed: {res.stderr.strip()[-400:]}")
    return totals


_CHILDREN = {"--pingpong-run": "round trips", "--mutex-run": "acquisitions"}


def _per_unit(child: list[str], n: tuple[int, int]) -> tuple[float | None, str]:
    """Instructions per unit of the child run ``python -m benchmarks.instructions *child* N``,
    from two callgrind runs of N = *n* (the difference cancels start-up and shutdown)."""
    if shutil.which("valgrind") is None:
        return None, "valgrind (callgrind) not installed"
    try:
        totals = [callgrind_totals(["benchmarks.instructions", child[0], str(count), *child[1:]])[-1]
                  for count in n]
    except CallgrindFailed as e:
        return None, str(e)
    return (totals[1] - totals[0]) / (n[1] - n[0]), f"difference of {n[0]} and {n[1]} {_CHILDREN[child[0]]}"


def pingpong_instructions(n: tuple[int, int] = (1000, 5000)) -> tuple[float | None, str]:
    """Instructions per echo round trip of :func:`pingpong` (both sides: two sends, two recvs),
    from two callgrind runs of different lengths: ``(value, note)`` or ``(None, why not)``.
    Independent of the machine's load."""
    return _per_unit(["--pingpong-run"], n)


def mutex_instructions(kind: str = "tinycoro", n: tuple[int, int] = (20000, 120000)) -> tuple[float | None, str]:
    """Instructions per uncontended acquire + release of :func:`mutex` (*kind* ``tinycoro`` or
    ``asyncio``), as :func:`pingpong_instructions` counts them. The tinycoro loop includes
    the cooperative budget's yield every so many acquisitions, as the timed row does."""
    return _per_unit(["--mutex-run", kind], n)


if __name__ == "__main__":  # the child of _per_unit, run under callgrind
    if len(sys.argv) < 3 or sys.argv[1] not in _CHILDREN:
        raise SystemExit("usage: python -m benchmarks.instructions --pingpong-run N | --mutex-run N [KIND]")
    if sys.argv[1] == "--pingpong-run":
        pingpong(int(sys.argv[2]))
    else:
        mutex(int(sys.argv[2]), *sys.argv[3:4])
