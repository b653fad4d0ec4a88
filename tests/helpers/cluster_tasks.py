"""Async functions the cluster tests ship to engines, and the state they leave there.

They live in a module of their own (not in a test module) because ipyparallel ships a function
defined in a module by reference: each engine imports this module (the cluster fixtures put
tests/ on the engines' PYTHONPATH). ``STATE`` is per engine process: a later submit reads what
an earlier task left there.
"""

from __future__ import annotations

import os
import socket

import tinycoro as tc

STATE: dict[str, str] = {}


async def add(a, b):
    await tc.sleep(0)
    return a + b


async def pid():
    await tc.sleep(0)
    return os.getpid()


async def item_and_pid(x):
    await tc.sleep(0.01)
    return x, os.getpid()


async def fail_on(x, bad):
    await tc.sleep(0)
    if x == bad:
        raise ValueError(f"item {x} is bad")
    return x


async def boom(message):
    await tc.sleep(0)
    raise ValueError(message)


class Unpicklable(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.sock = socket.socket()  # sockets cannot be pickled

    def __reduce__(self):
        raise TypeError("cannot pickle Unpicklable")


async def raise_unpicklable():
    await tc.sleep(0)
    raise Unpicklable("no pickle for me")


async def guarded(key):
    """Waits until cancelled; records what it saw and that its ``finally`` ran."""
    STATE[key] = "waiting"
    try:
        await tc.sleep(600)
        STATE[key] = "slept"
    except tc.Cancelled:
        STATE[key] = "cancelled"
        raise
    finally:
        STATE[key] += "+finally"


async def read_state(key):
    await tc.sleep(0)
    return STATE.get(key)


async def sleep_forever():
    await tc.sleep(600)


async def reply_pid(conn):
    await conn.sendall(str(os.getpid()).encode())


async def say_when_released(port, text):
    """Connect to the test at *port*, wait for one byte, then print *text*."""
    conn = await tc.net.connect("127.0.0.1", port)
    async with conn:
        await conn.recv(1)
    print(text, flush=True)
    return text


async def fail_when_released(port, message):
    conn = await tc.net.connect("127.0.0.1", port)
    async with conn:
        await conn.recv(1)
    raise RuntimeError(message)


class WaitOrFailWhenReleased:
    """A callable object whose call is async (map takes one): item 0 waits until cancelled
    (``guarded``), any other item fails once the test at *port* releases it."""

    def __init__(self, key, port):
        self.key = key
        self.port = port

    async def __call__(self, x):
        if x == 0:
            return await guarded(self.key)
        await fail_when_released(self.port, f"item {x} is bad")


async def show(text):
    """``display()`` a Markdown object from a remote task."""
    from IPython.display import Markdown, display

    await tc.sleep(0)
    display(Markdown(text))


def tinycoro_loaded():
    """(A plain function, for ipyparallel's apply.) Has this engine loaded the extension?"""
    from IPython import get_ipython

    return "tinycoro" in get_ipython().extension_manager.loaded


def not_async():
    return 1


async def parent_buffers(payload):
    """How many buffers the engine kernel's own parent (the request) holds in this task's
    context: the request's buffers are the pickled functions and arguments of its batch."""
    from IPython import get_ipython

    return len(get_ipython().kernel.get_parent("shell").get("buffers") or [])


async def switch_interval():
    import sys

    return sys.getswitchinterval()


async def guarded_marking(path):
    """Waits until cancelled; its ``finally`` writes what it saw to the file at *path*, a mark
    that outlives the engine (a stopped cluster's engines take their memory with them)."""
    seen = "waiting"
    try:
        await tc.sleep(600)
        seen = "slept"
    except tc.Cancelled:
        seen = "cancelled"
        raise
    finally:
        with open(path, "w") as f:
            f.write(seen + "+finally")


def engine_internals_ok():
    """(A plain function, for ipyparallel's apply.) Does this engine's kernel have every
    private name tc.cluster uses there (tinycoro.cluster.internals.check_kernel)?"""
    from IPython import get_ipython

    from tinycoro.cluster import internals

    internals.check_kernel(get_ipython().kernel)
    return True


async def print_then_return(text):
    """Prints *text* (no newline: it stays in the engine's stdout buffer) and returns it."""
    await tc.sleep(0)
    print(text, end="")
    return text


async def _quick():
    STATE["quick"] = "ended"


async def context_runs_on_while_iopub_is_held():
    """On an engine: hold the kernel's IOPub thread, let a submitted task end on this context,
    and say whether this context ran on before IOPub was let go. A task's end must not make its
    context wait for the IOPub thread: the context has other tasks to run."""
    import sys
    import threading

    from IPython import get_ipython

    from tinycoro.cluster import engine as engine_side
    from tinycoro.cluster import internals

    kernel = get_ipython().kernel
    held, resumed, release = threading.Event(), threading.Event(), threading.Event()
    verdict: list[bool] = []

    def hold():  # on the IOPub thread
        held.set()
        release.wait(60)

    def observe():
        # The bound only ends a broken build's wait (a context that runs on does so at once);
        # the streams' own flush timeout is raised above it for the test, so that a context
        # that does wait is still waiting when the bound ends.
        verdict.append(resumed.wait(20))
        release.set()

    streams = [s for s in (sys.stdout, sys.stderr) if hasattr(s, "flush_timeout")]
    for stream in streams:
        stream.flush_timeout = 60  # ipykernel's is 10 s, below the bound
    internals.on_iopub_thread(kernel, hold)
    while not held.is_set():
        await tc.sleep(0.001)
    observer = threading.Thread(target=observe)
    observer.start()
    STATE.pop("quick", None)
    # Started as a request of submits starts its tasks (its outcome goes to no client task).
    # _quick travels by reference (this module's): it marks this process's STATE.
    from tinycoro.cluster.messages import pack

    started = engine_side._agent.start_many([pack(_quick)], [("no client waits", 0, pack(((), {})))])
    if not isinstance(started[0], int):  # why it did not start, not a task id: let IOPub go
        release.set()
        raise AssertionError(f"the task did not start: {started}")
    while "quick" not in STATE:  # its step, its done callback included, is over when we see this
        await tc.yield_now()
    resumed.set()
    while observer.is_alive():
        await tc.sleep(0.001)
    for stream in streams:
        del stream.flush_timeout  # back to the class's
    return verdict[0]


async def request_and_print(text):
    """Prints *text* and returns the msg_id of the engine's request that started this task (the
    kernel's shell parent in the task's context): tasks submitted together share one."""
    from IPython import get_ipython

    print(text, end="")
    await tc.sleep(0)
    return get_ipython().kernel.get_parent("shell")["header"]["msg_id"]


def _refuse_unpickling(why):
    raise ValueError(why)


class RefusedOnTheEngine:
    """An argument that packs here and fails to unpack on the engine: a task that cannot start."""

    def __reduce__(self):
        return (_refuse_unpickling, ("this argument does not unpack here",))


class FunctionRefusedOnTheEngine:
    """An async function that packs here and fails to unpack on the engine: every task
    calling it cannot start."""

    async def __call__(self) -> None:
        return None

    def __reduce__(self):
        return (_refuse_unpickling, ("this function does not unpack here",))


async def hold_iopub_until_ended(key, n):
    """On an engine: hold the kernel's IOPub thread until *n* tasks of
    :func:`end_once_iopub_is_held` (same *key*) have ended on this context and their done
    callbacks have run, so that every outcome of them (and this task's own) is waiting for
    IOPub at once; then let it go."""
    import threading
    import time

    from IPython import get_ipython

    from tinycoro.cluster import internals
    from tinycoro.core import get_default_scheduler

    sched = get_default_scheduler()
    held = threading.Event()
    ended: set = STATE.setdefault(key, set())  # type: ignore[assignment]

    def hold():  # on the IOPub thread
        held.set()
        STATE[key + ":held"] = "yes"
        deadline = time.monotonic() + 60  # only a broken build waits this long
        while len(ended) < n and time.monotonic() < deadline:
            time.sleep(0.001)
        # A task submitted now runs after the turn of the steps that ended those tasks, so
        # once it is over their done callbacks (which queue the outcomes) have run.
        after = threading.Event()
        sched.submit(_quick()).add_done_callback(lambda _t: after.set())
        after.wait(60)

    internals.on_iopub_thread(get_ipython().kernel, hold)
    while not held.is_set():
        await tc.sleep(0.001)
    return "held"


async def end_once_iopub_is_held(key, i):
    """Returns *i* once :func:`hold_iopub_until_ended` holds IOPub, noting that it ended."""
    while key + ":held" not in STATE:
        await tc.sleep(0.001)
    STATE[key].add(i)  # type: ignore[attr-defined]
    return i


async def _end_at_the_gate(i):
    await STATE["turn-gate"].wait()  # type: ignore[attr-defined]
    STATE["turn-ended"].append(i)  # type: ignore[attr-defined]
    return i


async def iopub_wakes_for_tasks_ending_in_one_turn(n):
    """On an engine: start *n* tasks (as a request of submits does) that end in one turn, and
    say how many of them had ended at each time an outcome asked for the IOPub thread."""
    from tinycoro.cluster import engine as engine_side
    from tinycoro.cluster import internals
    from tinycoro.cluster.messages import pack

    ended: list = []
    wakes: list = []
    real = internals.on_iopub_thread

    def recording(kernel, fn):
        wakes.append(len(ended))
        real(kernel, fn)

    STATE["turn-gate"], STATE["turn-ended"] = tc.Event(), ended  # type: ignore[assignment]
    internals.on_iopub_thread = recording
    try:
        items = [(f"no client waits {i}", 0, pack(((i,), {}))) for i in range(n)]
        started = engine_side._agent.start_many([pack(_end_at_the_gate)], items)
        assert all(isinstance(s, int) for s in started), started
        await tc.yield_now()  # they were made ready before this step ended: they wait at the
        await tc.yield_now()  # gate once this task runs again
        STATE["turn-gate"].set()  # type: ignore[attr-defined]
        while not wakes or len(ended) < n:
            await tc.sleep(0.001)
        await tc.yield_now()
    finally:
        internals.on_iopub_thread = real
    return wakes


# The nesting test's own bound on a chain of clusters, checked before anything is spawned: the
# engine that first runs start_a_cluster_here notes its pid here, and the processes a start
# from there makes inherit it, so none of them starts anything (should the guard under test
# be missing, one nested cluster at most, never a chain).
CHAIN_ROOT = "TINYCORO_TEST_CHAIN_ROOT"


async def start_a_cluster_here(without_tinycoro_marker: bool) -> str:
    """``tc.cluster.start(1)`` from a task on this engine; *without_tinycoro_marker*: with the
    environment marker of the engines tinycoro starts removed first, as on an engine of a
    cluster started by ``ipcluster``. Returns what happened; the refusal is raised."""
    root = os.environ.setdefault(CHAIN_ROOT, str(os.getpid()))
    if root != str(os.getpid()):
        return f"test guard: a process of a nested cluster (root engine {root}) started nothing"
    saved = os.environ.pop("TINYCORO_CLUSTER_ENGINE", None) if without_tinycoro_marker else None
    try:
        nested = tc.cluster.start(1, timeout=90, progress=False)
    finally:
        if saved is not None:
            os.environ["TINYCORO_CLUSTER_ENGINE"] = saved
    nested.stop()
    return "a nested cluster was started and stopped"


def stop_this_engines_scheduler() -> None:
    """Stop the scheduler of the engine this runs on (as ``%tinycoro stop`` there would); the
    process lives on. Run through ipyparallel's apply, not as a tinycoro task."""
    from tinycoro.core import get_default_scheduler

    get_default_scheduler().stop()


async def kernel_request():
    """The engine kernel's own parent (the request the task came in) in this task's context:
    its header, and the engine's session id."""
    from IPython import get_ipython

    kernel = get_ipython().kernel
    return kernel.get_parent("shell")["header"], kernel.session.session
