"""The sleep and wake protocol across contexts: a context about to sleep while another one is
awake yields the CPU once and looks again first (``Engine._sleep``, ``Engine._peer_awake``), and no wake-up is
lost on the way, whether it comes as a push from another context or as a completion."""

from __future__ import annotations

import os
import threading

import pytest

import tinycoro as tc
from tinycoro import lowlevel
from tinycoro.net import multishot

from helpers.streams import tcp_pair

pytestmark = pytest.mark.timeout(60)

MULTISHOT = multishot.AVAILABLE
SPIN_LIMIT = 20_000_000  # iterations of a busy loop waiting for another thread: a bound, not a clock


class YieldRecorder:
    """Stands in for ``os.sched_yield``: records which engine yielded and in what state (is
    it between its last look and its sleep?), then yields for real."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.seen = threading.Event()
        self._real = os.sched_yield

    def __call__(self) -> None:
        engine = lowlevel.current_engine()
        sleeping = engine is not None and engine.sleeping
        self.calls.append((threading.current_thread().name, sleeping))
        self.seen.set()
        self._real()


def test_a_context_yields_once_before_sleeping_while_another_runs(monkeypatch):
    """Context 1 has nothing to do while context 0 runs a task that never awaits: before it
    sleeps it yields the CPU (after publishing ``sleeping``) and looks again."""
    rec = YieldRecorder()
    monkeypatch.setattr(os, "sched_yield", rec)

    async def busy() -> bool:
        for _ in range(SPIN_LIMIT):  # holds context 0 awake until context 1 has yielded
            if rec.seen.is_set():
                return True
        return False

    assert tc.run(busy(), contexts=2), "context 1 went to sleep without yielding first"
    threads = {name for name, _ in rec.calls}
    assert any(name.endswith("ctx1") for name in threads), rec.calls
    assert all(sleeping for _, sleeping in rec.calls), rec.calls


def test_a_single_context_sleeps_without_yielding(monkeypatch):
    """One context has no peer to give the CPU to: it sleeps at once, as before."""
    rec = YieldRecorder()
    monkeypatch.setattr(os, "sched_yield", rec)

    async def main() -> None:
        for _ in range(20):
            await tc.sleep(0.001)  # each one a real sleep of the context

    tc.run(main(), contexts=1)
    assert rec.calls == []


def test_no_wake_up_is_lost_between_contexts_taking_turns(contexts):
    """Pairs of tasks on different contexts hand a token back and forth through events, so
    each hand-off wakes a context that has just gone to sleep or is about to (after its
    yield); a lost wake-up would hang here until the timeout."""
    rounds, pairs = 300, 4

    async def player(wait_on: list, then_set: list) -> int:
        for i in range(rounds):
            await wait_on[i].wait()
            then_set[i].set()
        return rounds

    async def main() -> int:
        tasks = []
        for _ in range(pairs):
            ping = [tc.Event() for _ in range(rounds)]
            pong = [tc.Event() for _ in range(rounds)]
            # spawned one after the other, round robin puts the two on different contexts
            tasks.append(tc.spawn(player(ping, pong)))
            tasks.append(tc.spawn(player(pong, ping[1:] + [tc.Event()])))
            ping[0].set()
        return sum([await t for t in tasks])

    assert tc.run(main(), contexts=contexts) == 2 * pairs * rounds


def test_no_completion_is_lost_while_contexts_take_turns(contexts, recv_path):
    """Echo pairs whose ends sit on different contexts: every message is a completion that
    arrives while its context sleeps, yields or runs its turn; all of them come back."""
    conns, messages = 6, 200

    async def echo(stream) -> None:
        async with stream:
            while True:
                data = await stream.recv(64)
                if not data:
                    return
                await stream.sendall(data)

    async def client(stream, k: int) -> int:
        got = 0
        async with stream:
            for i in range(messages):
                msg = f"{k}:{i};".encode()
                await stream.sendall(msg)
                buf = b""
                while len(buf) < len(msg):
                    chunk = await stream.recv(64)
                    assert chunk, "the echo closed early"
                    buf += chunk
                assert buf == msg
                got += 1
        return got

    async def main() -> int:
        tasks = []
        for k in range(conns):
            c, s = await tcp_pair()
            tasks.append(tc.spawn(echo(s)))
            tasks.append(tc.spawn(client(c, k)))
        results = [await t for t in tasks]
        return sum(r for r in results if r)

    assert tc.run(main(), contexts=contexts) == conns * messages
