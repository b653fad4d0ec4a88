"""The engine side: what runs inside each ipyparallel engine (an IPython kernel).

``setup`` (applied once on every engine when a cluster is started or connected) loads the
tinycoro extension if the engine did not preload it and installs one :class:`Agent`. The agent
starts submitted tasks on the engine's default scheduler, sends each task's outcome home, and
answers stats probes and cancels on the kernel's control thread.

Why the control thread: an engine's shell runs one request at a time on its main thread, and a
``%px`` cell that awaits blocks that thread until it ends. ipykernel serves the control channel
on a thread of its own (that is how an interrupt or a shutdown reaches a busy kernel), so a probe
sent there is answered while the shell is busy; ``Scheduler.stats()`` needs no lock.

Why a parent header per task: ``start_tasks`` runs inside an apply request that may carry
several tasks (the submits made to this engine in one go), where ipykernel's ContextVars hold
that request's parent header. Each task gets a copy of that context (rule 9) in which the
streams and display publishers are told a parent of the task's own (the request's header with
the task's token as msg_id), so what it prints, whenever it prints it, goes to IOPub tagged
with that task, also after the request has replied; the client routes it home by that id.
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import os
import pickle
import socket
import sys
import threading
import time
from collections.abc import Coroutine
from functools import partial
from typing import Any, Callable

from ipyparallel.serialize import serialize_object

# From the defining modules, not the ``tinycoro`` facade, which imports this package
# (``tc.cluster``).
from .. import lowlevel
from ..compiled import gil_enabled
from ..combinators import when_all
from ..core import Scheduler, Task, get_default_scheduler, spawn
from ..net import listen
from . import internals
from .channel import OUTCOME, ChannelServer
from .messages import (
    CONTROL_REPLY,
    CONTROL_REQUEST,
    OK,
    OK_PACKED,
    RESULT_KEY,
    error_outcome,
    outcome_of,
    pack,
    task_parent,
    without_buffers,
    stats_to_dict,
    tasks_to_list,
)

log = logging.getLogger("tinycoro")

_agent: "Agent | None" = None
# In the context of a task that came by the task channel: its token (see Agent._noted_output).
_channel_token: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tinycoro_channel_task", default=None)
_agent_lock = threading.Lock()


class Agent:
    """The tinycoro side of one engine: its submitted tasks and its control handler."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.kernel = shell.kernel
        self._lock = threading.Lock()
        self._tasks: dict[str, Task] = {}  # token -> task, while it runs
        # Outcomes packed on the context thread and waiting for the IOPub thread, which sends
        # all of them in one message (:meth:`_send_outcomes`): (parent, buffers) each.
        self._outbox: list[tuple[dict, list]] = []
        self._outbox_lock = threading.Lock()
        self._channels: set[ChannelServer] = set()  # one per start/connect (.channel)
        self._channel_request: dict | None = None  # the parent its batches' tasks go under
        self._printed: set[str] = set()  # tokens of running channel tasks that wrote output
        internals.add_control_handler(self.kernel, CONTROL_REQUEST, self._on_control)

    # -- scheduler ---------------------------------------------------------------------------
    @staticmethod
    def scheduler() -> Scheduler:
        sched = get_default_scheduler()
        if sched is None or not sched.running:  # not stats(): a snapshot of every context
            raise RuntimeError(
                "this engine's tinycoro scheduler is not running (was the extension unloaded "
                "or stopped? %tinycoro restart starts it again)"
            )
        return sched

    # -- tasks -------------------------------------------------------------------------------
    def start_many(self, fns: list[bytes], items: list[tuple[str, int, bytes]],
                   request: dict | None = None,
                   deliver: Callable[[tuple], None] | None = None) -> list[Any]:
        """Start the tasks of one request (the shell's main thread, inside the apply request):
        *items* are ``(token, index in fns, packed (args, kwargs))``; *fns* the packed functions
        they call, each once however many tasks call it. Per task, in order: its task id, or
        the error outcome (``messages.error_outcome``) of why it could not start, so one
        task's bad argument fails that task alone. A scheduler that is not running fails the
        request, i.e. every task of it. *request*: the request the tasks go under (None: the
        shell's, i.e. the apply request running now; the task channel passes its own, since
        the kernel's parent where a channel batch starts is whatever request that context
        last held)."""
        sched = self.scheduler()
        if request is None:
            request = without_buffers(self.kernel.get_parent("shell"))  # once for the batch
        # Each function unpacked once; one that does not unpack fails every task calling it
        # with the same outcome (formatted once, not re-raised per task).
        loaded: list[tuple[Any, Any]] = []  # (function, None) or (None, its error outcome)
        for packed in fns:
            try:
                loaded.append((pickle.loads(packed), None))
            except Exception as e:  # noqa: BLE001 - the tasks calling it fail with it
                loaded.append((None, error_outcome(e)))
        started: list[Any] = []
        for token, index, args_packed in items:
            fn, failed = loaded[index]
            if failed is not None:
                started.append(failed)
                continue
            try:
                args, kwargs = pickle.loads(args_packed)
                started.append(self._start(sched, token, request, fn, tuple(args), dict(kwargs),
                                           deliver))
            except Exception as e:  # noqa: BLE001 - this task's failure, sent back as its outcome
                started.append(error_outcome(e))
        return started

    def _start(self, sched: Scheduler, token: str, request: dict, fn: Callable[..., Any],
               args: tuple, kwargs: dict, deliver: Callable[[tuple], None] | None = None) -> int:
        """Start ``fn(*args, **kwargs)`` as a task of this engine's scheduler; its outcome is
        published when it ends. *request*: the apply request that carried it, without its buffers.

        The task's output and outcome go to IOPub under a parent header of its own, the
        request's with the task's token as its msg_id (``messages.task_parent``): several tasks
        come in one request, and the client routes each one's output to where that task was
        submitted by that id."""
        coro = fn(*args, **kwargs)
        if not isinstance(coro, Coroutine):
            raise TypeError(
                f"{getattr(fn, '__qualname__', fn)!r} returned {type(coro).__name__}, not a "
                "coroutine: submit takes an async function"
            )
        parent = task_parent(request, token)
        # A copy of the request's context (the kernel's own parent stays the request, without
        # its buffers), with the streams and display publishers of this context told the
        # task's parent.
        ctx = contextvars.copy_context()
        ctx.run(internals.set_task_parents, self.kernel, parent, request)
        if deliver is not None:
            ctx.run(_channel_token.set, token)
        name = getattr(fn, "__qualname__", None) or repr(fn)
        with self._lock:  # _finished takes it too: the token is known before it can be removed
            task = sched.submit_watched(
                coro, partial(self._finished, token, parent, ctx, deliver), name=name,
                context=ctx
            )
            self._tasks[token] = task
        return task.id

    def _finished(self, token: str, parent: dict, ctx: contextvars.Context,
                  deliver: Callable[[tuple], None] | None, task: Task) -> None:
        """Done callback (on the task's context thread): send the outcome home, by the
        channel the task came on."""
        with self._lock:
            self._tasks.pop(token, None)
        if token in self._printed:
            # What it printed goes by IOPub, and its outcome must not overtake it: it goes the
            # same way, after a flush of the streams (_publish). Tasks that print are not the
            # fine-grained ones the channel is for.
            self._printed.discard(token)
            ctx.run(self._publish, token, parent, task)
        elif deliver is not None:
            deliver((OUTCOME, token, self._pickled_outcome(task)))
        else:
            ctx.run(self._publish, token, parent, task)

    def _noted_output(self) -> None:
        """Something wrote output (internals.watch_output): in a channel task's context, its
        outcome goes by IOPub behind that output."""
        token = _channel_token.get()
        if token is not None and token in self._tasks:  # not a child that outlived it
            self._printed.add(token)

    def _pickled_outcome(self, task: Task) -> bytes:
        """The outcome of *task* pickled for the task channel (:meth:`_packed` when plain
        pickle cannot send the value)."""
        exc = task.exception()
        outcome = outcome_of(exc, None if exc is not None else task.result())
        try:
            return pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - e.g. an instance of a class a notebook defined
            return pickle.dumps(self._packed(task, outcome, e), pickle.HIGHEST_PROTOCOL)

    # -- the task channel --------------------------------------------------------------------
    def channel(self, host: str) -> dict:
        """The address of a new task channel (:mod:`.channel`) on *host*, for the client
        setting this engine up now; the channels of earlier clients that ended are let go."""
        server = ChannelServer(self.scheduler(), host, self.start_channel_batch)
        with self._lock:
            self._channels = {c for c in self._channels if c.serving}
            self._channels.add(server)
        return server.address()

    def start_channel_batch(self, fns: list[bytes], items: list[tuple[str, int, bytes]],
                            deliver: Callable[[tuple], None]) -> list[Any]:
        """A batch from the task channel (on the context thread serving the connection): as
        an apply request's, with the tasks' output under a parent header made here (there is
        no shell request) and their outcomes handed to *deliver*."""
        if self._channel_request is None:
            msg = self.kernel.session.msg("apply_request", content={})
            self._channel_request = without_buffers(msg)
            internals.watch_output(self.shell, self._noted_output)
        return self.start_many(fns, items, self._channel_request, deliver)

    def _publish(self, token: str, parent: dict, task: Task) -> None:
        """Queue *task*'s outcome for home. Packed here; sent from the IOPub thread, after what
        the task printed (the client completes the task on the outcome, so the output goes
        first), together with every other outcome queued by then (:meth:`_send_outcomes`).

        The context never waits for the IOPub thread: that thread needs the GIL, which a busy
        context holds for a switch interval at a time, and a flush from here (``stream.flush()``
        on a thread other than IOPub's) blocks until IOPub has done it, twice per task (stdout,
        stderr), while the context's other tasks wait. Queued on the IOPub thread instead, the
        flushes and the send run there in order: a flush on that thread queues the output's
        messages at once, and the outcomes' message is queued after them.

        Why together: each message costs this engine's IOPub thread, the controller's relay
        and Hub, and the client's IO thread a fraction of a millisecond of CPU, on the cores
        the engines compute on; the tasks of one round of submits end in one turn, so their
        outcomes (one message each before) make one message."""
        exc = task.exception()
        outcome = outcome_of(exc, None if exc is not None else task.result())
        session = self.kernel.session
        try:  # ipyparallel's serialisation first: it sends big buffers (arrays) without a copy
            buffers = serialize_object(
                {RESULT_KEY: (token, outcome)},
                buffer_threshold=session.buffer_threshold,
                item_threshold=session.item_threshold,
            )
        except Exception as e:  # noqa: BLE001 - e.g. an instance of a class a notebook defined
            buffers = serialize_object({RESULT_KEY: (token, self._packed(task, outcome, e))})
        with self._outbox_lock:
            first = not self._outbox  # the first one queued since the last send asks for one
            self._outbox.append((parent, buffers))
        if first:
            # Once this turn's steps are over, not now: asking for the IOPub thread hands the
            # GIL over (a message on its event pipe), and the turn's other tasks, which end
            # with this one when a round's tasks are alike, would wait for it and then go
            # in a message of their own. Off a context (a stop finishing tasks): now.
            engine = lowlevel.current_engine()
            if engine is None:
                self._wake_iopub()
            else:
                engine.defer(self._wake_iopub)

    def _wake_iopub(self) -> None:
        internals.on_iopub_thread(self.kernel, self._send_outcomes)

    def _send_outcomes(self) -> None:
        """On the IOPub thread: send every queued outcome in one ``data_message``, each
        outcome's buffers after the one before (the client unpacks them in turn), under the
        parent of the first (the client routes each outcome by the token inside it)."""
        with self._outbox_lock:  # taken before the flush: what a task queued printed before
            batch, self._outbox = self._outbox, []  # it ended, so this flush sends it first
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not lose the outcomes
                pass
        try:
            self.kernel.session.send(
                self.kernel.iopub_socket,
                "data_message",
                content={"keys": [RESULT_KEY]},
                parent=batch[0][0],
                buffers=[b for _, buffers in batch for b in buffers],
                ident=internals.datapub_ident(self.kernel),
            )
        except Exception:  # noqa: BLE001 - never into the IOPub thread's loop
            log.error("tinycoro.cluster: %d outcomes were not sent", len(batch), exc_info=True)

    @staticmethod
    def _packed(task: Task, outcome: tuple, why: BaseException) -> tuple:
        """The outcome plain pickle could not send: a value by cloudpickle, or the reason."""
        if outcome[0] == OK:
            try:
                return (OK_PACKED, pack(outcome[1]))
            except Exception as e:  # noqa: BLE001 - neither can send it: say so
                why = e
        err = TypeError(f"the result of {task.name!r} could not be sent back: {why!r}")
        return error_outcome(err)

    # -- control channel ---------------------------------------------------------------------
    def _on_control(self, stream: Any, ident: Any, msg: dict) -> None:
        """A ``CONTROL_REQUEST`` (on ipykernel's control thread): ``stats``, ``tasks`` or
        ``cancel``."""
        content = msg.get("content", {})
        op = content.get("op")
        try:
            if op == "stats":
                # The process's CPU time rides along, so a dashboard anywhere can set it beside
                # the contexts' busy (a GIL-bound engine: busy 200%, CPU 100%), and whether
                # there is a GIL to be bound by.
                reply: dict = {"status": "ok", "stats": stats_to_dict(self.scheduler().stats()),
                               "cpu_seconds": time.process_time(), "gil": gil_enabled()}
            elif op == "tasks":
                # The channel's own tasks are plumbing, as ipykernel's threads are: not listed.
                with self._lock:
                    own = {i for c in self._channels for i in c.task_ids()}
                reply = {"status": "ok", "tasks": tasks_to_list(
                    tuple(t for t in self.scheduler().tasks() if t.id not in own))}
            elif op == "cancel":
                with self._lock:
                    task = self._tasks.get(content.get("token"))
                found = task is not None and task.cancel()
                reply = {"status": "ok", "found": found}
            else:
                raise ValueError(f"unknown tinycoro control op {op!r}")
        except Exception as e:  # noqa: BLE001 - answered, never raised into the control thread
            reply = {"status": "error", "ename": type(e).__name__, "evalue": str(e),
                     "traceback": []}
        self.kernel.session.send(stream, CONTROL_REPLY, reply, parent=msg, ident=ident)


