"""The submit path: the compiled ring's submit, which enters the kernel without the GIL
(tinycoro/_cring.pyx), and the engine's early submit in a long turn.

The compiled submit is a re-implementation of liburing's for the rings tinycoro sets up, so
these tests pin what it must keep: the count it returns, SQEs the kernel did not take being
handed over by the next submit, the kernel's errno, and several context threads submitting at
the same time.
"""

from __future__ import annotations

import errno
import os

import pytest

import tinycoro as tc
from tinycoro import uring
from tinycoro.core import engine as engine_mod
from tinycoro.core.local import thread_state as _local
from tinycoro.core.traps import Op

from helpers.rings import reap

compiled = pytest.mark.skipif(uring.CRing is None, reason=f"compiled ring: {uring.WHY_PURE}")


def _queue_nops(ring, uds) -> None:
    for ud in uds:
        ring.queue(uring.prep_nop, (), ud)


@compiled
def test_submit_returns_what_the_kernel_took_and_zero_when_nothing_is_queued():
    ring = uring.CRing(8)
    try:
        assert ring.submit() == 0  # nothing queued: no system call, nothing taken
        _queue_nops(ring, range(10, 15))
        assert ring.submit() == 5
        assert ring.submit() == 0
        out: list = []
        assert reap(ring, out) == 5
        assert sorted(out) == [(ud, 0) for ud in range(10, 15)]
    finally:
        ring.close()


@compiled
def test_sqes_left_by_a_failed_enter_go_with_the_next_submit():
    """The tail is published before io_uring_enter; when the enter fails (here: the ring fd
    is not a ring for a moment, EOPNOTSUPP), the next submit hands those SQEs over."""
    ring = uring.CRing(8)
    ring_fd = ring.ring_fd
    saved = os.dup(ring_fd)
    try:
        _queue_nops(ring, (21, 22))
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, ring_fd)
        finally:
            os.close(null)
        with pytest.raises(OSError) as info:
            ring.submit()
        assert info.value.errno == errno.EOPNOTSUPP
        os.dup2(saved, ring_fd)
        _queue_nops(ring, (23,))
        assert ring.submit() == 3
        out: list = []
        reap(ring, out)
        assert sorted(out) == [(21, 0), (22, 0), (23, 0)]
    finally:
        os.dup2(saved, ring_fd)  # the ring's own number again, so that close() tears down
        os.close(saved)
        ring.close()


@compiled
def test_a_full_sq_is_submitted_by_queue_and_nothing_is_lost():
    """``queue`` on a full SQ submits through the same path, then takes an SQE again."""
    ring = uring.CRing(4)
    try:
        _queue_nops(ring, range(100, 110))  # 4 SQ entries: two submits happen inside queue
        assert ring.sq_ready() == 2
        ring.submit()
        out: list = []
        reap(ring, out)
        assert sorted(ud for ud, _ in out) == list(range(100, 110))
    finally:
        ring.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_contexts_submitting_at_once_each_get_their_own_completions(tmp_path, contexts):
    """Context threads enter the kernel at the same time (nothing serialises their submits
    any more): every read on every context comes back with its own bytes."""
    block, blocks = 4096, 64
    data = os.urandom(block * blocks)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    tasks, reads = 4 * contexts, 100

    async def reader(f, i: int) -> int:
        checked = 0
        for k in range(reads):
            b = (i * 7 + k * 13) % blocks
            got = await f.read_at(block, b * block)
            assert got == data[b * block : (b + 1) * block]
            checked += 1
        return checked

    async def main() -> int:
        f = await tc.io.open(path, "rb")
        try:
            ts = [tc.spawn(reader(f, i)) for i in range(tasks)]
            return sum([await t for t in ts])
        finally:
            await f.close()

    assert tc.run(main(), contexts=contexts) == tasks * reads


@pytest.mark.timeout(30)
def test_a_long_turn_submits_before_it_ends():
    """Tasks that start an op in one turn: every SUBMIT_EARLY SQEs go to the kernel at once,
    not at the end of the turn. A NOP completes inside io_uring_enter, so the last task of
    the turn finds the earlier ones' completions already posted."""
    early = engine_mod.SUBMIT_EARLY
    n = 2 * early + 3
    seen: list[int] = []

    async def nop() -> None:
        await Op(uring.prep_nop)

    async def last() -> None:
        seen.append(_local.engine.ring.cq_ready())
        await Op(uring.prep_nop)

    async def main() -> None:
        # Spawned before main awaits: all n + 1 run in the next turn of this one context.
        tasks = [tc.spawn(nop()) for _ in range(n)] + [tc.spawn(last())]
        for t in tasks:
            await t

    tc.run(main(), contexts=1)
    assert seen == [(n // early) * early]


# -- whom the GIL is released for --------------------------------------------------------------
# A release of the GIL for the system call wakes any thread waiting for it, which restarts its
# switch interval and finds the GIL taken back before it runs: a context that submitted often,
# releasing every time, held the process's other threads off for seconds (the main thread
# unwinding a Ctrl-C). So a context releases it to submit only while another context is awake,
# the one thread that can use it meanwhile; otherwise it keeps it, and a waiter gets it after
# one switch interval, as from any busy Python thread.
@pytest.mark.timeout(30)
def test_a_lone_context_keeps_the_gil_to_submit():
    async def main() -> bool:
        await Op(uring.prep_nop)  # submitted at the end of this turn
        return _local.engine.ring.release_gil

    assert tc.run(main(), contexts=1) is False


@pytest.mark.timeout(30)
def test_a_context_releases_the_gil_to_submit_while_another_is_awake():
    placed: list[int | None] = []
    stop = False

    async def busy() -> None:  # keeps its context awake: it always has a task ready
        placed.append(tc.current_context())
        while not stop:
            await tc.yield_now()

    async def main() -> bool:
        nonlocal stop
        peer = tc.spawn(busy())
        while not placed:
            await tc.yield_now()
        assert placed[0] != tc.current_context(), "round-robin put both tasks on one context"
        try:
            await Op(uring.prep_nop)
            return _local.engine.ring.release_gil
        finally:
            stop = True
            await peer

    assert tc.run(main(), contexts=2) is True
