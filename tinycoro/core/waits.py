"""What a task waits on, in the words its user wrote (``TaskInfo.waits_on``, docs/design.md, API contract).

"sleep 2 ms (1.3 ms left)", "recv from 127.0.0.1:5000", "read 4 KiB at 8192 from blob.bin",
"Mutex held by 'holder' (3 waiting)", "when_all: 12 of 20 left". Everything here runs when a
snapshot is taken (``Scheduler.tasks()``, ``%tinycoro tasks``, the dashboard), on the thread that
asks, never on an engine's hot path: peers and file names are looked up from the descriptor
(``getpeername`` on a duplicate, ``/proc/self/fd``) at that moment, so no operation carries a
label it would have to build on every call. A lookup that fails (the descriptor was closed
meanwhile) only makes the words shorter.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable

__all__ = [
    "SLEEP", "age", "duration", "kind", "op_words", "park_words", "size", "sleep_words", "summary",
]

SLEEP = "io_uring_prep_timeout"  # the prep name of a kernel timeout: a wait on a timer, not I/O


def _num(v: float) -> str:
    """One decimal below 10, none above; no trailing ".0"."""
    text = f"{v:.1f}" if v < 10 else f"{v:.0f}"
    return text[:-2] if text.endswith(".0") else text


def duration(seconds: float) -> str:
    """``0.0025`` -> ``"2.5 ms"``, ``2.0`` -> ``"2 s"``: a short, human duration."""
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{_num(seconds * 1000)} ms"
    if seconds < 120:
        return f"{_num(seconds)} s"
    if seconds < 3570:  # from here on "60 min" would be printed: say "1 h"
        return f"{seconds / 60:.0f} min"
    if seconds < 1e9:
        return f"{_num(seconds / 3600)} h"
    return "ever"  # sleep(math.inf) sleeps in steps of ~31 years


def age(seconds: float) -> str:
    """How long a task has lived, to a tenth of a second: ``"5.0 s"``, ``"2 min 05 s"``,
    ``"1 h 03 min"`` (the task lists of ``%tinycoro tasks`` and the dashboard)."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"


