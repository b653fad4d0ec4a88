"""Every name of ipyparallel and ipykernel the cluster uses that is not their public API, in one
place, checked before it is used.

``tc.cluster`` routes a task's output and outcome home by hooking an ``ipyparallel.Client``'s
IOPub stream, sends its requests straight to one engine's socket, answers probes on an engine
kernel's control channel and publishes outcomes from an engine under ipyparallel's own data
identity. None of that is public API of either project, so it lives here and nowhere else:

* the supported ranges (:data:`IPYPARALLEL`, :data:`IPYKERNEL`) and the checks that a client
  (:func:`check_client`) and an engine's kernel (:func:`check_kernel`) have every attribute
  used, run at ``start``/``connect`` and at engine set-up: an unsupported version fails there
  with an error naming the range, never with an ``AttributeError`` in the middle of a run;
* :class:`ClientSeam`, the client-side operations built on them;
* the engine-side ones (:func:`add_control_handler`, :func:`on_iopub_thread`,
  :func:`set_task_parents`, :func:`datapub_ident`), the local
  launchers' pids (:func:`launcher_pids`) and ``%px`` (:func:`register_px`,
  :func:`unregister_px`).

``tests/test_cluster_internals.py`` checks this module against the installed versions.
"""

from __future__ import annotations

import threading
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

from .errors import UnsupportedVersion

# [low, high): the versions these names were read from and are tested with.
IPYPARALLEL = ((9, 2), (10, 0))
# ipykernel 7.4 is the first whose shell has set_thread_parent: an engine tags each task's
# output and outcome with that task's own parent header, so submits can share a request.
IPYKERNEL = ((7, 4), (8, 0))

# Attributes of ipyparallel.Client instances (set in __init__) and of the class.
CLIENT_ATTRIBUTES = ("_engines", "_mux_stream", "_control_stream", "_iopub_stream", "_io_loop",
                     "_registration_callbacks", "_closed", "session")
CLIENT_METHODS = ("_send", "send_apply_request", "_dispatch_iopub")
# Attributes of an ipyparallel engine's kernel (ipyparallel's IPythonKernel over ipykernel's).
KERNEL_ATTRIBUTES = ("control_handlers", "session", "iopub_socket", "engine_id", "get_parent",
                     "shell", "_shell_parent")


