"""Ring setup flags: each is tried when a ring is set up, a flag the kernel refuses is dropped
(the ring is set up without it, and the runtime works as before), ``TINYCORO_RING_FLAGS=plain``
turns them off, and ``python -m tinycoro`` names those in use in its first line."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading

import pytest

import tinycoro as tc
from tinycoro import uring

from helpers.rings import reap
from helpers.streams import tcp_pair

pytestmark = pytest.mark.timeout(60)

_DEMO = ["-n", "1", "--files", "1", "--file-kib", "4", "--clients", "1", "--rounds", "1",
         "--timers", "1"]


def _echo_once() -> bytes:
    async def main() -> bytes:
        client, server = await tcp_pair()
        await client.sendall(b"ping")
        got = await server.recv(16)
        await tc.sleep(0.001)
        for s in (client, server):
            await s.close()
        return got

    return tc.run(main())


def test_a_flag_the_kernel_refuses_is_dropped_and_the_ring_works(monkeypatch):
    # Bit 31 is no setup flag of any kernel: io_uring_setup refuses it with EINVAL, as an
    # older kernel refuses COOP_TASKRUN.
    monkeypatch.setattr(uring, "_WANTED_FLAGS", (*uring._WANTED_FLAGS, ("NOT_A_FLAG", 1 << 31)))
    monkeypatch.setattr(uring, "_refused_flags", set())
    monkeypatch.delenv(uring.RING_FLAGS_ENV, raising=False)
    assert _echo_once() == b"ping"
    in_use = uring.ring_flags()
    assert "NOT_A_FLAG" not in in_use
    # (the pure ring never takes the single-issuer flags: uring.PyRing says why)
    assert in_use == tuple(n for n, _ in uring._WANTED_FLAGS if n != "NOT_A_FLAG"
                           and (uring.COMPILED or n not in uring._OWNED_FLAGS))


def test_plain_sets_rings_up_without_flags(monkeypatch):
    monkeypatch.setenv(uring.RING_FLAGS_ENV, "plain")
    assert uring.ring_flags() == ()
    assert _echo_once() == b"ping"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("plain", [False, True], ids=["flags", "plain"])
def test_the_demo_names_the_ring_flags_in_its_first_line(plain):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYCORO_")}
    if plain:
        env[uring.RING_FLAGS_ENV] = "plain"
    code = "from tinycoro import uring; print(', '.join(uring.ring_flags()) or 'none')"
    expected = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if plain:
        assert expected == "none"
    out = subprocess.run([sys.executable, "-m", "tinycoro", *_DEMO], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    assert f", ring flags: {expected}, " in out.stdout.splitlines()[0], out.stdout


# -- one owner thread per ring: SINGLE_ISSUER and DEFER_TASKRUN ----------------------------------
compiled = pytest.mark.skipif(uring.CRing is None, reason=f"compiled ring: {uring.WHY_PURE}")
_SINGLE_ISSUER, _DEFER_TASKRUN, _R_DISABLED = 1 << 12, 1 << 13, 1 << 6
_COOP = (1 << 8) | (1 << 9)


_ALL = "COOP_TASKRUN,SINGLE_ISSUER,DEFER_TASKRUN"


@pytest.fixture
def all_flags(monkeypatch):
    """Every flag tinycoro knows, the single-issuer ones too (tried only when named)."""
    monkeypatch.setenv(uring.RING_FLAGS_ENV, _ALL)


def _needs_flag(name: str) -> None:
    if name not in uring.ring_flags():
        pytest.skip(f"{name} not in use here (the kernel refused it, or the pure ring)")


@compiled
def test_a_completion_the_kernel_holds_back_counts_as_ready():
    """With DEFER_TASKRUN the kernel posts a socket's completion only when the owner enters
    the ring with GETEVENTS, and writes the eventfd only for the first one it holds back: a
    held completion the sleep point's look (cq_ready) did not count was slept on for good.
    Before the fix cq_ready said 0 here (the CQ itself is empty)."""
    from tinycoro import _cring

    core = _cring.RingCore()
    try:
        core.ring_open(8, _COOP | _SINGLE_ISSUER | _DEFER_TASKRUN, 0)
    except OSError as e:  # a kernel before 6.1
        pytest.skip(f"DEFER_TASKRUN refused: {e}")
    a, b = socket.socketpair()
    buf = bytearray(16)
    try:
        core.queue(uring.prep_recv, (a.fileno(), buf, len(buf), 0), 7)
        assert core.submit() == 1
        assert core.cq_ready() == 0  # armed, nothing sent yet
        b.send(b"held")  # completes the recv as task work the kernel keeps for the owner
        assert core.cq_ready() >= 1
        out: list = []
        assert reap(core, out) == 1  # reaping has it posted
        assert out == [(7, 4)] and bytes(buf[:4]) == b"held"
        assert core.cq_ready() == 0
    finally:
        core.ring_exit()
        a.close()
        b.close()


@compiled
def test_a_single_issuer_ring_is_enabled_by_its_owner_and_closed_from_anywhere(all_flags):
    _needs_flag("SINGLE_ISSUER")
    ring = uring.CRing(8, single_issuer=True)
    try:
        assert ring.setup_flags & _SINGLE_ISSUER and ring.setup_flags & _R_DISABLED
        with pytest.raises(OSError) as info:  # disabled until its owner enables it
            _queue_nops_and_submit(ring)
        assert info.value.errno == errno.EBADFD
        owner_out: list = []

        def owner() -> None:
            ring.enable()
            _queue_nops_and_submit(ring)
            while len(owner_out) < 3:
                reap(ring, owner_out)

        t = threading.Thread(target=owner)
        t.start()
        t.join(30)
        assert not t.is_alive() and len(owner_out) == 3
        assert not ring.setup_flags & _R_DISABLED
        with pytest.raises(OSError) as info:  # the kernel's rule: another thread may not submit
            _queue_nops_and_submit(ring)
        assert info.value.errno == errno.EEXIST
    finally:
        ring.close()  # on this thread, not the owner: no error, nothing left open
    assert ring.closed and ring.efd == -1


def _queue_nops_and_submit(ring) -> None:
    for ud in (11, 12, 13):
        ring.queue(uring.prep_nop, (), ud)
    ring.submit()


@pytest.mark.parametrize("named", [True, False], ids=["named", "default"])
def test_a_context_ring_has_one_issuer_where_asked_and_taken(named, monkeypatch):
    """A scheduler's context rings get the single-issuer flags where they are named (compiled
    ring) and are enabled by their own thread; a guest engine's ring never; by default no
    ring does (they did not measure better)."""
    if named:
        monkeypatch.setenv(uring.RING_FLAGS_ENV, _ALL)
    else:
        monkeypatch.delenv(uring.RING_FLAGS_ENV, raising=False)
    async def flags() -> int:
        return tc.lowlevel.current_engine().ring.setup_flags

    with tc.Scheduler(1) as sched:
        got = sched.run_sync(flags())
    if uring.COMPILED and "SINGLE_ISSUER" in uring.ring_flags():
        assert got & _SINGLE_ISSUER and not got & _R_DISABLED
        assert bool(got & _DEFER_TASKRUN) == ("DEFER_TASKRUN" in uring.ring_flags())
    else:
        assert not got & (_SINGLE_ISSUER | _DEFER_TASKRUN | _R_DISABLED)
    engine = tc.lowlevel.guest_engine(None, 8)
    try:
        assert not engine.ring.setup_flags & (_SINGLE_ISSUER | _R_DISABLED)
    finally:
        engine.close()


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_echo_and_files_on_single_issuer_rings(contexts, tmp_path, all_flags):
    """The runtime on rings with every flag wanted: before the context thread created (well,
    enabled) its own ring, the first submit of a SINGLE_ISSUER ring set up by the thread that
    made the scheduler failed with EEXIST and the context crashed."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10000)

    async def pair(i: int) -> bytes:
        client, server = await tcp_pair()
        got = b""
        for _ in range(20):
            await client.sendall(b"ping%d" % i)
            got = await server.recv(64)
            await server.sendall(got)
            got = await client.recv(64)
        for s in (client, server):
            await s.close()
        return got

    async def main() -> list:
        async with tc.TaskGroup() as g:
            tasks = [g.spawn(pair(i)) for i in range(8)]
            reads = [g.spawn(tc.io.read_file(str(path))) for _ in range(4)]
        await tc.sleep(0.001)
        return [t.result() for t in tasks] + [len(r.result()) for r in reads]

    got = tc.run(main(), contexts=contexts)
    assert got == [b"ping%d" % i for i in range(8)] + [10000] * 4


