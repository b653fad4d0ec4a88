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


def wait_until(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    """Block the calling (non-context) thread until *predicate()* holds.

    Used to wait for a runtime *state* (a context asleep in its eventfd, a task parked), which
    has no event of its own; fails loudly instead of hanging.
    """
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0005)
