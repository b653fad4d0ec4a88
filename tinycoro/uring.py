"""The io_uring binding: the pure-Python ring over ``liburing``, the compiled ring (``_cring``,
which needs no module of the binding at run time) and the choice of the ring the engine uses.
Size: the two rings' one interface, lifecycle and setup flags, in one place to stay in step.

Everything above this module speaks in terms of :class:`Ring` (one io_uring instance plus the
eventfd it signals) and the ``prep_*`` functions, which fill one SQE each.

There are two rings with one interface. ``CRing`` compiles the per-operation methods
(``get_sqe``, ``submit``, ``complete``, ...) and the ring's setup in ``tinycoro/_cring.pyx``,
over liburing's header (build time only), and so pays no Python call per completion and
imports no module of the binding: the ``prep_*`` functions, ``timespec`` and ``statx`` here are
then ``_cring``'s, with the binding's names and argument orders, and socket addresses are the
kernel's bytes. ``PyRing`` is the same in pure Python over the binding, which it imports when
the first one is made (and at import when it is the ring in use). Why: the binding's compiled
modules do not declare that they run without the GIL, so on a free-threaded CPython importing
one turns the GIL on for the whole process (docs/design.md, "The liburing binding").
``Ring`` is ``CRing`` when the extension was built, else ``PyRing``; ``TINYCORO_PURE=1``
forces ``PyRing`` (:mod:`tinycoro.compiled` makes that choice for every compiled module).
``COMPILED`` says which is in use and ``WHY_PURE`` why, when it is the pure one. Both create
and close the ring through the same Python code (``_Lifecycle``).

The completion contract, the same for both rings: ``complete(slots, free, standing, done,
shots)`` reaps every ready CQE. The owner's in-flight table is *slots*, a list of two entries
per slot, the op in flight there (None: free) and the slot's user_data, which is the index of
that op entry: the op whose SQE carried user_data ``ud`` is ``slots[ud & ~MULTI_UD_TAG]``
(``tinycoro._ringdefs``), and slot 0 is never an op's. For each CQE whose slot holds an op,
the op entry is set to None, the slot's user_data (the int in the table: none is made)
appended to *free*, and ``op, res`` appended to *done* (two
entries, no tuple per completion: the collector's young generation filled with them at many
connections); a CQE whose slot holds none is one of the owner's own SQEs (``SKIP_UD``) and is
only counted. A CQE whose user_data has ``MULTI_UD_TAG`` set and whose slot holds an op is one
of *standing* (user_data -> op: the owner's ops armed with no task waiting, its multishot
recvs, which only the compiled ring queues, and single ones such as a split read's back half;
their user_data, and no other op's, has that bit): it goes to *shots* as four entries, ``op,
res, data, more``, uncounted, already marked seen with its provided buffer given back; its
last one (``more`` False) frees the op's slot as above and removes it from *standing*. It
returns how many CQEs it reaped, multishots' left out. The op
is opaque here: the ring reads and writes none of its attributes, so what a completion means
(a task's result, an interrupt, a descriptor to close) is decided by the layer above, the ring's
owner (:class:`tinycoro.core.ring.RingOwner`), for any kind of op.

Facts about the binding (``liburing`` 2024.5.3, kernel 6.18), measured on the 2-core CI machine.
They are why the code below looks the way it does:

* The 2026.x wheels of ``liburing`` are built with AVX-512 instructions (``vmovups %zmm0`` in
  ``Ring.__new__``) and die with SIGILL on CPUs that lack them. 2024.5.3 ships as an sdist and is
  compiled on the machine that installs it, so it runs everywhere. Its API differs from 2026.x:
  ``io_uring()`` / ``io_uring_cqe()`` objects, buffers passed as typed memoryviews *with an
  explicit length* (so a slice of a reused buffer works), and ``cqe.res`` is the raw result: a
  negative errno is returned, not raised.
* Every waiting call (``io_uring_wait_cqe`` and friends) holds the GIL for the whole wait: another
  Python thread is frozen meanwhile. A context therefore never waits in the binding; it registers
  an eventfd with the ring and blocks on it in its own sleep point, which releases the GIL
  (``core/wakeword.wait``: a ``read(2)`` compiled, ``os.eventfd_read`` or ``select`` interpreted).
  Submitting holds it too: ``PyRing.submit`` goes through the binding and keeps the GIL for
  the whole ``io_uring_enter``; ``CRing.submit`` makes the system call itself, without it
  (``_submit_nogil`` in ``_cring.pyx`` says why the binding's ``nogil`` declaration is not
  enough), so another context's Python runs while the kernel does a batch's inline work.
* ``io_uring_prep_openat`` stores a ``char*`` into the path object. If that object dies before
  the SQE is submitted, the kernel reads freed memory (seen: ENOENT for a path that exists). The
  caller must keep the path bytes alive; an :class:`~tinycoro.core.traps.Op` keeps its arguments.
* ``io_uring_peek_batch_cqe(ring, cqes, n)`` with ``n > 1`` writes ``n`` pointers into a field
  that holds one: memory corruption. ``io_uring_for_each_cqe`` is a macro loop with an empty body.
  The only safe way to reap is ``io_uring_peek_cqe`` + ``io_uring_cqe_seen``, one CQE at a time.
  ``io_uring_peek_cqe`` also flushes the kernel's CQ overflow list when it has to, so completions
  beyond the CQ's 2 x entries are not lost.
* ``io_uring_get_sqe`` returns a *falsy* SQE object (NULL inside) when the SQ is full.
* ``user_data`` 0 is rejected by the SQE setter, and ``cqe[i]`` treats 0 as "no entry".
* Buffer arguments are typed memoryviews (``unsigned char[:]``), so an empty buffer raises
  IndexError at ``&buf[0]``: zero-length reads and writes never reach this module.
* ``io_uring_cq_eventfd_toggle`` flips a flag in the shared CQ ring (no system call): a context
  turns eventfd notifications off while it is awake and on just before it sleeps.
* A failed call raises ``OSError(errno or -ret)``: the binding prefers the thread's C
  ``errno`` to the negative result, but liburing makes its system calls without libc, so that
  ``errno`` is whatever an earlier libc call left (seen: ENOENT from a ``readlink`` for an
  ``io_uring_enter`` that failed with EBADF; a disabled io_uring could be misreported the same
  way). ``_clear_errno`` runs before each call whose failure is reported.
* ``liburing/__init__.py`` installs the ``dynamic_import`` lazy loader, so *every* attribute
  access ``liburing.name`` runs a Python-level module ``__getattr__``: 100-150 ns, four times the
  cost of the call itself (30-35 ns). Every function is therefore bound once, below, and only
  the bound names are used on hot paths.
"""

