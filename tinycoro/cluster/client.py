"""The client side: starting or connecting a cluster, submitting tasks, routing what comes back.

Everything travels over ipyparallel (rule 15: no process pool or protocol of our own);
see :mod:`.messages` for the three message shapes used. Two hooks into the ipyparallel client
route what comes back, both on its IO thread:

* its IOPub stream: a task's output (``stream`` and ``display_data`` messages) is written
  again here inside the ``contextvars.Context`` captured at submit, so in a notebook it lands
  in the cell that submitted the task, also after that cell ended; its outcome (a
  ``data_message``) completes the :class:`RemoteTask`. Every other message (and the status
  messages of ours) goes on to ipyparallel's own handler.
* its registration callbacks: an engine that leaves the cluster fails its tasks with
  :class:`EngineLost`. For a cluster started here the engine pids are also watched
  (:mod:`.watch`), which notices a killed engine at once.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import inspect
import itertools
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import uuid
from typing import Any, Awaitable, Callable, Coroutine, Iterable, TypeVar

import ipyparallel as ipp
from ipyparallel.serialize import PrePickled, deserialize_object

from ..core import Cancelled, SchedulerStats, TaskInfo
from ..core.checks import check_int
from ..sync import Event, Semaphore
from . import engine as engine_side
from .errors import EngineLost
from .info import EngineInfo, EngineLoad
from .messages import CONTROL_REQUEST, RESULT_KEY, stats_from_dict, tasks_from_list
from .remote import RemoteTask
from .watch import PidWatcher

log = logging.getLogger("tinycoro")

T = TypeVar("T")

START_TIMEOUT = 120.0  # engines may take 10-30 s to come up on a loaded machine
STATS_TIMEOUT = 5.0  # an engine that does not answer a probe in this time is left out
# The GIL switch interval of the engines start() makes (seconds; CPython's default is 0.005).
# A context computing on an engine keeps the GIL for a switch interval at a time, and the
# kernel's own threads (shell, IOPub, control) need it for every message they handle: each
# wait is up to one interval, a message takes several. With 5 ms, 8 submits to one busy engine
# trickled in and its context sat idle between them: 8 CPU-bound tasks ran at 0.48-0.60x of
# the same tasks in one process; with 0.5 ms at 0.82-0.85x (benchmark workload 7, and
# docs/benchmarks.md). The cost is more GIL hand-overs while the kernel is busy, none when idle.
ENGINE_SWITCH_INTERVAL = 0.0005
STOP_GRACE = 5.0  # seconds for cancelled remote tasks to unwind before the engines stop


def _check_async_fn(fn: Any, what: str) -> None:
    if inspect.iscoroutine(fn):
        fn.close()
        raise TypeError(
            f"{what} takes an async function and its arguments, not a coroutine object "
            "(coroutines cannot travel to another process): pass fn, *args"
        )
    if not callable(fn):
        raise TypeError(f"{what} takes an async function, got {fn!r}")
    target = getattr(fn, "func", fn)  # functools.partial
    if not (inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)
    )):
        raise TypeError(f"{what} takes an async function (async def), got {fn!r}")


class _LoopThread:
    """An asyncio loop on a daemon thread, for the ipyparallel.Cluster that owns the local
    processes: its launchers watch their processes from the loop that started them, so that
    loop must keep running for the cluster's life (whatever loop the caller has, if any)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tc-cluster-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Owned:
    """What a cluster started by :func:`start` owns and :meth:`Cluster.stop` ends."""

    def __init__(self, ipp_cluster: Any, loop: _LoopThread, profile_dir: str) -> None:
        self.ipp_cluster = ipp_cluster
        self.loop = loop
        self.profile_dir = profile_dir
        # Every process of the cluster, taken when it is up: an engine's nanny is its child,
        # and outlives it for a while when the engine is killed (reparented, out of reach).
        self.processes: list[Any] = []

    def take_processes(self, engines: list[EngineInfo]) -> None:
        self.processes = _process_trees(self._root_pids(engines))

    def _root_pids(self, engines: list[EngineInfo]) -> set[int]:
        roots = {e.pid for e in engines if e.host == socket.gethostname()}
        ipc = self.ipp_cluster
        if ipc is not None and ipc.controller is not None and getattr(ipc.controller, "pid", -1) > 0:
            roots.add(ipc.controller.pid)
        if ipc is not None:
            for es in ipc.engines.values():
                roots.update(la.pid for la in getattr(es, "launchers", {}).values() if la.pid > 0)
        return roots


