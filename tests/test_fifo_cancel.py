"""A file read blocked in the kernel (a FIFO with no data yet), then cancelled: the cancel
lands at the read's await only once the kernel is done with the read's buffer, and the read
consumed nothing, so the bytes written afterwards go to the next read."""

import os

import pytest

import tinycoro as tc
from tinycoro.testing import wait_blocked

from helpers.runtime import cancel_and_wait
from helpers.sync import spawn_here

pytestmark = pytest.mark.timeout(60)

PAYLOAD = b"0123456789"


@pytest.fixture
def fifo(tmp_path):
    """``(path, wfd)``: a FIFO with a writer held open (non-blocking), so that opening the
    read side does not wait for one, and *wfd* writes what the reader is to get."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    wfd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        yield path, wfd
    finally:
        os.close(wfd)


def _in_flight(task):
    """The ring operation *task* waits on (it is blocked in the kernel)."""
    op = task.waiting_on()
    assert op is not None and task.engine.inflight.get(op.ud) is op, f"{task!r} is not in the ring"
    return op


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_a_cancelled_fifo_read_leaves_the_next_read_its_bytes(fifo, contexts, how):
    path, wfd = fifo

    async def main():
        async with await tc.io.open(path) as f:
            async def reader():
                if how == "timeout":
                    async with tc.timeout(0.05):
                        return await f.read_at(len(PAYLOAD), 0)
                return await f.read_at(len(PAYLOAD), 0)

            t = tc.spawn(reader())
            await wait_blocked(t)  # suspended in an io_uring read of the empty FIFO
            op = _in_flight(t)
            if how == "cancel":
                await cancel_and_wait(t)
            else:
                with pytest.raises(TimeoutError):
                    await t
            # The interrupt arrived only after the read's completion was reaped: nothing
            # in the kernel may still write into the buffer the read was given.
            assert t.engine.inflight.get(op.ud) is not op
            assert len(f._ops) == 0

            os.write(wfd, PAYLOAD)
            async with tc.timeout(10):
                return await f.read_at(len(PAYLOAD), 0)

    assert tc.run(main(), contexts=contexts) == PAYLOAD


def test_bytes_a_cancelled_fifo_read_took_are_not_lost(fifo, contexts):
    """The cancel and the writer's bytes arrive in the same turn: the read's completion
    carries bytes it took out of the FIFO, with the cancel pending. Those bytes are the
    read's result (short: a FIFO's read waits for more only while nothing interrupts it),
    never dropped; the cancel lands at the reader's next await."""
    path, wfd = fifo

    async def main():
        async with await tc.io.open(path) as f:
            got = []

            async def reader():
                got.append(await f.read_at(2 * len(PAYLOAD), 0))
                await tc.yield_now()  # the cancel lands here

            t = spawn_here(reader())
            await wait_blocked(t)
            op = _in_flight(t)
            # In one step on the reader's thread: the write completes the read (its
            # task work runs as the write returns) before the engine acts on the cancel.
            t.cancel()
            os.write(wfd, PAYLOAD)
            with pytest.raises(tc.Cancelled):
                await t
            assert t.engine.inflight.get(op.ud) is not op
            # Whatever the read did not take is still in the FIFO for the next read.
            rest = len(PAYLOAD) - len(b"".join(got))
            async with tc.timeout(10):
                return b"".join(got) + (await f.read_at(rest, 0) if rest else b"")

    assert tc.run(main(), contexts=contexts) == PAYLOAD
