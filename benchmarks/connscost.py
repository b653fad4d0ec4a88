"""Instructions (and, with ``--cache``, cache misses) per request of a connection-count row's
server, steady state only: ``python -m benchmarks.connscost KIND [KIND ...] --conns N
[--http] [--cache]``.

``benchmarks.profile --instructions`` zeroes callgrind's counters before a fresh load run, so
its sample includes the dial of every connection and part of their tear-down: at 50
connections that is noise, at 10,000 under callgrind (a few thousand requests per second) it
is most of the count. Here the load generator runs gated (``ECHO_LOAD_GATE``, see
benchmarks/echo_load.c): it dials, loads every connection for a warm-up, lets every message in
flight come back, and waits; the counters are zeroed, the run goes on for *seconds*, drains
again and waits while they are dumped. Every request counted was served in between, and
nothing else was: what grows with the connection count per request shows, apart from what
each connection costs once (``benchmarks.profile --setup``).

Under callgrind a server is far from its full rate, so its turns are short (a turn's fixed
cost falls on fewer requests) and inline sends happen more often than at full rate: compare
counts at different connection counts, made this way, not with the rows' rates.

With ``--cpu`` the servers run at full rate instead, one process per kind (``KIND:VAR=VALUE``
sets a server's environment, as ``benchmarks.profile --utilisation``), alternating for
``--rounds`` rounds, and the same gates bound each sample: the server's CPU per request is the
scheduler's exact runtime of its threads between the gates (``/proc/PID/task/*/schedstat``;
the user/system split from ``/proc`` ticks), the dial and the tear-down left out, where the
rows' CPU column carries both. A server that uses less CPU per request in these windows
serves more requests in the rows once the machine is its only bottleneck (``util`` near 1).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .echo_procs import EchoLoadMissing, EchoServer, build_echo_load, cpu_seconds
from .http_server import RESPONSE
from .instructions import dumps_in
from .utilisation import parse_kind, thread_counters
from .w_conns import REQUEST, SIZE, descriptors_for

_SUMMARY = re.compile(r"^(?:totals|summary):\s+(.*)$", re.M)
_EVENTS = re.compile(r"^events:\s+(.*)$", re.M)


def _gated(exe: Path, srv: EchoServer, conns: int, http: bool, seconds: float, warm: float,
           between: Any) -> tuple[int, Any]:
    """One gated load run against *srv* (module doc): the requests counted between the gates
    and what *between* returned, called once at each gate (the first call's result is passed
    to the second)."""
    size, response = (REQUEST, len(RESPONSE)) if http else (SIZE, None)
    cmd = [str(exe), "127.0.0.1", str(srv.port), str(conns), str(size), f"{seconds:g}"]
    with subprocess.Popen(
        cmd + ([str(response)] if response else []), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, ECHO_LOAD_GATE=f"{warm:g}"),
    ) as load:
        assert load.stdin is not None and load.stdout is not None
        if load.stdout.readline().strip() != "GATE":
            raise RuntimeError("echo_load did not reach its gate")
        first = between(None)
        load.stdin.write("go\n")
        load.stdin.flush()
        line = load.stdout.readline()
        result = between(first)
        load.stdin.write("end\n")
        load.stdin.close()
    m = re.search(r"done=(\d+) .*errors=(\d+)", line)
    if m is None or int(m[2]) or not int(m[1]):
        raise RuntimeError(f"echo_load: {line.strip()!r}")
    return int(m[1]), result


def per_request(
    kind: str, conns: int, http: bool = False, seconds: float = 4.0, warm: float = 3.0,
    cache: bool = False, keep: Path | None = None,
) -> tuple[dict[str, float], int]:
    """Callgrind's events per request of server *kind* (one context) at *conns* connections,
    the steady state only (module doc), and the requests counted. *keep*: a directory to
    copy the dump to (for ``callgrind_annotate``)."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        raise RuntimeError("valgrind (callgrind) not installed")
    why = descriptors_for(conns)
    if why:
        raise RuntimeError(why)
    exe = build_echo_load()
    module = "benchmarks.http_server" if http else "benchmarks.echo_server"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        wrap = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"]
        srv = EchoServer(kind, 1, wrap=wrap + (["--cache-sim=yes"] if cache else []),
                         ready_timeout=300.0, module=module)
        try:
            pid = str(srv.proc.pid)

            def mark(first: Any) -> bool:
                what = "--zero" if first is None else "--dump"
                subprocess.run([control, what, pid], check=True, capture_output=True, timeout=120)
                return True

            requests, _ = _gated(exe, srv, conns, http, seconds, warm, mark)
        finally:
            srv.close()
        # the dump made on request is the first; the one at exit holds the shutdown too
        dump = dumps_in(Path(d), "cg.out")[0]
        text = dump.read_text()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(dump, keep / f"cg.{kind}.{'http' if http else 'echo'}.{conns}")
    events = _EVENTS.search(text)[1].split()  # type: ignore[index]
    totals = [int(v) for v in _SUMMARY.search(text)[1].split()]  # type: ignore[index]
    return {e: v / requests for e, v in zip(events, totals)}, requests


