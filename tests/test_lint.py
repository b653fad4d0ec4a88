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
                    mod = _resolve(node.level, node.module or "", package)
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
# The import check above cannot see ``task._engine.deadlines.add(...)``: a private attribute of a
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


# -- the import graph has no cycle -------------------------------------------------------------
# Modules of tinycoro/ and kernel_ext/ import each other in one direction: a cycle means two
# modules that cannot be read, tested or loaded one without the other, and an import order that
# works only by accident. The graph is read from the AST. An edge is any import of a module of
# the package, at module level or inside a function: a lazy import still says that one module
# needs the other, and one that exists only to dodge a cycle still is one. Imports under
# ``if TYPE_CHECKING:`` are not edges (they never run: annotations only). ``importlib.import_module``
# and ``__import__`` with a literal name are edges too. Importing ``a.b.c`` also loads the
# packages ``a`` and ``a.b`` first, but that is Python's doing, not a dependency of the module:
# not an edge. The benchmark harness is held to the same rule.
CYCLE_TREES = {"tinycoro": "tinycoro", "kernel_ext": "tinycoro.kernel_ext", "benchmarks": "benchmarks"}
# Edges that are not dependencies, each with the reason.
NOT_DEPENDENCIES = {
    # IPython's ``%load_ext tinycoro`` imports the package named and calls its
    # ``load_ipython_extension``: the hook must sit in ``tinycoro``, and all it does is hand over
    # to the notebook layer. No code of tinycoro calls it; only IPython, from above, does.
    ("tinycoro", "tinycoro.kernel_ext"),
}


def _is_type_checking(test) -> bool:
    import ast

    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(level: int, name: str, package: str) -> str:
    """The absolute name of ``from <level dots><name>`` in *package*."""
    if not level:
        return name
    anchor = package.split(".")
    anchor = anchor[: len(anchor) - (level - 1)]
    return ".".join(anchor + ([name] if name else []))


def _imports(tree, package: str):
    """(absolute module name, line) of every import that runs in a module's AST, whose package
    is *package*; for ``from m import x`` both ``m`` and ``m.x`` (the caller keeps the one that
    is a module)."""
    import ast

    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:  # only the body is type-only
                    yield from walk_one(other)
                continue
            yield from walk_one(child)

    def walk_one(node):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield [alias.name], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.level, node.module or "", package)
            for alias in node.names:
                yield [f"{base}.{alias.name}", base], node.lineno
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))
            )
        ):
            name = node.args[0].value
            level = len(name) - len(name.lstrip("."))
            yield [_resolve(level, name[level:], package)], node.lineno
        yield from walk(node)

    yield from walk(tree)


def import_graph(root: Path, trees: dict[str, str] = CYCLE_TREES) -> dict[str, dict[str, list[str]]]:
    """Per module of *trees*: each module of *trees* it imports, with where (``path:line``)."""
    import ast

    modules: dict[str, tuple[Path, bool]] = {}
    for tree_dir in trees:
        base = root / tree_dir
        if base.is_dir():
            for path in sorted(base.rglob("*.py")):
                name, is_init = _module_name(path, root, trees)
                modules[name] = (path, is_init)
    graph: dict[str, dict[str, list[str]]] = {}
    for name, (path, is_init) in modules.items():
        package = name if is_init else name.rpartition(".")[0]
        edges = graph.setdefault(name, {})
        for candidates, line in _imports(ast.parse(path.read_text(), str(path)), package):
            target = next((c for c in candidates if c in modules), candidates[-1])
            while target and target not in modules:  # ``import a.b.f`` where f is a name
                target = target.rpartition(".")[0]
            if target and target != name and (name, target) not in NOT_DEPENDENCIES:
                edges.setdefault(target, []).append(f"{path.relative_to(root)}:{line}")
    return graph


