"""How long a call queued onto a sleeping context waits while another context is busy.

``python -m benchmarks.wake_latency [--samples 600] [--contexts 2]``: in one process, the main
task keeps context 0 busy awaiting NOP operations (it never sleeps); a plain thread queues a
``call_soon`` onto a sleeping peer and times until the call runs, *samples* times, one peer
after another. Under the GIL the woken peer needs the GIL from the busy context: before the
hand-over (core/wakeword.py) it got it at the switch interval, a p99 of 11.5-18.7 ms
(docs/benchmarks-log.md). Prints the median, p99 and maximum in microseconds. The machine's
load moves these: compare old and new code in alternating runs.
"""

from __future__ import annotations

import argparse
import threading
import time

import tinycoro as tc
from tinycoro import lowlevel, uring
from tinycoro.core.traps import Op

SWITCH_US = 5000.0  # the interpreter's default switch interval, in microseconds
SETTLE = 0.0005  # seconds between two samples: the peer goes back to sleep


def _record(at: list[float], ran: threading.Event) -> None:
    at.append(time.perf_counter())
    ran.set()


def _measure(peers: tuple, samples: int, out: list[float]) -> None:
    for i in range(samples):
        peer = peers[i % len(peers)]
        while not (peer.sleeping and peer.sleep_since != 0.0):  # blocked in its sleep point
            time.sleep(SETTLE)
        ran = threading.Event()
        at: list[float] = []
        t0 = time.perf_counter()
        peer.call_soon(_record, at, ran)
        ran.wait()
        out.append(at[0] - t0)  # taken by the call: this thread's own wait for the GIL is not in it
        time.sleep(SETTLE)


async def _busy_while(thread: threading.Thread) -> None:
    nop = uring.prep_nop
    while thread.is_alive():
        await Op(nop)


async def _main(samples: int) -> list[float]:
    me = lowlevel.current_engine()
    assert me is not None and me.scheduler is not None
    out: list[float] = []
    thread = threading.Thread(target=_measure, args=(me.scheduler.peers(me), samples, out))
    thread.start()
    await _busy_while(thread)
    thread.join()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--contexts", type=int, default=2)
    args = ap.parse_args(argv)
    out = sorted(tc.run(_main(args.samples), contexts=args.contexts))
    us = [x * 1e6 for x in out]
    p50 = us[len(us) // 2]
    p99 = us[min(len(us) - 1, int(len(us) * 0.99))]
    late = sum(x >= SWITCH_US for x in us)
    print(f"call_soon onto a sleeping context, {len(us)} samples: "
          f"p50 {p50:.0f} us, p99 {p99:.0f} us, max {us[-1]:.0f} us, "
          f"{late} at or beyond a switch interval")


if __name__ == "__main__":
    main()
