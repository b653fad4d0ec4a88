"""What a steady-state round trip leaves for the cyclic garbage collector: nothing.

With many connections open, each object a request allocates and holds across a suspension
(a parked recv's, a send waiting for the ring's batch) may be alive when a young collection
runs, is promoted, and counts toward the full collections that walk every object of every
open connection (docs/benchmarks-profiles.md, "The connection-count axis"). The echo's
round trip, its send inline or joining the ring's batch, allocates none on the compiled
multishot path: the collector's young generation does not fill however many round trips
run. (The interpreted runtime receives with the single recv, a generator per call.)"""

from __future__ import annotations

import gc

import pytest

import tinycoro as tc
from tinycoro.net.multishot import AVAILABLE

from helpers.streams import tcp_pair

pytestmark = pytest.mark.timeout(120)

PAIRS = 16  # echoes woken in one turn: their sends join the turn's batch (the ring's path)
ROUNDS = 300


def _young_collections(contexts: int) -> int:
    """Young collections while PAIRS echo pairs make ROUNDS round trips each, concurrently,
    with a threshold low enough that 2 objects held per round trip fill it many times."""
    counts = [0]

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 0:
            counts[0] += 1

    async def echo(conn) -> None:
        while True:
            data = await conn.recv(100)
            if not data:
                break
            await conn.sendall(data)

    async def client(conn, ready, go) -> None:
        for _ in range(3):  # warm: the spares are made and the multishot armed
            await conn.sendall(b"x" * 64)
            await conn.recv(100)
        ready.set()
        await go.wait()
        for _ in range(ROUNDS):
            await conn.sendall(b"x" * 64)
            assert await conn.recv(100) == b"x" * 64

    async def main() -> None:
        pairs = [await tcp_pair() for _ in range(PAIRS)]
        servers = [tc.spawn(echo(s)) for _, s in pairs]
        readies = [tc.Event() for _ in pairs]
        go = tc.Event()
        clients = [tc.spawn(client(c, r, go)) for (c, _), r in zip(pairs, readies)]
        for r in readies:
            await r.wait()
        gc.collect()
        old = gc.get_threshold()
        gc.set_threshold(10, 1000, 1000)
        gc.callbacks.append(count)
        try:
            go.set()
            for t in clients:
                await t
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*old)
        for c, s in pairs:
            await c.close()
        for t in servers:
            await t
        for _, s in pairs:
            await s.close()

    with tc.Scheduler(contexts) as sched:
        sched.run_sync(main(), timeout=100)
    return counts[0]


@pytest.mark.skipif(not AVAILABLE, reason="the interpreted recv is the single one, a generator per call")
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_round_trips_do_not_fill_the_young_generation(contexts):
    # PAIRS * ROUNDS * 2 = 9,600 round trips; 2 objects held across each would be ~190 young
    # collections at a threshold of 100. A few come from the test's own bookkeeping.
    assert _young_collections(contexts) <= 20
