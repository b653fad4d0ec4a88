"""Static checks as tests, so CI runs them with everything else: pyflakes (unused imports and
names, undefined names) over every Python tree of the project, and vulture (dead code at 80 %
confidence or more) over the two packages. A finding fails the test and is listed in full."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WHITELIST = Path(__file__).resolve().parent / "vulture_whitelist.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _waived(finding: str) -> bool:
    """A finding on a line marked ``# noqa`` (as flake8 honours it; pyflakes alone does not),
    e.g. an import that only probes whether an optional package is installed."""
    path, _, rest = finding.partition(":")
    line = rest.split(":", 1)[0]
    if not line.isdigit() or not (ROOT / path).is_file():
        return False
    lines = (ROOT / path).read_text().splitlines()
    return int(line) <= len(lines) and "# noqa" in lines[int(line) - 1]


@pytest.mark.timeout(150)
def test_pyflakes_is_clean():
    trees = [t for t in ("tinycoro", "kernel_ext", "benchmarks", "tests") if (ROOT / t).is_dir()]
    r = _run("pyflakes", *trees)
    findings = [f for f in (r.stdout + r.stderr).splitlines() if f.strip() and not _waived(f)]
    assert not findings, "pyflakes found:\n" + "\n".join(findings)


@pytest.mark.timeout(150)
def test_vulture_finds_no_dead_code():
    r = _run("vulture", "--min-confidence", "80", "tinycoro", "kernel_ext", str(WHITELIST))
    findings = (r.stdout + r.stderr).strip()
    assert r.returncode == 0 and not findings, f"vulture found (whitelist: {WHITELIST.name}):\n{findings}"
