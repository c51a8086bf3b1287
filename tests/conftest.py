"""Shared fixtures.  torch is a test dependency (the ``test`` extra pins a
CPU build) for the parity tests, which are written in PyTorch from the
systems they reproduce and skip without it (tests/_torch.py)."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
