"""A pytest plugin for a free-threaded CPython: the GIL must stay off for the whole run.

``.ci/run`` loads it (``-p helpers.gil_guard``) where it runs the runtime suites with the GIL
off and no ``PYTHON_GIL`` override. Importing an extension module that does not declare that it
runs without the GIL turns the GIL on for the process, and the tests would then go on passing
under it: the test during which that happened fails instead, and so does the run when the GIL
was already on before the first test (a plugin or conftest import turned it on).
"""

from __future__ import annotations

import sys
import sysconfig

import pytest

_FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _gil_enabled() -> bool:
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _FREE_THREADED:
        raise pytest.UsageError("helpers.gil_guard: this interpreter is not a free-threaded build")
    if _gil_enabled():
        raise pytest.UsageError("helpers.gil_guard: the GIL is on before the first test "
                                "(PYTHON_GIL=1, or an import at start-up turned it on)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    was_on = _gil_enabled()
    result = yield
    if not was_on and _gil_enabled():
        raise AssertionError(f"the GIL was turned on during {item.nodeid} (a module it imported "
                             "does not declare that it runs without the GIL)")
    return result
