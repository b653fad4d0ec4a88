"""The benchmark runner end to end on tiny sizes: it must produce a complete table.

This checks structure only (every workload row is there, with a number or an explicit
"skipped: reason"); it never asserts on timings, which belong to docs/benchmarks.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    md = out.read_text()

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
        assert (tmp_path / "bench.png").stat().st_size > 0
