"""Page-cache reads completed inline (preadv2 with RWF_NOWAIT) and the ring path they fall back
to: which path a read takes, that both give os.pread's bytes, and that a task reading a cached
file in a loop still lets the other tasks of its context run."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinycoro as tc
from tinycoro.testing import wait_blocked
from tinycoro.core.engine import INLINE_BUDGET
from tinycoro.io import FILE_READS_ENV

from helpers.budget import gaps, loop_beside_counter
from helpers.pagecache import PAGE, cold_file
from helpers.pagecache import cached_file as _cached_file
from helpers.pagecache import evict as _evict
from helpers.pagecache import page_cache_fs as _page_cache_fs
from helpers.runtime import cancel_and_wait

pytestmark = pytest.mark.timeout(60)


def _ops(s: tc.Scheduler) -> int:
    """io_uring completions reaped so far on the calling task's context (read on it)."""
    return s.stats().contexts[tc.current_context()].ops


def test_cached_reads_complete_without_the_ring(contexts, tmp_path):
    data = os.urandom(8 * PAGE + 123)
    path = tmp_path / "cached"
    _cached_file(path, data)

    with tc.Scheduler(contexts) as s:
        async def main():
            f = await tc.io.open(path)
            before = _ops(s)
            got = [await f.read_at(PAGE, 3 * PAGE), await f.read_at(10, len(data) - 4)]
            buf = bytearray(PAGE)
            got.append((await f.readinto_at(buf, PAGE), bytes(buf)))
            got.append(await f.read(100))
            got.append((await f.readinto(memoryview(buf)[:50]), bytes(buf[:50])))
            got.append(await f.readline())
            used = _ops(s) - before  # read on the same step as `before`: nothing else ran here
            await f.close()
            return got, used

        got, used = s.run_sync(main(), timeout=30)
    nl = data.find(b"\n", 150)
    assert got == [
        data[3 * PAGE:4 * PAGE], data[-4:], (PAGE, data[PAGE:2 * PAGE]), data[:100],
        (50, data[100:150]), data[150:nl + 1] if nl >= 0 else data[150:],
    ]
    assert used == 0, f"{used} cached reads went through the ring"


def test_the_switch_sends_cached_reads_through_the_ring(tmp_path, monkeypatch):
    monkeypatch.setenv(FILE_READS_ENV, "ring")
    data = os.urandom(4 * PAGE)
    path = tmp_path / "cached"
    _cached_file(path, data)

    with tc.Scheduler(1) as s:
        async def main():
            async with await tc.io.open(path) as f:
                before = _ops(s)
                got = [await f.read_at(PAGE, i * PAGE) for i in range(4)]
                return got, _ops(s) - before

        got, used = s.run_sync(main(), timeout=30)
    assert b"".join(got) == data
    assert used == 4


def test_ring_reads_fill_the_bytes_they_return(contexts, tmp_path, monkeypatch):
    """Through the ring, a read fills the bytes object it returns (compiled) or a buffer it
    copies (pure): whole, short at EOF, empty past it; each result its own object."""
    monkeypatch.setenv(FILE_READS_ENV, "ring")
    data = os.urandom(3 * PAGE + 100)
    path = tmp_path / "ring"
    _cached_file(path, data)

    async def main():
        async with await tc.io.open(path) as f:
            whole = [await f.read_at(PAGE, i * PAGE) for i in range(3)]
            again = await f.read_at(PAGE, 0)
            short = await f.read_at(PAGE, 3 * PAGE)
            past = await f.read_at(PAGE, 10 * PAGE)
            positioned = await f.read(2 * PAGE), await f.read(2 * PAGE), await f.read(PAGE)
            return whole, again, short, past, positioned

    with tc.Scheduler(contexts) as s:
        whole, again, short, past, positioned = s.run_sync(main(), timeout=30)
    assert [type(b) for b in (*whole, again, short, past, *positioned)] == [bytes] * 9
    assert whole == [data[i * PAGE:(i + 1) * PAGE] for i in range(3)]
    assert again == whole[0] and again is not whole[0]
    assert short == data[3 * PAGE:] and past == b""
    assert positioned == (data[:2 * PAGE], data[2 * PAGE:], b"")


