"""The dashboard in a real browser: JupyterLab on localhost, headless Debian chromium via
playwright, at 1400 x 900 px in JupyterLab's default layout (the file browser open), and
notebooks/05_dashboard.ipynb run with *Run All Cells*, as a user would. Then, after the last cell
has run: two captures of the dashboard while the notebook's bounded load goes on, whose numbers
AND plots (SVG path data) must have changed between them; the dashboard's table fits the
notebook column (no horizontal overflow); the live-task list, once opened, says what tasks wait
on in plain words (docs/design.md, API contract), never an internal repr.

Screenshots (the dashboard, and the dashboard with its task list open) go to a temporary
directory, so that no run rewrites the tracked files, unless ``TINYCORO_SCREENSHOTS`` names a
directory. To refresh the ones in the docs::

    TINYCORO_SCREENSHOTS=docs python -m pytest tests/test_browser_dashboard.py

Skips itself where chromium, JupyterLab or playwright is missing, except under ``CI``, where
that is a failure. Never runs ``playwright install``: it drives the system chromium through
``executable_path``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "05_dashboard.ipynb"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CLUSTER_NOTEBOOK = "cluster_dashboard.ipynb"  # written by the test (below)
TASKS_BETWEEN = 4000  # tasks each context finishes between the two captures (a few s of plots)


# The cluster dashboard and the text outputs, as a notebook shows them. The first "cluster"
# stands on the kernel's own scheduler, twice (what the dashboard reads of a cluster is its
# engines, load() and tasks()), with a host name as long as a cloud machine's and one engine
# always busy (flagged GIL-bound), so that the engine rows are as wide as they get: a real
# cluster on this machine has a short host name and idle engines. The last cell then starts a
# real two-engine cluster and shows its dashboard, as a user does (about 10 s more).
_CLUSTER_CELLS = [
    "%load_ext tinycoro\nimport dataclasses\nimport time\nimport tinycoro as tc\nfrom tinycoro.cluster import "
    "EngineLoad, EngineInfo\nfrom tinycoro.kernel_ext.cluster_dashboard import ClusterRefresher",
    "class Cluster:\n"
    "    engines = (EngineInfo(0, 'ip-10-0-12-34.eu-west-1.compute.internal', 27886),\n"
    "               EngineInfo(1, 'ip-10-0-12-35.eu-west-1.compute.internal', 27887))\n"
    "    def load(self):\n"
    "        s = tc.get_default_scheduler().stats()\n"
    "        # engine 1's contexts always busy, its process a whole core: its contexts wait\n"
    "        # for the GIL, the row flagged GIL-bound, as wide as it gets\n"
    "        hot = dataclasses.replace(s, contexts=tuple(dataclasses.replace(c, busy=1.0)\n"
    "                                                    for c in s.contexts))\n"
    "        return {0: EngineLoad(s, time.process_time()), 1: EngineLoad(hot, time.monotonic())}\n"
    "    def tasks(self):\n"
    "        t = tc.get_default_scheduler().tasks()\n"
    "        return {e.id: t for e in self.engines}\n"
    "gate = tc.Event()\n"
    "waiters = [tc.spawn(gate.wait(), name=f'waiter-{i}') for i in range(3)]\n"
    "ClusterRefresher(Cluster()).dashboard()",
    "%tinycoro status",
    "%tinycoro tasks",
    "cluster = tc.cluster.start(2, progress=False)\n"
    "async def die():\n"
    "    import os\n"
    "    os._exit(1)  # the engine process ends: the cluster loses it\n"
    "cluster.dashboard()",
]
# Typed into new cells after the checks of the last one (the test loses an engine then).
_LOSE_ENGINE = "await cluster.submit(die, engine=1)"
_PX_AFTER = "%px print('still here')"
NOTEBOOK_WIDTH = 900  # px of a narrow notebook: a laptop with the file browser open


def _cluster_notebook() -> dict:
    return {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
                   "outputs": [], "source": src} for i, src in enumerate(_CLUSTER_CELLS)],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def _missing(what: str) -> None:
    """Skip, except in CI, where the browser check must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI must run the browser check: see .ci/run)")
    pytest.skip(what)


