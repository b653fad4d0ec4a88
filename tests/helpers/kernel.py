"""A real ipykernel process driven through jupyter_client (``Kernel``), and the interrupt steps
that several kernel test modules share."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Reply:
    content: dict[str, Any]
    msgs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.content["status"]

    def stdout(self) -> str:
        return "".join(
            m["content"]["text"]
            for m in self.msgs
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
        )

    def result(self) -> str | None:
        for m in self.msgs:
            if m["msg_type"] == "execute_result":
                return m["content"]["data"]["text/plain"]
        return None

    def error(self) -> dict[str, Any] | None:
        for m in self.msgs:
            if m["msg_type"] == "error":
                return m["content"]
        return None

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.msgs if m["msg_type"] in types]


Msg = dict[str, Any]


class Kernel:
    """A started kernel and its client, with helpers that collect a cell's IOPub messages.

    ``run``/``ok`` use jupyter_client's ``execute_interactive``, which drops messages of other
    cells. The rest (``submit``, ``cell``, ``until``, ``idle``, ``iopub_until``,
    ``comm_updates``) keep every IOPub message they read in ``log``, whatever cell it belongs
    to: a background task's output may arrive while a later cell runs, and must still be seen.
    """

    def __init__(self, km: KernelManager) -> None:
        self.km = km
        self.kc = km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=30)
        self.log: list[Msg] = []

    def run(self, code: str, timeout: float = 20) -> Reply:
        """Execute *code*; return its reply and every IOPub message parented to it."""
        msgs: list[dict[str, Any]] = []
        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=msgs.append)
        return Reply(reply["content"], msgs)

    def ok(self, code: str, timeout: float = 20) -> Reply:
        r = self.run(code, timeout)
        if r.status != "ok":
            err = r.error() or {}
            tb = ANSI.sub("", "\n".join(err.get("traceback", [])))
            raise AssertionError(f"cell failed: {err.get('ename')}: {err.get('evalue')}\n{tb}")
        return r

    def submit(self, code: str) -> str:
        return self.kc.execute(code)

    def _read(self, deadline: float) -> Msg | None:
        """The next IOPub message (also appended to ``log``), or None once *deadline* passed."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            msg = self.kc.get_iopub_msg(timeout=left)
        except queue.Empty:
            return None
        self.log.append(msg)
        return msg

    def until(self, stop: Callable[[Msg], bool], timeout: float = 20, what: str = "") -> Msg:
        """The first IOPub message, already in ``log`` or read now, for which *stop* holds."""
        for m in self.log:
            if stop(m):
                return m
        deadline = time.monotonic() + timeout
        while True:
            msg = self._read(deadline)
            if msg is not None and stop(msg):
                return msg
            if msg is None and time.monotonic() >= deadline:
                raise AssertionError(f"no {what or 'matching IOPub message'} within {timeout} s")

    def iopub_until(
        self, parent: str, stop: Callable[[dict[str, Any]], bool], timeout: float = 20
    ) -> list[dict[str, Any]]:
        """Collect the IOPub messages of request *parent* read from now on until *stop(msg)*."""
        deadline = time.monotonic() + timeout
        out: list[dict[str, Any]] = []
        while True:
            msg = self._read(deadline)
            if msg is None:
                if time.monotonic() >= deadline:
                    raise AssertionError(f"no matching IOPub message within {timeout} s: {out!r}")
                continue
            if msg["parent_header"].get("msg_id") != parent:
                continue
            out.append(msg)
            if stop(msg):
                return out

    def cell(self, code: str, timeout: float = 30) -> str:
        """Run *code* to its end (its idle status); return its msg_id; fail if it raised."""
        msg_id = self.submit(code)
        self.idle(msg_id, timeout)
        for m in self.of(msg_id, "error"):
            tb = ANSI.sub("", "\n".join(m["content"]["traceback"]))
            raise AssertionError(f"cell failed:\n{code}\n{tb}")
        return msg_id

    def of(self, msg_id: str, *types: str) -> list[Msg]:
        """The logged IOPub messages of request *msg_id* (of the given types, if any)."""
        return [
            m for m in self.log
            if m["parent_header"].get("msg_id") == msg_id and (not types or m["msg_type"] in types)
        ]

    def stream(self, msg_id: str, name: str = "stdout") -> str:
        return "".join(
            m["content"]["text"] for m in self.of(msg_id, "stream") if m["content"]["name"] == name
        )

    def stream_until(
        self, msg_id: str, stop: Callable[[str], bool], name: str = "stdout",
        timeout: float = 20, what: str = "",
    ) -> str:
        """Read IOPub until the text request *msg_id* has written to stream *name* so far,
        joined, satisfies *stop*; return that text.

        Judged on the joined text because ipykernel cuts a stream into messages wherever its
        flush lands: ``print`` writes its text and its newline in two calls, so a flush from
        the IO thread between them makes ``"tick 9"`` one message and ``"\\n"`` the next."""
        self.until(
            lambda m: m["msg_type"] == "stream" and stop(self.stream(msg_id, name)),
            timeout, what,
        )
        return self.stream(msg_id, name)

    def result_of(self, msg_id: str) -> str | None:
        for m in self.of(msg_id, "execute_result"):
            return m["content"]["data"]["text/plain"]
        return None

    def comm_updates(
        self, done: Callable[[], bool], seen: dict[str, list[Any]], timeout: float = 20
    ) -> list[tuple[str, dict[str, Any]]]:
        """Read widget ``update`` comm messages (any parent) into ``seen[comm_id][key]``-style
        lists (``seen[comm_id]`` collects each update's ``value``) until *done()*."""
        deadline = time.monotonic() + timeout
        out: list[tuple[str, dict[str, Any]]] = []
        while not done():
            msg = self._read(deadline)
            if msg is None:
                if time.monotonic() >= deadline:
                    raise AssertionError(
                        f"widgets did not change as expected within {timeout} s: {seen}"
                    )
                continue
            data = msg["content"].get("data", {}) if msg["msg_type"] == "comm_msg" else {}
            if data.get("method") != "update":
                continue
            cid, state = msg["content"]["comm_id"], data.get("state", {})
            out.append((cid, state))
            if "value" in state:
                seen.setdefault(cid, []).append(state["value"])
        return out

    def reply_to(self, parent: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == parent:
                return msg

    def idle(self, parent: str, timeout: float = 20) -> list[dict[str, Any]]:
        return self.iopub_until(
            parent,
            lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle",
            timeout,
        )

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(os.path.dirname(self.km.ip), ignore_errors=True)


def start_kernel(kernel_dirs: list[str], name: str) -> Kernel:
    """A kernel on IPC sockets in a directory of its own: with TCP, the ports jupyter_client
    picks are free only until the kernel binds them, and the suite's own connections on other
    workers can take one meanwhile ("Address already in use", a kernel dead at start)."""
    ksm = KernelSpecManager(kernel_dirs=kernel_dirs, ensure_native_kernel=False)
    sockets = os.path.join(tempfile.mkdtemp(prefix="tc-kernel-"), "kernel")
    km = KernelManager(kernel_name=name, kernel_spec_manager=ksm, transport="ipc", ip=sockets)
    km.start_kernel(env={**_env(), "TINYCORO_CONTEXTS": "2"})
    return Kernel(km)


@contextlib.contextmanager
def loaded_kernel(kernel_dirs: list[str], setup: str = "import tinycoro as tc"):
    """A plain kernel with tinycoro loaded and *setup* run in it; shut down on exit."""
    k = start_kernel(kernel_dirs, "plain")
    try:
        k.ok(f"%load_ext tinycoro\n{setup}")
        yield k
    finally:
        k.shutdown()


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}


