"""``python -m tinycoro.kernel_ext install``: the kernelspec it writes (the kernel it starts is tested in
tests/test_kernel_protocol.py::test_installed_kernelspec_preloads_the_extension)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from tinycoro.kernel_ext.install import DISPLAY_NAME, kernel_json, main

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parent.parent


def test_kernel_json_preloads_the_extension_with_this_interpreter():
    spec = kernel_json()
    assert spec["display_name"] == DISPLAY_NAME == "Python 3 (tinycoro)"
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert "{connection_file}" in spec["argv"] and "--ext=tinycoro" in spec["argv"]
    assert spec["language"] == "python" and "env" not in spec
    spec = kernel_json(contexts=3, dispatch="least_loaded")
    assert spec["env"] == {"TINYCORO_CONTEXTS": "3", "TINYCORO_DISPATCH": "least_loaded"}


def test_install_under_a_prefix(tmp_path, capsys):
    assert main(["install", "--prefix", str(tmp_path), "--name", "tc-test", "--contexts", "2"]) == 0
    kdir = tmp_path / "share" / "jupyter" / "kernels" / "tc-test"
    spec = json.loads((kdir / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (tinycoro)" and spec["env"] == {"TINYCORO_CONTEXTS": "2"}
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
    assert "Installed kernelspec 'tinycoro' (Python 3 (tinycoro))" in out


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
