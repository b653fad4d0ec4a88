"""Ring setup flags: each is tried when a ring is set up, a flag the kernel refuses is dropped
(the ring is set up without it, and the runtime works as before), ``TINYCORO_RING_FLAGS=plain``
turns them off, and ``python -m tinycoro`` names those in use in its first line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tinycoro as tc
from tinycoro import uring

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
    assert in_use == tuple(n for n, _ in uring._WANTED_FLAGS if n != "NOT_A_FLAG")


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