def test_an_uncached_page_is_read_right(contexts, tmp_path):
    """A page not in the cache: the inline attempt misses and one io_uring read does it. Here
    the miss itself starts read-ahead (RWF_NOWAIT does not imply IOCB_NOIO on this kernel),
    and the VM's disk can finish it before the kernel looks again, so the attempt may also
    return the bytes: the test asserts at most one ring read, not exactly one."""
    path, data = cold_file(tmp_path, 4 * PAGE)

    with tc.Scheduler(contexts) as s:
        async def main():
            async with await tc.io.open(path) as f:
                before = _ops(s)
                got = await f.read_at(PAGE, 2 * PAGE)
                return got, _ops(s) - before

        got, used = s.run_sync(main(), timeout=30)
    assert got == data[2 * PAGE:3 * PAGE]
    assert used <= 1


def test_a_short_nowait_read_is_not_eof(contexts, tmp_path):
    """The first page cached, the rest not: RWF_NOWAIT returns one page, which is not EOF;
    the rest comes through the ring (or inline, when the read-ahead the miss starts is done
    first), and the caller gets the whole range either way."""
    if not _page_cache_fs(tmp_path):
        pytest.skip("the temporary directory is on tmpfs: nothing can be evicted")
    data = os.urandom(16 * PAGE)
    path = tmp_path / "half"
    _cached_file(path, data)
    _evict(path, keep_first_page=True)

    with tc.Scheduler(contexts) as s:
        async def main():
            async with await tc.io.open(path) as f:
                before = _ops(s)
                got = await f.read_at(4 * PAGE, 0)
                return got, _ops(s) - before

        got, used = s.run_sync(main(), timeout=30)
    assert got == data[:4 * PAGE]
    assert used <= 1


def test_eof_is_seen_inline(contexts, tmp_path):
    data = os.urandom(PAGE + 10)
    path = tmp_path / "eof"
    _cached_file(path, data)

    with tc.Scheduler(contexts) as s:
        async def main():
            async with await tc.io.open(path) as f:
                before = _ops(s)
                got = [
                    await f.read_at(100, len(data)),  # at EOF
                    await f.read_at(100, len(data) + 5 * PAGE),  # past it
                    await f.read_at(PAGE, PAGE),  # straddling it: short
                    await f.readinto_at(bytearray(10), len(data)),
                    await f.read(),  # everything, then the empty read that ends it
                ]
                return got, _ops(s) - before

        got, used = s.run_sync(main(), timeout=30)
    assert got == [b"", b"", data[PAGE:], 0, data]
    assert used == 0


