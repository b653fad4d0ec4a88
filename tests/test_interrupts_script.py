"""Ctrl-C around ``tc.run`` in a plain script, at random moments of its first 200 ms (rule 13).

A child process runs ``tc.run(main())``; main spawns workers whose ``finally`` blocks await and
then write a marker line. The test sends SIGINT at a moment chosen by a seeded generator, from
0 ms (start-up: the scheduler is being built, no task has started) to 200 ms (everything
runs). Whatever the moment: every task that started has its ``finally`` marker, no tinycoro
thread is left (the child checks in an atexit hook), and the process ends the way an
unhandled KeyboardInterrupt ends any Python program: the traceback on stderr and death by
SIGINT (returncode -SIGINT), exactly as with ``asyncio.run``.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(180)

RUNS = 8  # per context count: 24 runs in all, delays spread over 0-200 ms

SCRIPT = textwrap.dedent(
    """
    import atexit, sys, threading
    import tinycoro as tc

    out = open(sys.argv[1], "a", buffering=1)

    @atexit.register
    def report():
        names = [t.name for t in threading.enumerate() if t.name.startswith("tinycoro")]
        out.write(f"threads {names}\\n")

    async def worker(i):
        out.write(f"started {i}\\n")
        try:
            while True:
                await (tc.yield_now() if i % 2 else tc.sleep(0.001))
        finally:
            await tc.sleep(0.001)
            out.write(f"finally {i}\\n")

    async def main():
        out.write("started main\\n")
        try:
            tasks = [tc.spawn(worker(i)) for i in range(6)]
            for t in tasks:
                await t
        finally:
            # No await here: a child's Cancelled, raised by "await t", may come before main's
            # own cancellation, which is then delivered at main's next await (as it should).
            out.write("finally main\\n")

    print("ready", flush=True)
    tc.run(main(), contexts=int(sys.argv[2]))
    """
)


def _run_once(tmp_path, contexts: int, delay: float, n: int) -> tuple[int, str, list[str]]:
    script = tmp_path / "interrupted.py"
    script.write_text(SCRIPT)
    markers = tmp_path / f"markers-{n}.txt"
    child = subprocess.Popen(
        [sys.executable, str(script), str(markers), str(contexts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "ready\n"  # just before tc.run is called
        time.sleep(delay)  # the moment of the interrupt, not a synchronisation
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, err, markers.read_text().splitlines()


@pytest.mark.parametrize("contexts", [1, 2, 4], ids=lambda n: f"ctx{n}")
def test_sigint_at_random_moments_of_tc_run(tmp_path, contexts):
    rng = random.Random(f"script-{contexts}")
    delays = [0.0] + [rng.uniform(0.0, 0.2) for _ in range(RUNS - 1)]
    for n, delay in enumerate(delays):
        code, err, lines = _run_once(tmp_path, contexts, delay, n)
        what = f"run {n} (SIGINT after {delay * 1000:.0f} ms): {lines}\n{err}"
        assert code == -signal.SIGINT and "KeyboardInterrupt" in err, what
        started = {line.split()[1] for line in lines if line.startswith("started ")}
        finished = {line.split()[1] for line in lines if line.startswith("finally ")}
        assert started == finished, what
        assert lines[-1] == "threads []", what
        assert "Traceback" not in err.replace(
            "Traceback (most recent call last)", "", 1
        ), what  # one traceback: the KeyboardInterrupt, no error from the runtime
