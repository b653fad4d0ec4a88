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

from helpers.rings import reap
from helpers.runtime import open_fds, opened_since

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
    assert reap(ring, out) == 1
    assert out == [(7, 0)]
    assert ring.cq_ready() == 0
    assert reap(ring, out) == 0  # nothing more: the list is left as it was
    assert out == [(7, 0)]


def test_reap_appends_and_keeps_order(ring):
    out = [("earlier", 1)]
    for ud in (1, 2, 3):
        _nop(ring, ud)
    ring.submit()
    assert reap(ring, out) == 3
    assert out == [("earlier", 1), (1, 0), (2, 0), (3, 0)]


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
            if reap(ring, out) == 0:
                ring.submit()  # flushes the kernel's overflow list into the CQ
        assert sorted(ud for ud, _ in out) == list(range(1, 1001))
        assert all(res == 0 for _, res in out)
        assert reap(ring, out) == 0
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
    while not reap(ring, out):
        pass
    assert out == [(9, -errno.EBADF)]


def test_user_data_keeps_all_64_bits(ring):
    big = (1 << 64) - 1
    _nop(ring, big)
    _nop(ring, 1 << 40)
    ring.submit()
    out: list = []
    reap(ring, out, (big, 1 << 40))
    assert out == [(big, 0), (1 << 40, 0)]


def test_eventfd_fires_only_when_notify_is_on(ring):
    _nop(ring, 1)
    ring.submit()  # a NOP completes inside io_uring_enter
    assert ring.cq_ready() == 1
    assert not _readable(ring.efd), "notifications are off while the owner is awake"
    reap(ring, [])
    ring.notify_on(True)
    _nop(ring, 2)
    ring.submit()
    assert _readable(ring.efd)
    assert os.eventfd_read(ring.efd) == 1
    ring.notify_on(False)
    reap(ring, [])


def test_submit_error_keeps_its_errno(ring):
    """A ring whose fd is gone: io_uring_enter fails with EBADF, raised as OSError."""
    _nop(ring, 1)
    ring_fd = ring.ring_fd
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
    reap(ring, out)
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
    assert not opened_since(before)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "8", None])
def test_bad_entries_are_a_value_error(ring_cls, bad):
    before = open_fds()
    with pytest.raises(ValueError, match="ring_entries"):
        ring_cls(bad)
    assert not opened_since(before)


def test_ring_is_the_compiled_one_when_built():
    if uring.CRing is None:
        pytest.skip(f"compiled ring not in use: {uring.WHY_PURE}")
    assert uring.COMPILED is True
    assert uring.Ring is uring.CRing
    assert uring.WHY_PURE is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("var", ["TINYCORO_PURE", "TINYCORO_PURE_RING"])  # the second: deprecated
def test_env_var_forces_the_pure_ring(var):
    code = "import tinycoro.uring as u; print(u.COMPILED, u.Ring.__name__, u.WHY_PURE)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYCORO_")}
    env[var] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"False PyRing {var} is set"


def test_scheduler_runs_on_the_selected_ring():
    import tinycoro as tc
    from tinycoro.core.local import thread_state as _local

    seen = []

    async def main():
        seen.append(type(_local.engine.ring))
        await tc.sleep(0)

    tc.run(main(), contexts=1)
    assert seen == [uring.Ring]


# -- queue(prep, args, ud) and complete(slots, free, standing, done, shots): the ring owner's two hot calls -------


def _wait_all(ring, n: int) -> list:
    """Submit and reap until *n* completions arrived (NOPs, files and ready sockets complete
    inside io_uring_enter or very soon after; bounded by pytest's timeout)."""
    out: list = []
    ring.submit()
    while len(out) < n:
        if not reap(ring, out):
            select.select([ring.efd], [], [], 0.01)
    return out


