"""The ``Cluster`` API: starting or connecting a cluster, submitting tasks, routing what comes back.
Size: nearly all of it is the Cluster class, one handle whose parts (submit, map and serve,
the probes, what comes back, stop) share its lock and its tables of engines and tasks.

Engines, ``%px``, probes, cancels and the tasks' output travel over ipyparallel (rule 15);
see :mod:`.messages` for the message shapes used. Submits and outcomes take each engine's task
channel (:mod:`.channel`: a socket its scheduler serves, whose address ipyparallel hands over at
start/connect), which skips the engine's shell and the controller; an engine whose channel cannot
be reached keeps the ipyparallel path, said in a warning. What a task is made of (its function and
arguments) travels by cloudpickle, as Dask ships functions: a function defined in a notebook
travels with the globals it names. Two hooks into the ipyparallel client (through
:mod:`.internals`, the one module that names ipyparallel's private parts) route what comes
back, both on its IO thread:

* its IOPub stream: a task's output (``stream`` and ``display_data`` messages) is written
  again here inside the ``contextvars.Context`` captured at submit, so in a notebook it lands
  in the cell that submitted the task, also after that cell ended; its outcome (in a
  ``data_message`` with the outcomes of the engine's other tasks that ended meanwhile)
  completes the :class:`RemoteTask`. Every other message (and the status
  messages of ours) goes on to ipyparallel's own handler.
* its registration callbacks: an engine that leaves the cluster fails its tasks with
  :class:`EngineLost`. For a cluster started here the engine pids are also watched
  (:mod:`.watch`), which notices a killed engine at once. Its task channel closing and a
  reply that says it died are witnesses too; whichever speaks first marks the engine lost
  (:meth:`Cluster._engine_lost`, the one place) before any task fails with EngineLost.

One ``ipyparallel.Client`` carries at most one live ``Cluster``: the IOPub hook is the
client's one handler, so a second handle would take the first one's messages away.
"""

from __future__ import annotations

import atexit
import contextvars
import html
import inspect
import itertools
import logging
import os
import pickle
import socket
import threading
import time
from functools import partial
from typing import Any, Callable, Coroutine, Iterable, TypeVar

import ipyparallel as ipp
from ipyparallel.serialize import deserialize_object

from ..core import Cancelled, SchedulerStats, TaskInfo
from ..core.checks import check_int
from ..core.stats import counted
from ..sync import Event, Semaphore
from . import engine as engine_side
from .channel import ACK, OUTCOME, ChannelClient
from .dashboard import refresher_factory
from .errors import EngineLost
from .info import EngineInfo, EngineLoad
from . import internals
from .internals import ClientSeam
from .local import LocalProcesses, launch, refuse_nested_start
from . import homes, registry, shipped
from .output import display_output, write_output
from .messages import (CONTROL_REQUEST, RESULT_KEY, pack, pack_function, stats_from_dict,
                       tasks_from_list)
from .progress import StartProgress
from .remote import RemoteTask, after_submitting_step
from .watch import PidWatcher

log = logging.getLogger("tinycoro")

T = TypeVar("T")

START_TIMEOUT = 120.0  # engines may take 10-30 s to come up on a loaded machine
STATS_TIMEOUT = 5.0  # an engine that does not answer a probe in this time is left out
STOP_GRACE = 5.0  # seconds for cancelled remote tasks to unwind before the engines stop
CHANNEL_ENV = "TINYCORO_CLUSTER_CHANNEL"  # "0": every engine keeps the ipyparallel path
CHANNEL_HOST_ENV = "TINYCORO_CLUSTER_CHANNEL_HOST"  # where the engines' channels listen
SENT_BY_CHANNEL = "tinycoro-channel"  # a task's msg_id once its batch left by the channel
# Plain Python's submits (no step to end) leave when the submitter blocks on a result, or this
# long after the first of them, whichever is first: the IO thread that sends them gets the GIL
# as soon as the first submit wakes it, and sent then, the rest of a row went a batch each.
FLUSH_WINDOW = 0.001
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_WILDCARD = ("0.0.0.0", "::", "")

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


