"""posemb on a real dask.distributed LocalCluster of worker processes:
the example (examples/dask_rope.py) chunked along batch and heads, checked
bit for bit against NumPy, and a pickled RoPE computing on the workers."""
import os
import pathlib
import runpy

import numpy as np
import pytest

import posemb

ROOT = pathlib.Path(__file__).resolve().parents[1]
DASK_EXAMPLE = ROOT / "examples" / "dask_rope.py"

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("dask.distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.mark.slow        # ~4-10 s: two worker processes start (CI: pytest -m slow)
def test_example_on_a_local_cluster(client):
    # worker processes, not threads of this one
    pids = set(client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids
    mod = runpy.run_path(str(DASK_EXAMPLE))
    errors = mod["main"](batch=8, heads=4, seq=64, head_dim=32, chunk=2, head_chunk=2,
                         scheduler=client)
    assert set(errors) == {"apply_rope", "offsets", "RoPE on workers",
                           "apply_rotary_pos_emb", "learned_pe_forward"}
    assert all(e == 0.0 for e in errors.values()), errors


@pytest.mark.slow
def test_pickled_rope_on_workers(client):
    rope = posemb.RoPE(32, 16, interleaved=True,
                       scaling={"rope_type": "dynamic", "factor": 2.0},
                       max_position_embeddings=48)
    x = np.random.default_rng(3).standard_normal((6, 4, 80, 32)).astype(np.float32)
    # chunked along batch and heads; the RoPE travels in the graph
    q = da.from_array(x, chunks=(2, 2, 80, 32))
    got = q.map_blocks(rope, offset=9, dtype=q.dtype).compute(scheduler=client)
    want = rope(x, offset=9)
    assert got.tobytes() == want.tobytes()
    # and as a task of its own, on another process
    fut = client.submit(lambda r, a: (os.getpid(), r(a), r.backward(a)), rope, x[0])
    pid, y, back = fut.result()
    assert pid != os.getpid()
    assert y.tobytes() == rope(x[0]).tobytes()
    assert back.tobytes() == rope.backward(x[0]).tobytes()


def test_split_sequence_or_features_never_gives_wrong_positions():
    # the example's helper merges chunks that split seq or features (threads suffice)
    mod = runpy.run_path(str(DASK_EXAMPLE))
    rope = posemb.RoPE(16, 64)
    x = np.random.default_rng(4).standard_normal((4, 2, 40, 16)).astype(np.float32)
    want = rope(x, offset=3)
    for chunks in ((1, 1, 10, 16), (2, 2, 40, 8), (1, 2, 7, 4)):
        got = mod["rope_blocks"](rope, da.from_array(x, chunks=chunks), offset=3)
        assert got.compute(scheduler="threads").tobytes() == want.tobytes(), chunks


def test_gufunc_with_split_feature_axis_is_rechunked():
    # the feature axis is a core axis of the gufunc (dask refuses to split
    # it): posemb rechunks it into one chunk and gives the NumPy result
    xn = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)
    x = da.from_array(xn, chunks=(1, 8, 8))
    cos, sin = posemb.rope_cos_sin(np.arange(8), 16)
    got = posemb.apply_rope(x, cos, sin)
    assert got.compute(scheduler="threads").tobytes() == posemb.apply_rope(xn, cos, sin).tobytes()
    got = posemb.RoPE(16, 8)(x)
    assert got.compute(scheduler="threads").tobytes() == posemb.RoPE(16, 8)(xn).tobytes()
