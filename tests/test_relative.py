"""T5 relative position bias and Shaw relative embeddings vs PyTorch references.

The references are written here from the sources: a line-for-line torch
transcription of HF's ``T5Attention._relative_position_bucket`` and
``compute_bias``, and tensor2tensor's clipped relative positions.
"""

import numpy as np
import pytest
from _torch import torch
from _hf import hf_bucket

import posemb
from posemb import _core


# ---------------------------------------------------------------- references

def hf_compute_bias(weight, query_length, key_length, bidirectional=True,
                    num_buckets=32, max_distance=128, query_offset=0):
    """HF's compute_bias (cache_position = query_offset + arange), shape (H, q, k)."""
    context_position = (query_offset + torch.arange(query_length, dtype=torch.long))[:, None]
    memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
    relative_position = memory_position - context_position
    bucket = hf_bucket(relative_position, bidirectional, num_buckets, max_distance)
    values = torch.nn.functional.embedding(bucket, weight)     # (q, k, H)
    return values.permute([2, 0, 1])


def shaw_index(query_length, key_length, K):
    """tensor2tensor's clipped relative positions, queries at the last positions."""
    context_position = torch.arange(key_length - query_length, key_length)[:, None]
    memory_position = torch.arange(key_length)[None, :]
    return torch.clamp(memory_position - context_position, -K, K) + K


SWEEP = np.arange(-100000, 100001, dtype=np.int64)

T5_CONFIGS = [
    (True, 32, 128),     # T5 / Flan-T5 defaults
    (False, 32, 128),    # decoder-only use
    (True, 32, 64),
    (False, 64, 256),
    (True, 128, 512),
    (True, 320, 800),    # LongT5-like sizes
    (True, 33, 100),     # odd bucket count
    (False, 7, 13),
    (True, 4, 3),        # one exact bucket per direction
    (False, 2, 2),
    (True, 1000, 100000),
]


# ---------------------------------------------------------------- T5 buckets

@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", T5_CONFIGS)
def test_t5_bucket_sweep_matches_hf(bidirectional, num_buckets, max_distance):
    # every value in [-100000, 100000], one vectorised call each side
    want = hf_bucket(torch.from_numpy(SWEEP), bidirectional, num_buckets, max_distance).numpy()
    got = posemb.t5_relative_position_bucket(SWEEP, bidirectional=bidirectional,
                                             num_buckets=num_buckets, max_distance=max_distance)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_t5_bucket_float32_log_boundaries():
    # At the defaults the quotient log(rp/8)/log(16)*8 is exactly 2, 4, 6 at
    # rp = 16, 32, 64: HF's float32 arithmetic puts them in the upper bucket.
    rp = np.array([15, 16, 31, 32, 63, 64, -16, -32, -64])
    got = posemb.t5_relative_position_bucket(rp)
    np.testing.assert_array_equal(got, hf_bucket(torch.from_numpy(rp)).numpy())
    np.testing.assert_array_equal(got, [25, 26, 27, 28, 29, 30, 10, 12, 14])


def test_t5_bucket_shapes_and_dtypes():
    rp = np.arange(-300, 300, dtype=np.int32).reshape(4, 10, 15)
    got = posemb.t5_relative_position_bucket(rp)
    assert got.shape == rp.shape and got.dtype == np.int64
    np.testing.assert_array_equal(got, hf_bucket(torch.from_numpy(rp.astype(np.int64))).numpy())
    assert posemb.t5_relative_position_bucket(5).shape == ()
    assert posemb.t5_relative_position_bucket(np.array([], np.int64)).shape == (0,)
    strided = np.arange(-50, 50)[::-3]
    np.testing.assert_array_equal(posemb.t5_relative_position_bucket(strided),
                                  hf_bucket(torch.from_numpy(strided.copy())).numpy())
    u = np.array([0, 3, 200], dtype=np.uint16)
    np.testing.assert_array_equal(posemb.t5_relative_position_bucket(u), [0, 19, 31])
    # input untouched
    x = np.array([-5, 5])
    posemb.t5_relative_position_bucket(x)
    np.testing.assert_array_equal(x, [-5, 5])


