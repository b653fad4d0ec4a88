"""The in-process side of the free-threaded workload (:mod:`benchmarks.w_freethreaded`), run
on the interpreter being measured: ``python -m benchmarks.ft_worker``.

The runner runs on one Python and measures two builds, so the in-process series run in a
worker process per build, started once per run and kept warm, and the repetitions still
alternate between builds. The worker prints one ``READY`` line (a JSON object: its Python,
whether it is a free-threaded build, whether the GIL is on after importing tinycoro, and which
modules run compiled), then answers each request line (a JSON object naming a workload, its
sizes and the number of contexts) with one JSON line: the rate, the process's user and system
CPU seconds over the timed part, and whether the GIL is on after it. Each request runs on a
fresh ``tc.run`` with its contexts given explicitly. Each rate is timed inside the running
scheduler, the scheduler's start and stop excluded, as every in-process workload is.
"""

from __future__ import annotations

import json
import resource
import sys
import sysconfig
import time
from typing import Any, Callable, Coroutine

import tinycoro as tc
import tinycoro.net  # noqa: F401 - every public module the servers use, imported as they do
from tinycoro import compiled


def gil_enabled() -> bool:
    """Whether the GIL is on now (always, on a build that has one)."""
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def _cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of the whole process: every context thread's included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


async def _timed(body: Callable[[], Coroutine[Any, Any, int]]) -> dict[str, Any]:
    """Run *body* (which returns how many units it did) and time it: wall and CPU."""
    c0, t0 = _cpu(), time.perf_counter()
    units = await body()
    t1, c1 = time.perf_counter(), _cpu()
    return {"value": units / (t1 - t0), "units": units, "cpu": [c1[0] - c0[0], c1[1] - c0[1]]}


async def _timed_tasks(one: Callable[[], Coroutine[Any, Any, Any]], tasks: int, each: int) -> dict[str, Any]:
    """Time *tasks* tasks of ``one()`` (spread over the contexts by ``tc.spawn``), each doing
    *each* units, from their spawn to the last one's end."""

    async def body() -> int:
        for t in [tc.spawn(one()) for _ in range(tasks)]:
            await t
        return tasks * each

    return await _timed(body)


# -- the workloads -----------------------------------------------------------------------------
async def cpu_bound(tasks: int, chunks: int, iters: int) -> dict[str, Any]:
    """*tasks* coroutines, each *chunks* chunks of an *iters*-iteration loop of integer
    arithmetic with ``await tc.sleep(0)`` between chunks; the rate is chunks per second."""

    async def crunch() -> int:
        x = 0
        # The modulus is made by each task, not read from the code's constants: on 3.13t a
        # constant of an imported module's code is one object whose reference count every
        # thread changes at each use, and those atomic updates from two cores ping-pong one
        # cache line (2 contexts ran at 0.61x one with the constant; 1.8-2.0x with a small
        # int or a per-task modulus). That is the interpreter's cost of sharing an object,
        # not the scheduler's; docs/benchmarks.md, "Free-threaded Python", tells users.
        modulus = int("1000003")
        for _ in range(chunks):
            for i in range(iters):
                x = (x * 31 + i) % modulus
            await tc.sleep(0)
        return x

    return await _timed_tasks(crunch, tasks, chunks)


async def mutex_uncontended(tasks: int, pairs: int) -> dict[str, Any]:
    """*tasks* tasks (spread over the contexts), each locking and unlocking a ``tc.Mutex`` of
    its own *pairs* times: the lock's cost where no other task ever wants it, on every
    context at once. The rate is lock+unlock pairs per second, all tasks together."""

    async def one() -> None:
        m = tc.Mutex()
        for _ in range(pairs):
            await m.lock()
            m.unlock()

    return await _timed_tasks(one, tasks, pairs)


async def mutex_contended(tasks: int, iters: int) -> dict[str, Any]:
    """*tasks* tasks (spread over the contexts) sharing one ``tc.Mutex``: each takes it *iters*
    times and yields once while holding it, so the others queue behind it, from every
    context. The rate is lock acquisitions per second, yields included."""
    m = tc.Mutex()
    y = tc.yield_now

    async def one() -> None:
        for _ in range(iters):
            async with m:
                await y()

    return await _timed_tasks(one, tasks, iters)


WORKLOADS: dict[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]] = {
    "cpu": cpu_bound,
    "mutex-uncontended": mutex_uncontended,
    "mutex-contended": mutex_contended,
}


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """Run one request: ``{"workload": name, "contexts": n, **sizes}``."""
    request = dict(request)
    fn = WORKLOADS[request.pop("workload")]
    contexts = int(request.pop("contexts"))
    out = tc.run(fn(**request), contexts=contexts)
    out["gil"] = gil_enabled()
    return out


def describe() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil": gil_enabled(),
        "runtime": compiled.describe(),
    }


def main() -> None:
    print("READY " + json.dumps(describe()), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = answer(json.loads(line))
        except Exception as e:  # noqa: BLE001 - the parent reports it as the series' failure
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
