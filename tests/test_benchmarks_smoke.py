"""The benchmark runner end to end on tiny sizes: it must produce a complete table.

This checks structure only (every workload row is there, with a number or an explicit
"skipped: reason"); it never asserts on timings, which belong to docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import config, runner

REPO = Path(__file__).resolve().parent.parent

# (workload, runtime) rows the medians table must contain.
EXPECTED_SERIES = {
    "task switch": {"tinycoro", "asyncio", "uvloop"},
    "spawn + join": {"tinycoro", "asyncio", "uvloop"},
    "mutex": {"tinycoro", "asyncio.Lock"},
    "file 4 KiB random": {
        "tinycoro", "asyncio executor", "aiofiles", "sync os.pread", "sync os.pwrite", "uringio",
        "sync preadv NOWAIT",
    },
    "whole file": {"tinycoro", "tinycoro 64 at a time", "builtin open().read()", "aiofiles", "aiofiles 64 at a time"},
    "O_DIRECT 4 KiB random": {"tinycoro", "fio io_uring", "fio psync"},
    "TCP echo": {
        "tinycoro", "asyncio streams", "asyncio protocol", "uvloop streams", "uvloop protocol",
        "uringio", "C epoll", "C io_uring",
    },
    "contexts scaling": {"tinycoro 1 ctx", "tinycoro 2 ctx", "tinycoro 4 ctx"},
    "cluster scaling": {
        "tinycoro 1 process", "tinycoro 1 engine", "tinycoro 2 engines",
        "tinycoro 2 engines, 1 submit each", "plain Python 1 process",
        "plain Python 2 processes", "tinycoro submit", "ipyparallel apply",
    },
}
# (workload, ratio) rows the ratio table must contain. Their targets are the workloads' own
# (benchmarks/w_*.py) and change as the project sets new ones: what is checked here is that
# each ratio with a target is judged by it (met exactly when the value reaches it), not which
# number the target is.
EXPECTED_RATIOS = {
    ("task switch", "tinycoro / asyncio"),
    ("task switch", "tinycoro / uvloop"),
    ("spawn + join", "tinycoro / asyncio"),
    ("spawn + join", "tinycoro / uvloop"),
    ("mutex", "tinycoro / asyncio.Lock"),
    ("file 4 KiB random", "tinycoro / asyncio executor"),
    ("file 4 KiB random", "tinycoro / aiofiles"),
    ("file 4 KiB random", "tinycoro / sync os.pread"),
    ("file 4 KiB random", "tinycoro / uringio"),
    ("file 4 KiB random", "tinycoro / sync preadv NOWAIT"),
    ("whole file", "tinycoro / builtin open().read()"),
    ("whole file", "tinycoro 64 at a time / builtin open().read()"),
    ("O_DIRECT 4 KiB random", "tinycoro / fio io_uring"),
    ("O_DIRECT 4 KiB random", "tinycoro / fio psync"),
    ("TCP echo", "tinycoro / asyncio streams"),
    ("TCP echo", "tinycoro / uvloop streams"),
    ("TCP echo", "tinycoro / uvloop protocol"),
    ("TCP echo", "tinycoro / uringio"),
    ("TCP echo", "tinycoro / C epoll"),
    ("TCP echo", "tinycoro / C io_uring"),
    ("contexts scaling", "tinycoro 2 ctx / tinycoro 1 ctx"),
    ("cluster scaling", "tinycoro 2 engines / tinycoro 1 process"),
    ("cluster scaling", "plain Python 2 processes / plain Python 1 process"),
    ("cluster scaling", "tinycoro submit / ipyparallel apply"),
}
# the receive path's axes: connection counts and one connection's bulk transfer
EXPECTED_SERIES["TCP echo by connections"] = {"tinycoro", "tinycoro single recv", "uvloop protocol"}
EXPECTED_SERIES["HTTP-style request/response"] = EXPECTED_SERIES["TCP echo by connections"]
EXPECTED_SERIES["bulk transfer, one connection"] = {"tinycoro", "tinycoro single recv", "blocking socket"}
EXPECTED_RATIOS |= {
    ("TCP echo by connections", "tinycoro / uvloop protocol"),
    ("HTTP-style request/response", "tinycoro / uvloop protocol"),
    ("bulk transfer, one connection", "tinycoro / blocking socket"),
}
TARGET = re.compile(r"^>= (\d+(\.\d+)?)x$")
NUMBER = re.compile(r"^\d+(\.\d+)? ?[kM]?$")
RATIO = re.compile(r"^\d+(\.\d+)?x$")
SKIPPED = re.compile(r"^skipped: \S.*")


def _table(md: str, heading: str) -> list[list[str]]:
    """Rows (without header and separator) of the first markdown table after *heading*."""
    block: list[list[str]] = []
    for line in md.split(heading, 1)[1].splitlines():
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split(" | ")])
        elif block:
            break
    return block[2:]


@pytest.mark.timeout(150)
def test_quick_tiny_run_produces_a_complete_table(tmp_path: Path) -> None:
    out = tmp_path / "bench.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--tiny", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=140,  # a loaded 2-core machine; the run itself takes ~30 s
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Ratios" in proc.stdout and "Medians" in proc.stdout
    # Every row is on the full page; the page itself shows the targeted ratios, one column per version.
    md = (tmp_path / "bench-full.md").read_text()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"| workload | case | ratio | target | {version} |" in out.read_text()

    assert "instructions/req (callgrind)" in md.split("### Medians", 1)[1]  # its column
    medians = _table(md, "### Medians")
    seen: dict[str, set[str]] = {}
    for workload, _case, runtime, median, *_rest in medians:
        seen.setdefault(workload, set()).add(runtime)
        assert NUMBER.match(median) or SKIPPED.match(median), (workload, runtime, median)
    for workload, runtimes in EXPECTED_SERIES.items():
        assert runtimes <= seen.get(workload, set()), (workload, seen.get(workload))

    ratios = _table(md, "### Ratios and targets")
    got = set()
    judged = 0
    for workload, _case, name, value, target, status in ratios:
        row = (workload, name, value, target, status)
        assert RATIO.match(value) or SKIPPED.match(value), row
        assert target == "-" or TARGET.match(target), row
        if SKIPPED.match(value):
            assert status == "skipped", row
        elif target == "-":
            assert status == "info", row  # for information: never met or missed
        else:
            # Judged by its own target: met exactly when the value reaches it (the value is
            # printed to 2 decimals, so a value within rounding of the target is not judged).
            wanted = float(TARGET.match(target).group(1))  # type: ignore[union-attr]
            shown = float(value[:-1])
            if abs(shown - wanted) > 0.005:
                assert status == ("met" if shown >= wanted else "missed"), row
                judged += 1
        got.add((workload, name))
    assert EXPECTED_RATIOS <= got, EXPECTED_RATIOS - got
    assert judged, "no ratio was judged against a target"

    assert "Measured " in md and "python -m benchmarks --quick --tiny" in md
    assert "| CPU |" in md and "| Python |" in md
    if "(plot not drawn" not in md:
        # the chart is named for the Python that ran it, off the reference version
        assert runner.chart_path(out, runner.running_version()).stat().st_size > 0


# -- workload 8: the free-threaded build beside this one -----------------------------------------
FT_CASES = ("CPU-bound coroutines", "JSON request/response", "tc.Mutex uncontended", "tc.Mutex contended", "echo 64 B")
FT_TARGETS = {"CPU-bound coroutines": "1.8", "JSON request/response": "1.6"}  # 2 ctx / 1 ctx on 3.13t


def _freethreaded_python() -> str | None:
    """A free-threaded Python with this checkout's tinycoro importable: the runner's own
    environment, else CI's (.ci/run part 6); None without either."""
    for py in (REPO / "build" / "benchmarks" / "py3.13t-venv" / "bin" / "python", REPO / ".venv-ft" / "bin" / "python"):
        probe = [str(py), "-c", "import sysconfig, tinycoro; assert sysconfig.get_config_var('Py_GIL_DISABLED')"]
        if py.exists() and subprocess.run(probe, cwd=REPO, capture_output=True).returncode == 0:
            return str(py)
    return None


