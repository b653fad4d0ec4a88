"""The shared harness: series, repetitions in alternating order, medians, ratios, targets, tables.

A workload module builds :class:`Case` objects. A case measures one thing (say "TCP echo, 64 B")
on several *series* (tinycoro and each peer). Every series is a zero-argument callable returning
one :class:`Sample`; the harness calls them in a rotating order, round after round, so slow drift
of a noisy machine hits every series alike. The result of a case is the median of each series and
the ratios the case declares (``tinycoro / peer``), each checked against its target.

A ratio is the median of per-round ratios (:func:`round_ratio`), not a ratio of two medians: the
two samples of one round ran seconds apart, while the two medians may come from different
rounds. On a machine that speeds up mid-row, rotation puts one series after the change and the
other before it in that round, and a ratio of medians then divides a fast round by a slow one.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = [
    "Sample",
    "Series",
    "Ratio",
    "Case",
    "SeriesResult",
    "RatioResult",
    "CaseResult",
    "run_case",
    "round_ratio",
    "RATIO_METHOD",
    "skipped_case",
    "format_tables",
    "medians_rows",
    "ratio_rows",
    "median_records",
    "ratio_records",
    "median_row",
    "ratio_row",
]


@dataclass(frozen=True)
class Sample:
    """One measurement: a rate (higher is better) and, for request/response loads, latency."""

    value: float
    p99_us: float | None = None
    p50_us: float | None = None
    cpu_us: tuple[float, float] | None = None  # a server's (user, system) CPU per request


@dataclass
class Series:
    """One runtime's side of a case. ``fn`` runs one repetition; ``skip`` says why it cannot."""

    label: str
    fn: Callable[[], Sample] | None = None
    skip: str | None = None
    instructions: float | None = None  # user-space instructions per request (callgrind), once per run


@dataclass(frozen=True)
class Ratio:
    """``num / den`` as :func:`round_ratio` measures it; ``target`` is the minimum wanted, None
    for information."""

    num: str
    den: str
    target: float | None = None


@dataclass
class Case:
    workload: str  # e.g. "TCP echo"
    case: str  # e.g. "64 B, 50 conns"
    unit: str  # e.g. "req/s"
    series: list[Series]
    ratios: list[Ratio] = field(default_factory=list)
    skip: str | None = None  # the whole case cannot run (e.g. no load generator)


@dataclass
class SeriesResult:
    label: str
    samples: list[Sample] = field(default_factory=list)
    skip: str | None = None
    instructions: float | None = None
    rounds: list[int] = field(default_factory=list)  # the measured round of each sample (0 = first)

    def add(self, round_: int, sample: Sample) -> None:
        self.samples.append(sample)
        self.rounds.append(round_)

    @property
    def median(self) -> float | None:
        if self.skip or not self.samples:
            return None
        return statistics.median(s.value for s in self.samples)

    @property
    def p99_us(self) -> float | None:
        vals = [s.p99_us for s in self.samples if s.p99_us is not None]
        return statistics.median(vals) if vals and not self.skip else None

    @property
    def cpu_us(self) -> tuple[float, float] | None:
        vals = [s.cpu_us for s in self.samples if s.cpu_us is not None]
        if not vals or self.skip:
            return None
        return statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals)

    @property
    def spread(self) -> tuple[float, float] | None:
        if self.skip or not self.samples:
            return None
        vals = [s.value for s in self.samples]
        return min(vals), max(vals)


@dataclass
class RatioResult:
    ratio: Ratio
    value: float | None
    skip: str | None = None

    @property
    def status(self) -> str:
        if self.skip is not None or self.value is None:
            return "skipped"
        if self.ratio.target is None:
            return "info"
        return "met" if self.value >= self.ratio.target else "missed"


@dataclass
class CaseResult:
    case: Case
    series: list[SeriesResult]
    ratios: list[RatioResult]
    seconds: float

    def get(self, label: str) -> SeriesResult:
        for s in self.series:
            if s.label == label:
                return s
        raise KeyError(label)


def _measure(series: Series) -> Sample:
    gc.collect()
    return series.fn()  # type: ignore[misc]


def run_case(case: Case, reps: int, warmup: int = 0, log: Callable[[str], None] = print) -> CaseResult:
    """Run every series of *case* ``warmup + reps`` times, rotating the order each rep."""
    t0 = time.perf_counter()
    results = {
        s.label: SeriesResult(s.label, skip=case.skip or s.skip, instructions=s.instructions)
        for s in case.series
    }
    live = [s for s in case.series if results[s.label].skip is None]
    for rep in range(warmup + reps):
        k = rep % len(live) if live else 0
        order = live[k:] + live[:k]
        for s in order:
            if results[s.label].skip is not None:
                continue
            try:
                sample = _measure(s)
            except Exception as e:  # noqa: BLE001 - a failed series is reported, not fatal
                results[s.label].skip = f"failed: {type(e).__name__}: {e}"
                log(f"    {s.label}: FAILED {type(e).__name__}: {e}")
                continue
            if rep >= warmup:
                results[s.label].add(rep - warmup, sample)
            extra = f" p99={sample.p99_us:.0f}us" if sample.p99_us is not None else ""
            tag = "warmup " if rep < warmup else ""
            log(f"    {tag}{s.label}: {_fmt_value(sample.value)} {case.unit}{extra}")
    ratios = []
    for r in case.ratios:
        a, b = results[r.num], results[r.den]
        reason = a.skip or b.skip
        value = None if reason is not None else round_ratio(a, b)
        if reason is None and value is None:
            reason = "no round measured both"
        ratios.append(RatioResult(r, value, skip=reason))
    return CaseResult(case, list(results.values()), ratios, time.perf_counter() - t0)


