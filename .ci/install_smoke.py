"""Check an installed tinycoro as a user meets it: run by CI with the interpreter of a fresh venv
into which a wheel (built from the sdist) was installed, from a folder outside the clone.

It fails (exit 1, saying what) unless:
  * ``import tinycoro`` comes from that venv's site-packages, not from the clone;
  * the runtime is compiled, with no fallback (``tinycoro.compiled.describe()``);
  * nothing named ``kernel_ext`` was installed at the top level of site-packages;
  * ``python -m tinycoro`` runs and its first line names the compiled runtime;
  * in a plain ipykernel, a cell runs ``%load_ext tinycoro`` and a top-level ``await`` on the
    compiled runtime;
  * the tinycoro kernelspec installs into the venv, and a kernel started from it awaits at top
    level with no ``%load_ext`` (it preloads the extension).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

LOAD = "%load_ext tinycoro\n"
CELL = """\
import tinycoro as tc, tinycoro.compiled as c
async def twice(x):
    await tc.sleep(0.01)
    return 2 * x
print(await tc.spawn(twice(21)), c.describe())
"""


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        sys.exit(1)


def main() -> None:
    import tinycoro
    import tinycoro.compiled

    site = sysconfig.get_paths()["purelib"]
    check(tinycoro.__file__.startswith(site), f"tinycoro imported from {tinycoro.__file__}")
    described = tinycoro.compiled.describe()
    check(described == "compiled runtime", f"runtime: {described}")
    check(not os.path.exists(os.path.join(site, "kernel_ext")), "no top-level kernel_ext installed")

    demo = subprocess.run([sys.executable, "-m", "tinycoro"], capture_output=True, text=True,
                          timeout=120)
    first = (demo.stdout.splitlines() or [""])[0]
    check(demo.returncode == 0 and "compiled runtime" in first, f"python -m tinycoro: {first!r}")

    subprocess.run([sys.executable, "-m", "tinycoro.kernel_ext", "install", "--sys-prefix"],
                   check=True, timeout=60)
    run_cell("python3", LOAD + CELL)
    run_cell("tinycoro", CELL)


def run_cell(kernel_name: str, cell: str) -> None:
    """Start a kernel from *kernel_name*'s spec, run *cell* there, check what it printed."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name=kernel_name, startup_timeout=120)
    try:
        out: list[str] = []
        reply = kc.execute_interactive(
            cell, timeout=60,
            output_hook=lambda msg: out.append(msg["content"].get("text", ""))
            if msg["msg_type"] == "stream" else None,
        )
        text = "".join(out).strip()
        check(reply["content"]["status"] == "ok" and text == "42 compiled runtime",
              f"kernel {kernel_name!r}: {cell.splitlines()[0]!r}... printed {text!r}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
