"""The liburing binding as the free-threaded CI part found it: processes that import tinycoro at
the same moment (pytest-xdist's workers, a test's children) must all get a working binding.

The binding's lazy loader (``dynamic_import``) never reads back the name cache it writes (its
loader fails on every read), so every import rescans the package and rewrites the cache file:
two processes importing at once could see it missing (``FileNotFoundError`` from its
``remove``), and that process's ``liburing`` then stayed empty for good (``AttributeError:
module 'liburing' has no attribute 'io_uring_get_sqe'`` from every later import).
``tinycoro.compiled.import_binding`` takes the binding's import one process at a time.
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
            "assert callable(u._L.io_uring_get_sqe); print('ok')")
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
