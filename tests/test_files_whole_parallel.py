"""A big whole-file read in two halves (tinycoro.io._parallel): the front read by a task of its
own, the back by one IOSQE_ASYNC ring read on the kernel's worker, into the one buffer. The
result is the builtin's whatever the file does meanwhile; errors keep their errno; a cancelled
or failed read never hands out the buffer. PARALLEL_MIN is lowered so the files stay small."""

from __future__ import annotations

import errno
import os

import pytest

import tinycoro as tc
from tinycoro.io import _parallel
from tinycoro.io import FILE_READS_ENV

from helpers.pagecache import (
    cached_file, cold_file, evict, page_cache_fs, read_file_cancelled_while_blocked,
)

MiB = 1 << 20
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["inline", "ring"])
def reads(request, monkeypatch) -> str:
    if request.param == "ring":
        monkeypatch.setenv(FILE_READS_ENV, "ring")
    return request.param


@pytest.fixture
def split(monkeypatch) -> list:
    """Split from 1 MiB up, and record the size of every back half sent to the worker."""
    monkeypatch.setattr(_parallel, "PARALLEL_MIN", MiB)
    backs: list = []
    real = _parallel._prep_read_async

    def prep(sqe, fd, buf, nbytes, offset):
        backs.append(nbytes)
        real(sqe, fd, buf, nbytes, offset)

    monkeypatch.setattr(_parallel, "_prep_read_async", prep)
    return backs