def test_t5_bucket_int64_extremes_are_far_buckets():
    ext = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max])
    np.testing.assert_array_equal(posemb.t5_relative_position_bucket(ext), [15, 31])
    np.testing.assert_array_equal(
        posemb.t5_relative_position_bucket(ext, bidirectional=False), [31, 0])


# ---------------------------------------------------------------- T5 bias

@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("bidirectional,num_buckets,max_distance",
                         [(True, 32, 128), (False, 32, 128), (True, 64, 40)])
@pytest.mark.parametrize("q,k,off", [(37, 53, 0), (53, 37, 0), (1, 300, 299), (7, 200, 150),
                                     (5, 5, -3), (1, 1, 0)])
def test_t5_bias_matches_hf_compute_bias(dtype, bidirectional, num_buckets, max_distance,
                                         q, k, off):
    weight = torch.randn(num_buckets, 6, generator=torch.Generator().manual_seed(q * k),
                         dtype=torch.float64).to(dtype)
    want = hf_compute_bias(weight, q, k, bidirectional, num_buckets, max_distance, off)
    got = posemb.t5_relative_bias(weight.numpy(), q, k, bidirectional=bidirectional,
                                  num_buckets=num_buckets, max_distance=max_distance,
                                  query_offset=off)
    assert got.dtype == weight.numpy().dtype and got.shape == (6, q, k)
    np.testing.assert_array_equal(got, want.numpy())


def test_t5_bias_empty_and_layouts(rng):
    table = rng.standard_normal((32, 4)).astype(np.float32)
    assert posemb.t5_relative_bias(table, 0, 5).shape == (4, 0, 5)
    assert posemb.t5_relative_bias(table, 5, 0).shape == (4, 5, 0)
    assert posemb.t5_relative_bias(table[:, :0], 3, 3).shape == (0, 3, 3)
    want = posemb.t5_relative_bias(table, 9, 11)
    np.testing.assert_array_equal(posemb.t5_relative_bias(np.asfortranarray(table), 9, 11), want)
    np.testing.assert_array_equal(                     # byte-swapped data: a native result
        posemb.t5_relative_bias(table.astype(table.dtype.newbyteorder()), 9, 11), want)
    np.testing.assert_array_equal(posemb.t5_relative_bias(table.tolist(), 9, 11),
                                  want.astype(np.float64))
    ro = table.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(posemb.t5_relative_bias(ro, 9, 11), want)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_t5_bias_backward_matches_autograd(bidirectional, dtype):
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(32, 5, generator=gen, dtype=dtype, requires_grad=True)
    q, k, off = 40, 70, 20
    grad = torch.randn(2, 5, q, k, generator=gen, dtype=dtype)     # batch of 2
    bias = hf_compute_bias(weight, q, k, bidirectional, 32, 128, off)
    (bias[None] * grad).sum().backward()
    got = posemb.t5_relative_bias_backward(grad.numpy(), num_buckets=32, query_length=q,
                                           key_length=k, bidirectional=bidirectional,
                                           query_offset=off)
    assert got.dtype == grad.numpy().dtype
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    np.testing.assert_allclose(got, weight.grad.numpy(), rtol=tol, atol=tol)
    got3 = posemb.t5_relative_bias_backward(grad[0].numpy(), num_buckets=32, query_length=q,
                                            key_length=k, bidirectional=bidirectional,
                                            query_offset=off)
    weight.grad = None
    (hf_compute_bias(weight, q, k, bidirectional, 32, 128, off) * grad[0]).sum().backward()
    np.testing.assert_allclose(got3, weight.grad.numpy(), rtol=tol, atol=tol)


