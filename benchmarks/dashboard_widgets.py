"""What one dashboard refresh costs in a real kernel, per plotting widget.

``python -m benchmarks.dashboard_widgets [LIB ...]`` starts one ipykernel per library (LIB in
``dashboard svg bqplot plotly ipympl``; all by default), builds 4 contexts x 4 series x 60
points with it, and times 40 refreshes in the kernel: new data for every series, set on the
widgets, serialised and sent as comm messages (no front end is needed for that). It prints the
milliseconds per refresh and the comm payload per refresh, best of ``--reps`` kernels.

``dashboard`` is tinycoro.kernel_ext.dashboard itself (4 contexts, a full minute of history, 5 series per
context); ``svg`` a naive SVG sparkline per series in plain ipywidgets.HTML. bqplot, plotly
(with anywidget) and ipympl are not dependencies of tinycoro: install them to compare; a library
that is missing is reported as such. kernel_ext/dashboard.py's docstring quotes a run.
"""

from __future__ import annotations

import argparse
import json
import sys

SETUP = {
    "dashboard": r"""
import random, time
import tinycoro as tc
from tinycoro.kernel_ext.dashboard import Dashboard, History
from tinycoro.core.stats import ContextStats
sched = tc.Scheduler(4).start()
box = Dashboard(sched)
history = History()
t0 = time.monotonic() - 61
def snapshot(k):
    return tc.SchedulerStats(4, True, True, tuple(
        ContextStats(i, random.randint(0, 50), 0, random.randint(0, 50), random.randint(0, 50),
                     k, random.random(), 1, False, k * 1000 + random.randint(0, 900))
        for i in range(4)))
for k in range(61):
    history.add(t0 + k, snapshot(k))
def refresh(k):
    now = t0 + 61 + k * 0.25
    s = snapshot(61 + k)
    history.add(now, s)
    box.apply(s, history, now)
""",
    "svg": r"""
import random
import ipywidgets as w
def spark(vals, width=120, height=24):
    dx = width / (len(vals) - 1)
    pts = " ".join(f"{i * dx:.1f},{height - height * v:.1f}" for i, v in enumerate(vals))
    return (f'<svg width="{width}" height="{height}">'
            f'<polyline fill="none" stroke="#1f77b4" points="{pts}"/></svg>')
boards = [w.HTML() for _ in range(4)]
box = w.VBox(boards)
def refresh(k):
    with boards[0].hold_sync(), boards[1].hold_sync(), boards[2].hold_sync(), \
            boards[3].hold_sync():
        for b in boards:
            b.value = "".join(spark([random.random() for _ in range(60)]) for _ in range(4))
""",
    "bqplot": r"""
import numpy as np
import bqplot as bq
import ipywidgets as w
lines = [bq.Lines(x=np.arange(60), y=np.random.rand(4, 60),
                  scales={"x": bq.LinearScale(), "y": bq.LinearScale()}) for _ in range(4)]
box = w.VBox([bq.Figure(marks=[l]) for l in lines])
def refresh(k):
    for l in lines:
        l.y = np.random.rand(4, 60)
""",
    "plotly": r"""
import random
import ipywidgets as w
import plotly.graph_objects as go
figs = [go.FigureWidget(data=[go.Scatter(y=[random.random() for _ in range(60)])
                              for _ in range(4)]) for _ in range(4)]
box = w.VBox(figs)
def refresh(k):
    for f in figs:
        with f.batch_update():
            for t in f.data:
                t.y = [random.random() for _ in range(60)]
""",
    "ipympl": r"""
%matplotlib widget
import numpy as np
import matplotlib.pyplot as plt
fig, axes = plt.subplots(4, 1, figsize=(4, 6))
lines = [[ax.plot(np.random.rand(60))[0] for _ in range(4)] for ax in axes]
box = fig.canvas
def refresh(k):
    for row in lines:
        for l in row:
            l.set_ydata(np.random.rand(60))
    fig.canvas.draw()
""",
}
WARMUP, N = 5, 40
TIME = f"""
import time
display(box)
for k in range({WARMUP}): refresh(k)
t0 = time.perf_counter()
for k in range({N}): refresh(k)
print("MS", (time.perf_counter() - t0) / {N} * 1e3)
"""


def _run(kc, code: str) -> tuple[float | None, int, str | None]:
    """Execute *code*; return (ms printed by it, comm bytes sent, error name)."""
    msg_id = kc.execute(code)
    nbytes, ms, error = 0, None, None
    while True:
        m = kc.get_iopub_msg(timeout=300)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        kind = m["msg_type"]
        if kind == "comm_msg":
            nbytes += len(json.dumps(m["content"])) + sum(len(b) for b in m.get("buffers", []))
        elif kind == "stream" and m["content"]["text"].startswith("MS"):
            ms = float(m["content"]["text"].split()[1])
        elif kind == "error":
            error = f"{m['content']['ename']}: {m['content']['evalue']}"
        elif kind == "status" and m["content"]["execution_state"] == "idle":
            return ms, nbytes, error


def measure(lib: str) -> tuple[float, float] | str:
    """(ms per refresh, KiB per refresh) in a fresh kernel, or why it could not run."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel()
    try:
        _, _, error = _run(kc, SETUP[lib])
        if error:
            return error
        ms, nbytes, error = _run(kc, TIME)
        if error or ms is None:
            return error or "no timing"
        return ms, nbytes / (WARMUP + N) / 1024
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("libs", nargs="*", metavar="LIB", help=f"any of {', '.join(SETUP)}")
    p.add_argument("--reps", type=int, default=3, help="kernels per library; the best counts")
    args = p.parse_args(argv)
    unknown = set(args.libs) - set(SETUP)
    if unknown:
        p.error(f"unknown LIB {sorted(unknown)}; choose from {', '.join(SETUP)}")
    for lib in args.libs or SETUP:
        results = [measure(lib) for _ in range(args.reps)]
        timed = [r for r in results if isinstance(r, tuple)]
        if not timed:
            print(f"{lib:10} not measured: {results[0]}")
            continue
        ms, kib = min(timed)
        print(f"{lib:10} {ms:8.2f} ms per refresh  {kib:7.1f} KiB per refresh "
              f"(best of {len(timed)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
