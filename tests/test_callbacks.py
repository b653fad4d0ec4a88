"""Callbacks never crash their runtime (rule 17).

A done callback runs inside the engine's own frames, right after the task's last step. What
it raises is reported, with the task it belongs to, and the engine carries on
with the other callbacks, the joiners and its other tasks, as asyncio reports a raising
callback through its exception handler instead of stopping its loop. A park's wake hooks
(``abort``, ``undo``), which the engine calls when a parked task is cancelled, are reported
the same way.
"""

from __future__ import annotations

import logging

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked


class Boom(Exception):
    pass


def _raise(_task: tc.Task) -> None:
    raise Boom("a done callback that raises")


def _reports(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tinycoro" and "done callback" in r.getMessage()]


@pytest.mark.timeout(30)
def test_a_raising_done_callback_is_reported_and_the_rest_still_run(contexts, caplog):
    after: list[str] = []

    async def child():
        await tc.yield_now()
        return "child's result"

    async def joiner(t: tc.Task) -> str:
        return await t

    async def main():
        t = tc.spawn(child(), name="with callbacks")
        t.add_done_callback(_raise)
        t.add_done_callback(lambda task: after.append(task.result()))
        j = tc.spawn(joiner(t))
        # Other tasks on every context keep running after the report.
        more = [tc.spawn(tc.sleep(0.001)) for _ in range(2 * contexts)]
        await tc.when_all(*more)
        return await j, await t

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        assert tc.run(main(), contexts=contexts) == ("child's result", "child's result")
    assert after == ["child's result"]
    (report,) = _reports(caplog)
    assert "'with callbacks'" in report.getMessage()  # names the task
    assert report.exc_info is not None and report.exc_info[0] is Boom  # with the traceback


@pytest.mark.timeout(30)
def test_a_raising_on_done_of_a_long_lived_scheduler_leaves_it_running(contexts, caplog):
    async def work():
        return 1

    async def ping():
        return "pong"

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        with tc.Scheduler(contexts) as sched:
            tasks = [sched.submit_watched(work(), _raise) for _ in range(4 * contexts)]
            for _ in range(contexts):
                assert sched.run_sync(ping(), timeout=10) == "pong"
            assert all(t.done() and t.result() == 1 for t in tasks)
            assert sched.stats().failed == 0  # the tasks succeeded; nothing failed unobserved
    assert len(_reports(caplog)) == 4 * contexts


def test_a_callback_added_to_a_done_task_that_raises_is_reported_not_raised(caplog):
    async def main():
        t = tc.spawn(tc.sleep(0))
        await t
        t.add_done_callback(_raise)  # runs now; its error is reported, not raised here
        return "went on"

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        assert tc.run(main(), contexts=1) == "went on"
    assert len(_reports(caplog)) == 1


@pytest.mark.timeout(30)
def test_a_raising_wake_hook_is_reported_and_the_context_goes_on(contexts, caplog):
    """A park's abort hook (a primitive's, or one written with tinycoro.lowlevel) that raises
    when its task is cancelled: reported with the task; the task stays parked (a wake may be on
    its way), and once woken the cancel lands at its next await."""
    from tinycoro import lowlevel as ll

    def broken_abort() -> bool:
        raise Boom("a wake hook that raises")

    async def parked():
        await ll.park(ll.Park(broken_abort, "a hand-made waiter list"))
        await tc.sleep(0)  # where the pending cancel lands

    async def main():
        t = tc.spawn(parked(), name="parked by hand")
        await wait_blocked(t)
        t.cancel()
        while not [r for r in caplog.records if "wake hook" in r.getMessage()]:
            await tc.sleep(0.001)  # the report is what the cancel produces
        ll.reschedule(t)  # the wake that the failed abort stood for
        await cancel_and_wait_ended(t)
        return "went on"

    with caplog.at_level(logging.ERROR, logger="tinycoro"):
        assert tc.run(main(), contexts=contexts) == "went on"
    (report,) = [r for r in caplog.records if r.name == "tinycoro"]
    assert "'parked by hand'" in report.getMessage() and report.exc_info[0] is Boom


async def cancel_and_wait_ended(t: tc.Task) -> None:
    with pytest.raises(tc.Cancelled):
        await t