def _shell() -> Any:
    from IPython import get_ipython  # only ever imported on an engine

    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        raise RuntimeError("tinycoro.cluster.engine runs on an ipyparallel engine only")
    return shell


def setup(channel_host: str | None = None) -> dict:
    """Applied on each engine at start/connect: load the extension, bind ``tc`` for ``%px``
    cells, install the agent, and say who we are (``EngineInfo`` fields). *channel_host*: the
    address the task channel listens on (None: no channel); its address and secret come back
    under ``channel``, or why it did not start under ``channel_error``."""
    global _agent
    shell = _shell()
    internals.check_kernel(shell.kernel)
    if importlib.util.find_spec("cloudpickle") is None:  # what submitted functions arrive in
        raise ImportError(
            "tinycoro.cluster needs cloudpickle on every engine: pip install 'tinycoro[cluster]'"
        )
    interval = os.environ.get("TINYCORO_ENGINE_SWITCH_INTERVAL")  # set by start() only: an
    if interval:  # engine of a connected cluster is not ours to tune (local.py says why)
        sys.setswitchinterval(float(interval))
    if "tinycoro" not in shell.extension_manager.loaded:
        shell.extension_manager.load_extension("tinycoro")
    # `tc` in the engine's namespace, as a notebook has it: a `%px` cell can await tinycoro
    # awaitables at once, whichever way the cluster was made (a user's own `tc` is kept).
    if "tc" not in shell.user_ns:  # imported in the engine's namespace, as a user would
        shell.ex("import tinycoro as tc")
    with _agent_lock:
        if _agent is None or _agent.kernel is not shell.kernel:
            _agent = Agent(shell)
        agent = _agent
    info: dict = {"id": shell.kernel.engine_id, "host": socket.gethostname(), "pid": os.getpid()}
    if channel_host is not None:
        try:
            info["channel"] = agent.channel(channel_host)
        except Exception as e:  # noqa: BLE001 - the client keeps ipyparallel's path and says why
            info["channel_error"] = f"{type(e).__name__}: {e}"
    return info


