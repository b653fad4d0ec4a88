"""Files beyond read and write: readinto, line iteration, stat / rename / unlink / mkdir,
O_DIRECT with aligned buffers."""

from __future__ import annotations

import array
import errno
import os
from pathlib import Path

import pytest

import tinycoro as tc
from tinycoro.io.direct import DIRECT_ALIGN, address as _address, address_py as _address_py

pytestmark = pytest.mark.timeout(60)


# -- readinto -----------------------------------------------------------------------------------
def test_readinto_bytearray_memoryview_slice_and_array(tmp_path):
    data = bytes(range(256)) * 64  # 16 KiB
    path = tmp_path / "f"
    path.write_bytes(data)

    async def main():
        async with await tc.io.open(path) as f:
            ba = bytearray(1000)
            assert await f.readinto(ba) == 1000
            assert ba == data[:1000]
            big = bytearray(b"\xff" * 3000)
            view = memoryview(big)[1000:2000]  # a slice: only those bytes are written
            assert await f.readinto(view) == 1000
            assert big[1000:2000] == data[1000:2000]
            assert big[:1000] == b"\xff" * 1000 and big[2000:] == b"\xff" * 1000
            arr = array.array("i", [0] * 256)  # 1 KiB of int32
            assert await f.readinto_at(arr, 4096) == 1024
            assert arr.tobytes() == data[4096:5120]
            assert await f.read(10) == data[2000:2010]  # readinto advanced the position
            tail = bytearray(100)
            assert await f.readinto_at(tail, len(data) - 40) == 40  # short at EOF
            assert tail[:40] == data[-40:]
            assert await f.readinto_at(tail, len(data)) == 0  # 0 at EOF
            assert await f.readinto(bytearray()) == 0

    tc.run(main(), contexts=1)


