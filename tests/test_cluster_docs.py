"""The cluster's documented examples run as written: every ```python block of docs/cluster.md,
then the README's "On a cluster" block, pasted in order into the cells of one real kernel with
the extension loaded, as a notebook user copies them. The blocks themselves start (and stop)
the real local clusters they use (``tc.cluster.start(2)``): the page's, then the README's, one
after the other, never two at once.

A block that needs what this machine cannot give (a second host, a cluster started with
ipyparallel's own tools) is marked in the markdown by an HTML comment right before it,
``<!-- not run: why -->``; those blocks, and only those, are skipped here, each naming why.

Besides "no cell failed", the test checks what the examples promise: the results they print,
and that ``%px`` works on a cluster made by ``tc.cluster.start`` in a cell (not only by
``%tinycoro cluster start``). Every wait is on a cell's reply; the timeouts only bound how long
a broken build takes to fail (an engine may take 30 s to come up on a loaded machine).
"""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ipyparallel")
pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

import helpers.cluster as cs
import helpers.kernel as kp

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parent.parent
START_CELL = 150  # s: a cell that starts a cluster (start's own timeout is 120 s)

# A ```python block, with the "not run" comment that may stand right before it.
_BLOCK = re.compile(
    r"(?:^<!-- not run: (?P<why>.+?) -->\n)?^```python\n(?P<code>.*?)^```", flags=re.S | re.M
)


def _blocks(markdown: str) -> list[tuple[str, str | None]]:
    """``(code, why it is not run or None)`` for every python block, in order."""
    return [(m["code"], m["why"]) for m in _BLOCK.finditer(markdown)]


def _docs_blocks() -> list[tuple[str, str | None]]:
    return _blocks((ROOT / "docs" / "cluster.md").read_text())


def _readme_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## On a cluster\n"):]
    section = section[: section.index("\n## ", 1)]
    [(code, why)] = _blocks(section)
    assert why is None, why
    return code


def _cluster_processes(kernel_pid: int) -> list[psutil.Process]:
    """The kernel's live ipyparallel processes (controller, engines, their nannies)."""
    out = []
    for p in psutil.Process(kernel_pid).children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "ipyparallel" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:  # gone meanwhile
            pass
    return out


@pytest.fixture(scope="module")
def kernel(kernel_dirs):
    k = kp.start_kernel(kernel_dirs, "plain")
    k.pid = k.km.provisioner.pid
    leftovers: list[psutil.Process] = []
    try:
        k.ok("%load_ext tinycoro")
        yield k
    finally:
        leftovers = _cluster_processes(k.pid)  # none, unless a test failed before its stop
        k.shutdown()
        cs.kill_leftovers(leftovers)  # no engine or controller outlives the test


@pytest.mark.parametrize(
    "why", [why for _code, why in _docs_blocks() if why is not None] or ["(none)"]
)
def test_the_blocks_marked_not_run_say_why(why):
    """Each block of docs/cluster.md marked "not run" is skipped here, naming why."""
    if why == "(none)":
        return
    pytest.skip(f"docs/cluster.md block not run: {why}")


def test_the_cluster_examples_of_the_docs_run_pasted_as_they_are(kernel):
    k = kernel
    blocks = [code for code, why in _docs_blocks() if why is None]
    assert any("tc.cluster.start(" in b for b in blocks[:1]), "the page starts its cluster first"
    assert "cluster.stop()" in blocks[-1], "the page's last example stops it"
    procs: list[psutil.Process] = []
    cells: dict[str, str] = {}  # the first line of a block -> its cell's msg_id
    for i, block in enumerate(blocks):
        cells[block.splitlines()[0]] = k.cell(block, timeout=START_CELL)
        if i == 0:
            procs = _cluster_processes(k.pid)  # the controller, two engines and their nannies
            assert len(procs) >= 3, procs
    # the start block shows its engines (the cell's last line)
    [start] = [m for line, m in cells.items() if line.startswith("import tinycoro")]
    shown = k.result_of(start) or ""
    assert shown.count("EngineInfo(") == 2, shown
    # %px, on a cluster made by tc.cluster.start in a cell: ran on both engines, no error
    [px] = [m for line, m in cells.items() if line.startswith("%px")]
    assert k.of(px, "error") == []
    status = k.stream(px)
    assert "tinycoro cluster: 2 engines" in status, status
    # the tasks example: work's prints came home to its cell, the map's results in order
    [work] = [m for line, m in cells.items() if line.startswith("async def work")]
    printed = k.stream(work)
    assert "working on 7" in printed and "working on 19" in printed, printed
    assert k.result_of(work) is not None  # cluster.load(), the block's last line
    # the last block stopped the cluster: none of its processes is left
    assert cs.gone(procs), procs
    # ... and %px went with it (it would address a closed client)
    assert k.result_of(k.cell("get_ipython().find_line_magic('px') is None")) == "True"

    # The README's block: its own cluster, started and stopped in the one cell
    readme = k.cell(_readme_block(), timeout=START_CELL)
    assert k.stream(readme).strip().endswith(str([x * x for x in range(8)])), k.stream(readme)
    assert _cluster_processes(k.pid) == []
