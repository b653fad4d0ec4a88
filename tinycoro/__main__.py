"""``python -m tinycoro``: a short file + TCP + timer workload on several contexts.

It prints what each part did and a per-context statistics table, sampled while the workload
ran and again at the end, so a new user sees the scheduler at work in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import tinycoro as tc
from tinycoro import compiled, uring
from tinycoro.core.stats import COLUMNS, format_stats, legend


def _build_note() -> str:
    """ " free-threaded, GIL off" (or on) on a free-threaded interpreter; nothing on a GIL build."""
    state = compiled.gil_state()
    return f" {state}" if state else ""


def _table(stats: tc.SchedulerStats, title: str) -> str:
    """One stats snapshot in the words of ``%tinycoro status`` and the dashboard."""
    return f"{title}\n{format_stats(stats, legend_too=False)}"


async def _files(root: str, count: int, size: int) -> str:
    blobs = [os.urandom(size) for _ in range(count)]
    t0 = time.perf_counter()

    async def roundtrip(i: int) -> bool:
        path = os.path.join(root, f"blob{i}")
        await tc.io.write_file(path, blobs[i])
        return await tc.io.read_file(path) == blobs[i]

    tasks = [tc.spawn(roundtrip(i)) for i in range(count)]
    ok = all([await t for t in tasks])
    dt = time.perf_counter() - t0
    mib = count * size / (1 << 20)
    return f"files : wrote and read back {count} x {size >> 10} KiB ({mib:.0f} MiB) in {dt:.3f} s, verified={ok}"


async def _tcp(clients: int, rounds: int) -> str:
    lst = await tc.net.listen("127.0.0.1", 0)

    async def handle(conn: tc.net.TcpStream) -> None:
        async with conn:
            while data := await conn.recv():
                await conn.sendall(data)

    async def serve() -> None:
        handlers = [tc.spawn(handle(await lst.accept())) for _ in range(clients)]
        for h in handlers:
            await h

    async def client(i: int) -> int:
        msg = b"x" * 64
        async with await tc.net.connect("127.0.0.1", lst.port) as conn:
            for _ in range(rounds):
                await conn.sendall(msg)
                got = 0
                while got < len(msg):
                    got += len(await conn.recv())
        return rounds

    t0 = time.perf_counter()
    server = tc.spawn(serve())
    done = sum([await t for t in [tc.spawn(client(i)) for i in range(clients)]])
    await server
    await lst.close()
    dt = time.perf_counter() - t0
    return f"tcp   : {clients} clients x {rounds} echoes of 64 B = {done} round trips in {dt:.3f} s ({done / dt:,.0f} req/s)"


async def _timers(count: int) -> str:
    t0 = time.perf_counter()
    tasks = [tc.spawn(tc.sleep(0.05)) for _ in range(count)]
    for t in tasks:
        await t
    return f"timers: {count} concurrent 50 ms sleeps done in {time.perf_counter() - t0:.3f} s"


async def _main(sched: tc.Scheduler, args: argparse.Namespace, samples: list) -> list[str]:
    async def sampler(stop: list) -> None:
        while not stop:
            samples.append(sched.stats())
            await tc.sleep(0.05)

    stop: list = []
    mon = tc.spawn(sampler(stop))
    with tempfile.TemporaryDirectory(prefix="tinycoro-demo-") as root:
        lines = [
            await _files(root, args.files, args.file_kib << 10),
            await _tcp(args.clients, args.rounds),
            await _timers(args.timers),
        ]
    stop.append(True)
    await mon
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tinycoro",
        description="A short file + TCP + timer workload on several contexts, then per-context "
        "statistics in the words of %tinycoro status and the notebook dashboard (a legend "
        "under the tables says what each column counts).",
    )
    p.add_argument("-n", "--contexts", type=int, default=max(2, os.cpu_count() or 1),
                   help="context threads of the scheduler, each with its own ring (default: %(default)s)")
    p.add_argument("--dispatch", default="round_robin", choices=("round_robin", "least_loaded"),
                   help="how new tasks are spread over the contexts (default: %(default)s)")
    p.add_argument("--files", type=int, default=32,
                   help="files written and read back concurrently (default: %(default)s)")
    p.add_argument("--file-kib", type=int, default=1024,
                   help="size of each file in KiB (default: %(default)s)")
    p.add_argument("--clients", type=int, default=50,
                   help="TCP clients of the echo server (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=200,
                   help="64-byte echoes each client makes (default: %(default)s)")
    p.add_argument("--timers", type=int, default=2000,
                   help="concurrent 50 ms sleeps (default: %(default)s)")
    args = p.parse_args(argv)

    print(
        f"tinycoro {tc.__version__}: {args.contexts} context{'' if args.contexts == 1 else 's'} ({args.dispatch}), "
        f"Python {platform.python_version()}{_build_note()}, Linux {platform.release()}, "
        f"ring flags: {', '.join(uring.ring_flags()) or 'none'}, "
        + compiled.describe()
    )
    sched = tc.Scheduler(args.contexts, dispatch=args.dispatch)
    samples: list[tc.SchedulerStats] = []
    task = sched.submit(_main(sched, args, samples))
    t0 = time.perf_counter()
    sched.loop(deadlock_timeout=30)
    for line in task.result():
        print(line)
    print(f"total : {time.perf_counter() - t0:.3f} s\n")
    if samples:
        busiest = max(samples, key=lambda s: sum(c.io_inflight + c.queued + c.parked
                                                  for c in s.contexts))
        print(_table(busiest, "per-context stats, sampled mid-run (the busiest sample):"))
        print()
    print(_table(sched.stats(), "per-context stats after loop() returned:"))
    print("\n".join(legend(COLUMNS[1:])))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m tinycoro | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
