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


# -- the core boundary -------------------------------------------------------------------------
# Modules outside tinycoro/core (the rest of the package, the notebook layer, the benchmarks)
# import only public names of the core: tinycoro.lowlevel and the core modules' public names
# are the seam (docs/lowlevel.md). The folders checked, and the package each one is installed as.
BOUNDARY_TREES = {"tinycoro": "tinycoro", "kernel_ext": "tinycoro.kernel_ext", "benchmarks": "benchmarks"}
CORE = "tinycoro.core"


def _module_name(path: Path, root: Path, trees: dict[str, str]) -> tuple[str, bool]:
    """(dotted name of the module at *path*, whether it is a package's __init__)."""
    rel = path.relative_to(root)
    parts = [trees[rel.parts[0]], *rel.parts[1:]]
    parts[-1] = parts[-1][: -len(".py")]
    is_init = parts[-1] == "__init__"
    if is_init:
        parts.pop()
    return ".".join(p for part in parts for p in part.split(".")), is_init


def _private(dotted: str) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in dotted.split("."))


def core_boundary_violations(root: Path, trees: dict[str, str] = BOUNDARY_TREES) -> list[str]:
    """Every import, in a module outside tinycoro/core, of an underscore name of the core: a
    private module (``tinycoro.core._x``) or a private name (``from .core.local import _local``,
    relative imports resolved), as ``path:line: what``."""
    import ast

    out = []
    for tree_dir in trees:
        base = root / tree_dir
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            name, is_init = _module_name(path, root, trees)
            if name == CORE or name.startswith(CORE + "."):
                continue  # inside the core
            package = name if is_init else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                found = []
                if isinstance(node, ast.Import):
                    found = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        anchor = package.split(".")
                        anchor = anchor[: len(anchor) - (node.level - 1)]
                        mod = ".".join(anchor + ([node.module] if node.module else []))
                    else:
                        mod = node.module or ""
                    found = [f"{mod}.{a.name}" for a in node.names]
                for dotted in found:
                    if (dotted == CORE or dotted.startswith(CORE + ".")) and _private(dotted[len(CORE):]):
                        out.append(f"{path.relative_to(root)}:{node.lineno}: imports {dotted}")
    return out


def test_nothing_outside_the_core_imports_its_private_names():
    found = core_boundary_violations(ROOT)
    assert not found, (
        "private names of tinycoro.core imported from outside it (use tinycoro.lowlevel or a "
        "public name of the core module; docs/lowlevel.md):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "where, source",
    [
        ("tinycoro/sync/x.py", "from ..core.local import _local\n"),
        ("tinycoro/x.py", "from .core import _ki\n"),
        ("tinycoro/x.py", "from .core._ki import SignalWakeup\n"),
        ("tinycoro/aio/__init__.py", "from ..core.local import _local as local\n"),
        ("kernel_ext/x.py", "from tinycoro.core.local import _local\n"),
        ("kernel_ext/x.py", "import tinycoro.core._ki\n"),
        ("benchmarks/x.py", "from tinycoro.core.task import _STRIPES\n"),
    ],
)
def test_the_boundary_check_finds_private_imports(tmp_path, where, source):
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    assert len(core_boundary_violations(tmp_path)) == 1


@pytest.mark.parametrize(
    "where, source",
    [
        ("tinycoro/core/engine.py", "from .local import _local\n"),  # inside the core
        ("tinycoro/sync/x.py", "from ..core.local import thread_state\n"),
        ("tinycoro/x.py", "from . import _source_tree\nfrom .sync import _lot\n"),  # not the core
        ("kernel_ext/x.py", "from tinycoro.lowlevel import Task\nfrom tinycoro.core import ki\n"),
        ("kernel_ext/x.py", "from .cell_loop import _noop\n"),  # tinycoro.kernel_ext's own
    ],
)
def test_the_boundary_check_allows_public_imports(tmp_path, where, source):
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    assert core_boundary_violations(tmp_path) == []
