"""Under the GIL, a context woken from its sleep gets the GIL from a busy peer at the end of
that peer's turn (``Engine._hand_over``, core/wakeword.py), not only when the busy one sleeps
or the switch interval forces a switch. Checked on runtime state: the busy context's step
count when the woken one runs, and its count of hand-overs. On a build running without the
GIL there is nothing to hand over."""

from __future__ import annotations

import os
import threading

import pytest

import tinycoro as tc
from tinycoro import compiled, lowlevel
from tinycoro.core import engine as engine_module
from tinycoro.core import wakeword

pytestmark = pytest.mark.timeout(120)

ROUNDS = 20
SPIN_LIMIT = 2_000_000  # yields of the busy task waiting for another context: a bound, not a clock
GIL = wakeword.needed()
MANY_STEPS = 100  # far fewer than a switch interval of the busy context's steps


async def _until(predicate) -> None:
    """Keep this context busy (one step per turn) until *predicate* holds; fail at the bound."""
    for _ in range(SPIN_LIMIT):
        if predicate():
            return
        await tc.yield_now()
    raise AssertionError("the other context never got there")


def test_a_woken_context_runs_before_the_busy_ones_next_steps(contexts):
    """A task on one context never sleeps (it yields, one step per turn); another thread
    queues a call on a sleeping peer, waking it, and the call records the busy context's step
    count. Handed over, the call runs at the busy context's turn's end; kept, it waited for
    the switch interval: ~30,000 steps here on the old code, in every round but a few."""

    async def main() -> tuple[list[int], int]:
        me = lowlevel.current_engine()
        assert me is not None
        peers = me.scheduler.peers(me)
        lags: list[int] = []
        for i in range(ROUNDS if peers else 0):
            target = peers[i % len(peers)]
            # blocked in its sleep point (it must have had the GIL to get there)
            await _until(lambda: target.sleeping and target.sleep_since != 0.0)
            seen: list[int] = []
            before: list[int] = []

            def wake(target=target, seen=seen, before=before) -> None:
                before.append(me.steps)
                target.call_soon(lambda: seen.append(me.steps))

            waker = threading.Thread(target=wake)
            waker.start()
            await _until(lambda: bool(seen))
            waker.join()
            lags.append(seen[0] - before[0])
        return lags, me.handovers

    lags, handovers = tc.run(main(), contexts=contexts)
    if contexts == 1 or not GIL:
        assert handovers == 0  # nobody to hand over to, or no GIL to hand over
        return
    assert handovers > 0, lags
    # The hand-over waits for the peer a bounded number of yields, and hands over again at the
    # next turn's end: a few steps when the machine was slow to run the peer's thread.
    assert sum(lag <= MANY_STEPS for lag in lags) >= ROUNDS * 3 // 4, lags


@pytest.mark.skipif(not GIL, reason="no GIL, nothing to hand over")
@pytest.mark.skipif(not compiled.is_compiled(engine_module),
                    reason="interpreted, only a waker sets the word (core/wakeword.py)")
def test_a_context_woken_by_its_own_deadline_is_handed_the_gil(contexts):
    """A context that sleeps until a ``tc.sleep`` ends wakes by itself (nobody writes its
    eventfd): compiled, its wait sets the word as it returns, and the busy context, which
    never sleeps, hands over."""
    if contexts == 1:
        pytest.skip("needs a busy context and a sleeping one")

    async def sleeper(n: int) -> object:
        for _ in range(n):
            await tc.sleep(0.001)
        return lowlevel.current_engine()

    async def main() -> tuple[int, int]:
        me = lowlevel.current_engine()
        assert me is not None
        # one per context: the dispatch puts at least one of them on a peer of this context
        tasks = [tc.spawn(sleeper(ROUNDS)) for _ in range(contexts)]
        await _until(lambda: all(t.done() for t in tasks))
        engines = [await t for t in tasks]
        return sum(e is not me for e in engines), me.handovers

    elsewhere, handovers = tc.run(main(), contexts=contexts)
    assert elsewhere > 0
    assert handovers > 0


def test_the_interpreted_hand_over_is_bounded():
    """A word nobody clears (a peer the machine never ran) ends the hand-over at its bound;
    a clear one ends it at once."""
    assert wakeword.hand_over(bytearray(b"\x00"), 3)
    assert not wakeword.hand_over(bytearray(b"\x01"), 3)


def test_the_interpreted_wait_consumes_the_count_or_ends_at_its_bound():
    """The twin of the compiled sleep point: a written eventfd ends the wait and its count is
    consumed (the next bounded wait finds nothing); a bound ends it otherwise."""
    efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        os.eventfd_write(efd, 1)
        wakeword.wait(bytearray(1), efd, -1.0)
        wakeword.wait(bytearray(1), efd, 0.0)  # nothing left: returns at its bound
        with pytest.raises(BlockingIOError):
            os.eventfd_read(efd)
    finally:
        os.close(efd)
