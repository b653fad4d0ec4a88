"""Cross-thread handshakes under real parallelism: what a free-threaded build (no GIL) makes
race for real, bounded by counts of rounds, on 2 and 4 contexts.

Under the GIL only one context runs Python at a time, and the runtime's write-then-read
handshakes (docs/design.md, "Synchronisation, with and without the GIL") can only interleave at
a switch. Without it they run truly at once, and each needs a full barrier on both sides: a
context going to sleep against a push or a ``call_soon`` from another thread (rule 4), a fast
unlock against a newcomer's lock, a stop against a spawn, a close against an operation that
starts, cancels against wakes. A lost wake-up shows as a ``DeadlockError`` (every run has a
deadlock timeout) or, where nothing is parked, as the pytest timeout; a lost or doubled step
as a wrong count.

The same tests run under the GIL (they are cheap there, and must pass too); they were
written for, and find their races on, a free-threaded build with ``PYTHON_GIL=0``.
"""

from __future__ import annotations

import os
import threading

import pytest

import tinycoro as tc
import tinycoro.lowlevel as ll
from tinycoro.core import tokens
from tinycoro.net import multishot
from helpers.runtime import wait_until
from helpers.streams import tcp_pair
from helpers.sync import exclusive_turn, run, spawn_elsewhere

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("contexts", [2, 4])]

DEADLOCK = 20.0
# Rounds of each test: enough for a 1-in-1000 interleaving to show within a run on 2 cores
# without the GIL; TINYCORO_FT_ROUNDS scales them for a longer hunt (tools/tsan_suites.sh).
SCALE = max(1, int(os.environ.get("TINYCORO_FT_ROUNDS", "1")))
MOVE_RUNS = 5  # runs of a scenario that must move a multishot at least once, at most


def test_ping_pong_across_contexts_never_loses_a_wake(contexts):
    # Two tasks on different contexts hand a turn back and forth through two Events: each
    # wake is a push onto a context that is, more often than not, just going to sleep
    # (rule 4: the sleeper's flag against the pusher's append).
    rounds = 2000 * SCALE

    async def main():
        ping, pong = [tc.Event() for _ in range(rounds)], [tc.Event() for _ in range(rounds)]

        async def other():
            for i in range(rounds):
                await ping[i].wait()
                pong[i].set()

        t = spawn_elsewhere(other())
        for i in range(rounds):
            ping[i].set()
            await pong[i].wait()
        await t
        return rounds

    assert run(main(), contexts, deadlock_timeout=DEADLOCK) == rounds