class Cluster:
    """tinycoro on the engines of an ipyparallel cluster (:func:`start` or :func:`connect`)."""

    def __init__(self, client: Any, *, owned: _Owned | None = None,
                 timeout: float = START_TIMEOUT) -> None:
        self.client = client  # the ipyparallel.Client
        self._owned = owned
        self._lock = threading.Lock()
        # Held around every request we send: jupyter_client's Session numbers its msg_ids with
        # a counter it does not lock, and several context threads may submit at once (we do
        # not count on the GIL making its read-and-increment atomic).
        self._send_lock = threading.Lock()
        self._stopped = False
        self._info: dict[int, EngineInfo] = {}  # every engine ever known (for messages)
        self._live: dict[int, EngineInfo] = {}
        self._by_msg: dict[str, RemoteTask] = {}
        self._by_engine: dict[int, set[RemoteTask]] = {}
        self._rr = itertools.count()
        ids = list(client.ids)
        if not ids:
            raise RuntimeError("the ipyparallel cluster has no engines registered")
        infos = client[ids].apply_async(engine_side.setup).get(timeout=timeout)
        for d in infos:
            info = EngineInfo(int(d["id"]), str(d["host"]), int(d["pid"]))
            self._info[info.id] = self._live[info.id] = info
            self._by_engine[info.id] = set()
        self._dispatch_iopub = type(client)._dispatch_iopub.__wrapped__  # undecorated
        self._install_hooks()
        self._watcher: PidWatcher | None = None
        if owned is not None:  # our own processes on this host: watch their pids
            owned.take_processes(list(self._live.values()))
            # At exit, a full stop (before ipyparallel's own exit hook, registered earlier):
            # it also waits for the nannies and removes the profile directory.
            atexit.register(self.stop)
            self._watcher = PidWatcher({i.id: i.pid for i in self._live.values()},
                                       self._pid_exited)

    # -- engines -----------------------------------------------------------------------------
    @property
    def engines(self) -> tuple[EngineInfo, ...]:
        """The live engines, by id."""
        with self._lock:
            return tuple(self._live[i] for i in sorted(self._live))

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else f"{len(self._live)} engines"
        return f"<tinycoro.cluster.Cluster {state}>"

    def _pick(self, engine: int | None) -> int:
        with self._lock:
            if self._stopped:
                raise RuntimeError("this cluster was stopped; start or connect a new one")
            if engine is not None:
                check_int("engine", engine, min=0)
                if engine not in self._live:
                    known = "lost" if engine in self._info else "unknown"
                    raise ValueError(f"engine {engine} is {known}; live engines: {sorted(self._live)}")
                return engine
            if not self._live:
                raise EngineLost("every engine of this cluster is lost")
            # the least loaded by tasks we have in flight there; ties in turn
            ids = sorted(self._live)
            turn = next(self._rr)
            ids = ids[turn % len(ids):] + ids[: turn % len(ids)]
            return min(ids, key=lambda i: len(self._by_engine[i]))

    # -- submitting --------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Coroutine[Any, Any, T]], /, *args: Any,
               engine: int | None = None, **kwargs: Any) -> RemoteTask:
        """Run ``fn(*args, **kwargs)`` as a task on an engine's scheduler (*engine*: its id;
        None: the engine with the fewest of our tasks). *fn* and the arguments travel by
        ipyparallel's serialisation; the coroutine is made over there."""
        _check_async_fn(fn, "submit")
        return self._submit(fn, args, kwargs, engine)

    def _submit(self, fn: Any, args: tuple, kwargs: dict, engine: int | None,
                name: str | None = None, observed: bool = False) -> RemoteTask:
        """*observed*: the caller takes care of the outcome (map, serve), so a failure is
        not reported as unawaited; set before the task can end."""
        name = name or getattr(fn, "__qualname__", None) or repr(fn)
        context = contextvars.copy_context()
        with self._send_lock:  # also makes "least loaded" see the submit before this one
            eid = self._pick(engine)
            task = RemoteTask(self, eid, uuid.uuid4().hex, name, context)
            task._observed = observed
            self._send_apply(task, fn, args, kwargs)
        return task

    def _send_apply(self, task: RemoteTask, fn: Any, args: tuple, kwargs: dict) -> None:
        client = self.client
        eid = task.engine
        try:
            ident = client._engines[eid].encode("utf8")  # an engine's zmq identity: its uuid
        except KeyError:  # ipyparallel saw it unregister before our watcher did
            self._engine_lost(eid, "it left the cluster")
            raise EngineLost(f"{self._info[eid]} was lost") from None

        def registered(future: Any) -> None:
            # Called by ipyparallel before the request is sent: the task is known before any
            # message about it can arrive on the IO thread.
            task.msg_id = future.msg_id
            with self._lock:
                live = eid in self._live
                if live:  # else its engine was lost since _pick: no one would end it
                    self._by_msg[future.msg_id] = task
                    self._by_engine[eid].add(task)
            if not live:
                task._finish(None, EngineLost(f"{self._info[eid]} was lost before {task.name!r} "
                                              "could start"))
                return
            future.add_done_callback(lambda f: task._acked(f.result()))

        client.send_apply_request(
            client._mux_stream,  # what DirectView uses: straight to one engine
            engine_side.start_task,
            args=[task._token, fn, *args],
            kwargs=kwargs,
            ident=ident,
            message_future_hook=registered,
        )

    async def map(self, fn: Callable[..., Coroutine[Any, Any, T]], iterable: Iterable[Any], *,
                  limit: int | None = None) -> list[T]:
        """``[await fn(x) for x in iterable]``, spread over the engines, results in order; at
        most *limit* in flight per engine (None: all at once). On the first failure the rest
        are cancelled and it is raised (as ``tc.when_all`` does)."""
        _check_async_fn(fn, "map")
        if limit is not None:
            check_int("limit", limit, min=1)
        items = list(iterable)
        if not items:
            return []
        if not self.engines:
            self._pick(None)  # raises: stopped, or every engine lost
        shipped = PrePickled(fn)  # pickled once, not once per item
        name = getattr(fn, "__qualname__", None) or repr(fn)
        slots = Semaphore(limit * len(self.engines)) if limit is not None else None
        ended = Event()
        failed: list[RemoteTask] = []
        left = [len(items)]
        counter = threading.Lock()

        def on_done(t: RemoteTask) -> None:
            with counter:
                left[0] -= 1
                if t._exc is not None and not failed:
                    failed.append(t)
                last = left[0] == 0
            if slots is not None:
                slots.release()
            if last or failed:
                ended.set()

        tasks: list[RemoteTask] = []
        try:
            for item in items:
                if slots is not None:
                    await slots.acquire()  # a slot frees on some engine (pigeonhole)
                if failed:
                    break
                t = self._submit(shipped, (item,), {}, None, name, observed=True)
                t._add_done_callback(on_done)
                tasks.append(t)
            await ended.wait()
            if failed:
                return failed[0]._outcome()  # raises its exception
            return [t._outcome() for t in tasks]
        finally:
            for t in tasks:
                t.cancel()  # a no-op for the finished ones

    async def serve(self, handler: Callable[[Any], Coroutine[Any, Any, Any]], port: int,
                    host: str = "127.0.0.1", *, contexts: int | None = None) -> None:
        """Every engine listens on *host*:*port* (SO_REUSEPORT; the kernel spreads the
        connections) and runs ``handler(conn)`` for each connection it accepts, with
        *contexts* listeners per engine (None: one per context of its scheduler). Returns
        when :meth:`stop` runs; cancelling the awaiting task stops the servers."""
        _check_async_fn(handler, "serve")
        check_int("port", port, min=1, max=65535)
        if contexts is not None:
            check_int("contexts", contexts, min=1)
        if not self.engines:
            self._pick(None)  # raises: stopped, or every engine lost
        servers = [self._submit(engine_side.serve_here, (handler, host, port, contexts), {}, e.id,
                                f"serve {host}:{port}", observed=True) for e in self.engines]
        try:
            for t in servers:
                try:
                    await t
                except Cancelled:
                    if not self._stopped:
                        raise
        finally:
            for t in servers:
                t.cancel()
            # Return once every engine has closed its listeners, so the port is free again.
            for t in servers:
                try:
                    await t
                except (Cancelled, Exception):  # noqa: BLE001 - Cancelled, EngineLost: ended
                    pass

    # -- stats, cancel -----------------------------------------------------------------------
    def _control(self, eid: int, content: dict) -> Any:
        client = self.client
        with self._send_lock:
            return client._send(client._control_stream, CONTROL_REQUEST, content=content,
                                ident=client._engines[eid].encode("utf8"))

    def stats(self, timeout: float = STATS_TIMEOUT) -> dict[int, SchedulerStats]:
        """Each live engine's ``SchedulerStats``, by engine id. The engines answer on their
        control thread, so a busy engine (a long ``%px`` cell, say) answers at once; one that
        does not answer within *timeout* seconds is left out."""
        return {eid: load.stats for eid, load in self.load(timeout).items()}

    def load(self, timeout: float = STATS_TIMEOUT) -> dict[int, EngineLoad]:
        """Each live engine's stats and process CPU time, by engine id; answered like
        :meth:`stats` (one probe). For dashboards: a remote host's ``/proc`` is out of reach."""
        return {eid: EngineLoad(stats_from_dict(c["stats"]), c["cpu_seconds"])
                for eid, c in self._probe("stats", timeout).items()}

    def tasks(self, timeout: float = STATS_TIMEOUT) -> dict[int, tuple[TaskInfo, ...]]:
        """Each live engine's live tasks (``Scheduler.tasks()``: id, name, context, state, what
        it waits on, age), by engine id; answered like :meth:`stats`, never behind a busy
        shell."""
        return {eid: tasks_from_list(c["tasks"]) for eid, c in self._probe("tasks", timeout).items()}

    def _probe(self, op: str, timeout: float) -> dict[int, dict]:
        """Ask every live engine *op* on its control channel; the ``ok`` replies by engine."""
        with self._lock:
            ids = sorted(self._live)
        futures = {}
        for eid in ids:
            try:
                futures[eid] = self._control(eid, {"op": op})
            except KeyError:  # unregistered meanwhile
                pass
        out: dict[int, dict] = {}
        deadline = _Deadline(timeout)
        for eid, fut in futures.items():
            try:
                msg = fut.result(deadline.left())
            except Exception:  # noqa: BLE001 - timed out: left out
                continue
            if msg["content"].get("status") == "ok":
                out[eid] = msg["content"]
        return out

    def _send_cancel(self, task: RemoteTask) -> None:
        try:
            self._control(task.engine, {"op": "cancel", "token": task._token})
        except Exception:  # noqa: BLE001 - the engine is gone: EngineLost ends the task
            log.debug("tinycoro.cluster: cancel of %r not sent", task, exc_info=True)

    def _forget(self, task: RemoteTask) -> None:
        with self._lock:
            if task.msg_id is not None:
                self._by_msg.pop(task.msg_id, None)
            self._by_engine.get(task.engine, set()).discard(task)

    # -- what comes back (the ipyparallel client's IO thread) ---------------------------------
    def _install_hooks(self) -> None:
        client = self.client
        installed = threading.Event()

        def install() -> None:
            client._iopub_stream.on_recv(self._on_iopub, copy=False)
            installed.set()

        client._io_loop.add_callback(install)
        if not installed.wait(30):
            raise RuntimeError("the ipyparallel client's IO thread did not answer")
        client._registration_callbacks.append(self._on_registration)

    def _remove_hooks(self) -> None:
        client = self.client
        if self._on_registration in client._registration_callbacks:
            client._registration_callbacks.remove(self._on_registration)
        if client._closed or client._io_loop is None:
            return
        done = threading.Event()

        def restore() -> None:
            client._iopub_stream.on_recv(client._dispatch_iopub, copy=False)
            done.set()

        client._io_loop.add_callback(restore)
        done.wait(10)

    def _on_iopub(self, frames: list) -> None:
        client = self.client
        try:
            _, msg = client.session.feed_identities(frames, copy=False)
            msg = client.session.deserialize(msg, content=True, copy=False)
        except Exception:  # noqa: BLE001 - as ipyparallel does with a bad message
            log.error("tinycoro.cluster: invalid IOPub message", exc_info=True)
            return
        msg_id = msg["parent_header"].get("msg_id")
        task = self._by_msg.get(msg_id) if msg_id else None
        kind = msg["header"]["msg_type"]
        if task is None or kind == "status":  # ipyparallel's own bookkeeping
            self._dispatch_iopub(client, msg)
            if task is None:
                return
        try:
            if kind == "stream":
                task._in_submitter(_write, msg["content"]["name"], msg["content"]["text"])
            elif kind in ("display_data", "update_display_data"):
                task._in_submitter(_display, msg["content"], kind == "update_display_data")
            elif kind == "data_message" and RESULT_KEY in msg["content"].get("keys", ()):
                data, _ = deserialize_object(msg["buffers"])
                token, outcome = data[RESULT_KEY]
                if token == task._token:
                    task._resolve(outcome)
        except Exception:  # noqa: BLE001 - never into ipyparallel's IO loop
            log.error("tinycoro.cluster: handling %s for %r failed", kind, task, exc_info=True)

    def _on_registration(self, event: dict) -> None:
        if event.get("event") == "unregister":
            self._engine_lost(int(event["id"]), "it left the cluster")

    def _pid_exited(self, eid: int) -> None:
        self._engine_lost(eid, "its process exited")

    def _engine_lost(self, eid: int, why: str) -> None:
        """Fail every task on engine *eid* with EngineLost; the other engines carry on."""
        with self._lock:
            info = self._live.pop(eid, None)
            tasks = list(self._by_engine.get(eid, ()))
        if info is None and not tasks:
            return
        known = info or self._info.get(eid)
        what = str(known) if known is not None else f"engine {eid}"
        for t in tasks:
            t._finish(None, EngineLost(f"{what} was lost ({why}) while running {t.name!r}"))

    # -- stopping ----------------------------------------------------------------------------
    def stop(self, timeout: float = STOP_GRACE) -> None:
        """Cancel our remote tasks (their ``finally`` blocks run over there, for up to
        *timeout* seconds), end the tasks still pending with ``tc.Cancelled``, and, for a
        cluster started by :func:`start`, stop its engines and controller: no process, thread
        or port is left. A cluster from :func:`connect` keeps running (it is not ours);
        only this handle stops. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            pending = [t for ts in self._by_engine.values() for t in ts]
        for t in pending:
            t.cancel()
        deadline = _Deadline(timeout)
        for t in pending:
            t._finished.wait(deadline.left())
        for t in pending:
            t._finish(None, Cancelled())
        if self._watcher is not None:
            self._watcher.stop()
        self._remove_hooks()
        if self._owned is not None:
            atexit.unregister(self.stop)
            _stop_owned(self.client, self._owned, list(self._info.values()))

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Deadline:
    def __init__(self, seconds: float | None) -> None:
        import time

        self._time = time.monotonic
        self._end = None if seconds is None else self._time() + seconds

    def left(self) -> float | None:
        return None if self._end is None else max(0.0, self._end - self._time())


def _write(name: str, text: str) -> None:
    """Write a remote task's output to this process's stream of the same name (in a
    notebook: ipykernel's stream, which routes it by the current context's parent header)."""
    stream = sys.stderr if name == "stderr" else sys.stdout
    stream.write(text)


def _display(content: dict, update: bool) -> None:
    """Show a remote task's ``display()`` here: through this process's IPython display
    publisher if it runs IPython (a notebook: routed to the submitting cell, as streams are),
    else its text/plain on stdout, as a terminal IPython would."""
    ipython = sys.modules.get("IPython")  # no import: if IPython is not loaded, no shell runs
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        text = content.get("data", {}).get("text/plain")
        if text:
            sys.stdout.write(text + "\n")
        return
    shell.display_pub.publish(data=content["data"], metadata=content.get("metadata") or {},
                              transient=content.get("transient") or None, update=update)


# -- starting and connecting --------------------------------------------------------------------
def start(n: int | None = None, *, contexts: int = 1, timeout: float = START_TIMEOUT) -> Cluster:
    """A local ipyparallel cluster of *n* engines (default ``os.cpu_count()``), each an IPython
    kernel with the tinycoro extension preloaded and a scheduler of *contexts* contexts; blocks
    until every engine is up (at most *timeout* seconds). ``stop()`` ends every process."""
    n = check_int("n", (os.cpu_count() or 1) if n is None else n, min=1)
    contexts = check_int("contexts", contexts, min=1)
    loop = _LoopThread()
    profile_dir = tempfile.mkdtemp(prefix="tinycoro-cluster-")
    ipc: Any = None
    client: Any = None
    try:
        async def make() -> Any:
            # A profile of its own (removed at stop) keeps ~/.ipython untouched; delay=0:
            # engines get the controller's connection info in their environment.
            return ipp.Cluster(n=n, profile_dir=profile_dir, delay=0,
                               log_level=logging.ERROR, engine_timeout=int(timeout))

        ipc = loop.run(make())
        loop.run(ipc.start_controller(), timeout)
        loop.run(ipc.start_engines(
            n,
            engine_args=["--IPKernelApp.extensions=tinycoro"],
            environment={"TINYCORO_CONTEXTS": str(contexts),
                         "TINYCORO_ENGINE_SWITCH_INTERVAL": str(ENGINE_SWITCH_INTERVAL)},
        ), timeout)
        client = loop.run(ipc.connect_client(), timeout)
        client.wait_for_engines(n, timeout=timeout, interactive=False)  # no progress bar
        return Cluster(client, owned=_Owned(ipc, loop, profile_dir), timeout=timeout)
    except BaseException:
        _stop_owned(client, _Owned(ipc, loop, profile_dir), [])
        raise


def connect(client: Any, *, timeout: float = START_TIMEOUT) -> Cluster:
    """Use the engines of an existing cluster (an ``ipyparallel.Client``; e.g. one started with
    ``ipcluster start`` on several hosts). Engines that did not preload the extension load it
    now (with their default context count)."""
    if not isinstance(client, ipp.Client):
        raise TypeError(f"connect takes an ipyparallel.Client, got {client!r}")
    return Cluster(client, timeout=timeout)


def _process_trees(pids: set[int]) -> list[Any]:
    import psutil

    out: list[Any] = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(p)
            out.extend(p.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return out


def _stop_owned(client: Any, owned: _Owned, engines: list[EngineInfo]) -> None:
    """Stop the engines and controller of a cluster we started and wait until every one of
    their processes (and children: the engines' nannies) has exited."""
    import psutil

    seen = {p.pid for p in owned.processes}
    procs = owned.processes + [p for p in _process_trees(owned._root_pids(engines))
                               if p.pid not in seen]
    ipc = owned.ipp_cluster
    try:
        if client is not None:
            client.close()
        if ipc is not None:
            owned.loop.run(ipc.stop_cluster(), 60)
    finally:
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        owned.loop.close()
        shutil.rmtree(owned.profile_dir, ignore_errors=True)
