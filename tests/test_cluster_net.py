"""The socket pieces tc.cluster.serve stands on: ``listen(..., reuse_port=True)`` lets two real
processes accept on one port, and ``TcpListener.from_socket`` adopts a listening socket (and
refuses anything else at the call). Also: ``import tinycoro`` leaves ipyparallel alone."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import tinycoro as tc

pytestmark = pytest.mark.timeout(60)

# A process that listens on the port it is given (reuse_port) and answers every connection with
# its pid; it prints "ready" once listening and ends when stdin closes.
SERVER = textwrap.dedent(
    """
    import os, sys, threading
    import tinycoro as tc

    async def main(port):
        lst = await tc.net.listen("127.0.0.1", port, reuse_port=True)
        closed = tc.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()

        async def serve():
            while True:
                conn = await lst.accept()
                async with conn:
                    await conn.sendall(str(os.getpid()).encode())

        server = tc.spawn(serve())
        print("ready", flush=True)
        await closed.wait()
        server.cancel()
        await lst.close()

    tc.run(main(int(sys.argv[1])))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask_pid(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        data = b""
        while chunk := c.recv(64):
            data += chunk
    return int(data)


def test_reuse_port_lets_two_processes_accept_on_one_port():
    port = _free_port()
    procs: list[subprocess.Popen] = []
    try:
        # One after the other: two first imports of liburing at once in a new venv can race on
        # writing its import cache (dynamic_import's FileNotFoundError), failing one child.
        for _ in range(2):
            p = subprocess.Popen([sys.executable, "-c", SERVER, str(port)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            assert p.stdout.readline() == "ready\n"  # listening: it bound the port
        seen = {_ask_pid(port) for _ in range(64)}
        # the kernel spreads connections over both listeners (by the 4-tuple's hash: 64
        # connections all landing on one of two sockets has probability 2**-63)
        assert seen == {p.pid for p in procs}
    finally:
        for p in procs:
            p.stdin.close()
        codes = [p.wait(timeout=30) for p in procs]
        for p in procs:
            p.stdout.close()  # else an unclosed-file ResourceWarning, an error in this suite
        assert codes == [0] * len(procs)


def test_without_reuse_port_a_second_listener_is_refused():
    async def main():
        first = await tc.net.listen("127.0.0.1", 0)
        try:
            with pytest.raises(OSError) as info:
                await tc.net.listen("127.0.0.1", first.port)
            assert info.value.errno == errno.EADDRINUSE
            # both with reuse_port: fine, in one process too
            a = await tc.net.listen("127.0.0.1", 0, reuse_port=True)
            b = await tc.net.listen("127.0.0.1", a.port, reuse_port=True)
            assert a.port == b.port
            await a.close()
            await b.close()
        finally:
            await first.close()

    tc.run(main())


def test_reuse_port_must_be_a_bool():
    with pytest.raises(TypeError, match="reuse_port must be a bool"):
        tc.run(tc.net.listen("127.0.0.1", 0, reuse_port=1))


def test_from_socket_adopts_a_listening_socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # an option listen() lacks
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    fd = sock.fileno()

    async def main():
        lst = tc.net.TcpListener.from_socket(sock)
        assert (lst.host, lst.port) == sock.getsockname() and lst.fileno() == fd
        conn = await tc.net.connect("127.0.0.1", lst.port)
        peer = await lst.accept()
        await conn.sendall(b"hi")
        assert await peer.recv() == b"hi"
        for s in (conn, peer, lst):
            await s.close()

    tc.run(main())
    # the listener owned it: its close closed the descriptor
    with pytest.raises(OSError) as info:
        os.fstat(fd)
    assert info.value.errno == errno.EBADF


def test_from_socket_refuses_what_is_not_a_listening_tcp_socket():
    TcpListener = tc.net.TcpListener
    with pytest.raises(TypeError, match="socket.socket"):
        TcpListener.from_socket(3)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        with pytest.raises(ValueError, match="SOCK_STREAM"):
            TcpListener.from_socket(udp)
    with socket.socket() as unbound:
        with pytest.raises(ValueError, match="bound and listening"):
            TcpListener.from_socket(unbound)
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        with pytest.raises(ValueError, match="bound and listening"):
            TcpListener.from_socket(bound)
    closed = socket.socket()
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        TcpListener.from_socket(closed)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        with pytest.raises(ValueError, match="AF_INET"):
            TcpListener.from_socket(unix)


def test_import_tinycoro_does_not_import_ipyparallel():
    code = "import sys, tinycoro; assert 'ipyparallel' not in sys.modules, 'imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout == "ok\n", out.stderr


def test_tc_cluster_without_ipyparallel_says_how_to_install_it():
    code = (
        "import sys; sys.modules['ipyparallel'] = None  # as if it were not installed\n"
        "import tinycoro as tc\n"
        "try:\n"
        "    tc.cluster\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'tinycoro[cluster]'" in out.stdout, out.stderr