def test_t5_bias_backward_float16_and_empty():
    g = np.ones((3, 4, 5), np.float16)
    out = posemb.t5_relative_bias_backward(g, num_buckets=32, query_length=4, key_length=5)
    assert out.dtype == np.float16 and float(out.sum()) == 60.0
    z = posemb.t5_relative_bias_backward(np.ones((3, 0, 5)), num_buckets=8, query_length=0,
                                         key_length=5)
    np.testing.assert_array_equal(z, np.zeros((8, 3)))


def test_float16_gradients_widen_exactly():
    """float16 gradients are widened in the kernels (8 values at a time by F16C
    at the AVX2 level, one at a time below it; rows not a multiple of 8): the
    tables equal the float64 sums of the same values rounded to float32, then
    float16, as torch's float64 autograd rounded."""
    rng = np.random.default_rng(11)
    g = (rng.standard_normal((3, 9, 21)) * 10).astype(np.float16)
    g.view(np.uint16)[0, 0, :3] = [0x0001, 0x83ff, 0x5bff]      # subnormals, 255.9
    weight = torch.zeros(32, 3, dtype=torch.float64, requires_grad=True)
    (hf_compute_bias(weight, 9, 21, True, 32, 128, 0) *
     torch.from_numpy(g.astype(np.float64))).sum().backward()
    got = posemb.t5_relative_bias_backward(g, num_buckets=32, query_length=9, key_length=21)
    np.testing.assert_array_equal(got, weight.grad.numpy().astype(np.float32).astype(np.float16))
    q, k, K = 9, 13, 3
    g = (rng.standard_normal((q, k, 11)) * 10).astype(np.float16)
    g.view(np.uint16)[0, 0, :3] = [0x0001, 0x83ff, 0x5bff]
    t = torch.zeros(2 * K + 1, 11, dtype=torch.float64, requires_grad=True)
    (t[shaw_index(q, k, K)] * torch.from_numpy(g.astype(np.float64))).sum().backward()
    got = posemb.relative_embeddings_backward(g, K, q, k)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, t.grad.numpy().astype(np.float32).astype(np.float16))


# ---------------------------------------------------------------- Shaw

@pytest.mark.parametrize("q,k,K", [(6, 6, 2), (6, 6, 10), (1, 9, 3), (4, 10, 0),
                                   (10, 4, 2), (0, 3, 1), (3, 0, 1), (17, 29, 5)])
def test_relative_position_index_matches_t2t(q, k, K):
    got = posemb.relative_position_index(q, k, K)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, shaw_index(q, k, K).numpy())


def test_relative_embeddings_tutorial_module():
    # the MLM tutorial's RelativePositionalEncoding (no clipping) equals ours once K >= L - 1
    L, K, d = 7, 6, 8
    torch.manual_seed(0)
    table = torch.randn(2 * K + 1, d)
    context_position = torch.arange(L, dtype=torch.long)[:, None]
    memory_position = torch.arange(L, dtype=torch.long)[None, :]
    want = table[memory_position - context_position + K]
    np.testing.assert_array_equal(posemb.relative_embeddings(table.numpy(), L, L), want.numpy())


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("q,k,K", [(6, 6, 2), (1, 9, 3), (10, 4, 2), (12, 12, 0), (5, 13, 20)])
def test_relative_embeddings_and_backward(dtype, q, k, K):
    gen = torch.Generator().manual_seed(q + k + K)
    table = torch.randn(2 * K + 1, 5, generator=gen, dtype=torch.float64).to(dtype)
    idx = shaw_index(q, k, K)
    got = posemb.relative_embeddings(table.numpy(), q, k)
    np.testing.assert_array_equal(got, table[idx].numpy())
    if dtype == torch.float16:
        return
    t = table.clone().requires_grad_(True)
    grad = torch.randn(q, k, 5, generator=gen, dtype=dtype)
    (t[idx] * grad).sum().backward()
    gt = posemb.relative_embeddings_backward(grad.numpy(), K, q, k)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(gt, t.grad.numpy(), rtol=tol, atol=tol)


