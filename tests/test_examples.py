"""The dask example runs, lazily, and equals NumPy bit for bit."""
import os
import pathlib
import runpy
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DASK_EXAMPLE = ROOT / "examples" / "dask_rope.py"


def test_dask_example_equals_numpy():
    pytest.importorskip("dask.array")
    mod = runpy.run_path(str(DASK_EXAMPLE))
    errors = mod["main"](batch=8, heads=4, seq=64, head_dim=32, chunk=2)
    assert set(errors) == {"apply_rope", "offsets", "RoPE on workers", "apply_rotary_pos_emb",
                           "learned_pe_forward"}
    assert all(e == 0.0 for e in errors.values()), errors


def test_dask_example_as_a_script():
    pytest.importorskip("dask.array")
    import posemb
    env = dict(os.environ)
    # the posemb these tests import (a checkout or an install) runs the script too
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(posemb.__file__).parents[1])] + env.get("PYTHONPATH", "").split(os.pathsep))
    out = subprocess.run([sys.executable, str(DASK_EXAMPLE)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "bit for bit" in out.stdout


def test_tour_notebook_is_stripped_and_visits_every_feature():
    # .ci/notebook.sh executes it; here: committed without outputs, in order
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(str(ROOT / "examples" / "tour.ipynb"), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    source = "\n".join(c.source for c in code)
    order = ["posemb.apply_rope(", "interleaved=True", "posemb.RoPE(", "posemb.rope_config(",
             "posemb.sinusoidal(", "lpe.backward(", "posemb.t5_relative_bias(",
             "posemb.alibi_bias(", "posemb.causal_mask(", "posemb.scaled_dot_product_attention(",
             "pt.apply_rotary_pos_emb(", "posemb.plot.sinusoidal(", "posemb.bench("]
    # a tour of the public API: no private modules
    import re
    private = re.findall(r"posemb\._(?!_)\w+|from posemb import _(?!_)\w+", source)
    assert not private, private
    at = [source.find(s) for s in order]
    assert -1 not in at, [s for s, i in zip(order, at) if i == -1]
    assert at == sorted(at), "features out of order"


def test_sphinx_pages_name_every_public_name():
    import importlib
    import posemb
    docs = ROOT / "docs"
    api = (docs / "api.rst").read_text()
    missing = [n for n in posemb.__all__ if not n.startswith("__") and f":: {n}\n" not in api]
    # docs/conf.py appends any of these under "Other", so the reference is never
    # incomplete; listing them here puts them in their family's section
    assert not missing, f"add to docs/api.rst: {missing}"
    for mod, page in (("posemb.torch", "torch.rst"), ("posemb.plot", "plot.rst")):
        text = (docs / page).read_text()
        for n in importlib.import_module(mod).__all__:
            assert f":: {mod}.{n}\n" in text, f"docs/{page} lacks {mod}.{n}"
