"""The benchmark harness's bookkeeping: rotation, medians, ratios, targets, skips (no timing)."""

from __future__ import annotations

import pytest

from benchmarks.harness import (
    MEDIAN_HEADER,
    Case,
    CaseResult,
    Ratio,
    Sample,
    Series,
    SeriesResult,
    format_tables,
    medians_rows,
    ratio_rows,
    round_ratio,
    run_case,
)


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
    # each round's pair divided (10/4, 30/5, 20/6), then the median of those: not 20 / 5
    assert [r.value for r in res.ratios] == [20 / 6] * 3
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


def test_echo_cases_are_skipped_with_the_reason_without_the_load_generator(tmp_path, monkeypatch) -> None:
    from contextlib import ExitStack

    from benchmarks import config, echo_procs, w_echo, w_scaling

    monkeypatch.setattr(echo_procs, "ECHO_LOAD_SRC", tmp_path / "echo_load.c")
    with ExitStack() as stack:
        cases = w_echo.build(config.TINY, stack) + w_scaling.build(config.TINY, stack)[:1]
        results = [run_case(c, reps=1, log=lambda _m: None) for c in cases]
    assert len(results) == 3
    for res in results:
        assert all(s.skip and "load generator source not found" in s.skip for s in res.series)
        assert all(r.status == "skipped" for r in res.ratios)

    (tmp_path / "echo_load.c").write_text("int main(void) { return 0; }\n")
    monkeypatch.setattr(echo_procs.shutil, "which", lambda _name: None)
    with ExitStack() as stack:
        case = w_echo.build(config.TINY, stack)[0]
    assert case.skip == "no C compiler (gcc) to build echo_load"


def test_cpu_and_instructions_per_request_stand_beside_the_rate() -> None:
    case = Case(
        "w",
        "c",
        "req/s",
        [
            Series("tinycoro", lambda: Sample(100.0, cpu_us=(1.5, 2.5)), instructions=12_345.0),
            Series("peer", lambda: Sample(50.0, cpu_us=(0.5, 3.0))),
        ],
    )
    res = run_case(case, reps=1, log=lambda _m: None)
    rows = {r[2]: dict(zip(MEDIAN_HEADER, r)) for r in medians_rows([res])}
    assert rows["tinycoro"]["server CPU us/req (user + sys)"] == "1.5 + 2.5"
    assert rows["tinycoro"]["instructions/req (callgrind)"] == "12.3 k"
    assert rows["peer"]["instructions/req (callgrind)"] == "-"
    assert all(len(r) == len(MEDIAN_HEADER) for r in medians_rows([res]))


def test_syscall_trace_lines_are_classified_by_call_and_descriptor_kind() -> None:
    from benchmarks.syscalls import classify

    trace = "\n".join([
        "10 io_uring_enter(3<anon_inode:[io_uring]>, 2, 0, 0, NULL, 8) = 2",
        "10 io_uring_enter(3<anon_inode:[io_uring]>, 0, 1, IORING_ENTER_GETEVENTS, NULL, 8) = 0",
        "10 read(7<anon_inode:[eventfd]>, \"\\1\\0\\0\\0\\0\\0\\0\\0\", 8) = 8",
        "11 write(7<anon_inode:[eventfd]>, \"\\1\\0\\0\\0\\0\\0\\0\\0\", 8 <unfinished ...>",
        "11 <... write resumed>) = 8",  # the same call: counted once
        "10 write(1<pipe:[123]>, \"x\", 1) = 1",
        "12 sendto(5<TCPv6:[1]>, \"a\", 1, MSG_DONTWAIT, NULL, 0) = 1",
        "12 recvfrom(5<TCP:[1]>, \"a\", 1, 0, NULL, NULL) = 1",
        "12 epoll_wait(4<anon_inode:[eventpoll]>, [], 1, 0) = 0",
        "12 +++ exited with 0 +++",
    ])
    got = classify(trace)
    assert got["io_uring_enter"] == 2 and got["io_uring_enter that waits"] == 1
    assert got["eventfd read"] == 1 and got["eventfd write"] == 1
    assert got["send"] == 1 and got["recv"] == 1 and got["epoll_wait"] == 1
    assert got["other"] == 1 and got["other: write"] == 1 and got["all"] == 8