class Cluster:
    """tinycoro on the engines of an ipyparallel cluster (:func:`start` or :func:`connect`)."""

    def __init__(self, client: Any, *, owned: LocalProcesses | None = None,
                 timeout: float = START_TIMEOUT, seam: ClientSeam | None = None) -> None:
        """*seam*: the client's, made (and so checked) by whoever made the client, as
        :func:`start` does after checking the version; without it, the version and the
        client's names are checked here."""
        self.client = client  # the ipyparallel.Client
        if seam is None:
            internals.check_version("ipyparallel", internals.IPYPARALLEL)
            seam = ClientSeam(client)
        self._seam = seam
        self._owned = owned
        self._lock = threading.Lock()
        # Held around every request we send: jupyter_client's Session numbers its msg_ids with
        # a counter it does not lock, and several context threads may submit at once (we do
        # not count on the GIL making its read-and-increment atomic).
        self._send_lock = threading.Lock()
        # Held while a flush takes the queue and sends it: flushes from the IO thread and from
        # a submitter blocking on a result keep each engine's batches in submit order.
        # Reentrant: a task that a flush ends (a failed send) runs its done callbacks there.
        self._flush_lock = threading.RLock()
        self._stopped = False
        self._known: dict[int, EngineInfo] = {}  # every engine ever known (for messages)
        self._live: dict[int, EngineInfo] = {}
        self._by_token: dict[str, RemoteTask] = {}  # a task's output and outcome come under it
        # Submits waiting for the IO thread's next turn, by engine (under _send_lock).
        self._queued: dict[int, list[tuple[RemoteTask, bytes, bytes]]] = {}
        self._by_engine: dict[int, set[RemoteTask]] = {}
        self._rr = itertools.count()
        self._refresher: Any = None  # the dashboards' refresher, made by dashboard()
        self._dashboard_lock = threading.Lock()
        self._probes: set[threading.Event] = set()  # the waits of probes in flight
        self._channels: dict[int, ChannelClient] = {}  # by engine (under _lock)
        ids = list(client.ids)
        if not ids:
            raise RuntimeError("the ipyparallel cluster has no engines registered")
        registry.claim(client, self)  # claimed before the hooks go in
        try:
            channel_host = (None if os.environ.get(CHANNEL_ENV, "1") == "0"
                             else os.environ.get(CHANNEL_HOST_ENV, "127.0.0.1"))
            infos = client[ids].apply_async(engine_side.setup, channel_host).get(timeout=timeout)
            for d in infos:
                info = EngineInfo(int(d["id"]), str(d["host"]), int(d["pid"]))
                self._known[info.id] = self._live[info.id] = info
                self._by_engine[info.id] = set()
            self._seam.hook_iopub(self._on_iopub)
            if channel_host is not None:
                self._open_channels(infos)
        except BaseException:
            self._close_channels()
            registry.unclaim(client, self)
            raise
        self._seam.on_registration(self._on_registration)
        self._watcher: PidWatcher | None = None
        if owned is not None:  # our own processes on this host: watch their pids
            owned.take_processes(list(self._live.values()))
            # At exit, a full stop (before ipyparallel's own exit hook, registered earlier):
            # it also waits for the nannies and removes the profile directory.
            atexit.register(self.stop)
            self._watcher = PidWatcher({i.id: i.pid for i in self._live.values()},
                                       self._pid_exited)
        registry.running(self)

    # -- what it is -----------------------------------------------------------------------------
    @property
    def engines(self) -> tuple[EngineInfo, ...]:
        """The live engines, by id."""
        with self._lock:
            return tuple(self._live[i] for i in sorted(self._live))

    @property
    def known_engines(self) -> tuple[int, ...]:
        """The ids of every engine this handle has known, the lost ones too."""
        with self._lock:
            return tuple(sorted(self._known))

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` has run."""
        return self._stopped

    @property
    def owned(self) -> bool:
        """True for a cluster :func:`start` made (stop() ends its processes); False for one
        reached with :func:`connect`."""
        return self._owned is not None

    @property
    def controller_pid(self) -> int | None:
        """The pid of the controller of a cluster started here (None for a connected one)."""
        return None if self._owned is None else self._owned.controller_pid

    @property
    def profile_dir(self) -> str | None:
        """The temporary IPython profile of a cluster started here (its connection files are
        under ``security/``); None for a connected one."""
        return None if self._owned is None else self._owned.profile_dir

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else counted(len(self._live), "engine")
        return f"<tinycoro.cluster.Cluster {state}>"

    def _repr_html_(self) -> str:
        """A summary for notebooks (as Dask's Client shows one): state and engines, read from
        what this handle knows (no round trip to the engines)."""
        how = "started here" if self.owned else "connected"
        if self._stopped:  # nothing to offer but a new one
            return (f'<div class="tc-cluster"><p>tinycoro cluster ({how}): <b>stopped</b></p>'
                    "<p><code>tc.cluster.start()</code> or <code>%tinycoro cluster start</code> "
                    "makes a new one.</p></div>")
        engines = self.engines
        head = f"tinycoro cluster ({how}): <b>{counted(len(engines), 'engine')}</b>"
        rows = "".join(
            f"<tr><td>engine {e.id}</td><td>{html.escape(e.host)}</td><td>{e.pid}</td>"
            f"<td>{len(self._by_engine.get(e.id, ()))}</td></tr>" for e in engines
        )
        rows = ("<table><tr><th>engine</th><th>host</th><th>pid</th><th>our tasks</th></tr>"
                f"{rows}</table>")
        return (f'<div class="tc-cluster"><p>{head}</p>{rows}<p><code>cluster.dashboard()'
                "</code> shows its live load; <code>%px</code> runs a cell on every engine.</p></div>")

    def dashboard(self) -> Any:
        """The cluster dashboard widget (every engine's contexts, history and process CPU),
        as ``%tinycoro cluster dashboard`` shows it; needs ipywidgets. One refresher thread
        serves every dashboard of this cluster and ends when the cluster stops."""
        # The widget is the notebook layer's, which sits above this package: it comes through
        # the seam in .dashboard, never by an import of that layer.
        with self._dashboard_lock:  # not self._lock: the refresher reads self.engines
            if self._refresher is None:
                self._refresher = refresher_factory()(self)
            refresher = self._refresher
        return refresher.dashboard()

    @property
    def refresher(self) -> Any:
        """The refresher thread behind :meth:`dashboard` (None before the first)."""
        return self._refresher

    def _pick(self, engine: int | None) -> int:
        with self._lock:
            self._check_running()
            if engine is not None:
                check_int("engine", engine, min=0)
                if engine not in self._live:
                    known = "lost" if engine in self._known else "unknown"
                    raise ValueError(f"engine {engine} is {known}; live engines: {sorted(self._live)}")
                return engine
            if not self._live:
                raise EngineLost("every engine of this cluster is lost")
            # the least loaded by tasks we have in flight there; ties in turn
            ids = sorted(self._live)
            turn = next(self._rr)
            ids = ids[turn % len(ids):] + ids[: turn % len(ids)]
            return min(ids, key=lambda i: len(self._by_engine[i]))

    def _check_running(self) -> None:
        if self._stopped:
            raise RuntimeError("this cluster was stopped; start or connect a new one")

    # -- submitting --------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Coroutine[Any, Any, T]], /, *args: Any,
               engine: int | None = None, **kwargs: Any) -> RemoteTask:
        """Run ``fn(*args, **kwargs)`` as a task on an engine's scheduler (*engine*: its id;
        None: the engine with the fewest of our tasks). *fn* and the arguments travel by
        cloudpickle (a notebook's function with the globals it names); the coroutine is made
        over there."""
        _check_async_fn(fn, "submit")
        return self._submit(_ship(fn), args, kwargs, engine, _name_of(fn))

    def _submit(self, fn_packed: bytes, args: tuple, kwargs: dict, engine: int | None,
                name: str, observed: bool = False) -> RemoteTask:
        """*fn_packed*: the function, packed once (map reuses it for every item). *observed*:
        the caller takes care of the outcome (map, serve), so a failure is not reported as
        unawaited; set before the task can end.

        The task is queued for its engine and leaves with the others queued there (:meth:`_flush`):
        submits made one after another (a loop, ``map``) cost the engine one request, not one
        each. From a tinycoro task or asyncio code they leave on the client's IO thread's next
        turn. From plain Python, where the IO thread would take the GIL at the first submit's
        wake-up and send that one alone, they leave when the submitter blocks on the result of
        one of them (:meth:`send_queued`, on its own thread), or :data:`FLUSH_WINDOW` after
        the first of them if nothing blocks on one."""
        args_packed = pack((args, kwargs))  # a TypeError here: nothing was queued
        context = contextvars.copy_context()
        after_step = after_submitting_step()
        with self._send_lock:  # also makes "least loaded" see the submit before this one
            eid = self._pick(engine)
            if self._seam.closed:  # its IO thread is gone: a queued task would never leave
                raise OSError("the ipyparallel client of this cluster was closed")
            task = RemoteTask(self, eid, homes.new_token(), name, context, after_step)
            task._observed = observed
            with self._lock:
                live = eid in self._live
                if live:  # else its engine was lost since _pick: no one would end it
                    self._by_token[task._token] = task
                    self._by_engine[eid].add(task)
            if live:
                flush = not self._queued  # the first one queued since the last flush asks for it
                self._queued.setdefault(eid, []).append((task, fn_packed, args_packed))
        if not live:
            task._finish(None, EngineLost(f"{self._known[eid]} was lost before {task.name!r} "
                                          "could start"))
        elif flush:
            if after_step is None:  # plain Python: see the docstring
                self._seam.call_later(FLUSH_WINDOW, self._flush)
            else:
                self._seam.call_soon(self._flush)
        return task

    def send_queued(self) -> None:
        """Send what is queued now, on this thread (a submitter about to block on a result):
        by the task channels here, through ipyparallel on the IO thread."""
        if self._queued:  # a read without the lock: a submit racing with it queues a flush
            self._flush(here=True)

    def _end_queued(self, exc: BaseException) -> None:
        """End every task that is queued and not yet sent with *exc* (it never started)."""
        with self._send_lock:
            queued, self._queued = self._queued, {}
        for entries in queued.values():
            for task, _, _ in entries:
                task._finish(None, exc)

    def _flush(self, here: bool = False) -> None:
        """Send what is queued, one request per engine: on the client's IO thread, or *here*
        (:meth:`send_queued`), where the engines without a task channel are left to the IO
        thread (ipyparallel's sends belong there)."""
        with self._flush_lock:
            with self._send_lock:
                queued, self._queued = self._queued, {}
            if here:
                with self._lock:
                    channeled = set(self._channels)
            for eid, entries in queued.items():
                entries = [e for e in entries if not e[0].done()]  # e.g. its engine was lost
                if not entries:
                    continue
                if here and eid not in channeled:
                    self._seam.call_soon(partial(self._send_or_fail, eid, entries))
                else:
                    self._send_or_fail(eid, entries)

    def _send_or_fail(self, eid: int, entries: list[tuple[RemoteTask, bytes, bytes]]) -> None:
        try:
            self._send_tasks(eid, entries)
        except Exception as e:  # noqa: BLE001 - never into the IO loop; each task says why
            for task, _, _ in entries:
                task._finish(None, e)

    def _send_tasks(self, eid: int, entries: list[tuple[RemoteTask, bytes, bytes]]) -> None:
        """One ``start_tasks`` request to engine *eid* for *entries*; each task's ack (started,
        or why not) comes from the request's reply."""
        tasks = [task for task, _, _ in entries]
        if self._stopped:  # stop() ends these as cancelled: they never started
            for task in tasks:
                task._finish(None, Cancelled())
            return
        fns: dict[bytes, int] = {}  # each function once (map's items share one)
        items = [(task._token, fns.setdefault(fn_packed, len(fns)), args_packed)
                 for task, fn_packed, args_packed in entries]
        with self._lock:
            channel = self._channels.get(eid)
            if channel is not None:
                # Marked under the lock that _channel_closed takes to collect the channel's
                # tasks: a channel that ends from here on fails them too. Marked after it,
                # a goodbye read in between (the engine lives on) left them waiting forever.
                for task in tasks:
                    task.msg_id = SENT_BY_CHANNEL
        if channel is not None:
            try:
                channel.send(pickle.dumps((list(fns), items), pickle.HIGHEST_PROTOCOL))
            except OSError:
                # The connection is gone, but whether the engine said goodbye first (it lives
                # on) or died is for the reader to say: it may not have read the goodbye yet.
                # It reports the end (_channel_closed), which fails these tasks too.
                channel.shutdown()
            return

        # The reply takes the tasks out of this holder: ipyparallel keeps the request's future,
        # and the callbacks below with it, for the client's life; holding the tasks there kept
        # every handle and its outcome alive as long.
        holder = [tasks]

        def registered(future: Any) -> None:
            # Called by ipyparallel before the request is sent.
            for task in holder[0]:
                task.msg_id = future.msg_id
            future.add_done_callback(lambda f: self._started(holder.pop(), f.result()))

        try:
            with self._send_lock:
                self._seam.send_apply(engine_side.start_tasks, [list(fns), items], {}, eid,
                                      registered)
        except KeyError:  # ipyparallel saw it unregister before our watcher did
            self._engine_lost(eid, "it left the cluster")

    # -- the task channels (.channel) -------------------------------------------------------------
    def _open_channels(self, infos: list[dict]) -> None:
        """Connect to each engine's task channel; an engine whose channel did not start or
        cannot be reached keeps the ipyparallel path, and a warning says why."""
        here = socket.gethostname()
        for d in infos:
            eid = int(d["id"])
            address = d.get("channel")
            if address is None:
                why = d.get("channel_error", "the engine's tinycoro is too old for one")
                self._no_channel(eid, why)
                continue
            address = dict(address)
            if address["host"] in _WILDCARD:  # listening on every interface: its host's name
                address["host"] = d["host"]
            elif address["host"] in _LOOPBACK and d["host"] != here:
                self._no_channel(eid, f"it listens on {address['host']} of host {d['host']} "
                                      f"(set {CHANNEL_HOST_ENV} for engines on other hosts)")
                continue
            try:
                channel = ChannelClient(eid, address, self._on_channel_entry,
                                        partial(self._on_channel_closed, eid))
            except OSError as e:
                self._no_channel(eid, f"{address['host']}:{address['port']} cannot be reached "
                                      f"({type(e).__name__}: {e})")
                continue
            with self._lock:
                self._channels[eid] = channel

    def _no_channel(self, eid: int, why: str) -> None:
        log.warning("tinycoro.cluster: %s has no task channel (%s); its tasks go through "
                    "ipyparallel", self.engine_name(eid), why)

    @property
    def channels(self) -> dict[int, str]:
        """The engines whose tasks take the task channel, with its address; the others go
        through ipyparallel's apply requests."""
        with self._lock:
            return {eid: c.where for eid, c in sorted(self._channels.items())}

    def _on_channel_entry(self, entry: tuple) -> None:
        """An ack or an outcome from an engine's channel (its reader thread)."""
        if entry[0] == ACK:
            _, tokens, replies = entry
            for token, reply in zip(tokens, replies):
                task = self._by_token.get(token)
                if task is not None:
                    task._acked(reply)
        elif entry[0] == OUTCOME:
            _, token, packed = entry
            task = self._by_token.get(token)
            if task is None:  # ended here meanwhile (lost, cancelled by stop)
                return
            try:
                outcome = pickle.loads(packed)
            except Exception as e:  # noqa: BLE001 - e.g. its class does not exist here
                task._finish(None, TypeError(
                    f"the result of {task.name!r} from {self.engine_name(task.engine)} could "
                    f"not be unpacked here: {e!r}"))
                return
            task._resolve(outcome)

    def _on_channel_closed(self, eid: int, why: str) -> None:
        with self._lock:
            channel = self._channels.get(eid)
        if channel is not None:
            self._channel_closed(channel, why)

    def _channel_closed(self, channel: ChannelClient, why: str) -> None:
        """*channel* ended under us. Without the engine's goodbye (``channel.said_bye``: a
        killed engine cannot send it) its engine counts as lost (:meth:`_engine_lost`): the
        tasks it carried fail with EngineLost, and the user who sees that error must find the
        engine gone everywhere at once, not only once the pid watcher or the controller's
        unregistration also speaks (a ``%px`` run right after still targeted it). With it,
        the engine lives on (its scheduler stopped: ``%tinycoro restart``): the tasks the
        channel carried end with Cancelled, and its later tasks go through ipyparallel."""
        with self._lock:
            if self._channels.get(channel.eid) is not channel:
                return
            stopped = self._stopped
            if stopped or channel.said_bye:
                del self._channels[channel.eid]
            tasks = [t for t in self._by_engine.get(channel.eid, ())
                     if t.msg_id == SENT_BY_CHANNEL]
        if stopped:  # stop() ends the tasks itself
            channel.close()
            return
        if channel.said_bye:
            log.warning("tinycoro.cluster: the task channel of %s closed (%s); its tasks go "
                        "through ipyparallel from now on", self.engine_name(channel.eid), why)
            # Not EngineLost: the engine lives on (and stays in ``engines``). Its scheduler's
            # stop cancelled them there; their outcomes may not have come home before the
            # goodbye, and when they did, they were Cancelled too.
            for t in tasks:
                t._finish(None, Cancelled(
                    f"{self.engine_name(channel.eid)}'s scheduler stopped ({t.name!r} was "
                    "cancelled there, or never started)"))
            channel.close()  # from its own reader thread too: close() does not wait for itself
            return
        log.warning("tinycoro.cluster: the task channel of %s closed (%s); the engine counts "
                    "as lost", self.engine_name(channel.eid), why)
        self._engine_lost(channel.eid, f"its task channel closed: {why}")

    def _close_channels(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    @staticmethod
    def _started(tasks: list[RemoteTask], reply: Any) -> None:
        """The engine's reply to a request of submits: per task, started or why not; an
        exception (the request failed as a whole, or the engine died under it) for all."""
        if isinstance(reply, list) and len(reply) == len(tasks):
            for task, one in zip(tasks, reply):
                task._acked(one)
        else:
            for task in tasks:
                task._acked(reply)

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
        packed = _ship(fn)  # packed once, not once per item
        name = _name_of(fn)
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
                t = self._submit(packed, (item,), {}, None, name, observed=True)
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
        serve_here = pack(engine_side.serve_here)
        servers = [self._submit(serve_here, (handler, host, port, contexts), {}, e.id,
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

    # -- what a RemoteTask asks of its cluster ----------------------------------------------------
    def cancel_remote(self, task: RemoteTask) -> None:
        """Ask *task*'s engine to cancel it (over its control channel; never waits)."""
        try:
            self._control(task.engine, {"op": "cancel", "token": task._token})
        except Exception:  # noqa: BLE001 - the engine is gone: EngineLost ends the task
            log.debug("tinycoro.cluster: cancel of %r not sent", task, exc_info=True)

    def submitted(self) -> dict[int, tuple[RemoteTask, ...]]:
        """The tasks submitted through this handle that have not ended, by engine id, oldest
        first: known here at once, also before their engine has started them (which
        :meth:`tasks` cannot see yet). ``task.stage`` says how far each got."""
        with self._lock:
            return {eid: tuple(sorted(ts, key=lambda t: t._seq))
                    for eid, ts in sorted(self._by_engine.items()) if ts}

    def forget(self, task: RemoteTask) -> None:
        """*task* has ended: no message about it is routed any more."""
        with self._lock:
            self._by_token.pop(task._token, None)
            self._by_engine.get(task.engine, set()).discard(task)

    def engine_name(self, eid: int) -> str:
        """``engine 1 (host:pid)``, also for an engine lost since."""
        info = self._known.get(eid)
        return str(info) if info is not None else f"engine {eid}"

    def engine_lost(self, eid: int, why: str) -> None:
        """A reply to one of *eid*'s requests says it died: :meth:`_engine_lost`."""
        self._engine_lost(eid, why)

    # -- stats -----------------------------------------------------------------------------------
    def _control(self, eid: int, content: dict) -> Any:
        with self._send_lock:
            return self._seam.send_control(eid, CONTROL_REQUEST, content)

    def stats(self, timeout: float = STATS_TIMEOUT) -> dict[int, SchedulerStats]:
        """Each live engine's ``SchedulerStats``, by engine id. The engines answer on their
        control thread, so a busy engine (a long ``%px`` cell, say) answers at once; one that
        does not answer within *timeout* seconds is left out. RuntimeError once stopped."""
        return {eid: load.stats for eid, load in self.load(timeout).items()}

    def load(self, timeout: float = STATS_TIMEOUT) -> dict[int, EngineLoad]:
        """Each live engine's stats and process CPU time, by engine id; answered like
        :meth:`stats` (one probe). For dashboards: a remote host's ``/proc`` is out of reach."""
        return {eid: EngineLoad(stats_from_dict(c["stats"]), c["cpu_seconds"],
                                bool(c.get("gil", True)))
                for eid, c in self._probe("stats", timeout).items()}

    def tasks(self, timeout: float = STATS_TIMEOUT) -> dict[int, tuple[TaskInfo, ...]]:
        """Each live engine's live tasks (``Scheduler.tasks()``: id, name, context, state, what
        it waits on, age), by engine id; answered like :meth:`stats`, never behind a busy
        shell."""
        return {eid: tasks_from_list(c["tasks"]) for eid, c in self._probe("tasks", timeout).items()}

    def _probe(self, op: str, timeout: float) -> dict[int, dict]:
        """Ask every live engine *op* on its control channel; the ``ok`` replies by engine."""
        with self._lock:
            self._check_running()
            ids = sorted(self._live)
        futures = {}
        for eid in ids:
            try:
                futures[eid] = self._control(eid, {"op": op})
            except KeyError:  # unregistered meanwhile
                pass
        # Wait for every reply, the timeout, or stop(), whichever comes first: a probe in
        # flight when the cluster stops (a dashboard's) must say so, not wait out its timeout
        # and then report a running cluster without its engines.
        # Each reply checks whether it was the last: the futures say so themselves, no count.
        wake = threading.Event()

        def replied(_: Any) -> None:
            if all(f.done() for f in futures.values()):
                wake.set()

        if not futures:
            wake.set()
        for fut in futures.values():
            fut.add_done_callback(replied)
        with self._lock:
            self._probes.add(wake)
        try:
            wake.wait(timeout)
        finally:
            with self._lock:
                self._probes.discard(wake)
        with self._lock:
            self._check_running()
        out: dict[int, dict] = {}
        for eid, fut in futures.items():
            if not fut.done() or fut.exception() is not None:  # no answer in time: left out
                continue
            msg = fut.result()
            if msg["content"].get("status") == "ok":
                out[eid] = msg["content"]
        return out

    # -- what comes back (the ipyparallel client's IO thread) ---------------------------------
    def _on_iopub(self, frames: list) -> None:
        try:
            msg = self._seam.decode(frames)
        except Exception:  # noqa: BLE001 - as ipyparallel does with a bad message
            log.error("tinycoro.cluster: invalid IOPub message", exc_info=True)
            return
        kind = msg["header"]["msg_type"]
        if kind == "data_message" and RESULT_KEY in msg["content"].get("keys", ()):
            self._on_outcomes(msg["buffers"])  # several tasks' outcomes, whatever the parent
            return
        # A task's output comes under a parent of its own, named by its token
        # (messages.task_parent); the requests' own messages (status) under the request's.
        msg_id = msg["parent_header"].get("msg_id")
        task = self._by_token.get(msg_id) if msg_id else None
        if task is None and homes.is_token(msg_id):  # a task that ended: its children's output
            homes.route(msg_id, kind, msg["content"])  # goes home; never to ipyparallel, which
            return  # would keep it in Client.metadata for the client's life
        if task is None or kind == "status":  # ipyparallel's own bookkeeping
            self._seam.pass_on(msg)
            if task is None:
                return
        try:
            if kind == "stream":
                task._in_submitter(write_output, msg["content"]["name"], msg["content"]["text"])
            elif kind in ("display_data", "update_display_data"):
                task._in_submitter(display_output, msg["content"], kind == "update_display_data")
        except Exception:  # noqa: BLE001 - never into ipyparallel's IO loop
            log.error("tinycoro.cluster: handling %s for %r failed", kind, task, exc_info=True)

    def _on_outcomes(self, buffers: list) -> None:
        """An engine's ``data_message`` of outcomes: each one's buffers after the one before
        (``engine.Agent._send_outcomes``), each naming its task by token. An outcome for a
        task that has ended here (lost, or stopped) is dropped."""
        while buffers:
            try:
                data, buffers = deserialize_object(buffers)
                token, outcome = data[RESULT_KEY]
            except Exception:  # noqa: BLE001 - never into ipyparallel's IO loop
                log.error("tinycoro.cluster: an outcome did not unpack", exc_info=True)
                return  # where the next one starts is lost with it
            task = self._by_token.get(token)
            if task is None:
                continue
            try:
                task._resolve(outcome)
            except Exception:  # noqa: BLE001 - the other outcomes still go to their tasks
                log.error("tinycoro.cluster: the outcome of %r failed", task, exc_info=True)

    def _on_registration(self, event: dict) -> None:
        if event.get("event") == "unregister":
            self._engine_lost(int(event["id"]), "it left the cluster")

    def _pid_exited(self, eid: int) -> None:
        self._engine_lost(eid, "its process exited")

    def _engine_lost(self, eid: int, why: str) -> None:
        """Engine *eid* is lost (*why*): the one place that says so, whichever witness saw it
        first (its task channel closing, the pid watcher, the controller's unregistration, a
        send that found it gone). It leaves ``engines`` (and so ``%px``'s targets, the probes
        and the next submits) and its channel goes, all before any of its tasks fails with
        EngineLost; the other engines carry on. Idempotent: the later witnesses find nothing."""
        with self._lock:
            info = self._live.pop(eid, None)
            channel = self._channels.pop(eid, None)
            tasks = list(self._by_engine.get(eid, ()))
        if channel is not None:
            channel.close()  # from its own reader thread too: close() does not wait for itself
        if info is None and not tasks:
            return
        for t in tasks:
            t._finish(None, t._lost(why))

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
            probes = list(self._probes)
        for wake in probes:  # they raise: the cluster is stopped
            wake.set()
        self._end_queued(Cancelled())  # never sent (e.g. submitted by this very step)
        for t in pending:
            t.cancel()
        deadline = time.monotonic() + timeout
        for t in pending:
            t._finished.wait(max(0.0, deadline - time.monotonic()))
        for t in pending:
            t._finish(None, Cancelled())
        self._close_channels()  # after the grace: the cancelled tasks' outcomes come by them
        if self._watcher is not None:
            self._watcher.stop()
        self._seam.remove_registration(self._on_registration)
        if self._owned is None and not self._seam.closed:
            # A connected client lives on, and its tasks' children may go on printing.
            try:
                self._seam.hook_iopub(partial(_route_after_stop, self._seam), timeout=10.0)
            except RuntimeError:  # its IO thread did not answer: stop() must still end
                log.warning("tinycoro.cluster: the client's IO thread did not answer at stop")
        else:
            self._seam.unhook_iopub()
        registry.unclaim(self.client, self)
        if self._owned is not None:
            atexit.unregister(self.stop)
            self._owned.stop(self.client, list(self._known.values()))
        # Last: every sample the dashboards' refresher took since the start of stop() found
        # the cluster stopped, so it has shown "stopped" and ended, or does so now; stopping it
        # first could end it in the middle of a tick that still saw the cluster running.
        with self._dashboard_lock:
            refresher = self._refresher
        if refresher is not None:
            refresher.stop()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _name_of(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _ship(fn: Any) -> bytes:
    """*fn* packed for the engines (a TypeError naming what does not pickle), its code noted
    so that its frames in a remote traceback name their cell and line (:mod:`.shipped`)."""
    packed = pack_function(fn)
    shipped.note(fn)
    return packed


def _route_after_stop(seam: ClientSeam, frames: list) -> None:
    """A stopped handle's IOPub hook on a client that lives on (a connected cluster): what its
    tasks' children still print goes home (:mod:`.homes`), never into ipyparallel's metadata;
    every other message goes on to ipyparallel's handler. Holds the seam, not the cluster."""
    try:
        msg = seam.decode(frames)
    except Exception:  # noqa: BLE001 - as ipyparallel does with a bad message
        log.error("tinycoro.cluster: invalid IOPub message", exc_info=True)
        return
    msg_id = msg["parent_header"].get("msg_id")
    if homes.is_token(msg_id):
        homes.route(msg_id, msg["header"]["msg_type"], msg["content"])
    else:
        seam.pass_on(msg)


# -- starting and connecting --------------------------------------------------------------------
def latest() -> Cluster | None:
    """The cluster this process started or connected most recently that still runs; if none
    runs, the one stopped last (so that a tool can say it is stopped); None before any.

    The ``%tinycoro cluster`` magics act on it, whether it was made by a magic or by
    :func:`start`/:func:`connect` in a cell."""
    found = registry.latest()
    assert found is None or isinstance(found, Cluster)  # only a Cluster records itself there
    return found


def start(n: int | None = None, *, contexts: int = 1, timeout: float = START_TIMEOUT,
          progress: bool = True) -> Cluster:
    """A local ipyparallel cluster of *n* engines (default ``os.cpu_count()``), each an IPython
    kernel with the tinycoro extension preloaded and a scheduler of *contexts* contexts; blocks
    until every engine is up (at most *timeout* seconds; the error names the engines that were
    not). *progress*: show engines as they come up (a bar in a notebook, a line per engine on
    stderr elsewhere). ``stop()`` ends every process.

    Refused (:class:`NestedCluster`, a RuntimeError) inside an engine, or in a process an
    engine of a cluster started here runs: an engine starting a cluster of its own is how a
    chain of clusters begins."""
    refuse_nested_start()  # first: before anything else is checked, let alone spawned
    n = check_int("n", (os.cpu_count() or 1) if n is None else n, min=1)
    contexts = check_int("contexts", contexts, min=1)
    internals.check_version("ipyparallel", internals.IPYPARALLEL)  # before any process starts
    shown = StartProgress(n, enabled=progress)
    try:
        seam, owned = launch(n, contexts, timeout, shown)
        client = seam.client
        shown.doing("setting up tinycoro on every engine")
        try:
            cluster = Cluster(client, owned=owned, timeout=timeout, seam=seam)
        except BaseException:
            owned.stop(client, [])
            raise
    except BaseException as e:
        shown.finish(f"did not start ({type(e).__name__})")
        raise
    shown.finish(f"{counted(n, 'engine')} up")
    return cluster


def connect(client: Any, *, timeout: float = START_TIMEOUT) -> Cluster:
    """Use the engines of an existing cluster (an ``ipyparallel.Client``; e.g. one started with
    ``ipcluster start`` on several hosts). Engines that did not preload the extension load it
    now (with their default context count). A client carries one live cluster: connecting it
    again before the first one's ``stop()`` is refused (RuntimeError)."""
    if not isinstance(client, ipp.Client):
        raise TypeError(f"connect takes an ipyparallel.Client, got {client!r}")
    return Cluster(client, timeout=timeout)
