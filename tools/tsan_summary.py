#!/usr/bin/env python3
"""Summarise the ThreadSanitizer reports of a tools/tsan_suites.sh run.

    python3 tools/tsan_summary.py /tmp/tinycoro-tsan      (the run's $TINYCORO_TSAN_OUT)

Prints a count of reports by their top tinycoro frame (the first frame of an access's stack
that is in tinycoro's compiled code, above any frame of CPython's evaluation loop, mapped from
the generated C back to the .py/.pyx line Cython wrote it from), then the reports in no tinycoro frame (CPython, the liburing binding, libc) by
their top frame, then the suppressions that matched. Exits 1 when any report names tinycoro:
TSan never writes a suppressed report, so every one counted here is unsuppressed.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys

KIND = re.compile(r"WARNING: ThreadSanitizer: ([^(\n]+)")
FRAME = re.compile(r"^\s+#\d+ (\S+) (\S+)", re.M)
# Cython writes the source line each block of C comes from as a comment above it.
ORIGIN = re.compile(r'/\* "([^"]+\.(?:py|pyx|pxd))":(\d+)')


# Frames of CPython's evaluation loop: an access above one (nearer #0) is made by interpreted
# Python code, or by CPython itself for it, not by tinycoro's compiled code.
INTERPRETER = {"_PyEval_EvalFrameDefault", "_PyEval_EvalFrame", "gen_send_ex2"}


def demangle(fn: str) -> str:
    """Cython's C names, readably: __pyx_f_8tinycoro_4core_6engine_6Engine_push ->
    tinycoro.core.engine.Engine.push (a method's wrapper number dropped: _20_sleep -> _sleep)."""
    m = re.match(r"__pyx_[a-z]+_(\d.*)", fn)
    if not m:
        return fn
    rest, parts = m.group(1), []
    # a length-prefixed part ends the name or is followed by "_"; otherwise the number was a
    # def method's wrapper number (4generator, 20_sleep)
    while (n := re.match(r"(\d+)(.*)", rest)) and int(n.group(1)) <= len(n.group(2)) and (
        n.group(2)[int(n.group(1)):][:1] in ("", "_")
    ):
        k = int(n.group(1))
        parts.append(n.group(2)[:k])
        rest = n.group(2)[k:]
        rest = rest[1:] if rest.startswith("_") else rest
    rest = re.sub(r"^\d+", "", rest)  # a def method's wrapper number
    if rest:
        parts.append(rest)
    return ".".join(parts)


class Origins:
    """Maps "tinycoro/core/engine.c:1234" to "tinycoro/core/engine.py:412" via the C files the
    run kept ($out/csrc)."""

    def __init__(self, csrc: str) -> None:
        self.csrc = csrc
        self.files: dict[str, list[str] | None] = {}

    def __call__(self, loc: str) -> str:
        m = re.search(r"(tinycoro/\S+?\.c):(\d+)", loc)
        if not m:
            return loc
        rel, line = m.group(1), int(m.group(2))
        if rel not in self.files:
            path = os.path.join(self.csrc, rel)
            self.files[rel] = open(path, errors="replace").read().splitlines() if os.path.exists(path) else None
        lines = self.files[rel]
        if lines:
            for i in range(min(line, len(lines)) - 1, -1, -1):
                o = ORIGIN.search(lines[i])
                if o:
                    return f"{o.group(1)}:{o.group(2)}"
        return f"{rel}:{line}"


def ours(fn: str, loc: str) -> bool:
    # tinycoro's C is compiled from relative paths (tinycoro/core/engine.c); ~/.cache/tinycoro is not it
    return "8tinycoro_" in fn or loc.startswith("tinycoro/")


def main(out: str) -> int:
    origin = Origins(os.path.join(out, "csrc"))
    by_frame: collections.Counter = collections.Counter()
    against: dict = collections.defaultdict(collections.Counter)
    other: collections.Counter = collections.Counter()
    matched: collections.Counter = collections.Counter()
    for path in sorted(glob.glob(os.path.join(out, "report.*"))):
        text = open(path, errors="replace").read()
        for tail in text.split("ThreadSanitizer: Matched")[1:]:
            for n, what in re.findall(r"^\s*(\d+) (\S+:\S+)$", tail, re.M):
                matched[what] += int(n)
        for rep in re.split(r"^={10,}$", text, flags=re.M):
            kind = KIND.search(rep)
            if not kind:
                continue
            # the stacks of the two accesses (or the one stack of a non-race report)
            stacks = [FRAME.findall(s) for s in re.split(r"\n\s*\n", rep) if FRAME.search(s)]
            tops = []
            for st in stacks:
                tops.append(None)
                for fn, loc in st:
                    if ours(fn, loc):
                        tops[-1] = f"{origin(loc)} {demangle(fn)}"
                        break
                    if fn in INTERPRETER:  # the access is interpreted code's (a test's, say),
                        break  # whatever compiled tinycoro frame called into it further down
            k = kind.group(1).strip()
            first = next((t for t in tops if t), None)
            if first is None:
                top = stacks[0][0][0] if stacks and stacks[0] else "?"
                other[(k, top)] += 1
                continue
            by_frame[(k, first)] += 1
            for t in tops[1:]:
                if t and t != first:
                    against[(k, first)][t] += 1
                    break
    n_ours = sum(by_frame.values())
    print(f"tsan_summary: {n_ours} report(s) naming tinycoro, {sum(other.values())} elsewhere ({out})")
    for (k, where), n in by_frame.most_common():
        print(f"  {n:4d}  {k}  at {where}")
        for t, m in against[(k, where)].most_common(3):
            print(f"          against {t} ({m})")
    if other:
        print("not in tinycoro (CPython, the binding, libc): by top frame")
        for (k, top), n in other.most_common():
            print(f"  {n:4d}  {k}  at {top}")
    if matched:
        print("suppressions matched (summed over processes):")
        for s, n in matched.most_common():
            print(f"  {n:4d}  {s}")
    return 1 if n_ours else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tinycoro-tsan"))
