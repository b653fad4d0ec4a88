"""The process's IPython shell with tinycoro loaded, for the in-process notebook tests."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def tinycoro_shell(monkeypatch, contexts: int, setup: str | None = "import tinycoro as tc"):
    """The process's IPython ``InteractiveShell`` (tests share the one instance) with tinycoro
    loaded on *contexts* contexts and *setup* run in it; with ``setup=None`` not loaded (for
    tests of loading). Afterwards tinycoro is unloaded, if loaded, and the shell's loop runner
    restored, whatever the test did."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("TINYCORO_CONTEXTS", str(contexts))
    monkeypatch.delenv("TINYCORO_DISPATCH", raising=False)
    sh = InteractiveShell.instance()
    saved = (sh.loop_runner, sh.autoawait)
    try:
        if setup is not None:
            sh.run_line_magic("load_ext", "tinycoro")
            sh.run_cell(setup)
        yield sh
    finally:
        if "tinycoro" in sh.extension_manager.loaded:
            sh.run_line_magic("unload_ext", "tinycoro")
        sh.loop_runner, sh.autoawait = saved
