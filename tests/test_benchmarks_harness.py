"""The benchmark harness's bookkeeping: rotation, medians, ratios, targets, skips (no timing)."""

from __future__ import annotations

from benchmarks.harness import Case, Ratio, Sample, Series, format_tables, ratio_rows, run_case


def _const(log: list[str], label: str, values: list[float]):
    it = iter(values)

    def fn() -> Sample:
        log.append(label)
        return Sample(next(it))

    return fn


def test_order_rotates_and_medians_and_ratios_are_computed() -> None:
    calls: list[str] = []
    case = Case(
        "w",
        "c",
        "ops/s",
        [
            Series("tinycoro", _const(calls, "tinycoro", [0.0, 10, 30, 20])),  # first is warmup
            Series("peer", _const(calls, "peer", [0.0, 4, 5, 6])),
        ],
        [Ratio("tinycoro", "peer", 3.0), Ratio("tinycoro", "peer", 5.0), Ratio("tinycoro", "peer")],
    )
    res = run_case(case, reps=3, warmup=1, log=lambda _m: None)
    assert calls == ["tinycoro", "peer", "peer", "tinycoro", "tinycoro", "peer", "peer", "tinycoro"]
    assert res.get("tinycoro").median == 20 and res.get("peer").median == 5
    assert [r.value for r in res.ratios] == [4.0, 4.0, 4.0]
    assert [r.status for r in res.ratios] == ["met", "missed", "info"]


def test_skips_and_failures_become_explicit_rows() -> None:
    def boom() -> Sample:
        raise OSError("no such thing")

    case = Case(
        "w",
        "c",
        "ops/s",
        [Series("tinycoro", lambda: Sample(1.0)), Series("gone", skip="not installed"), Series("bad", boom)],
        [Ratio("tinycoro", "gone", 1.0), Ratio("tinycoro", "bad", 1.0)],
    )
    res = run_case(case, reps=2, log=lambda _m: None)
    assert res.get("gone").skip == "not installed"
    assert res.get("bad").skip is not None and "no such thing" in res.get("bad").skip
    rows = ratio_rows([res])
    assert [r[3] for r in rows] == ["skipped: not installed", f"skipped: {res.get('bad').skip}"]
    assert [r[5] for r in rows] == ["skipped", "skipped"]
    text = format_tables([res])
    assert "skipped: not installed" in text


def test_whole_case_skip() -> None:
    case = Case("w", "c", "req/s", [Series("a", lambda: Sample(1.0)), Series("b")], [Ratio("a", "b")],
                skip="no gcc")
    res = run_case(case, reps=3, log=lambda _m: None)
    assert all(s.skip == "no gcc" and not s.samples for s in res.series)
    assert res.ratios[0].status == "skipped"
