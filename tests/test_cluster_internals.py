"""tinycoro.cluster.internals, the one module that names ipyparallel's and ipykernel's private
parts, against the installed versions: the versions are in the supported range, every name
used exists, and an unsupported version or a missing name is refused at start/connect with an
error that names the range, before any process starts. (The names on a live client and on a
live engine's kernel are checked in test_cluster.py, on its cluster.)"""

from __future__ import annotations

import threading

import pytest

ipp = pytest.importorskip("ipyparallel")

import tinycoro as tc
from tinycoro.cluster import internals


def test_the_installed_versions_are_supported():
    internals.check_version("ipyparallel", internals.IPYPARALLEL)
    internals.check_version("ipykernel", internals.IPYKERNEL)


def test_the_client_class_has_every_method_used():
    for name in internals.CLIENT_METHODS:
        assert callable(getattr(ipp.Client, name)), name
    assert callable(ipp.Client._dispatch_iopub.__wrapped__)  # undecorated, as the seam calls it
    assert "message_future_hook" in ipp.Client.send_apply_request.__code__.co_varnames
    from ipyparallel.client.magics import ParallelMagics  # what %px is made of

    assert ParallelMagics


def test_the_kernel_class_of_an_engine_has_every_name_used():
    from ipyparallel.engine.kernel import IPythonKernel

    # control_handlers, engine_id and _shell_parent are set on the instance when an engine
    # starts: the live check in test_cluster.py covers them
    on_instance = ("control_handlers", "engine_id", "_shell_parent")
    on_class = [n for n in internals.KERNEL_ATTRIBUTES if n not in on_instance]
    missing = [n for n in on_class
               if not hasattr(IPythonKernel, n) and n not in IPythonKernel.class_traits()]
    assert missing == [], missing


def test_an_unsupported_version_is_refused_at_start_naming_the_range(monkeypatch):
    monkeypatch.setattr(internals, "IPYPARALLEL", ((99, 0), (100, 0)))
    threads = set(threading.enumerate())
    with pytest.raises(tc.cluster.UnsupportedVersion, match=r"ipyparallel>=99\.0,<100\.0"):
        tc.cluster.start(1)
    assert set(threading.enumerate()) == threads  # refused before anything started


def test_a_client_without_a_name_used_is_refused_naming_it(monkeypatch):
    class Unconnected(ipp.Client):
        def __init__(self):  # no controller needed: the check comes first
            pass

    monkeypatch.setattr(internals, "CLIENT_ATTRIBUTES",
                        internals.CLIENT_ATTRIBUTES + ("_renamed_in_a_later_version",))
    with pytest.raises(tc.cluster.UnsupportedVersion, match="_renamed_in_a_later_version") as info:
        tc.cluster.connect(Unconnected())
    assert "ipyparallel>=9.2,<10.0" in str(info.value)
    assert issubclass(tc.cluster.UnsupportedVersion, RuntimeError)


def test_start_checks_the_version_and_the_client_once(monkeypatch):
    # The installed version and the client's names do not change during a start: one check of
    # each, before any process starts for the version (the test above), is all it takes.
    checked: list[str] = []
    real_version, real_attributes = internals.check_version, internals._check_attributes

    def version(package, bounds):
        checked.append(package)
        real_version(package, bounds)

    def attributes(obj, names, what, package, bounds):
        checked.append(what)
        real_attributes(obj, names, what, package, bounds)

    monkeypatch.setattr(internals, "check_version", version)
    monkeypatch.setattr(internals, "_check_attributes", attributes)
    cluster = tc.cluster.start(1, progress=False)
    cluster.stop()
    assert checked == ["ipyparallel", "the ipyparallel.Client"]
