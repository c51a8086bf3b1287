"""The dask example runs, lazily, and equals NumPy bit for bit."""
import os
import pathlib
import runpy
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DASK_EXAMPLE = ROOT / "examples" / "dask_rope.py"


def test_dask_example_equals_numpy():
    mod = runpy.run_path(str(DASK_EXAMPLE))
    errors = mod["main"](batch=8, heads=4, seq=64, head_dim=32, chunk=2)
    assert set(errors) == {"apply_rope", "offsets", "apply_rotary_pos_emb", "learned_pe_forward"}
    assert all(e == 0.0 for e in errors.values()), errors


def test_dask_example_as_a_script():
    import posemb
    env = dict(os.environ)
    # the posemb these tests import (a checkout or an install) runs the script too
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(posemb.__file__).parents[1])] + env.get("PYTHONPATH", "").split(os.pathsep))
    out = subprocess.run([sys.executable, str(DASK_EXAMPLE)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "bit for bit" in out.stdout
