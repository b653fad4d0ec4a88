"""The cluster benchmark's echo controls (``benchmarks.w_cluster.two_processes``): two plain
tinycoro echo servers on one port, as ``cluster.serve`` puts the engines, in this session or
each in a session of its own (no speed asserted)."""

from __future__ import annotations

import os
import socket
from contextlib import ExitStack

import pytest

from benchmarks.w_cluster import _established, two_processes

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("own_sessions", [False, True])
def test_two_server_processes_share_one_port_and_both_serve(own_sessions) -> None:
    with ExitStack() as stack:
        pair = two_processes(stack, own_sessions=own_sessions)
        port = pair[0].port
        sessions = {os.getsid(srv.proc.pid) for srv in pair}
        if own_sessions:  # each leads a session of its own, as ipyparallel starts the engines
            assert sessions == {srv.proc.pid for srv in pair}
        else:
            assert sessions == {os.getsid(0)}
        assert pair[1].port == port
        conns = [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
                 for _ in range(32)]
        for i, c in enumerate(conns):  # an echo on each: every connection was accepted
            c.sendall(bytes([i]) * 64)
            got = b""
            while len(got) < 64:
                got += c.recv(64 - len(got))
            assert got == bytes([i]) * 64
        counts = _established([srv.proc.pid for srv in pair], port)
        # the kernel hashes each connection to one of the two listeners: with 32 of them, one
        # process left without any has a chance of 2 ** -31
        assert sum(counts.values()) == 32 and min(counts.values()) > 0, counts