from __future__ import annotations

import ctypes
import errno
import os
from socket import AF_UNIX as _AF_UNIX
from typing import TYPE_CHECKING, Any

import socket as _socket
import struct as _struct

from . import compiled
from ._ringdefs import (
    CQ_ENTRIES,
    MULTISHOT_BUFFER_SIZE,
    MULTISHOT_BUFFERS,
    MULTISHOT_BUFFERS_ENV,
    MULTISHOT_ENV,
    MULTI_UD_TAG,
    SKIP_UD,
    RingBusy,
    multishot_buffers,
    multishot_wanted,
)

_cring = compiled.load("_cring")
#: Why the ring is the pure-Python one (None when it is the compiled one).
WHY_PURE: str | None = compiled.fallbacks.get("_cring")

_L: Any = None  # the liburing binding, once a pure ring needs it (_bind)


__all__ = [
    "Ring",
    "PyRing",
    "CRing",
    "COMPILED",
    "WHY_PURE",
    "IoUringUnavailable",
    "RingBusy",
    "SKIP_UD",
    "MULTI_UD_TAG",
    "MULTISHOT_BUFFERS",
    "MULTISHOT_BUFFER_SIZE",
    "MULTISHOT_BUFFERS_ENV",
    "multishot_buffers",
    "sockaddr_in",
    "prep_nop",
    "prep_read",
    "prep_write",
    "prep_openat",
    "prep_close",
    "prep_fsync",
    "prep_timeout",
    "prep_cancel",
    "prep_accept",
    "prep_connect",
    "prep_recv",
    "prep_recv_multishot",
    "MULTISHOT_ENV",
    "ring_flags",
    "RING_FLAGS_ENV",
    "prep_send",
    "prep_shutdown",
    "timespec",
    "prep_statx",
    "statx",
    "prep_renameat",
    "prep_unlinkat",
    "prep_mkdirat",
    "prep_splice",
    "prep_sendto",
    "prep_poll_add",
    "sockaddr_un",
]

# -- bound once (see the dynamic_import note above), by the first pure ring --------------------
_get_sqe: Any = None
_submit: Any = None
_sq_ready: Any = None
_cq_ready: Any = None
_peek_cqe: Any = None
_cqe_seen: Any = None
_eventfd_toggle: Any = None
_errno_location = ctypes.PyDLL(None).__errno_location  # C errno; PyDLL: the call keeps the GIL
_errno_location.restype = ctypes.POINTER(ctypes.c_int)