def start_tasks(fns: list[bytes], items: list[tuple[str, int, bytes]]) -> list[Any]:
    """The function every request of submits applies: start each task of *items* (see
    :meth:`Agent.start_many`; everything is packed by cloudpickle on the client:
    ``messages.pack``); per task, its task id or why it did not start."""
    if _agent is None:
        raise RuntimeError("tinycoro.cluster is not set up on this engine (use tc.cluster.connect)")
    return _agent.start_many(fns, items)


async def serve_here(handler: Callable[[Any], Any], host: str, port: int,
                     acceptors: int | None) -> None:
    """One engine's part of ``Cluster.serve``: *acceptors* listeners on one port (SO_REUSEPORT,
    default: one per context of this engine's scheduler), a task per connection running
    ``handler(conn)``; until cancelled. A failing handler is reported like any unawaited
    task (in the cell that started the server) and the others carry on."""
    count = acceptors or Agent.scheduler().contexts
    listeners: list = []
    accepting: list[Task] = []
    live: set[Task] = set()
    name = getattr(handler, "__qualname__", "handler")

    async def accept_loop(lst: Any) -> None:
        while True:
            conn = await lst.accept()
            # The handler's coroutine is the task itself, and the connection is closed when it
            # ends: a wrapper awaiting the handler (``async with conn``) is one more frame that
            # every resume of every request passes through (callgrind: 70-500 instructions per
            # echo round trip, by how the turns batch), which a plain server does not pay.
            try:
                t = spawn(handler(conn), name=name)
            except Exception as e:  # noqa: BLE001 - the call failed (its arguments) or gave
                # nothing to run (a plain function): this connection's failure, as one in the
                # handler's body is, never the accept loop's
                t = spawn(_failed(conn, e), name=name)
            live.add(t)
            t.add_done_callback(partial(_handler_ended, live, conn))

    try:
        for _ in range(count):
            listeners.append(await listen(host, port, reuse_port=True))
        accepting = [spawn(accept_loop(lst), name=f"accept on {host}:{port}")
                     for lst in listeners]
        await when_all(*accepting)
    finally:
        for t in accepting + list(live):
            t.cancel()
        for lst in listeners:
            await lst.close()


async def _failed(conn: Any, exc: Exception) -> None:
    """A connection whose handler could not be called or returned no coroutine: closed, and
    the task fails with why, reported as a failing handler is."""
    await conn.close()
    raise exc


def _handler_ended(live: set[Task], conn: Any, task: Task) -> None:
    """Done callback of a connection's task (on its context): forget it, and close the
    connection unless the handler did (a task of its own: closing is an io_uring close)."""
    live.discard(task)
    if not conn.closed:
        try:
            spawn(conn.close(), name="close connection")
        except RuntimeError:  # the scheduler was stopped: the socket closes with its object
            pass
