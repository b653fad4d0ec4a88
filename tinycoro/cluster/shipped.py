"""Remote tracebacks read back to the code: frames of functions shipped by value.

cloudpickle ships a notebook's function by value, and names its code ``<dynamic-code>`` on the
way (so that its payload does not depend on where it was defined); line numbers travel intact.
An engine's traceback therefore says ``File "<dynamic-code>", line 4, in remote_bad``, with no
source line: the engine has neither the cell's name nor its text. This process has both (IPython
keeps every cell's source in ``linecache`` under the cell's file name). So each function shipped
is noted here with its code objects (:func:`note`), and :func:`readable` puts the name and source
line back into a traceback's text: ``Cell In[3], line 4, in remote_bad`` in a notebook (as
IPython names cells), the file name elsewhere.
"""

from __future__ import annotations

import linecache
import re
import sys
import threading
import types
import weakref
from collections import deque
from functools import partial
from typing import Any

__all__ = ["note", "readable"]

KEPT = 2048  # code objects remembered, the most recently shipped
DYNAMIC = "<dynamic-code>"  # cloudpickle's name for the code it ships by value

_lock = threading.Lock()
# (co_name, file name, first line, last line), most recent last
_code: deque[tuple[str, str, int, int]] = deque(maxlen=KEPT)
_noted: weakref.WeakSet[types.FunctionType] = weakref.WeakSet()  # whose code is in _code
# Python's frame line, and IPython's (an engine's report of a failure nobody awaited is
# formatted by IPython, in colour: matched with its colour codes taken out)
_FRAME = re.compile(r'^(?P<indent>\s*)File "' + re.escape(DYNAMIC) +
                    r'", line (?P<line>\d+), in (?P<name>.+)$')
_IPYTHON_FRAME = re.compile(r"^(?P<indent>\s*)File " + re.escape(DYNAMIC) +
                            r":(?P<line>\d+), in (?P<name>[^\s(]+)\(\)$")
_NO_SOURCE = "Could not get source"  # what IPython says under such a frame
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _codes(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _codes(const)
    return out


def _root(fn: Any) -> types.FunctionType | None:
    """The Python function a submitted callable runs (a partial's, a callable object's)."""
    while isinstance(fn, partial):
        fn = fn.func
    if not isinstance(fn, types.FunctionType):
        fn = getattr(type(fn), "__call__", None)  # a callable object: its class's method
    return fn if isinstance(fn, types.FunctionType) else None


def _functions(fn: types.FunctionType, depth: int = 0,
               seen: set[int] | None = None) -> list[types.FunctionType]:
    """*fn* and the functions of its module it names (from ``__main__``, they travel by value
    with it)."""
    seen = set() if seen is None else seen
    if id(fn) in seen or depth > 3:
        return []
    seen.add(id(fn))
    out = [fn]
    for code in _codes(fn.__code__):
        for name in code.co_names:
            value = fn.__globals__.get(name)
            if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
                out += _functions(value, depth + 1, seen)
    return out


def note(fn: Any) -> None:
    """*fn* is being shipped: remember its code (and that of the functions it names), once
    per function object (a loop of submits notes it once; a cell run again makes a new one)."""
    root = _root(fn)
    if root is None:
        return
    with _lock:
        if root in _noted:
            return
        _noted.add(root)
    entries = []
    for f in _functions(root):
        for code in _codes(f.__code__):
            lines = [line for _, _, line in code.co_lines() if line is not None]
            if lines:
                entries.append((code.co_name, code.co_filename, min(lines), max(lines)))
    with _lock:
        _code.extend(entries)


def _cell_label(filename: str) -> str:
    """``Cell In[3]`` for a notebook cell (IPython's own words), else ``File "name"``."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    namer = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if namer is not None:
        try:
            label = namer(filename)
        except Exception:  # noqa: BLE001 - another IPython: the file name will do
            label = None
        if label:
            return f"{label[0]} {label[1]}"
    return f'File "{filename}"'


def _where(name: str, line: int) -> str | None:
    with _lock:
        found = [f for n, f, first, last in reversed(_code) if n == name and first <= line <= last]
    return found[0] if found else None


def readable(text: str) -> str:
    """*text* (a remote traceback, or an engine's report of a failure) with each
    ``<dynamic-code>`` frame of a function shipped from here named by its cell (or file) and
    followed by its source line. Frames of code this process did not ship stay as they are."""
    if DYNAMIC not in text:
        return text
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = _FRAME.match(line)
        ipython = m is None
        if ipython:
            m = _IPYTHON_FRAME.match(_ANSI.sub("", line))
        filename = m and _where(m["name"], int(m["line"]))
        if not m or not filename:
            out.append(line)
            continue
        indent, lineno = m["indent"], int(m["line"])
        source = linecache.getline(filename, lineno).strip()
        if not ipython:
            out.append(f"{indent}{_cell_label(filename)}, line {lineno}, in {m['name']}")
            if source:
                out.append(f"{indent}  {source}")  # as Python indents a source line
            continue
        # IPython's style: the frame's head, then its numbered source lines
        out.append(f"{indent}{_cell_label(filename)}, line {lineno}, in {m['name']}()")
        if i < len(lines) and _NO_SOURCE in lines[i]:
            i += 1  # IPython's word that it had no source: we have it
        if source:
            out.append(f"{indent}----> {lineno} {source}")
    return "\n".join(out)