def test_fifo_reads_go_through_the_ring_and_close_ends_them(contexts, tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    # Held open for writing, so that opening the FIFO for reading does not wait for a writer.
    wfd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        with tc.Scheduler(contexts) as s:
            async def main():
                f = await tc.io.open(path)
                os.write(wfd, b"hello")
                first = await f.read(5)

                async def reader():
                    return await f.read(10)

                t = tc.spawn(reader())
                await wait_blocked(t)  # suspended in an io_uring read of the FIFO
                await f.close()
                with pytest.raises(tc.ClosedResourceError):
                    await t
                return first

            assert s.run_sync(main(), timeout=30) == b"hello"
    finally:
        os.close(wfd)


def test_o_direct_reads_stay_on_the_ring(tmp_path):
    data = os.urandom(4 * PAGE)
    path = tmp_path / "direct"
    _cached_file(path, data)

    with tc.Scheduler(1) as s:
        async def main():
            try:
                f = await tc.io.open(path, direct=True)
            except OSError as e:  # a file system without O_DIRECT
                pytest.skip(f"O_DIRECT refused here: {e}")
            async with f:
                buf = tc.io.aligned_buffer(PAGE)
                before = _ops(s)
                n = await f.readinto_at(buf, PAGE)
                return n, bytes(buf), _ops(s) - before

        n, got, used = s.run_sync(main(), timeout=30)
    assert (n, got) == (PAGE, data[PAGE:2 * PAGE])
    assert used == 1


@pytest.mark.parametrize("write", [False, True], ids=["read", "write"])
def test_o_direct_io_reaches_the_kernel_at_its_step(tmp_path, write):
    """The device idles until an O_DIRECT read or write arrives: its SQE is handed over as
    the step that started it ends, not with the rest of the turn's batch. The task that runs
    next in the same turn finds nothing left unsubmitted."""
    path = tmp_path / "direct"
    _cached_file(path, os.urandom(4 * PAGE))

    with tc.Scheduler(1) as s:
        async def main():
            try:
                f = await tc.io.open(path, "r+b", direct=True)
            except OSError as e:  # a file system without O_DIRECT
                pytest.skip(f"O_DIRECT refused here: {e}")
            async with f:
                buf = tc.io.aligned_buffer(PAGE)
                unsubmitted = []

                async def device():
                    if write:
                        await f.write_at(buf, PAGE)
                    else:
                        await f.readinto_at(buf, PAGE)

                async def next_in_the_turn():
                    unsubmitted.append(s.stats().contexts[tc.current_context()].io_pending)

                # spawned in this order, both run in the next turn: the read's step, then the look
                first = tc.spawn(device())
                second = tc.spawn(next_in_the_turn())
                await first
                await second
                return unsubmitted

        assert s.run_sync(main(), timeout=30) == [0]


def test_a_file_system_without_nowait_falls_back_to_the_ring():
    """procfs files are regular files that refuse RWF_NOWAIT (EOPNOTSUPP): read through the
    ring, with the same bytes as a plain read."""
    with open("/proc/version", "rb") as pf:
        want = pf.read()

    with tc.Scheduler(1) as s:
        async def main():
            async with await tc.io.open("/proc/version") as f:
                before = _ops(s)
                first = await f.read_at(4096, 0)
                second = await f.read_at(4096, 0)
                return first, second, _ops(s) - before

        first, second, used = s.run_sync(main(), timeout=30)
    assert first == second == want
    assert used == 4  # each read: the ring's short read, then the empty one that is EOF


def test_close_on_another_context_while_reading_inline(tmp_path):
    """A reader on one context, closing from another: the reader ends with the file's closed
    errors, never with bytes from a descriptor number reused meanwhile, never a crash."""
    data = os.urandom(64 * PAGE)
    path = tmp_path / "shared"
    _cached_file(path, data)

    with tc.Scheduler(2) as s:
        async def main():
            f = await tc.io.open(path)
            reading = tc.Event()

            async def reader():
                n = 0
                try:
                    while n < 1_000_000:
                        off = (n % 64) * PAGE
                        assert await f.read_at(PAGE, off) == data[off:off + PAGE]
                        n += 1
                        if n == 100:
                            reading.set()
                except (ValueError, tc.ClosedResourceError) as e:
                    return type(e), n
                return None, n

            async def closer():
                await reading.wait()
                await f.close()
                # Reuse the number at once: a read that used it would see other bytes.
                other = await tc.io.open(path)
                await other.close()

            r = tc.spawn(reader())
            c = tc.spawn(closer())
            await c
            return await r

        kind, n = s.run_sync(main(), timeout=30)
    assert kind in (ValueError, tc.ClosedResourceError) and n >= 100


class _LoopReader:
    """A task body that reads a cached file page after page in a tight loop, until *limit*
    reads are done (so a test cannot hang on it); ``started`` is set after the first 100
    reads."""

    def __init__(self, f, pages: int, limit: int) -> None:
        self.f, self.pages, self.limit = f, pages, limit
        self.reads = 0
        self.started = tc.Event()

    async def __call__(self) -> None:
        while self.reads < self.limit:
            await self.f.read_at(PAGE, (self.reads % self.pages) * PAGE)
            self.reads += 1
            if self.reads == 100:
                self.started.set()


@pytest.mark.timeout(120)
def test_a_task_reading_a_cached_file_lets_its_context_run_others(contexts, tmp_path):
    """One task reads a cached file in a tight loop; another task on the same context counts
    yield_now()s. The counter finishes, and between two of its steps the reader completes at
    most INLINE_BUDGET reads (then it suspends; a cache miss makes it suspend sooner)."""
    data = os.urandom(64 * PAGE)
    path = tmp_path / "loop"
    _cached_file(path, data)
    limit = 200_000  # bounds the test if the reader never let the counter run

    with tc.Scheduler(contexts) as s:
        async def main():
            f = await tc.io.open(path)
            offsets = itertools.cycle(range(0, len(data), PAGE))  # page after page
            reads, seen = await loop_beside_counter(lambda: f.read_at(PAGE, next(offsets)), limit)
            await f.close()
            return reads, seen

        reads, seen = s.run_sync(main(), timeout=100)
    assert reads < limit, "the counter never ran while the reader read"
    assert max(gaps(seen)) <= INLINE_BUDGET, gaps(seen)


def test_cancel_reaches_a_task_reading_a_cached_file_in_a_loop(contexts, tmp_path):
    """Inline reads do not suspend, but the budget's yield does: a cancel lands there, within
    INLINE_BUDGET reads of the reader's next step, and the file stays usable."""
    data = os.urandom(16 * PAGE)
    path = tmp_path / "cancel"
    _cached_file(path, data)
    limit = 1_000_000

    with tc.Scheduler(contexts) as s:
        async def main():
            f = await tc.io.open(path)
            loop = _LoopReader(f, 16, limit)
            t = tc.spawn(loop())
            await loop.started.wait()
            await cancel_and_wait(t)
            after = await f.read_at(PAGE, 0)
            await f.close()
            return loop.reads, after

        reads, after = s.run_sync(main(), timeout=30)
    assert 100 <= reads < limit
    assert after == data[:PAGE]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 3 * PAGE)), min_size=1, max_size=30))
