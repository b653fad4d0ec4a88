"""Inside a task, ``await op`` iterates the op itself, and a file's ring read iterates itself
(compiled: C slots, core/iterslots, no generator per await). What must hold as with the
generators they replace: the result or the errno, an op awaited again once its await ended,
a second await while one runs (a generator of its own), a cancel while the op waits in the
kernel, a throw into and a close of a half-done await, an op driven by hand through ``send``
(a subclass's own ``__await__`` driven so, not the op's steps), and the read's reading on,
pending set and close.
"""

from __future__ import annotations

import errno
import os

import pytest

import tinycoro as tc
from tinycoro.closing import PendingOps, ResourceOp
from tinycoro.core.traps import Op, await_op
from tinycoro.io.ops import CURRENT_POSITION
from tinycoro.testing import wait_blocked
from tinycoro.uring import prep_nop, prep_read

from helpers.runtime import cancel_and_wait
from helpers.sync import run

pytestmark = pytest.mark.timeout(60)


def _end(it, value):
    """Resume *it* with *value*, which must end its await: the result."""
    with pytest.raises(StopIteration) as stop:
        it.send(value)
    return stop.value.value


def test_inside_a_task_an_op_is_its_own_iterator_to_its_result(contexts):
    async def main():
        op = Op(prep_nop)
        it = op.__await__()
        first = it.send(None)
        return it is op, first is op, _end(it, 7)

    assert run(main(), contexts) == (True, True, 7)


def test_a_negative_result_is_the_oserror_and_the_op_can_be_awaited_again(contexts):
    async def main():
        op = Op(prep_nop)
        op.what = "/nowhere"
        it = op.__await__()
        it.send(None)
        with pytest.raises(FileNotFoundError) as e:
            it.send(-errno.ENOENT)
        return e.value.errno, e.value.filename, [await op for _ in range(3)], op.__await__() is op

    assert run(main(), contexts) == (errno.ENOENT, "/nowhere", [0, 0, 0], True)


def test_a_second_await_while_the_first_runs_gets_a_generator_of_its_own():
    async def main():
        op = Op(prep_nop)
        first = op.__await__()
        assert first.send(None) is op  # the first await waits on the engine
        second = op.__await__()
        assert second is not op
        assert second.send(None) is op
        assert _end(second, 3) == 3
        return _end(first, 5)  # the first is where it was

    assert run(main(), 1) == 5


@pytest.mark.parametrize("how", ["throw", "close"])
def test_a_half_done_await_thrown_into_or_closed_leaves_the_op_idle(how):
    op = Op(prep_nop)

    async def awaiting():
        return await op

    async def main():
        c = awaiting()
        assert c.send(None) is op  # the op yielded, its result not yet sent
        if how == "throw":
            with pytest.raises(KeyError):
                c.throw(KeyError("thrown"))
        else:
            c.close()
        again = op.__await__() is op  # idle: the next await takes its own steps
        op.close()
        return again, await op

    assert run(main(), 1) == (True, 0)


def test_a_cancel_while_the_op_waits_in_the_kernel_lands_at_its_await(contexts):
    r, w = os.pipe()
    buf = bytearray(8)
    op = Op(prep_read, r, buf, len(buf), CURRENT_POSITION)

    async def reader():
        return await op

    async def main():
        t = tc.spawn(reader())
        await wait_blocked(t)
        await cancel_and_wait(t)  # ends once the kernel is done with the read
        os.write(w, b"abc")
        return await op, bytes(buf[:3])

    try:
        assert run(main(), contexts) == (3, b"abc")
    finally:
        os.close(r)
        os.close(w)


def test_an_op_driven_by_hand_in_a_task_takes_its_own_steps(contexts):
    async def main():
        op = Op(prep_nop)
        return op.send(None) is op, _end(op, 4)

    assert run(main(), contexts) == (True, 4)


def test_an_op_driven_by_hand_outside_any_task_says_so():
    op = Op(prep_nop)
    with pytest.raises(RuntimeError, match="outside a tinycoro task"):
        op.send(None)
    with pytest.raises(RuntimeError, match="outside a tinycoro task"):
        op.send(None)  # the failed generator was let go: a new one, the same answer


def test_a_subclass_driven_by_hand_runs_its_own_await():
    """A ResourceOp inherits the op's C slots and ``send``: driven by name, its steps run the
    subclass's own ``__await__`` (which enters the resource's pending set), as the coroutine
    protocol did."""

    async def main():
        pending = PendingOps(lambda: tc.ClosedResourceError("closed"))
        op = ResourceOp(pending, prep_nop)
        assert op.__await__() is not op
        assert op.send(None) is op
        entered = len(pending)
        result = _end(op, 9)
        assert len(pending) == 0
        op2 = ResourceOp(pending, prep_nop)
        op2.send(None)
        with pytest.raises(KeyError):
            op2.throw(KeyError("thrown"))  # into its generator: its finally left the set
        return entered, result, len(pending)

    assert run(main(), 1) == (1, 9, 0)


def test_a_ring_read_is_its_own_iterator_and_reads_on_after_a_short_read(fifo, contexts):
    path, wfd = fifo

    async def main():
        async with await tc.io.open(path) as f:
            buf = bytearray(10)
            read = f._ring_read(memoryview(buf), 0, 0)
            it = read.__await__()
            own = it is read
            pending = len(f._ops)  # entered before its first step
            it.close()  # never yielded: nothing in the ring; out of the pending set
            left = len(f._ops)

            os.write(wfd, b"0123")

            async def reader():
                return await f._ring_read(memoryview(buf), 0, 0)

            t = tc.spawn(reader())
            await wait_blocked(t)  # took the 4 bytes, reads on for the rest
            os.write(wfd, b"456789")
            got = await t
            return own, pending, left, got, bytes(buf), len(f._ops)

    assert run(main(), contexts) == (True, 1, 0, 10, b"0123456789", 0)


def test_a_ring_read_of_a_closed_file_fails_at_its_await_and_leaves_nothing(fifo):
    """Also awaited from compiled code (traps.await_op), where an exception out of
    ``__await__`` itself would come out as Cython's TypeError ("'async for' received an
    invalid object"): the closed check is the read's first step, as the generator's was."""
    path, _ = fifo

    async def main():
        f = await tc.io.open(path)
        view = memoryview(bytearray(4))
        reads = [f._ring_read(view, 0, 0) for _ in range(2)]
        await f.close()
        with pytest.raises(ValueError, match="closed file"):  # a file's "used after close"
            await reads[0]
        with pytest.raises(ValueError, match="closed file"):
            await await_op(reads[1])
        return len(f._ops)

    assert run(main(), 1) == 0
