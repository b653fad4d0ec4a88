"""A remote task's output, shown at home: what it prints and what it ``display()``s appear in
the process that submitted it (in a notebook, in the submitting cell). Called on the task's
submitter's context (``RemoteTask._in_submitter``), so ipykernel routes it by that context's
parent header."""

from __future__ import annotations

import sys

from .shipped import readable

__all__ = ["display_output", "write_output"]


def write_output(name: str, text: str) -> None:
    """Write a remote task's output to this process's stream of the same name (in a
    notebook: ipykernel's stream, which routes it by the current context's parent header).
    On stderr, the engine's reports of failures (a child task's that nothing awaited) have
    their frames of code shipped from here read back to their cells (:mod:`.shipped`)."""
    if name == "stderr":
        sys.stderr.write(readable(text))
    else:
        sys.stdout.write(text)


def display_output(content: dict, update: bool) -> None:
    """Show a remote task's ``display()`` here: through this process's IPython display
    publisher if it runs IPython (a notebook: routed to the submitting cell, as streams are),
    else its text/plain on stdout, as a terminal IPython would."""
    ipython = sys.modules.get("IPython")  # no import: if IPython is not loaded, no shell runs
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        text = content.get("data", {}).get("text/plain")
        if text:
            sys.stdout.write(text + "\n")
        return
    shell.display_pub.publish(data=content["data"], metadata=content.get("metadata") or {},
                              transient=content.get("transient") or None, update=update)