def test_queue_fills_every_kind_like_the_prep_functions(ring, tmp_path):
    """Write, read back, fsync (a prep the compiled ring does not fill itself), send and recv:
    the same results as preparing the SQEs by hand."""
    import socket

    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR)
    a, b = socket.socketpair()
    try:
        ring.queue(uring.prep_write, (fd, b"hello ring", 10, 0), 11)
        assert _wait_all(ring, 1) == [(11, 10)]
        buf = bytearray(32)
        ring.queue(uring.prep_read, (fd, memoryview(buf)[4:], 10, 0), 12)
        ring.queue(uring.prep_fsync, (fd, 0), 13)
        assert sorted(_wait_all(ring, 2)) == [(12, 10), (13, 0)]
        assert bytes(buf[4:14]) == b"hello ring"
        ring.queue(uring.prep_send, (a.fileno(), b"ping", 4, 0), 14)
        assert _wait_all(ring, 1) == [(14, 4)]
        rbuf = bytearray(8)
        ring.queue(uring.prep_recv, (b.fileno(), rbuf, 8, 0), 15)
        assert _wait_all(ring, 1) == [(15, 4)]
        assert bytes(rbuf[:4]) == b"ping"
    finally:
        os.close(fd)
        a.close()
        b.close()


@pytest.mark.timeout(30)
def test_queue_timeout_and_cancel(ring):
    """A pending recv cancelled by user_data: the recv ends with -ECANCELED, the cancel with 0;
    a timeout of 1 ms ends with -ETIME."""
    import socket

    a, b = socket.socketpair()
    try:
        buf = bytearray(8)
        ring.queue(uring.prep_recv, (b.fileno(), buf, 8, 0), 21)
        ring.submit()
        ring.queue(uring.prep_cancel, (21, 0), 22)
        got = dict(_wait_all(ring, 2))
        assert got == {21: -errno.ECANCELED, 22: 0}
        ts = uring.timespec(0.001)
        ring.queue(uring.prep_timeout, (ts, 0, 0), 23)
        assert _wait_all(ring, 1) == [(23, -errno.ETIME)]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "prep, args",
    [
        (uring.prep_read, (0, "not a buffer", 4, 0)),
        (uring.prep_recv, (0, b"read-only", 4, 0)),
        (uring.prep_send, ("fd", b"data", 4, 0)),
        (uring.prep_timeout, ("not a timespec", 0, 0)),
        (uring.prep_fsync, ("fd", 0)),
    ],
    ids=["read-str", "recv-readonly", "send-fd", "timeout", "fallback"],
)
def test_queue_prep_error_leaves_a_skip_nop(ring, prep, args):
    """A prep that raises: the error reaches the caller and the SQE it took completes as a NOP
    with SKIP_UD, never as a half-prepared operation (rule 11)."""
    with pytest.raises((TypeError, ValueError, BufferError)):
        ring.queue(prep, args, 31)
    assert ring.sq_ready() == 1
    assert _wait_all(ring, 1) == [(uring.SKIP_UD, 0)]


def test_compiled_queue_refuses_nbytes_beyond_the_buffer():
    if uring.CRing is None:
        pytest.skip(f"compiled ring: {uring.WHY_PURE}")
    ring = uring.CRing(8)
    try:
        with pytest.raises(ValueError, match="nbytes"):
            ring.queue(uring.prep_read, (0, bytearray(4), 5, 0), 41)
        assert _wait_all(ring, 1) == [(uring.SKIP_UD, 0)]
    finally:
        ring.close()


def test_queue_on_a_full_sq_submits_first(ring_cls):
    ring = ring_cls(8)
    try:
        for ud in range(2, 202):
            ring.queue(uring.prep_nop, (), ud)
        out = _wait_all(ring, 200)
        assert sorted(ud for ud, _ in out) == list(range(2, 202))
    finally:
        ring.close()


class _Opaque:
    """An op as the ring sees it: anything at all. No attribute, so a ring that read or wrote
    one (``task``, ``cancelling``, ``_value``) would fail here."""

    __slots__ = ()


