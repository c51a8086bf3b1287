"""The README's example and every docstring example run as written."""
import doctest
import pathlib
import re

import numpy as np
import pytest

import posemb

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    spaces = []
    for block in blocks:
        ns: dict = {}
        exec(compile(block, "README.md", "exec"), ns)
        spaces.append(ns)
    ns = next(ns for ns in spaces if "q_rot" in ns)
    # the example's values are the rotation it claims (positions 0..1023)
    q = np.random.default_rng(0).standard_normal((8, 32, 1024, 128), dtype=np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(1024), 128)
    np.testing.assert_array_equal(ns["q_rot"], posemb.apply_rope(q, cos, sin))


MODULES = sorted({getattr(posemb, name).__module__ for name in posemb.__all__
                  if hasattr(getattr(posemb, name), "__module__")}
                 | {"posemb", "posemb.torch", "posemb.plot"})


@pytest.mark.parametrize("modname", MODULES)
def test_docstring_examples(modname):
    import importlib
    if modname == "posemb.plot":
        pytest.importorskip("matplotlib")
    mod = importlib.import_module(modname)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_every_public_name_has_an_example():
    for name in posemb.__all__:
        if name.startswith("__"):
            continue
        doc = getattr(posemb, name).__doc__ or ""
        assert ">>>" in doc, f"posemb.{name} has no runnable example"
    import importlib
    for mod in map(importlib.import_module, ("posemb.torch", "posemb.plot")):
        for name in mod.__all__:
            doc = getattr(mod, name).__doc__ or ""
            assert ">>>" in doc, f"{mod.__name__}.{name} has no runnable example"