def test_readinto_refuses_read_only_buffers(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")

    async def main():
        async with await tc.io.open(tmp_path / "f") as f:
            for bad in (b"xyz", memoryview(b"xyz")):
                with pytest.raises(TypeError, match="writable"):
                    await f.readinto(bad)
            with pytest.raises(TypeError, match="writable"):
                await f.readinto_at(memoryview(bytearray(3)).toreadonly(), 0)
            with pytest.raises(TypeError):
                await f.readinto("str")
            with pytest.raises(TypeError):
                await f.readinto(42)

    tc.run(main(), contexts=1)


def test_concurrent_readinto_at_from_many_tasks(tmp_path, contexts):
    data = os.urandom(64 * 4096)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def part(f, i):
        buf = bytearray(4096)
        n = await f.readinto_at(buf, i * 4096)
        return i, n, bytes(buf)

    async def main():
        async with await tc.io.open(path) as f:
            tasks = [tc.spawn(part(f, i)) for i in range(64)]
            return [await t for t in tasks]

    for i, n, chunk in tc.run(main(), contexts=contexts):
        assert n == 4096 and chunk == data[i * 4096 : (i + 1) * 4096]


# -- lines --------------------------------------------------------------------------------------
LINE_CASES = {
    "empty": b"",
    "one_no_newline": b"abc",
    "last_without_newline": b"a\nbb\nccc",
    "trailing_newline": b"a\nbb\n",
    "only_newlines": b"\n\n\n",
    "long_lines": b"x" * 200_000 + b"\n" + b"y" * 70_000 + b"\nz",
    "many_short": b"".join(b"%d\n" % i for i in range(20_000)),
    "crlf_is_not_a_separator": b"a\r\nb\rc\n",
}


@pytest.mark.parametrize("name", sorted(LINE_CASES))
def test_lines_equal_a_builtin_binary_file(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(LINE_CASES[name])
    with open(path, "rb") as f:
        expected = list(f)

    async def main():
        async with await tc.io.open(path) as f:
            return [line async for line in f]

    assert tc.run(main(), contexts=1) == expected


def test_lines_then_read_continue_at_the_right_place(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo\nthree\nfour")

    async def main():
        async with await tc.io.open(path, "r+b") as f:
            assert await f.readline() == b"one\n"
            assert await f.read(4) == b"two\n"
            assert await f.readline() == b"three\n"
            await f.write_at(b"FOUR", 14)  # a write through the file is seen by the next line
            assert await f.readline() == b"FOUR"
            assert await f.readline() == b""

    tc.run(main(), contexts=1)


# -- stat / rename / unlink / mkdir ---------------------------------------------------------------
def _same_stat(a: os.stat_result, b: os.stat_result) -> None:
    for field in ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
                  "st_blksize", "st_blocks", "st_rdev", "st_mtime", "st_ctime"):
        assert getattr(a, field) == getattr(b, field), field
    assert a[:7] == b[:7]
    assert a[8] == b[8]  # integer mtime
    # The binding exposes times as float seconds only: ns recovered to well under 1 us.
    assert abs(a.st_mtime_ns - b.st_mtime_ns) < 1000


def test_stat_matches_os_stat(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"x" * 12345)
    d = tmp_path / "dir"
    d.mkdir()
    link = tmp_path / "link"
    link.symlink_to(f)

    async def main():
        return (await tc.io.stat(f), await tc.io.stat(d), await tc.io.stat(str(link)),
                await tc.io.stat(os.fsencode(link), follow_symlinks=False))

    sf, sd, sl, sl_nofollow = tc.run(main(), contexts=1)
    _same_stat(sf, os.stat(f))
    _same_stat(sd, os.stat(d))
    _same_stat(sl, os.stat(f))
    _same_stat(sl_nofollow, os.lstat(link))
    assert isinstance(sf, os.stat_result) and sf.st_size == 12345


def test_rename_unlink_mkdir_rmdir_against_os(tmp_path):
    async def main():
        await tc.io.mkdir(tmp_path / "d", mode=0o750)
        await tc.io.write_file(tmp_path / "d" / "a", b"A")
        await tc.io.rename(tmp_path / "d" / "a", tmp_path / "d" / "b")
        await tc.io.write_file(tmp_path / "c", b"C")
        await tc.io.rename(tmp_path / "c", tmp_path / "d" / "b")  # replaces, like os.rename
        await tc.io.mkdir(tmp_path / "gone")
        await tc.io.rmdir(tmp_path / "gone")
        await tc.io.write_file(tmp_path / "u", b"")
        await tc.io.unlink(tmp_path / "u")

    tc.run(main(), contexts=1)
    assert sorted(os.listdir(tmp_path)) == ["d"]
    assert os.listdir(tmp_path / "d") == ["b"]
    assert (tmp_path / "d" / "b").read_bytes() == b"C"
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "d").st_mode & 0o777 == 0o750 & ~umask


@pytest.mark.parametrize(
    "call, exc, code",
    [
        (lambda p: tc.io.stat(p / "missing"), FileNotFoundError, errno.ENOENT),
        (lambda p: tc.io.unlink(p / "missing"), FileNotFoundError, errno.ENOENT),
        (lambda p: tc.io.rename(p / "missing", p / "x"), FileNotFoundError, errno.ENOENT),
        (lambda p: tc.io.mkdir(p / "existing_dir"), FileExistsError, errno.EEXIST),
        (lambda p: tc.io.unlink(p / "existing_dir"), IsADirectoryError, errno.EISDIR),
        (lambda p: tc.io.rmdir(p / "file"), NotADirectoryError, errno.ENOTDIR),
        (lambda p: tc.io.mkdir(p / "file" / "sub"), NotADirectoryError, errno.ENOTDIR),
    ],
    ids=["stat", "unlink", "rename", "mkdir_exists", "unlink_dir", "rmdir_file", "mkdir_under_file"],
)
def test_path_operation_errors_keep_their_errno(tmp_path, call, exc, code):
    (tmp_path / "existing_dir").mkdir()
    (tmp_path / "file").write_bytes(b"")

    async def main():
        await call(tmp_path)

    with pytest.raises(exc) as info:
        tc.run(main(), contexts=1)
    assert info.value.errno == code
    assert info.value.filename is not None


def test_path_argument_errors():
    async def main():
        with pytest.raises(TypeError, match="path"):
            await tc.io.stat(3.5)
        with pytest.raises(ValueError, match="null"):
            await tc.io.unlink("a\0b")
        with pytest.raises(TypeError, match="dst"):
            await tc.io.rename("a", None)

    tc.run(main(), contexts=1)


# -- O_DIRECT -----------------------------------------------------------------------------------
def test_aligned_buffer_is_page_aligned_and_writable():
    for size in (1, 4096, 5000, 1 << 20):
        buf = tc.io.aligned_buffer(size)
        assert len(buf) == size and not buf.readonly
        assert _address(buf) % DIRECT_ALIGN == 0
        buf[0] = 7
    with pytest.raises(ValueError, match="size"):
        tc.io.aligned_buffer(0)
    with pytest.raises(TypeError, match="size"):
        tc.io.aligned_buffer(4096.0)


def test_buffer_address_agrees_with_the_ctypes_spelling():
    # The O_DIRECT alignment check uses the compiled address when it is built: it must name
    # the same byte as the Python spelling for every kind of buffer, slices included.
    data = bytearray(8192)
    arr = __import__("array").array("d", range(16))
    aligned = tc.io.aligned_buffer(8192)
    keep = [data, arr, aligned, b"abc", b""]
    views = [memoryview(data), memoryview(data)[4097:], memoryview(arr).cast("B"), aligned,
             aligned[DIRECT_ALIGN:], memoryview(b"abc"), memoryview(b"")]
    for v in views:
        assert _address(v) == _address_py(v), v
    assert _address(aligned[1:]) % DIRECT_ALIGN == 1
    del keep


def _direct_dir(tmp_path: Path) -> Path:
    """A directory whose filesystem accepts O_DIRECT: tmp_path, else one on the worktree's disk."""
    candidates = [tmp_path, Path(__file__).resolve().parent]
    for d in candidates:
        probe = d / f".odirect-probe-{os.getpid()}"
        try:
            fd = os.open(probe, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            continue
        os.close(fd)
        os.unlink(probe)
        return d
    pytest.skip(f"no filesystem here accepts O_DIRECT (tried {', '.join(map(str, candidates))})")


def test_direct_round_trip_with_aligned_buffers(tmp_path, contexts):
    d = _direct_dir(tmp_path)
    path = d / f"direct-{os.getpid()}-{contexts}"
    payload = os.urandom(16 * DIRECT_ALIGN)

    async def block(f, i):
        buf = tc.io.aligned_buffer(DIRECT_ALIGN)
        assert await f.readinto_at(buf, i * DIRECT_ALIGN) == DIRECT_ALIGN
        return i, bytes(buf)

    async def main():
        src = tc.io.aligned_buffer(len(payload))
        src[:] = payload
        async with await tc.io.open(path, "w+b", direct=True) as f:
            assert f.direct
            assert await f.write_at(src, 0) == len(payload)
            await f.fsync()
            tasks = [tc.spawn(block(f, i)) for i in range(16)]
            blocks = dict([await t for t in tasks])
            whole = await f.read_at(len(payload), 0)
            assert await f.read() == payload  # reads in aligned chunks until a short read
        return blocks, whole

    try:
        blocks, whole = tc.run(main(), contexts=contexts)
    finally:
        path.unlink(missing_ok=True)
    assert whole == payload
    assert b"".join(blocks[i] for i in range(16)) == payload


def test_direct_reads_of_changing_sizes_each_return_their_own_count(tmp_path):
    """A read's size and count are one int object per number, reused from read to read of
    the same size (compiled): reads of two sizes in turn, and a short one at EOF, each
    return their own count and bytes."""
    d = _direct_dir(tmp_path)
    path = d / f"direct-sizes-{os.getpid()}"
    payload = os.urandom(3 * DIRECT_ALIGN)
    path.write_bytes(payload)

    async def main():
        one, two = tc.io.aligned_buffer(DIRECT_ALIGN), tc.io.aligned_buffer(2 * DIRECT_ALIGN)
        got = []
        async with await tc.io.open(path, "rb", direct=True) as f:
            for buf, off in [(one, 0), (two, 0), (one, DIRECT_ALIGN), (two, DIRECT_ALIGN),
                             (two, 2 * DIRECT_ALIGN), (one, 2 * DIRECT_ALIGN), (one, 3 * DIRECT_ALIGN)]:
                n = await f.readinto_at(buf, off)
                got.append((n, bytes(buf[:n])))
        return got

    try:
        got = tc.run(main(), contexts=1)
    finally:
        path.unlink(missing_ok=True)
    a = DIRECT_ALIGN
    assert got == [
        (a, payload[:a]), (2 * a, payload[:2 * a]), (a, payload[a:2 * a]),
        (2 * a, payload[a:3 * a]), (a, payload[2 * a:]), (a, payload[2 * a:]), (0, b""),
    ]


def test_direct_refuses_unaligned_buffer_size_and_offset(tmp_path):
    d = _direct_dir(tmp_path)
    path = d / f"direct-bad-{os.getpid()}"

    async def main():
        async with await tc.io.open(path, "w+b", direct=True) as f:
            aligned = tc.io.aligned_buffer(2 * DIRECT_ALIGN)
            with pytest.raises(ValueError, match="aligned to"):
                await f.readinto_at(aligned[1 : 1 + DIRECT_ALIGN], 0)  # address off by one
            with pytest.raises(ValueError, match="multiple of"):
                await f.readinto_at(aligned[:100], 0)  # size
            with pytest.raises(ValueError, match="multiple of"):
                await f.readinto_at(aligned[:DIRECT_ALIGN], 512)  # offset
            with pytest.raises(ValueError, match="aligned to"):
                # off by one page-relative byte, read-only (a plain bytes object is aligned only
                # by chance, about one time in 256, so it cannot be the example)
                await f.write_at(aligned.toreadonly()[1 : 1 + DIRECT_ALIGN], 0)
            with pytest.raises(ValueError, match="multiple of"):
                await f.read_at(100, 0)

    try:
        tc.run(main(), contexts=1)
    finally:
        path.unlink(missing_ok=True)


def test_direct_readinto_at_takes_every_aligned_writable_buffer(tmp_path, contexts):
    # The read path answers the common buffer (a flat, writable, aligned view) in one pass
    # and sends everything else through the checks: both must read the same bytes.
    d = _direct_dir(tmp_path)
    path = d / f"direct-kinds-{os.getpid()}-{contexts}"
    payload = os.urandom(8 * DIRECT_ALIGN)
    path.write_bytes(payload)
    page = DIRECT_ALIGN

    async def main():
        big = tc.io.aligned_buffer(4 * page)
        raw = __import__("mmap").mmap(-1, 2 * page)  # a buffer that is not a memoryview
        buffers = [
            tc.io.aligned_buffer(page),
            big[page : 3 * page],  # a slice that starts on a page boundary
            raw,
            big.cast("q")[: page // 8],  # another format: cast to bytes by the checks
        ]
        async with await tc.io.open(path, "rb", direct=True) as f:
            for i, buf in enumerate(buffers):
                off = (i + 1) * page
                n = memoryview(buf).nbytes
                assert await f.readinto_at(buf, off) == n
                assert bytes(memoryview(buf).cast("B")) == payload[off : off + n]
        raw.close()

    try:
        tc.run(main(), contexts=contexts)
    finally:
        path.unlink(missing_ok=True)


def test_direct_readinto_at_refuses_bad_buffers_at_the_call(tmp_path):
    d = _direct_dir(tmp_path)
    path = d / f"direct-refuse-{os.getpid()}"
    path.write_bytes(bytes(2 * DIRECT_ALIGN))
    page = DIRECT_ALIGN

    async def main():
        big = tc.io.aligned_buffer(4 * page)
        released = memoryview(tc.io.aligned_buffer(page))
        released.release()
        async with await tc.io.open(path, "rb", direct=True) as f:
            # each refused when read_into_at is called, before anything is awaited
            with pytest.raises(TypeError, match="writable"):
                f.readinto_at(big[:page].toreadonly(), 0)
            with pytest.raises(TypeError, match="contiguous"):
                f.readinto_at(big[::2], 0)
            with pytest.raises(TypeError, match="bytes-like"):
                f.readinto_at("x" * page, 0)
            with pytest.raises(ValueError, match="released"):
                f.readinto_at(released, 0)
            with pytest.raises(ValueError, match="aligned to"):
                f.readinto_at(big[512 : 512 + page], 0)
            with pytest.raises(ValueError, match="multiple of"):
                f.readinto_at(big[: page + 512], 0)
            with pytest.raises(ValueError, match="multiple of"):
                f.readinto_at(big[:page], page + 512)
            with pytest.raises(ValueError, match="offset"):
                f.readinto_at(big[:page], -page)
            assert await f.readinto_at(big[:0], 0) == 0  # nothing to read: no alignment asked

    try:
        tc.run(main(), contexts=1)
    finally:
        path.unlink(missing_ok=True)


def test_finished_ring_reads_are_reused_only_when_nobody_holds_them(tmp_path):
    # A finished read is kept for the next one (io/ops' spares) only when its await held it
    # alone: a read the caller kept is never handed to another read, can be awaited again
    # (it reads again, into its own buffer), and one that was not kept has let go of its
    # buffer's export by the time its await returns.
    d = _direct_dir(tmp_path)
    path = d / f"direct-spares-{os.getpid()}"
    payload = os.urandom(4 * DIRECT_ALIGN)
    path.write_bytes(payload)
    mmap = __import__("mmap")

    async def main():
        async with await tc.io.open(path, "rb", direct=True) as f:
            kept_buf = tc.io.aligned_buffer(DIRECT_ALIGN)
            kept = f.readinto_at(kept_buf, 0)
            assert await kept == DIRECT_ALIGN
            for i in range(1, 4):  # reads that nobody keeps, each into a mapping of its own
                raw = mmap.mmap(-1, DIRECT_ALIGN)
                other = f.readinto_at(raw, i * DIRECT_ALIGN)
                assert other is not kept
                assert await other == DIRECT_ALIGN
                del other
                assert raw[:] == payload[i * DIRECT_ALIGN:(i + 1) * DIRECT_ALIGN]
                raw.close()  # no BufferError: the finished read holds no export any more
            kept_buf[:] = bytes(DIRECT_ALIGN)
            assert await kept == DIRECT_ALIGN  # awaited again: it reads again
            assert bytes(kept_buf) == payload[:DIRECT_ALIGN]

    try:
        tc.run(main(), contexts=1)
    finally:
        path.unlink(missing_ok=True)


def test_ring_reads_from_tasks_on_every_context_each_get_their_own_bytes(contexts, tmp_path):
    # Finished ring reads are kept for the next read on any context's thread: each read
    # still fills its own buffer with its own range, O_DIRECT and ring-only buffered alike.
    d = _direct_dir(tmp_path)
    path = d / f"direct-many-{os.getpid()}"
    blocks = 64
    payload = os.urandom(blocks * DIRECT_ALIGN)
    path.write_bytes(payload)

    async def main():
        direct = await tc.io.open(path, "rb", direct=True)
        ring = await tc.io.open(path, "rb")
        ring._inline = False  # every read through the ring, its bytes made by the read

        async def reader(i):
            buf = tc.io.aligned_buffer(DIRECT_ALIGN)
            for k in range(20):
                b = (i * 7 + k * 13) % blocks
                want = payload[b * DIRECT_ALIGN:(b + 1) * DIRECT_ALIGN]
                assert await direct.readinto_at(buf, b * DIRECT_ALIGN) == DIRECT_ALIGN
                assert bytes(buf) == want
                assert await ring.read_at(DIRECT_ALIGN, b * DIRECT_ALIGN) == want

        tasks = [tc.spawn(reader(i)) for i in range(16)]
        for t in tasks:
            await t
        await direct.close()
        await ring.close()

    try:
        tc.run(main(), contexts=contexts)
    finally:
        path.unlink(missing_ok=True)


def test_direct_read_holds_its_own_export_of_the_buffer(tmp_path):
    # The kernel writes into the buffer until the read's completion: the read must hold an
    # export of it that the caller cannot release, or the caller's memory could be unmapped
    # (or a bytearray resized) under the kernel.
    d = _direct_dir(tmp_path)
    path = d / f"direct-export-{os.getpid()}"
    payload = os.urandom(DIRECT_ALIGN)
    path.write_bytes(payload)
    mmap = __import__("mmap")

    async def main():
        raw = mmap.mmap(-1, DIRECT_ALIGN)
        mine = memoryview(raw)
        async with await tc.io.open(path, "rb", direct=True) as f:
            read = f.readinto_at(mine, 0)
            mine.release()  # the caller's own view goes
            with pytest.raises(BufferError):
                raw.close()  # the read's export keeps the mapping
            assert await read == DIRECT_ALIGN
            del read
        assert raw[:] == payload
        raw.close()

    try:
        tc.run(main(), contexts=1)
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.timeout(60)
def test_a_reused_read_count_is_never_another_reads_number(tmp_path, contexts):
    """Reads reuse the int object of their size and count from one read to the next of the
    same size. Tasks on every context, each reading one of two sizes in turn, every read
    through the ring (O_DIRECT), must each get the count of their own read back, never the
    number another read of another size recorded meanwhile."""
    d = _direct_dir(tmp_path)
    path = d / f"direct-counts-{os.getpid()}"
    a = DIRECT_ALIGN
    payload = os.urandom(4 * a)
    path.write_bytes(payload)

    async def reader(f, k):
        small, big = tc.io.aligned_buffer(a), tc.io.aligned_buffer(2 * a)
        seen = []
        for i in range(50):
            buf = small if (i + k) % 2 else big
            n = await f.readinto_at(buf, a)
            seen.append((len(buf), n, bytes(buf[:n]) == payload[a:a + n]))
        return seen

    async def main():
        async with await tc.io.open(path, "rb", direct=True) as f:
            tasks = [tc.spawn(reader(f, k)) for k in range(8)]
            return [await t for t in tasks]

    try:
        results = tc.run(main(), contexts=contexts)
    finally:
        path.unlink(missing_ok=True)
    for seen in results:
        assert seen and all(n == size and same for size, n, same in seen), seen
