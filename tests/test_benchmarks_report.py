"""The benchmarks page and the files beside it: what a run writes, what it keeps, how long the
page a user reads may grow (no timing: the runs are made of constants)."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

from benchmarks import report
from benchmarks.harness import Case, CaseResult, Ratio, RatioResult, Sample, SeriesResult

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "benchmarks.md"
BUDGET = 300  # lines of the page a user reads, with every version and the free-threaded part


def _case(workload: str, case: str, values: dict[str, float], ratios: list[Ratio]) -> CaseResult:
    """The result a run of one repetition would give (built directly: nothing to measure)."""
    series = [SeriesResult(label, [Sample(v)]) for label, v in values.items()]
    return CaseResult(Case(workload, case, "ops/s", [], ratios), series,
                      [RatioResult(r, values[r.num] / values[r.den]) for r in ratios], 0.0)


def _run(scale: float, *, cases: int = 4, info_series: int = 2) -> list[CaseResult]:
    """*cases* cases of one targeted ratio each, plus *info_series* peers with ratios for
    information only: the medians and informational ratios a run adds beside its targets."""
    out = []
    for i in range(cases):
        values = {"tinycoro": 100.0 * scale + i, "peer": 100.0}
        values.update({f"info {k}": 50.0 + k for k in range(info_series)})
        ratios = [Ratio("tinycoro", "peer", 1.0)] + [Ratio("tinycoro", f"info {k}") for k in range(info_series)]
        out.append(_case(f"workload {i}", f"case {i}", values, ratios))
    return out


def _record(results: list[CaseResult], date: str, **kw) -> dict:
    return report.run_record(results, command="python -m benchmarks --publish", date=date, wall_seconds=10.0,
                             machine=[("CPU", "test CPU"), ("Python", f"CPython {date}")], **kw)


def _block(text: str, key: str) -> str:
    a = text.index(report.begin_part(key))
    return text[a : text.index(report.end_part(key), a)]


def test_rewriting_one_version_keeps_the_others_and_the_hand_written_text(tmp_path) -> None:
    page = tmp_path / "bench.md"
    page.write_text("# Title\n\nhand-written head\n\n## Latest runs\n\n"
                    + report.begin_part(report.RUNS) + "\n" + report.end_part(report.RUNS) + "\n\nhand-written tail\n")
    for version, scale in (("3.12", 0.5), ("3.11", 2.0), ("3.13", 3.0)):
        report.publish_version(page, version, _record(_run(scale), f"day of {version}"))
    first = report.load_runs(page)["versions"]
    report.publish_version(page, "3.12", _record(_run(1.25), "second day of 3.12"))

    text = page.read_text()
    assert text.startswith("# Title\n\nhand-written head\n\n## Latest runs\n\n") and text.endswith("hand-written tail\n")
    block = _block(text, report.RUNS)
    assert "| workload | case | ratio | target | 3.11 | 3.12 | 3.13 |" in block  # versions in order, as columns
    assert "| workload 0 | case 0 | tinycoro / peer | >= 1x | 2.00x | 1.25x | 3.00x |" in block
    assert "| workload 1 | case 1 | tinycoro / peer | >= 1x | 2.01x | 1.26x | 3.01x |" in block
    assert "second day of 3.12" in block and "day of 3.11" in block and "day of 3.13" in block
    assert "| 3.12 | day of 3.12 |" not in block
    runs = report.load_runs(page)["versions"]
    assert list(runs) == ["3.11", "3.12", "3.13"]
    assert runs["3.11"] == first["3.11"] and runs["3.13"] == first["3.13"]  # kept, number for number
    full = report.full_path(page).read_text()
    assert full.index("## Python 3.11") < full.index("## Python 3.12") < full.index("## Python 3.13")
    assert "| workload 3 | case 3 | info 1 | 51.0 | ops/s |" in full  # every median, of every version
    assert full.count("| workload 3 | case 3 | tinycoro / info 1 |") == 3


def test_a_page_without_the_block_gets_it_and_a_new_page_is_made(tmp_path) -> None:
    page = tmp_path / "bench.md"
    page.write_text("# Title\n\nonly hand-written text\n")
    report.publish_version(page, "3.11", _record(_run(1.0), "today"))
    text = page.read_text()
    assert text.index("only hand-written text") < text.index(report.RUNS_HEADING) < text.index(report.begin_part(report.RUNS))
    fresh = tmp_path / "draft" / "bench.md"
    report.publish_part(fresh, "free-threaded", "## Free-threaded Python", _record(_run(1.0), "today", lead=["**It says.**"]))
    report.publish_version(fresh, "3.11", _record(_run(1.0), "today"))
    text = fresh.read_text()
    assert text.count(report.begin_part("free-threaded")) == 1 and text.count(report.begin_part(report.RUNS)) == 1
    assert "**It says.**" in _block(text, "free-threaded")
    full = report.full_path(fresh).read_text()
    assert "## Free-threaded Python" in full and "## Python 3.11" in full


def test_a_version_s_run_in_the_former_layout_goes_when_that_version_publishes(tmp_path) -> None:
    page = tmp_path / "bench.md"
    old = "\n".join([report.begin("3.12"), "| old 3.12 row |", report.end("3.12")])
    page.write_text(f"# Title\n\nhead\n\n## Python 3.12\n\n{old}\n\ntail\n")
    report.publish_version(page, "3.11", _record(_run(1.0), "today"))
    assert "old 3.12 row" in page.read_text()  # another version's: not this run's to drop
    report.publish_version(page, "3.12", _record(_run(1.0), "today"))
    text = page.read_text()
    assert "old 3.12 row" not in text and "## Python 3.12" not in text and "\n\n\n" not in text
    assert text.index("head") < text.index(report.begin_part(report.RUNS)) < text.index("tail")

def test_the_page_grows_by_targeted_ratios_only(tmp_path) -> None:
    lengths = []
    for info_series in (1, 8):  # 8 x more medians and informational ratios
        page = tmp_path / f"bench{info_series}.md"
        for version in ("3.11", "3.12", "3.13"):
            report.publish_version(page, version, _record(_run(1.0, info_series=info_series), "today"))
        lengths.append(len(page.read_text().splitlines()))
    assert lengths[0] == lengths[1]


def test_the_page_stays_within_its_budget_with_every_version_running_everything(tmp_path) -> None:
    """The worst case the next full runs can make: the published page with the reference
    version's full run (every workload) published on three versions and the free-threaded part."""
    for f in (PAGE, report.runs_path(PAGE)):
        shutil.copy(f, tmp_path / f.name)
    page = tmp_path / PAGE.name
    runs = report.load_runs(page)
    everything = runs["versions"]["3.11"]
    for version in ("3.11", "3.12", "3.13"):
        report.publish_version(page, version, dict(everything, date=f"day of {version}"))
    report.publish_part(page, "free-threaded", "## Free-threaded Python",
                        {k: v for k, v in runs["parts"]["free-threaded"].items() if k != "title"})
    text = page.read_text()
    assert len(text.splitlines()) <= BUDGET
    assert all(f"day of {v}" in text for v in ("3.11", "3.12", "3.13")) and "**2 contexts / 1 context.**" in text


