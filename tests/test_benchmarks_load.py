"""The benchmarks' own peers: the echo_load client in benchmarks/, and the O_DIRECT rows' skips.

echo_load is compiled with the system C compiler and driven against real loopback servers
(threads with blocking sockets), one that echoes and one that corrupts a byte. No timings are
asserted: only that requests happened and that a wrong echo is an error.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import socket
import subprocess
import threading
import types
from contextlib import ExitStack, contextmanager
from typing import Iterator

import pytest

from benchmarks import config, echo_procs, w_direct

needs_cc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler")


@contextmanager
def echo_server(corrupt: bool = False, echoed: list[int] | None = None) -> Iterator[int]:
    """A threaded loopback echo server; with *corrupt*, every echoed chunk has its first byte
    changed; *echoed*, a one-item list, counts the bytes it echoed. Yields the port; closes
    everything on exit."""
    lst = socket.create_server(("127.0.0.1", 0))
    lock = threading.Lock()
    conns: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                    if not data:
                        return
                    if corrupt:
                        data = bytes([data[0] ^ 0xFF]) + data[1:]
                    if echoed is not None:
                        with lock:  # before the send: the client sees the echo after the count
                            echoed[0] += len(data)
                    conn.sendall(data)
                except OSError:
                    return

    def accept() -> None:
        while True:
            try:
                conn, _ = lst.accept()
            except OSError:
                return  # the listener was closed
            conns.append(conn)
            t = threading.Thread(target=serve, args=(conn,), daemon=True)
            threads.append(t)
            t.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield lst.getsockname()[1]
    finally:
        lst.shutdown(socket.SHUT_RDWR)
        lst.close()
        acceptor.join(10)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            t.join(10)
        assert not acceptor.is_alive() and not any(t.is_alive() for t in threads)


def test_the_load_generator_is_carried_in_the_repository() -> None:
    assert config.ECHO_LOAD_SRC.is_file()
    assert config.ECHO_LOAD_SRC.resolve().is_relative_to(config.REPO)
    for program in config.C_SERVERS.values():  # the limit rows' servers, built the same way
        assert (config.REPO / "benchmarks" / f"{program}.c").is_file()


@needs_cc
@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [64, 70_000])  # one segment; more than a socket buffer takes
def test_echo_load_drives_a_real_echo_server(size: int) -> None:
    exe = echo_procs.build_echo_load()
    with echo_server() as port:
        sample = echo_procs.run_load(exe, port, conns=4, size=size, seconds=0.3)
    assert sample.value > 0
    assert sample.p50_us is not None and sample.p99_us is not None
    assert 0 < sample.p50_us <= sample.p99_us


@needs_cc
@pytest.mark.timeout(60)
def test_gated_echo_load_counts_exactly_what_the_server_served_between_its_gates() -> None:
    # benchmarks.connscost zeroes a profiler's counters at the first gate and dumps them at
    # the second: every round trip counted must be served in between, and nothing else
    exe = echo_procs.build_echo_load()
    echoed = [0]
    with echo_server(echoed=echoed) as port:
        with subprocess.Popen(
            [str(exe), "127.0.0.1", str(port), "8", "64", "0.2"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, ECHO_LOAD_GATE="0.1"),
        ) as load:
            assert load.stdin is not None and load.stdout is not None
            assert load.stdout.readline() == "GATE\n"
            before = echoed[0]
            load.stdin.write("go\n")
            load.stdin.flush()
            m = re.fullmatch(r"done=(\d+) rps=\S+ errors=0\n", load.stdout.readline())
            served = echoed[0] - before
            load.stdin.write("end\n")
            load.stdin.flush()
            load.stdin.close()
            assert load.wait(timeout=30) == 0
    assert m is not None
    assert before > 0  # the warm-up ran
    assert served == int(m[1]) * 64 > 0


@needs_cc
@pytest.mark.timeout(120)
def test_connscost_cpu_reports_each_servers_cpu_per_request_between_the_gates(capsys) -> None:
    """``python -m benchmarks.connscost KIND --cpu``: full-rate servers, gated, alternating;
    one line per kind with a CPU figure per request for every round."""
    from benchmarks import connscost

    assert connscost.main(["tinycoro", "tinycoro:TINYCORO_MULTISHOT=0", "--cpu", "--http", "--conns",
                           "8", "--seconds", "0.2", "--warm", "0.1", "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" at ")[0] for line in lines] == ["tinycoro", "tinycoro:TINYCORO_MULTISHOT=0"]
    for line in lines:
        assert re.search(r"median \d+\.\d+: ", line) and line.count("util ") == 2, line


@needs_cc
@pytest.mark.timeout(60)
def test_echo_load_reports_an_echo_that_differs() -> None:
    exe = echo_procs.build_echo_load()
    with echo_server(corrupt=True) as port:
        with pytest.raises(RuntimeError, match="errors=[1-9]"):
            echo_procs.run_load(exe, port, conns=2, size=64, seconds=0.3)


@needs_cc
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kind", ["tinycoro", "asyncio-streams", "uvloop-streams", "uvloop-protocol", "c-epoll", "c-uring"]
)
def test_every_echo_server_echoes(kind: str) -> None:
    # uvloop streams is the like-for-like peer of tinycoro's streams: both are coroutines over
    # streams. The C servers are the limit rows; echo_load checks every byte they echo back.
    if kind.startswith("uvloop"):
        pytest.importorskip("uvloop")
    exe = echo_procs.build_echo_load()
    srv = echo_procs.EchoServer(kind, 1)
    try:
        sample = echo_procs.run_load(exe, srv.port, conns=4, size=64, seconds=0.3, server_pid=srv.proc.pid)
    finally:
        srv.close()
    assert sample.value > 0 and sample.cpu_us is not None


@needs_cc
@pytest.mark.timeout(300)
def test_instructions_per_request_are_counted_under_callgrind() -> None:
    import shutil

    from benchmarks.instructions import echo_instructions

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    value, note = echo_instructions("tinycoro", seconds=0.5, conns=4)
    assert value is not None and value > 0, note
    assert "requests under callgrind" in note


@pytest.mark.timeout(300)
def test_counts_per_unit_come_from_callgrind_for_both_of_its_tools() -> None:
    """``profile --mutex`` (two runs of different lengths) and ``benchmarks.trapcost`` (one run,
    a dump after each phase) read callgrind's totals through one helper: each gives a count
    per lock + unlock, and per await of each workload asked for."""
    from benchmarks import trapcost
    from benchmarks.instructions import mutex_instructions

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    # lengths far enough apart that the two runs' start-ups (which differ by ~10^5
    # instructions) do not swamp the difference
    value, note = mutex_instructions("tinycoro", n=(1000, 11000))
    assert value is not None and value > 0, note
    assert note == "difference of 1000 and 11000 acquisitions"
    counts = trapcost.count(["ready", "mutex"], lengths=(200, 1200))
    assert counts is not None and sorted(counts) == ["mutex", "ready"]
    assert all(v > 0 for v in counts.values()), counts


def test_direct_rows_say_when_fio_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(w_direct.shutil, "which", lambda _name: None)
    with ExitStack() as stack:
        (case,) = w_direct.build(config.TINY, stack)
    fio = [s for s in case.series if s.label.startswith("fio")]
    assert [s.label for s in fio] == ["fio io_uring", "fio psync"]
    assert all(s.skip == "fio not installed (apt-get install fio)" for s in fio)


def test_direct_tinycoro_row_runs_with_the_o_direct_api() -> None:
    import tinycoro as tc

    assert "direct" in inspect.signature(tc.io.open).parameters
    assert hasattr(tc.io, "aligned_buffer") and hasattr(tc.io.AsyncFile, "readinto_at")
    assert w_direct.tc_missing() is None


@pytest.mark.timeout(120)
def test_direct_cpu_harness_reads_and_reports_per_read(capsys) -> None:
    """``python -m benchmarks.w_direct --cpu`` makes its own file and reports per read (or says
    why it skips, where the temp directory has no O_DIRECT)."""
    assert w_direct.main(["--cpu", "-n", "256"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("skipped: ") or ("256 reads: " in out and "system" in out), out


def test_direct_instructions_say_when_valgrind_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(w_direct.shutil, "which", lambda _name: None)
    assert w_direct.direct_instructions("unused") == (None, "valgrind (callgrind) not installed")


@pytest.mark.parametrize("missing", ["direct", "aligned_buffer", "readinto_at"])
def test_direct_tinycoro_row_names_what_is_missing(monkeypatch, missing: str) -> None:
    """A tinycoro without one piece of the O_DIRECT API (an older install the runner may
    meet) gets a skip that names what it needs, not a crash."""
    import tinycoro as tc

    async def open_without_direct(path, mode="rb"):  # pragma: no cover - never awaited
        raise AssertionError

    io = types.SimpleNamespace(
        open=open_without_direct if missing == "direct" else tc.io.open,
        AsyncFile=types.SimpleNamespace() if missing == "readinto_at" else tc.io.AsyncFile,
    )
    if missing != "aligned_buffer":
        io.aligned_buffer = tc.io.aligned_buffer
    monkeypatch.setattr(w_direct, "tc", types.SimpleNamespace(io=io))
    reason = w_direct.tc_missing()
    assert reason is not None and "tc.io.aligned_buffer" in reason and "readinto_at" in reason


@pytest.mark.timeout(60)
def test_a_server_that_does_not_start_is_reported_with_its_reason() -> None:
    # A server process that exits before printing READY must give the runner a skip reason
    # with the server's own message, not an error about reading its closed pipe.
    with pytest.raises(RuntimeError, match="did not start.*usage: python -m benchmarks.echo_server"):
        echo_procs.EchoServer("no-such-kind", 1)


@needs_cc
@pytest.mark.timeout(120)
def test_syscalls_per_request_are_counted_under_strace() -> None:
    # The C servers' hot paths are known exactly: the epoll one makes at least one recv and
    # one send per request (echo_load counts only completed round trips, all of them inside
    # the traced window); the io_uring one makes neither, only io_uring_enter.
    from benchmarks import syscalls

    if shutil.which("strace") is None:
        pytest.skip("strace not installed")
    # A traced window of 3 s: strace stops the server at each system call until strace itself
    # has run, so at a load average of 32 on two cores a 0.3 s window once saw no round trip
    # completed at all (echo_load: rps=0); the window is only the sample, what is asserted is
    # per request.
    epoll = syscalls.count("c-epoll", seconds=3.0, conns=4)
    uring = syscalls.count("c-uring", seconds=3.0, conns=4)
    assert epoll.requests > 0 and uring.requests > 0
    assert epoll.per_request("send") >= 1.0 and epoll.per_request("recv") >= 1.0
    assert uring.calls["send"] == uring.calls["recv"] == 0 and uring.calls["io_uring_enter"] > 0
    assert "| io_uring_enter |" in syscalls.table([epoll, uring])


@needs_cc
@pytest.mark.timeout(120)
def test_syscalls_per_request_are_counted_by_perf_tracepoints() -> None:
    from benchmarks import syscalls

    if shutil.which("perf") is None:
        pytest.skip("perf not installed")
    try:
        epoll = syscalls.count("c-epoll", seconds=0.3, conns=4, tool="perf")
    except RuntimeError as e:  # no tracepoints here (permissions, a kernel without tracefs)
        pytest.skip(str(e))
    assert epoll.per_request("send") >= 1.0 and epoll.per_request("recv") >= 1.0
    assert epoll.calls["io_uring_enter"] == 0 and epoll.calls["all"] >= epoll.calls["send"] + epoll.calls["recv"]