def size(n: int) -> str:
    """``4096`` -> ``"4 KiB"``, ``64`` -> ``"64 B"``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{_num(n / scale)} {unit}"
    return f"{n} B"


def _address(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in str(host) else f"{host}:{addr[1]}"
    if isinstance(addr, bytes):
        addr = addr.decode(errors="replace")
    return str(addr) or "an unnamed socket"


def _socket_end(fd: Any, peer: bool) -> str:
    """The peer (or local) address of socket *fd*, read now from a duplicate; "" if unknown."""
    if type(fd) is not int or fd < 0:
        return ""
    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            return _address(s.getpeername() if peer else s.getsockname())
    except (OSError, ValueError):
        return ""


def _file_name(fd: Any) -> str:
    """The base name of the file open on *fd*, from ``/proc/self/fd``; "" if unknown."""
    if type(fd) is not int or fd < 0:
        return ""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
    return os.path.basename(target) or target


def _from(prefix: str, where: str) -> str:
    return f" {prefix} {where}" if where else ""


def sleep_words(seconds: float, when: float | None = None) -> str:
    """"sleep 2 ms (1.3 ms left)": a sleep of *seconds*, and the time left until *when* (its
    deadline, a perf_counter() reading) if known."""
    words = f"sleep {duration(seconds)}"
    if when is not None:
        left = when - time.perf_counter()
        words += f" ({duration(left)} left)" if left > 0 else " (ending now)"
    return words


def _sleep(args: tuple, what: Any) -> str:
    """An io_uring timeout op (``tinycoro.lowlevel``): its length, and the time left if the
    op keeps its deadline (a perf_counter() reading) in ``what``."""
    ts = args[0] if args else None
    total = (getattr(ts, "tv_sec", 0) or 0) + (getattr(ts, "tv_nsec", 0) or 0) / 1e9
    return sleep_words(total, what if type(what) is float else None)


def _rw(verb: str, prep: str) -> Callable[[tuple, Any], str]:
    to = "from" if verb == "read" else "to"

    def words(args: tuple, what: Any) -> str:
        fd, n, off = args[0], args[2] if len(args) > 2 else 0, args[3] if len(args) > 3 else -1
        at = f" at {off}" if type(off) is int and off >= 0 else ""
        return f"{verb} {size(n)}{at}{_from(to, _file_name(fd))}"

    return words


def _net(verb: str, to: str) -> Callable[[tuple, Any], str]:
    def words(args: tuple, what: Any) -> str:
        where = str(what) if what else _socket_end(args[0] if args else None, peer=True)
        return f"{verb}{_from(to, where)}"

    return words


def _accept(args: tuple, what: Any) -> str:
    return "accept" + _from("on", _socket_end(args[0] if args else None, peer=False))


def _path(verb: str) -> Callable[[tuple, Any], str]:
    def words(args: tuple, what: Any) -> str:  # the file's name, as "from blob.bin" says it
        return f"{verb} {os.path.basename(str(what)) or what}" if what else verb

    return words


def _fd(verb: str) -> Callable[[tuple, Any], str]:
    def words(args: tuple, what: Any) -> str:
        fd = args[0] if args else None
        name = _file_name(fd)
        return f"{verb} {name}" if name else f"{verb} descriptor {fd}"

    return words


_WORDS: dict[str, Callable[[tuple, Any], str]] = {
    SLEEP: _sleep,
    "io_uring_prep_read": _rw("read", "read"),
    "io_uring_prep_write": _rw("write", "write"),
    "io_uring_prep_recv": _net("recv", "from"),
    "io_uring_prep_send": _net("send", "to"),
    "io_uring_prep_sendto": _net("send", "to"),
    "io_uring_prep_poll_add": _net("wait for data", "from"),
    "io_uring_prep_connect": _net("connect", "to"),
    "io_uring_prep_shutdown": _net("shut down the connection", "to"),
    "io_uring_prep_splice": _fd("send a file through"),
    "io_uring_prep_accept": _accept,
    "io_uring_prep_openat": _path("open"),
    "io_uring_prep_statx": _path("stat"),
    "io_uring_prep_renameat": _path("rename"),
    "io_uring_prep_unlinkat": _path("remove"),
    "io_uring_prep_mkdirat": _path("make directory"),
    "io_uring_prep_fsync": _fd("fsync"),
    "io_uring_prep_close": _fd("close"),
}


def op_words(prep: Any, args: tuple, what: Any) -> str:
    """Plain words for one io_uring operation (the base of ``Op.describe``)."""
    name = getattr(prep, "__name__", "")
    words = _WORDS.get(name)
    if words is not None:
        try:
            return words(args, what)
        except Exception:  # noqa: BLE001 - odd args: fall back to the operation's name
            pass
    plain = name.replace("io_uring_prep_", "").replace("prep_", "") or "I/O"
    return f"{plain} {what}" if what else plain


def park_words(what: Any) -> str:
    """Plain words for a parked task's ticket ``what``: the primitive (its ``_waits_on``), a
    task being joined, or the primitive's type name."""
    waits_on = getattr(what, "_waits_on", None)
    if waits_on is not None:
        try:
            return str(waits_on())
        except Exception:  # noqa: BLE001 - a half-built primitive: its type names it
            pass
    name = getattr(what, "name", None)
    if isinstance(name, str) and hasattr(what, "_joiners"):  # a Task: await task
        return f"task {name!r} (id {getattr(what, 'id', '?')}) to finish"
    return type(what).__name__


def kind(state: str, waits_on: str) -> str:
    """The kind of wait a task is in, for summaries: "sleeping", "in I/O", "parked on Mutex",
    "running", "ready", "starting"."""
    if state == "io":
        return "in I/O"
    if state != "parked":
        return state
    first = waits_on.split(" ", 1)[0].rstrip(":")
    if first == "task":
        return "joining a task"
    return f"parked on {first}" if first else "parked"


def summary(infos: Any) -> str:
    """One line per snapshot: how many tasks are in each kind of wait, most first ("50 parked
    on Semaphore, 12 sleeping, 4 in I/O")."""
    counts: dict[str, int] = {}
    for i in infos:
        k = kind(i.state, i.waits_on)
        counts[k] = counts.get(k, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
