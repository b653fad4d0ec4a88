"""6. Contexts scaling: the tinycoro echo (64 B) and random-read workloads on 1, 2 and 4 contexts.

The machine has 2 cores and Python has a GIL, so more contexts cannot make Python code run
faster; what this checks is what they cost (target: 2 contexts >= 1.0x of 1 context on echo).
They do cost: more sleeps and wake-ups per request, so server CPU per request (shown beside
each echo rate) goes up, and the ratio wanders around 1.0x from run to run. That is why
``contexts=None`` means one context (docs/design.md rule 15; docs/benchmarks-log.md,
"Contexts: what a second one costs"): this workload measures the explicit choice of more.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Callable

from . import echo_procs, w_echo, w_file
from .config import Config
from .harness import Case, Ratio, Sample, Series
from .peers import run_tc

NAME = "scaling"
WORKLOAD = "contexts scaling"


def _label(n: int) -> str:
    return f"tinycoro {n} ctx"


def _echo_case(cfg: Config, stack: ExitStack) -> Case:
    labels = {_label(n): ("tinycoro", n) for n in cfg.scale_contexts}
    base = _label(cfg.scale_contexts[0])
    ratios = [Ratio(lb, base, 1.0 if n == 2 else None) for lb, (_, n) in list(labels.items())[1:]]
    case = f"echo 64 B, {cfg.echo_conns} conns"
    try:
        exe = echo_procs.build_echo_load()
    except echo_procs.EchoLoadMissing as e:
        return Case(WORKLOAD, case, "req/s", [Series(lb) for lb in labels], ratios, skip=str(e))
    running = w_echo.servers(stack, labels)
    series = [w_echo.series_for(exe, running[lb], cfg, 64, lb) for lb in labels]
    return Case(WORKLOAD, case, "req/s", series, ratios)


def _file_case(cfg: Config, stack: ExitStack) -> Case:
    path = w_file.test_file(cfg, stack)
    k = cfg.inflight
    parts = w_file.shares(w_file.offsets(cfg, cfg.file_ops), k)

    def fn(n: int) -> Callable[[], Sample]:
        return lambda: run_tc(w_file.tc_random_io(path, parts, write=False), n)

    series = [Series(_label(n), fn(n)) for n in cfg.scale_contexts]
    base = series[0].label
    ratios = [Ratio(s.label, base) for s in series[1:]]
    return Case(WORKLOAD, f"file 4 KiB random reads, {k} in flight", "ops/s", series, ratios)


def build(cfg: Config, stack: ExitStack) -> list[Case]:
    return [_echo_case(cfg, stack), _file_case(cfg, stack)]