def _bind() -> Any:
    """Import the binding (one process at a time: compiled.py says why) and bind the pure
    ring's hot functions once; the binding. On a free-threaded CPython this turns the GIL on
    (the binding's modules do not declare that they run without it), which
    :func:`tinycoro.compiled.note_gil` reports; the compiled ring never calls this."""
    global _L, _get_sqe, _submit, _sq_ready, _cq_ready, _peek_cqe, _cqe_seen, _eventfd_toggle
    if _L is None:
        binding = compiled.import_binding()
        _get_sqe = binding.io_uring_get_sqe
        _submit = binding.io_uring_submit
        _sq_ready = binding.io_uring_sq_ready
        _cq_ready = binding.io_uring_cq_ready
        _peek_cqe = binding.io_uring_peek_cqe
        _cqe_seen = binding.io_uring_cqe_seen
        _eventfd_toggle = binding.io_uring_cq_eventfd_toggle
        _L = binding
        compiled.note_gil()  # a free-threaded CPython whose GIL that import turned on: say so
    return _L


def _clear_errno() -> None:
    """Before a binding call that may fail: so that its OSError carries its own errno."""
    _errno_location()[0] = 0


# -- SQE preparation. Each takes the SQE first; the engine sets user_data afterwards. -----------
# Where the compiled ring runs, its own (filled in C, same names and argument orders as the
# binding's); else the binding's. Every path, statx buffer and sockaddr passed here must stay
# alive until the CQE arrives (the Op keeps it).
if _cring is None:
    _bind()  # the pure ring is the one in use: its binding now, as every import did


def _prep(name: str, binding_name: str = "") -> Any:
    if _cring is not None:
        return getattr(_cring, name)
    return getattr(_L, binding_name or "io_uring_" + name)


prep_nop = _prep("prep_nop")
prep_read = _prep("prep_read")  # (sqe, fd, buf, nbytes, offset)
prep_write = _prep("prep_write")  # (sqe, fd, buf, nbytes, offset)
prep_openat = _prep("prep_openat")  # (sqe, path: bytes, flags, mode, dfd)
prep_close = _prep("prep_close")  # (sqe, fd)
prep_fsync = _prep("prep_fsync")  # (sqe, fd, flags)
prep_timeout = _prep("prep_timeout")  # (sqe, timespec, count, flags)
prep_accept = _prep("prep_accept")  # (sqe, fd, None, flags)
prep_connect = _prep("prep_connect")  # (sqe, fd, sockaddr)
prep_recv = _prep("prep_recv")  # (sqe, fd, buf, nbytes, flags)
prep_send = _prep("prep_send")  # (sqe, fd, buf, nbytes, flags)
prep_shutdown = _prep("prep_shutdown")  # (sqe, fd, how)
prep_cancel = _prep("prep_cancel", "io_uring_prep_cancel64")  # (sqe, user_data, flags)
#: timespec(seconds: float); keep it alive until the CQE arrives
timespec = _cring.timespec if _cring is not None else _L.timespec

# -- I/O breadth (files by path, splice, datagrams, readiness).
prep_statx = _prep("prep_statx")  # (sqe, statx, path: bytes, flags, mask, dfd)
#: the kernel's struct statx; fields as stx_* properties, times as floats only
statx = _cring.statx if _cring is not None else _L.statx
prep_renameat = _prep("prep_renameat")  # (sqe, old: bytes, new: bytes, olddfd, newdfd, flags)
prep_unlinkat = _prep("prep_unlinkat")  # (sqe, path: bytes, flags, dfd)
prep_mkdirat = _prep("prep_mkdirat")  # (sqe, path: bytes, mode, dfd)
prep_splice = _prep("prep_splice")  # (sqe, fd_in, off_in, fd_out, off_out, nbytes, flags)
prep_sendto = _prep("prep_sendto")  # (sqe, fd, buf, nbytes, sockaddr, flags)
# The binding's msghdr cannot hold an iovec (its msg_iov setter is commented out: "TODO"), so
# recvmsg/recvfrom is unusable through it; datagrams are received after an io_uring poll.
prep_poll_add = _prep("prep_poll_add")  # (sqe, fd, poll_mask)
AT_REMOVEDIR = 0x200
STATX_BASIC_STATS = 0x7FF
SPLICE_F_MOVE = 1


