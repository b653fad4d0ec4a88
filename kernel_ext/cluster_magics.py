"""``%tinycoro cluster start | connect | status | tasks | dashboard | stop``: a tinycoro cluster
on ipyparallel engines, from a notebook.

The magics act on the kernel's most recent cluster, made here or by ``tc.cluster.start`` /
``tc.cluster.connect`` in a cell. ``start`` and ``connect`` make one and bind it to ``cluster``
in the user's namespace (for ``cluster.submit``, ``cluster.map``, ``cluster.serve``).
ipyparallel's ``%px`` magics address all engines of that most recent cluster, whichever way it
was made (``ClusterCommands.follow``, after every cell). The engines preload the tinycoro
extension and have ``tc`` bound, so a ``%px`` cell may ``await`` tinycoro awaitables as a
notebook cell does here.
``stop`` stops the engines of a cluster started here and lets go of a connected one (closing
the client made for it); so does unloading the extension.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments

from tinycoro.core.stats import COLUMNS, counted, format_stats, legend, wrap

from .textout import format_tasks

__all__ = ["ACTIONS", "ClusterCommands", "format_cluster_status", "format_submitted"]

ACTIONS = ("start", "connect", "status", "tasks", "dashboard", "stop")
NAME = "cluster"  # the user-namespace name start and connect bind the cluster to
_NEEDS = "pip install 'tinycoro[cluster]' (or pip install ipyparallel)"


@magic_arguments(name="tinycoro cluster")
@argument(
    "action", nargs="?", choices=ACTIONS,
    help="start: a local cluster of N engines; connect: an existing ipyparallel cluster; "
    "status: per-engine load and process CPU; tasks: the engines' live tasks; "
    "dashboard: a live widget, grouped per engine; stop: stop the engines (a connected "
    "cluster: disconnect)",
)
@argument("-n", "--engines", type=int, default=None,
          help="start: number of engines (default: the number of CPU cores)")
@argument("--contexts", type=int, default=None, help="start: contexts per engine (default: 1)")
@argument("--profile", default=None, help="connect: the ipyparallel profile of the cluster")
@argument("--file", default=None,
          help="connect: the cluster's connection file (ipcontroller-client.json)")
@argument("-h", "--help", action="store_true", help="show this help")
def cluster_arguments(line: str) -> None:
    """Start, connect to, inspect or stop the notebook's tinycoro cluster (ipyparallel)."""


PARSER = cluster_arguments.parser
_OPTIONS = {"engines": ("start", "-n"), "contexts": ("start", "--contexts"),
            "profile": ("connect", "--profile"), "file": ("connect", "--file")}


def _usage() -> str:
    # magic_arguments formats help as an RST literal block for %tinycoro? ("::")
    return " ".join(PARSER.format_usage().removeprefix("::").split())


def _engine_head(engine: Any, cpu_seconds: float | None = None) -> str:
    """``engine 0 · host:pid · process CPU 1.2 s so far`` (as the engine itself reports)."""
    head = f"engine {engine.id} · {engine.host}:{engine.pid}"
    return head if cpu_seconds is None else head + f" · process CPU {cpu_seconds:.1f} s so far"


def format_cluster_status(engines: Sequence[Any], loads: dict[int, Any], owned: bool) -> str:
    """Plain text: one block per engine (its head line, then the local status table of its
    scheduler), from ``cluster.load()``; what ``%tinycoro cluster status`` prints."""
    stats = {eid: load.stats for eid, load in loads.items()}
    contexts = sum(len(s.contexts) for s in stats.values())
    how = "started here" if owned else "connected"
    lines = [f"tinycoro cluster: {counted(len(engines), 'engine')}, "
             f"{counted(contexts, 'context')} ({how})"]
    for e in sorted(engines, key=lambda e: e.id):
        load = loads.get(e.id)
        lines.append(_engine_head(e, load.cpu_seconds if load is not None else None))
        s = stats.get(e.id)
        if s is None:
            lines.append("  (no stats yet)")
            continue
        lines += ["  " + line for line in format_stats(s, legend_too=False).splitlines()]
    lines += legend(COLUMNS[1:])
    lines += wrap(
        "busy is per context and process CPU is the engine's, both shares of the last second: "
        "contexts of one engine share its GIL, so their busy can add up to more than its CPU "
        "(%tinycoro cluster dashboard)"
    )
    return "\n".join(lines)


