"""ALiBi slopes and biases vs Press's get_slopes and the PyTorch bias formula."""
import math

import numpy as np
import pytest
from _torch import torch

import posemb
from posemb import _core


def press_get_slopes(n):
    """Press et al.'s get_slopes (attention_with_linear_biases), transcribed."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + press_get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])


def mpt_gen_slopes(n_heads, alibi_bias_max=8):
    """MPT's gen_slopes in torch (MPT ``gen_slopes``: alibi_bias_max = 8 gives Press's)."""
    _n_heads = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, _n_heads + 1, dtype=torch.float64) * (alibi_bias_max / _n_heads)
    slopes = 1.0 / torch.pow(2, m)
    if _n_heads != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def torch_alibi(slopes, q, k, offset, symmetric, dtype):
    """-m_h * (i - j) or -m_h * |i - j| in torch, i = offset + arange(q)."""
    i = (offset + torch.arange(q, dtype=dtype))[:, None]
    j = torch.arange(k, dtype=dtype)[None, :]
    d = i - j
    if symmetric:
        d = d.abs()
    return -slopes.to(dtype)[:, None, None] * d


def test_slopes_match_press_for_1_to_256_heads():
    for n in range(1, 257):
        want = np.array(press_get_slopes(n))
        got = posemb.alibi_slopes(n)
        assert got.shape == (n,) and got.dtype == np.float64
        # Press's start * ratio**i accumulates ~i/2 ulp; ours is 2**e rounded once
        np.testing.assert_allclose(got, want, rtol=3e-14, atol=0)
        np.testing.assert_allclose(got, mpt_gen_slopes(n).numpy(), rtol=3e-14, atol=0)


def test_slopes_exact_and_tutorial_form():
    # 2**(-8h/H): exact powers of two for H = 1, 2, 4, 8
    for H in (1, 2, 4, 8):
        np.testing.assert_array_equal(posemb.alibi_slopes(H),
                                      [2.0 ** (-8 * h / H) for h in range(1, H + 1)])
    s = posemb.alibi_slopes(16, dtype=np.float32)
    assert s.dtype == np.float32
    np.testing.assert_array_equal(s, np.float32([1 / 2 ** (8 * h / 16) for h in range(1, 17)]))
    assert posemb.alibi_slopes(3, dtype=np.float16).dtype == np.float16


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("q,k,offset", [(16, 16, None), (1, 40, None), (5, 40, None),
                                        (40, 5, None), (7, 9, 3), (6, 6, -2), (0, 4, None),
                                        (4, 0, None)])
@pytest.mark.parametrize("heads", [1, 5, 12])
def test_bias_matches_torch_formula(symmetric, q, k, offset, heads):
    slopes = torch.tensor(press_get_slopes(heads), dtype=torch.float64)
    off = k - q if offset is None else offset
    want64 = torch_alibi(slopes, q, k, off, symmetric, torch.float64)
    got64 = posemb.alibi_bias(heads, q, k, symmetric=symmetric, query_offset=offset,
                              dtype=np.float64)
    np.testing.assert_allclose(got64, want64.numpy(), rtol=3e-14, atol=0)
    # with the slopes given, float64 then rounded once: equal to torch's float64
    # formula rounded to float32, bit for bit
    got32 = posemb.alibi_bias(slopes.numpy(), q, k, symmetric=symmetric, query_offset=offset)
    assert got32.dtype == np.float32 and got32.shape == (heads, q, k)
    np.testing.assert_array_equal(got32, want64.float().numpy())
    want32 = torch_alibi(slopes.float(), q, k, off, symmetric, torch.float32)
    np.testing.assert_allclose(got32, want32.numpy(), rtol=1e-6, atol=0)
    got16 = posemb.alibi_bias(slopes.numpy(), q, k, symmetric=symmetric, query_offset=offset,
                              dtype=np.float16)
    np.testing.assert_array_equal(got16, want64.half().numpy())


def test_causal_form_equals_press_bloom_under_softmax():
    # Press/BLOOM add m_h * j; with a causal mask, softmax gives the same result
    H, L = 8, 33
    slopes = torch.tensor(press_get_slopes(H), dtype=torch.float64)
    scores = torch.randn(H, L, L, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    bloom = slopes[:, None, None] * torch.arange(L, dtype=torch.float64)[None, None, :]
    ours = torch.from_numpy(posemb.alibi_bias(H, L, L, dtype=np.float64))
    p1 = torch.softmax((scores + bloom).masked_fill(~causal, -math.inf), -1)
    p2 = torch.softmax((scores + ours).masked_fill(~causal, -math.inf), -1)
    np.testing.assert_allclose(p1.numpy(), p2.numpy(), rtol=1e-12, atol=1e-15)


def test_bias_kv_cache_rows_are_the_last_rows():
    full = posemb.alibi_bias(4, 50, 50)
    np.testing.assert_array_equal(posemb.alibi_bias(4, 1, 50), full[:, -1:])
    np.testing.assert_array_equal(posemb.alibi_bias(4, 10, 50), full[:, -10:])
    assert np.all(np.diagonal(full, axis1=1, axis2=2) == 0)
    assert not np.signbit(full[full == 0]).any()          # +0, never -0, on the diagonal


@pytest.mark.parametrize("call,err,name", [
    (lambda: posemb.alibi_slopes(0), ValueError, "num_heads"),
    (lambda: posemb.alibi_slopes(2.0), TypeError, "num_heads"),
    (lambda: posemb.alibi_slopes(4, dtype=np.int32), TypeError, "dtype"),
    (lambda: posemb.alibi_bias(0, 3, 3), ValueError, "slopes_or_num_heads"),
    (lambda: posemb.alibi_bias(True, 3, 3), TypeError, "slopes_or_num_heads"),
    (lambda: posemb.alibi_bias(["a"], 3, 3), TypeError, "slopes_or_num_heads"),
    (lambda: posemb.alibi_bias([[0.5]], 3, 3), ValueError, "slopes_or_num_heads"),
    (lambda: posemb.alibi_bias([np.nan], 3, 3), ValueError, "slopes_or_num_heads"),
    (lambda: posemb.alibi_bias(2, -1, 3), ValueError, "query_length"),
    (lambda: posemb.alibi_bias(2, 3, 1.5), TypeError, "key_length"),
    (lambda: posemb.alibi_bias(2, 3, 2**53), ValueError, "key_length"),
    (lambda: posemb.alibi_bias(2, 3, 3, query_offset=2**53), ValueError, "query_offset"),
    (lambda: posemb.alibi_bias(2, 3, 3, query_offset=-2**53), ValueError, "query_offset"),
    (lambda: posemb.alibi_bias(2, 3, 3, query_offset=1.0), TypeError, "query_offset"),
    (lambda: posemb.alibi_bias(2, 3, 3, dtype=np.int64), TypeError, "dtype"),
])
def test_bad_arguments(call, err, name):
    with pytest.raises(err, match=name):
        call()


def test_core_function_checks_before_writing():
    s = np.ones(2)
    with pytest.raises(ValueError, match="out"):
        _core._alibi_bias(s, np.zeros((3, 2, 2)), 0, False)
    with pytest.raises(TypeError, match="slopes"):
        _core._alibi_bias(np.ones(2, np.float32), np.zeros((2, 2, 2)), 0, False)
    with pytest.raises(TypeError, match="out"):
        _core._alibi_bias(s, np.zeros((2, 2, 2), np.int32), 0, False)
    with pytest.raises(ValueError, match="out"):
        _core._alibi_bias(s, np.zeros((2, 2, 4))[:, :, ::2], 0, False)
    with pytest.raises(ValueError, match="query_offset"):
        _core._alibi_bias(s, np.zeros((2, 2, 2)), 2**60, False)
    buf = np.zeros(10)
    with pytest.raises(ValueError, match="share memory"):
        _core._alibi_bias(buf[:2], buf[:8].reshape(2, 2, 2), 0, False)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_alibi_out(dtype):
    want = posemb.alibi_bias(4, 5, 7, dtype=dtype)
    out = np.full((4, 5, 7), np.nan, dtype)
    assert posemb.alibi_bias(4, 5, 7, out=out) is out
    np.testing.assert_array_equal(out, want)
    with pytest.raises(ValueError, match="out"):
        posemb.alibi_bias(4, 5, 7, out=np.empty((4, 5, 6), dtype))
    with pytest.raises(ValueError, match="out"):
        posemb.alibi_bias(4, 5, 7, out=np.empty((4, 7, 5), dtype).transpose(0, 2, 1))
    ro = np.empty((4, 5, 7), dtype)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        posemb.alibi_bias(4, 5, 7, out=ro)
    with pytest.raises(TypeError, match="out"):
        posemb.alibi_bias(4, 5, 7, out=np.empty((4, 5, 7), np.int32))
    with pytest.raises(TypeError, match="out"):
        posemb.alibi_bias(4, 5, 7, out=[[0.0]])