def test_calls_from_foreign_threads_all_run(contexts):
    # Threads outside the scheduler queue calls onto contexts that sleep between them
    # (Engine.call_soon: the calls queue against the sleeper's last look). Every call runs.
    threads, per_thread = 4, 1000 * SCALE
    sched = tc.Scheduler(contexts).start()
    try:
        engines = list(sched._engines)
        ran = [0] * threads
        done = threading.Event()
        lock = threading.Lock()
        left = [threads * per_thread]

        def call(k):
            ran[k] += 1  # only ever on one context's thread per k (below): no lock needed
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        def pusher(k):
            engine = engines[k % len(engines)]
            for _ in range(per_thread):
                engine.call_soon(call, k)

        ts = [threading.Thread(target=pusher, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert done.wait(60), f"calls never ran: {left[0]} of {threads * per_thread} left"
        assert ran == [per_thread] * threads
    finally:
        sched.stop()


def test_mutex_fast_unlock_against_newcomers_never_strands_a_waiter(contexts):
    # The uncontended unlock (token back, then the flag read) against a waiter that sets the
    # flag and then looks for the token, on every context at once; a waiter stranded behind a
    # free mutex shows as a DeadlockError.
    workers, each = 4 * contexts, 500 * SCALE

    async def main():
        m = tc.Mutex()
        state = {"inside": 0, "overlaps": 0, "count": 0}

        async def worker():
            for i in range(each):
                async with m:
                    exclusive_turn(state)
                if i % 5 == 0:
                    await tc.yield_now()

        await tc.when_all(*(worker() for _ in range(workers)))
        return state, m.statistics()

    state, stats = run(main(), contexts, deadlock_timeout=DEADLOCK)
    assert state == {"inside": 0, "overlaps": 0, "count": workers * each}
    assert stats == tc.sync.MutexStatistics(locked=False, owner=None, waiters=0)


def test_relay_across_contexts_keeps_the_stop_token_up(contexts):
    # Each task spawns the next (round robin: onto another context) and ends; loop() may
    # return only after the last hop (the stop flags and token against deferred pushes,
    # rule 18), and every context then has its flag down. Many short schedulers: each start
    # and stop is a race of its own.
    for _ in range(20 * SCALE):
        sched = tc.Scheduler(contexts)
        hops = [0]

        async def hop(i):
            hops[0] += 1  # one hop runs at a time: the next is spawned by this one's end
            if i:
                tc.spawn(hop(i - 1))

        sched.submit(hop(200))
        sched.loop(deadlock_timeout=DEADLOCK)
        assert hops[0] == 201
        st = sched.stats()
        assert st.stop_token == 0 and all(c.stop_flag == 0 for c in st.contexts)


def test_stop_while_tasks_spawn_across_contexts(contexts):
    # stop() against tasks that keep spawning onto other contexts: every task ever created
    # ends (finished or cancelled), no thread is left, and stop() returns.
    for _ in range(10 * SCALE):
        sched = tc.Scheduler(contexts).start()
        made: list[tc.Task] = []
        made_lock = threading.Lock()
        started = threading.Event()

        async def breeder(depth):
            started.set()
            while True:
                if depth:
                    try:
                        t = tc.spawn(breeder(depth - 1))
                    except RuntimeError:  # the scheduler stopped accepting: our turn to end
                        return
                    with made_lock:
                        made.append(t)
                await tc.yield_now()

        with made_lock:
            made.append(sched.submit(breeder(3)))
        assert started.wait(30)
        sched.stop(timeout=5)
        with made_lock:
            tasks = list(made)
        assert all(t.done() for t in tasks), [t for t in tasks if not t.done()]
        wait_until(lambda: not any(th.is_alive() for th in sched._threads), what="threads joined")


def test_cancel_storm_against_set(contexts):
    # Waiters on every context parked on one Event; another context cancels half of them
    # while a third sets the event: each waiter either gets the value or Cancelled, exactly
    # once, and none is left parked.
    rounds, waiters = 30 * SCALE, 40

    async def main():
        got = cancelled = 0
        for _ in range(rounds):
            ev = tc.Event()
            ready = tc.Latch(waiters)

            async def waiter():
                ready.count_down()
                return await ev.wait()

            ts = [tc.spawn(waiter()) for _ in range(waiters)]
            await ready.wait()

            async def canceller():
                for t in ts[::2]:
                    t.cancel()

            async def setter():
                ev.set("v")

            c, s = spawn_elsewhere(canceller()), spawn_elsewhere(setter())
            await c
            await s
            for t in ts:
                try:
                    assert await t == "v"
                    got += 1
                except tc.Cancelled:
                    cancelled += 1
            assert ev.statistics().waiters == 0
        return got, cancelled

    got, cancelled = run(main(), contexts, deadlock_timeout=DEADLOCK)
    assert got + cancelled == rounds * waiters and got >= rounds * waiters // 2


def test_semaphore_permits_survive_cancels_across_contexts(contexts):
    # Permits handed to a waiter that is cancelled meanwhile are passed on (undo), never lost
    # or doubled: after every round the semaphore has all its permits and no waiter.
    permits, workers, each = 2, 4 * contexts, 100 * SCALE

    async def main():
        sem = tc.Semaphore(permits)
        inside = [0, 0]  # now, most ever: two holders on two threads, so under a lock
        count = threading.Lock()

        async def worker():
            for _ in range(each):
                await sem.acquire()
                try:
                    with count:
                        inside[0] += 1
                        inside[1] = max(inside[1], inside[0])
                    try:
                        await tc.yield_now()  # where a cancel may land while a permit is held
                    finally:
                        with count:
                            inside[0] -= 1
                finally:
                    sem.release()

        ts = [tc.spawn(worker()) for _ in range(workers)]
        for t in ts[::3]:  # cancelled while they run: some hold a permit, some wait for one
            await tc.yield_now()
            t.cancel()
        for t in ts:
            try:
                await t
            except tc.Cancelled:
                pass
        return sem.statistics(), inside[1]

    stats, most = run(main(), contexts, deadlock_timeout=DEADLOCK)
    assert most <= permits
    assert stats.value == permits and stats.waiters == 0


def test_task_snapshots_from_a_foreign_thread_while_tasks_park_and_wake(contexts):
    # Scheduler.tasks() reads each task's wait (Task._waiting) from another thread without a
    # lock while the owner replaces it at every park and wake (docs/freethreading-tsan.md): a
    # snapshot must describe every live task, never fail, for as many snapshots as rounds.
    rounds, snapshots = 1000 * SCALE, 200 * SCALE
    sched = tc.Scheduler(contexts).start()
    try:
        async def pair():
            ping, pong = tc.Event(), tc.Event()

            async def other():
                for _ in range(rounds):
                    await ping.wait()
                    ping.clear()
                    pong.set()

            t = spawn_elsewhere(other())
            for _ in range(rounds):
                ping.set()
                await pong.wait()
                pong.clear()
            await t

        finished = threading.Event()
        main = sched.submit(pair())
        main.add_done_callback(lambda _t: finished.set())
        states = set()
        for _ in range(snapshots):
            for info in sched.tasks():
                states.add(info.state)
            if finished.is_set():
                break
        assert finished.wait(DEADLOCK * 3), "the ping-pong never finished"
        main.result()
        assert states <= {"ready", "starting", "running", "parked", "sleeping", "io"}, states
    finally:
        sched.stop()


def test_multishot_recv_moving_between_contexts_against_its_completions(contexts):
    # A stream's multishot recv armed on one context while the next recv comes from a task on
    # another, with chunks arriving all the while, and every third recv cancelled as it
    # waits: the recv's look, set and take of the waiter slot run against the completion, the
    # last completion (the stop that moves it) and the cancel on other threads (net/multishot:
    # each of those is one step under the stream's lock without the GIL). The sender waits
    # for most messages to be read before it sends the next, so that recvs find the queue
    # empty and park, and the multishot moves (counted: its re-arms). A lost wake is a
    # DeadlockError, a doubled one a task resumed twice, a lost or reordered chunk a wrong
    # total. Where the multishot does not run (the pure ring), the single recv takes it.
    n = 400 * SCALE
    want = b"".join(b"%06d" % i for i in range(n))

    async def main():
        client, server = await tcp_pair()
        read = [tc.Event() for _ in range(n)]  # read[k]: message k is all read

        async def send():
            for k in range(n):
                await client.sendall(b"%06d" % k)
                if k % 4:  # one in four goes out behind the one before: queued chunks too
                    await read[k].wait()
            await client.shutdown_write()

        sender = spawn_elsewhere(send())
        got = bytearray()
        i = 0
        while True:
            i += 1
            reader = tc.spawn(server.recv(6 + i % 11))  # round robin: a new context each time
            if i % 3 == 0:
                await tc.yield_now()
                reader.cancel()
            try:
                chunk = await reader
            except tc.Cancelled:
                continue
            if not chunk:
                break
            got += chunk
            for k in range((len(got) - len(chunk)) // 6, len(got) // 6):
                read[k].set()
        await sender
        await client.close()
        await server.close()
        return bytes(got), sum(c.multishot_rearms for c in ll.current_engine().scheduler.stats().contexts)

    # Whether the multishot moves at all in one run is the threads' timing (a run in which
    # every recv finds its chunk already queued never parks one); every run must read the
    # stream whole, and some run of a few must have moved it between the contexts' rings.
    moved = 0
    for _ in range(MOVE_RUNS):
        got, rearms = run(main(), contexts, deadlock_timeout=DEADLOCK)
        assert got == want
        moved += rearms
        if moved or not multishot.AVAILABLE:
            break
    if multishot.AVAILABLE:
        assert moved > 0, f"the multishot never moved between the contexts' rings in {MOVE_RUNS} runs"


def test_a_close_letting_go_of_the_spare_recv_calls_while_a_recv_takes_one(contexts):
    # A stream's close breaks the cycles of its spare recv calls by walking their list
    # (Stream._let_go), while a recv on another context may take the spare from that list or
    # put it back (net/stream: the token-like pop and append). Without the GIL a walk of the
    # list itself read past its end when the pop landed between its length check and its
    # read (IndexError, seen in the 3.13t suite). Here one thread walks it over and over
    # while another takes and returns the spare as recvs do, for a count of rounds.
    rounds = 20_000 * SCALE

    async def main():
        client, server = await tcp_pair()
        spares = server._recv_spare
        if spares is None:  # no multishot (the pure ring): no spare list to race on
            await client.close()
            await server.close()
            return 0
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def recvs():
            start.wait()
            for _ in range(rounds):
                call = tokens.spare(spares)
                if call is not None:
                    spares.append(call)

        def closes():
            start.wait()
            try:
                for _ in range(rounds):
                    server._let_go()
            except BaseException as e:  # what a close would have raised
                errors.append(e)

        threads = [threading.Thread(target=recvs), threading.Thread(target=closes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        await client.close()
        await server.close()
        return rounds

    run(main(), contexts, deadlock_timeout=DEADLOCK)
