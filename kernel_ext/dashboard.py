"""Live scheduler dashboard: current numbers and the last minute of history, per context.

Layout (one row per context; ``~~~`` are SVG sparklines over the last 60 seconds; it fits a
notebook column of 900 px, wrapping cells between words where there is no room for one line)::

    tinycoro · round_robin · running · accepting work · contexts with work 2 of 2 ●● · failed 0
                      busy · CPU          I/O ops/s          tasks now, by state
    context has work  busy CPU last min  now   last min  ready in I/O sleeping parked last min finished
    ctx 0   yes       100% 98% ~~~~~     1,204 ~~~~~         3     12        0      0 ~~~~~   10231
    ctx 1   yes       100%  3% ~~~~~       980 ~~~~~         0      4        1      0 ~~~~~    9870
    has work: the context holds tasks or I/O (its stop flag) ... (the one-line legend)
    Python with a GIL (GIL on): Python runs in one context at a time ... (the build line)
    ▸ live tasks (37): 20 parked on Mutex, 12 sleeping, 5 in I/O

The words are tinycoro.core.stats.COLUMNS, the ones ``%tinycoro status`` and ``python -m
tinycoro`` use; each header's tooltip says what it counts. Busy (awake) and CPU (its thread on a core, the kernel's schedstat) share
one 0-100% plot: under the GIL both contexts read busy 100% while they take turns, and only CPU
says so; the build line says whether the contexts can reach 100% CPU together. Sleeps are not I/O (docs/design.md, API contract):
they have their own column and series, and the I/O rate leaves their timers out.

Why SVG sparklines in plain ``ipywidgets.HTML``: ``python -m benchmarks.dashboard_widgets``
times one refresh of 4 contexts x 4 series x 60 points in a real ipykernel 7.4 (new data set on
the widgets, serialised and sent as comm messages; best of 3 kernels, 2 busy cores): this
dashboard 0.64 ms and 12.7 KiB (it draws 5 series per context and the numbers too); bqplot
1.05 ms and 8.2 KiB (numpy arrays sent as binary buffers); naive per-series SVG strings 2.9 ms;
a plotly FigureWidget 8.0 ms and 22 KiB (and it needs anywidget); ipympl 381 ms and 1.1 MiB
(matplotlib renders a PNG in the kernel on every draw). What makes this one cheap is sending the
whole table as ONE widget value: a comm message costs about as much as rendering a row, so the
first version, with one widget per number (about 50), took 66 ms. bqplot comes close, but it
brings pandas, numpy, bqscales and a d3 front end; this needs nothing beyond ipywidgets, runs no
JS build step, and its plots are plain SVG path text that a test can read from the DOM.

Where each part lives (this module gathers the names for the magics, the benchmarks and tests):

* :mod:`tinycoro.kernel_ext.history`: the last minute of numbers (History, CpuMeter);
* :mod:`tinycoro.kernel_ext.render`: the HTML of the summary, the table and the task list,
  shared with the cluster dashboard (:mod:`tinycoro.kernel_ext.cluster_dashboard`);
* :mod:`tinycoro.kernel_ext.widgets`: the ipywidgets (the only module that imports it);
* :mod:`tinycoro.kernel_ext.refresh`: the one refresher thread that sets the widgets' values
  (its threading model is described there).
"""

from __future__ import annotations

from .history import SPAN, STEP, History, Point
from .refresh import REFRESH_INTERVAL, Refresher, RefreshThread
from .render import PLOT_W, cell_text, sparkline
from .widgets import Dashboard

__all__ = [
    "PLOT_W", "REFRESH_INTERVAL", "SPAN", "STEP", "Dashboard", "History", "Point", "RefreshThread",
    "Refresher", "cell_text", "sparkline",
]
