"""``TINYCORO_SUBMIT_EARLY``: how many SQEs a turn queues before it submits them without
waiting for its end (core.submitpolicy). A bad value fails naming the variable; any valid one,
down to a submit per SQE, leaves every send and receive of a busy echo intact, on 1, 2 and 4
contexts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tinycoro.core import submitpolicy

pytestmark = pytest.mark.timeout(120)


def test_default_and_setting(monkeypatch):
    monkeypatch.delenv(submitpolicy.SUBMIT_EARLY_ENV, raising=False)
    assert submitpolicy.submit_early() == submitpolicy.DEFAULT_SUBMIT_EARLY
    monkeypatch.setenv(submitpolicy.SUBMIT_EARLY_ENV, " 2 ")
    assert submitpolicy.submit_early() == 2


@pytest.mark.parametrize("raw", ["0", "-3", "two", "1.5", "70000"])
def test_a_bad_value_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(submitpolicy.SUBMIT_EARLY_ENV, raw)
    with pytest.raises(ValueError, match="TINYCORO_SUBMIT_EARLY"):
        submitpolicy.submit_early()


# 40 connections x 30 round trips of distinct bytes: each turn has many tasks whose sends join
# the ring's batch, so a submit per SQE (1) and per 2 run through the early-submit path.
_ECHO = """
import sys
import tinycoro as tc
from tinycoro.core import engine

async def serve(conn):
    while True:
        data = await conn.recv(65536)
        if not data:
            break
        await conn.sendall(data)
    await conn.close()

async def client(port, i):
    s = await tc.net.connect("127.0.0.1", port)
    for r in range(30):
        msg = (b"%d:%d;" % (i, r)) * 8
        await s.sendall(msg)
        got = b""
        while len(got) < len(msg):
            part = await s.recv(65536)
            assert part, "closed early"
            got += part
        assert got == msg, (got, msg)
    await s.close()

async def main():
    listener = await tc.net.listen("127.0.0.1", 0)
    async def accept_all():
        for _ in range(40):
            tc.spawn(serve(await listener.accept()))
    acceptor = tc.spawn(accept_all())
    clients = [tc.spawn(client(listener.port, i)) for i in range(40)]
    for c in clients:
        await c
    await acceptor
    await listener.close()

tc.run(main(), contexts=int(sys.argv[1]))
print("SUBMIT_EARLY", engine.SUBMIT_EARLY)
"""


@pytest.mark.parametrize("contexts", [1, 2, 4])
@pytest.mark.parametrize("every", ["1", "2"])
def test_echo_intact_when_submitting_early(contexts, every):
    env = dict(os.environ, **{submitpolicy.SUBMIT_EARLY_ENV: every})
    out = subprocess.run([sys.executable, "-c", _ECHO, str(contexts)], env=env,
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"SUBMIT_EARLY {every}" in out.stdout


def test_a_bad_value_fails_at_import():
    env = dict(os.environ, **{submitpolicy.SUBMIT_EARLY_ENV: "zero"})
    out = subprocess.run([sys.executable, "-c", "import tinycoro"], env=env,
                         capture_output=True, text=True, timeout=100)
    assert out.returncode != 0
    assert "TINYCORO_SUBMIT_EARLY must be a whole number" in out.stderr
