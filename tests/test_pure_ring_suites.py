"""The core, I/O and sync suites once more on the pure-Python ring, inside the one pytest run.

The rest of the run uses the compiled ring when it is built; this test runs those suites in a
child pytest with ``TINYCORO_PURE_RING=1`` so that both rings pass them in CI without a
second command. Where the extension is not built the whole run is already on the pure ring, and
this test skips as redundant.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tinycoro import uring

HERE = Path(__file__).resolve().parent

# core (scheduler, tasks, timers, signals, combinators, channel), I/O (files, sockets), sync
SUITES = [
    "test_scheduler.py",
    "test_tasks.py",
    "test_timers.py",
    "test_signals.py",
    "test_combinators.py",
    "test_channel.py",
    "test_files.py",
    "test_net.py",
    "test_ring.py",
] + sorted(p.name for p in HERE.glob("test_sync_*.py"))


@pytest.mark.timeout(900)
def test_core_io_sync_suites_pass_on_the_pure_ring():
    if not uring.COMPILED:
        pytest.skip(f"this run is on the pure ring already ({uring.WHY_PURE})")
    files = [str(HERE / name) for name in SUITES if (HERE / name).exists()]
    env = dict(os.environ, TINYCORO_PURE_RING="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=-ra", *files]
    out = subprocess.run(cmd, cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=880)
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-40:])
    assert out.returncode == 0, f"pure-ring run failed ({out.returncode}):\n{tail}"
    assert " passed" in tail
