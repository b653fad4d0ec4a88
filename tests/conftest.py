"""Shared fixtures: context counts to run concurrency tests on, leak checks, a TLS certificate,
kernel directories. Helpers that tests import live in the ``helpers`` package beside this file
(tests/helpers/); only fixtures and pytest hooks live here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys

import pytest

from helpers.runtime import (
    CONTEXT_COUNTS, TSAN_LOG_TARGET, fd_targets, switch_interval, tinycoro_threads, wait_until,
)


# -- how the suite was launched must not matter ---------------------------------------------
# A shell without job control (a CI script, `cmd &` in `bash -c`) starts background jobs with
# SIGINT ignored, and Python then leaves it ignored instead of installing its KeyboardInterrupt
# handler. Inherited, that would make every Ctrl-C test wait out its timeout: in this process
# (tests that raise SIGINT at themselves) and in every child a test starts (scripts, kernels,
# engines, xdist workers), since an ignored signal stays ignored across exec. Restored here, at
# conftest import, before any test or worker starts: a handled signal is reset to its default
# in a child at exec, where Python installs its usual handler.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for ``-n auto`` (the ini's addopts): two per core, at most 8. Most of the
    suite's time is spent waiting on other processes (kernels, ipyparallel engines, a browser,
    benchmark servers), so one worker per core leaves the cores idle half the time; the cap
    bounds how many kernels and clusters run at once on a big machine."""
    return min(8, 2 * (os.cpu_count() or 1))


def pytest_report_header(config) -> str:
    """Which context count the tests that take the default (``tc.run(main())``,
    ``Scheduler()``) run on: ``TINYCORO_CONTEXTS`` in the environment changes it for the
    whole run (.ci/run runs the free-threaded suites on 2 contexts too, so that every such
    test also meets another context's thread), and the GIL's state decides it otherwise
    (docs/design.md rule 15). Tests that pick their own count, or take the ``contexts``
    fixture, are not affected."""
    from tinycoro.core.checks import CONTEXTS_VAR, default_contexts

    gil = "on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "off"
    source = f"{CONTEXTS_VAR}={os.environ[CONTEXTS_VAR]}" if os.environ.get(CONTEXTS_VAR) else "unset"
    return f"tinycoro: contexts=None means {default_contexts()} ({source}, GIL {gil})"


@pytest.fixture(params=CONTEXT_COUNTS, ids=lambda n: f"ctx{n}")
def contexts(request) -> int:
    """Run the test once per context count: 1, 2 and 4 threads."""
    return request.param


@pytest.fixture
def tiny_switch_interval():
    """The GIL handed over every 10 us during the test: the other threads (contexts, a
    client's IO thread) get it inside a step that spins, where races show up."""
    with switch_interval(1e-5):
        yield


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
# Under ThreadSanitizer, its report file (helpers.runtime.TSAN_LOG_TARGET says why).
if TSAN_LOG_TARGET is not None:
    KEPT_TARGETS += (TSAN_LOG_TARGET,)


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


@pytest.fixture
def fifo(tmp_path):
    """``(path, wfd)``: a FIFO with a writer held open (non-blocking), so that opening the
    read side does not wait for one, and *wfd* writes what the reader is to get."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    wfd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        yield path, wfd
    finally:
        os.close(wfd)


@pytest.fixture(params=["multishot", "single"])
def recv_path(request, monkeypatch) -> str:
    """Which recv the streams of a test use (the variable is read as each ring is created);
    the multishot one only where the compiled ring and multishot module run."""
    from tinycoro import uring
    from tinycoro.net import multishot

    if request.param == "multishot":
        if not multishot.AVAILABLE:
            pytest.skip("the pure-Python ring always takes the single recv")
        monkeypatch.delenv(uring.MULTISHOT_ENV, raising=False)
    else:
        monkeypatch.setenv(uring.MULTISHOT_ENV, "0")
    return request.param


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


