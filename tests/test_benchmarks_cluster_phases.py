"""The cluster benchmark's phase split (``python -m benchmarks.w_cluster phases``): what it
computes from a round's bounds and its tasks' own clocks (no timing asserted)."""

from __future__ import annotations

import pytest

import tinycoro as tc
from benchmarks.w_cluster import crunch_timed, phases_of


def test_phases_split_a_round_at_its_first_start_and_last_end() -> None:
    # (start, end, cpu at start, cpu at end, run-queue wait at start, at end), seconds
    timed = [(1.0, 5.0, 10.0, 12.0, 0.5, 0.75), (2.0, 6.0, 10.5, 13.0, 0.5, 1.0)]
    got = phases_of(0.5, 7.0, timed)
    assert got == pytest.approx({"in": 0.5, "run": 5.0, "cpu": 3.0, "runqueue": 0.5,
                                 "gil": 1.5, "out": 1.0, "total": 6.5})


@pytest.mark.timeout(60)
def test_timed_tasks_report_their_own_context_thread_clocks() -> None:
    async def main() -> list[tuple[float, ...]]:
        tasks = [tc.spawn(crunch_timed(n)) for n in (200, 300)]
        return [await t for t in tasks]

    timed = tc.run(main(), contexts=1)
    for start, end, cpu0, cpu1, wait0, wait1 in timed:
        assert start <= end and cpu0 <= cpu1 and wait0 <= wait1
    got = phases_of(min(t[0] for t in timed), max(t[1] for t in timed), timed)
    assert got["in"] == 0.0 and got["out"] == 0.0 and got["cpu"] >= 0.0