def _screenshots(tmp_path: Path) -> Path:
    """Where the screenshots go: TINYCORO_SCREENSHOTS if set (docs/ to refresh the tracked
    ones), else the test's temporary directory."""
    chosen = os.environ.get("TINYCORO_SCREENSHOTS")
    return Path(chosen) if chosen else tmp_path


def _chromium() -> str | None:
    for name in (os.environ.get("TINYCORO_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on localhost, isolated in tmp_path; yields (base_url, token, root)."""
    if importlib.util.find_spec("jupyterlab") is None:
        _missing("JupyterLab is not installed (pip install -e '.[browser]')")
    root = tmp_path / "work"
    root.mkdir()
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:  # start from a clean notebook: outputs come from this run
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb["metadata"].pop("widgets", None)
    (root / NOTEBOOK.name).write_text(json.dumps(nb))
    (root / CLUSTER_NOTEBOOK).write_text(json.dumps(_cluster_notebook()))
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "TINYCORO_CONTEXTS": "2",
    }
    port, token = _free_port(), "tinycoro-browser-test"
    base = f"http://127.0.0.1:{port}"
    with open(tmp_path / "lab.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                f"--port={port}", f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
            ],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:  # wait for the server's readiness endpoint
                if proc.poll() is not None:
                    tail = (tmp_path / "lab.log").read_text()[-2000:]
                    pytest.fail(f"jupyter lab exited: {tail}")
                try:
                    url = f"{base}/api/status?token={token}"
                    with urllib.request.urlopen(url, timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail("jupyter lab did not come up within 60 s")
                    time.sleep(0.2)
            yield base, token, root
        finally:
            # A notebook's cluster stops with its kernel (at its exit); whatever a failed test
            # leaves of it is killed, so that no engine or controller outlives the test.
            try:
                clusters = [c for c in psutil.Process(proc.pid).children(recursive=True)
                            if "ipyparallel" in " ".join(c.cmdline())]
            except psutil.Error:
                clusters = []
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            _, alive = psutil.wait_procs(clusters, timeout=10)
            for c in alive:
                with contextlib.suppress(psutil.Error):
                    c.kill()
            psutil.wait_procs(alive, timeout=10)


@pytest.fixture
def chromium() -> str:
    """The system chromium (skips without it, or without the playwright package)."""
    path = _chromium()
    if path is None:
        _missing("no chromium installed (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        _missing("playwright is not installed (pip install -e '.[browser]')")
    return path


def _kernel_states(base: str, token: str) -> list[str]:
    """What the server says of its kernels: each one's execution state."""
    try:
        with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
            return [k.get("execution_state", "?") for k in json.load(r)]
    except OSError as e:
        return [f"no answer from the server: {e}"]


def _open_notebook(page, base: str, token: str, name: str, log: Path) -> None:
    """Open notebook *name* in JupyterLab and wait until its kernel is connected: the status
    bar says Idle, as a user waits for it before running cells.

    Starting a kernel takes seconds, more with four test workers on two cores, so the bound
    is generous. Where the server's kernel is idle and the page still does not say so, the
    page missed the kernel's first status on its websocket (the kernel runs no tinycoro code
    before the first cell): it is loaded again, once, as a user would, and the test warns.
    Otherwise the failure says what the page, the server and its log saw."""
    from playwright import sync_api

    page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    idle = page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"\| Idle")).first
    seen = []
    for attempt in range(2):
        try:
            idle.wait_for(timeout=90_000)  # a bound, not a speed check
        except sync_api.TimeoutError:
            status = page.locator(".jp-StatusBar-Widget").all_inner_texts()
            dialogs = page.locator(".jp-Dialog").all_inner_texts()
            states = _kernel_states(base, token)
            seen.append(f"status bar {status}, dialogs {dialogs}, server's kernels {states}")
            if attempt or states != ["idle"]:
                tail = log.read_text()[-3000:] if log.exists() else "(no log)"
                pytest.fail("the notebook's kernel never showed Idle: "
                            + "; then ".join(seen) + f"\nJupyterLab's log ends:\n{tail}")
            page.reload()
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            continue
        if seen:
            warnings.warn(f"the page was loaded again to see its kernel Idle: {seen[0]}",
                          stacklevel=2)
        return


def _capture(page) -> dict:
    """What the dashboard shows now: every number, as text, and every plot's path data."""
    board = page.locator(".tinycoro-dashboard").first
    return {
        "summary": board.locator(".tc-summary").inner_text(),
        "cells": board.locator(".tc-table td").evaluate_all(
            "els => Object.fromEntries(els.filter(e => !e.querySelector('svg'))"
            ".map(e => [e.className, e.innerText.trim()]))"
        ),
        "paths": board.locator(".tc-table path").evaluate_all(
            "els => els.map(e => e.closest('td').className + ' ' + e.getAttribute('class') + ' '"
            " + e.getAttribute('d'))"
        ),
    }


def _rose(path: str) -> bool:
    """Whether a plot's path data leaves its baseline (y = 29 is zero on a 30 px plot)."""
    coords = path.rsplit(" M", 1)[-1].lstrip("M").split()
    return any(int(y) < 29 for y in coords[1::2])


def _finished(cap: dict, ctx: int) -> int:
    return int(cap["cells"][f"tc-ctx-{ctx} tc-tasks_run"])


# The table's overflow, measured in the page: how far its right edge passes the notebook
# column's output area (and whether any box around it scrolls sideways because of it).
_OVERFLOW = """board => {
  const table = board.querySelector('.tc-table');
  const area = board.closest('.jp-OutputArea-output') || board.parentElement;
  const t = table.getBoundingClientRect(), a = area.getBoundingClientRect();
  const panel = board.closest('.jp-WindowedPanel-outer, .jp-Notebook');
  return {table_right: t.right, area_right: a.right, table_width: t.width,
          area_width: a.width, window_width: window.innerWidth,
          area_scrolls: area.scrollWidth > area.clientWidth + 1,
          panel_scrolls: panel ? panel.scrollWidth > panel.clientWidth + 1 : false};
}"""

def _narrow(page, board) -> None:
    """Make the notebook's output column :data:`NOTEBOOK_WIDTH` px wide (the window narrower
    by what it has beyond that) and wait until the layout has followed."""
    area = board.evaluate(_OVERFLOW)["area_width"]
    size = page.viewport_size
    width = int(size["width"] - (area - NOTEBOOK_WIDTH))
    page.set_viewport_size({"width": width, "height": size["height"]})
    deadline = time.monotonic() + 30  # a bound, not a speed check
    while board.evaluate(_OVERFLOW)["area_width"] > NOTEBOOK_WIDTH + 1:
        if time.monotonic() > deadline:
            pytest.fail(f"the notebook column stayed wider than {NOTEBOOK_WIDTH} px")
        page.wait_for_timeout(100)
    page.wait_for_timeout(600)  # two refreshes of the dashboard at this width


def _fits_narrow(page, board, shot: Path) -> None:
    """At :data:`NOTEBOOK_WIDTH` px: no part of the dashboard past the column or clipped."""
    _narrow(page, board)
    board.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(shot))
    fit = board.evaluate(_OVERFLOW)
    assert fit["table_right"] <= fit["area_right"] + 1, fit
    assert not fit["area_scrolls"] and not fit["panel_scrolls"], fit
    table = board.locator(".tc-table-widget").first
    assert table.evaluate(_OVERFLOWING) == []
    assert "…" not in board.inner_text()
    assert board.evaluate(_BROKEN_PHRASES) == []