RATIO_METHOD = "median of per-round ratios"  # how run_case makes a ratio, stored with each run


def _rate(sample: Sample) -> float | None:
    return sample.value


def round_ratio(
    num: SeriesResult, den: SeriesResult, key: Callable[[Sample], float | None] = _rate,
) -> float | None:
    """The median over rounds of ``key(num's sample) / key(den's sample)``, both of one round.

    Only rounds that both series measured are paired (a round one side lacks, has no value for,
    or has a zero denominator in is left out, never matched with another round's sample); None
    when no round is left. *key* picks the figure, the rate by default (say, CPU per request).
    """
    dens = dict(zip(den.rounds, den.samples))
    per_round = []
    for rnd, sample in zip(num.rounds, num.samples):
        other = dens.get(rnd)
        a, b = key(sample), None if other is None else key(other)
        if a is not None and b:
            per_round.append(a / b)
    return statistics.median(per_round) if per_round else None


def skipped_case(case: Case, reason: str) -> CaseResult:
    """A result for a case that cannot run at all, with the reason on every row."""
    case.skip = reason
    return run_case(case, reps=0, log=lambda _m: None)


# -- tables ------------------------------------------------------------------------------------
def _fmt_value(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e3:
        return f"{v / 1e3:.1f} k"
    return f"{v:.1f}"


def fmt_target(t: float | None) -> str:
    return "-" if t is None else f">= {t:g}x"


def median_records(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """One record per series: the numbers of a medians row, as stored between runs (the page
    of every Python version is rendered again from them, see :mod:`benchmarks.report`)."""
    out: list[dict[str, Any]] = []
    for cr in results:
        for s in cr.series:
            rec: dict[str, Any] = {"workload": cr.case.workload, "case": cr.case.case, "runtime": s.label,
                                   "unit": cr.case.unit}
            if s.skip:
                rec["skip"] = s.skip
            else:
                lo, hi = s.spread  # type: ignore[misc]
                cpu = s.cpu_us
                rec.update(median=_keep(s.median), min=_keep(lo), max=_keep(hi), reps=len(s.samples),
                           p99_us=_keep(s.p99_us), cpu_us=None if cpu is None else [_keep(cpu[0]), _keep(cpu[1])],
                           instructions=_keep(s.instructions))
            out.append(rec)
    return out


def ratio_records(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """One record per ratio: workload, case, ``num / den``, value, target, status (and why skipped)."""
    out: list[dict[str, Any]] = []
    for cr in results:
        for r in cr.ratios:
            rec: dict[str, Any] = {"workload": cr.case.workload, "case": cr.case.case,
                                   "ratio": f"{r.ratio.num} / {r.ratio.den}", "value": _keep(r.value),
                                   "target": r.ratio.target, "status": r.status}
            if r.value is None:
                rec["skip"] = r.skip or "no samples"
            out.append(rec)
    return out


def _keep(v: float | None) -> float | None:
    """Six significant digits: more than any table shows, few enough to keep the stored runs readable."""
    return None if v is None else float(f"{v:.6g}")


def median_row(rec: dict[str, Any]) -> list[str]:
    """The medians row of a record of :func:`median_records` (columns of :data:`MEDIAN_HEADER`)."""
    head = [rec["workload"], rec["case"], rec["runtime"]]
    if rec.get("skip"):
        return head + [f"skipped: {rec['skip']}", "", "", "", "", "", ""]
    cpu, instr, p99 = rec.get("cpu_us"), rec.get("instructions"), rec.get("p99_us")
    return head + [
        _fmt_value(rec["median"]),
        rec["unit"],
        "-" if p99 is None else f"{p99:.0f}",
        "-" if cpu is None else f"{cpu[0]:.1f} + {cpu[1]:.1f}",
        "-" if instr is None else f"{instr / 1e3:.1f} k",
        f"{_fmt_value(rec['min'])} - {_fmt_value(rec['max'])}",
        str(rec["reps"]),
    ]


def fmt_ratio(rec: dict[str, Any]) -> str:
    """``"0.89x"``, or ``"skipped: why"``."""
    return f"skipped: {rec.get('skip')}" if rec["value"] is None else f"{rec['value']:.2f}x"


def ratio_row(rec: dict[str, Any]) -> list[str]:
    """The ratios row of a record of :func:`ratio_records` (columns of :data:`RATIO_HEADER`)."""
    return [rec["workload"], rec["case"], rec["ratio"], fmt_ratio(rec), fmt_target(rec["target"]), rec["status"]]


def medians_rows(results: Sequence[CaseResult]) -> list[list[str]]:
    """Rows: workload, case, runtime, median, unit, p99, server CPU, instructions per request,
    min-max over reps, reps."""
    return [median_row(r) for r in median_records(results)]


MEDIAN_HEADER = [
    "workload", "case", "runtime", "median", "unit", "p99 us",
    "server CPU us/req (user + sys)", "instructions/req (callgrind)", "min - max", "reps",
]
RATIO_HEADER = ["workload", "case", "ratio", "value", "target", "status"]


def ratio_rows(results: Sequence[CaseResult]) -> list[list[str]]:
    """Rows: workload, case, ``num / den``, value, target, met / missed / info / skipped."""
    return [ratio_row(r) for r in ratio_records(results)]


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def format_tables(results: Sequence[CaseResult]) -> str:
    """Both tables as plain text for the terminal."""
    return (
        "Medians\n"
        + _text_table(MEDIAN_HEADER, medians_rows(results))
        + "\n\nRatios (higher is better for tinycoro) and targets\n"
        + _text_table(RATIO_HEADER, ratio_rows(results))
    )