def cpu_per_request(
    kinds: list[str], conns: int, http: bool = False, seconds: float = 3.0, warm: float = 2.0,
    rounds: int = 4,
) -> dict[str, list[dict[str, float]]]:
    """Per kind, one entry per round: req/s, the server's CPU (user, system, total) per request
    in microseconds and its CPU over wall (``util``), steady state only, at full rate, the
    kinds alternating (module doc)."""
    why = descriptors_for(conns)
    if why:
        raise RuntimeError(why)
    exe = build_echo_load()
    module = "benchmarks.http_server" if http else "benchmarks.echo_server"
    out: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    servers = {}
    try:
        for spec in kinds:
            kind, env = parse_kind(spec)
            servers[spec] = EchoServer(kind, 1, env=env, module=module)
        for r in range(rounds):
            for spec in kinds if r % 2 == 0 else kinds[::-1]:
                pid = servers[spec].proc.pid

                def mark(first: Any, pid: int = pid) -> Any:
                    now = (time.monotonic(), thread_counters(pid)["run_ns"], cpu_seconds(pid))
                    if first is None:
                        return now
                    return now[0] - first[0], now[1] - first[1], (
                        now[2][0] - first[2][0], now[2][1] - first[2][1])

                done, (wall, ns, (user, system)) = _gated(
                    exe, servers[spec], conns, http, seconds, warm, mark)
                total = ns / 1e3 / done
                share = user / (user + system) if user + system else 0.0
                out[spec].append(dict(rps=done / wall, user=total * share, sys=total * (1 - share),
                                      cpu=total, util=ns / 1e9 / wall))
    finally:
        for srv in servers.values():
            srv.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.connscost", description=__doc__.split("\n\n")[0])
    ap.add_argument("kinds", nargs="+", metavar="KIND", help="tinycoro, uvloop-protocol, ...")
    ap.add_argument("--conns", type=int, nargs="+", default=[50, 1000, 10_000])
    ap.add_argument("--http", action="store_true", help="the HTTP-style server, not the echo")
    ap.add_argument("--seconds", type=float, default=4.0, help="the counted run")
    ap.add_argument("--warm", type=float, default=3.0, help="load before the counters are zeroed")
    ap.add_argument("--cache", action="store_true", help="callgrind's cache simulation (misses)")
    ap.add_argument("--keep", type=Path, help="copy each dump into this directory")
    ap.add_argument("--cpu", action="store_true",
                    help="no callgrind: the servers' CPU per request at full rate, alternating")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of --cpu")
    args = ap.parse_args(argv)
    if args.cpu:
        for conns in args.conns:
            try:
                runs = cpu_per_request(args.kinds, conns, args.http, args.seconds, args.warm, args.rounds)
            except (RuntimeError, EchoLoadMissing) as e:
                print(f"at {conns:,}: skipped: {e}")
                continue
            for spec, rows in runs.items():
                shown = " | ".join(f"{x['rps'] / 1e3:.1f}k {x['cpu']:.2f} ({x['user']:.2f}+{x['sys']:.2f}) "
                                   f"util {x['util']:.2f}" for x in rows)
                med = statistics.median(x["cpu"] for x in rows)
                print(f"{spec} at {conns:,}: CPU us per request (user+sys) median {med:.2f}: {shown}",
                      flush=True)
        return 0
    for conns in args.conns:
        for kind in args.kinds:
            try:
                per, requests = per_request(kind, conns, args.http, args.seconds, args.warm, args.cache, args.keep)
            except (RuntimeError, EchoLoadMissing) as e:
                print(f"{kind} at {conns:,}: skipped: {e}")
                continue
            shown = ", ".join(f"{e} {v:,.1f}" for e, v in per.items())
            print(f"{kind} at {conns:,} connections: {shown} per request ({requests:,} requests)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