# Internal words a task list must never show (it speaks plain words): reprs of ops, groups and tasks.
_INTERNAL = re.compile(r"<Op |ud=|<TaskGroup|<Task \d|<Event |<Semaphore |<Mutex ")


def test_dashboard_fits_moves_and_speaks_plainly_in_jupyterlab_after_run_all(chromium, lab,
                                                                              tmp_path):
    from playwright import sync_api

    base, token, _root = lab
    shots = _screenshots(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh user-data-dir
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            _open_notebook(page, base, token, NOTEBOOK.name, tmp_path / "lab.log")
            # the default layout: the file browser is open beside the notebook
            page.locator(".jp-FileBrowser").first.wait_for(state="visible", timeout=30_000)
            cells = page.locator(".jp-Notebook .jp-Cell")
            code = page.locator(".jp-Notebook .jp-CodeCell")

            # Run > Run All Cells, as a user would
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            last = code.nth(code.count() - 1)
            last.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(
                timeout=120_000
            )
            rounds = cells.nth(6).locator(".jp-OutputArea-output").first.inner_text()
            assert "40 rounds done; the load goes on" in rounds, rounds
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/"
                                "vnd.jupyter.stderr']").count() == 0  # no cell failed
            page.wait_for_selector(".tinycoro-dashboard .tc-table .tc-ctx-1.tc-tasks_run",
                                   timeout=30_000)
            cells.nth(2).evaluate("e => e.scrollIntoView({block: 'start'})")

            def wait_for(what: str, ok) -> dict:
                deadline = time.monotonic() + 90  # a bound, not a speed check
                while True:
                    cap = _capture(page)
                    if ok(cap):
                        return cap
                    if time.monotonic() > deadline:
                        pytest.fail(f"the dashboard never showed {what}: {cap}")
                    page.wait_for_timeout(100)

            def loaded(cap: dict) -> bool:
                ops = [d for d in cap["paths"] if "tc-series-ops" in d]
                busy = [cap["cells"][f"tc-ctx-{c} tc-busy"] for c in (0, 1)]
                return (
                    len(ops) == 2 and all(_rose(d) for d in ops)
                    and all(_finished(cap, c) > 0 for c in (0, 1))
                    and any(re.search(r"[1-9]\d*%", b) for b in busy)
                )

            # after Run All has finished, the dashboard goes on moving (the load is bounded)
            first = wait_for("load on both contexts", loaded)
            second = wait_for(
                f"{TASKS_BETWEEN} more tasks finished on each context",
                lambda cap: loaded(cap) and all(
                    _finished(cap, c) >= _finished(first, c) + TASKS_BETWEEN for c in (0, 1)
                ),
            )
            page.screenshot(path=str(shots / "dashboard.png"))
            assert second["cells"] != first["cells"]
            assert second["paths"] != first["paths"]
            for c in (0, 1):
                plots = [d for d in second["paths"] if d.startswith(f"tc-ctx-{c} ")]
                # busy and CPU; ops/s; ready, in I/O, sleeping, parked
                assert len(plots) == 7, plots
                # each context's CPU share, measured by now, and the build line under the table
                assert re.fullmatch(r"\d+%", second["cells"][f"tc-ctx-{c} tc-cpu"]), second["cells"]
            assert page.locator(".tinycoro-dashboard .tc-build").first.inner_text().startswith(
                ("Python with a GIL", "free-threaded Python")), "the build line"
            summary = second["summary"]
            assert "contexts with work 2 of 2" in summary and "running" in summary, summary
            assert "accepting work" in summary and "failed 0" in summary, summary
            assert second["cells"]["tc-ctx-0 tc-stop_flag"] == "yes"

            # it fits: the table ends inside the notebook column, nothing scrolls sideways
            board = page.locator(".tinycoro-dashboard").first
            fit = board.evaluate(_OVERFLOW)
            assert fit["table_right"] <= fit["area_right"] + 1, fit
            assert not fit["area_scrolls"] and not fit["panel_scrolls"], fit
            heads = board.locator(".tc-table th").all_inner_texts()
            for head in ("has work", "busy", "I/O ops/s", "ready", "in I/O", "sleeping",
                         "parked", "finished"):
                assert head in heads, heads  # headers that say what they count
            legend = board.locator(".tc-legend").inner_text()
            assert "has work" in legend and "stop token" in legend, legend

            # the live-task list: closed until clicked, then plain words, a summary line,
            # and a height limit (it scrolls)
            page.locator(".tinycoro-dashboard .tc-task-list .lm-AccordionPanel-title, "
                         ".tinycoro-dashboard .tc-task-list .jupyter-widget-Collapse-header"
                         ).first.click()
            tasks = page.locator(".tinycoro-dashboard .tc-tasks", has_text="driver 3")
            tasks.wait_for(timeout=30_000)
            text = board.locator(".tc-task-list").inner_text()
            assert re.search(r"when_all: \d+ of 20 left", text), text
            assert re.search(r"Semaphore \(\d+ free, \d+ waiting\)|sleep 2 ms|read 4 KiB at "
                             r"\d+ from blob", text), text
            assert not _INTERNAL.search(text), _INTERNAL.search(text)
            assert re.search(r"\d+ parked on (when_all|Semaphore)", text), text  # the summary
            scroll = board.locator(".tc-tasks-scroll").evaluate(
                "e => [e.clientHeight, e.scrollHeight]")
            assert scroll[0] <= 330, scroll  # the list scrolls instead of pushing the notebook
            fit = board.evaluate(_OVERFLOW)
            assert fit["table_right"] <= fit["area_right"] + 1 and not fit["panel_scrolls"], fit
            cells.nth(2).evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(600)  # let the layout settle and the widget refresh twice
            page.screenshot(path=str(shots / "dashboard-tasks.png"))
            _fits_narrow(page, board, shots / "dashboard-900px.png")
        except BaseException:
            shot = tmp_path / "failure.png"
            page.screenshot(path=str(shot))
            print(f"browser state at the failure: {shot}")
            raise
        finally:
            browser.close()
    for name in ("dashboard.png", "dashboard-tasks.png"):
        assert (shots / name).stat().st_size > 10_000