def sockaddr_un(path: bytes) -> Any:
    """A kernel AF_UNIX address for ``connect``; keep it alive until the CQE arrives."""
    if _cring is None:
        return _L.sockaddr(_AF_UNIX, path)
    # struct sockaddr_un as the binding fills it: the path NUL-padded to its 108 bytes, the
    # length the struct's (the kernel stops at the first NUL of a pathname address).
    if not path or len(path) > 108 or b"\0" in path:
        raise ValueError(f"sockaddr_un: a path of 1 to 108 bytes without NUL, got {path!r}")
    return _struct.pack("=H108s", _AF_UNIX, path)


def sockaddr_in(family: int, host: str, port: int) -> Any:
    """A kernel socket address for ``connect``; keep it alive until the CQE arrives."""
    if _cring is None:
        return _L.sockaddr(family, host.encode(), port)
    # struct sockaddr_in / sockaddr_in6: the family in host order, port and address in
    # network order (what inet_pton gives), the rest zero.
    try:
        raw = _socket.inet_pton(family, host)
    except (OSError, ValueError):
        raise ValueError(f"sockaddr_in: {host!r} is not a numeric address of family "
                         f"{family!r}") from None
    if family == _socket.AF_INET:
        return _struct.pack("=H", family) + _struct.pack("!H4s8x", port, raw)
    return _struct.pack("=H", family) + _struct.pack("!HI16s", port, 0, raw) + bytes(4)


class IoUringUnavailable(RuntimeError):
    """io_uring cannot be used in this process (disabled by sysctl, seccomp, or an old kernel)."""


def _unavailable(exc: OSError) -> IoUringUnavailable:
    try:
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            disabled = f.read().strip()
    except OSError:
        disabled = "?"
    hint = (
        "io_uring is disabled on this machine (sysctl kernel.io_uring_disabled={}); enable it "
        "with `sysctl -w kernel.io_uring_disabled=0` (or 1 and add this user to the "
        "kernel.io_uring_group), and allow the io_uring_setup/io_uring_enter/io_uring_register "
        "system calls in the container's seccomp profile".format(disabled)
    )
    return IoUringUnavailable(f"cannot create an io_uring instance: {exc}. {hint}")


#: Ring setup flags, tried when each ring is set up (see :func:`ring_flags`): a name and its
#: bits, in the order they are given up in (the last first) when the kernel refuses them.
#:
#: COOP_TASKRUN (5.19): the kernel does not interrupt the context's thread (an IPI, a trip
#: through the kernel) to post each completion; it posts them at the thread's next syscall,
#: which the engine makes anyway (its submit, or the eventfd read it sleeps in, which the
#: pending work wakes). TASKRUN_FLAG goes with it: the kernel raises IORING_SQ_TASKRUN while
#: completions wait to be posted, and the submit then enters with GETEVENTS to post them.
#: Measured on the 50-connection echo (docs/benchmarks-log.md, "Speed round 3"): the server's
#: system time per request was lower in 5 of 6 alternating pairs on a loaded machine (4.0-5.7
#: us against 5.0-10.6 us), with the same syscalls per request.
_WANTED_FLAGS: tuple[tuple[str, int], ...] = (("COOP_TASKRUN", (1 << 8) | (1 << 9)),)
#: Flags tried only when ``TINYCORO_RING_FLAGS`` names them: they did not measure better
#: (docs/benchmarks-profiles.md, "Ring flags: SINGLE_ISSUER and DEFER_TASKRUN").
#:
#: SINGLE_ISSUER (6.0) and DEFER_TASKRUN (6.1, only with SINGLE_ISSUER) are for rings with one
#: owner thread that is not the thread creating them (a scheduler's contexts: ``Ring(entries,
#: single_issuer=True)``): such a ring is set up disabled (R_DISABLED, 5.10) and its owner
#: enables it (:meth:`_Lifecycle.enable`), which makes that thread its one issuer; the
#: kernel then refuses io_uring_enter with a submit (and, with DEFER_TASKRUN, any GETEVENTS)
#: and io_uring_register from every other thread, EEXIST. DEFER_TASKRUN: completions are
#: posted only when the owner enters the ring with GETEVENTS (the engine's submit and reap do,
#: when IORING_SQ_TASKRUN says some wait), never at a random syscall; the eventfd is written
#: for the first completion held back only, so the sleep point asks the ring whether the
#: kernel holds any (``cq_ready``) as well as whether any is posted. It always brings
#: TASKRUN_FLAG: without IORING_SQ_TASKRUN nothing shows that the kernel holds completions
#: back, and the sleep point slept on them.
_R_DISABLED = 1 << 6  # IORING_SETUP_R_DISABLED
_SINGLE_ISSUER = 1 << 12  # IORING_SETUP_SINGLE_ISSUER
_OPTIONAL_FLAGS: tuple[tuple[str, int], ...] = (
    ("SINGLE_ISSUER", _R_DISABLED | _SINGLE_ISSUER),
    ("DEFER_TASKRUN", (1 << 13) | (1 << 9)),  # IORING_SETUP_DEFER_TASKRUN | TASKRUN_FLAG
)
#: Flags that only a ring with one owner thread, created elsewhere, may get (single_issuer).
_OWNED_FLAGS = frozenset(("SINGLE_ISSUER", "DEFER_TASKRUN"))
#: ``TINYCORO_RING_FLAGS=plain`` sets rings up with no flags (A/B runs, a kernel to rule out);
#: a comma-separated list of names (``COOP_TASKRUN,SINGLE_ISSUER,DEFER_TASKRUN``) with those.
RING_FLAGS_ENV = "TINYCORO_RING_FLAGS"
_refused_flags: set[str] = set()  # names the kernel refused (EINVAL): never tried again


