"""Shared fixtures.  torch is a test dependency (the ``test`` extra pins a
CPU build); reference formulas are written in PyTorch from REFERENCE.md."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
