"""pytest plugin for tools/tsan_suites.sh: every test's timeout, its own mark's too, times
TINYCORO_TSAN_TIMEOUT_SCALE (default 10). ThreadSanitizer makes the code 5-15x slower, and a
test's own ``@pytest.mark.timeout`` (which wins over ``--timeout``) is sized for a plain run:
a test that then times out says nothing about a race."""

from __future__ import annotations

import os

import pytest

SCALE = float(os.environ.get("TINYCORO_TSAN_TIMEOUT_SCALE", "10"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("timeout")
        seconds = None if mark is None else mark.kwargs.get("timeout", mark.args[0] if mark.args else None)
        if seconds is not None:
            # first among the item's marks: the closest one, which pytest-timeout reads
            item.add_marker(pytest.mark.timeout(float(seconds) * SCALE), append=False)
