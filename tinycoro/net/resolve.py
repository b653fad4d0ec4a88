"""Name resolution for the socket constructors: numeric addresses at once, names through
``getaddrinfo`` on a short-lived helper thread whose answer wakes the task through a
``tc.Event``, so a slow DNS answer never blocks the context's thread."""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any

from ..core.checks import check_int
from ..core.traps import consume_budget
from ..sync import Event

__all__ = ["check_host_port", "family_for", "getaddrinfo", "resolve", "resolve_all"]


def family_for(host: str) -> int:
    """AF_INET or AF_INET6 for a numeric address, 0 for a name (resolved by getaddrinfo)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return 0


def check_host_port(host: Any, port: Any) -> None:
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, got {host!r}")
    check_int("port", port, min=0, max=65535)


async def getaddrinfo(host: str, port: int, type: int) -> list:
    """``socket.getaddrinfo`` on a helper thread; the task waits on an Event, not its thread.

    The thread is a daemon that ends as soon as the resolver answers; a cancelled task simply
    stops waiting for it.
    """
    done = Event()

    def resolve() -> None:
        try:
            done.set((True, socket.getaddrinfo(host, port, type=type)))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting task
            done.set((False, exc))

    threading.Thread(target=resolve, name="tc-getaddrinfo", daemon=True).start()
    ok, value = await done.wait()
    if not ok:
        raise value
    return value


async def resolve_all(
    host: Any, port: Any, type: int = socket.SOCK_STREAM, family: int = 0
) -> list[tuple[int, str]]:
    """Every (family, numeric host) for *host*, resolver order; names go through
    :func:`getaddrinfo`, numeric addresses do not."""
    check_host_port(host, port)
    numeric_family = family_for(host)
    if numeric_family:
        # No name to look up: done at once, and so are listen() and udp() after it (plain
        # system calls), so rule 16's gate is here
        await consume_budget()
        return [(numeric_family, host)]
    infos = await getaddrinfo(host, port, type)
    out = [(fam, addr[0]) for fam, _, _, _, addr in infos if not family or fam == family]
    if not out:
        raise OSError(f"{host!r} has no {socket.AddressFamily(family).name} address")
    return out


async def resolve(
    host: Any, port: Any, type: int = socket.SOCK_STREAM, family: int = 0
) -> tuple[int, str]:
    """The first (family, numeric host) for *host*."""
    return (await resolve_all(host, port, type, family))[0]
