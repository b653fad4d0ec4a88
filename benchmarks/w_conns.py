"""5b. By connection count: 64 B echo, and HTTP-style request/response (a 128 B request, a
78 B response: :mod:`benchmarks.http_server`), at 50, 200, 1,000 and 10,000 connections.

The echo rows of :mod:`benchmarks.w_echo` run at 50 connections, where the receive path never
ran short of anything; a cliff along the connection axis (the multishot recv's shared buffer
pool running dry, its CQEs not fitting the completion queue) stayed hidden there. These rows
walk that axis with the same C load generator and server processes: tinycoro with default
settings, tinycoro with ``TINYCORO_MULTISHOT=0`` (the single recv, for where the default path
stands against its fallback) and uvloop's protocol path, the fastest Python loop. 10,000
connections need as many descriptors in the load generator and in each server: the soft
``ulimit -n`` is raised to the hard limit for this run, and a row that still does not fit is
reported as skipped with the reason.
"""

from __future__ import annotations

import functools
import resource
from contextlib import ExitStack

from .config import Config
from .harness import Case, Ratio, Series
from .http_server import RESPONSE
from .echo_procs import EchoLoadMissing, EchoServer, build_echo_load, run_load
from .w_echo import servers

NAME = "conns"
WORKLOAD = "TCP echo by connections"
SIZE = 64
# connection counts and seconds per repetition, by mode
COUNTS = {"full": (50, 200, 1000, 10000), "quick": (50, 1000, 10000), "tiny": (50, 200)}
SECONDS = {"full": 3.0, "quick": 1.5, "tiny": 0.2}
SINGLE = "tinycoro single recv"
UVLOOP_PROTOCOL = "uvloop protocol"
# target: the default path at uvloop protocol's rate at every count (issue of record: 0.95x)
TARGET = 0.95
_SERVERS = {
    "tinycoro": ("tinycoro", {}),
    SINGLE: ("tinycoro", {"TINYCORO_MULTISHOT": "0"}),
    UVLOOP_PROTOCOL: ("uvloop-protocol", {}),
}


REQUEST = 128  # bytes of each HTTP-style request (a GET with a few headers)
HTTP = "HTTP-style request/response"


def descriptors_for(conns: int) -> str | None:
    """None if this process (and so its children) may open *conns* sockets and some to
    spare, after raising the soft limit to the hard one; else why not."""
    want = conns + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else hard, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < want:
        return f"ulimit -n is {soft}; {conns:,} connections need {want:,} descriptors"
    return None


def _servers(stack: ExitStack, contexts: int, http: bool) -> dict[str, EchoServer | str]:
    def start(kind: str, env: dict[str, str]) -> EchoServer:
        return EchoServer(kind, contexts, env=env, module="benchmarks.http_server" if http else "benchmarks.echo_server")

    return servers(stack, _SERVERS, start)


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    counts = COUNTS.get(cfg.mode, COUNTS["full"])
    seconds = SECONDS.get(cfg.mode, cfg.echo_seconds)
    try:
        exe = build_echo_load()
        skip = None
    except EchoLoadMissing as e:
        exe, skip = None, str(e)
    limits = {n: descriptors_for(n) for n in counts}  # before the servers start: they inherit it
    cases = []
    for http in (False, True):
        running = _servers(stack, cfg.contexts, http) if exe else {}
        size, response = (REQUEST, len(RESPONSE)) if http else (SIZE, None)
        for conns in counts:
            series = []
            for label in _SERVERS:
                srv = running.get(label)
                if exe is None or srv is None:
                    series.append(Series(label))
                elif isinstance(srv, str):
                    series.append(Series(label, skip=srv))
                else:
                    series.append(Series(label, functools.partial(
                        run_load, exe, srv.port, conns, size, seconds, srv.proc.pid, response)))
            ratios = [Ratio("tinycoro", UVLOOP_PROTOCOL, TARGET), Ratio("tinycoro", SINGLE)]
            what = f"{REQUEST} B request, {len(RESPONSE)} B response" if http else f"{SIZE} B echo"
            cases.append(Case(HTTP if http else WORKLOAD, f"{what}, {conns:,} conns", "req/s", series,
                              ratios, skip=skip or limits[conns]))
    return cases
