"""The runtime's suites (core, I/O, sync) once more on the pure-Python ring, in the same run.

The rest of the run uses the compiled ring when it is built; this test runs those suites in a
child pytest with ``TINYCORO_PURE=1`` (tinycoro.compiled's one switch) so that both runtimes pass them in CI without a
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

# Every suite of the runtime (core, I/O, sync, combinators, channels, the ring itself); not the
# Jupyter, notebook, dashboard, browser, interrupt, model-based, lint and benchmark suites,
# which exercise no more of the ring.
NOT_RUNTIME = (
    "test_kernel_",
    "test_magics",
    "test_notebook_",
    "test_browser_",
    "test_dashboard",
    "test_benchmarks_",
    "test_aio_kernel",
    "test_interrupts_kernel",
    "test_lint",
    "test_typecheck",  # mypy reads the source, it runs no ring
    "test_cluster",  # ipyparallel's plumbing, minutes of engine start-ups; ring paths seen above
    "test_interrupts_script",  # signal handling in child processes: no ring path of its own
    "test_stateful_",  # the primitives' logic against models: the same on either ring
)
SUITES = sorted(
    p.name
    for p in HERE.glob("test_*.py")
    if p.name != Path(__file__).name and not p.name.startswith(NOT_RUNTIME)
)


@pytest.mark.timeout(900)
def test_core_io_sync_suites_pass_on_the_pure_ring():
    if not uring.COMPILED:
        pytest.skip(f"this run is on the pure ring already ({uring.WHY_PURE})")
    files = [str(HERE / name) for name in SUITES]
    env = dict(os.environ, TINYCORO_PURE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=-ra", *files]
    out = subprocess.run(cmd, cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=880)
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-40:])
    assert out.returncode == 0, f"pure-ring run failed ({out.returncode}):\n{tail}"
    assert " passed" in tail
