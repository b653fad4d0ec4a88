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
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .echo_procs import EchoLoadMissing, EchoServer, build_echo_load
from .http_server import RESPONSE
from .instructions import dumps_in
from .w_conns import REQUEST, SIZE, descriptors_for

_SUMMARY = re.compile(r"^(?:totals|summary):\s+(.*)$", re.M)
_EVENTS = re.compile(r"^events:\s+(.*)$", re.M)


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
    size, response = (REQUEST, len(RESPONSE)) if http else (SIZE, None)
    module = "benchmarks.http_server" if http else "benchmarks.echo_server"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        wrap = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"]
        srv = EchoServer(kind, 1, wrap=wrap + (["--cache-sim=yes"] if cache else []),
                         ready_timeout=300.0, module=module)
        try:
            pid = str(srv.proc.pid)
            cmd = [str(exe), "127.0.0.1", str(srv.port), str(conns), str(size), f"{seconds:g}"]
            with subprocess.Popen(
                cmd + ([str(response)] if response else []), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, env=dict(os.environ, ECHO_LOAD_GATE=f"{warm:g}"),
            ) as load:
                assert load.stdin is not None and load.stdout is not None
                if load.stdout.readline().strip() != "GATE":
                    raise RuntimeError("echo_load did not reach its gate")
                subprocess.run([control, "--zero", pid], check=True, capture_output=True, timeout=120)
                load.stdin.write("go\n")
                load.stdin.flush()
                line = load.stdout.readline()
                subprocess.run([control, "--dump", pid], check=True, capture_output=True, timeout=120)
                load.stdin.write("end\n")
                load.stdin.close()
        finally:
            srv.close()
        m = re.search(r"done=(\d+) .*errors=(\d+)", line)
        if m is None or int(m[2]) or not int(m[1]):
            raise RuntimeError(f"echo_load: {line.strip()!r}")
        requests = int(m[1])
        # the dump made on request is the first; the one at exit holds the shutdown too
        dump = dumps_in(Path(d), "cg.out")[0]
        text = dump.read_text()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(dump, keep / f"cg.{kind}.{'http' if http else 'echo'}.{conns}")
    events = _EVENTS.search(text)[1].split()  # type: ignore[index]
    totals = [int(v) for v in _SUMMARY.search(text)[1].split()]  # type: ignore[index]
    return {e: v / requests for e, v in zip(events, totals)}, requests


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.connscost", description=__doc__.split("\n\n")[0])
    ap.add_argument("kinds", nargs="+", metavar="KIND", help="tinycoro, uvloop-protocol, ...")
    ap.add_argument("--conns", type=int, nargs="+", default=[50, 1000, 10_000])
    ap.add_argument("--http", action="store_true", help="the HTTP-style server, not the echo")
    ap.add_argument("--seconds", type=float, default=4.0, help="the counted run")
    ap.add_argument("--warm", type=float, default=3.0, help="load before the counters are zeroed")
    ap.add_argument("--cache", action="store_true", help="callgrind's cache simulation (misses)")
    ap.add_argument("--keep", type=Path, help="copy each dump into this directory")
    args = ap.parse_args(argv)
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