def test_reads_equal_pread_at_random_offsets(tmp_path_factory, spans):
    path = tmp_path_factory.mktemp("pread") / "data"
    if not path.exists():
        _cached_file(path, os.urandom(9 * PAGE + 777))
    fd = os.open(path, os.O_RDONLY)
    try:
        want = [os.pread(fd, size, off) for off, size in spans]
    finally:
        os.close(fd)

    async def main():
        async with await tc.io.open(path) as f:
            got = []
            for off, size in spans:
                got.append(await f.read_at(size, off))
                buf = bytearray(size)
                n = await f.readinto_at(buf, off)
                got.append(bytes(buf[:n]))
            return got

    got = tc.run(main(), contexts=1)
    assert got == [w for w in want for _ in (0, 1)]


def test_a_cached_read_at_is_a_coroutine_spawn_takes_on_either_path(contexts, tmp_path):
    """A cached read is done at read_at's call and returns the finished result as its
    awaitable; that awaitable, and the one returned once the step's budget is spent (which
    suspends first), are still what tc.spawn takes, and give the bytes (rule 14)."""
    import collections.abc

    data = os.urandom(4 * PAGE)
    path = tmp_path / "spawned"
    _cached_file(path, data)

    async def main():
        async with await tc.io.open(path) as f:
            awaitables = [f.read_at(PAGE, i * PAGE % len(data)) for i in range(2 * INLINE_BUDGET)]
            assert all(isinstance(a, collections.abc.Coroutine) for a in awaitables)
            tasks = [tc.spawn(a) for a in awaitables]
            return [await t for t in tasks]

    got = tc.run(main(), contexts=contexts)
    assert got == [data[i * PAGE % len(data):][:PAGE] for i in range(2 * INLINE_BUDGET)]


def test_a_finished_read_hands_its_value_back_and_holds_no_reference():
    """The awaitable of a read finished at its call (compiled, or the pure runtime's): its
    result on await and on send, errors from throw, and no reference kept per await (its
    await runs through a C slot when compiled, where a lost or extra reference would go
    unseen by everything else)."""
    import gc
    import sys

    from tinycoro.io.pagecache import done

    value = object()
    before = sys.getrefcount(value)
    finished = done(value)

    async def twice(first):
        return (await first), (await done(value))

    for _ in range(1000):
        coro = twice(finished)
        with pytest.raises(StopIteration) as e:
            coro.send(None)
        assert e.value.value == (value, value)
    del e
    with pytest.raises(StopIteration) as stop:
        finished.send(None)
    assert stop.value.value is value
    del stop
    with pytest.raises(KeyError):
        finished.throw(KeyError("k"))
    finished.close()
    del finished
    gc.collect()  # the pure runtime's raised exceptions and frames form cycles; a leaked
    assert sys.getrefcount(value) == before  # reference would survive the collection


