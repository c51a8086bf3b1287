"""Shared fixtures.  torch is a test dependency (the ``test`` extra pins a
CPU build); reference formulas are written in PyTorch from REFERENCE.md.

Without torch (e.g. an installed wheel tested with only numpy and pytest, as
.ci/wheel_linux.sh does), ``import torch`` still succeeds but gives a stand-in
whose every attribute skips the test (or the module, when used at import
time), so the tests that need no torch still run.
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

try:
    import torch  # noqa: F401
except ImportError:
    class _SkipWithoutTorch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Finds ``torch`` and ``torch.*`` as empty modules that skip on use."""

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
                pytest.skip(f"needs torch ({module.__name__}.{attr}); torch is not installed",
                            allow_module_level=True)
            module.__getattr__ = __getattr__

    sys.meta_path.insert(0, _SkipWithoutTorch())


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