# Every element of a dashboard that runs past the right edge of its box (the notebook column
# it was given), and every one whose text is clipped (a box narrower than what it holds, with
# overflow other than visible: an ellipsis, a cut, a scroll bar), as [tag, class, text].
_OVERFLOWING = """(box) => {
  const right = box.getBoundingClientRect().right;
  const bad = [];
  for (const el of box.querySelectorAll('*')) {
    const what = [el.tagName, String(el.getAttribute('class')), el.textContent.slice(0, 40)];
    if (el.getBoundingClientRect().right > right + 1) bad.push(['overflows', ...what]);
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible')
      bad.push(['clipped', ...what]);
  }
  return bad;
}"""


def _widest_dashboards() -> tuple[str, str]:
    """The HTML of a scheduler's and a cluster's dashboard at their widest: counters of nine
    digits, 200k I/O ops/s, cloud host names, an engine flagged GIL-bound and one without a
    GIL flagged waiting for a core and blocked."""
    import tinycoro as tc
    from tinycoro.cluster import EngineInfo
    from tinycoro.core.stats import ContextStats
    from tinycoro.kernel_ext.cluster_dashboard import _summary, cluster_table
    from tinycoro.kernel_ext.history import CpuMeter, History
    from tinycoro.kernel_ext.render import scheduler_summary, scheduler_table

    def stats(t: float) -> tc.SchedulerStats:
        ctxs = tuple(ContextStats(
            id=i, queued=12345, io_pending=0, io_inflight=2345, parked=54321,
            tasks_run=123456789, busy=1.0, stop_flag=1, sleeping=False, ops=int(rate * t),
            sleeps=1234, cpu=0.5 * t * (1 - i), cpu_wait=0.3 * t,
        ) for i, rate in enumerate((200_000, 6_500)))
        return tc.SchedulerStats(stop_token=2, accepting=True, running=True, contexts=ctxs,
                                 failed=123)

    history, histories, cpu = History(), {0: History(), 1: History()}, CpuMeter()
    for k in range(12):
        t = k * 0.25
        for h in (history, *histories.values()):
            h.add(100 + t, stats(t))
        cpu.add(0, 100 + t, t)  # one core: its contexts wait for the GIL
        cpu.add(1, 100 + t, 0.01 * t)  # idle, GIL off: its contexts are blocked
    now, last = 100 + 11 * 0.25, stats(11 * 0.25)
    local = scheduler_summary(last, "round_robin", 20) + scheduler_table(last, history, now)
    engines = tuple(EngineInfo(i, f"ip-10-0-12-3{i}.eu-west-1.compute.internal", 27886 + i)
                    for i in (0, 1))
    every = {0: last, 1: last}
    cluster = _summary(engines, every, True) + cluster_table(engines, every, histories, cpu, now,
                                                             gil={1: False})
    return local, cluster