def _flags_wanted(single_issuer: bool = True) -> list[tuple[str, int]]:
    """The flags to try, *single_issuer* or not: ``_WANTED_FLAGS``, or those that
    ``TINYCORO_RING_FLAGS`` names; the pure ring gets no single-issuer flags (``PyRing``
    says why)."""
    setting = os.environ.get(RING_FLAGS_ENV, "").strip()
    if setting.lower() in ("plain", "none", "0", "off"):
        return []
    known = _WANTED_FLAGS + _OPTIONAL_FLAGS
    candidates = _WANTED_FLAGS
    if setting:
        names = {n.strip().upper() for n in setting.split(",") if n.strip()}
        if not names <= {n for n, _ in known}:
            listed = ", ".join(n for n, _ in known)
            raise ValueError(f"{RING_FLAGS_ENV}={setting!r}: give 'plain' or some of {listed}")
        if "DEFER_TASKRUN" in names:
            names.add("SINGLE_ISSUER")  # the kernel takes DEFER_TASKRUN only with it
        candidates = tuple(f for f in known if f[0] in names)
    return [
        (n, bits) for n, bits in candidates
        if n not in _refused_flags and (single_issuer or n not in _OWNED_FLAGS)
    ]


def _queue_init(entries: int, ring: Any, flags: int, cq_entries: int) -> None:
    """The one call that asks the kernel for a ring (the seam a test of the kernel's refusal
    replaces): *ring* is a compiled ring (its own setup, with a CQ of *cq_entries* where
    asked) or holds the binding's ``io_uring`` in ``_ring``, a new one for each attempt (the
    binding refuses to set up one twice, even after a failure)."""
    if _cring is not None and isinstance(ring, _cring.RingCore):
        ring.ring_open(entries, flags, cq_entries and max(cq_entries, 2 * entries))
    else:
        ring._ring = _L.io_uring()
        _L.io_uring_queue_init(entries, ring._ring, flags)


def _new_ring(ring: Any, entries: int, cq_entries: int = 0, single_issuer: bool = False) -> int:
    """Set *ring* up with every wanted setup flag the kernel takes: one it refuses (EINVAL,
    e.g. COOP_TASKRUN before Linux 5.19, DEFER_TASKRUN before 6.1) is dropped, remembered, and
    the ring set up without it. *cq_entries*: a CQ of that size (compiled ring; 0: twice
    *entries*). *single_issuer*: the single-issuer flags are tried too. Returns the flags the
    ring got."""
    wanted = _flags_wanted(single_issuer)
    dropped: list[str] = []
    while True:
        flags = 0
        for _, bits in wanted:
            flags |= bits
        try:
            _clear_errno()
            _queue_init(entries, ring, flags, cq_entries)
            # Only now is a flag known to be refused: an EINVAL that every attempt got was
            # about something else (too many entries), and must not cost later rings a flag.
            _refused_flags.update(dropped)
            return flags
        except OSError as exc:
            if exc.errno == errno.EINVAL and wanted:
                dropped.append(wanted.pop()[0])  # the last one added goes first
                continue
            if exc.errno in (errno.EPERM, errno.ENOSYS, errno.EACCES):
                raise _unavailable(exc) from None
            raise


