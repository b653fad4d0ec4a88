"""Shared fixtures: context counts to run concurrency tests on, and leak checks."""

from __future__ import annotations

import os
import threading

import pytest

CONTEXT_COUNTS = (1, 2, 4)


@pytest.fixture(params=CONTEXT_COUNTS, ids=lambda n: f"ctx{n}")
def contexts(request) -> int:
    """Run the test once per context count: 1, 2 and 4 threads."""
    return request.param


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def tinycoro_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tinycoro-")]