def test_relative_embeddings_backward_float16():
    g = posemb.relative_embeddings_backward(np.ones((3, 3, 2), np.float16), 1, 3, 3)
    assert g.dtype == np.float16
    np.testing.assert_array_equal(g, np.full((3, 2), 3.0))


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call,err,name", [
    (lambda: posemb.t5_relative_position_bucket([1.5]), TypeError, "relative_position"),
    (lambda: posemb.t5_relative_position_bucket([True]), TypeError, "relative_position"),
    (lambda: posemb.t5_relative_position_bucket(np.array([2**64 - 1], np.uint64)),
     ValueError, "relative_position"),
    (lambda: posemb.t5_relative_position_bucket([1], num_buckets=3), ValueError, "num_buckets"),
    (lambda: posemb.t5_relative_position_bucket([1], num_buckets=1, bidirectional=False),
     ValueError, "num_buckets"),
    (lambda: posemb.t5_relative_position_bucket([1], num_buckets=2**21), ValueError,
     "num_buckets"),
    (lambda: posemb.t5_relative_position_bucket([1], num_buckets=32.0), TypeError,
     "num_buckets"),
    (lambda: posemb.t5_relative_position_bucket([1], max_distance=8), ValueError,
     "max_distance"),
    (lambda: posemb.t5_relative_position_bucket([1], max_distance=2**54), ValueError,
     "max_distance"),
    (lambda: posemb.t5_relative_bias(np.zeros((31, 2)), 3, 3), ValueError, "table"),
    (lambda: posemb.t5_relative_bias(np.zeros(32), 3, 3), ValueError, "table"),
    (lambda: posemb.t5_relative_bias(np.zeros((32, 2), np.int32), 3, 3), TypeError, "table"),
    (lambda: posemb.t5_relative_bias(np.zeros((32, 2)), -1, 3), ValueError, "query_length"),
    (lambda: posemb.t5_relative_bias(np.zeros((32, 2)), 3, 2.5), TypeError, "key_length"),
    (lambda: posemb.t5_relative_bias(np.zeros((32, 2)), 3, 3, query_offset=2**62),
     ValueError, "query_offset"),
    (lambda: posemb.t5_relative_bias(np.zeros((32, 2)), 3, 3, query_offset=-2**62),
     ValueError, "query_offset"),
    (lambda: posemb.t5_relative_bias_backward(np.zeros((2, 3, 4)), num_buckets=32,
                                              query_length=3, key_length=5),
     ValueError, "grad_bias"),
    (lambda: posemb.t5_relative_bias_backward(np.zeros((3, 4)), num_buckets=32,
                                              query_length=3, key_length=4),
     ValueError, "grad_bias"),
    (lambda: posemb.t5_relative_bias_backward(np.zeros((2, 3, 4), int), num_buckets=32,
                                              query_length=3, key_length=4),
     TypeError, "grad_bias"),
    (lambda: posemb.t5_relative_bias_backward(np.zeros((2, 3, 4)), num_buckets=2,
                                              query_length=3, key_length=4),
     ValueError, "num_buckets"),
    (lambda: posemb.relative_position_index(3, 3, -1), ValueError, "max_relative_position"),
    (lambda: posemb.relative_position_index(-3, 3, 1), ValueError, "query_length"),
    (lambda: posemb.relative_embeddings(np.zeros((4, 2)), 3, 3), ValueError, "table"),
    (lambda: posemb.relative_embeddings(np.zeros(5), 3, 3), ValueError, "table"),
    (lambda: posemb.relative_embeddings(np.zeros((5, 2), int), 3, 3), TypeError, "table"),
    (lambda: posemb.relative_embeddings(np.zeros((5, 2)), 3, -3), ValueError, "key_length"),
    (lambda: posemb.relative_embeddings_backward(np.zeros((3, 4, 2)), 1, 3, 3),
     ValueError, "grad"),
    (lambda: posemb.relative_embeddings_backward(np.zeros((3, 3, 2)), -1, 3, 3),
     ValueError, "max_relative_position"),
    (lambda: posemb.relative_embeddings_backward(np.zeros((3, 3, 2), int), 1, 3, 3),
     TypeError, "grad"),
])
def test_bad_arguments(call, err, name):
    with pytest.raises(err, match=name):
        call()


