"""A server's CPU per connection to set one up and to tear it down, apart from its requests:
``python -m benchmarks.profile --setup KIND [KIND ...]`` (``--conns``, default 10,000).

The connection-count rows (:mod:`benchmarks.w_conns`) dial every connection before their
window and close them all after it, and their CPU column divides the server's CPU over the
whole run (the dial and, partly, the close included) by the requests of the window: at
10,000 connections and ~27 requests per connection in a 3 s window, each microsecond of
set-up is ~0.04 us per request there. Which part of a row's CPU is the connections' own
is measured here, per phase, on the HTTP-style server of those rows (one context):

- *set-up*: this process dials *conns* connections (plain blocking sockets) and sends one
  request on each, then reads every response: the server's accepts, its per-connection
  objects and tasks, and one request each;
- *request*: five more requests on each connection, one connection after another (a
  serial client, so its rate is not the rows'; its CPU per request is a reference);
- *tear-down*: every connection closed, until the server's CPU stops growing.

The CPU is the scheduler's exact runtime of every thread of the server
(``/proc/PID/task/*/schedstat``), so short phases need no ticks; its user/system split comes
from ``/proc`` ticks. Kinds alternate, repeated ``reps`` times; a loaded machine moves the
figures, the difference between kinds much less.
"""

from __future__ import annotations

import os
import socket
import time

from .echo_procs import EchoServer, cpu_seconds
from .utilisation import parse_kind, thread_counters

REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n" + b"X-Pad: " + b"x" * 78 + b"\r\n\r\n"
MORE = 5  # requests per connection in the request phase
QUIET = 0.2  # seconds with no growth of the server's CPU that end the tear-down phase


def runtime(pid: int) -> float:
    """Seconds every thread of *pid* has run so far (the scheduler's exact count)."""
    return thread_counters(pid)["run_ns"] / 1e9


def _settled(pid: int, timeout: float = 30.0) -> float:
    """The server's runtime once it stopped growing for QUIET seconds (at most *timeout*)."""
    last = runtime(pid)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(QUIET)
        now = runtime(pid)
        if now - last < QUIET * 0.01:
            return now
        last = now
    return last


def one_run(srv: EchoServer, conns: int) -> dict[str, float]:
    """us per connection for set-up and tear-down, us per request for the request phase, and
    the set-up's user and system share (ticks), for one server."""
    pid = srv.proc.pid
    socks: list[socket.socket] = []
    start = _settled(pid)
    ticks = cpu_seconds(pid)
    try:
        for _ in range(conns):
            socks.append(socket.create_connection(("127.0.0.1", srv.port)))
        for s in socks:
            s.sendall(REQUEST)
        for s in socks:
            if not s.recv(4096).startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{srv.kind}: not an HTTP response")
        set_up = _settled(pid)
        ticks_after = cpu_seconds(pid)
        for _ in range(MORE):
            for s in socks:
                s.sendall(REQUEST)
            for s in socks:
                s.recv(4096)
        served = _settled(pid)
    finally:
        for s in socks:
            s.close()
    torn = _settled(pid)
    return {
        "set-up us/conn": (set_up - start) / conns * 1e6,
        "user": (ticks_after[0] - ticks[0]) / conns * 1e6,
        "sys": (ticks_after[1] - ticks[1]) / conns * 1e6,
        "request us": (served - set_up) / (conns * MORE) * 1e6,
        "tear-down us/conn": (torn - served) / conns * 1e6,
    }


def main(kinds: list[str], conns: int = 10_000, reps: int = 2) -> int:
    from .w_conns import descriptors_for

    why = descriptors_for(conns)
    if why is not None:
        print(why)
        return 1
    servers = {}
    try:
        for spec in kinds:
            kind, env = parse_kind(spec)
            servers[spec] = EchoServer(kind, 1, env=env, module="benchmarks.http_server")
        print(f"{conns:,} connections, HTTP-style server, 1 context; load average "
              f"{os.getloadavg()[0]:.1f}")
        for rep in range(reps):
            order = kinds if rep % 2 == 0 else kinds[::-1]
            for spec in order:
                r = one_run(servers[spec], conns)
                print(f"  {spec}: set-up {r['set-up us/conn']:.1f} us/conn (user {r['user']:.1f} + "
                      f"sys {r['sys']:.1f}, ticks), request {r['request us']:.1f} us (serial), "
                      f"tear-down {r['tear-down us/conn']:.1f} us/conn", flush=True)
    finally:
        for srv in servers.values():
            srv.close()
    return 0