def _release(package: str) -> tuple[int, ...]:
    try:
        text = version(package)
    except PackageNotFoundError:
        return ()
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _span(bounds: tuple[tuple[int, ...], tuple[int, ...]]) -> str:
    low, high = bounds
    return f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def check_version(package: str, bounds: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """Raise :class:`UnsupportedVersion` unless the installed *package* is in *bounds*."""
    got = _release(package)
    if not (bounds[0] <= got < bounds[1]):
        shown = version(package) if got else "not installed"
        raise UnsupportedVersion(
            f"tinycoro.cluster supports {package}{_span(bounds)} (it uses parts of it that are not "
            f"public API); found {shown}: pip install '{package}{_span(bounds)}'"
        )


def _check_attributes(obj: Any, names: tuple[str, ...], what: str, package: str,
                      bounds: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    missing = [n for n in names if not hasattr(obj, n)]
    if missing:
        raise UnsupportedVersion(
            f"{what} has no {', '.join(missing)}: tinycoro.cluster needs {package}{_span(bounds)}"
        )


def check_client(client: Any) -> None:
    """The installed ipyparallel is supported and *client* has every private name used here."""
    check_version("ipyparallel", IPYPARALLEL)
    check_client_names(client)


def check_client_names(client: Any) -> None:
    """*client* has every private name used here (the version is checked on its own: ``start``
    checks it before any process starts, long before there is a client)."""
    _check_attributes(client, CLIENT_ATTRIBUTES + CLIENT_METHODS, "the ipyparallel.Client",
                      "ipyparallel", IPYPARALLEL)
    if not hasattr(type(client)._dispatch_iopub, "__wrapped__"):
        raise UnsupportedVersion(
            "ipyparallel.Client._dispatch_iopub is not a decorated method here: tinycoro.cluster "
            f"needs ipyparallel{_span(IPYPARALLEL)}"
        )


def check_kernel(kernel: Any) -> None:
    """On an engine: the installed ipykernel is supported and *kernel* has what is used here."""
    check_version("ipykernel", IPYKERNEL)
    _check_attributes(kernel, KERNEL_ATTRIBUTES, "this engine's kernel", "ipykernel", IPYKERNEL)
    _check_attributes(kernel.iopub_socket, ("schedule",), "this engine's IOPub socket",
                      "ipyparallel", IPYPARALLEL)
    _check_attributes(kernel.shell, ("set_thread_parent",), "this engine's shell", "ipykernel",
                      IPYKERNEL)


# -- the client side ------------------------------------------------------------------------------
class ClientSeam:
    """The private parts of one ``ipyparallel.Client`` that the cluster client uses, by name.

    Its names are checked at construction (:func:`check_client_names`); the version is the
    caller's to check first, once (:func:`check_version`). Sending is not thread-safe in
    jupyter_client's Session (its message counter is not locked): callers hold their own lock.
    """

    def __init__(self, client: Any) -> None:
        check_client_names(client)
        self.client = client
        # ipyparallel's IOPub handler, undecorated: the decorator would unpack frames we
        # already unpacked.
        self._dispatch = type(client)._dispatch_iopub.__wrapped__

    @property
    def closed(self) -> bool:
        return bool(self.client._closed) or self.client._io_loop is None

    def engine_ident(self, eid: int) -> bytes:
        """The zmq identity of engine *eid* (its uuid); KeyError once it unregistered."""
        return self.client._engines[eid].encode("utf8")

    def send_apply(self, fn: Callable[..., Any], args: list, kwargs: dict, eid: int,
                   registered: Callable[[Any], None]) -> None:
        """An ``apply_request`` to engine *eid* alone (what a DirectView sends); *registered*
        gets the request's future before the request leaves."""
        client = self.client
        client.send_apply_request(client._mux_stream, fn, args=args, kwargs=kwargs,
                                  ident=self.engine_ident(eid), message_future_hook=registered)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Call *fn* on the client's IO thread, after what is queued there (first in, first
        out), as ipyparallel hands it every send. Any thread."""
        self.client._io_loop.add_callback(fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Call *fn* on the client's IO thread *delay* seconds from now. Any thread (the timer
        is set on that thread: its loop's timers are not thread-safe)."""
        loop = self.client._io_loop
        self.call_soon(lambda: loop.call_later(delay, fn))

    def send_control(self, eid: int, msg_type: str, content: dict) -> Any:
        """A request on engine *eid*'s control channel; its reply's future."""
        client = self.client
        return client._send(client._control_stream, msg_type, content=content,
                            ident=self.engine_ident(eid))

    def decode(self, frames: list) -> dict:
        """A message from the IOPub stream, unpacked as ipyparallel does."""
        session = self.client.session
        _, msg = session.feed_identities(frames, copy=False)
        return session.deserialize(msg, content=True, copy=False)

    def pass_on(self, msg: dict) -> None:
        """Hand an unpacked IOPub message to ipyparallel's own handler."""
        self._dispatch(self.client, msg)

    def hook_iopub(self, on_frames: Callable[[list], None], timeout: float = 30.0) -> None:
        """Route every IOPub message to *on_frames* (on the client's IO thread)."""
        self._on_io_thread(lambda: self.client._iopub_stream.on_recv(on_frames, copy=False),
                           timeout, "the ipyparallel client's IO thread did not answer")

    def unhook_iopub(self, timeout: float = 10.0) -> None:
        """Give the IOPub stream back to ipyparallel's handler (nothing if the client closed)."""
        if self.closed:
            return
        client = self.client
        self._on_io_thread(lambda: client._iopub_stream.on_recv(client._dispatch_iopub, copy=False),
                           timeout, None)

    def _on_io_thread(self, fn: Callable[[], None], timeout: float, fail: str | None) -> None:
        done = threading.Event()

        def call() -> None:
            try:
                fn()
            finally:
                done.set()

        self.call_soon(call)
        if not done.wait(timeout) and fail is not None:
            raise RuntimeError(fail)

    def on_registration(self, callback: Callable[[dict], None]) -> None:
        """Call *callback* with each engine (un)registration event."""
        self.client._registration_callbacks.append(callback)

    def remove_registration(self, callback: Callable[[dict], None]) -> None:
        callbacks = self.client._registration_callbacks
        if callback in callbacks:
            callbacks.remove(callback)


# -- local processes ------------------------------------------------------------------------------
def launcher_pids(ipp_cluster: Any) -> set[int]:
    """The pids of an ``ipyparallel.Cluster``'s controller and engine launchers (started)."""
    pids: set[int] = set()
    controller = getattr(ipp_cluster, "controller", None)
    if controller is not None and getattr(controller, "pid", -1) > 0:
        pids.add(controller.pid)
    for engine_set in getattr(ipp_cluster, "engines", {}).values():
        pids.update(la.pid for la in getattr(engine_set, "launchers", {}).values()
                    if getattr(la, "pid", -1) > 0)
    return pids


# -- the engine side ------------------------------------------------------------------------------
def add_control_handler(kernel: Any, msg_type: str, handler: Callable[[Any, Any, dict], None]) -> None:
    """Serve *msg_type* on the kernel's control channel (its own thread)."""
    kernel.control_handlers[msg_type] = handler


def on_iopub_thread(kernel: Any, fn: Callable[[], None]) -> None:
    """Call *fn* on the engine kernel's IOPub thread, after everything queued there before it
    (its queue is first in, first out). An ipyparallel engine's ``iopub_socket`` is ipykernel's
    ``IOPubThread`` itself; every send to IOPub goes through that queue, so a send *fn* makes
    leaves after whatever was sent before it was called."""
    kernel.iopub_socket.schedule(fn)


def set_output_parent(shell: Any, parent: dict) -> None:
    """In the current ``contextvars.Context`` only: what the engine's stdout, stderr, display
    publisher and display hook send to IOPub goes under *parent* (ipykernel keeps each one's
    parent header in a ContextVar; the kernel's own parent is left as it is)."""
    shell.set_thread_parent(parent)


def set_task_parents(kernel: Any, parent: dict, request: dict) -> None:
    """In the current ``contextvars.Context`` only (a task's, copied from the apply request's):
    its output goes under *parent* (:func:`set_output_parent`), and the kernel's own parent
    becomes *request*, the apply request without its buffers (the pickled functions and
    arguments of every task of the batch, which would otherwise live as long as the task).
    Not ``kernel.set_parent``: that also makes this context the one the kernel's other
    threads fall back on."""
    set_output_parent(kernel.shell, parent)
    kernel._shell_parent.set(request)


def watch_output(shell: Any, seen: Callable[[], None]) -> None:
    """Call *seen* (on the writing thread, in the writer's context) whenever something writes
    to the engine's stdout or stderr or publishes a display, before it is buffered for IOPub.
    Once per stream and publisher: each is wrapped with an instance attribute that calls
    through to its own method."""
    import sys

    targets = [(sys.stdout, "write"), (sys.stderr, "write"),
               (getattr(shell, "display_pub", None), "publish")]
    for obj, name in targets:
        if obj is None or getattr(getattr(obj, name, None), "_tinycoro_watched", False):
            continue
        original = getattr(obj, name)

        def watched(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            seen()
            return _original(*args, **kwargs)

        watched._tinycoro_watched = True  # type: ignore[attr-defined]
        setattr(obj, name, watched)


def datapub_ident(kernel: Any) -> bytes:
    """The IOPub identity ipyparallel's ``datapub`` publishes data messages under."""
    return f"engine.{kernel.engine_id}.datapub".encode()


# -- %px ------------------------------------------------------------------------------------------
def register_px(shell: Any, view: Any, targets: Callable[[], list[int]] | None = None) -> Any:
    """Register ipyparallel's ``%px`` family for *view* (what ``view.activate()`` does, keeping
    the magics object so that :func:`unregister_px` can take it out again). *targets*, when
    given, is asked before each ``%px`` run on a view of ``"all"`` engines for the engines to
    run on now: ipyparallel resolves ``"all"`` from the controller's registrations, which learn
    of a dead engine only after the cluster has (a pidfd notices it at once)."""
    from ipyparallel.client.magics import ParallelMagics

    class LiveParallelMagics(ParallelMagics):
        def parallel_execute(self, cell: str, *args: Any, **kwargs: Any) -> Any:
            if targets is None or self.view.targets != "all":  # --targets given: as asked
                return super().parallel_execute(cell, *args, **kwargs)
            self.view.targets = targets()
            try:
                return super().parallel_execute(cell, *args, **kwargs)
            finally:
                self.view.targets = "all"

    magics = LiveParallelMagics(shell, view)
    shell.magics_manager.register(magics)
    return magics


def unregister_px(shell: Any, magics: Any) -> None:
    """Take the magics of :func:`register_px` out of the shell (IPython has no public call)."""
    for table in shell.magics_manager.magics.values():
        for name, fn in list(table.items()):
            if getattr(fn, "__self__", None) is magics:
                del table[name]
