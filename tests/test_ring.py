"""The ring interface the engine uses, against both rings: the compiled CRing and PyRing.

Every test runs on real io_uring instances (NOP, read and timeout operations); the compiled
ring is skipped, with the reason, only where the extension was not built.
"""

from __future__ import annotations

import errno
import os
import select
import subprocess
import sys

import pytest

from tinycoro import uring

from conftest import open_fds

IMPLS = [
    pytest.param(uring.PyRing, id="pure"),
    pytest.param(
        uring.CRing,
        id="compiled",
        marks=pytest.mark.skipif(uring.CRing is None, reason=f"compiled ring: {uring.WHY_PURE}"),
    ),
]


@pytest.fixture(params=IMPLS)
def ring_cls(request):
    return request.param


@pytest.fixture
def ring(ring_cls):
    r = ring_cls(64)
    yield r
    r.close()


def _nop(ring, ud: int) -> None:
    sqe = ring.get_sqe()
    uring.prep_nop(sqe)
    sqe.user_data = ud


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_nop_round_trip(ring):
    _nop(ring, 7)
    assert ring.sq_ready() == 1
    assert ring.submit() == 1
    assert ring.sq_ready() == 0
    assert ring.cq_ready() == 1
    out: list = []
    assert ring.reap(out) == 1
    assert out == [(7, 0)]
    assert ring.cq_ready() == 0
    assert ring.reap(out) == 0  # nothing more: the list is left as it was
    assert out == [(7, 0)]


def test_reap_appends_and_keeps_order(ring):
    out = [("earlier", 1)]
    for ud in (1, 2, 3):
        _nop(ring, ud)
    ring.submit()
    assert ring.reap(out) == 3
    assert out == [("earlier", 1), (1, 0), (2, 0), (3, 0)]


def test_reap_limit_leaves_the_rest(ring):
    for ud in range(1, 6):
        _nop(ring, ud)
    ring.submit()
    out: list = []
    assert ring.reap(out, 2) == 2
    assert ring.cq_ready() == 3
    assert ring.reap(out) == 3
    assert [ud for ud, _ in out] == [1, 2, 3, 4, 5]


def test_full_sq_submits_and_overflow_is_not_lost(ring_cls):
    """1000 NOPs through an 8-entry ring: get_sqe submits when the SQ is full, and the CQ (16
    entries) overflows; reap must still deliver every completion exactly once."""
    ring = ring_cls(8)
    try:
        for ud in range(1, 1001):
            _nop(ring, ud)
        ring.submit()
        out: list = []
        while len(out) < 1000:
            if ring.reap(out) == 0:
                ring.submit()  # flushes the kernel's overflow list into the CQ
        assert sorted(ud for ud, _ in out) == list(range(1, 1001))
        assert all(res == 0 for _, res in out)
        assert ring.reap(out) == 0
    finally:
        ring.close()


def test_negative_result_keeps_its_errno(ring, tmp_path):
    buf = bytearray(16)
    fd = os.open(tmp_path / "closed", os.O_CREAT | os.O_RDONLY)
    os.close(fd)  # a descriptor number that is no longer open
    sqe = ring.get_sqe()
    uring.prep_read(sqe, fd, buf, len(buf), 0)
    sqe.user_data = 9
    ring.submit()
    out: list = []
    while not ring.reap(out):
        pass
    assert out == [(9, -errno.EBADF)]


def test_user_data_keeps_all_64_bits(ring):
    big = (1 << 64) - 1
    _nop(ring, big)
    _nop(ring, 1 << 40)
    ring.submit()
    out: list = []
    ring.reap(out)
    assert out == [(big, 0), (1 << 40, 0)]


def test_eventfd_fires_only_when_notify_is_on(ring):
    _nop(ring, 1)
    ring.submit()  # a NOP completes inside io_uring_enter
    assert ring.cq_ready() == 1
    assert not _readable(ring.efd), "notifications are off while the owner is awake"
    ring.reap([])
    ring.notify_on(True)
    _nop(ring, 2)
    ring.submit()
    assert _readable(ring.efd)
    assert os.eventfd_read(ring.efd) == 1
    ring.notify_on(False)
    ring.reap([])


def test_submit_error_keeps_its_errno(ring):
    """A ring whose fd is gone: io_uring_enter fails with EBADF, raised as OSError."""
    _nop(ring, 1)
    ring_fd = ring._ring.ring_fd
    dup = os.dup(ring_fd)
    try:
        os.close(ring_fd)
        with pytest.raises(OSError) as info:
            ring.submit()
        assert info.value.errno == errno.EBADF
    finally:
        os.dup2(dup, ring_fd)  # give the number back so that close() tears down cleanly
        os.close(dup)
    ring.submit()
    out: list = []
    ring.reap(out)
    assert out == [(1, 0)]


def test_close_releases_everything_and_is_idempotent(ring_cls):
    before = open_fds()
    ring = ring_cls(16)
    assert not ring.closed
    assert len(open_fds() - before) == 2  # the ring's fd and the eventfd
    ring.close()
    assert ring.closed
    assert ring.efd == -1
    ring.close()
    assert open_fds() == before


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "8", None])
def test_bad_entries_are_a_value_error(ring_cls, bad):
    before = open_fds()
    with pytest.raises(ValueError, match="ring_entries"):
        ring_cls(bad)
    assert open_fds() == before


def test_ring_is_the_compiled_one_when_built():
    if uring.CRing is None:
        pytest.skip(f"compiled ring not in use: {uring.WHY_PURE}")
    assert uring.COMPILED is True
    assert uring.Ring is uring.CRing
    assert uring.WHY_PURE is None


@pytest.mark.timeout(60)
def test_env_var_forces_the_pure_ring():
    code = "import tinycoro.uring as u; print(u.COMPILED, u.Ring.__name__, u.WHY_PURE)"
    env = dict(os.environ, TINYCORO_PURE_RING="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False PyRing TINYCORO_PURE_RING is set"


def test_scheduler_runs_on_the_selected_ring():
    import tinycoro as tc
    from tinycoro.core.local import _local

    seen = []

    async def main():
        seen.append(type(_local.engine.ring))
        await tc.sleep(0)

    tc.run(main(), contexts=1)
    assert seen == [uring.Ring]