def test_complete_hands_back_op_and_result_and_never_looks_inside_the_op(ring):
    # The completion contract (tinycoro/uring.py): the owner's table holds two entries per
    # slot, the op (None: free) and the slot's user_data, the index of that op entry. An op
    # comes back as two entries, op and res (no tuple per completion), in completion order;
    # its entry is emptied and the slot's own user_data int (not a new one) goes on the free
    # list. The owner's own SQEs, and a user_data whose slot holds no op, are only counted.
    plain, failed, other = _Opaque(), _Opaque(), _Opaque()
    slots: list = [None, 0]
    for ud in range(2, 310, 2):
        slots += [None, int(str(ud))]  # past 256, each an int of its own (none is cached)
    slots[300], slots[302], slots[304] = plain, failed, other
    free: list = [slots[307]]
    ring.queue(uring.prep_nop, (), 300)
    ring.queue(uring.prep_read, (-1, bytearray(4), 4, 0), 302)  # -EBADF
    ring.queue(uring.prep_nop, (), uring.SKIP_UD)
    ring.queue(uring.prep_nop, (), 306)  # a free slot: none of the owner's ops
    ring.queue(uring.prep_nop, (), 998)  # beyond the table: none either
    ring.submit()
    done: list = []
    shots: list = []  # multishot completions: none queued here
    n = 0
    while n < 5:
        n += ring.complete(slots, free, {}, done, shots)
    assert n == 5  # the own SQEs' CQEs count, and are not in done
    assert slots[300] is None and slots[302] is None and slots[304] is other
    assert len(free) == 3 and free[0] is slots[307]
    assert sorted(free[1:]) == [300, 302]
    assert {id(f) for f in free[1:]} == {id(slots[301]), id(slots[303])}  # the table's own ints
    pairs = sorted(zip(done[::2], done[1::2]), key=lambda d: d[1])
    assert len(done) == 4 and pairs == [(failed, -errno.EBADF), (plain, 0)]
    assert ring.complete(slots, free, {}, done, shots) == 0 and len(done) == 4  # untouched
    assert shots == []


@pytest.mark.skipif(not uring.COMPILED, reason="only the compiled ring queues multishots")
def test_complete_tells_the_owners_standing_ops_apart():
    # An op armed by the owner (its standing table: its multishots, also in a slot) has
    # MULTI_UD_TAG in its user_data (RingOwner.arm gives it), and the ring tells its CQEs by
    # that bit: one goes to shots, uncounted, and its last CQE (no IORING_CQE_F_MORE: here a
    # NOP's) frees its slot and takes it out of standing. A plain op's CQE goes to done as
    # ever.
    multi, plain = _Opaque(), _Opaque()
    ud = 2 | uring.MULTI_UD_TAG
    ring = uring.CRing(8)
    try:
        slots = [None, 0, multi, 2, plain, 4]
        free: list = []
        standing = {ud: multi}
        ring.queue(uring.prep_nop, (), ud)
        ring.queue(uring.prep_nop, (), 4)
        ring.submit()
        done: list = []
        shots: list = []
        n = 0
        while len(done) // 2 + len(shots) // 4 < 2:
            n += ring.complete(slots, free, standing, done, shots)
        assert n == 1  # the multishot's CQE is not counted as one of the owner's own
        # four entries, op, res, data, more: no tuple per CQE (one per request, alive for
        # the whole reap, filled the collector's young generation at many connections)
        assert shots == [multi, 0, None, False]
        assert done == [plain, 0]
        assert slots == [None, 0, None, 2, None, 4] and sorted(free) == [2, 4]
        assert standing == {}
    finally:
        ring.close()


def test_compiled_and_pure_ring_satisfy_the_owners_protocol(ring):
    # What RingOwner needs of a ring (tinycoro.core.ring.IoRing), checked by name on both.
    from tinycoro.core.ring import IoRing

    wanted = {n for n in dir(IoRing) if not n.startswith("_")} | set(IoRing.__annotations__)
    assert wanted >= {"queue", "submit", "complete", "efd", "closed"}
    assert all(hasattr(ring, n) for n in wanted), sorted(n for n in wanted if not hasattr(ring, n))


def test_a_failed_setup_reports_its_own_errno_not_a_stale_one(ring_cls):
    # The binding raises OSError(errno or -ret) and liburing never sets errno: a stale ENOENT
    # left by an earlier libc call used to be what a ring that the kernel refused reported.
    for _ in range(2):
        uring._errno_location()[0] = errno.ENOENT
        with pytest.raises(OSError) as info:
            ring_cls(65536)  # above the kernel's 32768 entries: EINVAL
        assert info.value.errno == errno.EINVAL


