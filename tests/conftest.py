"""Shared fixtures: context counts to run concurrency tests on, leak checks, a TLS certificate."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import ssl
import subprocess
import sys
import threading

import pytest

CONTEXT_COUNTS = (1, 2, 4)


@pytest.fixture(params=CONTEXT_COUNTS, ids=lambda n: f"ctx{n}")
def contexts(request) -> int:
    """Run the test once per context count: 1, 2 and 4 threads."""
    return request.param


@contextlib.contextmanager
def switch_interval(seconds: float):
    """Hand the GIL between threads every *seconds* instead of every 5 ms, so that the sides
    of a cross-context race interleave at many more points."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def tinycoro_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tinycoro-")]


def wait_until(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    """Block the calling (non-context) thread until *predicate()* holds.

    Used to wait for a runtime *state* (a context asleep in its eventfd, a task parked), which
    has no event of its own; fails loudly instead of hanging.
    """
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0005)


_SYS_READ = {"x86_64": 0, "aarch64": 63, "riscv64": 63, "s390x": 3, "ppc64le": 3}.get(
    platform.machine()
)


def in_eventfd_read(engine, thread: threading.Thread | None = None) -> bool:
    """*thread* (default: the main thread) is blocked in the read(2) of *engine*'s eventfd
    right now, so a signal interrupts that system call (EINTR) instead of landing just before
    it, where it would not interrupt anything."""
    if not engine.sleeping:
        return False
    if _SYS_READ is None:  # unknown syscall numbering: the sleeping flag is the best we have
        return True
    tid = (thread or threading.main_thread()).native_id
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return True
    return len(fields) > 1 and fields[0] == str(_SYS_READ) and int(fields[1], 16) == engine.ring.efd


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory) -> tuple:
    """(cert.pem, key.pem): a self-signed certificate for localhost and 127.0.0.1, made by the
    openssl binary (skips the test where there is none)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl binary")
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return crt, key


@pytest.fixture
def server_ctx(tls_cert) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*tls_cert)
    return ctx


@pytest.fixture
def client_ctx(tls_cert) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls_cert[0]))


async def tls_pair(server_ctx, client_ctx):
    """A TLS listener, a client connected to it, and the server's side of that connection."""
    import tinycoro as tc

    lst = await tc.net.listen(ssl=server_ctx)
    accepted = tc.spawn(lst.accept())
    client = await tc.net.connect("127.0.0.1", lst.port, ssl=client_ctx,
                                  server_hostname="localhost")
    return lst, client, await accepted


@pytest.fixture(scope="session")
def kernel_dirs(tmp_path_factory) -> list[str]:
    """A kernels directory with "plain" (this interpreter's ipykernel) and "tinycoro" (written
    by the installer CLI, as a user would)."""
    root = tmp_path_factory.mktemp("jupyter")
    plain = root / "share" / "jupyter" / "kernels" / "plain"
    plain.mkdir(parents=True)
    (plain / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "plain",
                "language": "python",
            }
        )
    )
    subprocess.run(
        [sys.executable, "-m", "kernel_ext", "install", "--prefix", str(root), "--contexts", "2"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return [str(root / "share" / "jupyter" / "kernels")]


# Cell code shared by the in-process and the real-kernel notebook tests (issue 10 item 4):
# a tinycoro coroutine, and a tinycoro echo server task that the cell's asyncio streams client
# connects to (``server`` echoes upper-cased until the client closes; ``box`` holds its port).
TWO_CELL = "async def two():\n    await tc.sleep(0.001)\n    return 2\n"
ECHO_SERVER_CELL = (
    "import asyncio\n"
    "async def echo(port_box):\n"
    "    lst = await tc.net.listen('127.0.0.1', 0)\n"
    "    port_box.set(lst.port)\n"
    "    conn = await lst.accept()\n"
    "    while data := await conn.recv():\n"
    "        await conn.sendall(data.upper())\n"
    "    await conn.close(); await lst.close()\n"
    "box = tc.Event()\n"
    "server = tc.spawn(echo(box))\n"
    "reader, writer = await asyncio.open_connection('127.0.0.1', await box.wait())\n"
)
