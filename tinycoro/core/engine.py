"""Engine: one context's ready queue, io_uring ring and eventfd, and the loop that drives them.
Size: the run loop, its sleep and wake protocol and its shutdown are one state machine over
the same fields, compiled as one class; split, each part would need the others' internals.

Facts about waking a context, which the loop below is built around:

* A context blocks only on its ring's eventfd (rule 3), in :func:`wakeword.wait`: a read, or
  a wait for it bounded by a deadline (a ``tc.timeout`` scope's, a ``tc.sleep``'s;
  :meth:`Engine._block_until`). It releases the GIL; waiting inside the binding would not. A
  signal makes it fail with EINTR, which counts as a wake-up.
* Under the GIL a woken context then waits for the GIL. Its wake word says so (set as its
  wait returns, and by whoever wakes it), and a busy peer hands the GIL over at its turn's
  end (:meth:`Engine._hand_over`) instead of keeping it until the switch interval forces a
  switch; no peer reads another's ring for that (core/wakeword.py).
* Three things write that eventfd: the kernel when a CQE is posted (only while notifications
  are switched on, i.e. while the context sleeps), a thread that pushes a task or a call onto
  this engine while ``sleeping`` is set, and stop requests.
* Wake only a sleeper (rule 4). The sleeper sets ``sleeping``, switches notifications on, then
  looks at the ready queue, the calls queue and the CQ once more before it blocks. A pusher
  appends first and reads ``sleeping`` second. Under the GIL each of those steps is atomic, so
  either the sleeper's second look sees the new item or the pusher sees ``sleeping`` and writes
  the eventfd. Without the GIL each side puts a full barrier between its write and its read
  (``fence.full()``, compiled to nothing under the GIL), for the same reason as the kernel's
  half below. A stale write only costs one extra turn of the loop.
* The kernel's half of rule 4 is the eventfd toggle: ``notify_on(True)`` is a plain store of
  a flag in the shared CQ ring, and the look at the CQ that follows is a load of its tail
  (acquire). The kernel publishes a CQE by storing the tail (release) and then reads the flag
  to decide whether to signal the eventfd. Store-then-load on both sides is the pattern that
  needs a full barrier on *each* side (x86 may satisfy a load before an earlier store is
  visible), or both may miss the other: a lost wake-up. Our side gets one from taking and
  releasing an uncontended lock between the two (a locked instruction on x86; a release
  followed by an acquire on arm64), cheap next to the sleep it guards. The kernel's side
  (``io_eventfd_signal`` reading ``cq_flags`` after ``io_commit_cqring``) is the kernel's to
  order; we did not verify it barrier by barrier. Were a wake-up lost there, a context with a
  deadline pending would still wake at the deadline (its sleep is bounded), and one with
  parked tasks would show in the deadlock watchdog.
* With other contexts in the scheduler, a context whose last look found nothing yields the
  CPU once before it sleeps if another context is awake, and looks again
  (:meth:`Engine._peer_awake` says why): under the GIL the contexts take turns, and a
  sleep and its wake-up cost far more than a ``sched_yield``.
* One turn runs exactly the tasks that were ready when the turn began (as asyncio's
  ``_run_once`` does): a task that yields goes behind them, so nobody starves.
* SQEs prepared during a turn are submitted together at its end: one ``io_uring_enter`` for the
  whole batch, which is what makes the ring pay off (docs/benchmarks.md). A long turn hands them
  over every ``SUBMIT_EARLY`` SQEs instead, so that a device is not left idle while the rest
  of the turn runs, and an eager op (``Op.eager``: O_DIRECT I/O) goes as its step ends (see
  ``_start``).

Seams (what other layers may call; everything else here is private):

* ``push(task)``, ``call_soon(fn, *args)``, ``wake()``: any thread.
* ``defer(fn, *args)``: owner thread, inside a step: run ``fn(*args)`` once the turn's steps
  are over (the scheduler starts a task spawned on another context that way: rule 18);
  ``take_deferred()`` hands them to a step about to block its thread, to run elsewhere.
* ``run(until=None)``: drive the engine on the calling thread. A *guest* engine
  (``Engine(None, scheduler, entries, guest=True)``, the notebook cell's) runs with
  ``until=cell_task``, takes no part in the stop protocol and can be run again and again;
  as its task ends it runs what is deferred and what other threads queued behind the last
  step, before it returns.
* ``abandon(error)``: owner thread, when ``run`` has stopped or failed: cancel and wait out
  every operation in the kernel, take every parked task off its waiter list, close every
  unfinished coroutine and finish its task with *error* (or ``tc.Cancelled``), unreported.
  It finishes the tasks in ``live``, in flight, parked or ready: the owner of a guest engine
  adds the tasks it creates itself to ``engine.live``, so that one popped mid-step is
  finished too. The scheduler's own shutdown and crash paths use it as well.
* ``cancel_op(op)``: owner thread, cancel one operation in the kernel (closing a resource).
* ``deadlines`` (a :class:`~tinycoro.core.deadlines.Deadlines`): owner thread. ``tc.timeout``
  adds its scope's deadline there (``deadlines.add(when, scope)``) and removes it as the scope
  exits (``deadlines.remove(entry)``); ``tc.sleep`` parks its task on one
  (``deadlines.sleep(task, seconds, when)``, rule 19); the deadlock watchdog asks
  ``deadlines.pending()``. The engine fires what has passed at the end of every turn, earliest
  first (a sleeper goes back on the ready queue), and bounds its sleep by the next one.
* ``inline_ok()``: owner thread, inside a step: may the running task complete one more
  operation without suspending (a socket operation that completes at once:
  :mod:`tinycoro.net`)? A layer that completes work inline asks before each operation and
  awaits the trap layer's gate (``traps.consume_budget()``, one yield) on False, so no task
  holds its context for more than
  ``INLINE_BUDGET`` operations, and an interrupt still lands at the first await, as it would
  on the ring. The module-level
  ``spend_inline(task)`` is the same check for a caller that holds the running task already
  (an uncontended lock of :mod:`tinycoro.sync`, a page-cache read of :mod:`tinycoro.io`).
* ``Scheduler.context_idle(engine)`` is the engine's one call into the scheduler (the stop
  protocol), and ``scheduler.failure_hook`` the one attribute it reads.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from .. import uring
from . import deques, fence, resume, wakeword
from .errors import Cancelled, asyncio_in_task
from .deadlines import Deadlines
from .timeshare import STEP as BUSY_STEP
from .timeshare import keep
from .stats import FailureInfo
from .submitpolicy import submit_early
from .local import _local, running_task, set_running_task
from .ring import RingOwner
from .task import DONE, Task, describe
from .traps import YIELD, Op, Park, install_budget

if TYPE_CHECKING:  # pragma: no cover
    from .scheduler import Scheduler

_perf = time.perf_counter
deques.init()  # compiled, deque's C functions for the ready queue's push and pop (deques.pxd)
log = logging.getLogger("tinycoro")
FAILURES_KEPT = 20  # recent failures remembered per context, for %tinycoro tasks
# Operations one step may complete inline (see ``inline_ok``): 16 page-cache reads of 4 KiB
# are ~40 us of the context's time; the read after them suspends (yield_now), so the others
# wait at most that long per turn for a task that reads a cached file in a loop, and the
# suspension's cost (~1 us) is spread over 16 reads: 16, 64 and an unbounded budget measured
# the same ~4 us per read (64 tasks reading a cached file on one context).
INLINE_BUDGET = 16
# SQEs a turn queues before it submits them without waiting for its end. O_DIRECT reads at
# depth 64 otherwise ran as a convoy: all 64 complete together, the turn that resumes their
# tasks queues 64 new reads, and the device idled for that whole turn (~1 ms here) before it
# got any of them; the context then slept ~1 ms for the device, 33-47% of the time (5-8% with
# 16). Device I/O now goes at once (Op.eager: another ~8% of fio's rate); this bound stays for
# the rest, at one io_uring_enter per 16 SQEs instead of one per turn: about 0.1 us per
# operation next to the 1-2 us an SQE costs in Python.
SUBMIT_EARLY = submit_early()  # TINYCORO_SUBMIT_EARLY (core.submitpolicy) sets it
# Awaits an abandoned coroutine may make (each refused) before its close is given up: a finally
# block that catches GeneratorExit and awaits again, in a loop, must not hang the shutdown.
REFUSALS_KEPT = 100


def _is_asyncio_future(obj: object) -> bool:
    return getattr(obj, "_asyncio_future_blocking", None) is not None


class Engine(RingOwner):
    """Ready queue + ring + eventfd of one context.

    Everything here runs on the owning thread, except :meth:`push` and :meth:`call_soon`, which
    any thread may call, and the scheduler's reads of the counters for statistics. The ring,
    its table of ops in flight and the steps on them (queue, submit, reap, cancel, drain) are
    :class:`~tinycoro.core.ring.RingOwner`'s, shared with the asyncio host; the engine decides
    what a completed op's task sees (:meth:`_deliver`).
    """

    def __init__(
        self, id: int | None, scheduler: "Scheduler | None", ring_entries: int, guest: bool = False
    ) -> None:
        self.id = id
        self.scheduler = scheduler  # where tc.spawn from a task on this engine dispatches to
        self.guest = guest  # a borrowed thread (notebook cell): not part of the stop protocol
        # A scheduler's context is run by its own thread only, not the one making it here:
        # its ring is set up for one owner, which enables it as it starts running (run), and
        # gets SINGLE_ISSUER/DEFER_TASKRUN where they are in use (tinycoro.uring). A guest's
        # thread is borrowed and may change from one run to the next.
        RingOwner.__init__(self, uring.Ring(ring_entries, single_issuer=not guest))
        # appended to with deques.append: compiled, a C call of deque's own append, where
        # `self.ready.append(task)` looked the method up by name on every push (a type lookup,
        # a thread-state read on 3.12+: ~260 instructions) and a bound method, bound once, was
        # still a generic call (~126); a C field, not typed: Cython has no deque type
        self.ready: deque[Task] = deque()
        self.calls: deque[tuple[Callable[..., Any], tuple]] = deque()
        # What this thread's task steps asked to happen once their turn is over (defer), e.g.
        # a task spawned on another context: owner thread only, so a plain list.
        self.deferred: list[tuple[Callable[..., Any], tuple]] = []
        self.parked: dict[Task, Park] = {}
        self.live: set[Task] = set()  # assigned here, not finished; for stop() and stats
        # True while abandon() closes coroutines: the engine has stopped, so an await in a
        # finally block cannot suspend; closing a resource then releases its descriptor at
        # once instead (tinycoro.closing.close_fd, rule 13).
        self.abandoning = False
        self.sleeping = False
        self.stop_requested = False
        self.stop_flag = 0  # owned by the scheduler, under its lock (docs/design.md, stop protocol)
        self._wake_lock = threading.RLock()
        self._fence = threading.Lock()  # only ever taken and released at once: see _sleep
        self.tasks_run = 0  # tasks finished on this context
        self.timers = 0  # tc.sleep timers started here, cumulative (counted by sleep itself)
        self.failed = 0  # tasks that failed (not Cancelled) with nobody waiting on them
        self.failures: deque[FailureInfo] = deque(maxlen=FAILURES_KEPT)  # the latest of them
        self.steps = 0  # coroutine resumptions
        self.inline_left = 0  # inline completions the running step may still make: inline_ok
        self.wakeups = 0  # returns from the sleep point; the deadlock watchdog's progress clock
        self.sleep_total = 0.0  # seconds spent blocked in the sleep point
        # perf_counter() when the current sleep began, 0 while awake. Asleep until a thread runs
        # this engine, and again once its run ends: peers release the GIL at each submit only
        # while one of them is awake to take it (_peer_awake), and one counted awake before its
        # thread started had the thread starting it wait behind those releases (each resets a
        # waiter's switch-interval clock) for up to 68 ms at a scheduler's start.
        self.sleep_since = _perf()
        # (perf_counter, sleep_total) samples taken by this engine as it wakes, at least
        # BUSY_STEP apart and covering the last second, replaced as one tuple so that a
        # reader on another thread sees them whole: busy() is a pure function of them.
        self._samples: tuple[tuple[float, float], ...] = ((_perf(), 0.0),)
        # Held while the tuple is replaced and while another thread takes it (readers.busy):
        # compiled, a reader that loaded the field just before the old tuple's last reference
        # went would take a reference to freed memory without the GIL (once per BUSY_STEP).
        self._samples_lock = threading.Lock()
        # Deadlines of the scopes (tc.timeout) entered and the sleeps (tc.sleep) made by tasks
        # on this engine; a sleep that ends puts its task back on this ready queue.
        self.deadlines = Deadlines(self.ready)
        # "Woken, waiting for the GIL" (core/wakeword.py): set by this context's wait as it
        # returns and by wake(), cleared when this context runs again; a busy peer reads it at
        # its turn's end and hands the GIL over. A bytearray: C holds its address without the GIL.
        self.wake_word = bytearray(1)
        self.handovers = 0  # times this context let go of the GIL for a woken peer
        # Steps of its peers' turns this context waited through for the GIL, back from a
        # release while awake (its word 2): a peer's _hand_over adds them, its own clears them.
        self.waited_steps = 0
        self.watchers: list = []  # tinycoro.testing.wait_blocked watches of tasks on this engine
        self.thread_ident: int | None = None
        # The other contexts of this engine's scheduler (Scheduler.peers), set as it starts
        # running: whether one is awake decides if a sleep yields first (_peer_awake).
        self._peers: tuple = ()
        self._hand_to: tuple = ()  # the peers to hand the GIL to when woken: none without a GIL

    def __repr__(self) -> str:
        return f"<Engine {self.id} ready={len(self.ready)} io={self.inflight_count()} parked={len(self.parked)}>"

    # -- owner thread (a task's step) -------------------------------------------------------------
    def defer(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on this thread once the steps of the current turn are over (and
        before a guest run returns, or an abandon ends). A task spawned on another context
        starts that way (``Scheduler.submit_watched``): whatever the spawning step does next,
        such as awaiting it, is done before the task can run, as on the spawner's own context."""
        self.deferred.append((fn, args))

    def take_deferred(self) -> list[tuple[Callable[..., Any], tuple]]:
        """Owner thread, inside a step about to block its thread (``Scheduler.run_sync`` or
        ``stop()`` from a notebook cell): what the turn deferred so far, taken off this
        engine for the caller to run, since the turn cannot end while the thread waits."""
        deferred, self.deferred = self.deferred, []
        return deferred

    def _run_calls(self) -> None:
        """Run what other threads queued with :meth:`call_soon`, in order, until none is left."""
        calls = self.calls
        while calls:
            fn, args = calls.popleft()
            fn(*args)

    def _run_deferred(self) -> None:
        while self.deferred:  # what a deferred call defers runs in this pass too
            deferred, self.deferred = self.deferred, []
            for fn, args in deferred:
                fn(*args)

    # -- any thread ----------------------------------------------------------------------------
    def push(self, task: Task) -> None:
        """Make *task* ready on this engine; wake the engine only if it sleeps (rule 4)."""
        deques.append(self.ready, task)
        if fence.FREE_THREADED:  # rule 4 without the GIL: the append before the read
            fence.full()
        if self.sleeping:
            self.wake()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on this engine's thread at the start of its next turn."""
        self.calls.append((fn, args))
        if fence.FREE_THREADED:  # as in push
            fence.full()
        if self.sleeping:
            self.wake()

    def wake(self) -> None:
        """Write the eventfd (any thread). The lock orders it with :meth:`close`; it is
        re-entrant because a signal handler on the owning thread may wake during a close."""
        with self._wake_lock:
            efd = self.ring.efd
            if efd < 0:  # the ring is closed: the engine has stopped for good
                return
            # Before the write: a busy peer that reads it at its turn's end hands the GIL over.
            # Interpreted, this is the only writer (wakeword's module doc says why).
            self.wake_word[0] = 1
            try:
                os.eventfd_write(efd, 1)
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        """True once :meth:`close` released the ring and eventfd: the engine cannot run again."""
        return self.ring.closed

    def request_stop(self) -> None:
        self.stop_requested = True
        self.wake()

    # -- owning thread -------------------------------------------------------------------------
    def run(self, until: Task | None = None) -> None:
        """Drive this engine on the calling thread.

        With *until*, return as soon as that task is done (a notebook cell's engine). Without,
        run until the scheduler requests a stop, then :meth:`abandon` what is left: cancel and
        wait out any I/O still in the kernel (no buffer is freed while the kernel may write
        into it), take parked tasks off their waiter lists and close their coroutines.
        """
        if _local.engine is not None:
            raise RuntimeError(f"{_local.engine!r} already runs on this thread")
        if self.ring.closed:
            raise RuntimeError(f"{self!r} is closed")
        self.ring.enable()  # this thread becomes the ring's one issuer (if it has one)
        _local.engine = self
        self.thread_ident = threading.get_ident()
        ready = self.ready
        calls = self.calls
        deadlines = self.deadlines
        # The stop protocol's one call into the scheduler; a guest engine takes no part in it.
        scheduler = None if self.guest else self.scheduler
        self._peers = () if scheduler is None else scheduler.peers(self)
        self._end_sleep(self.sleep_since)  # awake from here (__init__ says why)
        hand_to = self._hand_to = self._peers if wakeword.needed() else ()
        if hand_to:  # back from a submit without the GIL, this context waits for it too
            self.ring.set_return_word(self.wake_word)
        try:
            while True:
                # deques.size, not a truth test: compiled, a read of the deque's length (deques.pxd)
                if deques.size(calls):
                    self._run_calls()
                # n is counted by _step, not added here: compiled, that keeps n a C integer
                # (Cython's inference gives up on it where an addition could overflow), so
                # the turn's loop is a C loop, not a range object and a Python int per turn
                n = deques.size(ready)
                if n:
                    for _ in range(n):
                        # self._step, not a local bound to it: compiled, this is a C call
                        # (engine.pxd), where a bound method was a Python call with its
                        # arguments parsed (~140 instructions per step, callgrind)
                        self._step(deques.popleft(ready))
                    set_running_task(None)  # once per turn: no task code runs between two steps
                    if self.watchers:
                        self._check_watchers()
                if self.unsubmitted:
                    self._submit()
                # inflight_count() > 0, written out: two list lengths, no call
                if (len(self._slots) >> 1) - len(self._free) > 1 or self.own_inflight:
                    self._reap()
                if deadlines.heap:
                    deadlines.fire()
                if self.deferred:
                    self._run_deferred()
                if hand_to:  # the turn's end: a woken peer waiting for the GIL gets it now
                    self._hand_over(hand_to, n)
                if until is not None and until._state is DONE:
                    # What other threads queued behind the task's last step runs now, not at
                    # the next run (a notebook's next cell, maybe never): RemoteTask's
                    # report of a failure nothing awaited is asked that way.
                    if calls:
                        self._run_calls()
                    return
                # A stop is obeyed before more ready work: the scheduler asks for it once every
                # context is idle, or once the tasks it cancelled had their time to unwind
                # (stop(timeout), Ctrl-C). A task still ready then (one that ignores its
                # cancel and keeps yielding) would otherwise keep this loop turning for ever;
                # abandon() below closes it instead (rule 13).
                if self.stop_requested:
                    break
                if deques.size(ready) or deques.size(calls):
                    continue
                # An operation that completes many times (RingOwner.arm) stays in flight while
                # nobody waits on it: that is no work, so it does not keep the context busy.
                if scheduler is not None and not self.parked and (
                    not self.inflight_count() or not self.waited_inflight()
                ):
                    scheduler.context_idle(self)
                    if ready or calls or self.stop_requested:
                        continue
                self._sleep()
        finally:
            _local.task = None
            try:
                if self.deferred:  # a guest's last step, or a turn that raised
                    self._run_deferred()
            finally:
                _local.engine = None
                self.sleep_since = _perf()  # no thread runs it now: not awake to its peers
        self.abandon(None)

    def _end_sleep(self, t0: float) -> None:
        """The sleep that began at *t0* (a perf_counter() reading) ends now: count it, read as
        awake, and take a busy sample if one is due. The total before the flag: a reader
        between the two counts this sleep twice for an instant (busy reads low), never not at
        all (busy reads high)."""
        t1 = _perf()
        self.sleep_total += t1 - t0
        self.sleep_since = 0.0
        # A wait for the GIL its peers counted before this sleep (its word at 2 on the way in)
        # is over: the next one is counted from nothing (_hand_over)
        self.waited_steps = 0
        if t1 - self._samples[-1][0] >= BUSY_STEP:
            samples = keep(self._samples, t1, self.sleep_total)
            with self._samples_lock:
                self._samples = samples

    def _sleep(self, draining: bool = False) -> None:
        """The sleep point: block on the eventfd unless something is already there to do.

        Notifications go on before the last look at the queues and the CQ (see the module doc
        on lost wake-ups). Completions already in the CQ are reaped here, whatever they are
        (our own cancel requests too), so a CQE that nothing waits for can never keep the
        context from sleeping. SQEs the kernel refused (EBUSY) are retried, not slept on.
        """
        ring = self.ring
        self.sleeping = True
        ring.notify_on(True)
        barrier = self._fence  # a full barrier between the flag store and the CQ tail load below
        barrier.acquire()
        barrier.release()
        if fence.FREE_THREADED:  # and between the flag and the queues, paired with push's
            fence.full()
        try:
            if self._found_work(ring, draining):
                return
            if self._peers and not draining and self._peer_awake():
                # Back from the yield this context wants the GIL at once: under a GIL its
                # word says so (2) for a busy peer's turn end (core/wakeword.py)
                word = self.wake_word
                if self._hand_to:
                    word[0] = 2
                os.sched_yield()  # _peer_awake says why; then the same look once more
                word[0] = 0
                if self._found_work(ring, draining):
                    return
            self.sleep_since = t0 = _perf()
            try:
                if self.deadlines.heap and not draining:
                    when = self.deadlines.fire()
                    # a deadline that just fired queued its delivery, or made a sleeper ready
                    if not self.calls and not self.ready:
                        self._block_until(when)
                else:
                    wakeword.wait(self.wake_word, ring.efd, -1.0)
            finally:
                self._end_sleep(t0)
                self.wakeups += 1
        finally:
            ring.notify_on(False)
            self.wake_word[0] = 0  # running again: a peer's hand-over (see _hand_over) ends
            self.sleeping = False

    def _hand_over(self, peers: tuple, steps: int) -> None:
        """At a turn's end (of *steps* steps): let go of the GIL until a peer that waits for
        it has taken it, instead of keeping it until this context sleeps or the switch interval
        forces a switch (core/wakeword.py): one woken from its sleep point (its wake word set
        there) at once, one back from a release while awake (2: a submit's system call) at
        once too where there are more peers, and with one peer once it has waited through
        :data:`wakeword.WAIT_STEPS` of this context's steps. One peer per turn; its word clears
        as it runs again, or the bound ends the wait."""
        self.waited_steps = 0  # this context has the GIL: its own wait is over
        if steps < wakeword.TURN_STEPS:
            steps = wakeword.TURN_STEPS
        for e in peers:
            word = e.wake_word[0]
            if not word or (word != 2 and not e.sleeping):
                continue
            if not e.sleeping and len(peers) == 1:  # back from a release while awake: this
                e.waited_steps += steps  # context's next release may give it the GIL first
                if e.waited_steps < wakeword.WAIT_STEPS:
                    continue
            self.handovers += 1
            wakeword.hand_over(e.wake_word, self.wake_word, wakeword.HAND_OVER_YIELDS)
            return

    def _peer_awake(self) -> bool:
        """Whether another context of this scheduler is awake (not blocked in its sleep
        point): then a context about to sleep gives up the CPU once (``sched_yield``, which
        releases the GIL) and looks again before it sleeps.

        Why: under the GIL only one context runs Python at a time, so the contexts take
        turns, and each one's completion queue is often empty just when it finishes its turn
        (the other context, or the peer process, is about to produce what it waits for). A
        sleep then costs the eventfd read, the kernel's write of the eventfd for the next
        completion and two thread switches, each a trip through the hypervisor on a virtual
        machine. The yield is one system call, lets the awake context (or the peer on this
        CPU) run, and its return to user space posts the completions the kernel kept for
        this thread (COOP_TASKRUN). On the 50-connection echo with 2 contexts it took the
        eventfd reads from 0.16-0.32 to 0.004-0.011 per request, all system calls from
        0.30-0.52 to 0.115-0.127 (one context's figure), and the server CPU per request from
        8.6-9.6 to 5.8-6.8 us on a loaded machine (docs/benchmarks-log.md, "Speed round 4"). A peer blocked in its own sleep point makes
        nothing here, so then the context sleeps at once, as a single context does.

        It runs after the last look (``sleeping`` set, notifications on): a push or a
        completion during the yield writes the eventfd as it would during the sleep, so no
        wake-up is lost (rule 4), and a stale write costs one extra turn.
        """
        for e in self._peers:
            if e.sleep_since == 0.0:  # not blocked in its sleep point: running, or about to
                return True
        return False

    def _submit(self) -> None:
        """Hand the turn's SQEs to the kernel, releasing the GIL during the system call only
        while another context is awake: that context can run Python meanwhile (for a socket
        op, ``io_uring_enter`` does the work inline). With nobody to use it, a release per
        submit only starved the process's other threads of the GIL: a busy context took it
        back before a waiter woke, every time (``CRing.submit`` says why). Held, a waiter
        gets it after one switch interval, as it would from any busy Python thread."""
        self._set_release_gil(self._peer_awake())
        RingOwner._submit(self)

    def _submit_eager(self) -> None:
        """Hand an eager op's SQE (``Op.eager``: device I/O) and any queued before it to the
        kernel now, keeping the GIL: such a submit queues the I/O and returns within a few
        microseconds, too soon for another context to use the GIL, and a release per read
        would have the contexts hand it back and forth once per read instead of once per turn
        (beside a busy context: 40-44k O_DIRECT reads/s released, 62-71k kept)."""
        self._set_release_gil(False)
        RingOwner._submit(self)

    def arm_now(self, op: Any) -> BaseException | None:
        """:meth:`arm` *op* (a :class:`~tinycoro.core.ring.MultiOp`: its completion goes to
        the op, no task suspends on it), and hand its SQE to the kernel now, not at the
        turn's end: for a task that goes on working in this step while the kernel does *op*
        (a split whole-file read's back half: tinycoro.io._parallel). Owner thread."""
        error = self.arm(op)
        if error is None:
            self._submit()
        return error

    def _found_work(self, ring: Any, draining: bool) -> bool:
        """The sleep point's look, with notifications on: True if there is something to do
        (the sleep is not needed). Completions already in the CQ are reaped here, whatever
        they are, and the context is then awake again and stays so: a task woken by what is
        reaped (a completion of an operation that completes many times, through push) needs
        no eventfd write."""
        if ring.cq_ready():  # posted, or held back by the kernel (DEFER_TASKRUN)
            self.sleeping = False
            # Off before reaping: posting what the kernel held back would write the eventfd,
            # and the next sleep would return at once for nothing.
            ring.notify_on(False)
            self._reap()
            return True
        if self.unsubmitted:
            return True
        return not draining and bool(self.ready or self.calls or self.stop_requested)

    def _block_until(self, when: float | None) -> None:
        """The sleep point with a bound: wait for the eventfd, or until *when* at the latest
        (the next deadline: a ``tc.timeout`` scope's or a ``tc.sleep``'s), never ending before
        it (:func:`wakeword.wait` says how, compiled and interpreted)."""
        if when is None:
            wakeword.wait(self.wake_word, self.ring.efd, -1.0)
            return
        delay = when - _perf()
        if delay <= 0:
            return
        wakeword.wait(self.wake_word, self.ring.efd, delay)

    # -- tinycoro.testing.wait_blocked --------------------------------------------------------
    def watch_blocked(self, watch: Any) -> None:
        """Look at *watch* (``watch.check()``) at the end of every turn until it is done."""
        self.watchers.append(watch)
        watch.check()

    def _check_watchers(self) -> None:
        for w in self.watchers:
            w.check()
        self.watchers = [w for w in self.watchers if not w.done]

    def inline_ok(self) -> bool:
        """Owner thread, inside a step: whether the running task may complete one more
        operation inline (and count it), or must suspend first: because this step has had
        INLINE_BUDGET of them, or because an interrupt (a cancel, a timeout that expired,
        ``tc.timeout(0)``) waits for the task's next await, where the ring path delivers it."""
        task = running_task()  # compiled, a C read (engine.pxd): no descriptor lookup
        return task is not None and spend_inline(task)  # the running task's engine is this one

    def _step(self, task: Task) -> None:
        """Resume *task* once and act on the trap it yields next."""
        self.steps += 1
        # a C call compiled (_clocal.pxd): the attribute store through its descriptor was
        # ~165 instructions per step, and once more per turn for the None above
        set_running_task(task)
        self.inline_left = INLINE_BUDGET
        waiting = task._waiting
        if waiting is None:
            if task._interrupts is not None and task._resume_exc is None:
                # Not started yet, or resumed after yield_now: that is its pending await.
                task._resume_exc = task._take_interrupt()
        else:
            task._waiting = None
            if type(waiting) is Park:
                del self.parked[task]
                if task._interrupts is not None and task._resume_exc is None and waiting.undo is not None:
                    # Woken with something handed over (a lock, a permit) after a cancel was
                    # requested: give it back and deliver the cancellation instead.
                    exc = task._take_interrupt()
                    if exc is not None:
                        try:
                            waiting.undo(task._resume_value)
                        except (KeyboardInterrupt, SystemExit):
                            raise
                        except BaseException as e:  # noqa: BLE001 - rule 17: reported
                            self._hook_failed(task, waiting.undo, e)
                        task._resume_exc = exc
            # Let go of it before the task runs: a join's Park holds the joined task, which
            # this frame would otherwise keep alive for the whole step.
            waiting = None
        try:
            # Every step runs inside the task's own contextvars.Context (rule 9), as asyncio's
            # tasks do: context variables follow the task across awaits and contexts.
            exc = task._resume_exc
            if exc is None:
                value = task._resume_value
                task._resume_value = None
                y = resume.send(task, value)  # in C compiled: resume.py says why
            else:
                task._resume_exc = None
                y = task._context.run(task._coro.throw, exc)
        except StopIteration as e:
            self._finish(task, e.value, None)
            return
        except BaseException as e:  # noqa: BLE001 - the task's outcome, delivered to joiners
            self._finish(task, None, e)
            return
        if isinstance(y, Op):  # any kind of op (a stream's recv, a file's read): rule 14
            self._start(task, y)
        elif y is YIELD:
            if task._interrupts is not None:
                task._resume_exc = task._take_interrupt()
            deques.append(self.ready, task)
        elif type(y) is Park:
            self._park(task, y)
        elif resume.returned(y):  # compiled, a return: by value, no StopIteration (resume.pxd)
            value, task._resume_value = task._resume_value, None
            self._finish(task, value, None)
        else:
            self._bad_yield(task, y)

    def _start(self, task: Task, op: Op) -> None:
        if task._interrupts is not None:  # interrupted before the op reached the ring
            exc = task._take_interrupt()
            if exc is not None:
                task._resume_exc = exc
                self.ready.append(task)
                return
        # RingOwner._enter, written out: calling it costs ~470 instructions per operation
        # interpreted (callgrind, CPython 3.11: 11.5k -> 12.0k per NOP round trip, +2.5% on
        # echo), and the pure runtime runs this same source. The slot, the ring's queue and the
        # slow paths stay RingOwner's (_take_slot and _queue_sqe, C calls compiled, the latter
        # one Python call interpreted; _queue_failed). Keep the two in step.
        slot = ud = self._take_slot()
        op.ud = ud
        try:
            self._queue_sqe(op.prep, op.args, ud)  # compiled, a C call (ring.pxd)
        except BaseException as e:  # noqa: BLE001 - sorted out off the hot path
            error = self._queue_failed(e, op.prep, op.args, ud)
            if error is not None:
                self._free.append(ud)
                task._resume_exc = error
                self.ready.append(task)
                return
        else:
            self.unsubmitted += 1
        op.task = task
        op.cancelling = False  # an op may be reused once its CQE is in (net.Stream does)
        self._slots[slot] = op
        task._waiting = op
        # Only now, with the op in the in-flight table: its CQE may be reaped (by _submit's
        # EBUSY path, or the turn's end) as soon as the kernel has it. An eager op (device
        # I/O) goes now: with 64 O_DIRECT reads in flight, a read that waited for the turn's
        # end kept the device below its depth for the rest of the turn (~8% of fio's rate).
        if self.unsubmitted >= SUBMIT_EARLY:
            self._submit()
        elif op.eager:
            self._submit_eager()

    def _park(self, task: Task, ticket: Park) -> None:
        if task._interrupts is not None and self._abort(task, ticket):
            task._resume_exc = task._take_interrupt()
            self.ready.append(task)
            return
        self.parked[task] = ticket
        task._waiting = ticket

    def _bad_yield(self, task: Task, y: object) -> None:
        if _is_asyncio_future(y):
            exc = asyncio_in_task(task.name, f"an asyncio object ({type(y).__name__})")
        elif y is None:  # a bare yield: asyncio's sleep(0), or a generator-based coroutine's
            exc = asyncio_in_task(task.name, "a bare `yield` (asyncio.sleep(0) does that)")
        else:
            exc = TypeError(f"{task.name} yielded {y!r}, which is not a tinycoro trap")
        task._resume_exc = exc
        self.ready.append(task)

    def _finish(
        self, task: Task, result: Any, exc: BaseException | None, report: bool = True
    ) -> None:
        self.tasks_run += 1
        self.live.discard(task)
        observed = task._finish(result, exc)
        # Checked after the task's state is DONE, under its lock in task._finish: from then
        # on nobody can join it any more, so "no joiner" here means nobody ever will have been
        # waiting when it ended. Guest engines' tasks (notebook cells) are their runner's.
        if report and exc is not None and not observed and not self.guest:
            if not isinstance(exc, Cancelled):
                self._report_failure(task, exc)

    def report_callback_error(self, task: Task, callback: Any, exc: BaseException) -> None:
        """A done callback of *task* raised *exc* (rule 17); any thread. Said the way an
        unobserved failure is said when no ``failure_hook`` is set (the "tinycoro" logger,
        with the traceback), inside the task's ``contextvars.Context`` so that a notebook
        shows it in the cell that spawned the task. Not counted in ``failed``: the task's own
        outcome is unchanged, and the caller carries on with the other callbacks."""
        exc_info = (type(exc), exc, exc.__traceback__)
        try:
            task._context.run(
                log.error, "done callback %r of %s raised", callback, describe(task),
                exc_info=exc_info,
            )
        except BaseException:  # noqa: BLE001 - a broken handler must not take the context down
            pass

    def _abort(self, task: Task, ticket: Park) -> bool:
        """``ticket.abort()``: take the cancelled *task* off its waiter list. The hook is the
        primitive's (or a task's own, through tinycoro.lowlevel): if it raises, that is
        reported with the task and counts as "a wake is on its way" (rule 17), so the task
        stays parked, its interrupt pending for the await after the wake."""
        try:
            return ticket.abort()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - reported; the context carries on
            self._hook_failed(task, ticket.abort, e)
            return False

    def _hook_failed(self, task: Task, hook: Any, exc: BaseException) -> None:
        """A park's wake hook (``abort``, ``undo``) raised (rule 17): say so with the task."""
        try:
            log.error(
                "wake hook %r of %s raised", hook, describe(task),
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        except BaseException:  # noqa: BLE001 - a broken handler must not take the context down
            pass

    def _report_failure(self, task: Task, exc: BaseException) -> None:
        """A task failed with nobody awaiting it: count it, remember it, and say so now
        (through the scheduler's ``failure_hook``, inside the task's context; or the log)."""
        first = (traceback.format_exception_only(type(exc), exc) or [repr(exc)])[0]
        self.failures.append(FailureInfo(task.id, task.name, self.id, first.strip(), time.time()))
        # Counted only once listed: a reader that waits for the count (a dashboard, a notebook
        # polling stats().failed) then finds the failure in failures()
        self.failed += 1
        task._retrieved = True  # reported here; Task.__del__ must not report it again
        hook = getattr(self.scheduler, "failure_hook", None)
        try:
            if hook is None:
                exc_info = (type(exc), exc, exc.__traceback__)
                log.error("%s failed and nothing awaits it", describe(task), exc_info=exc_info)
            else:
                task._context.run(hook, task, exc)
        except BaseException:  # noqa: BLE001 - a broken hook must not take the context down
            log.exception("tinycoro failure_hook raised while reporting %s", describe(task))

    def failure_taken(self, task_id: int) -> None:
        """The failure of task *task_id*, reported as unawaited, has been awaited after all:
        it leaves the recent failures (``Scheduler.failures()``); ``failed`` still counts it.
        Any thread (deque operations are atomic); rare: only a failed task's later join."""
        for f in list(self.failures):
            if f.id == task_id:
                try:
                    self.failures.remove(f)
                except ValueError:  # taken meanwhile by another join
                    pass

    def _deliver(self, done: list) -> None:
        """What the task of each completed op sees (``RingOwner._reap`` calls this): the
        result, or, when the op failed while we were cancelling it, the interrupt. *done*
        holds ``op, res`` pairs as two entries each."""
        # deques.append: compiled, a C call of deque's own append, where the bound
        # `self.ready.append` went through Python's generic call per completion (deques.pxd)
        ready = self.ready
        n = len(done)
        for i in range(0, n, 2):
            op = done[i]
            res = done[i + 1]
            task = op.task
            op.task = None  # delivered: an op kept for reuse keeps no task alive
            if task is None:  # orphaned at shutdown: nobody will take what it returns
                self._orphaned(op, res)
            elif res < 0 and op.cancelling:
                # Any failure of an op we asked the kernel to cancel is the cancel's doing
                # (-ECANCELED, or -EINTR / -ERESTARTSYS from an operation blocked in the
                # kernel, such as opening a FIFO): deliver the interrupt, not the errno. An op
                # cancelled by cancel_op (a resource closed) has no interrupt: it gets res.
                exc = task._take_interrupt()
                if exc is not None:
                    task._resume_exc = exc
                else:
                    task._resume_value = res
                deques.append(ready, task)
            else:
                task._resume_value = res
                deques.append(ready, task)

    def _wait_for_cqe(self) -> None:
        self._sleep(draining=True)

    def deliver_cancel(self, task: Task) -> None:
        """Owner-thread half of ``Task.cancel``: abort whatever the task waits on."""
        if task._state is DONE or task._interrupts is None:
            return
        waiting = task._waiting
        if isinstance(waiting, Op):
            # Only an op still in the kernel: one whose completion was reaped but whose task
            # has not stepped yet is finished, and the interrupt goes to the next await.
            if self.holds(waiting):
                self._cancel_op(waiting)
        elif type(waiting) is Park and task._resume_exc is None:
            if self._abort(task, waiting):
                task._resume_exc = task._take_interrupt()
                self.ready.append(task)
        # Otherwise the task is ready or running: the next trap it yields delivers it.

    def abandon(self, error: BaseException | None) -> None:
        """Finish every task still on this engine, on this (its owning) thread: the seam for
        the scheduler's shutdown and for a guest engine whose run failed.

        In this order: cancel every operation in the kernel and wait for its completion
        (rule 8); take every parked task off its primitive's waiter list (rule 13: nothing is
        ever handed to a dead task; what was handed over already is given back); close every
        unfinished coroutine, so ``finally`` blocks and ``async with`` exits run (a lock held
        is released; closing a resource releases its descriptor at once; any other ``await``
        in a finally block cannot complete and raises GeneratorExit again: ``_close_coro``); finish
        each task with *error*, or ``tc.Cancelled`` when it is None. These endings are the
        caller's report, not unobserved failures: nothing is logged or counted for them.
        The engine is empty afterwards and can run again (a guest engine does).
        """
        tasks = dict.fromkeys(self.live)  # ordered and unique; guest tasks are not in live
        tasks.update(dict.fromkeys(op.task for op in self.inflight.values() if op.task is not None))
        tasks.update(dict.fromkeys(self.parked))
        tasks.update(dict.fromkeys(self.ready))
        outer = _local.engine
        if outer is None:
            _local.engine = self  # a finally block may spawn or unlock: it runs "here"
        try:
            try:
                self._drain()
            finally:
                self._abort_parked()
            self.ready.clear()
            self.calls.clear()
            self.abandoning = True
            for task in tasks:
                if task._state is DONE:
                    continue
                _local.task = task
                try:
                    self._close_coro(task)
                finally:
                    _local.task = None
                task._retrieved = True  # the caller reports this ending, not the GC
                self._finish(task, None, error if error is not None else Cancelled(), report=False)
            # A finally block may have started kernel work that no await waits for (a split
            # read's back half goes in at once, before its await is refused): in too, rule 8.
            self._drain()
        finally:
            self.abandoning = False
            try:
                if self.deferred:  # a finally block that spawned elsewhere
                    self._run_deferred()
            finally:
                if outer is None:
                    _local.engine = None
            self.live.clear()
            self.ready.clear()  # a wake that was on its way for an abandoned task
            self.deadlines.clear()
            self.watchers.clear()
            # Waiting out the kernel's completions (_drain) went through the sleep point, whose
            # wake marks the context awake; no thread runs it once this returns
            self.sleep_since = _perf()

    def _close_coro(self, task: Task) -> None:
        """Close an abandoned task's coroutine (``abandon``), so its ``finally`` blocks and
        ``async with`` exits run, on this stopped engine.

        ``coro.close()`` would leave the coroutine suspended, half closed ("coroutine ignored
        GeneratorExit"), at the first await of a finally block, and whatever the rest of that
        block releases would wait for the garbage collector, or leak. So the close is done by
        hand: GeneratorExit is thrown in, and every await the coroutine still makes is refused
        with GeneratorExit again at once, never run (a park is taken back off its waiter list
        first). Closing a resource does not await here (``abandoning``: tinycoro.closing), so
        ``async with conn`` releases its descriptor and the block runs on. A coroutine that
        keeps awaiting after ``REFUSALS_KEPT`` refusals is left as ``close()`` would leave it.
        """
        coro = task._coro
        run = task._context.run
        for _ in range(REFUSALS_KEPT):
            try:
                y = run(coro.throw, GeneratorExit())
            except (GeneratorExit, StopIteration):
                return
            except BaseException as e:  # noqa: BLE001 - the finally block raised: say so
                log.warning("%s did not close cleanly: %r", describe(task), e)
                return
            if type(y) is Park:  # it put itself on a waiter list: take it off again
                self._take_off(task, y, ArrivedWakes(self.ready))
            task._waiting = None
        log.warning("%s did not close cleanly: it kept awaiting after GeneratorExit", describe(task))

    def _abort_parked(self) -> None:
        """Take every parked task off the waiter list it is on (rule 13)."""
        parked, self.parked = self.parked, {}
        # One view for the whole pass: the drain has just woken every recv parked on a
        # multishot it cancelled, so each of those aborts finds its wake queued already.
        arrived = ArrivedWakes(self.ready)
        for task, ticket in parked.items():
            task._waiting = None
            self._take_off(task, ticket, arrived)

    def _take_off(self, task: Task, ticket: Park, arrived: "ArrivedWakes") -> None:
        """Take *task*, parked with *ticket*, off its waiter list for good; if a wake got
        there first, give back what it handed over."""
        try:
            if ticket.abort():
                return
            # Popped already: a wake, and whatever it hands over, is on its way. Wait (a few
            # instructions of the waker's) for it, then give the thing back. Waited for also
            # with nothing to give back (no undo): a wake that landed after the stop cleared
            # the ready queue would leave a finished task there for an engine that runs again.
            for _ in range(100_000):
                if task in arrived:
                    break
                time.sleep(0)
            if ticket.undo is not None:
                ticket.undo(task._resume_value)
        except BaseException:  # noqa: BLE001 - never stop the others' cleanup
            log.exception("while taking %s off %r", describe(task), ticket.what)

    def close(self) -> None:
        """Close the ring and eventfd; the engine must have drained (no op in flight).

        Under the wake lock: a ``wake()`` from another thread either wrote before the close or
        sees the eventfd gone, never writes into a descriptor number reused meanwhile.
        """
        with self._wake_lock:
            self.ring.close()

    # -- statistics: read from other threads (core/readers.py), except this dispatch key -------
    def load(self) -> int:
        return len(self.ready) + self.inflight_count() + len(self.parked)



class ArrivedWakes:
    """The tasks queued on a ready queue that only grows while this is in use (a stop's pass
    over its parked tasks: nothing pops the queue then), for ``task in arrived``.

    Each entry is put in a set once: ``task in ready``, a scan of the queue per parked task
    whose wake was queued already, made a stop with N idle connections quadratic (its drain
    wakes every recv parked on a multishot it cancels before the tasks are taken off: 908M
    instructions at 6,000). Only what was appended since the last look is read, from the
    queue's end (one C step under the GIL; without it, a wake appended meanwhile makes the
    iteration raise, and the caller looks again); ``read`` counts the entries read."""

    __slots__ = ("ready", "tasks", "read")

    def __init__(self, ready: "deque[Task]") -> None:
        self.ready = ready
        self.tasks: set = set()
        self.read = 0

    def __contains__(self, task: object) -> bool:
        if task in self.tasks:
            return True
        new = len(self.ready) - self.read
        if new > 0:  # read only what was appended since the last look, from the end
            try:
                self.tasks.update(itertools.islice(reversed(self.ready), new))
            except RuntimeError:  # another thread appended meanwhile (no GIL): look again
                return False
            self.read += new
        return task in self.tasks


def spend_inline(task: Task) -> bool:
    """:meth:`Engine.inline_ok` for a caller that holds the running *task* already (an
    uncontended ``Mutex.lock`` has read it to own the lock): may *task* complete one more
    operation without suspending, and count it in its engine's budget? The same answer, with
    one thread-local read fewer; compiled, a C call (engine.pxd). Owner thread, inside
    *task*'s step only."""
    engine = task._engine
    if engine.inline_left <= 0 or task._interrupts is not None:
        return False
    engine.inline_left -= 1
    return True


install_budget(spend_inline)  # the trap layer's gate, consume_budget, asks this (rule 16)