def test_core_functions_check_before_writing():
    """The private C functions refuse bad buffers instead of writing out of bounds."""
    table = np.zeros((32, 2), np.float32)
    with pytest.raises(TypeError, match="out"):
        _core._t5_bias(table, np.zeros((2, 3, 3)), True, 128, 0)          # dtype mismatch
    with pytest.raises(ValueError, match="out"):
        _core._t5_bias(table, np.zeros((3, 3, 3), np.float32), True, 128, 0)
    with pytest.raises(ValueError, match="out"):
        _core._t5_bias(table, np.zeros((2, 3, 6), np.float32)[:, :, ::2], True, 128, 0)
    ro = np.zeros((2, 3, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        _core._t5_bias(table, ro, True, 128, 0)
    buf = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="share memory"):
        _core._t5_bias(buf.reshape(32, 2), buf[:18].reshape(2, 3, 3), True, 128, 0)
    with pytest.raises(ValueError, match="num_buckets"):
        _core._t5_bias(np.zeros((3, 2), np.float32), np.zeros((2, 3, 3), np.float32),
                       True, 128, 0)
    with pytest.raises(ValueError, match="max_distance"):
        _core._t5_bias(table, np.zeros((2, 3, 3), np.float32), True, 4, 0)
    with pytest.raises(ValueError, match="query_offset"):
        _core._t5_bias(table, np.zeros((2, 3, 3), np.float32), True, 128, 2**62)
    with pytest.raises(ValueError, match="out"):
        _core._t5_bucket(np.zeros(4, np.int64), np.zeros(3, np.int64), True, 32, 128)
    with pytest.raises(TypeError, match="relative_position"):
        _core._t5_bucket(np.zeros(4, np.int32), np.zeros(4, np.int64), True, 32, 128)
    with pytest.raises(ValueError, match="out"):
        _core._t5_bias_backward(np.zeros((2, 3, 3)), np.zeros((32, 3)), True, 128, 0)
    with pytest.raises(ValueError, match="table"):
        _core._shaw_embed(np.zeros((4, 2)), np.zeros((3, 3, 2)))
    with pytest.raises(ValueError, match="out"):
        _core._shaw_embed(np.zeros((5, 2)), np.zeros((3, 3, 3)))
    with pytest.raises(ValueError, match="out"):
        _core._shaw_embed_backward(np.zeros((3, 3, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="max_relative_position"):
        _core._shaw_index(np.zeros((3, 3), np.int64), -1)
    with pytest.raises(TypeError, match="out"):
        _core._shaw_index(np.zeros((3, 3), np.int32), 1)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_t5_bias_out(dtype):
    table = np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32)
    want = posemb.t5_relative_bias(table.astype(dtype), 6, 9, query_offset=2)
    out = np.full((3, 6, 9), np.nan, dtype)
    assert posemb.t5_relative_bias(table, 6, 9, query_offset=2, out=out) is out
    np.testing.assert_array_equal(out, want)
    with pytest.raises(ValueError, match="out"):
        posemb.t5_relative_bias(table, 6, 9, out=np.empty((3, 6, 8), dtype))
    with pytest.raises(TypeError, match="out"):
        posemb.t5_relative_bias(table, 6, 9, out=np.empty((3, 6, 9), np.int64))
    t = np.zeros((32 * 3 + 3 * 6 * 9,), np.float32)
    with pytest.raises(ValueError, match="out"):   # out overlapping the table
        posemb.t5_relative_bias(t[:96].reshape(32, 3), 6, 9, out=t[:162].reshape(3, 6, 9))
