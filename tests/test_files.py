"""Files through io_uring: round trips, offsets, modes, errors, cancellation."""

from __future__ import annotations

import errno
import os

import pytest

import tinycoro as tc

MiB = 1 << 20


def test_write_then_read_1_mib(contexts, tmp_path):
    data = os.urandom(MiB)
    path = tmp_path / "blob"

    async def main():
        assert await tc.io.write_file(path, data) == MiB
        return await tc.io.read_file(path)

    assert tc.run(main(), contexts=contexts) == data
    assert path.read_bytes() == data


def test_read_at_and_write_at_offsets(contexts, tmp_path):
    path = tmp_path / "offsets"
    data = bytes(range(256)) * 64  # 16 KiB

    async def main():
        async with await tc.io.open(path, "w+b") as f:
            assert await f.write(data) == len(data)
            chunks = [await f.read_at(100, off) for off in (0, 1000, 16300)]
            assert await f.write_at(b"XYZ", 5) == 3
            assert await f.read_at(10, 0) == data[:5] + b"XYZ" + data[8:10]
            assert await f.read_at(10, len(data)) == b""  # at EOF
            await f.fsync()
            return chunks

    chunks = tc.run(main(), contexts=contexts)
    assert chunks == [data[0:100], data[1000:1100], data[16300:16384]]


def test_concurrent_read_at_from_many_tasks(contexts, tmp_path):
    path = tmp_path / "shared"
    data = os.urandom(256 * 4096)
    path.write_bytes(data)

    async def main():
        f = await tc.io.open(path)

        async def reader(i):
            return i, await f.read_at(4096, i * 4096)

        tasks = [tc.spawn(reader(i)) for i in range(256)]
        got = sorted([await t for t in tasks])
        await f.close()
        return got

    for i, chunk in tc.run(main(), contexts=contexts):
        assert chunk == data[i * 4096 : (i + 1) * 4096]


def test_sequential_read_and_write_positions(tmp_path):
    path = tmp_path / "seq"

    async def main():
        async with await tc.io.open(path, "wb") as f:
            await f.write(b"hello ")
            await f.write(memoryview(b"world"))
        async with await tc.io.open(path, "ab") as f:
            await f.write(b"!")
        async with await tc.io.open(path, "rb") as f:
            first = await f.read(5)
            rest = await f.read()
            assert await f.read() == b""
        return first, rest

    assert tc.run(main(), contexts=1) == (b"hello", b" world!")


def test_missing_file_is_file_not_found(tmp_path):
    async def main():
        await tc.io.open(tmp_path / "nope")

    with pytest.raises(FileNotFoundError) as info:
        tc.run(main(), contexts=1)
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(tmp_path / "nope")


def test_exclusive_create_of_existing_file(tmp_path):
    (tmp_path / "x").write_bytes(b"")

    async def main():
        await tc.io.open(tmp_path / "x", "xb")

    with pytest.raises(FileExistsError):
        tc.run(main(), contexts=1)


def test_bad_fd_is_ebadf(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")

    async def main():
        f = await tc.io.open(tmp_path / "f")
        os.close(f.fileno())  # behind the file's back: the kernel reports EBADF
        try:
            await f.read(3)
        finally:
            f._fd = -1

    with pytest.raises(OSError) as info:
        tc.run(main(), contexts=1)
    assert info.value.errno == errno.EBADF


def test_modes_and_argument_errors(tmp_path):
    async def main():
        for bad in ("r", "rt", "wr", "rbb", "q"):
            with pytest.raises(ValueError, match="mode"):
                await tc.io.open(tmp_path / "m", bad)
        with pytest.raises(TypeError, match="path"):
            await tc.io.open(3.5)
        f = await tc.io.open(tmp_path / "m", "wb")
        with pytest.raises(TypeError, match="not str"):
            await f.write("text")
        with pytest.raises(OSError, match="not open for reading"):
            await f.read()
        with pytest.raises(ValueError, match="offset"):
            await f.write_at(b"x", -1)
        await f.close()
        await f.close()  # twice is fine
        with pytest.raises(ValueError, match="closed file"):
            await f.write(b"x")

    tc.run(main(), contexts=1)


def test_zero_length_operations(tmp_path):
    async def main():
        async with await tc.io.open(tmp_path / "z", "w+b") as f:
            assert await f.write(b"") == 0
            assert await f.read(0) == b""
            assert await f.read_at(0, 0) == b""
            assert await f.read() == b""

    tc.run(main(), contexts=1)
