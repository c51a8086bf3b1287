"""torch for the PyTorch/Hugging Face parity tests, imported on first use.

Family test files do ``from _torch import torch`` instead of ``import
torch``: the first attribute a test reads calls ``pytest.importorskip``, so
without torch that test is skipped and the rest of the module still runs.
"""
import importlib

import pytest


class _Lazy:
    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name):
        if name.startswith("_"):        # pytest's collection probes (__test__, ...)
            raise AttributeError(name)
        pytest.importorskip("torch", exc_type=ImportError)
        return getattr(importlib.import_module(self._module), name)


torch = _Lazy("torch")
F = _Lazy("torch.nn.functional")