def test_the_dashboards_fit_900_px_and_cut_no_word(chromium, tmp_path):
    """A notebook 900 px wide (a laptop with the file browser open): both dashboards, at their
    widest, stay inside it, wrapping between words; nothing is cut or scrolls sideways."""
    from playwright import sync_api

    shots = _screenshots(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    local, cluster = _widest_dashboards()
    # the widest engine rows
    assert "GIL-bound" in cluster and ">blocked<" in cluster and ">waiting for a core<" in cluster
    assert ">GIL off<" in cluster and "tc-build" in local
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 940, "height": 700})
            for name, body in (("dashboard", local), ("cluster-dashboard", cluster)):
                # JupyterLab's output font and size, in a box as wide as the notebook
                page.set_content(
                    '<body style="margin:20px;font-family:system-ui,-apple-system,sans-serif;'
                    f'font-size:13px"><div id="box" style="width:900px">{body}</div></body>')
                # "-widest": the JupyterLab tests write dashboard-900px.png and
                # cluster-dashboard-900px.png into the same directory
                page.screenshot(path=str(shots / f"{name}-widest-900px.png"), full_page=True)
                box = page.locator("#box")
                assert box.evaluate(_OVERFLOWING) == [], name
                assert box.evaluate("b => b.scrollWidth") <= 900, name
                # words are whole: every header and flag reads as written
                text = box.inner_text()
                for word in ("sleeping", "finished", "GIL-bound", "blocked", "ip-10-0-12-30",
                             "waiting for a core", "GIL off"):
                    assert word in text or name == "dashboard", (word, text)
                assert "…" not in text and "..." not in text
        finally:
            browser.close()


