"""Masks vs PyTorch's tril forms, HF's sliding-window rule and PositionalEmbeddings.jl."""

import numpy as np
import pytest
from _torch import torch

import posemb
from posemb import _core


@pytest.mark.parametrize("q,k", [(1, 1), (5, 5), (3, 8), (8, 3), (0, 4), (4, 0), (1, 17)])
def test_causal_mask_matches_torch_tril(q, k):
    ones = torch.ones(q, k, dtype=torch.bool)
    lower_right = torch.tril(ones, diagonal=k - q)
    upper_left = torch.tril(ones)
    np.testing.assert_array_equal(posemb.causal_mask(q, k), lower_right.numpy())
    np.testing.assert_array_equal(posemb.causal_mask(q, k, query_offset=0), upper_left.numpy())
    assert posemb.causal_mask(q, k).dtype == np.bool_
    if q == k:
        np.testing.assert_array_equal(posemb.causal_mask(q), lower_right.numpy())


@pytest.mark.parametrize("q,k,window,offset", [(10, 10, 1, None), (10, 10, 3, None),
                                               (4, 12, 5, None), (12, 12, 100, None),
                                               (6, 9, 2, 0), (5, 5, 2, -2), (5, 5, 2, 30)])
def test_sliding_window_matches_hf_rule(q, k, window, offset):
    off = k - q if offset is None else offset
    i = (off + torch.arange(q))[:, None]
    j = torch.arange(k)[None, :]
    want = (j <= i) & (j > i - window)               # HF: i - W < j <= i
    got = posemb.causal_mask(q, k, window=window, query_offset=offset)
    np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_mask_matches_torch(side):
    lengths = torch.tensor([0, 1, 3, 7, 7])
    pos = torch.arange(7)[None, :]
    if side == "right":
        want = pos < lengths[:, None]
    else:
        want = pos >= (7 - lengths)[:, None]
    got = posemb.padding_mask(lengths.numpy(), 7, side=side)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want.numpy())
    assert posemb.padding_mask(np.array([], np.int64), 3).shape == (0, 3)
    np.testing.assert_array_equal(posemb.padding_mask(np.array([2], np.uint8), 2), [[True, True]])


def test_to_additive_in_torch_sdpa():
    mask = posemb.causal_mask(5, 7, window=3)
    add = posemb.to_additive(mask)
    assert add.dtype == np.float32
    np.testing.assert_array_equal(add, np.where(mask, 0.0, -np.inf))
    assert posemb.to_additive(mask, np.float64).dtype == np.float64
    assert posemb.to_additive(mask, dtype=np.float16).dtype == np.float16
    # the boolean and additive forms give the same attention in PyTorch
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5 if n == 0 else 7, 8, generator=g) for n in range(3))
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                         attn_mask=torch.from_numpy(mask))
    b = torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                         attn_mask=torch.from_numpy(add))
    torch.testing.assert_close(a, b)


def julia_triu_trues(L):
    """Julia's triu(trues(L, L)) as an (L, L, 1) column-major array, read in row-major order."""
    M = np.triu(np.ones((L, L), dtype=bool))[:, :, None]       # M[r, c, 0] = r <= c
    return np.frombuffer(np.asfortranarray(M).tobytes(order="F"), dtype=bool).reshape(1, L, L)


def test_create_causal_mask_is_julia_memory():
    for L in (1, 3, 6):
        got = posemb.create_causal_mask(L)
        assert got.shape == (1, L, L) and got.dtype == np.bool_
        np.testing.assert_array_equal(got, julia_triu_trues(L))
        q, k = np.indices((L, L))
        np.testing.assert_array_equal(got[0], k <= q)             # True = may attend
        np.testing.assert_array_equal(got[0], torch.tril(torch.ones(L, L, dtype=torch.bool)))


