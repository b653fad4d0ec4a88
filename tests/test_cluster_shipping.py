"""What the client does with what it ships and what comes back, without engines: naming the part
of a function that does not pickle, reading ``<dynamic-code>`` frames back to their source, and
routing the output of an ended task's children home (bounded, nothing of it kept)."""

from __future__ import annotations

import contextvars
import functools
import io
import sys
import threading

import pytest

pytest.importorskip("ipyparallel")
pytest.importorskip("cloudpickle")

from tinycoro.cluster import homes, shipped
from tinycoro.cluster.messages import pack_function

# As a notebook defines them: in a module that cannot be imported elsewhere, so cloudpickle
# ships them by value, with the globals they name.
NOTEBOOK = {"__name__": "a_notebook_not_importable"}
exec(
    "import threading\n"
    "LOCK = threading.Lock()\n"
    "def helper():\n"
    "    with LOCK:\n"
    "        return 1\n"
    "async def uses_lock():\n"
    "    with LOCK:\n"
    "        return 1\n"
    "async def calls_helper():\n"
    "    return helper()\n",
    NOTEBOOK,
)
uses_lock = NOTEBOOK["uses_lock"]
calls_helper = NOTEBOOK["calls_helper"]


def test_an_unpicklable_global_is_named_with_its_function():
    with pytest.raises(TypeError) as info:
        pack_function(uses_lock)
    msg = str(info.value)
    assert msg.startswith("uses_lock() cannot be sent to the engines: it uses the global 'LOCK' "
                          "(a _thread.lock)"), msg
    assert isinstance(info.value.__cause__, TypeError)  # cloudpickle's own error, chained
    assert "_thread.lock" in str(info.value.__cause__)


def test_the_global_of_a_function_it_calls_is_named_too():
    with pytest.raises(TypeError, match="the global function 'helper' it calls uses the global "
                                        "'LOCK'"):
        pack_function(calls_helper)


def test_a_closed_over_variable_and_a_partial_argument_are_named():
    lock = threading.Lock()

    async def closes():
        with lock:
            return 1

    with pytest.raises(TypeError, match="it closes over 'lock' \\(a _thread.lock\\)"):
        pack_function(closes)

    async def takes(x, y):
        return x

    with pytest.raises(TypeError, match="argument 0 of its functools.partial"):
        pack_function(functools.partial(takes, threading.Lock()))


def test_a_picklable_function_packs():
    async def fine(x):
        return x + 1

    assert isinstance(pack_function(fine), bytes)


def test_dynamic_code_frames_are_read_back_to_their_source():
    async def shipped_by_value(x):
        y = x * 2
        raise ValueError(y)

    shipped.note(shipped_by_value)
    line = shipped_by_value.__code__.co_firstlineno + 2
    text = ("Traceback (most recent call last):\n"
            f'  File "<dynamic-code>", line {line}, in shipped_by_value\n'
            f'  File "<dynamic-code>", line {line}, in not_shipped_here\n'
            "ValueError: 2\n")
    got = shipped.readable(text).splitlines()
    assert got[1] == f'  File "{__file__}", line {line}, in shipped_by_value'
    assert got[2] == "    raise ValueError(y)"
    assert got[3] == f'  File "<dynamic-code>", line {line}, in not_shipped_here'  # unknown: as is


def test_an_ended_tasks_output_goes_home_and_is_not_kept(monkeypatch):
    home_out, here_err = io.StringIO(), io.StringIO()
    var: contextvars.ContextVar[io.StringIO] = contextvars.ContextVar("out")
    var.set(home_out)
    ctx = contextvars.copy_context()

    class Routed:  # stands for ipykernel's stream, which routes by the context
        def write(self, text):
            return var.get(here_err).write(text)

    monkeypatch.setattr(sys, "stdout", Routed())
    monkeypatch.setattr(sys, "stderr", here_err)
    monkeypatch.setattr(homes, "KEPT", 2)
    tokens = [homes.new_token() for _ in range(3)]
    assert all(homes.is_token(t) for t in tokens) and not homes.is_token("abc-123_1")
    for t in tokens:
        homes.remember(t, ctx)
    homes.route(tokens[2], "stream", {"name": "stdout", "text": "late child\n"})
    assert home_out.getvalue() == "late child\n"
    homes.route(tokens[2], "data_message", {})  # a late outcome: dropped
    # the oldest was forgotten (bounded): its output is shown here, saying what it is
    homes.route(tokens[0], "stream", {"name": "stdout", "text": "very late\n"})
    assert "output of a remote task that ended long ago" in here_err.getvalue()
    assert "very late" in here_err.getvalue()
    assert len(homes._homes) <= 2


def test_ipython_style_frames_of_an_engines_report_are_read_back_too():
    async def child_shipped():
        raise KeyError("x")

    shipped.note(child_shipped)
    line = child_shipped.__code__.co_firstlineno + 1
    text = ("tinycoro: task 'child_shipped' (id 2) on context 0 failed and nothing awaited it:\n"
            "\x1b[36mFile \x1b[39m\x1b[32m<dynamic-code>:" + str(line) + "\x1b[39m, in "
            "\x1b[36mchild_shipped\x1b[39m\x1b[34m()\x1b[39m\n"
            "\x1b[32m      1\x1b[39m \x1b[33m'Could not get source, probably due dynamically "
            "evaluated source code.'\x1b[39m\n"
            "KeyError: 'x'\n")
    got = shipped.readable(text).splitlines()
    assert got[1] == f'File "{__file__}", line {line}, in child_shipped()'
    assert got[2] == f'----> {line} raise KeyError("x")'
    assert got[3] == "KeyError: 'x'"
