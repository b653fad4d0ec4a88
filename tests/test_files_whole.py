"""Whole files: ``read_file`` and ``AsyncFile.read()`` to the end, as the builtin
``open().read()`` reads them: into one buffer of the file's size, whatever the file does
meanwhile (grows, shrinks), chunked for files whose size says nothing (/proc, pipes), with the
open's errno, on the budget of rule 16, and with no ring round trip for a cached small file."""

from __future__ import annotations

import errno
import os
import stat
import threading
import tracemalloc

import pytest

import tinycoro as tc
from tinycoro import compiled
from tinycoro.core.engine import INLINE_BUDGET
from tinycoro.io import FILE_READS_ENV

from helpers.budget import gaps, loop_beside_counter
from helpers.pagecache import (
    PAGE, cached_file, cold_file, evict, page_cache_fs, read_file_cancelled_while_blocked,
)

MiB = 1 << 20
pytestmark = pytest.mark.timeout(120)
# The one-buffer read and the inline open are the compiled _cfile's (a bytes object filled in
# place, openat2 with RESOLVE_CACHED); the pure runtime reads into a bytearray and copies it.
needs_cfile = pytest.mark.skipif(compiled.load("_cfile") is None, reason="needs the compiled _cfile")


@pytest.fixture(params=["inline", "ring"])
def reads(request, monkeypatch) -> str:
    """Both read paths: the page cache inline first (the default), and the ring only."""
    if request.param == "ring":
        monkeypatch.setenv(FILE_READS_ENV, "ring")
    return request.param


def _ops(s: tc.Scheduler) -> int:
    """io_uring completions reaped so far on the calling task's context (read on it)."""
    return s.stats().contexts[tc.current_context()].ops


@pytest.mark.parametrize("size", [0, 1, 2048, PAGE - 1, PAGE, PAGE + 1, MiB + 3, 9 * MiB + 5])
def test_read_file_is_the_builtin_read(size, reads, tmp_path):
    data = os.urandom(size)
    path = tmp_path / "f"
    cached_file(path, data)

    async def main():
        whole = await tc.io.read_file(path)
        async with await tc.io.open(path) as f:  # read() from a position inside the file
            head = await f.read(min(size, 10))
            rest = await f.read()
            again = await f.read()
        return whole, head, rest, again

    whole, head, rest, again = tc.run(main(), contexts=1)
    assert type(whole) is bytes and type(rest) is bytes
    assert whole == data
    assert head + rest == data
    assert again == b""


def test_read_file_from_many_tasks(contexts, tmp_path):
    files = []
    for i in range(40):
        files.append((tmp_path / f"f{i}", os.urandom(i * 997)))
        cached_file(*files[-1])

    async def main():
        tasks = [tc.spawn(tc.io.read_file(p)) for p, _ in files]
        return [await t for t in tasks]

    assert tc.run(main(), contexts=contexts) == [d for _, d in files]


def test_read_file_of_a_partly_cached_file(reads, tmp_path):
    """Pages that are not cached come through the ring, into the same buffer."""
    if not page_cache_fs(tmp_path):
        pytest.skip("tmpfs keeps every page in the page cache")
    data = os.urandom(12 * MiB + 7)
    path = tmp_path / "cold"
    cached_file(path, data)
    evict(path, keep_first_page=True)

    assert tc.run(tc.io.read_file(path), contexts=1) == data


def _grow_or_shrink_after_fstat(monkeypatch, path, change) -> list[bool]:
    """Make the next os.fstat of *path* run *change* on the file right after it took the
    size: the read that follows sees a file of another size than the one it was told."""
    real = os.fstat
    armed = [False]
    ino = os.stat(path).st_ino

    def fstat(fd):
        st = real(fd)
        if armed[0] and st.st_ino == ino:
            armed[0] = False
            change()
        return st

    monkeypatch.setattr(os, "fstat", fstat)
    return armed


@pytest.mark.parametrize("how", ["grows", "shrinks", "empties"])
def test_read_to_the_end_of_a_file_that_changes_size(how, reads, tmp_path, monkeypatch):
    """read() returns what is there when it reads, not what fstat said: the bytes appended
    after the size was taken, and no stale or zero bytes past a new end."""
    data = os.urandom(3 * MiB + 11)
    extra = os.urandom(70_000)
    path = tmp_path / "changing"
    cached_file(path, data)
    want = {"grows": data + extra, "shrinks": data[: MiB + 5], "empties": b""}[how]

    def change():
        if how == "grows":
            with open(path, "ab") as w:
                w.write(extra)
        else:
            os.truncate(path, len(want))

    armed = _grow_or_shrink_after_fstat(monkeypatch, path, change)

    async def main():
        async with await tc.io.open(path) as f:
            armed[0] = True
            return await f.read()

    got = tc.run(main(), contexts=1)
    assert not armed[0], "the read took no size: the test tested nothing"
    assert got == want


def _proc_and_sys_files() -> list[str]:
    """Regular files whose st_size is not their length: 0 in /proc, a page in /sys."""
    found = [p for p in ("/proc/self/cmdline", "/proc/version", "/proc/filesystems")
             if os.path.exists(p)]
    for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/devices/system/cpu/online"):
        if os.access(p, os.R_OK):
            found.append(p)
            break
    return found


@pytest.mark.parametrize("path", _proc_and_sys_files())
def test_read_file_of_proc_and_sys_files(path, reads):
    with open(path, "rb") as f:
        want = f.read()
    st = os.stat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_size != len(want)  # what the test is about

    async def main():
        async with await tc.io.open(path) as f:
            return await tc.io.read_file(path), await f.read()

    assert tc.run(main(), contexts=1) == (want, want)