def test_a_scheduler_that_never_ran_closes_its_disabled_rings(all_flags):
    sched = tc.Scheduler(2)
    engines = list(sched._engines)
    sched.stop()
    assert all(e.closed for e in engines)


def test_ring_flags_names_a_chosen_subset_and_refuses_unknown_names(monkeypatch):
    monkeypatch.setenv(uring.RING_FLAGS_ENV, "coop_taskrun")
    assert uring.ring_flags() == ("COOP_TASKRUN",)
    assert _echo_once() == b"ping"
    monkeypatch.setenv(uring.RING_FLAGS_ENV, "COOP_TASKRUN,NOT_A_FLAG")
    with pytest.raises(ValueError, match="NOT_A_FLAG"):
        uring.ring_flags()
    if uring.COMPILED:
        monkeypatch.setenv(uring.RING_FLAGS_ENV, "DEFER_TASKRUN")  # brings SINGLE_ISSUER along
        assert set(uring.ring_flags()) <= {"SINGLE_ISSUER", "DEFER_TASKRUN"}
        assert _echo_once() == b"ping"


def test_an_einval_about_something_else_costs_no_flag():
    """A ring the kernel refuses for its size (EINVAL, as for a refused flag) was taken for a
    refusal of every flag in turn, and the process's later rings got none."""
    before = uring.ring_flags()
    with pytest.raises(OSError) as info:
        uring.Ring(1 << 20)  # more entries than any kernel takes
    assert info.value.errno == errno.EINVAL
    assert uring.ring_flags() == before