def test_the_read_paths_literal_range_is_max_offset():
    """read_at and readinto_at ask pagecache.offset_ok, whose Python twin compares with
    MAX_OFFSET's literal (compiled, C reads of the int up to 2**63 - 1, which is MAX_OFFSET)."""
    import pathlib

    from tinycoro.buffers import MAX_OFFSET
    from tinycoro.io.pagecache import offset_ok

    assert MAX_OFFSET == 0x7FFF_FFFF_FFFF_FFFF
    folder = pathlib.Path(tc.__file__).parent / "io"  # (compiled: no getsource)
    assert (folder / "file.py").read_text().count("<= 0x7FFF_FFFF_FFFF_FFFF") == 0
    assert (folder / "pagecache.py").read_text().count("<= 0x7FFF_FFFF_FFFF_FFFF") == 1
    for good in (0, 1, 4096, MAX_OFFSET):
        assert offset_ok(good)
    for bad in (-1, MAX_OFFSET + 1, 2**64, True, 1.0, "1", None):
        assert not offset_ok(bad)
    # about the one-digit ints the compiled check reads off the header (30-bit digits), and
    # the two-digit ones it reads as a C long long; the Python twin says the same of each
    from tinycoro.io.pagecache import offset_ok_py

    for base in (2**15, 2**30, 2**60, 2**63):
        for x in (base - 1, base, base + 1):
            for value in (x, -x):
                assert offset_ok(value) == offset_ok_py(value) == (0 <= value <= MAX_OFFSET), value


@pytest.mark.parametrize("value", [(1, 2), KeyError("k"), None, b"x"], ids=repr)
def test_a_finished_read_hands_back_any_value_as_it_is(value):
    """The finished awaitable's result is its value itself, whichever way it is awaited (3.11
    asks its am_send slot, 3.12 and later its iterator slot, next() and send() the same): a
    tuple is not spread into StopIteration's arguments, an exception is not raised."""
    from tinycoro.io.pagecache import done

    async def await_it():
        return await done(value)

    coro = await_it()
    with pytest.raises(StopIteration) as e:
        coro.send(None)
    assert e.value.value is value
    for step in (lambda d: next(d.__await__()), lambda d: d.send(None)):
        with pytest.raises(StopIteration) as e:
            step(done(value))
        assert e.value.value is value
    del e


def test_a_cached_reads_bytes_never_change_and_hash_as_new(contexts, tmp_path):
    """Cached reads may refill the bytes object an earlier read returned once its holder let
    go of it: a result anyone still holds (a list, a name, a view, a dict key) keeps its
    content, and a refilled one hashes as its new content (no stale cached hash)."""
    data = os.urandom(16 * PAGE)
    path = tmp_path / "reuse"
    _cached_file(path, data)
    page = [data[i * PAGE:(i + 1) * PAGE] for i in range(16)]

    async def main():
        f = await tc.io.open(path)
        kept, seen = [], {}
        for i in range(64):
            j = i * 7 % 16
            got = await f.read_at(PAGE, j * PAGE)
            assert got == page[j]
            assert hash(got) == hash(page[j])  # (the hash of a refilled one is its content's)
            if i % 3 == 0:
                kept.append((j, got))
            elif i % 3 == 1:
                seen[got] = j  # a dict key: a refill would leave it unfindable
            del got
        view = memoryview(await f.read_at(PAGE, 0))  # held by a view only
        for _ in range(4):
            await f.read_at(PAGE, 5 * PAGE)
        await f.close()
        return kept, seen, bytes(view)

    kept, seen, viewed = tc.run(main(), contexts=contexts)
    assert all(got == page[j] for j, got in kept)
    assert all(seen[page[j]] == j for j in set(seen.values()))
    assert viewed == page[0]


def _twins(python_twin, name: str) -> list:
    """A page-cache read in its Python spelling, and its compiled one (``_cfile.<name>``)
    where the compiled runtime is built: the two a test holds to the same answers."""
    from tinycoro import compiled

    cfile = compiled.load("_cfile")
    return [python_twin] + ([getattr(cfile, name)] if cfile is not None else [])