@pytest.mark.parametrize("size", [9 * MiB, 9 * MiB + 1, 12 * MiB + 4095])
def test_a_big_read_is_split_and_whole(size, split, reads, contexts, tmp_path):
    data = os.urandom(size)  # (read_file reads a cached file of <= 8 MiB at the call: f.read())
    path = tmp_path / "big"
    cached_file(path, data)

    async def main():
        whole = await tc.io.read_file(path)
        async with await tc.io.open(path) as f:
            head = await f.read(5)
            rest = await f.read()
        return whole, head + rest

    whole, again = tc.run(main(), contexts=contexts)
    assert type(whole) is bytes and whole == data and again == data
    assert split, "no back half went to the worker: the read was not split"
    assert split[0] == size - (size // 2 & ~4095)


def test_below_the_threshold_nothing_is_split(split, tmp_path):
    path = tmp_path / "medium"
    data = os.urandom(MiB - 1)  # (f.read(): read_file reads it at the call)
    cached_file(path, data)
    async def main():
        async with await tc.io.open(path) as f:
            return await f.read()

    assert tc.run(main(), contexts=1) == data
    assert split == []


def test_many_split_reads_at_once(split, contexts, tmp_path):
    files = [(tmp_path / f"f{i}", os.urandom(9 * MiB + i * 4099)) for i in range(4)]
    for p, d in files:
        cached_file(p, d)

    async def main():
        tasks = [tc.spawn(tc.io.read_file(p)) for p, _ in files]
        return [await t for t in tasks]

    assert tc.run(main(), contexts=contexts) == [d for _, d in files]
    assert len(split) >= len(files)


@pytest.mark.parametrize("how", ["grows", "shrinks into the back", "shrinks into the front", "empties"])
def test_a_split_read_of_a_file_that_changes_size(how, split, reads, tmp_path, monkeypatch):
    """As the builtin: the bytes appended after the size was taken, none past a new end."""
    size = 4 * MiB + 11
    data = os.urandom(size)
    extra = os.urandom(70_000)
    path = tmp_path / "changing"
    cached_file(path, data)
    want = {
        "grows": data + extra, "shrinks into the back": data[: 3 * MiB + 5],
        "shrinks into the front": data[: MiB + 5], "empties": b"",
    }[how]
    real = os.fstat
    armed = [False]
    ino = os.stat(path).st_ino

    def fstat(fd):
        st = real(fd)
        if armed[0] and st.st_ino == ino:
            armed[0] = False
            if how == "grows":
                with open(path, "ab") as w:
                    w.write(extra)
            else:
                os.truncate(path, len(want))
        return st

    monkeypatch.setattr(os, "fstat", fstat)

    async def main():
        async with await tc.io.open(path) as f:
            armed[0] = True
            return await f.read()

    got = tc.run(main(), contexts=1)
    assert not armed[0] and split, "the test tested nothing"
    assert got == want


def test_a_failed_back_half_keeps_its_errno(contexts, monkeypatch, tmp_path):
    """The back half's error is the read's, with its errno; the front task's outcome is not
    reported as a failure nothing awaited."""
    monkeypatch.setattr(_parallel, "PARALLEL_MIN", MiB)
    real = _parallel._prep_read_async

    def bad_fd(sqe, fd, buf, nbytes, offset):
        real(sqe, 1 << 20, buf, nbytes, offset)  # a descriptor that is not open: EBADF

    monkeypatch.setattr(_parallel, "_prep_read_async", bad_fd)
    path = tmp_path / "f"
    cached_file(path, os.urandom(9 * MiB))

    async def main():
        try:
            await tc.io.read_file(path)
        except OSError as e:
            return e.errno
        return None

    with tc.Scheduler(contexts) as s:
        assert s.run_sync(main(), timeout=60) == errno.EBADF


def test_cancel_a_split_read_while_its_halves_wait_on_the_disk(contexts, split, tmp_path):
    """Cancelled with both halves reading from the disk: Cancelled (or the whole file, if it
    finished first), never a buffer handed out half-filled; the file reads whole afterwards."""
    if not page_cache_fs(tmp_path):
        pytest.skip("tmpfs keeps every page in the page cache")
    data = os.urandom(16 * MiB)
    path = tmp_path / "cold"
    cached_file(path, data)

    for _ in range(3):
        evict(path)
        got = tc.run(read_file_cancelled_while_blocked(path), contexts=contexts)
        assert got is None or got == data
    assert tc.run(tc.io.read_file(path), contexts=1) == data


def test_cancel_a_cached_split_read_at_every_stage(contexts, split, tmp_path):
    """Cancelled after 0, 1, 2, ... turns of its context (the back half on the worker, the
    front task reading or done): Cancelled or the whole file, never a short or torn one, and
    the scheduler stops clean (no op left in flight, no failure nothing awaited)."""
    data = os.urandom(24 * MiB + 3)
    path = tmp_path / "cached"
    cached_file(path, data)

    async def main():
        outcomes = []
        for turns in range(12):
            t = tc.spawn(tc.io.read_file(path))
            for _ in range(turns):
                await tc.yield_now()
            t.cancel()
            try:
                got = await t
            except tc.Cancelled:
                outcomes.append(None)
            else:
                assert got == data
                outcomes.append(len(got))
        return outcomes

    with tc.Scheduler(contexts) as s:
        outcomes = s.run_sync(main(), timeout=100)
        assert s.run_sync(tc.io.read_file(path), timeout=60) == data
    assert None in outcomes
    assert split


def _tasks_run(s) -> int:
    return sum(c.tasks_run for c in s.stats().contexts)


def test_a_split_read_is_done_by_its_caller_alone(contexts, split, tmp_path):
    """Both halves are the caller's: no task of its own for the front half, so none that a
    dashboard counts, that the stop protocol waits for, or that goes on copying into the
    buffer after a cancelled read has returned. Whole reads and reads cancelled at every
    stage finish exactly the tasks the test made."""
    data = os.urandom(24 * MiB + 3)
    path = tmp_path / "cached"
    cached_file(path, data)

    async def reads(s):
        me = tc.current_task().id
        assert await tc.io.read_file(path) == data
        made = 0
        for turns in range(8):
            t = tc.spawn(tc.io.read_file(path))
            made += 1
            for _ in range(turns):
                await tc.yield_now()
            t.cancel()
            try:
                assert await t == data
            except tc.Cancelled:
                pass
            # The read is over: nothing of it runs on, on this context or another
            assert [i.id for i in s.tasks()] == [me], s.tasks()
        return made

    with tc.Scheduler(contexts) as s:
        before = _tasks_run(s)
        made = s.run_sync(reads(s), timeout=100)
        after = s.run_sync(_count_tasks_run(s), timeout=60)
    assert split, "no read was split: the test tested nothing"
    # The run_sync task of reads(), the reads it spawned, and nothing else.
    assert after - before == 1 + made


async def _count_tasks_run(s) -> int:
    return _tasks_run(s)


def test_a_split_read_blocked_on_the_disk_is_one_task(contexts, split, tmp_path):
    """While a split read waits on the disk, the scheduler holds the caller's task and the
    reader's, no third one; and the cancel takes it back whole (Cancelled or the content)."""
    path, data = cold_file(tmp_path, 16 * MiB)

    async def main(s):
        from tinycoro.testing import wait_blocked

        t = tc.spawn(tc.io.read_file(path))
        seen = None
        ended = True
        try:
            await wait_blocked(t)
            seen = sorted(i.id for i in s.tasks())
            # Read after the listing: a reader not done then was live throughout it. It may
            # have ended before (the disk answered between its block and the listing), and
            # then it is rightly left out.
            ended = t.done()
        except RuntimeError:
            pass  # it finished before it was ever seen blocked
        t.cancel()
        try:
            got = await t
        except tc.Cancelled:
            got = None
        return seen, tc.current_task().id, t.id, ended, got

    with tc.Scheduler(contexts) as s:
        seen, caller, reader, ended, got = s.run_sync(main(s), timeout=100)
    assert got is None or got == data
    if seen is not None:
        # The caller and the reader, no third task (the old split spawned one for its front
        # half); the reader may be missing only if it had ended by the listing's end.
        assert caller in seen and set(seen) <= {caller, reader}, (seen, caller, reader)
        assert ended or reader in seen, (seen, caller, reader)


def test_closing_the_file_ends_a_split_read_in_both_halves(contexts, split, tmp_path):
    """A close from another task while both halves read from the disk ends the read with
    ClosedResourceError (rule 10: the back half is pending on the file too), or with the
    ValueError of a closed file at the front half's next chunk, or it finished first; either way nothing is left in flight and the scheduler stops clean."""
    path, data = cold_file(tmp_path, 16 * MiB)

    async def main():
        from tinycoro.testing import wait_blocked

        f = await tc.io.open(path)
        t = tc.spawn(f.read())
        try:
            await wait_blocked(t)
        except RuntimeError:
            pass  # it finished before it was ever seen blocked
        await f.close()
        try:
            return await t
        except tc.ClosedResourceError:
            return None  # ended while pending
        except ValueError as e:  # a chunk of the front half started after the close
            assert "closed file" in str(e)
            return None

    with tc.Scheduler(contexts) as s:
        got = s.run_sync(main(), timeout=100)
    assert got is None or got == data
    assert all(c.io_inflight == 0 for c in s.stats().contexts)


def test_a_split_read_in_an_abandoned_finally_leaves_nothing_in_the_kernel(contexts, split, tmp_path):
    """A task its scheduler abandons (stop past its timeout) runs its finally block on a
    stopped engine, where no await can suspend. A split read started there hands its back half
    to the kernel at once (the engine's ``arm_now``), before its first await is refused: the
    stop must still have that read's completion in before it closes the ring (rule 8), or the
    kernel's worker goes on copying into a buffer that Python is free to let go."""
    path = tmp_path / "big"
    cached_file(path, os.urandom(4 * MiB))
    s = tc.Scheduler(contexts).start()
    ready = tc.Latch(1)

    async def holder():
        async with await tc.io.open(path) as f:
            try:
                ready.count_down()
                await tc.Event().wait()
            finally:
                await f.read()  # its back half goes to the kernel before the refusal

    t = s.submit(holder())
    s.run_sync(ready.wait(), timeout=10)
    s.stop(timeout=0)
    assert t.cancelled()
    assert split, "no back half was started in the finally block"
    left = [op for e in s._engines for op in e.inflight.values()]
    assert left == [], f"the ring was closed with {left} in the kernel"
