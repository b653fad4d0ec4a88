"""A context's sleep point and its wake word: the GIL handed over to a context that was woken.

Under the GIL, a context woken from its sleep (its eventfd written by a completion of its ring,
a push, a call) returns from the wait in C and then waits for the GIL. A peer busy with a long
run of turns keeps it until it sleeps itself, or until the woken thread's switch request forces
a switch after the interpreter's switch interval (5 ms): a ``call_soon`` onto a sleeping
context ran after a p99 of 11.5-18.7 ms (docs/benchmarks-log.md).

The wake word is one byte per context (a ``bytearray`` the engine owns, so that C holds its
address without the GIL): 1 means "woken, waiting for the GIL"; 2 means "back from a call that
released the GIL, wanting it at once" (below). Two writers set 1: the
sleeper's own wait, from C as the wait returns and before it asks for the GIL (compiled), and
whoever writes the sleeper's eventfd (``Engine.wake``, under the GIL; the only writer when
interpreted, since Python code cannot run before the GIL is back). The sleeper clears it once
it runs again. A busy peer reads it at the end of each turn and answers with
:func:`hand_over`: it lets go of the GIL until the word is clear again (the woken context has
the GIL and runs), at most :data:`HAND_OVER_YIELDS` ``sched_yield`` calls. No other thread's
ring is read: a ring stays its owner's (docs/design.md, rule 2).

A context that was awake waits for the GIL too, after a call that released it: a submit (the
ring sets 2 from C as ``io_uring_enter`` returns and clears it once the GIL is back:
``CRing.set_return_word``), the sleep point's one yield (the engine sets 2 around it), and the
end of its own hand-over (:func:`hand_over` sets 2 once the peer has the GIL). A busy peer
answers 2 at a turn's end too (unanswered, a context back from its submit waited for the
switch interval: 1,000-27,000 of the busy context's steps in tests/test_handover.py on older
code): at once for the sleep point's yield and where it has more than one peer; with two
contexts, once the waiting one has waited through :data:`WAIT_STEPS` of its steps (a turn
counting as :data:`TURN_STEPS` at least). Not at every turn's end there: each hand-over
leaves the giver's own word at 2, so two busy contexts answering at once handed the GIL back
and forth at every turn, each time idle until the other thread ran, and locked into that. On
the 50-connection echo with 2 contexts that mode served 0.48-0.74x of one context's requests
at twice its CPU per request (~20 hand-overs per 1,000 requests per context, against ~1
without); before the bound the GIL mostly moves at the busy context's own releases (its
submits), which hand it over with no idle GIL when the waiting thread is on a CPU.

Nothing is handed over on a free-threaded build running without the GIL (:func:`needed`): a
woken context runs at once there.

Compiled code cimports ``wakeword.pxd`` under this module's name (as ``core/fence``), where
:func:`wait` and :func:`hand_over` are C functions; interpreted, these twins run.
"""

from __future__ import annotations

import os
import select
import sys

__all__ = ["HAND_OVER_YIELDS", "TURN_STEPS", "WAIT_STEPS", "hand_over", "needed", "wait"]

#: How many times a busy context yields the CPU at most, its GIL released, for a woken peer to
#: take the GIL: a bound, so that a peer that never clears its word (its thread descheduled on a
#: loaded machine) costs one bounded pause, not a stall. The prototype measured with 1,000.
HAND_OVER_YIELDS = 1000