def format_submitted(mine: dict[int, Sequence[Any]]) -> str:
    """One line: how many tasks this kernel submitted that have not ended, by stage and engine
    (from ``cluster.submitted()``)."""
    everyone = [t for ts in mine.values() for t in ts]
    if not everyone:
        return "tinycoro cluster: nothing submitted from this kernel is running"
    stages: dict[str, int] = {}
    for t in everyone:
        stages[t.stage] = stages.get(t.stage, 0) + 1
    how = ", ".join(f"{n} {stage}" for stage, n in sorted(stages.items()))
    where = ", ".join(f"{len(ts)} on engine {eid}" for eid, ts in sorted(mine.items()))
    return f"tinycoro cluster: {len(everyone)} submitted from this kernel, not ended ({how}; {where})"


class ClusterCommands:
    """What ``%tinycoro cluster`` does, on the kernel's most recent cluster
    (``tc.cluster.latest()``): one made by these magics or by ``tc.cluster.start``/``connect`` in
    a cell, whichever came last."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.last_dashboard: Any = None  # the widget %tinycoro cluster dashboard displayed last
        self._made_client: Any = None  # the Client `connect` made here (closed at stop)
        self._px: Any = None  # ipyparallel's ParallelMagics registered for %px
        self._px_cluster: Any = None  # the cluster %px addresses
        self._px_lost: set[int] = set()  # its engines %px has said are lost

    @property
    def cluster(self) -> Any:
        """The cluster these magics act on (None if there is none, or `stop` let go of it)."""
        tcc = sys.modules.get("tinycoro.cluster")  # no import: no cluster without it
        return tcc.latest() if tcc is not None else None

    def run(self, argv: list[str]) -> Any:
        try:
            args = PARSER.parse_args(argv)
        except UsageError as e:
            raise UsageError(f"%tinycoro cluster: {e}\n{_usage()}") from None
        if args.help:
            print(PARSER.format_help().removeprefix("::\n\n"), end="")
            return None
        if args.action is None:
            raise UsageError(f"%tinycoro cluster: which action?\n{_usage()}")
        for dest, (action, flag) in _OPTIONS.items():
            if getattr(args, dest) is not None and args.action != action:
                raise UsageError(f"%tinycoro cluster: {flag} goes with {action}, not {args.action}")
        return getattr(self, f"_{args.action}")(args)

    # -- start / connect / stop -----------------------------------------------------------------
    def _check_none(self, action: str) -> None:
        cluster = self.cluster
        if cluster is not None and not cluster.stopped:
            raise UsageError(
                f"%tinycoro cluster {action}: a cluster is already "
                f"{'running' if cluster.owned else 'connected'} (%tinycoro cluster stop first)"
            )

    def _start(self, args: argparse.Namespace) -> None:
        self._check_none("start")
        for flag, value in (("-n", args.engines), ("--contexts", args.contexts)):
            if value is not None and value < 1:
                raise UsageError(f"%tinycoro cluster start: {flag} must be a positive int, got {value}")
        tcc = _cluster_module()
        kwargs = {} if args.contexts is None else {"contexts": args.contexts}
        try:
            cluster = tcc.start(args.engines, **kwargs)
        except (ValueError, tcc.NestedCluster) as e:  # bad input; or this is an engine
            raise UsageError(f"%tinycoro cluster start: {e}") from None
        self._adopt(cluster)
        print(self._describe("started"))

    def _connect(self, args: argparse.Namespace) -> None:
        self._check_none("connect")
        if args.profile is not None and args.file is not None:
            raise UsageError("%tinycoro cluster connect: give --profile or --file, not both")
        tcc = _cluster_module()
        import ipyparallel

        if args.file is not None and not os.path.isfile(args.file):
            raise UsageError(f"%tinycoro cluster connect: no connection file {args.file!r}")
        kw = {} if args.profile is None else {"profile": args.profile}
        try:  # a connection file goes as connection_info (ipyparallel 8+ ignores url_file=)
            client = ipyparallel.Client(args.file, **kw)
        except (OSError, ValueError) as e:  # no such profile, no controller: say which
            raise UsageError(f"%tinycoro cluster connect: {type(e).__name__}: {e}") from None
        try:
            cluster = tcc.connect(client)
        except BaseException:
            client.close()
            raise
        self._made_client = client
        self._adopt(cluster)
        print(self._describe("connected to"))

    def _adopt(self, cluster: Any) -> None:
        self.shell.user_ns[NAME] = cluster
        self._activate_px(cluster)

    def _describe(self, what: str) -> str:
        engines = self.cluster.engines
        where = ", ".join(f"{e.id}: {e.host}:{e.pid}" for e in engines)
        return (
            f"tinycoro cluster {what}: {counted(len(engines), 'engine')} ({where}); `{NAME}` is "
            "the cluster, %px runs a cell on every engine"
        )

    def _activate_px(self, cluster: Any) -> None:
        """Register ipyparallel's ``%px`` family for all engines of the cluster's client. The
        engines have ``tc`` bound (the cluster's setup does it), so ``%px await tc.sleep(0.1)``
        works at once, as a cell does here. The view's targets are ``"all"``, as ipyparallel's
        own ``activate()`` makes them (a view of the engines there are now would break on the
        first engine lost), and each run goes to the engines that live then (:meth:`_px_targets`)."""
        from tinycoro.cluster import internals

        self._deactivate_px()
        view = cluster.client.direct_view("all")
        view.block = True
        self._px = internals.register_px(self.shell, view, lambda: self._px_targets(cluster))
        self._px_cluster = cluster
        self._px_lost = set()

    def _px_targets(self, cluster: Any) -> list[int]:
        """The engines a ``%px`` runs on now: the cluster's live ones that the client still
        lists; says once which engines are lost (UsageError when none is left)."""
        live = {e.id for e in cluster.engines} & set(cluster.client.ids)
        lost = sorted(set(cluster.known_engines) - live)
        new = [eid for eid in lost if eid not in self._px_lost]
        if new:
            self._px_lost.update(new)
            gone = ", ".join(cluster.engine_name(eid) for eid in new)
            print(f"tinycoro: {gone} {'is' if len(new) == 1 else 'are'} lost; %px runs on "
                  f"{counted(len(live), 'engine')} ({', '.join(map(str, sorted(live)))})",
                  file=sys.stderr)
        if not live:
            raise UsageError("%px: every engine of the cluster is lost "
                             "(%tinycoro cluster stop, then start or connect a new one)")
        return sorted(live)

    def follow(self) -> None:
        """Point ``%px`` at the kernel's most recent cluster, however it was made (called
        after every cell): ipyparallel registers ``%px`` only for the first client of a
        kernel, so without this a cluster made by ``tc.cluster.start`` in a cell after an
        earlier one stopped would leave ``%px`` on the dead one. Once the cluster stops,
        ``%px`` goes with it. Quiet and cheap when nothing changed; a failure is reported on
        stderr, never raised into the cell that just ran."""
        cluster = self.cluster
        if cluster is self._px_cluster and (cluster is None or not cluster.stopped):
            return
        try:
            if cluster is None or cluster.stopped:
                self._deactivate_px()
            else:
                self._activate_px(cluster)
        except Exception as e:  # noqa: BLE001 - the cell already ran: say it, do not raise
            print(f"tinycoro: %px does not address the cluster ({type(e).__name__}: {e})",
                  file=sys.stderr)

    def _deactivate_px(self) -> None:
        px, self._px, self._px_cluster = self._px, None, None
        if px is not None:
            from tinycoro.cluster import internals

            internals.unregister_px(self.shell, px)

    def _stop(self, args: argparse.Namespace | None = None) -> None:
        if self.cluster is None:
            print("tinycoro: no cluster is running")
            return
        print(f"tinycoro cluster {self.close()}")

    def close(self) -> str:
        """Stop the cluster's dashboards, ``%px`` and, if it was started (not connected), its
        engines; a connected cluster is let go of (the client `connect` made here is closed).
        Say what was done."""
        cluster = self.cluster
        if cluster is None:
            self._deactivate_px()
            return "none"
        self._deactivate_px()
        if self.shell.user_ns.get(NAME) is cluster:
            del self.shell.user_ns[NAME]
        cluster.stop()  # also ends its dashboards' refresher; a no-op if a cell stopped it
        from tinycoro.cluster.registry import let_go

        let_go(cluster)  # done with it: the magics see no cluster now
        if cluster.owned:
            return "stopped: no engine left"
        if cluster.client is self._made_client:
            self._made_client = None
            cluster.client.close()  # the cluster itself keeps running: it is not ours
        return "disconnected"

    # -- status / tasks / dashboard -------------------------------------------------------------
    def _need(self, action: str) -> Any:
        cluster = self.cluster
        if cluster is None:
            raise UsageError(
                f"%tinycoro cluster {action}: no cluster (%tinycoro cluster start or connect, "
                "or tc.cluster.start in a cell)"
            )
        if cluster.stopped:
            raise UsageError(
                f"%tinycoro cluster {action}: the cluster is stopped (cluster.stop() ran); "
                "%tinycoro cluster start or connect a new one"
            )
        return cluster

    def _status(self, args: argparse.Namespace) -> None:
        cluster = self._need("status")
        try:
            loads = dict(cluster.load())
        except (OSError, RuntimeError) as e:  # cluster.stop() ran in a cell: its client closed
            raise UsageError(
                f"%tinycoro cluster status: the cluster does not answer ({e}); "
                "%tinycoro cluster stop, then start or connect again"
            ) from None
        print(format_cluster_status(cluster.engines, loads, cluster.owned))

    def _tasks(self, args: argparse.Namespace) -> None:
        cluster = self._need("tasks")
        # What this kernel submitted first: known here at once, while an engine may not have
        # started a task submitted a moment ago (its request is still on the way).
        mine = cluster.submitted()
        try:  # answered on the engines' control thread, like stats: never behind a busy shell
            tasks = cluster.tasks()
        except (OSError, RuntimeError) as e:
            raise UsageError(f"%tinycoro cluster tasks: the cluster does not answer ({e})") from None
        print(format_submitted(mine))
        for engine in cluster.engines:
            print(_engine_head(engine))
            infos = tasks.get(engine.id)
            # Ours that its answer does not list: on the way, or started a moment before
            # the probe and not yet on one of its contexts.
            listed = {i.id for i in infos or ()}
            unlisted = [t for t in mine.get(engine.id, ()) if t.remote_id not in listed]
            if unlisted:
                print(f"  {len(unlisted)} of ours not in its list yet: "
                      + ", ".join(f"{t.name} ({t.stage})" for t in unlisted))
            if infos is None:
                print("  (no answer: the engine did not reply in time)")
                continue
            print("\n".join("  " + line for line in format_tasks(infos, ()).splitlines()))

    def _dashboard(self, args: argparse.Namespace) -> None:
        """Display the cluster dashboard where the magic stands (any line of a cell)."""
        cluster = self._need("dashboard")
        try:
            board = cluster.dashboard()
        except ImportError as e:
            raise UsageError(f"%tinycoro cluster dashboard: {e}") from None
        from IPython.display import display

        self.last_dashboard = board  # for code (and tests) that want the widget itself
        display(board)


def _cluster_module() -> Any:
    try:
        import tinycoro.cluster as tcc
    except ImportError as e:
        raise UsageError(f"%tinycoro cluster needs ipyparallel: {_NEEDS} ({e})") from None
    return tcc
