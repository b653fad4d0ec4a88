"""The suite passes however it is launched: a shell without job control (a CI script, `cmd &`
in `bash -c`) starts background jobs with SIGINT ignored, and every Ctrl-C test, and every child
a test starts, would inherit that. tests/conftest.py restores the signal; this checks it does, by
running a Ctrl-C test in a pytest started the way such a shell starts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.timeout(120)
def test_a_run_started_with_sigint_ignored_still_gets_ctrl_c():
    test = "test_signals.py::test_ctrl_c_while_tasks_run_cancels_them_and_raises[ctx1]"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider",
         "-o", "addopts=", "--timeout", "60", test],
        cwd=TESTS, preexec_fn=_ignore_sigint, capture_output=True, text=True, timeout=110,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout
