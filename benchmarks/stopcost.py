"""Instructions a scheduler's stop spends on idle connections, counted by callgrind:
``python -m benchmarks.stopcost [N ...]`` (default 1,000 and 4,000).

One context serves N loopback connections, each with a task parked in ``recv`` (nobody
writes); then ``stop(timeout=0)`` abandons them at once (no cancel pass): the drain cancels
every armed receive, takes every parked task off its waiter and closes every coroutine.
Callgrind counts only ``Engine.abandon`` (``--toggle-collect``, so only the compiled runtime,
whose engine is a C symbol); the figure is per connection. Linear, it stays flat as N grows.
"""

from __future__ import annotations

import shutil
import socket
import sys
import time

from .instructions import CallgrindFailed, callgrind_totals

ABANDON = "__pyx_pf_*Engine_*abandon"  # the method, not its generator expression (__pyx_gb_)


def child(n: int) -> None:
    """N idle connections, each with a task in recv; then a stop that abandons them."""
    import tinycoro as tc

    sched = tc.Scheduler(contexts=1).start()

    async def hold(conn: object) -> None:
        async with conn:  # type: ignore[attr-defined]
            await conn.recv(100)  # type: ignore[attr-defined]

    async def serve(lst: object) -> None:
        async with lst:  # type: ignore[attr-defined]
            for _ in range(n):
                tc.spawn(hold(await lst.accept()))  # type: ignore[attr-defined]

    lst = sched.run_sync(tc.net.listen("127.0.0.1", 0, backlog=1024))
    server = sched.submit(serve(lst))
    address = lst.getsockname()
    clients = [socket.create_connection(address) for _ in range(n)]
    while not server.done() or sum(c.parked for c in sched.stats().contexts) < n:
        time.sleep(0.05)
    sched.stop(timeout=0)
    for c in clients:
        c.close()


def main(argv: list[str]) -> int:
    if shutil.which("valgrind") is None:
        print("valgrind (callgrind) not installed")
        return 1
    for n in [int(a) for a in argv] or [1000, 4000]:
        try:
            totals = callgrind_totals(
                ["benchmarks.stopcost", "--child", str(n)],
                f"--toggle-collect={ABANDON}",
            )
        except CallgrindFailed as e:
            print(f"N={n}: {e}")
            return 1
        print(f"N={n:,}: {totals[-1]:,} instructions in abandon, {totals[-1] / n:,.0f} per connection")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]))
    else:
        sys.exit(main(sys.argv[1:]))