def ring_flags() -> tuple[str, ...]:
    """The names of the setup flags this process's context rings get (for ``python -m
    tinycoro``'s first line): each is tried once on a small ring the first time this is asked,
    so the answer is the kernel's, also before any scheduler runs. The pure ring takes no
    single-issuer flag (``PyRing``), so under it those are left out."""
    single_issuer = _cring is not None
    if _flags_wanted(single_issuer):
        if _cring is not None:
            core = _cring.RingCore()
            _new_ring(core, 2, single_issuer=True)  # drops what the kernel refuses
            core.ring_exit()
        else:
            holder = _BindingRing()
            _new_ring(holder, 2)
            _L.io_uring_queue_exit(holder._ring)
    return tuple(name for name, _ in _flags_wanted(single_issuer))


class _BindingRing:
    """Where ``_queue_init`` puts the binding's ``io_uring`` it sets up (``ring_flags``' probe)."""

    __slots__ = ("_ring",)
    if TYPE_CHECKING:
        _ring: Any


class _Lifecycle:
    """Creating, enabling and closing one io_uring instance and its eventfd: shared by both
    rings, each of which provides the kernel calls (``_ring_open``, ``_ring_exit``,
    ``_register_eventfd``, ``_unregister_eventfd``, ``_enable_rings``) and ``notify_on``.

    A subclass provides ``__slots__`` for ``efd``, ``_open`` and ``setup_flags``: this class
    has none of its own at run time, so that it can be mixed into the compiled ring, whose
    layout is C's.
    """

    if TYPE_CHECKING:  # what the subclasses' slots hold, for the type checker
        efd: int
        _open: bool
        release_gil: bool
        setup_flags: int  # the IORING_SETUP_* flags the ring got (R_DISABLED: until enable())

        def _ring_open(self, entries: int, cq_entries: int) -> int: ...
        def _enable_rings(self) -> None: ...
        def _ring_exit(self) -> None: ...
        def _register_eventfd(self, efd: int) -> None: ...
        def _unregister_eventfd(self) -> None: ...
        def notify_on(self, enabled: bool) -> None: ...
    else:
        __slots__ = ()

    def _setup(self, entries: int, cq_entries: int = 0) -> None:
        # (not tinycoro.core.checks: this bottom layer imports nothing of tinycoro's)
        if not isinstance(entries, int) or isinstance(entries, bool) or entries < 1:
            raise ValueError(f"ring_entries must be a positive int, got {entries!r}")
        self.setup_flags = self._ring_open(entries, cq_entries)
        try:
            efd = os.eventfd(0, os.EFD_CLOEXEC)
        except BaseException:
            self._ring_exit()
            raise
        try:
            _clear_errno()
            self._register_eventfd(efd)
        except BaseException:
            os.close(efd)
            self._ring_exit()
            raise
        self.efd = efd
        self._open = self.release_gil = True  # (release_gil: read by CRing.submit only)
        # Completions post to the eventfd only while the owner sleeps (see notify_on).
        self.notify_on(False)

    def enable(self) -> None:
        """Owner thread, before it queues anything: a ring set up for one owner thread
        (single_issuer, on a kernel that took SINGLE_ISSUER) is enabled here, which makes the
        calling thread the one that may submit to it; until then the kernel refuses to
        enter it (EBADFD). Nothing for any other ring, or once enabled."""
        if self.setup_flags & _R_DISABLED:
            self._enable_rings()
            self.setup_flags &= ~_R_DISABLED

    def close(self) -> None:
        """Close the ring and its eventfd: on any thread. The caller first waits for every
        in-flight CQE (rule 8), on the owner thread.

        The eventfd is unregistered first unless the ring has one issuer: closing the ring's
        descriptor unregisters it too, and the kernel refuses io_uring_register to any other
        thread of a SINGLE_ISSUER ring (EEXIST), which a scheduler's shutdown is."""
        if not self._open:
            return
        self._open = False
        if not self.setup_flags & _SINGLE_ISSUER:
            try:
                self._unregister_eventfd()
            except OSError:
                pass
        self._ring_exit()
        self._released()
        # Forget the number before closing it: a late wake() from another thread must not
        # write into whatever file reuses this descriptor number next.
        efd, self.efd = self.efd, -1
        os.close(efd)

    def __del__(self) -> None:
        # Dropped without close() (an owner that failed between setup and use): the ring's
        # descriptor and mappings, its eventfd and (compiled) its provided-buffer ring stay the
        # process's until closed, and nothing can name them once this object is gone. The
        # compiled core's __dealloc__ could free only what it holds, not the eventfd.
        if getattr(self, "_open", False):  # (unset: __init__ failed before or inside _setup)
            self.close()

    def _released(self) -> None:
        """After the ring's exit: free what only the kernel could still have written into."""

    @property
    def closed(self) -> bool:
        return not self._open