# s: a bound on the reply, not a speed check. An interrupt that did nothing lets the cell run
# on, for 30 s or for ever (the cells below), so any bound under 30 s tells the two apart; the
# kernel is a process of its own, which a machine at a load average of 30 on two cores may not
# run for seconds at a time.
INTERRUPTED_WITHIN = 20.0


def interrupt_after_started(k: Kernel, code: str) -> tuple[dict[str, Any], list]:
    """Run *code* (which prints 'started' before it blocks), interrupt it once that line has
    arrived, and return (reply content, IOPub messages). The reply must come within
    INTERRUPTED_WITHIN seconds (the cells block for 30 s or for ever otherwise)."""
    msg_id = k.submit(code)
    msgs = k.iopub_until(
        msg_id, lambda m: m["msg_type"] == "stream" and "started" in m["content"]["text"]
    )
    k.km.interrupt_kernel()
    reply = k.reply_to(msg_id, timeout=INTERRUPTED_WITHIN)
    msgs += k.idle(msg_id)
    return reply["content"], msgs


def interrupted_after_finally(content: dict[str, Any], msgs: list) -> str:
    """Assert the cell ended in one KeyboardInterrupt after printing 'finally ran'; return
    that error's traceback text."""
    assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt"
    assert "finally ran" in "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
    errors = [m["content"] for m in msgs if m["msg_type"] == "error"]
    assert [e["ename"] for e in errors] == ["KeyboardInterrupt"]
    return ANSI.sub("", "\n".join(errors[0]["traceback"]))