def test_the_pure_ring_keeps_the_gil_while_it_resets_errno():
    """The pure ring resets C errno before each binding call that may fail (every submit). A
    ctypes call through CDLL releases the GIL and takes it back: each release woke a thread
    waiting for the GIL and restarted its switch interval, and the busy context took the GIL
    back first every time, so the main thread, unwinding a Ctrl-C, could wait seconds for it.
    Through PyDLL the call keeps the GIL."""
    import ctypes

    assert uring._errno_location._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def _address_space() -> int:
    """This process's mapped address space, in bytes (VmSize)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


@pytest.mark.skipif(not uring.COMPILED, reason="only the compiled ring maps provided buffers")
def test_a_compiled_ring_dropped_unclosed_unmaps_its_buffer_ring_too():
    # An owner that never closed its ring (an exception between setup and use): the ring's
    # mappings and descriptor go with the object, and so must the provided buffers it mapped
    # for multishot recvs, or each such ring leaks them for the life of the process.
    rings, size = 8, 1 << 20  # 64 x 1 MiB of untouched address space per ring
    before = _address_space()
    fds = open_fds()
    for _ in range(rings):
        core = uring._cring.RingCore()
        core.ring_open(8, 0, 0)
        if core.multishot_setup(64, size) != 0:
            pytest.skip("this kernel has no provided-buffer rings")
        assert core.buffer_bytes == 64 * size
        del core
    assert not opened_since(fds)
    assert _address_space() - before < rings * 64 * size // 2


def test_a_ring_dropped_unclosed_releases_every_kernel_resource(ring_cls):
    # An owner that never closed its ring (an exception between setup and use, a test that
    # forgot): its descriptor, its eventfd, its mappings and (compiled) its provided-buffer
    # ring go with the object, not with the process. Each is a descriptor or mapped memory
    # that no later code can name again.
    rings = 8
    before = _address_space()
    fds = open_fds()
    for _ in range(rings):
        ring = ring_cls(8)
        buffers = ring_cls is uring.CRing and ring.multishot_ready()  # maps the buffer ring
        ring.queue(uring.prep_nop, (), 1)  # one op in flight: the drop also ends it
        ring.submit()
        del ring
    assert not opened_since(fds)
    if buffers:  # a leak of the eight buffer rings would add their whole pools
        pool = uring.MULTISHOT_BUFFERS * uring.MULTISHOT_BUFFER_SIZE
        assert _address_space() - before < rings * pool // 2



@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_only_an_armed_op_gets_the_multishot_tag(contexts):
    # The compiled ring's reap looks a CQE up among the owner's multishots only when its
    # user_data has MULTI_UD_TAG: RingOwner.arm must give it to every armed op (a stream's
    # multishot recv) and no other op may have it, or a multishot's CQE would be taken for a
    # one-shot's. Looked at from inside a task, while the server's recv is armed.
    import tinycoro as tc
    from tinycoro import lowlevel

    tables: list[tuple[dict, dict]] = []

    async def main() -> None:
        lst = await tc.net.listen("127.0.0.1", 0)

        async def serve() -> None:
            conn = await lst.accept()
            while data := await conn.recv(64):
                await conn.sendall(data)
                engine = lowlevel.current_engine()
                tables.append((dict(engine.standing), dict(engine.inflight)))
            await conn.close()

        server = tc.spawn(serve())
        client = await tc.net.connect("127.0.0.1", lst.port)
        for _ in range(3):
            await client.sendall(b"ping")
            assert await client.recv(64) == b"ping"
        await client.close()
        await server
        await lst.close()

    tc.run(main(), contexts=contexts)
    assert len(tables) == 3
    for standing, inflight in tables:
        assert all(ud & uring.MULTI_UD_TAG for ud in standing)
        assert not any(ud & uring.MULTI_UD_TAG for ud in inflight if ud not in standing)
    if uring.COMPILED and uring.multishot_wanted():
        assert any(standing for standing, _ in tables)  # the recv was armed: the check saw it


class _Nop:
    prep = uring.prep_nop
    args = ()

    def __init__(self) -> None:
        self.ud = 0
        self.task = None
        self.cancelling = False


@pytest.mark.skipif(uring.CRing is None, reason=f"compiled ring: {uring.WHY_PURE}")
def test_a_submit_reaps_before_the_completion_queue_fills():
    # The kernel posts completions while it runs each submit, and an owner reaps at its turn's
    # end; a turn that resumes thousands of tasks submits hundreds of times before that, and
    # a full CQ ends every multishot recv with a CQE to post (each is armed again by its next
    # recv: at 10,000 echo connections, 7 re-arms per 100 requests). So a submit that leaves
    # the CQ half full reaps it. More NOPs than half the CQ, queued and submitted as one turn
    # would: after the owner's submit, what completed has been delivered.
    from tinycoro.core.ring import RingOwner

    delivered: list[int] = []

    class Owner(RingOwner):
        def _deliver(self, done):
            delivered.extend(done[1::2])
            for op in done[::2]:
                op.task = None

        def _wait_for_cqe(self):
            select.select([self.ring.efd], [], [], 1.0)

    owner = Owner(uring.CRing(64))
    try:
        assert owner.cq_high == uring.CQ_ENTRIES // 2
        n = owner.cq_high + 100
        for _ in range(n):  # a full SQ is submitted by the ring itself, as in a turn
            assert owner._enter(_Nop(), object()) is None
        owner._submit()
        assert owner.ring.cq_ready() < owner.cq_high
        assert len(delivered) >= owner.cq_high
        assert set(delivered) == {0}
        owner._drain()
        assert len(delivered) == n and not owner.inflight
    finally:
        owner.ring.close()


def test_every_multiop_is_an_op_that_overrides_completion():
    """The ring's owner calls a MultiOp's completion as Op's C method (a typed local): each op
    it arms must be an Op with its own completion, or its CQEs would end in Op's
    NotImplementedError (reported, the op failed) instead of reaching it."""
    from tinycoro.core.traps import Op
    from tinycoro.io._parallel import BackHalf
    from tinycoro.net.multishot import MultishotRecv

    for cls in (MultishotRecv, BackHalf):  # every class that RingOwner.arm is given
        assert issubclass(cls, Op), cls
        assert cls.completion is not Op.completion, cls
    with pytest.raises(NotImplementedError, match="not a MultiOp"):
        Op.completion(Op.__new__(Op), 0, None, False)


class _Owner:
    """A RingOwner that records what it delivers (op, res pairs) and waits on the eventfd."""

    @staticmethod
    def make(ring):
        from tinycoro.core.ring import RingOwner

        class Owner(RingOwner):
            def _deliver(self, done):
                for op, res in zip(done[::2], done[1::2]):
                    op.task = None
                    self.got.append((op, res))

            def _wait_for_cqe(self):
                select.select([self.ring.efd], [], [], 1.0)

        owner = Owner(ring)
        owner.got = []
        return owner


def _op(*args):
    from tinycoro.core.traps import Op

    return Op(uring.prep_nop, *args)


def _reap_until(owner, n: int) -> None:
    """Submit and reap until *n* deliveries arrived (NOPs complete inside the submit)."""
    owner._submit()
    while len(owner.got) < n:
        owner._reap()
        if len(owner.got) < n:
            owner._wait_for_cqe()


def test_an_owners_table_is_a_slot_per_op_in_flight_named_by_its_user_data(ring_cls):
    # The in-flight table is a list of slots (core/ring.py): an op's user_data names its slot,
    # a completion frees the slot and the next op takes the slot freed last; the readers'
    # view (inflight: user_data -> op, inflight_count, holds) follows it, and an op that
    # completed is not held, even when another op has taken its slot since.
    owner = _Owner.make(ring_cls(8))
    try:
        a, b, c = _op(), _op(), _op()
        for op in (a, b, c):
            assert owner._enter(op, object()) is None
        assert [op.ud for op in (a, b, c)] == [2, 4, 6]  # the index of each op's entry
        assert owner._slots[1::2] == [0, 2, 4, 6]  # each slot's user_data, made once
        assert not any(op.ud & uring.MULTI_UD_TAG for op in (a, b, c))
        assert owner.inflight == {a.ud: a, b.ud: b, c.ud: c} and owner.inflight_count() == 3
        assert all(owner.holds(op) for op in (a, b, c))
        _reap_until(owner, 3)
        assert sorted(id(op) for op, _ in owner.got) == sorted(map(id, (a, b, c)))
        assert owner.inflight == {} and owner.inflight_count() == 0
        assert not any(owner.holds(op) for op in (a, b, c))
        last = owner._free[-1]
        d = _op()
        assert owner._enter(d, object()) is None
        assert d.ud is last  # the slot freed last (likely in the cache), its own int
        stale = next(op for op in (a, b, c) if op.ud == d.ud)
        assert owner.holds(d) and not owner.holds(stale)
        owner.cancel_op(stale)  # completed: nothing to cancel, whoever has its slot now
        assert owner.own_inflight == 0 and not d.cancelling
        assert owner.describe_inflight(stale.ud, stale) is None
        assert owner.describe_inflight(d.ud, d) is not None
        assert owner.describe_inflight(98, d) is None  # beyond the table
        _reap_until(owner, 4)
        assert owner.inflight_count() == 0 and len(owner._slots) == 8  # slot 0 and three
    finally:
        owner.ring.close()


def test_a_prep_that_raises_gives_its_slot_back(ring_cls):
    # The op whose prep raised is not in flight: its slot is free again, and the NOP the ring
    # queued in its place (SKIP_UD) is counted as the owner's own.
    owner = _Owner.make(ring_cls(8))
    try:
        bad = _op("not", "a", "nop")
        assert isinstance(owner._enter(bad, object()), Exception)
        assert owner.inflight_count() == 0 and owner._free == [2] and owner.own_inflight == 1
        good = _op()
        assert owner._enter(good, object()) is None and good.ud == 2
        _reap_until(owner, 1)
        assert owner.got == [(good, 0)] and owner.own_inflight == 0
    finally:
        owner.ring.close()


# -- the compiled ring's calls as C (core/ringcalls.py) ------------------------------------------
@pytest.mark.skipif(uring.CRing is None, reason=f"compiled ring: {uring.WHY_PURE}")
def test_a_ring_class_that_redefines_a_call_is_called_by_name():
    """The owner calls the compiled ring's queue/complete/submit/sq_ready/cq_ready through its
    C table only when the ring's class keeps all five: a subclass that redefines one in Python
    hands out no table, so what it redefined runs (as it ran when the owner bound them)."""
    from tinycoro import compiled
    from tinycoro.core import ring as ring_module

    submits: list[int] = []

    class CountingRing(uring.CRing):
        def submit(self):
            submits.append(1)
            return super().submit()

    plain = uring.CRing(8)
    counting = CountingRing(8)
    try:
        assert counting.c_calls() == 0
        assert plain.c_calls() != 0
        for r in (plain, counting):
            owner = _Owner.make(r)
            assert owner._enter(_op(), object()) is None
            _reap_until(owner, 1)
            assert owner.got[0][1] == 0
        assert submits  # the redefinition ran
        if compiled.is_compiled(ring_module):  # interpreted, the owner never takes the table
            assert _Owner.make(plain)._calls != 0
    finally:
        plain.close()
        counting.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_the_engine_calls_the_ring_it_was_given_by_name_when_its_class_redefines_the_calls(
    monkeypatch, contexts
):
    """An engine queues, submits and counts what is queued through its ring's own methods
    when the ring's class redefines them (no C table: the owner's one helper per call
    decides), and through the table otherwise: every op a task awaits reaches the kernel
    either way."""
    import tinycoro as tc
    from tinycoro.core import engine as engine_module
    from tinycoro.core.traps import Op

    calls: dict[str, int] = {"queue": 0, "submit": 0, "sq_ready": 0}

    class CountingRing(uring.Ring):
        def queue(self, prep, args, ud):
            calls["queue"] += 1
            return super().queue(prep, args, ud)

        def submit(self):
            calls["submit"] += 1
            return super().submit()

        def sq_ready(self):
            calls["sq_ready"] += 1
            return super().sq_ready()

    monkeypatch.setattr(engine_module.uring, "Ring", CountingRing)
    n = 50

    async def worker() -> int:
        results = [await Op(uring.prep_nop) for _ in range(n)]
        return sum(results)

    async def main() -> list[int]:
        tasks = [tc.spawn(worker()) for _ in range(contexts)]
        return [await t for t in tasks]

    assert tc.run(main(), contexts=contexts) == [0] * contexts
    assert calls["queue"] >= n * contexts
    assert calls["submit"] >= 1 and calls["sq_ready"] >= 1


def test_a_reap_of_many_completions_delivers_each_once(ring):
    """More CQEs in one reap than the owner's lists have ever held (the compiled ring makes
    room for them at once): every op is delivered once with its result, every slot is free
    again, and the lists are empty after the reap."""
    owner = _Owner.make(ring)
    ops = [_op() for _ in range(200)]
    for op in ops:
        assert owner._enter(op, object()) is None
    owner._submit()
    _reap_until(owner, len(ops))
    assert sorted(id(op) for op, _ in owner.got) == sorted(id(op) for op in ops)
    assert {res for _, res in owner.got} == {0}
    assert owner.inflight_count() == 0 and not owner._done and not owner._shots