def test_the_inline_read_into_a_buffer_agrees_with_its_python_twin(tmp_path):
    """pagecache.pread_nowait_into (compiled: _cfile's C read; pure: os.preadv) fills a
    buffer from a byte on, whole, short at EOF, 0 past it, and both spellings agree."""
    from tinycoro.io import pagecache

    data = os.urandom(2 * PAGE + 10)
    path = tmp_path / "into"
    _cached_file(path, data)
    twins = _twins(pagecache.pread_nowait_into_py, "pread_nowait_into")
    fd = os.open(path, os.O_RDONLY)
    try:
        for into in twins:
            buf = bytearray(3 * PAGE)
            view = memoryview(buf)
            assert into(fd, view[:PAGE], 0, PAGE) == PAGE, into
            assert buf[:PAGE] == data[PAGE:2 * PAGE]
            assert into(fd, buf, PAGE, 2 * PAGE) == 10  # from byte PAGE of buf: short at EOF
            assert buf[PAGE:PAGE + 10] == data[2 * PAGE:]
            assert into(fd, buf, 0, 3 * PAGE) == 0  # past EOF
    finally:
        os.close(fd)


def test_the_inline_read_into_a_buffer_returns_minus_the_errno_of_a_failure(tmp_path):
    """pagecache.pread_nowait_into, both spellings, answers a failure with minus its errno,
    as pread_nowait answers with the errno: no exception to catch around every read; a page
    not cached is minus EAGAIN (NOT_CACHED)."""
    import errno

    from tinycoro.io import pagecache

    path = tmp_path / "into-errno"
    _cached_file(path, os.urandom(PAGE))
    wfd = os.open(path, os.O_WRONLY)
    try:
        for into in _twins(pagecache.pread_nowait_into_py, "pread_nowait_into"):
            assert into(wfd, bytearray(PAGE), 0, 0) == -errno.EBADF, into  # not open for reading
        assert pagecache.NOT_CACHED == -errno.EAGAIN
    finally:
        os.close(wfd)


def test_the_inline_read_returns_a_failures_errno_as_its_python_twin_does(tmp_path):
    """pagecache.pread_nowait (compiled: _cfile's C read; pure: os.preadv) returns the bytes,
    and the errno of a failure other than "not cached" as a number, not an exception: the
    read path tells the three apart without a try around every read."""
    import errno

    from tinycoro.io import pagecache

    data = os.urandom(PAGE + 10)
    path = tmp_path / "errno"
    _cached_file(path, data)
    twins = _twins(pagecache.pread_nowait_py, "pread_nowait")
    fd = os.open(path, os.O_RDONLY)
    wfd = os.open(path, os.O_WRONLY)
    try:
        for pread in twins:
            assert pread(fd, PAGE, 0) == data[:PAGE], pread
            assert pread(fd, PAGE, PAGE) == data[PAGE:], pread  # short at EOF
            assert pread(wfd, PAGE, 0) == errno.EBADF, pread  # not open for reading
    finally:
        os.close(wfd)
        os.close(fd)


async def _spend_the_budget(f) -> None:
    """INLINE_BUDGET cached reads of *f* in this step: the next read_at of this step is the
    one that yields first (its awaitable is not finished at the call)."""
    for _ in range(INLINE_BUDGET):
        await f.read_at(PAGE, 0)


def test_a_read_past_the_budget_reads_an_uncached_page_through_the_ring(contexts, tmp_path):
    """The read that yields for the budget, resumed, finds its first page not cached: the
    ring reads it, with the bytes of os.pread, in at most one ring read."""
    cold, data = cold_file(tmp_path, 4 * PAGE)
    warm = tmp_path / "warm"
    _cached_file(warm, os.urandom(PAGE))

    with tc.Scheduler(contexts) as s:
        async def main():
            async with await tc.io.open(warm) as w, await tc.io.open(cold) as c:
                await _spend_the_budget(w)
                before = _ops(s)
                got = await c.read_at(2 * PAGE, PAGE)
                return got, _ops(s) - before

        got, used = s.run_sync(main(), timeout=30)
    assert got == data[PAGE:3 * PAGE]
    assert used <= 1


