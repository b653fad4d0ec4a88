"""Shared fixtures: context counts to run concurrency tests on, leak checks, a TLS certificate."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
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


@contextlib.contextmanager
def tinycoro_shell(monkeypatch, contexts: int, setup: str | None = "import tinycoro as tc"):
    """The process's IPython ``InteractiveShell`` (tests share the one instance) with tinycoro
    loaded on *contexts* contexts and *setup* run in it; with ``setup=None`` not loaded (for
    tests of loading). Afterwards tinycoro is unloaded, if loaded, and the shell's loop runner
    restored, whatever the test did."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("TINYCORO_CONTEXTS", str(contexts))
    monkeypatch.delenv("TINYCORO_DISPATCH", raising=False)
    sh = InteractiveShell.instance()
    saved = (sh.loop_runner, sh.autoawait)
    try:
        if setup is not None:
            sh.run_line_magic("load_ext", "tinycoro")
            sh.run_cell(setup)
        yield sh
    finally:
        if "tinycoro" in sh.extension_manager.loaded:
            sh.run_line_magic("unload_ext", "tinycoro")
        sh.loop_runner, sh.autoawait = saved


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


# -- leak check, around every test ------------------------------------------------------------
# A test that leaves a tinycoro thread, a descriptor or an io_uring ring behind fails, so a leak
# is caught by the test that makes it, not by a later one that happens to count. Compared per
# test: the tinycoro-* threads, and /proc/self/fd as (number, target) pairs (so a number closed
# and reused for something else counts as new; rings are the "anon_inode:[io_uring]" entries).
# Module- and session-scoped fixtures are set up before this function-scoped one, so what they
# hold is in the "before" picture. What legitimately outlives a test:
#   * process-wide things created on first use: warmed up once for the session (_warm_up), or,
#     where a warm-up would change the process for every test, named in KEPT_TARGETS;
#   * a test marked ``@pytest.mark.keeps_resources("why")``: not checked. Use it only where the
#     holder is outside tinycoro and kept on purpose (say, a module-scoped kernel's client whose
#     zmq sockets live as long as the module), and say why; fix a tinycoro leak instead.
# Things being released as the test ends (a context thread finishing its join, an asyncio
# loop's thread closing its descriptors) get LEAK_WAIT seconds; a garbage cycle that still
# holds a socket is collected once before anything is reported.
LEAK_WAIT = 5.0
# Descriptors a process-wide singleton keeps open once some test created it, by what they refer
# to: IPython's history database, opened by the process's InteractiveShell (test_magics,
# test_dashboard, test_kernel_runner share InteractiveShell.instance()) and its saving thread.
KEPT_TARGETS = (re.compile(r"/history\.sqlite(-journal|-wal|-shm)?$"),)


def fd_targets() -> dict[int, str]:
    """Every open descriptor of this process and what it refers to."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (including listdir's own descriptor)
            pass
    return out


def _kept(target: str) -> bool:
    return any(p.search(target) for p in KEPT_TARGETS)


def _leaks(threads_before: set, fds_before: dict[int, str]) -> list[str]:
    found = [f"thread {t.name}" for t in tinycoro_threads() if t not in threads_before]
    for fd, target in sorted(fd_targets().items()):
        # 0-2 are the standard streams: pytest's capture dup2()s its files onto them and back
        # as it suspends and resumes, so their targets change under any test.
        if fd > 2 and fds_before.get(fd) != target and not _kept(target):
            kind = "ring" if target == "anon_inode:[io_uring]" else "descriptor"
            found.append(f"{kind} {fd} -> {target}")
    return found


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "keeps_resources(why): the test legitimately leaves threads or descriptors behind "
        "(held by something outside tinycoro on purpose); the leak check skips it",
    )


@pytest.fixture(scope="session", autouse=True)
def _warm_up() -> None:
    """Create once the process-wide things that libraries keep from their first use on, so
    that the first test to use them is not blamed for them."""
    if "IPython" in sys.modules:  # a collected test module uses IPython
        from IPython.core.async_helpers import get_asyncio_loop

        # IPython's own asyncio loop (epoll + self-pipe), made by the first cell its asyncio
        # runner runs (test_magics: the cell that loads tinycoro) and kept for the process.
        get_asyncio_loop()
    if "jupyter_core" in sys.modules:  # a collected test module starts kernels
        from jupyter_core.utils import ensure_event_loop

        # The asyncio loop jupyter_client's blocking KernelManager runs its calls on, made for
        # this thread by the first kernel a test starts and kept for it.
        ensure_event_loop()
    if "zmq" in sys.modules:  # a collected test module makes ipyparallel clients or kernels
        import zmq

        # The process-wide zmq context (ipyparallel's Client uses Context.instance()) starts
        # its I/O and reaper threads, with their eventfds and epolls, at its first socket and
        # keeps them for the process.
        zmq.Context.instance().socket(zmq.DEALER).close()
    try:
        import uvloop
    except ImportError:
        return
    import asyncio

    async def nothing() -> None:
        await asyncio.sleep(0)

    uvloop.run(nothing())  # libuv keeps one pipe for the process from its first loop on


@pytest.fixture(autouse=True)
def _no_leaks(request):
    """Fail the test if it leaves a tinycoro thread, a descriptor or a ring behind."""
    if request.node.get_closest_marker("keeps_resources") is not None:
        yield
        return
    threads = set(tinycoro_threads())
    fds = fd_targets()
    yield
    if not _leaks(threads, fds):
        return
    import gc

    gc.collect()
    try:
        wait_until(lambda: not _leaks(threads, fds), timeout=LEAK_WAIT, what="leaks to go")
        return
    except AssertionError:
        pass
    found = _leaks(threads, fds)
    if found:
        pytest.fail(
            f"{request.node.nodeid} left behind: " + "; ".join(found)
            + " (fix the leak; see conftest's leak check for keeps_resources)",
            pytrace=False,
        )


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
        [sys.executable, "-m", "tinycoro.kernel_ext", "install", "--prefix", str(root), "--contexts", "2"],
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
