"""``python -m tinycoro.kernel_ext install``: the kernelspec it writes (the kernel it starts is tested in
tests/test_kernel_protocol.py::test_installed_kernelspec_preloads_the_extension)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from tinycoro.kernel_ext import install as install_mod
from tinycoro.kernel_ext.install import DISPLAY_NAME, Interpreter, kernel_json, main

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parent.parent
# What the installer calls this interpreter's kernel: a free-threaded one is offered beside the other
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
NAME = "tinycoro-ft" if FREE_THREADED else "tinycoro"
SHOWN = f"Python {sys.version_info[0]}.{sys.version_info[1]}t (tinycoro, free-threaded)" if FREE_THREADED else DISPLAY_NAME


def test_kernel_json_preloads_the_extension_with_this_interpreter():
    spec = kernel_json()
    assert DISPLAY_NAME == "Python 3 (tinycoro)" and spec["display_name"] == SHOWN
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert "{connection_file}" in spec["argv"] and "--ext=tinycoro" in spec["argv"]
    assert spec["language"] == "python" and "env" not in spec
    spec = kernel_json(contexts=3, dispatch="least_loaded")
    assert spec["env"] == {"TINYCORO_CONTEXTS": "3", "TINYCORO_DISPATCH": "least_loaded"}


def test_install_under_a_prefix(tmp_path, capsys):
    assert main(["install", "--prefix", str(tmp_path), "--name", "tc-test", "--contexts", "2"]) == 0
    kdir = tmp_path / "share" / "jupyter" / "kernels" / "tc-test"
    spec = json.loads((kdir / "kernel.json").read_text())
    assert spec["display_name"] == SHOWN and spec["env"] == {"TINYCORO_CONTEXTS": "2"}
    assert (kdir / "logo-64x64.png").exists()
    assert str(kdir) in capsys.readouterr().out


def test_bad_arguments(tmp_path, capsys):
    assert main(["install", "--prefix", str(tmp_path), "--contexts", "0"]) == 2
    assert "--contexts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["install", "--dispatch", "random"])
    with pytest.raises(SystemExit):
        main(["install", "--user", "--sys-prefix"])
    assert main(["uninstall", "--name", "no-such-tinycoro-kernel"]) == 1


def test_module_entry_point(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "tinycoro.kernel_ext", "install", "--prefix", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert f"Installed kernelspec {NAME!r} ({SHOWN})" in out


# -- installed names: the notebook layer is tinycoro.kernel_ext, never a top-level kernel_ext ---
def test_pyproject_lists_every_package_and_maps_the_notebook_folder():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "tinycoro").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert sorted(config["packages"]) == sorted(found | {"tinycoro.kernel_ext"})
    assert config["package-dir"] == {"tinycoro.kernel_ext": "kernel_ext"}
    assert not [p for p in config["packages"] if not p.startswith("tinycoro")]


def test_a_build_puts_the_notebook_layer_under_tinycoro_only(tmp_path):
    # setuptools' own build_py with the project's configuration: what a wheel (and so a
    # pip install) gets. The compiled modules are skipped; only the layout is checked.
    lib = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "TINYCORO_NO_EXTENSION": "1"},
    )
    assert sorted(p.name for p in lib.iterdir()) == ["tinycoro"]
    for name in ("__init__.py", "__main__.py", "runner.py", "cell_loop.py", "install.py"):
        assert (lib / "tinycoro" / "kernel_ext" / name).is_file()
    assert (lib / "tinycoro" / "lowlevel.py").is_file()


def test_from_a_clone_the_extension_imports_under_tinycoro(tmp_path):
    # PYTHONPATH=clone, no install (how the README's test command and CI run it): the clone's
    # kernel_ext/ folder is tinycoro.kernel_ext, and no module named kernel_ext is created.
    code = (
        "import sys, tinycoro, tinycoro.kernel_ext as k, tinycoro.kernel_ext.runner as r\n"
        "print(k.__file__)\n"
        "print(r.CellRunner.__module__)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kernel_ext'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout.splitlines()
    assert out == [str(ROOT / "kernel_ext" / "__init__.py"), "tinycoro.kernel_ext.runner", "[]"]


# -- another interpreter's kernel (--python), and the free-threaded one -------------------------
def test_python_option_writes_that_interpreters_kernel(tmp_path, capsys):
    py = sys.executable  # on a GIL build: a plain tinycoro kernel, under another path's name
    assert main(["install", "--prefix", str(tmp_path), "--python", py, "--contexts", "2"]) == 0
    spec = json.loads((tmp_path / "share" / "jupyter" / "kernels" / NAME / "kernel.json").read_text())
    assert spec["argv"] == [py, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--ext=tinycoro"]
    assert spec["env"] == {"TINYCORO_CONTEXTS": "2"}  # no PYTHON_GIL: never without being asked


def test_python_option_given_relative_writes_the_absolute_path(tmp_path, monkeypatch):
    # Jupyter starts a kernel from its own working directory: a kernelspec naming the
    # interpreter as `.venv-ft/bin/python`, as typed in the clone, would start nothing there.
    (tmp_path / "venv").symlink_to(sys.prefix)  # this venv under a second name: kept, not resolved
    link = tmp_path / "venv" / "bin" / os.path.basename(sys.executable)
    monkeypatch.chdir(tmp_path)
    assert main(["install", "--prefix", str(tmp_path / "p"), "--python", os.path.relpath(link)]) == 0
    spec = json.loads((tmp_path / "p" / "share" / "jupyter" / "kernels" / NAME / "kernel.json").read_text())
    assert spec["argv"][0] == str(link)


def test_python_option_refuses_an_interpreter_that_cannot_run_the_kernel(tmp_path, capsys):
    no_site = tmp_path / "python-no-site"  # this Python without its site-packages: no ipykernel
    no_site.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    no_site.chmod(0o755)
    assert main(["install", "--prefix", str(tmp_path), "--python", str(no_site)]) == 2
    err = capsys.readouterr().err
    assert "lacks ipykernel.kernelapp" in err and "pip install ipykernel tinycoro" in err
    assert main(["install", "--prefix", str(tmp_path), "--python", str(tmp_path / "nothing")]) == 2
    assert "cannot run" in capsys.readouterr().err
    assert not (tmp_path / "share").exists()  # nothing written


# CPython's own words when a module without Py_mod_gil turns the GIL on (3.13t)
GIL_WARNING = (
    "The global interpreter lock (GIL) has been enabled to load module 'liburing.common', which "
    "has not declared that it can run safely without the GIL. To override this behavior and keep "
    "the GIL disabled (at your own risk), run with PYTHON_GIL=0 or -Xgil=0."
)


def test_a_module_that_turns_the_gil_on_is_named_and_forcing_it_off_is_said():
    assert install_mod._GIL_WARNING.search(GIL_WARNING).group(1) == "liburing.common"
    on = Interpreter("/x/python", "3.13", free_threaded=True, gil=True, gil_on_by=["liburing.common"])
    with pytest.raises(ValueError, match=r"importing liburing\.common turns the GIL back on.*--force-gil-off"):
        install_mod._check_gil(on, False)
    assert install_mod._check_gil(on, True) == {"PYTHON_GIL": "0"}
    assert on.display_name(forced=True) == "Python 3.13t (tinycoro, free-threaded, GIL forced off)"
    off = Interpreter("/x/python", "3.13", free_threaded=True, gil=False, gil_on_by=[])
    assert install_mod._check_gil(off, False) == {}
    assert off.display_name(forced=False) == "Python 3.13t (tinycoro, free-threaded)"
    with pytest.raises(ValueError, match="not needed"):  # the override is never the default way
        install_mod._check_gil(off, True)
    gil_build = Interpreter("/x/python", "3.11", free_threaded=False, gil=True, gil_on_by=[])
    with pytest.raises(ValueError, match="not needed"):
        install_mod._check_gil(gil_build, True)
    assert gil_build.display_name(forced=False) == DISPLAY_NAME