class PyRing(_Lifecycle):
    """One io_uring instance and the eventfd that its completions signal, in pure Python.

    Created on any thread, then used only by the one thread that owns it (rule 2).
    The fallback when the compiled ring is not built, or forced by ``TINYCORO_PURE=1``.

    *single_issuer* is taken and ignored: this ring never gets SINGLE_ISSUER nor
    DEFER_TASKRUN. The sleep point must see completions the kernel holds back (``cq_ready``,
    the compiled ring's), and the binding shows neither the SQ ring's flags nor a way to ask
    but an enter, a system call per sleep.
    """

    __slots__ = ("_ring", "_cqe", "efd", "_open", "release_gil", "setup_flags")
    if TYPE_CHECKING:
        _ring: Any  # the binding's io_uring (set by _queue_init)

    def __init__(self, entries: int, single_issuer: bool = False) -> None:
        _bind()
        self._setup(entries)
        self._cqe = _L.io_uring_cqe()

    # -- lifecycle: the binding's calls ---------------------------------------------------------
    def _ring_open(self, entries: int, cq_entries: int) -> int:
        return _new_ring(self, entries)  # sets self._ring; the binding cannot size the CQ

    def _enable_rings(self) -> None:  # pragma: no cover - never set up disabled (see above)
        _L.io_uring_enable_rings(self._ring)

    def _ring_exit(self) -> None:
        _L.io_uring_queue_exit(self._ring)

    def _register_eventfd(self, efd: int) -> None:
        _L.io_uring_register_eventfd(self._ring, efd)

    def _unregister_eventfd(self) -> None:
        _L.io_uring_unregister_eventfd(self._ring)

    @property
    def ring_fd(self) -> int:
        """The ring's descriptor (as the compiled ring's ``ring_fd``)."""
        return self._ring.ring_fd

    # -- submission ---------------------------------------------------------------------------
    def get_sqe(self):
        """A free SQE; when the SQ is full, submit what is queued and take one again."""
        sqe = _get_sqe(self._ring)
        if not sqe:
            self.submit()
            sqe = _get_sqe(self._ring)
            if not sqe:  # pragma: no cover - the kernel consumed nothing; cannot happen
                raise RuntimeError("io_uring SQ still full after submit")
        return sqe

    def queue(self, prep, args: tuple, ud: int) -> None:
        """Queue one SQE as ``prep(sqe, *args)`` fills it, with ``user_data`` *ud*.

        If the prep raises, the SQE (already taken, maybe half-filled) becomes a NOP with
        ``SKIP_UD`` and the error propagates: the kernel never sees a half-prepared operation
        (rule 11). Raises :class:`RingBusy`, having queued nothing, when the kernel takes no
        more SQEs (its CQ overflowed): reap, then queue again.
        """
        try:
            sqe = self.get_sqe()
        except OSError as e:
            if e.errno in (errno.EBUSY, errno.EAGAIN):
                raise RingBusy(e.errno, e.strerror) from None
            raise
        try:
            prep(sqe, *args)
        except BaseException:
            _L.io_uring_prep_nop(sqe)
            sqe.user_data = SKIP_UD
            raise
        sqe.user_data = ud

    def set_return_word(self, word: bytearray | None) -> None:
        """The compiled ring's (``CRing.set_return_word``); nothing here: this ring's submit
        keeps the GIL, so it never waits for it on the way back."""

    def submit(self) -> int:
        """Hand every prepared SQE to the kernel. Retries while the kernel says EINTR."""
        while True:
            _clear_errno()
            try:
                return _submit(self._ring)
            except InterruptedError:
                continue

    def sq_ready(self) -> int:
        return _sq_ready(self._ring)

    # -- completion ---------------------------------------------------------------------------
    def reap(self, out: list) -> int:
        """Append ``(user_data, res)`` of each ready CQE to *out*; how many (used by hand)."""
        ring, cqe, peek, seen = self._ring, self._cqe, _peek_cqe, _cqe_seen
        n = 0
        while peek(ring, cqe) == 0:
            out.append((cqe.user_data, cqe.res))
            seen(ring, cqe)
            n += 1
        return n

    def complete(self, slots: list, free: list, standing: dict, done: list, shots: list) -> int:
        """Reap every ready CQE and find its op in *slots*; return how many CQEs were reaped
        (the completion contract in the module doc). This ring queues no multishot, so an op
        of *standing* completes once (an op armed with no waiting task: a split read's back
        half), and its one CQE is its last.

        For each CQE whose slot holds an op, the slot is freed (None, its user_data appended
        to *free*) and ``op, res`` appended to *done*, or, for an armed op (``MULTI_UD_TAG``),
        the op taken out of *standing* too and ``op, res, None, False`` appended to *shots*,
        uncounted. Any other CQE is one of the owner's own SQEs and is only counted. Nothing
        of the op is read or written here.
        """
        ring = self._ring
        cqe = self._cqe
        peek = _peek_cqe
        seen = _cqe_seen
        append = done.append
        top = len(slots)
        n = 0
        while peek(ring, cqe) == 0:
            ud = cqe.user_data
            slot = ud & ~MULTI_UD_TAG
            op = slots[slot] if slot + 1 < top else None
            if op is not None:
                slots[slot] = None
                free.append(slots[slot + 1])
                if ud & MULTI_UD_TAG:
                    standing.pop(ud, None)
                    shots.extend((op, cqe.res, None, False))
                    seen(ring, cqe)
                    continue
                append(op)
                append(cqe.res)
            seen(ring, cqe)
            n += 1
        return n

    def cq_ready(self) -> int:
        return _cq_ready(self._ring)

    def notify_on(self, enabled: bool) -> None:
        """Let completions write the eventfd (before sleeping) or not (while awake)."""
        _eventfd_toggle(self._ring, enabled)

    def multishot_ready(self) -> bool:
        """Never: the binding's Python API cannot set a buffer group on an SQE nor read a
        CQE's buffer id cheaply, so the pure ring receives with one recv per call (docs/io.md)."""
        return False

    def multishot_possible(self) -> bool:
        """Never (see :meth:`multishot_ready`)."""
        return False

    def multishot_off(self) -> None:
        pass

    def multishot_refused(self) -> None:
        pass


