"""Shared fixtures.  torch is a test dependency (the ``test`` extra pins a
CPU build) for the parity tests, which are written in PyTorch from the
systems they reproduce.  The family test files take torch through
tests/_torch.py (``pytest.importorskip`` on first use, per test).

Without torch (an installed wheel tested with only numpy and pytest, as
.ci/wheel_linux.sh does), ``import torch`` still succeeds and gives a
stand-in: what a test module takes from it at import time is a placeholder,
and any use of torch while a test runs skips that test, so the tests that
need no torch (the float64 oracles, the bad inputs, the docs) still run.
"""
import importlib.abc
import importlib.util
import os
import pathlib
import sys

import numpy as np
import pytest

if os.environ.get("POSEMB_TEST_INSTALLED"):
    # testing an installed wheel (.ci/wheel_linux.sh): the source tree must not be it
    import posemb
    _root = pathlib.Path(__file__).resolve().parents[1]
    if pathlib.Path(posemb.__file__).resolve().is_relative_to(_root):
        raise pytest.UsageError(f"POSEMB_TEST_INSTALLED is set but posemb comes from the "
                                f"source tree: {posemb.__file__}")

_collected = False       # torch stand-in: placeholders while collecting, skips after


def pytest_collection_finish(session):
    global _collected
    _collected = True


def _skip_without_torch(name):
    pytest.skip(f"needs torch ({name}); torch is not installed", allow_module_level=True)


class _TorchPlaceholder:
    """A torch attribute taken while a test module is imported."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if _collected:
            _skip_without_torch(f"{self._name}.{attr}")
        return _TorchPlaceholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        _skip_without_torch(self._name)      # at import time: the module is skipped

    def __mro_entries__(self, bases):        # class M(torch.nn.Module): defined, unusable
        return (object,)


try:
    import torch  # noqa: F401
except ImportError:
    class _TorchStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Finds ``torch`` and ``torch.*`` as empty modules (see the docstring)."""

        def find_spec(self, name, path, target=None):
            if name == "torch" or name.startswith("torch."):
                return importlib.util.spec_from_loader(name, self, is_package=True)
            return None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            def __getattr__(attr):
                if attr.startswith("__"):        # introspection (pickle, doctest, ...)
                    raise AttributeError(attr)
                return _TorchPlaceholder(module.__name__).__getattr__(attr)
            module.__getattr__ = __getattr__
            module.__path__ = []

    sys.meta_path.insert(0, _TorchStandIn())


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True, scope="session")
def _stream_from_4mib():
    """The suite's large cases are sized just past 4 MiB, the smallest output
    the kernels ever stream: so that they take the streaming-store paths on
    every machine, the suite streams from there.  By default posemb streams
    from 3/4 of the last-level cache (test_cpu_dispatch tests that rule and
    the plain stores below it)."""
    from posemb import _core
    _core._stream_min_bytes(4 << 20)
    yield
    _core._stream_min_bytes(-1)


@pytest.fixture(params=[True, False], ids=["partial-lines", "whole-lines"])
def partial_lines(request):
    """Both answers of the runtime's streaming-store probe (may streaming
    stores leave lines partly written?), whatever this CPU's is: with False,
    outputs not on 64-byte lines take plain stores (RoPE: staged, then
    streamed in whole lines), and the half-precision kernels that stream two
    heads' rows at once are not used.  Restored afterwards."""
    from posemb import _core
    old = _core._partial_lines(None)
    _core._partial_lines(request.param)
    yield request.param
    _core._partial_lines(old)