def test_a_machine_that_speeds_up_mid_row_does_not_make_a_ratio() -> None:
    # The shape of a real full run: every server ran 25% faster from the middle of the third of
    # five rounds on. Rotation put tinycoro after the change and the peer before it in that
    # round, so a ratio of medians took tinycoro's median from a fast round and the peer's from
    # a slow one (1.225x) although every round's pair, run seconds apart, said 0.98x.
    calls = 0

    def machine(rate: float):
        def fn() -> Sample:
            nonlocal calls
            calls += 1
            return Sample(rate * (1.25 if calls > 5 else 1.0))  # the 6th measurement on is fast

        return fn

    case = Case("w", "c", "req/s", [Series("peer", machine(100.0)), Series("tinycoro", machine(98.0))],
                [Ratio("tinycoro", "peer", 0.95)])
    res = run_case(case, reps=5, log=lambda _m: None)
    # the medians columns still describe each series on its own
    assert res.get("tinycoro").median == 98.0 * 1.25 and res.get("peer").median == 100.0
    assert res.ratios[0].value == pytest.approx(0.98)
    assert res.ratios[0].status == "met"


def test_a_ratio_pairs_only_the_rounds_both_series_measured() -> None:
    # round 1 lacks tinycoro, round 3 the peer, round 4 has a zero peer: those are left out,
    # never paired with a sample of another round
    a = SeriesResult("tinycoro", [Sample(v) for v in (10, 30, 40, 50)], rounds=[0, 2, 3, 4])
    b = SeriesResult("peer", [Sample(v) for v in (5, 7, 10, 0)], rounds=[0, 1, 2, 4])
    assert round_ratio(a, b) == 2.5  # median of 10/5 and 30/10
    cpu = SeriesResult("x", [Sample(1.0, cpu_us=(1.0, 1.0)), Sample(1.0)], rounds=[0, 2])
    assert round_ratio(cpu, cpu, key=lambda s: None if s.cpu_us is None else sum(s.cpu_us)) == 1.0
    assert round_ratio(SeriesResult("a", [Sample(1.0)], rounds=[1]), b) == 1 / 7
    assert round_ratio(SeriesResult("a", [Sample(1.0)], rounds=[3]), b) is None


def test_the_free_threaded_cpu_ratios_are_per_round_too() -> None:
    from benchmarks import w_freethreaded as ft

    def series(lb: str, cpus: list[float]) -> SeriesResult:
        return SeriesResult(lb, [Sample(1.0, cpu_us=(c, 0.0)) for c in cpus], rounds=list(range(len(cpus))))

    gil, free = "3.11", ft.FREE_THREADED
    # the machine gets faster after round 1: per round 1 context of the free-threaded build
    # costs 2x the GIL build's, though its median (200) is only 1.33x the GIL build's (150)
    row = [series(ft.label(gil, 1), [150, 150, 50]), series(ft.label(free, 1), [300, 200, 100]),
           series(ft.label(free, 2), [300, 200, 100])]
    case = Case(ft.WORKLOAD, "CPU-bound x", "chunks/s", [])
    line = ft._cpu_line([CaseResult(case, row, [], 0.0)], "CPU-bound", "chunk", gil, free)
    assert line == f"200 us per chunk on {free} against 150 on {gil} (2.00x), 1.00x that on 2 contexts of {free}"


def test_the_nowait_limit_row_reads_a_page_the_cache_refuses(tmp_path) -> None:
    """RWF_NOWAIT now and then refuses a page of a cached file; the limit loop reads it waiting
    (as a runtime must) instead of ending the row. Here the pages are evicted, so every read is
    refused at first."""
    import os

    from benchmarks.w_file import BLOCK, _sync_preadv_nowait

    path = tmp_path / "evicted.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(BLOCK * 16))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            os.preadv(fd, (bytearray(BLOCK),), 0, os.RWF_NOWAIT)
        except BlockingIOError:
            pass
        else:
            pytest.skip("this file system keeps the pages: RWF_NOWAIT never refuses here")
    finally:
        os.close(fd)
    sample = _sync_preadv_nowait(str(path), [i * BLOCK for i in range(16)])
    assert sample.value > 0
