"""The liburing binding as the free-threaded CI part found it: processes that import tinycoro at
the same moment (pytest-xdist's workers, a test's children) must all get a working binding.

The binding's lazy loader (``dynamic_import``) never reads back the name cache it writes (its
loader fails on every read), so every import rescans the package and rewrites the cache file:
two processes importing at once could see it missing (``FileNotFoundError`` from its
``remove``), and that process's ``liburing`` then stayed empty for good (``AttributeError:
module 'liburing' has no attribute 'io_uring_get_sqe'`` from every later import).
``tinycoro.compiled.import_binding`` takes the binding's import one process at a time (the pure
ring imports it; the compiled one never does, which the last test checks).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROCESSES = 16


@pytest.mark.timeout(240)
def test_processes_importing_tinycoro_at_once_all_get_the_binding(tmp_path):
    code = ("import sys, tinycoro, tinycoro.uring as u; "
            "assert callable(u._bind().io_uring_get_sqe); print('ok')")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    # Started together, each waits on one pipe that the test then closes: they import at once.
    r, w = os.pipe()
    starter = f"import os; os.read({r}, 1); exec({code!r})"
    procs = [subprocess.Popen([sys.executable, "-c", starter], env=env, pass_fds=(r,),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(PROCESSES)]
    os.close(r)
    os.close(w)  # every child's read returns: go
    failures = []
    for p in procs:
        out, err = p.communicate(timeout=200)
        if p.returncode != 0 or out.split() != ["ok"]:
            failures.append(err.strip().splitlines()[-1:] or [f"exit {p.returncode}"])
    assert not failures, failures


def _workload() -> str:
    """Every public operation (tests/test_freethreaded.py's workload), read from its file."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "test_freethreaded.py")
    spec = importlib.util.spec_from_file_location("_ft_workload", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WORKLOAD


@pytest.mark.skipif(os.environ.get("TINYCORO_PURE") == "1", reason="the compiled runtime's")
@pytest.mark.timeout(200)
def test_the_compiled_runtime_imports_no_module_of_the_binding():
    # The binding's modules do not declare that they run without the GIL: importing any of them
    # on a free-threaded CPython turns it on. The compiled runtime needs none of them at run
    # time (the binding's header at build time only), on every Python, so this runs everywhere.
    from tinycoro import uring

    if not uring.COMPILED:
        pytest.skip(f"compiled ring: {uring.WHY_PURE}")
    import textwrap

    # The workload checks that the GIL stayed off; on a GIL build (which may have
    # sys._is_gil_enabled, returning True, as 3.13's does) that check has nothing to check.
    code = ("import sys, sysconfig\n"
            "if not sysconfig.get_config_var('Py_GIL_DISABLED'): sys._is_gil_enabled = lambda: False\n")
    code += textwrap.dedent(_workload()) + textwrap.dedent("""
        import subprocess
        out = subprocess.run([sys.executable, "-m", "tinycoro", "-n", "2", "--files", "1",
                              "--clients", "1", "--rounds", "1", "--timers", "1"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        loaded = sorted(n for n in sys.modules if n == "liburing" or n.startswith("liburing."))
        assert not loaded, loaded
        print("no binding")
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["no", "binding"], out.stdout
