"""Close racing the operations it must end, across contexts (rule 10).

``PendingOps`` orders "an operation starts" against "the resource closes" without a lock (see
its docstring): these tests release both sides at once, many rounds, and check that the
operation always ends with ClosedResourceError (never hangs) and that exactly one of several
racing closers closes the descriptor.
"""

from __future__ import annotations

import pytest

import tinycoro as tc

from helpers.runtime import open_fds, opened_since, switch_interval
from helpers.streams import tcp_pair

pytestmark = pytest.mark.timeout(60)

ROUNDS = 100


@pytest.fixture(autouse=True)
def _switch_often():
    with switch_interval(1e-6):
        yield


async def _together(arrived: list, n: int) -> None:
    """A spinning barrier: return once *n* tasks arrived, all at about the same moment (an
    Event would wake the setter's own context first and the others a wake-up later)."""
    arrived.append(None)
    while len(arrived) < n:
        await tc.yield_now()


def test_a_recv_racing_a_close_always_ends(contexts):
    async def receive(conn, go):
        await _together(go, 2)
        with pytest.raises(tc.ClosedResourceError):
            await conn.recv()

    async def close(conn, go):
        await _together(go, 2)
        await conn.close()

    async def main():
        for _ in range(ROUNDS):
            client, conn = await tcp_pair()
            go = []
            # Spawned one after the other: round robin puts them on different contexts.
            tasks = [tc.spawn(receive(conn, go)), tc.spawn(close(conn, go))]
            for t in tasks:
                await t
            await client.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)


def test_racing_closers_close_the_descriptor_once(contexts):
    async def close(conn, go):
        await _together(go, 4)
        await conn.close()  # a second close must be a no-op, never a second os-level close

    async def main():
        for _ in range(ROUNDS):
            client, conn = await tcp_pair()
            go = []
            tasks = [tc.spawn(close(conn, go)) for _ in range(4)]
            for t in tasks:
                await t  # an EBADF from closing twice would raise here
            assert conn.closed
            await client.close()

    before = open_fds()
    tc.run(main(), contexts=contexts)
    assert not opened_since(before)