FLAGGED = r"CPU \d+% · busy \d+%( GIL-bound| waiting for a core)?( blocked)?"  # an engine row's busy cell


def _type_cell(page, after, source: str, new: bool = True) -> None:
    """Type *source* into a new cell below *after* (or, with new=False, into the empty cell
    that running the last cell left there) and run it with Shift+Enter, as a user does."""
    after.locator(".jp-InputArea-editor").click()
    if new:
        page.keyboard.press("Escape")
        page.keyboard.press("b")  # a cell below, selected
        page.keyboard.press("Enter")  # and edited
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")


# The phrases of the engine rows that must stay whole (host:pid, "CPU 12%", "2 of 2", a flag):
# those an inline box broke over two lines (it then has two client rects), as text.
_BROKEN_PHRASES = """board => Array.from(board.querySelectorAll(
    '.tc-engine span[style*="nowrap"], .tc-engine b[style*="nowrap"]'))
  .filter(el => el.getClientRects().length > 1).map(el => el.innerText)"""


def test_cluster_dashboard_rows_and_text_outputs_fit_on_their_lines(chromium, lab, tmp_path):
    """The cluster dashboard at 1400 px with the file browser open, then in a 900 px notebook:
    the table inside the notebook column, no phrase of an engine row (host:pid, CPU, a flag)
    broken over two lines, for the widest rows (a stand-in) and for a real two-engine cluster;
    the text of %tinycoro status and tasks: no line wraps (JupyterLab would break it
    mid-word); then an engine lost, and %px still works on the one left."""
    from playwright import sync_api

    base, token, _root = lab
    shots = _screenshots(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=chromium, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 900},
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            _open_notebook(page, base, token, CLUSTER_NOTEBOOK, tmp_path / "lab.log")
            page.locator(".jp-FileBrowser").first.wait_for(state="visible", timeout=30_000)
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            code = page.locator(".jp-Notebook .jp-CodeCell")
            code.nth(code.count() - 1).locator(
                ".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=120_000)
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/"
                                "vnd.jupyter.stderr']").count() == 0  # no cell failed
            board = page.locator(".tinycoro-cluster-dashboard").first
            page.wait_for_selector(".tinycoro-cluster-dashboard .tc-e1-engine.tc-busy",
                                   timeout=30_000)
            # the CPU needs two answers: wait for a measured share in both engine rows
            busy = board.locator(".tc-engine .tc-busy")
            deadline = time.monotonic() + 60  # a bound, not a speed check
            while not all(re.fullmatch(FLAGGED, t.strip()) for t in busy.all_inner_texts()):
                if time.monotonic() > deadline:
                    pytest.fail(f"no CPU share shown: {busy.all_inner_texts()}")
                page.wait_for_timeout(100)
            code.nth(1).evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)
            page.screenshot(path=str(shots / "cluster-dashboard.png"))
            # one evaluation over the whole table: the refresher replaces it every tick
            assert board.locator(".tc-engine").count() == 2
            assert board.evaluate(_BROKEN_PHRASES) == []
            assert busy.all_inner_texts()[1].strip().endswith("GIL-bound")
            fit = board.evaluate(_OVERFLOW)
            assert fit["table_right"] <= fit["area_right"] + 1, fit
            assert not fit["area_scrolls"] and not fit["panel_scrolls"], fit
            # the text outputs: every line of status and tasks stays one line on screen
            for i in (2, 3):
                pre = code.nth(i).locator(".jp-OutputArea-output pre").first
                text = pre.inner_text()
                assert "legend:" in text, text
                lines = pre.evaluate("""el => {
                  const h = parseFloat(getComputedStyle(el).lineHeight);
                  return [Math.round(el.getBoundingClientRect().height / h),
                          el.innerText.replace(/\\n$/, '').split('\\n').length];
                }""")
                assert lines[0] == lines[1], (lines, text)
            page.screenshot(path=str(shots / "text-outputs.png"), full_page=True)
            # the real cluster of the last cell: no phrase broken either
            real = page.locator(".tinycoro-cluster-dashboard").nth(1)
            real.wait_for(timeout=120_000)  # start() may take 30 s on a loaded machine
            real_busy = real.locator(".tc-engine .tc-busy")
            deadline = time.monotonic() + 60  # a bound, not a speed check
            while not (len(real_busy.all_inner_texts()) == 2 and all(
                    re.fullmatch(FLAGGED, t.strip()) for t in real_busy.all_inner_texts())):
                if time.monotonic() > deadline:
                    pytest.fail(f"no CPU share shown: {real_busy.all_inner_texts()}")
                page.wait_for_timeout(100)
            real.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)
            page.screenshot(path=str(shots / "cluster-dashboard-real.png"))
            assert real.evaluate(_BROKEN_PHRASES) == []
            fit = real.evaluate(_OVERFLOW)
            assert fit["table_right"] <= fit["area_right"] + 1, fit
            # a narrow notebook: both dashboards and the text outputs still fit, no word cut
            _fits_narrow(page, board, shots / "cluster-dashboard-900px.png")
            _fits_narrow(page, real, shots / "cluster-dashboard-real-900px.png")
            for i in (2, 3):
                pre = code.nth(i).locator(".jp-OutputArea-output pre").first
                assert pre.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), pre.inner_text()
            # an engine lost (its process ends), then %px, typed in new cells as a user does:
            # it runs on the engine left, saying which is gone, with no error
            _type_cell(page, code.nth(code.count() - 1), _LOSE_ENGINE)
            lost = code.nth(code.count() - 2)
            lost.locator(".jp-OutputArea-output", has_text="EngineLost").first.wait_for(
                timeout=120_000)
            _type_cell(page, code.nth(code.count() - 1), _PX_AFTER, new=False)
            px = code.nth(code.count() - 2)
            px.locator(".jp-OutputArea-output", has_text="still here").first.wait_for(
                timeout=120_000)
            px.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(
                timeout=60_000)
            out = px.locator(".jp-OutputArea").inner_text()
            assert re.search(r"engine 1 \(\S+:\d+\) is lost", out), out
            assert "[stdout:0]" in out and "Traceback" not in out and "KeyError" not in out, out
            assert px.locator(".jp-OutputArea-output[data-mime-type='application/"
                              "vnd.jupyter.error']").count() == 0, out
            px.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.screenshot(path=str(shots / "px-after-engine-lost.png"))
        except BaseException:
            shot = tmp_path / "failure.png"
            page.screenshot(path=str(shot))
            print(f"browser state at the failure: {shot}")
            raise
        finally:
            browser.close()
    assert (shots / "cluster-dashboard.png").stat().st_size > 10_000