#: How many of a busy context's steps a peer back from a release while awake (wake word 2)
#: waits through before the busy one hands it the GIL at a turn's end; a peer woken from its
#: sleep point is handed it at once. A bound far below a switch interval of steps, high
#: enough that two busy contexts do not hand over at every turn (the module doc says why).
#: Echo, 2 contexts, rounds where the hand-overs came at every turn end (~20 per 1,000
#: requests per context, 0.69-0.74x of one context; the servers' threads at real-time
#: priority to keep the machine's other load out): a bound of 4, 8, 16, 32 and 64 of the
#: busy context's turns (~10 steps each there; this bound is ~25) gave 0.72-1.2x (mixed),
#: 0.88-0.92x, 0.92-0.96x, 0.94-1.01x and 0.94-0.99x. Two contexts only: with four, this
#: bound made more hand-overs, not fewer (5-16 per 1,000 requests per context against 1-2)
#: and served 0.82-0.90x of one context against 0.92-0.98x answering at once, so more contexts
#: answer at once as before. Why: with four, the extra hand-overs came from bounding the peers
#: that had waited through the busy context's whole hold (bounded for the peers that ran just
#: before it only, the count fell back: below). Rules for any number of contexts, measured
#: against this one (alternating, real-time priority, 1.5 s rounds, 3.11): the hold counted by
#: the busy context (its steps since the GIL last came to it) for every peer: 2 contexts the
#: same (medians 0.95-1.01x against 0.97-1.02x, 26 rounds), 4 contexts 0.84-0.93x against
#: 0.91-0.97x (rounds where one context ran at full speed: 3-8 hand-overs per 1,000 requests per
#: context against 0.7-2.8); the same count for the peers that ran just before the hold only,
#: the others answered at once: 4 contexts back to the at-once level (1.0-2.9 hand-overs against
#: 0.6-2.2 in one run), but medians 0.90-0.94x against 0.90-0.96x and 2 contexts 0.97-1.00x
#: against 0.96-1.02x (32 rounds, 1-5% below per round on average), so not taken. A word of its
#: own (3) for a hand-over's end, bounded, with a submit's return (2) answered at once:
#: 0.68-0.77x (2 contexts, 9-11 hand-overs) and 0.73-0.83x (4, 11-16), so answering a submit's
#: return at once passes the GIL back and forth too, not only a hand-over's end.
WAIT_STEPS = 256
#: What a turn counts for at least: a turn of one step (a task that only yields) waits
#: WAIT_STEPS / TURN_STEPS = 32 turns.
TURN_STEPS = 8

# Bound once, as the compiled twin calls the C function: a hand-over's yields are not the sleep
# point's one yield before it sleeps (Engine._peer_awake), which tests watch through os.
_sched_yield = os.sched_yield

_LONGEST_POLL_MS = 2**31 - 1  # poll(2)'s timeout is a C int of milliseconds
_SELECT_FDS = 1024  # FD_SETSIZE: select(2) watches descriptors below it only
_LONGEST_SELECT = 86400.0  # a longer bound waits in poll(2), in milliseconds


def needed() -> bool:
    """Whether hand-overs are needed: only while a GIL makes the contexts take turns."""
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def wait(word: bytearray, efd: int, timeout: float) -> None:
    """The sleep point: block on the eventfd *efd*, releasing the GIL, for at most *timeout*
    seconds (never less; negative: no bound), and consume its count if it was written.

    Compiled, the wait is a ``read`` (a ``ppoll`` first when bounded) and sets ``word[0]`` as it
    returns, before it asks for the GIL. Here, Python's calls do the waiting and the GIL is
    held again before anything could be set: *word* is left to the wakers.

    A signal is an early return (the engine's loop looks at its queues again); a handler that
    raises (KeyboardInterrupt) propagates. ``os.eventfd_read`` does not retry after EINTR.
    select(2) ends within the kernel's timer slack (~50 us) of the bound; poll(2) takes whole
    milliseconds, rounded up (asyncio's and trio's waits do the same), so it only waits for
    descriptors select cannot watch and bounds it cannot express.
    """
    del word  # the compiled twin's; see above
    try:
        if timeout < 0:
            os.eventfd_read(efd)
        elif efd < _SELECT_FDS and timeout < _LONGEST_SELECT:
            if select.select((efd,), (), (), timeout)[0]:
                os.eventfd_read(efd)  # readable: consume the count (only this thread reads it)
        else:
            poller = select.poll()
            poller.register(efd, select.POLLIN)
            # round up, so that the wait never ends before the bound, and cap at ~24 days
            # (a sleep(math.inf) waits again after that)
            ms = timeout * 1000
            ms = _LONGEST_POLL_MS if ms >= _LONGEST_POLL_MS else int(ms) + (int(ms) < ms)
            if poller.poll(ms):
                os.eventfd_read(efd)
    except InterruptedError:
        pass


def hand_over(word: bytearray, own: bytearray, limit: int) -> bool:
    """Let go of the GIL until ``word[0]`` is clear (the woken context whose word it is holds
    the GIL and runs), yielding the CPU at most *limit* times; whether it cleared in time.

    Compiled, the GIL is released once around the whole loop, and the caller's *own* word
    says 2, "waiting for the GIL", from the loop's end until the GIL is back, so that the
    peer hands it back at its turn's end. Here each ``sched_yield`` releases and takes it
    back: the woken context takes it in one of those gaps, and *own* is left alone (the
    GIL is never waited for in C here)."""
    del own  # the compiled twin's; see above
    for _ in range(limit):
        if not word[0]:
            return True
        _sched_yield()
    return not word[0]
