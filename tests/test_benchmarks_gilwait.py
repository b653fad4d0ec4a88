"""benchmarks.gilwait: each wait for the GIL is put under the system call its thread came back
from, and the time it was ready to run without a CPU is told apart (perf script's text, in the
shape perf 6.1 prints it)."""

from __future__ import annotations

import pytest

from benchmarks import gilwait

_LINE = "          python {tid} [000] {t:.6f}: {event}: {rest}"


def _script(*events: tuple[int, float, str, str]) -> str:
    return "\n".join(_LINE.format(tid=tid, t=t, event=e, rest=r) for tid, t, e, r in events)


def test_waits_by_cause_and_time_without_a_cpu():
    take, taken = f"{gilwait.GROUP}:take", f"{gilwait.GROUP}:taken__return"
    script = _script(
        # thread 10: back from a submit, waits 300 us, 95 of them woken by 11 and not running
        (10, 1.000000, "raw_syscalls:sys_exit", "NR 426 = 1"),
        (10, 1.000010, take, "(7f00)"),
        (10, 1.000011, "raw_syscalls:sys_exit", "NR -1 = 1"),  # the uretprobe's own call
        (10, 1.000020, "sched:sched_switch",
         "prev_comm=python prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=x next_pid=0"),
        (11, 1.000210, "sched:sched_wakeup", "comm=python pid=10 prio=120 target_cpu=000"),
        (10, 1.000305, "raw_syscalls:sys_exit", "NR 202 = 0"),  # take_gil's own futex wait
        (10, 1.000310, taken, "(7f00 <- 7f01)"),
        # thread 10 again, no system call since it had the GIL: the switch interval's drop
        (10, 1.001000, take, "(7f00)"),
        (10, 1.006000, taken, "(7f00 <- 7f01)"),
        # thread 11: back from a yield, preempted (R) for 50 us of a 60 us wait
        (11, 1.002000, "raw_syscalls:sys_exit", "NR 24 = 0"),
        (11, 1.002005, take, "(7f00)"),
        (11, 1.002010, "sched:sched_switch",
         "prev_comm=python prev_pid=11 prev_prio=120 prev_state=R ==> next_comm=x next_pid=0"),
        (11, 1.002060, "raw_syscalls:sys_exit", "NR 202 = 0"),
        (11, 1.002065, taken, "(7f00 <- 7f01)"),
    )
    waits = gilwait.Waits(requests=1000.0)
    gilwait.parse(script, waits)
    (submit,) = waits.by_cause["io_uring_enter"]
    assert submit == pytest.approx((300.0, 95.0))
    (drop,) = waits.by_cause[gilwait.EVAL_LOOP]
    assert drop == pytest.approx((5000.0, 0.0))
    (yielded,) = waits.by_cause["sched_yield"]
    assert yielded == pytest.approx((60.0, 50.0))
    table = gilwait.table(waits)
    assert "| io_uring_enter | 1.00 |" in table and gilwait.EVAL_LOOP in table
