"""What a user sees of a ``tc.timeout`` that expires and is not caught: one ``TimeoutError``
whose traceback runs through the ``await`` that was interrupted, as with asyncio.timeout and
trio.fail_after; never the scope's internal signal chained before it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import traceback

import pytest

import tinycoro as tc

pytestmark = pytest.mark.timeout(60)


def _check(text: str, await_line: str) -> None:
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "ScopeSignal" not in text and "interrupted by" not in text, text
    assert "direct cause" not in text and "During handling" not in text, text
    assert await_line in text, text  # the frame of the await that was interrupted
    assert text.rstrip().splitlines()[-1] == "TimeoutError: timed out after 0.01 s", text


def test_the_formatted_traceback_is_one_timeout_error_at_the_await():
    async def main():
        async with tc.timeout(0.01):
            await tc.sleep(60)  # the interrupted await

    with pytest.raises(TimeoutError) as info:
        tc.run(main())
    _check("".join(traceback.format_exception(info.value)), "await tc.sleep(60)  # the interrupted await")


def test_timeout_0_at_a_lock_shows_the_lock_await():
    async def main():
        m = tc.Mutex()
        async with tc.timeout(0.01):
            async with m:
                await tc.Event().wait()  # parked here when it fires

    with pytest.raises(TimeoutError) as info:
        tc.run(main())
    _check("".join(traceback.format_exception(info.value)), "await tc.Event().wait()")


def test_an_uncaught_timeout_in_a_script(tmp_path):
    """As a user runs it: the interpreter's own report on stderr."""
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent("""
        import tinycoro as tc

        async def main():
            async with tc.timeout(0.01):
                await tc.sleep(60)

        tc.run(main())
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    _check(out.stderr, "await tc.sleep(60)")


def test_a_caught_timeout_keeps_what_the_block_raised_reachable():
    """The signal is not shown, but stays the context for code that looks (and the
    exception handled when the timeout fired is not lost from the report)."""

    async def main():
        try:
            async with tc.timeout(0):
                await tc.yield_now()
        except TimeoutError as e:
            return e

    e = tc.run(main())
    assert e.__suppress_context__ and e.__cause__ is None
    assert isinstance(e.__context__, tc.Cancelled)


def test_an_uncaught_timeout_in_a_notebook_cell(monkeypatch, capsys):
    """Where a notebook user meets it: the cell's error, as the extension shows it."""
    pytest.importorskip("IPython")
    from helpers.shell import tinycoro_shell

    with tinycoro_shell(monkeypatch, 1) as sh:
        capsys.readouterr()
        res = sh.run_cell("async with tc.timeout(0.01):\n    await tc.sleep(60)\n")
        out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert isinstance(res.error_in_exec, TimeoutError)
    assert out.count("Traceback (most recent call last)") == 1, out
    assert "ScopeSignal" not in out and "direct cause" not in out, out
    assert "await tc.sleep(60)" in out, out
    assert "TimeoutError: timed out after 0.01 s" in out, out