def _strongly_connected(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm,
    with an explicit stack: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def import_cycles(root: Path, trees: dict[str, str] = CYCLE_TREES) -> list[str]:
    """One line per group of modules that import each other in a ring: a shortest cycle through
    its first module, each step with where it is made, then the group's other members."""
    graph = import_graph(root, trees)
    out = []
    for component in _strongly_connected(graph):
        members = set(component)
        first = component[0]
        # breadth first from the first member back to it, inside the component
        came_from: dict[str, str] = {}
        frontier = [first]
        while first not in came_from:
            nxt_frontier = []
            for node in frontier:
                for nxt in sorted(graph[node]):
                    if nxt in members and nxt not in came_from:
                        came_from[nxt] = node
                        nxt_frontier.append(nxt)
            frontier = nxt_frontier
        path = [first]
        while len(path) == 1 or path[-1] != first:
            path.append(came_from[path[-1]])
        path.reverse()
        steps = " -> ".join(
            f"{a} ({graph[a][b][0]})" for a, b in zip(path, path[1:])
        ) + f" -> {first}"
        rest = sorted(members - set(path))
        out.append(steps + (f"; also in the cycle: {', '.join(rest)}" if rest else ""))
    return out


def test_the_import_graph_has_no_cycle():
    found = import_cycles(ROOT)
    assert not found, (
        "modules that import each other (move what both need into a module of its own, or let "
        "the lower one be handed what it needs through a named seam):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "files",
    [
        {"tinycoro/a.py": "from . import b\n", "tinycoro/b.py": "from .a import f\n"},
        {  # three modules, one import lazy
            "tinycoro/net/x.py": "from ..io import f\n",
            "tinycoro/io.py": "def f():\n    from .sync import g\n",
            "tinycoro/sync/__init__.py": "from ..net.x import h\n",
        },
        {  # across the two folders, absolute imports, the notebook layer's installed name
            "tinycoro/cluster/api.py": "import importlib\nm = importlib.import_module('tinycoro.kernel_ext.board')\n",
            "kernel_ext/board.py": "import tinycoro.cluster.api\n",
        },
        {  # the else of a TYPE_CHECKING test runs
            "tinycoro/a.py": "if TYPE_CHECKING:\n    pass\nelse:\n    from . import b\n",
            "tinycoro/b.py": "import tinycoro.a\n",
        },
    ],
)
def test_the_cycle_check_finds_a_planted_cycle(tmp_path, files):
    for where, source in files.items():
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(source)
    found = import_cycles(tmp_path)
    assert len(found) == 1, found
    assert all(Path(where).stem in found[0] for where in files if not where.endswith("__init__.py"))


@pytest.mark.parametrize(
    "files",
    [
        {"tinycoro/a.py": "from . import b\n", "tinycoro/b.py": "import os\nfrom .c import f\n",
         "tinycoro/c.py": "def f(): pass\n"},
        {  # type-only imports are annotations, not dependencies
            "tinycoro/core/task.py": "from .engine import Engine\n",
            "tinycoro/core/engine.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .task import Task\n"
            ),
        },
        {  # importing a.b loads the package a first; that is not a dependency of a.b
            "tinycoro/__init__.py": "from .core.runtime import spawn\n",
            "tinycoro/core/runtime.py": "from . import ki\n",
            "tinycoro/core/ki.py": "import os\n",
        },
    ],
)
def test_the_cycle_check_passes_a_tree_without_one(tmp_path, files):
    for where, source in files.items():
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(source)
    assert import_cycles(tmp_path) == []


# -- no long module without a reason -----------------------------------------------------------
# A module over MAX_LINES lines usually holds more than one thing and reads better split. One
# that truly is one thing says so: a line of its docstring's first paragraph starts with
# "Size:" and gives the reason.
MAX_LINES = 500
SIZE_TREES = ("tinycoro", "kernel_ext")


def _size_reason(source: str) -> bool:
    import ast

    doc = ast.get_docstring(ast.parse(source)) or ""
    first = doc.split("\n\n", 1)[0]
    return any(line.strip().startswith("Size:") and len(line.strip()) > len("Size:") + 10
               for line in first.splitlines())


def long_modules(root: Path, trees=SIZE_TREES) -> list[str]:
    """Every .py of *trees* over MAX_LINES lines whose docstring gives no reason, with its
    length."""
    out = []
    for tree_dir in trees:
        base = root / tree_dir
        for path in sorted(base.rglob("*.py")) if base.is_dir() else ():
            source = path.read_text()
            n = len(source.splitlines())
            if n > MAX_LINES and not _size_reason(source):
                out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_no_module_is_long_without_a_reason():
    found = long_modules(ROOT)
    assert not found, (
        f"modules over {MAX_LINES} lines (split what holds more than one thing, or give the "
        "reason in a line starting 'Size:' in the docstring's first paragraph):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "doc, long_ones",
    [
        ('"""Many things."""\n', 1),
        ('"""Many things.\n\nSize: the run loop is one thing and reads best whole."""\n', 1),  # 2nd paragraph
        ('"""One thing.\nSize:"""\n', 1),  # no reason given
        ('"""One thing.\nSize: the run loop is one thing and reads best whole."""\n', 0),
    ],
)
def test_the_size_check_finds_a_planted_long_file(tmp_path, doc, long_ones):
    (tmp_path / "kernel_ext").mkdir()
    (tmp_path / "kernel_ext" / "long.py").write_text(doc + "x = 1\n" * MAX_LINES)
    (tmp_path / "kernel_ext" / "short.py").write_text("x = 1\n" * (MAX_LINES - 1))
    assert len(long_modules(tmp_path)) == long_ones, long_modules(tmp_path)
