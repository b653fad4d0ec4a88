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


# -- reaching into core objects through attributes -------------------------------------------------
# The import check above cannot see ``task._engine.add_deadline(...)``: a private attribute of a
# core object read from outside the core. Without types, the AST walk below finds those reach-ins
# in three ways:
#   * a private attribute that only core classes define (no class outside the core has one of
#     that name), on anything but ``self``/``cls``: ``t._engine``, ``task._waiting``;
#   * on a name that by convention holds a core object (``engine``, ``scheduler``), any private
#     attribute its core class defines: ``engine._enter()``. (Not ``task``: other layers have
#     task classes of their own, such as the cluster's RemoteTask, with private names a Task
#     also has; a Task's own private names are caught by the first rule.)
#   * through an engine to its ring: ``engine.ring.closed`` (the ring belongs to its owner; the
#     engine says what others may know of it).
# Each reach-in gets a name in the core instead (a public method or property).
CORE_NICKNAMES = {
    "engine": ("Engine", "RingOwner"),
    "owner": ("Engine", "RingOwner"),
    "scheduler": ("Scheduler",),
    "sched": ("Scheduler",),
}
# Reach-ins that stay until the module that makes them is rewritten, each with the seam that
# replaces it: (module path, attribute chain as written after the object's name).
KNOWN_REACH_INS: set[tuple[str, str]] = set()  # (path, chain) a reach-in allowed for now: none


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _class_attributes(paths) -> dict[str, set[str]]:
    """Per class name: the attribute names its body defines (methods, ``self.x = ...``
    assignments, ``__slots__`` entries)."""
    import ast

    out: dict[str, set[str]] = {}
    for path in paths:
        for cls in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(cls, ast.ClassDef):
                continue
            names = out.setdefault(cls.name, set())
            for node in cls.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    names.add(node.attr)
                elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
                ):
                    names.update(
                        e.value for e in ast.walk(node.value)
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    )
    return out


def _last_name(node) -> str | None:
    """``task`` for ``task``, ``self.task`` or ``_local.task``; None for anything else."""
    import ast

    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def core_reach_ins(root: Path, trees: dict[str, str] = BOUNDARY_TREES) -> list[str]:
    """Every attribute reach-in on a core object from a module outside tinycoro/core (see the
    rules above), as ``path:line: what``, less KNOWN_REACH_INS."""
    import ast

    core_dir = root / "tinycoro" / "core"
    core_paths = sorted(core_dir.glob("*.py")) if core_dir.is_dir() else []
    outside = []
    for tree_dir in trees:
        base = root / tree_dir
        if base.is_dir():
            outside += [p for p in sorted(base.rglob("*.py")) if core_dir not in p.parents]
    core_classes = _class_attributes(core_paths)
    core_private = {n for names in core_classes.values() for n in names if _is_private(n)}
    elsewhere = {n for names in _class_attributes(outside).values() for n in names}
    only_core = core_private - elsewhere
    by_nickname = {
        nick: {n for c in classes for n in core_classes.get(c, ()) if _is_private(n)}
        for nick, classes in CORE_NICKNAMES.items()
    }
    found = []
    for path in outside:
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            obj = node.value
            if isinstance(obj, ast.Name) and obj.id in ("self", "cls"):
                continue
            holder = _last_name(obj)
            chain = node.attr
            if (
                holder == "ring"
                and isinstance(obj, ast.Attribute)
                and _last_name(obj.value) in ("engine", "owner")
            ):
                chain = f"ring.{node.attr}"  # through an engine to its ring
            elif node.attr in only_core:
                pass
            elif not (holder in by_nickname and node.attr in by_nickname[holder]):
                continue
            if (rel, chain) not in KNOWN_REACH_INS:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(obj)}.{node.attr}")
    return found


def test_nothing_outside_the_core_reaches_into_core_objects():
    found = core_reach_ins(ROOT)
    assert not found, (
        "attributes of core objects reached from outside the core (give the core a public "
        "method or property for what is needed):\n" + "\n".join(found)
    )


CORE_FIXTURE = {
    "tinycoro/core/task.py": (
        "class Task:\n"
        "    __slots__ = ('_engine', '_waiting', '_lock')\n"
        "    def _finish(self): pass\n"
    ),
    "tinycoro/core/engine.py": (
        "class Engine:\n"
        "    def __init__(self):\n"
        "        self.ring = None\n"
        "    def _enter(self, op): pass\n"
    ),
    "tinycoro/core/scheduler.py": "class Scheduler:\n    def _pick(self): pass\n",
    "tinycoro/sync/lock.py": "class Lot:\n    def __init__(self):\n        self._lock = None\n",
    "tinycoro/cluster/remote.py": "class RemoteTask:\n    def _finish(self): pass\n",
}


@pytest.mark.parametrize(
    "where, source",
    [
        ("tinycoro/closing.py", "def f(t):\n    return t._engine.abandoning\n"),
        ("tinycoro/testing.py", "def f(x):\n    return x.task._waiting\n"),
        ("tinycoro/io.py", "def f(engine, op):\n    return engine._enter(op)\n"),
        ("tinycoro/x.py", "def f(sched):\n    return sched._pick()\n"),
        ("kernel_ext/runner.py", "def f(self):\n    return self.engine.ring.closed\n"),
        ("benchmarks/x.py", "def f(engine):\n    return engine.ring.cq_ready()\n"),
    ],
)
def test_the_reach_in_check_finds_a_planted_reach_in(tmp_path, where, source):
    for path, text in {**CORE_FIXTURE, where: source}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert len(core_reach_ins(tmp_path)) == 1, core_reach_ins(tmp_path)


@pytest.mark.parametrize(
    "where, source",
    [
        ("tinycoro/core/scheduler.py", "def f(t):\n    return t._engine\n"),  # inside the core
        ("tinycoro/x.py", "def f(task):\n    return task.engine, task.waiting_on()\n"),  # public
        ("tinycoro/x.py", "def f(lot):\n    return lot._lock\n"),  # a name classes outside share
        ("tinycoro/x.py", "class A:\n    def f(self):\n        return self._engine\n"),  # its own
        ("tinycoro/x.py", "def f(engine):\n    return engine.closed\n"),
        ("tinycoro/cluster/x.py", "def f(task):\n    task._finish()\n"),  # a RemoteTask's
    ],
)
def test_the_reach_in_check_allows_public_names(tmp_path, where, source):
    for path, text in {**CORE_FIXTURE, where: source}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert core_reach_ins(tmp_path) == []