def test_read_file_of_a_fifo(contexts, reads, tmp_path):
    """A pipe has no size: read on until the writer closes, more than the pipe holds."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data = os.urandom(300_000)  # several times the pipe's 64 KiB
    # A reader of our own first, so that the writer's open does not wait for read_file's.
    keeper = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(fifo, os.O_WRONLY)
    failed: list[BaseException] = []

    def writer():
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except OSError as e:  # the reader failed and went: let the test report that
            failed.append(e)
        finally:
            os.close(w)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        got = tc.run(tc.io.read_file(fifo), contexts=contexts)
    finally:
        os.close(keeper)
        t.join(60)
    assert not failed
    assert got == data


def test_read_file_errors_keep_their_errno(reads, tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "dir").mkdir()
    locked = tmp_path / "locked"
    locked.write_bytes(b"secret")
    locked.chmod(0)
    cases = [
        (tmp_path / "missing", FileNotFoundError, errno.ENOENT),
        (tmp_path / "dir", IsADirectoryError, errno.EISDIR),
        (tmp_path / "file" / "below", NotADirectoryError, errno.ENOTDIR),
    ]
    if os.geteuid() != 0:  # root reads it anyway
        cases.append((locked, PermissionError, errno.EACCES))

    async def attempt(path):
        try:
            await tc.io.read_file(path)
        except OSError as e:
            return e
        return None

    async def main():
        return [await attempt(path) for path, _, _ in cases]

    for (path, kind, code), e in zip(cases, tc.run(main(), contexts=1)):
        assert isinstance(e, kind), (path, e)
        assert e.errno == code
        if kind is not IsADirectoryError:  # (the builtin names the file there too; the read's
            assert e.filename == str(path)  # failure names it as the ring's read does)


@needs_cfile
def test_read_file_of_a_cached_small_file_takes_no_ring_op(contexts, tmp_path):
    """An open, a read and a close were three ring round trips per file: a cached file's
    name and pages are read inline now, as the page-cache reads of read_at are."""
    files = []
    for i in range(20):
        files.append((tmp_path / f"small{i}", os.urandom(2048 + i)))
        cached_file(*files[-1])

    with tc.Scheduler(contexts) as s:
        async def main():
            await tc.io.read_file(files[0][0])  # the name's path is in the dentry cache now
            before = _ops(s)
            got = [await tc.io.read_file(p) for p, _ in files]
            return got, _ops(s) - before

        got, used = s.run_sync(main(), timeout=60)
    assert got == [d for _, d in files]
    assert used == 0


def _peak_of(fn) -> int:
    """The most memory that tracemalloc saw allocated at once while *fn* ran, above what was
    allocated before it (every thread's allocations: the contexts' included)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@needs_cfile
def test_whole_file_read_holds_one_copy(reads, tmp_path):
    """Reading a file to its end holds the file's size in memory once (the builtin's one
    buffer), not chunks and their join (twice the file)."""
    size = 24 * MiB + 5
    path = tmp_path / "big"
    cached_file(path, os.urandom(size))

    async def both():
        whole = await tc.io.read_file(path)
        del whole
        async with await tc.io.open(path) as f:
            assert len(await f.read()) == size

    with tc.Scheduler(1) as s:
        s.run_sync(tc.sleep(0), timeout=30)  # the context and its ring exist before counting
        peak = _peak_of(lambda: s.run_sync(both(), timeout=60))
    assert peak <= 1.1 * size, f"peak {peak / MiB:.1f} MiB for a {size / MiB:.1f} MiB file"


def test_read_file_in_a_loop_lets_its_context_run_others(contexts, tmp_path):
    """read_file of a cached file never suspends, so it spends the budget: between two steps
    of a counter on its context, a reader completes at most INLINE_BUDGET of them."""
    path = tmp_path / "small"
    cached_file(path, os.urandom(2048))
    limit = 20_000  # bounds the test if the reader never let the counter run

    with tc.Scheduler(contexts) as s:
        n, seen = s.run_sync(loop_beside_counter(lambda: tc.io.read_file(path), limit), timeout=100)
    assert n < limit, "the counter never ran while the reader read"
    assert max(gaps(seen)) <= INLINE_BUDGET, gaps(seen)


def test_cancel_a_whole_file_read_on_the_ring(contexts, tmp_path):
    """A read_file that waits on the ring for pages the cache lacks ends with Cancelled when
    cancelled, its descriptor closed (the leak check) and its buffer kept until the kernel
    is done (rule 8); one that completes first returns the file."""
    path, data = cold_file(tmp_path, 16 * MiB)

    got = tc.run(read_file_cancelled_while_blocked(path), contexts=contexts)
    assert got is None or got == data
    assert tc.run(tc.io.read_file(path), contexts=1) == data


def test_read_file_takes_every_path_type_and_refuses_bad_ones(reads, tmp_path):
    path = tmp_path / "typed"
    cached_file(path, b"typed")

    async def main():
        got = [await tc.io.read_file(p) for p in (path, str(path), os.fsencode(path))]
        for bad, kind in ((5, TypeError), (str(path) + "\0x", ValueError), (b"a\0", ValueError)):
            with pytest.raises(kind, match="path"):
                await tc.io.read_file(bad)
        return got

    assert tc.run(main(), contexts=1) == [b"typed"] * 3


def test_a_due_timeout_is_delivered_before_a_cached_read_file(reads, tmp_path):
    """tc.timeout(0) expires at the first await, every time: a read_file that would complete
    at its call does not run first (the budget's check delivers the interrupt)."""
    path = tmp_path / "cached"
    cached_file(path, b"cached")

    async def main():
        for _ in range(3):
            with pytest.raises(TimeoutError):
                async with tc.timeout(0):
                    await tc.io.read_file(path)
        return await tc.io.read_file(path)

    assert tc.run(main(), contexts=1) == b"cached"