def test_create_padding_mask_is_julia_memory():
    lengths, max_len = [2, 3, 0, 4], 4
    got = posemb.create_padding_mask(lengths, max_len)
    assert got.shape == (4, 4, 1)
    # Julia: (1, max_len, B) with [1, p, b] = p > lengths[b] (1-based), true at padding
    jl = np.zeros((1, max_len, 4), dtype=bool, order="F")
    for b, n in enumerate(lengths):
        for p in range(max_len):
            jl[0, p, b] = p >= n
    mem = np.frombuffer(jl.tobytes(order="F"), dtype=bool).reshape(4, max_len, 1)
    np.testing.assert_array_equal(got, mem)
    np.testing.assert_array_equal(got[..., 0], ~posemb.padding_mask(lengths, max_len))


def test_combined_masks_in_torch_sdpa():
    # causal & padding as one boolean mask, against PyTorch
    B, H, L, E = 2, 3, 6, 4
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, H, L, E, generator=g) for _ in range(3))
    keep = posemb.causal_mask(L)[None, None] & posemb.padding_mask([4, 6], L)[:, None, None, :]
    ours = posemb.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), mask=keep)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                           attn_mask=torch.from_numpy(keep))
    np.testing.assert_allclose(ours, ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call,err,name", [
    (lambda: posemb.causal_mask(-1), ValueError, "query_length"),
    (lambda: posemb.causal_mask(2.0), TypeError, "query_length"),
    (lambda: posemb.causal_mask(2, -1), ValueError, "key_length"),
    (lambda: posemb.causal_mask(2, 3, window=0), ValueError, "window"),
    (lambda: posemb.causal_mask(2, 3, window=1.5), TypeError, "window"),
    (lambda: posemb.causal_mask(2, 3, query_offset=2**62), ValueError, "query_offset"),
    (lambda: posemb.causal_mask(2, 3, query_offset=-2**62), ValueError, "query_offset"),
    (lambda: posemb.padding_mask([1, 5], 4), ValueError, "lengths"),
    (lambda: posemb.padding_mask([-1], 4), ValueError, "lengths"),
    (lambda: posemb.padding_mask([1.0], 4), TypeError, "lengths"),
    (lambda: posemb.padding_mask([[1]], 4), ValueError, "lengths"),
    (lambda: posemb.padding_mask([1], -4), ValueError, "max_length"),
    (lambda: posemb.padding_mask([1], 4, side="top"), ValueError, "side"),
    (lambda: posemb.to_additive(np.ones(3)), TypeError, "mask"),
    (lambda: posemb.to_additive(np.ones(3, bool), dtype=np.int32), TypeError, "dtype"),
    (lambda: posemb.create_causal_mask(-2), ValueError, "seq_len"),
    (lambda: posemb.create_padding_mask([5], 4), ValueError, "lengths"),
    (lambda: posemb.create_padding_mask([1], -1), ValueError, "max_len"),
])
def test_bad_arguments(call, err, name):
    with pytest.raises(err, match=name):
        call()


def test_core_functions_check_before_writing():
    with pytest.raises(TypeError, match="out"):
        _core._causal_mask(np.zeros((2, 2), np.uint8), 0, -1)
    with pytest.raises(ValueError, match="out"):
        _core._causal_mask(np.zeros((2, 4), bool)[:, ::2], 0, -1)
    ro = np.zeros((2, 2), bool)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        _core._causal_mask(ro, 0, -1)
    with pytest.raises(ValueError, match="lengths"):
        _core._padding_mask(np.array([5]), np.zeros((1, 4), bool), False)
    with pytest.raises(ValueError, match="out"):
        _core._padding_mask(np.array([1, 2]), np.zeros((1, 4), bool), False)
    with pytest.raises(TypeError, match="lengths"):
        _core._padding_mask(np.array([1], np.int32), np.zeros((1, 4), bool), False)


