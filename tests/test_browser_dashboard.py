"""The dashboard in a real browser: JupyterLab on localhost, headless Debian chromium via
playwright, notebooks/05_dashboard.ipynb run up to its load, a screenshot taken while the
widget counts.

Skips itself where chromium, JupyterLab or playwright is missing (``pip install -e '.[browser]'``
and ``apt-get install chromium``). The screenshot goes to a temporary directory unless
``TINYCORO_DASHBOARD_PNG`` names a path; the one in the docs is made with::

    TINYCORO_DASHBOARD_PNG=docs/dashboard.png python -m pytest -m browser tests/test_browser_dashboard.py

Never runs ``playwright install``: it drives the system chromium through ``executable_path``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

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
    pytest.importorskip("jupyterlab")
    root = tmp_path / "work"
    root.mkdir()
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:  # start from a clean notebook: outputs come from this run
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb["metadata"].pop("widgets", None)
    (root / NOTEBOOK.name).write_text(json.dumps(nb))
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
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _label(page, classes: str) -> str:
    return page.locator(f".tinycoro-dashboard .{classes}").first.inner_text()


@pytest.fixture
def chromium() -> str:
    """The system chromium (skips without it, or without the playwright package)."""
    path = _chromium()
    if path is None:
        pytest.skip("no chromium installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    return path


def test_dashboard_renders_live_in_jupyterlab(chromium, lab, tmp_path):
    from playwright import sync_api

    base, token, _root = lab
    out = Path(os.environ.get("TINYCORO_DASHBOARD_PNG") or tmp_path / "dashboard.png")

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh user-data-dir
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 860},
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}&reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
            # the kernel must be connected before cells are sent: the status bar says so
            page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"\| Idle")).first.wait_for(
                timeout=60_000
            )
            cells = page.locator(".jp-Notebook .jp-Cell")

            def run(index: int, wait: bool = True) -> None:
                cell = cells.nth(index)
                cell.locator(".jp-InputArea-editor").click()
                page.keyboard.press("Control+Enter")  # run this cell, stay on it
                if wait:  # until its prompt shows an execution count: [n]
                    cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(
                        timeout=30_000
                    )

            # cells: markdown, load + restart, dashboard, markdown, the load itself
            run(1)
            run(2)
            run(4, wait=False)
            page.wait_for_selector(".tinycoro-dashboard .tc-ctx-1.tc-tasks_run", timeout=30_000)

            def counts() -> list[int]:
                return [int(_label(page, f"tc-ctx-{c}.tc-tasks_run")) for c in (0, 1)]

            deadline = time.monotonic() + 60
            first = counts()
            while not all(n > f + 200 for n, f in zip(counts(), first)) or not re.search(
                r"[1-9]\d*%", _label(page, "tc-ctx-0.tc-busy-pct")
            ):
                if time.monotonic() > deadline:
                    pytest.fail(f"the dashboard did not update under load: {first} -> {counts()}")
                page.wait_for_timeout(100)
            summary = _label(page, "tc-summary")
            assert "stop token 2" in summary and "accepting" in summary and "running" in summary
            # frame the shot: no file browser, the %load_ext cell at the top of the notebook
            page.locator(".jp-SideBar .lm-TabBar-tab.lm-mod-current").first.click()
            cells.nth(1).evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(500)  # let the layout settle and the widget refresh twice
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
        except BaseException:
            shot = tmp_path / "failure.png"
            page.screenshot(path=str(shot))
            print(f"browser state at the failure: {shot}")
            raise
        finally:
            browser.close()
    assert out.stat().st_size > 10_000
