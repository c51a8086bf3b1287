"""The modules pickle, so they travel to other processes: multiprocessing
(spawn), joblib and dask.distributed workers (tests/test_distributed.py).

A pickled module carries its parameters (and a LearnedPE its weights), not
its lock or cached tables; the copy remakes its tables and must give the
same outputs bit for bit.
"""
import copy
import multiprocessing
import pickle

import numpy as np
import pytest

import posemb

ROPES = [
    dict(),
    dict(interleaved=True),
    dict(rotary_dim=8, base=500000.0, scale=0.5),
    dict(dtype=np.float64),
    dict(scaling={"rope_type": "linear", "factor": 4.0}),
    dict(scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=24),
    dict(scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
         max_position_embeddings=64),
]


def _x(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("kw", ROPES, ids=lambda kw: ",".join(kw) or "default")
def test_rope_pickle_round_trip(kw):
    rope = posemb.RoPE(16, 32, **kw)
    x = _x((2, 3, 40, 16))                      # 40 > seq_len: the copy grows its cache too
    want = rope(x)
    want_off = rope(x[:, :, :1], offset=np.array([5, 90]))
    want_back = rope.backward(x, offset=3)
    data = pickle.dumps(rope)
    assert b"_lock" not in data                 # no lock, no cached tables in the pickle
    for twin in (pickle.loads(data), copy.deepcopy(rope)):
        assert repr(twin) == repr(rope)
        assert _same(twin(x), want)
        assert _same(twin(x[:, :, :1], offset=np.array([5, 90])), want_off)
        assert _same(twin.backward(x, offset=3), want_back)
        assert _same(twin.cos_cached, rope.cos_cached[: twin.cos_cached.shape[0]])
        assert not twin.cos_cached.flags.writeable
        assert twin._lock is not rope._lock


def test_rope_pickle_is_small():
    # the pickle holds parameters and frequencies, not the (seq_len, dim) tables
    rope = posemb.RoPE(128, 8192)
    assert rope.cos_cached.nbytes == 8192 * 128 * 4
    assert len(pickle.dumps(rope)) < 10_000


def test_absolute_pe_pickle_round_trip():
    pe = posemb.AbsolutePE(24, 50, base=500.0)
    x = _x((3, 24, 20), np.float64)
    want = pe(x, start=7, seq_axis=-1, feature_axis=-2)
    twin = pickle.loads(pickle.dumps(pe))
    assert repr(twin) == repr(pe)
    assert _same(twin.embeddings, pe.embeddings) and not twin.embeddings.flags.writeable
    assert _same(twin(x, start=7, seq_axis=-1, feature_axis=-2), want)
    assert len(pickle.dumps(pe)) < 1000


def test_learned_pe_pickle_keeps_trained_weights():
    pe = posemb.LearnedPE(30, 8, seed=1)
    pe.weight[3] += 1.0                         # "trained": the pickle must carry the weights
    x = _x((2, 10, 8))
    twin = pickle.loads(pickle.dumps(pe))
    assert _same(twin.weight, pe.weight) and twin.weight.flags.writeable
    assert _same(twin(x, offset=2), pe(x, offset=2))
    g = _x((2, 10, 8), seed=1)
    assert _same(twin.backward(g)[1], pe.backward(g)[1])


def test_torch_modules_pickle_round_trip():
    torch = pytest.importorskip("torch")
    import posemb.torch as pt
    rot = pt.RotaryEmbedding(dim=16, max_position_embeddings=64,
                             scaling={"rope_type": "dynamic", "factor": 2.0})
    lpe = pt.LearnedPositionalEmbedding(20, 8)
    x = torch.randn(2, 5, 16)
    pos = torch.tensor([[0, 1, 2, 3, 200], [9, 8, 7, 6, 5]])
    twin_rot, twin_lpe = pickle.loads(pickle.dumps((rot, lpe)))
    for a, b in zip(twin_rot(x, pos), rot(x, pos)):
        assert torch.equal(a, b)
    assert torch.equal(twin_rot.inv_freq, rot.inv_freq)
    assert torch.equal(twin_lpe.weight, lpe.weight) and twin_lpe.weight.requires_grad
    y = torch.zeros(2, 4, 8, requires_grad=True)
    twin_lpe(y, offset=3).sum().backward()
    assert twin_lpe.weight.grad[3:7].eq(2.0).all() and twin_lpe.weight.grad[:3].eq(0).all()
    # torch.save goes through pickle as well
    import io
    buf = io.BytesIO()
    torch.save(rot, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(x, pos)[0], rot(x, pos)[0])


def test_rope_in_a_spawn_pool():
    # spawn: each worker is a fresh interpreter that unpickles the RoPE (a
    # bound callable) and makes its own tables
    rope = posemb.RoPE(32, 64, interleaved=True, scaling={"rope_type": "linear", "factor": 2.0})
    xs = [_x((2, 4, 100, 32), seed=s) for s in range(4)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        got = pool.map(rope, xs)
        got_abs = pool.map(posemb.AbsolutePE(32, 100), [x[0] for x in xs])
    for x, y, z in zip(xs, got, got_abs):
        assert _same(y, rope(x))
        assert _same(z, x[0] + posemb.AbsolutePE(32, 100).embeddings)


def test_rope_with_joblib():
    joblib = pytest.importorskip("joblib")
    rope = posemb.RoPE(16, 32)
    xs = [_x((3, 50, 16), seed=s) for s in range(4)]
    got = joblib.Parallel(n_jobs=2)(joblib.delayed(rope)(x, offset=s) for s, x in enumerate(xs))
    for s, (x, y) in enumerate(zip(xs, got)):
        assert _same(y, rope(x, offset=s))
