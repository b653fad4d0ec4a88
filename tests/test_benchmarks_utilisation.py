"""benchmarks.utilisation: a server kind with its environment settings, and the counters it
sums over a process's threads."""

from __future__ import annotations

import os

import pytest

from benchmarks import utilisation


def test_parse_kind():
    assert utilisation.parse_kind("uvloop-protocol") == ("uvloop-protocol", {})
    assert utilisation.parse_kind("tinycoro:TINYCORO_RING_FLAGS=COOP_TASKRUN,SINGLE_ISSUER+A=1") == (
        "tinycoro", {"TINYCORO_RING_FLAGS": "COOP_TASKRUN,SINGLE_ISSUER", "A": "1"})
    with pytest.raises(ValueError, match="VAR=VALUE"):
        utilisation.parse_kind("tinycoro:PLAIN")


def test_thread_counters_of_this_process():
    c = utilisation.thread_counters(os.getpid())
    assert set(c) == {"ticks", "run_ns", "wait_ns", "vol", "invol"}
    assert c["run_ns"] > 0 and all(v >= 0 for v in c.values())
