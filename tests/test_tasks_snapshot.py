"""``Scheduler.tasks()`` read from another thread while the owner reuses an op: each snapshot
describes the op as one of its uses, never with fields of two (``RingOwner.describe_inflight``).

A stream reuses its recv and sendall ops once their CQE is in, refilling ``args`` for the next
use; a ``tinycoro.lowlevel.Op`` may be refilled whole (``prep``, ``args``, ``what``). A reader
that described an op from its copy of the in-flight table after the op had completed could see
a refill half done (under the GIL, at a thread switch; without it, at any time, and then also
take a reference to a field the owner has just let go). The test below alternates one op
between a send and a recv, so that a mixed description reads "send to alpha" or "recv from
beta". Bounded by counts; the GIL is handed over every 10 us, so that a switch
can fall inside a refill.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest

import tinycoro as tc
import tinycoro.lowlevel as ll
from tinycoro import uring

pytestmark = pytest.mark.timeout(180)

SCALE = max(1, int(os.environ.get("TINYCORO_FT_ROUNDS", "1")))
USES = 4_000 * SCALE  # of the one op, half sends and half recvs
PARKED = 100
SNAPSHOTS = 200 * USES  # at most (a bound, not a wait): the uses end long before
WORDS = {"send to beta", "recv from alpha"}


def _refill(op: ll.Op, prep: object, sock: socket.socket, data: object, what: str) -> None:
    """A refill in three steps, with Python calls between them, where a thread switch may
    fall (as a user's own refill of an op might make it)."""
    op.prep = prep
    op.args = _args(sock, data)
    op.what = _what(what)


def _args(sock: socket.socket, data: object) -> tuple:
    return (sock.fileno(), data, 1, 0)


def _what(what: str) -> str:
    return what


def test_a_snapshot_never_mixes_two_uses_of_a_reused_op(contexts, tiny_switch_interval):
    # The op alternates between a send, which completes at once (a datagram nobody reads: the
    # kernel drops what the full receiver cannot take), and a recv that waits, its context
    # asleep and the op in flight, for the byte this thread sends once the last was taken:
    # the next snapshot then runs while the owner wakes, reaps and refills the op.
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent.connect(sink.getsockname())
    feed, source = socket.socketpair()
    sched = tc.Scheduler(contexts).start()
    try:
        buf = bytearray(1)
        taken = [0]  # bytes the recvs took

        async def reuse() -> int:
            op = ll.Op(uring.prep_nop)
            n = 0
            for i in range(USES):
                if i % 2 == 0:
                    _refill(op, uring.prep_send, sent, b"x", "beta")
                else:
                    _refill(op, uring.prep_recv, source, buf, "alpha")
                n += await op
                taken[0] += i % 2
            return n

        # Parked tasks described before the reuser (tasks() goes in the order they were
        # made): a snapshot's look at the in-flight table comes long before it describes
        # the op, time for the owner to reap it and start the refill.
        gate = tc.Event()
        for _ in range(PARKED):
            sched.submit(gate.wait())
        finished = threading.Event()
        task = sched.submit(reuse(), name="reuser")
        task.add_done_callback(lambda _t: finished.set())
        seen: dict[str, int] = {}
        fed = 0
        for _ in range(SNAPSHOTS):
            for info in sched.tasks():
                if info.name == "reuser" and info.state == "io":
                    seen[info.waits_on] = seen.get(info.waits_on, 0) + 1
            if finished.is_set():
                break
            if fed == taken[0] and fed < USES // 2:
                feed.send(b"x")
                fed += 1
        assert finished.wait(120), f"the op's uses never finished ({fed} bytes fed)"
        assert task.result() == USES
        assert set(seen) <= WORDS, seen
    finally:
        sched.stop()
        for s in (sink, sent, feed, source):
            s.close()