def test_the_published_page_is_within_budget_and_agrees_with_its_stored_runs() -> None:
    """docs/benchmarks.md and benchmarks-full.md are what the generator renders from
    benchmarks-runs.json: no figure on them that is not stored, none stored that they lack."""
    text = PAGE.read_text()
    assert len(text.splitlines()) <= BUDGET
    runs = report.load_runs(PAGE)
    assert _block(text, report.RUNS) + report.end_part(report.RUNS) == report.latest_runs(runs, PAGE)
    for key, rec in runs["parts"].items():
        assert _block(text, key) + report.end_part(key) == report.part_summary(key, rec, PAGE)
    assert report.full_path(PAGE).read_text() == report.full_page(runs, PAGE)
    assert "](benchmarks.png)" in text and (REPO / "docs" / "benchmarks.png").exists()  # the chart the README links


def test_the_readme_links_the_page_the_chart_and_the_rows() -> None:
    """The README's speed table quotes the page: the files it links must be there."""
    readme = (REPO / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/benchmarks[^)#]*)", readme))
    assert {"docs/benchmarks.md", "docs/benchmarks.png", "docs/benchmarks-full.md"} <= linked
    assert all((REPO / f).exists() for f in linked), linked
    assert "docs/benchmarks.md#free-threaded-python" in readme and "\n## Free-threaded Python\n" in PAGE.read_text()

def test_the_stored_runs_read_row_by_row(tmp_path) -> None:
    page = tmp_path / "bench.md"
    report.publish_version(page, "3.11", _record(_run(1.0), "today"))
    stored = report.runs_path(page).read_text()
    assert json.loads(stored)["versions"]["3.11"]["date"] == "today"
    rows = [ln for ln in stored.splitlines() if '"ratio": "tinycoro / peer"' in ln]
    assert len(rows) == 4 and all(json.loads(r.strip().rstrip(","))["target"] == 1.0 for r in rows)


def test_profiles_go_to_their_own_page_and_the_run_links_it(tmp_path) -> None:
    page = tmp_path / "bench.md"
    profiles = {"task switch": ("cProfile", "ncalls tottime SOME_FRAME")}
    record = _record(_run(1.0), "today", profiles_page=tmp_path / "bench-profiles.md")
    report.write_profiles(tmp_path / "bench-profiles.md",
                          report.profiles_section(profiles, date="today", command="c", version="3.13"), "3.13")
    report.publish_version(page, "3.13", record)
    assert "SOME_FRAME" in (tmp_path / "bench-profiles.md").read_text()
    full = report.full_path(page).read_text()
    assert "SOME_FRAME" not in full and "(bench-profiles.md)" in full


def _imports(path: Path) -> set[str]:
    """The benchmarks modules *path* imports, at its top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks."):
            out.add(node.module.split(".")[1])
    return out


def test_no_import_cycle_among_the_benchmarks_modules() -> None:
    """Each module imports on its own (``python -m benchmarks.profile`` must not need the
    runner first); a cycle, even through an import inside a function, breaks that."""
    graph = {p.stem: _imports(p) for p in (REPO / "benchmarks").glob("*.py")}

    def cycle_from(start: str) -> list[str] | None:
        stack, path = [(start, iter(sorted(graph.get(start, ()))))], [start]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
            elif nxt == start:
                return path + [start]
            elif nxt not in path and nxt in graph:
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
        return None

    cycles = [c for c in map(cycle_from, sorted(graph)) if c]
    assert not cycles, cycles


def test_each_run_is_described_by_the_method_that_made_its_ratios(tmp_path) -> None:
    # Runs stored before ratios were taken per round carry no method: they divided two medians
    # and must keep saying so beside a new run, which must say what it did.
    page = tmp_path / "bench.md"
    new = _record(_run(1.0), "new day")
    assert new["ratio_method"] == "median of per-round ratios"
    old = {k: v for k, v in _record(_run(2.0), "old day").items() if k != "ratio_method"}
    report.publish_version(page, "3.12", old)
    old_only = _block(page.read_text(), report.RUNS)
    assert "divides two medians" in old_only and "per-round" not in old_only
    report.publish_version(page, "3.11", new)
    block = _block(page.read_text(), report.RUNS)
    assert "median of the per-round ratios" in block and "the run of 3.12 was measured before that and divides two medians" in block
    full = report.full_path(page).read_text()
    py311, py312 = full[full.index("## Python 3.11"):full.index("## Python 3.12")], full[full.index("## Python 3.12"):]
    assert "median of the per-round ratios" in py311 and "two medians" not in py311
    assert "divides two medians" in py312 and "per-round" not in py312
