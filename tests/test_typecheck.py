"""The type checker as a test, so the README's one test command (and CI) runs it: mypy over
``tinycoro``, ``kernel_ext`` and ``benchmarks`` with the settings in pyproject.toml
([tool.mypy]). An error fails the test and is listed in full."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(420)
def test_mypy_is_clean():
    # No arguments: the files and settings come from pyproject.toml, as for a developer's `mypy`.
    r = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    assert r.returncode == 0, "mypy found:\n" + r.stdout + r.stderr