if TYPE_CHECKING:  # pragma: no cover - the stub, tinycoro/_cring.pyi
    from ._cring import RingCore as _RingCore
elif _cring is not None:
    _RingCore = _cring.RingCore

if _cring is not None:

    class CRing(_RingCore, _Lifecycle):
        """The same ring with its per-operation methods compiled (``tinycoro/_cring.pyx``)."""

        __slots__ = ("efd", "_open", "_buffers", "setup_flags", "_single_issuer")

        def __init__(self, entries: int, single_issuer: bool = False) -> None:
            """*single_issuer*: the ring will be used by one thread, which calls
            :meth:`enable` before anything else (a scheduler's context, created on the
            thread that makes the scheduler): it gets SINGLE_ISSUER and DEFER_TASKRUN where
            the kernel takes them."""
            self._buffers = multishot_buffers()  # a bad value fails here, not at a recv
            self._single_issuer = single_issuer
            self._setup(entries, CQ_ENTRIES)
            if not multishot_wanted():
                self.multishot_off()

        # -- lifecycle: the compiled ring's own calls (no module of the binding) ------------
        def _ring_open(self, entries: int, cq_entries: int) -> int:
            return _new_ring(self, entries, cq_entries, self._single_issuer)

        def _enable_rings(self) -> None:
            self.enable_rings()

        def _ring_exit(self) -> None:
            self.ring_exit()

        def _register_eventfd(self, efd: int) -> None:
            self.register_eventfd(efd)

        def _unregister_eventfd(self) -> None:
            self.unregister_eventfd()

        def multishot_ready(self) -> bool:
            """True when a multishot recv may be queued here: the provided-buffer ring is
            registered, at the first call (a kernel without it, older than 5.19, or
            ``TINYCORO_MULTISHOT=0``: False, for good)."""
            if self._pb_state == 0:
                self.multishot_setup(self._buffers, MULTISHOT_BUFFER_SIZE)
            return self._pb_state == 1

        def multishot_possible(self) -> bool:
            """Whether a multishot recv may still be armed here: not forced off (the
            variable is read once, as the ring is created), not refused by the kernel, not
            closed. Asked as a stream is made, without setting up the buffer ring."""
            return self._pb_state != -1

        def _released(self) -> None:
            self.multishot_free()

    prep_recv_multishot = _cring.prep_recv_multishot

else:  # the name stays, as None, where the compiled ring is not used
    CRing = None  # type: ignore[assignment,misc]

    def prep_recv_multishot(sqe: Any, fd: int) -> None:
        """Only the compiled ring queues multishot recvs (PyRing.multishot_ready is False)."""
        raise RuntimeError("prep_recv_multishot is queued by the compiled ring only")

#: True when :class:`Ring` is the compiled ring; ``WHY_PURE`` says why it is not otherwise.
COMPILED: bool = CRing is not None
#: The ring the engine uses, as ``Ring(entries)``.
Ring: type[PyRing] | type[CRing] = CRing if CRing is not None else PyRing
