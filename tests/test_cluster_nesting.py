"""tc.cluster.start() from inside an engine is refused at the call: an engine starting a
cluster of its own starts engines that can do the same, and one such chain ran a machine out
of memory (~270 engine processes). Refused on an engine tinycoro started (an environment
marker every process it starts inherits, so also a script an engine runs) and on any
ipyparallel engine (a cluster from ``ipcluster``).

The end-to-end test runs its cluster in a child process of its own session, with a marker in
its environment that every process below it inherits; whatever way it ends, every process
carrying that marker is killed, so the test can never leave a chain behind, and the nested
start it provokes is bounded by ``cluster_tasks.CHAIN_ROOT`` before anything is spawned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import psutil
import pytest

pytest.importorskip("ipyparallel")

import tinycoro as tc
import helpers.cluster as cs

MARKER = "TINYCORO_CLUSTER_ENGINE"  # what the engines tinycoro starts carry
TEST_MARK = "TINYCORO_TEST_NESTING_RUN"  # this test's processes, to kill them all at the end


def _no_launch(*args, **kwargs):
    raise AssertionError("start() went on to launch processes")


def test_start_in_a_process_an_engine_started_is_refused_before_anything_starts(monkeypatch):
    import tinycoro.cluster.api as api

    monkeypatch.setattr(api, "launch", _no_launch)
    monkeypatch.setenv(MARKER, "4242")
    with pytest.raises(tc.cluster.NestedCluster) as raised:
        tc.cluster.start(1, progress=False)
    assert isinstance(raised.value, RuntimeError)
    text = str(raised.value)
    assert "inside an engine" in text and "4242" in text  # what and whose
    assert "tc.spawn" in text and "cluster.submit" in text  # what to do instead
    assert MARKER in text  # how a process that must start one anyway does it
    assert 'if __name__ == "__main__":' in text  # a script the engines import
    assert tc.cluster.latest() is None or tc.cluster.latest().stopped


_SCENARIO = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import helpers.cluster as cs
    import helpers.cluster_tasks as h
    import tinycoro as tc
    with cs.started_cluster(2, contexts=1, timeout=120) as (c, _):
        for without in (False, True):
            t = c.submit(h.start_a_cluster_here, without, engine=int(without))
            try:
                print("returned:", t.result(150), flush=True)
            except tc.cluster.NestedCluster as e:
                print("refused:", str(e).replace("\\n", " "), flush=True)
""")


def _kill_marked(mark: str) -> list[int]:
    """SIGKILL every process whose environment carries *mark* (the run's own tree, however
    deep, and whatever was reparented out of it); the pids killed."""
    killed = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid != os.getpid() and p.environ().get(TEST_MARK) == mark:
                p.kill()
                killed.append(p)
    psutil.wait_procs(killed, timeout=10)
    return [p.pid for p in killed]


@pytest.mark.timeout(400)
def test_start_from_a_task_on_an_engine_is_refused_there():
    mark = uuid.uuid4().hex
    env = dict(os.environ, **{TEST_MARK: mark})
    env.pop(MARKER, None)
    proc = subprocess.Popen([sys.executable, "-c", _SCENARIO.format(tests=cs.TESTS)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=360)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        leftovers = _kill_marked(mark)
    lines = [ln for ln in out.splitlines() if ln.startswith(("returned:", "refused:"))]
    assert len(lines) == 2, out
    # on tinycoro's own engine, by its marker; on any ipyparallel engine, without it
    for line in lines:
        assert line.startswith("refused:") and "inside an engine" in line, out
    assert "tinycoro cluster" in lines[0] and "ipyparallel engine" in lines[1], out
    assert proc.returncode == 0, out
    assert leftovers == [], f"processes left running: {leftovers}"