def _rows_after(md: str, header_start: str) -> list[list[str]]:
    """Rows of the markdown table whose header line starts with *header_start*."""
    rows: list[list[str]] = []
    for line in md[md.index(header_start):].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _part(md: str, key: str) -> str:
    a = md.index(f"<!-- BEGIN GENERATED part {key} ")
    return md[a : md.index(f"<!-- END GENERATED (part {key}) -->", a)]


@pytest.mark.timeout(200)
def test_freethreaded_workload_runs_both_builds_side_by_side(tmp_path: Path) -> None:
    import sysconfig

    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("the workload compares a GIL build (the runner's) with the free-threaded one")
    if runner.running_version() != config.REFERENCE_PYTHON:
        pytest.skip("the free-threaded part of the page is written by runs on the reference "
                    f"Python ({config.REFERENCE_PYTHON}); on another its rows join that version's part")
    py = _freethreaded_python()
    if py is None:
        pytest.skip("no free-threaded Python 3.13 environment with tinycoro (python -m benchmarks "
                    "--only freethreaded makes one, given tools/build_freethreaded_python.sh's build)")
    out = tmp_path / "bench.md"
    # The workload measures the compiled builds. Under TINYCORO_PURE the 3.13t side would run
    # the pure ring, whose binding (the liburing package) declares no free-threading support,
    # so importing it turns the GIL back on, and the rows would compare two GIL builds.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON_GIL", "TINYCORO_PURE")}
    env["TINYCORO_BENCH_PY313T"] = py
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "freethreaded", "--tiny", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    part = _part(out.read_text(), "free-threaded")  # the page: what the run says
    rows_md = (tmp_path / "bench-full.md").read_text()  # the full page: its every row
    rows_md = rows_md[rows_md.index("## Free-threaded Python"):]
    gil = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "latest runs" not in out.read_text() and "## Python" not in rows_md  # alone: no version's run

    medians = _rows_after(rows_md, "| workload | case | runtime |")
    rows = {(case.split(",")[0].split(" (")[0], runtime): median for _w, case, runtime, median, *_ in medians}
    for case in FT_CASES:
        for build in (gil, "3.13t"):
            for n in (1, 2):
                median = rows.get((case, f"{build} {n} ctx"))
                assert median is not None and NUMBER.match(median), (case, build, n, median)

    ratios = _rows_after(rows_md, "| workload | case | ratio |")
    got = {(case.split(",")[0].split(" (")[0], name): (value, target) for _w, case, name, value, target, _s in ratios}
    for case in FT_CASES:
        for name in ("3.13t 2 ctx / 3.13t 1 ctx", f"{gil} 2 ctx / {gil} 1 ctx", f"3.13t 1 ctx / {gil} 1 ctx"):
            value, target = got[(case, name)]
            assert RATIO.match(value), (case, name, value)
            want = FT_TARGETS.get(case) if name.startswith("3.13t 2") else None
            assert target == (f">= {want}x" if want else "-"), (case, name, target)
    assert "**2 contexts / 1 context.**" in part and "**One context, 3.13t /" in part
    assert "3.13t: CPython 3.13" in rows_md and "free-threaded, the GIL off after importing tinycoro" in rows_md
