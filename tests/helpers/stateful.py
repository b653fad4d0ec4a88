"""The frame shared by the stateful tests (tests/test_stateful_*.py).

A hypothesis ``RuleBasedStateMachine`` drives real tinycoro tasks ("actors") on a real,
long-lived Scheduler, one new scheduler per example. Each rule starts an actor or pokes one (sets
the Event it waits on, cancels it) from the test thread, exactly as another thread of a program
would; hypothesis then runs the machine's invariant, which first waits until the runtime has
settled (``helpers.sync.settle``: every wake-up and cancel carried out, every task parked or
done) and then compares what the actors did, and what the primitive's ``statistics()`` says,
with a sequential model of the primitive.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

import tinycoro as tc
from helpers.runtime import CONTEXT_COUNTS
from helpers.sync import is_blocked, settle



def bounded(max_examples: int) -> settings:
    """Deterministic (derandomized, no example database) and bounded by counts, so CI runs the
    same examples every time and the stateful suite stays within a few seconds per machine."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=20,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow],
    )


class ActorMachine(RuleBasedStateMachine):
    """Actors are numbered in the order they are started; ``log`` holds what they reported,
    as tuples ``(event, actor, *details)``, in the order they reported it (list.append is
    atomic, so several context threads may append)."""

    CONTEXTS = 1
    MAX_ACTORS = 32  # more than a run has steps: a start rule is always possible

    def __init__(self) -> None:
        super().__init__()
        self.sched = tc.Scheduler(self.CONTEXTS)
        self.sched.start()
        self.log: list[tuple[Any, ...]] = []
        self.tasks: list[tc.Task] = []
        self.release: list[tc.Event] = []  # release[i]: what actor i waits for once it holds

    def teardown(self) -> None:
        self.sched.stop(timeout=10)

    def room(self) -> bool:
        return len(self.tasks) < self.MAX_ACTORS

    def start(self, script: Callable[[int], Coroutine[Any, Any, Any]]) -> int:
        """Start actor ``i`` running ``script(i)`` on the scheduler; return ``i``."""
        i = len(self.tasks)
        self.release.append(tc.Event())
        self.tasks.append(self.sched.submit(script(i), name=f"actor{i}"))
        return i

    def settle(self) -> None:
        settle(self.sched)

    def events(self, kind: str) -> list[int]:
        """The actors that reported *kind*, in the order they reported it."""
        return [e[1] for e in self.log if e[0] == kind]

    def last(self) -> dict[int, tuple[Any, ...]]:
        """Each actor's last report, without the actor number."""
        return {e[1]: (e[0], *e[2:]) for e in self.log}

    def assert_parked(self, actors) -> None:
        for i in actors:
            t = self.tasks[i]
            assert not t.done() and is_blocked(t), f"actor{i} should be parked: {t!r}"

    def assert_done(self, actors) -> None:
        for i in actors:
            assert self.tasks[i].done(), f"actor{i} should have ended: {self.tasks[i]!r}"


def per_context_count(machine: type[ActorMachine], max_examples: int = 30) -> dict[str, Any]:
    """One unittest TestCase per context count, named ``Test<Machine>Ctx<n>``, for the
    test module's globals; each runs *max_examples* examples of up to 20 steps."""
    out = {}
    for n in CONTEXT_COUNTS:
        cls = type(f"{machine.__name__}Ctx{n}", (machine,), {"CONTEXTS": n})
        case = cls.TestCase
        case.settings = bounded(max_examples)
        case.__name__ = case.__qualname__ = f"Test{machine.__name__}Ctx{n}"
        out[case.__name__] = case
    return out
