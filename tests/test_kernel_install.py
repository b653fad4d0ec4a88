"""``python -m tinycoro.kernel_ext install``: the kernelspec it writes (the kernel it starts is tested in
tests/test_kernel_protocol.py::test_installed_kernelspec_preloads_the_extension)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("jupyter_client")

from tinycoro.kernel_ext.install import DISPLAY_NAME, kernel_json, main

pytestmark = pytest.mark.timeout(60)


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
