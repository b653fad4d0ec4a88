"""benchmarks.setupcost: a server's CPU per connection for set-up and tear-down."""

from __future__ import annotations

import os

import pytest

from benchmarks import setupcost
from benchmarks.echo_procs import EchoServer


def test_runtime_of_this_process():
    # schedstat's count of a running thread moves at the scheduler's events, not per read
    assert setupcost.runtime(os.getpid()) > 0


@pytest.mark.timeout(120)
def test_one_run_against_the_http_server():
    srv = EchoServer("tinycoro", 1, module="benchmarks.http_server")
    try:
        r = setupcost.one_run(srv, 20)
    finally:
        srv.close()
    assert set(r) == {"set-up us/conn", "user", "sys", "request us", "tear-down us/conn"}
    assert r["set-up us/conn"] > 0 and r["request us"] > 0 and r["tear-down us/conn"] >= 0