def _attend_oracle(q, k, lengths, causal, window, offset, side):
    """Element by element: may query i (at position offset + i) attend key j?"""
    off = k - q if offset is None else offset
    out = np.zeros((len(lengths), 1, q, k), dtype=bool)
    for b, n in enumerate(lengths):
        real = range(n) if side == "right" else range(k - n, k)
        for i in range(q):
            p = off + i
            for j in range(k):
                ok = j in real
                if causal:
                    ok = ok and j <= p and (window is None or j > p - window)
                elif window is not None:
                    ok = ok and abs(j - p) < window
                out[b, 0, i, j] = ok
    return out


@pytest.mark.parametrize("q,k,lengths,causal,window,offset,side", [
    (5, 5, [3, 4], True, None, None, "right"),
    (5, 5, [3, 4], True, None, None, "left"),
    (3, 7, [7, 2, 0], True, 3, None, "right"),
    (4, 4, [4, 1], False, None, None, "right"),
    (6, 6, [6, 5], False, 2, None, "left"),
    (2, 6, [6], True, None, 1, "right"),
])
def test_attention_mask_combines_causal_window_and_padding(q, k, lengths, causal, window,
                                                           offset, side):
    got = posemb.attention_mask(q, k, lengths=lengths, causal=causal, window=window,
                                query_offset=offset, side=side)
    np.testing.assert_array_equal(got, _attend_oracle(q, k, lengths, causal, window, offset, side))
    if causal:
        # without lengths: the causal part alone
        np.testing.assert_array_equal(
            posemb.attention_mask(q, k, window=window, query_offset=offset),
            posemb.causal_mask(q, k, window=window, query_offset=offset))


def test_seed_example_causal_and_padding_through_one_way():
    # PositionalEmbeddings.jl: causal = create_causal_mask(5); padding =
    # create_padding_mask([3, 4], 5); "combined = causal .| padding" -- its
    # two masks use opposite meanings of True, so the OR lets every query see
    # padding.  Converting the padding mask over the key axis and AND-ing
    # gives the mask the example describes.
    causal = posemb.create_causal_mask(5)
    padding = posemb.create_padding_mask([3, 4], 5)
    keys = posemb.padding_to_attention_mask(padding, true_means="padding")
    combined = causal & keys
    want = _attend_oracle(5, 5, [3, 4], True, None, 0, "right")
    np.testing.assert_array_equal(combined, want)
    np.testing.assert_array_equal(posemb.attention_mask(5, lengths=[3, 4]), want)
    # the seed's literal OR is not that mask (it attends to padded keys)
    assert ((causal | padding[:, :, 0][:, None, :]) != want[:, 0]).any()
    # in attention, sequence 0 then ignores its padded keys 3 and 4 entirely
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 1, 5, 4))
    out = posemb.scaled_dot_product_attention(x, x, x, mask=combined)
    kv = x[0, :, :3]
    ref = posemb.scaled_dot_product_attention(
        x[0], kv, kv, mask=posemb.causal_mask(5, 3, query_offset=0))
    np.testing.assert_allclose(out[0], ref, rtol=1e-12, atol=1e-12)


def test_padding_to_attention_mask_meanings_and_errors():
    keep = posemb.padding_mask([1, 3], 3)
    np.testing.assert_array_equal(posemb.padding_to_attention_mask(keep)[:, 0, 0], keep)
    np.testing.assert_array_equal(
        posemb.padding_to_attention_mask(~keep, true_means="padding")[:, 0, 0], keep)
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        posemb.padding_to_attention_mask(keep.astype(int))
    with pytest.raises(ValueError, match="true_means must be"):
        posemb.padding_to_attention_mask(keep, true_means="yes")
    with pytest.raises(ValueError, match=r"mask must have shape \(batch, key_length\)"):
        posemb.padding_to_attention_mask(keep[0])
    with pytest.raises(ValueError, match="lengths must be in"):
        posemb.attention_mask(3, lengths=[4])
    with pytest.raises(TypeError, match="causal must be a bool"):
        posemb.attention_mask(3, causal="yes")
