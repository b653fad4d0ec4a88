"""The notebook and the cluster on a free-threaded CPython (3.13t), with the GIL off and no
override: a real kernel of that interpreter loads the extension, two of its contexts run Python
at the same time (their CPU, as ``ContextStats.cpu`` counts it and the dashboard shows it, grows
on both over one interval), and cluster engines started from there run two contexts each.

The interpreter: ``TINYCORO_FT_PYTHON``, else this one if it is free-threaded, else the
repository's ``.venv-ft`` (what ``.ci/run`` part 6 makes). These tests skip where there is none,
or where it lacks ipykernel and tinycoro. They start kernels and a cluster: 20-60 s on 2 cores,
so they run only when ``TINYCORO_FT_PYTHON`` is set or on a free-threaded interpreter, never in
the README's test command on a GIL build (the CI part that runs them sets the variable).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(240)]


def _ft_python() -> str | None:
    if os.environ.get("TINYCORO_FT_PYTHON"):
        # absolute, as the kernelspec installer writes it and as the kernel's sys.executable is
        return os.path.abspath(os.environ["TINYCORO_FT_PYTHON"])
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return sys.executable
    return None  # the repository's .venv-ft only when asked: see the module docstring


FT_PYTHON = _ft_python()
if FT_PYTHON is None:
    pytest.skip("no free-threaded interpreter: set TINYCORO_FT_PYTHON (e.g. .venv-ft/bin/python)",
                allow_module_level=True)
pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from helpers.kernel import start_kernel  # noqa: E402

from tinycoro.kernel_ext.install import FT_NAME, probe  # noqa: E402

try:
    INTERP = probe(FT_PYTHON)
except ValueError as e:  # not a Python, or no ipykernel/tinycoro in it
    pytest.skip(str(e), allow_module_level=True)
if not INTERP.free_threaded:
    pytest.skip(f"{FT_PYTHON} is not a free-threaded build", allow_module_level=True)


def _no_gil_override() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHON_GIL" and not k.startswith("PYTEST")}


@pytest.fixture(scope="module")
def ft_kernel_dirs(tmp_path_factory) -> list[str]:
    """"ft-plain" (the 3.13t interpreter's ipykernel, nothing preloaded) and the kernelspec
    the installer writes for that interpreter, as a user would: ``--python PATH``."""
    root = tmp_path_factory.mktemp("jupyter-ft")
    plain = root / "share" / "jupyter" / "kernels" / "ft-plain"
    plain.mkdir(parents=True)
    (plain / "kernel.json").write_text(json.dumps({
        "argv": [FT_PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ft-plain", "language": "python",
    }))
    out = subprocess.run(
        [sys.executable, "-m", "tinycoro.kernel_ext", "install", "--prefix", str(root), "--python", FT_PYTHON],
        capture_output=True, text=True, timeout=120, env=_no_gil_override(),
    )
    assert out.returncode == 0, out.stderr
    assert f"Installed kernelspec '{FT_NAME}' (Python 3.13t (tinycoro, free-threaded))" in out.stdout
    return [str(root / "share" / "jupyter" / "kernels")]


@pytest.fixture
def no_gil_override(monkeypatch):
    """The kernel inherits this environment: no PYTHON_GIL, so what it reports is its own."""
    monkeypatch.delenv("PYTHON_GIL", raising=False)


# Two CPU-bound tasks, one per context of the kernel's default scheduler; the cell snapshots
# Scheduler.stats() once both have run, and again once each has run ROUNDS more chunks
# (count-bound, no clock), then stops them. Its last line is a JSON report.
TWO_BUSY_CELL = """
import json, sys, threading, time
import tinycoro as tc
sched = tc.get_default_scheduler()
rounds, stop = [0, 0], threading.Event()
async def spin(i):
    while not stop.is_set():
        sum(j * j for j in range(20_000))
        rounds[i] += 1
        await tc.yield_now()
# submitted to the scheduler's own contexts (a cell with a top-level await runs on the main
# thread as a context of its own: a tc.spawn from it could land there, behind the waits below)
tasks = [sched.submit(spin(i), name=f"cpu-{i}") for i in range(2)]
ended = threading.Semaphore(0)
for t in tasks:
    t.add_done_callback(lambda _t: ended.release())
def until(pred):
    while not pred():
        time.sleep(0.001)
until(lambda: min(rounds) > 0)
s0, r0, w0 = sched.stats(), list(rounds), time.perf_counter()
until(lambda: min(r - a for r, a in zip(rounds, r0)) >= 100)
s1, w1 = sched.stats(), time.perf_counter()
stop.set()
for t in tasks:
    assert ended.acquire(timeout=60), "a CPU task did not stop"
print(json.dumps({
    "gil": sys._is_gil_enabled(), "contexts": sched.contexts, "on": sorted(t.context for t in tasks),
    "cpu": [b.cpu - a.cpu for a, b in zip(s0.contexts, s1.contexts)], "wall": w1 - w0,
}))
"""


def _report(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def _assert_two_busy(rep: dict) -> None:
    assert rep["gil"] is False, "the GIL is on in the kernel"
    assert rep["contexts"] == 2 and rep["on"] == [0, 1], rep
    # Both contexts ran Python over the same interval, as their CPU clocks say. (How much more
    # than the interval's wall time the two add up to is the parallelism: on a quiet 2-core
    # machine close to 2x, but it is not asserted -- the cores are shared.)
    assert all(c > 0 for c in rep["cpu"]), rep


def test_load_ext_in_a_free_threaded_kernel_keeps_the_gil_off_with_two_contexts_busy(
    ft_kernel_dirs, no_gil_override
):
    k = start_kernel(ft_kernel_dirs, "ft-plain")  # TINYCORO_CONTEXTS=2
    try:
        assert k.ok("import sys; sys._is_gil_enabled()").result() == "False"
        k.ok("%load_ext tinycoro")
        assert k.ok("import tinycoro.kernel_ext.dashboard, ipywidgets; sys._is_gil_enabled()").result() == "False"
        _assert_two_busy(_report(k.ok(TWO_BUSY_CELL, timeout=120).stdout()))
        # the dashboard renders from those statistics, still without the GIL
        assert k.ok("%tinycoro dashboard\nsys._is_gil_enabled()").error() is None
        assert k.ok("sys._is_gil_enabled()").result() == "False"
    finally:
        k.shutdown()


def test_the_installed_free_threaded_kernelspec_runs_without_the_gil(ft_kernel_dirs, no_gil_override):
    k = start_kernel(ft_kernel_dirs, FT_NAME)  # --ext=tinycoro preloaded, no PYTHON_GIL in it
    try:
        r = k.ok("import os, sys, tinycoro as tc\n(sys._is_gil_enabled(), os.environ.get('PYTHON_GIL'), sys.executable)")
        assert r.result() == repr((False, None, FT_PYTHON))
        _assert_two_busy(_report(k.ok(TWO_BUSY_CELL, timeout=120).stdout()))
    finally:
        k.shutdown()


# Run by the 3.13t interpreter itself: a local cluster of one engine with two contexts; on the
# engine, two CPU-bound tasks on its scheduler, one per context, as in TWO_BUSY_CELL.
CLUSTER_SCRIPT = """
import json, sys
import tinycoro as tc

async def two_busy():
    import sys, tinycoro as tc
    sched = tc.get_default_scheduler()
    rounds, stop = [0, 0], [False]
    async def spin(i):
        while not stop[0]:
            sum(j * j for j in range(20_000))
            rounds[i] += 1
            await tc.yield_now()
    tasks = [sched.submit(spin(i), name=f"cpu-{i}") for i in range(2)]
    while min(rounds) == 0:
        await tc.yield_now()
    s0, r0 = sched.stats(), list(rounds)
    while min(r - a for r, a in zip(rounds, r0)) < 100:
        await tc.yield_now()
    s1 = sched.stats()
    stop[0] = True
    for t in tasks:
        await t
    return {"gil": sys._is_gil_enabled(), "contexts": sched.contexts,
            "on": sorted(t.context for t in tasks),
            "cpu": [b.cpu - a.cpu for a, b in zip(s0.contexts, s1.contexts)]}

cluster = tc.cluster.start(1, contexts=2, progress=False)
try:
    rep = cluster.submit(two_busy).result(120)
finally:
    cluster.stop()
rep["client_gil"] = sys._is_gil_enabled()
print(json.dumps(rep))
"""


def test_cluster_engines_with_two_contexts_each_keep_the_gil_off(no_gil_override):
    probe_ipp = subprocess.run([FT_PYTHON, "-c", "import ipyparallel, cloudpickle"],
                               capture_output=True, text=True, timeout=60)
    if probe_ipp.returncode:
        pytest.skip(f"{FT_PYTHON} lacks ipyparallel or cloudpickle (tinycoro[cluster])")
    out = subprocess.run([FT_PYTHON, "-c", CLUSTER_SCRIPT], capture_output=True, text=True,
                         timeout=200, env=_no_gil_override(), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    rep = _report(out.stdout)
    assert rep["client_gil"] is False
    _assert_two_busy(rep)


# An extension module as a C compiler makes it by default: single-phase init, no Py_mod_gil
# slot, so loading it turns the GIL on (CPython's RuntimeWarning names it).
GIL_MODULE_C = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "gil_holder", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_gil_holder(void) { return PyModule_Create(&def); }
"""


def test_the_installer_names_a_module_that_turns_the_gil_on_and_forces_it_off_only_when_asked(tmp_path):
    gcc = shutil.which("gcc") or pytest.skip("no C compiler")
    where = subprocess.run(
        [FT_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
         "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()
    (tmp_path / "gil_holder.c").write_text(GIL_MODULE_C)
    subprocess.run([gcc, "-shared", "-fPIC", f"-I{where[0]}", "-o", str(tmp_path / f"gil_holder{where[1]}"),
                    str(tmp_path / "gil_holder.c")], check=True, timeout=120)
    (tmp_path / "sitecustomize.py").write_text("import gil_holder\n")  # loaded before any kernel code
    env = {**_no_gil_override(), "PYTHONPATH": str(tmp_path)}
    install = [FT_PYTHON, "-m", "tinycoro.kernel_ext", "install", "--prefix", str(tmp_path)]
    out = subprocess.run(install, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, out
    assert "importing gil_holder turns the GIL back on" in out.stderr and "--force-gil-off" in out.stderr
    assert not (tmp_path / "share").exists()
    out = subprocess.run([*install, "--force-gil-off"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels" / FT_NAME / "kernel.json").read_text())
    assert spec["env"] == {"PYTHON_GIL": "0"}
    assert spec["display_name"] == "Python 3.13t (tinycoro, free-threaded, GIL forced off)"
    # without that module the GIL stays off by itself, and forcing it is refused
    out = subprocess.run([*install, "--force-gil-off"], capture_output=True, text=True, timeout=120,
                         env=_no_gil_override())
    assert out.returncode == 2 and "not needed" in out.stderr, out


def test_a_free_threaded_kernel_keeps_its_own_name_under_any_display_name(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "tinycoro.kernel_ext", "install", "--prefix", str(tmp_path),
         "--python", FT_PYTHON, "--display-name", "Lab, 2 cores"],
        capture_output=True, text=True, timeout=120, env=_no_gil_override(),
    )
    assert out.returncode == 0, out.stderr
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels" / FT_NAME / "kernel.json").read_text())
    assert spec["display_name"] == "Lab, 2 cores" and "env" not in spec and spec["argv"][0] == FT_PYTHON