@compiled
def test_an_owner_reaps_a_completion_the_kernel_holds_back():
    """Compiled, a ring's owner looks at the CQ itself before calling the ring's complete()
    (core/cqwatch.py): with DEFER_TASKRUN the CQ stays empty until the owner enters the ring,
    so that look must count what the kernel holds back, or the recv's completion is never
    reaped while the owner keeps turning. And a CQE already posted (a submit's own enter posts
    what completed inline) must be reaped too: the look's other half."""
    from tinycoro import _cring
    from tinycoro.core.ring import RingOwner
    from tinycoro.core.traps import Op

    class Owner(RingOwner):
        def _deliver(self, done):  # op, res pairs, two entries each
            self.got.extend(zip(done[::2], done[1::2]))

    core = _cring.RingCore()
    try:
        core.ring_open(8, _COOP | _SINGLE_ISSUER | _DEFER_TASKRUN, 0)
    except OSError as e:  # a kernel before 6.1
        pytest.skip(f"DEFER_TASKRUN refused: {e}")
    assert core.cq_watch() == core.cq_watch() != 0  # one watch, for the ring's life
    a, b = socket.socketpair()
    buf = bytearray(16)
    owner = Owner(core)
    owner.got = []
    try:
        op = Op(uring.prep_recv, a.fileno(), buf, len(buf), 0)
        assert owner._enter(op, "waiter") is None
        owner._submit()
        owner._reap()
        assert owner.got == [] and owner.inflight  # armed, nothing sent yet
        b.send(b"held")  # completes the recv as task work the kernel keeps for the owner
        owner._reap()
        assert owner.got == [(op, 4)] and bytes(buf[:4]) == b"held"
        assert owner.inflight == {}
        nop = Op(uring.prep_nop)
        assert owner._enter(nop, "waiter") is None
        owner._submit()  # DEFER_TASKRUN: its enter, with GETEVENTS, posts the NOP's CQE
        assert core.cq_ready() == 1 and owner.got == [(op, 4)]  # posted, not reaped yet
        owner._reap()
        assert owner.got == [(op, 4), (nop, 0)] and owner.inflight == {}
    finally:
        core.ring_exit()
        a.close()
        b.close()