def test_a_read_past_the_budget_takes_a_due_timeout_at_its_yield(contexts, tmp_path):
    """A timeout that expired before the read: the read yields first, the timeout lands
    there, nothing is read, and the file reads on afterwards."""
    data = os.urandom(2 * PAGE)
    path = tmp_path / "due"
    _cached_file(path, data)

    async def main():
        async with await tc.io.open(path) as f:
            got = None
            with pytest.raises(TimeoutError):
                async with tc.timeout(0):
                    got = await f.read_at(PAGE, 0)
            return got, await f.read_at(PAGE, PAGE)

    got, after = tc.run(main(), contexts=contexts)
    assert got is None
    assert after == data[PAGE:]


def test_a_file_closed_while_a_read_waits_out_the_budget(contexts, tmp_path):
    """Another task closes the file while a read yields for the budget: resumed, the read
    fails with the file's closed error, never reads the descriptor number again."""
    path = tmp_path / "closing"
    _cached_file(path, os.urandom(PAGE))

    async def main():
        f = await tc.io.open(path)

        async def closer():
            await f.close()

        await _spend_the_budget(f)
        aw = f.read_at(PAGE, 0)  # not finished: it yields first
        c = tc.spawn(closer())
        try:
            await aw
        except (ValueError, tc.ClosedResourceError) as e:
            await c
            return type(e)
        await c
        return None

    kind = tc.run(main(), contexts=contexts)
    # on one context the closer runs at the read's yield; on more it may come later
    assert kind in (tc.ClosedResourceError, None)



@pytest.mark.parametrize("reads", [INLINE_BUDGET // 2, 4 * INLINE_BUDGET],
                         ids=["within-one-budget", "across-budget-yields"])
def test_a_loop_that_drops_each_cached_read_gets_the_same_bytes_object_back(tmp_path, reads):
    """Compiled, on a GIL build: a read loop that drops each result is handed the one bytes
    object again, refilled (_cfile._fresh_bytes), on every Python version.

    Within one budget: on 3.12+ the spare StopIteration that ended each read's await kept the
    last result, so no read could reuse it. Across the budget: every INLINE_BUDGET-th read
    yields first and ends its await in io/file's own C slots, not _cfile's; when each compiled
    module kept its own spare, io/file's held that read's bytes and the next read allocated
    4 KiB anew."""
    from tinycoro import _cfile, compiled
    from tinycoro.io import pagecache

    if not compiled.gil_enabled() or pagecache.pread_nowait is not _cfile.pread_nowait:
        pytest.skip("the pure runtime and free-threaded builds allocate each result")

    path = tmp_path / "again"
    _cached_file(path, os.urandom(4 * PAGE))

    async def main():
        f = await tc.io.open(path)
        try:
            return {id(await f.read_at(PAGE, (i % 4) * PAGE)) for i in range(reads)}
        finally:
            await f.close()

    assert len(tc.run(main(), contexts=1)) == 1


def test_a_cached_read_held_unawaited_keeps_its_own_result(contexts, tmp_path):
    """A read's finished awaitable that the caller keeps (not awaited yet, or awaited and kept)
    keeps its bytes while other reads run and drop theirs: compiled, the awaitable and the
    bytes of a read whose await is over and dropped are handed out again (_cfile.done,
    _fresh_bytes), which must never be one that someone still holds."""
    data = os.urandom(4 * PAGE)
    path = tmp_path / "held"
    _cached_file(path, data)

    async def main():
        f = await tc.io.open(path)
        try:
            held = f.read_at(PAGE, 0)
            first = await f.read_at(PAGE, PAGE)
            kept = f.read_at(PAGE, 2 * PAGE)
            assert await kept == data[2 * PAGE:3 * PAGE]
            for i in range(3 * INLINE_BUDGET):  # dropped at once: their objects are reused
                assert await f.read_at(PAGE, (i % 4) * PAGE) == data[(i % 4) * PAGE:][:PAGE]
            assert first == data[PAGE:2 * PAGE]
            assert await held == data[:PAGE]
            assert await kept == data[2 * PAGE:3 * PAGE]  # a second await: the same value
            return True
        finally:
            await f.close()

    assert tc.run(main(), contexts=contexts)
