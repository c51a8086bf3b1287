"""RoPE in the layouts users hold and for every head size.

- ``seq_axis=``: Meta's / flash-attn's ``(batch, seq, heads, head_dim)`` is
  rotated along the sequence axis, equal to HF's ``(batch, heads, seq,
  head_dim)`` result transposed, for the functions and the ``RoPE`` module.
- Odd and tiny head sizes, as TorchLean's total RoPE spec defines them: the
  pairs rotate and the unpaired last feature passes through unchanged.

The oracle is written here from the RoFormer definition in float64 (angles
``p * base ** (-2i / d)``), independent of posemb's tables.
"""
import numpy as np
import pytest

import posemb


def oracle(x, positions, d_rot, base=10000.0, interleaved=False):
    """RoPE of x (..., seq, d) at positions (seq,), float64, pair by pair."""
    x = np.asarray(x, dtype=np.float64)
    y = x.copy()
    half = d_rot // 2
    for i in range(half):
        theta = np.asarray(positions, dtype=np.float64) * base ** (-2.0 * i / d_rot)
        c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        xa, xb = x[..., a], x[..., b]
        y[..., a] = xa * c[:, 0] - xb * s[:, 0]
        y[..., b] = xb * c[:, 0] + xa * s[:, 0]
    return y


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_seq_axis_for_batch_seq_heads_dim(rng, interleaved):
    b, s, h, d = 2, 7, 3, 8
    x_bshd = rng.standard_normal((b, s, h, d))
    cos, sin = posemb.rope_cos_sin(np.arange(s), d, interleaved=interleaved, dtype=np.float64)
    got = posemb.apply_rope(x_bshd, cos, sin, interleaved=interleaved, seq_axis=1)
    x_bhsd = x_bshd.transpose(0, 2, 1, 3)
    want = oracle(x_bhsd, np.arange(s), d, interleaved=interleaved).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the same bits as the HF-layout call, transposed
    same = posemb.apply_rope(x_bhsd, cos, sin, interleaved=interleaved).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(got, same)
    back = posemb.apply_rope_backward(got, cos, sin, interleaved=interleaved, seq_axis=1)
    np.testing.assert_allclose(back, x_bshd, rtol=1e-12, atol=1e-12)
    # seq_axis=-2 is the default
    np.testing.assert_array_equal(
        posemb.apply_rope(x_bhsd, cos, sin, interleaved=interleaved, seq_axis=-2),
        posemb.apply_rope(x_bhsd, cos, sin, interleaved=interleaved))


def test_rope_module_seq_axis_offsets_positions_out(rng):
    b, s, h, d = 3, 5, 4, 16
    rope = posemb.RoPE(d, 64, dtype=np.float64)
    x = rng.standard_normal((b, s, h, d))
    xt = x.transpose(0, 2, 1, 3)                      # the HF layout, (b, h, s, d)
    for kwargs in ({}, {"offset": 9}, {"offset": np.array([0, 20, 3])}):
        got = rope(x, seq_axis=1, **kwargs)
        assert got.shape == x.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, rope(xt, **kwargs).transpose(0, 2, 1, 3))
    offs = np.array([0, 20, 3])
    for bi in range(b):
        want = oracle(xt[bi], offs[bi] + np.arange(s), d)
        np.testing.assert_allclose(rope(x, seq_axis=1, offset=offs)[bi].transpose(1, 0, 2),
                                   want, rtol=1e-12, atol=1e-12)
    pos = rng.integers(0, 60, size=(b, s, 1))          # per token, shared by the heads
    got = rope(x, pos, seq_axis=1)
    for bi in range(b):
        want = oracle(xt[bi], pos[bi, :, 0], d)
        np.testing.assert_allclose(got[bi].transpose(1, 0, 2), want, rtol=1e-12, atol=1e-12)
    out = np.empty_like(x)
    assert rope(x, seq_axis=1, offset=2, out=out) is out
    np.testing.assert_array_equal(out, rope(xt, offset=2).transpose(0, 2, 1, 3))
    np.testing.assert_allclose(rope.backward(out, seq_axis=1, offset=2), x,
                               rtol=1e-12, atol=1e-12)
    q = x.copy()
    k = rng.standard_normal((b, s, 2, d))               # grouped-query: 2 kv heads
    qr, kr = rope.apply_qk(q, k, seq_axis=1, offset=offs)
    np.testing.assert_array_equal(qr, rope(x, seq_axis=1, offset=offs))
    np.testing.assert_array_equal(kr, rope(k, seq_axis=1, offset=offs))
    qi, ki = rope.apply_qk(q, k, seq_axis=1, offset=offs, inplace=True)
    assert qi is q and ki is k
    np.testing.assert_array_equal(q, qr)
    np.testing.assert_array_equal(k, kr)


def test_seq_axis_errors():
    rope = posemb.RoPE(8, 16)
    x = np.zeros((2, 3, 4, 8), np.float32)
    with pytest.raises(ValueError, match="seq_axis=-1 is the feature axis"):
        rope(x, seq_axis=-1)
    with pytest.raises(ValueError, match="seq_axis=4 is out of range"):
        rope(x, seq_axis=4)
    with pytest.raises(TypeError, match="seq_axis"):
        rope(x, seq_axis="seq")
    cos, sin = posemb.rope_cos_sin(np.arange(3), 8)
    with pytest.raises(ValueError, match="seq_axis=3 is the feature axis"):
        posemb.apply_rope(x, cos, sin, seq_axis=3)
    with pytest.raises(ValueError, match=r"positions of shape \(5,\) must broadcast"):
        rope(x, np.arange(5), seq_axis=1)


@pytest.mark.parametrize("d", [0, 1, 2, 3, 5, 9, 64, 65])
@pytest.mark.parametrize("interleaved", [False, True])
def test_every_head_size_pairs_rotate_last_odd_feature_passes(rng, d, interleaved):
    s = 6
    x = rng.standard_normal((2, s, d))
    cos, sin = posemb.rope_cos_sin(np.arange(s), d, interleaved=interleaved, dtype=np.float64)
    assert cos.shape == (s, d)
    if d % 2:
        np.testing.assert_array_equal(cos[:, -1], 1.0)
        np.testing.assert_array_equal(sin[:, -1], 0.0)
    want = oracle(x, np.arange(s), d, interleaved=interleaved)
    got = posemb.apply_rope(x, cos, sin, interleaved=interleaved)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if d % 2:
        np.testing.assert_array_equal(got[..., -1], x[..., -1])
    rope = posemb.RoPE(d, s, interleaved=interleaved, dtype=np.float64)
    np.testing.assert_allclose(rope(x), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rope.backward(rope(x)), x, rtol=1e-12, atol=1e-12)
    if interleaved:
        # TorchLean's spec: rope(x) = x * cos + rotatePairs(x) * sin
        spec = x * cos + posemb.rotate_pairs(x) * sin
        np.testing.assert_allclose(got, spec, rtol=1e-12, atol=1e-12)


def test_rotate_pairs():
    np.testing.assert_array_equal(posemb.rotate_pairs(np.array([1.0, 2.0, 3.0, 4.0])),
                                  [-2.0, 1.0, -4.0, 3.0])
    np.testing.assert_array_equal(posemb.rotate_pairs(np.array([[7.0], [8.0]])), [[7.0], [8.0]])
    assert posemb.rotate_pairs(np.zeros((3, 0), np.float32)).shape == (3, 0)
    with pytest.raises(TypeError, match="x must be a float16, float32 or float64"):
        posemb.rotate_pairs(np.arange(4))


def test_torch_odd_head_size_matches_numpy():
    torch = pytest.importorskip("torch")
    import posemb.torch as pt

    rotary = pt.RotaryEmbedding(dim=7)
    x = torch.randn(1, 2, 3, 7, dtype=torch.float64, requires_grad=True)
    cos, sin = rotary(x, torch.arange(3)[None])
    assert cos.shape == (1, 3, 7)
    y = pt.apply_rope(x, cos, sin)
    want = oracle(x.detach().numpy()[0], np.arange(3), 7)
    np.testing.assert_allclose(y.detach().numpy()[0], want, rtol=1e-6, atol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad[..., -1].numpy(), 1.0)   # the last feature passes


def test_absolute_pe_square_layout_is_not_guessed(rng):
    # (batch, seq, features) and Julia's (batch, features, seq) with seq ==
    # embedding_size look alike: the default refuses instead of adding the
    # table transposed
    pe = posemb.AbsolutePE(16, 32, dtype=np.float64)
    x = rng.standard_normal((2, 16, 16))
    with pytest.raises(ValueError, match="pass seq_axis= and feature_axis="):
        pe(x)
    table = posemb.sinusoidal(16, 16, dtype=np.float64)
    np.testing.assert_array_equal(pe(x, seq_axis=-2, feature_axis=-1), x + table)
    np.testing.assert_array_equal(pe(x, seq_axis=-1, feature_axis=-2), x + table.T)
    # the Julia layout of another length says which keywords to pass
    with pytest.raises(ValueError, match="seq_axis=-1, feature_axis=-2"):
        pe(rng.standard_normal((2, 16, 5)))
    np.testing.assert_array_equal(pe(np.zeros((2, 5, 16))), np.broadcast_to(table[:5], (2, 5, 16)))


def test_seed_tutorial_rotary_layout_batch_seq_heads_dim(rng):
    # The PyTorch tutorial's RotaryPositionalEncoding rotates x of shape
    # (batch, seq, heads, dim) with tables viewed as (1, seq, 1, dim) and
    # x * cos + rotate_half(x) * sin.  (Its buffers are dim / 2 wide; the
    # formula needs them duplicated to full width, as HF does.)
    torch = pytest.importorskip("torch")
    b, s, h, d = 2, 12, 3, 16
    x = torch.from_numpy(rng.standard_normal((b, s, h, d)))
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
    cos = torch.cat((ang.cos(), ang.cos()), -1).view(1, s, 1, d)
    sin = torch.cat((ang.sin(), ang.sin()), -1).view(1, s, 1, d)
    x1, x2 = x.chunk(2, dim=-1)
    want = (x * cos + torch.cat((-x2, x1), dim=-1) * sin).numpy()
    got = posemb.RoPE(d, 512, dtype=np.float64)(x.numpy(), seq_axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    c, si = posemb.rope_cos_sin(np.arange(s), d, dtype=np.float64)
    np.testing.assert_allclose(posemb.apply_rope(x.numpy(), c, si, seq_axis=1), want,
                               rtol=1e-12, atol=1e-12)


def test_torch_apply_rope_seq_axis(rng):
    torch = pytest.importorskip("torch")
    import posemb.torch as pt

    x = torch.from_numpy(rng.standard_normal((2, 6, 3, 8))).requires_grad_()
    cos, sin = (torch.from_numpy(t) for t in posemb.rope_cos_sin(np.arange(6), 8,
                                                                dtype=np.float64))
    y = pt.apply_rope(x, cos, sin, seq_axis=1)
    want = posemb.apply_rope(x.detach().numpy(), cos.numpy(), sin.numpy(), seq_axis=1)
    np.testing.assert_array_equal(y.detach().numpy(), want)
    y.backward(y.detach())                   # the gradient rotates y back to x
    np.testing.assert_allclose(x.grad.numpy(), x.detach().numpy(), rtol=1e-12, atol=1e-12)


def _model_views(base):
    """q as models hold it, (1, h, s, d) views of a (1, s, n, d) array"""
    h = base.shape[2] // 2
    return {"hf-transposed": base[:, :, :h].copy().transpose(0, 2, 1, 3),
            "sliced-heads": base[:, :, :h].transpose(0, 2, 1, 3),
            "negative-heads": base[:, :, h - 1::-1].transpose(0, 2, 1, 3)}


def _memory_order(strides):
    """axes from the largest stride to the smallest"""
    return list(np.argsort([-abs(v) for v in strides], kind="stable"))


def _dense(a):
    """a's elements fill its memory, in the order of its strides"""
    if any(v <= 0 for v in a.strides):
        return False
    in_order = a.transpose(_memory_order(a.strides))
    return np.ascontiguousarray(in_order).ctypes.data == a.ctypes.data


@pytest.mark.parametrize("seq", [6, 4096])          # a small array; one from the output cache
@pytest.mark.parametrize("form", ["hf-transposed", "sliced-heads", "negative-heads"])
def test_new_result_is_laid_out_as_x(rng, seq, form):
    # a new output has x's memory order (NumPy's order='K'; torch's
    # elementwise ops keep the input's strides too): HF's transposed q gives
    # a (b, s, h, d)-ordered result, written front to back, not transposed
    d = 128
    q = _model_views(rng.standard_normal((1, seq, 8, d)).astype(np.float32))[form]
    cos, sin = posemb.rope_cos_sin(np.arange(seq), d)
    want = oracle(q, np.arange(seq), d)
    calls = {
        "apply_rope": lambda: posemb.apply_rope(q, cos, sin),
        "hf-tables": lambda: posemb.apply_rope(q, cos[None, None], sin[None, None]),
        "backward": lambda: posemb.apply_rope_backward(posemb.apply_rope(q, cos, sin), cos, sin),
        "RoPE": lambda: posemb.RoPE(d, seq)(q),
        "numpy-tables-promote": lambda: posemb.apply_rope(q, cos.astype(np.float64),
                                                          sin.astype(np.float64)),
    }
    for name, call in calls.items():
        got = call()
        assert got.shape == q.shape, name
        assert _memory_order(got.strides) == _memory_order(q.strides) and _dense(got), \
            (name, got.strides, q.strides)
        expect = q if name == "backward" else want
        np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5, err_msg=name)


def test_torch_new_result_keeps_hf_strides(rng):
    # posemb.torch's apply_rotary_pos_emb on HF's transposed q and k returns
    # tensors of their strides, as HF's own formula does
    torch = pytest.importorskip("torch")
    import posemb.torch as pt
    b, s, h, d = 2, 2048, 8, 128           # q: 8 MiB, an output from the cache
    q = torch.from_numpy(rng.standard_normal((b, s, h, d)).astype(np.float32)).transpose(1, 2)
    k = q[:, :2]
    cos, sin = (torch.from_numpy(t)[None] for t in posemb.rope_cos_sin(np.arange(s), d))
    got_q, got_k = pt.apply_rotary_pos_emb(q, k, cos, sin)
    c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
    for got, x in ((got_q, q), (got_k, k)):
        hf = x * c + torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1) * sn
        bshd = torch.empty(b, s, x.shape[1], d).transpose(1, 2)    # dense, HF's layout
        assert got.stride() == hf.stride() == bshd.stride()
        torch.testing.assert_close(got, hf, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_decode_fast_path_equals_the_long_road(rng, dtype, interleaved):
    # apply_rope and RoPE(x, offset=) hand plain operands straight to the
    # gufunc; the long road (checks, views) must give the same bits
    from posemb._rope import _apply_rope_any

    q = rng.standard_normal((2, 8, 1, 64)).astype(dtype)
    rope = posemb.RoPE(64, 128, interleaved=interleaved, dtype=dtype)
    cos, sin = rope.cos_sin(offset=100, seq_len=1)
    fast = posemb.apply_rope(q, cos, sin, interleaved=interleaved)
    slow = _apply_rope_any(q, cos, sin, interleaved=interleaved)
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(rope(q, offset=100), fast)
    np.testing.assert_array_equal(rope(q, offset=100), rope._call_any(q, offset=100))
    want = oracle(q.astype(np.float64), np.array([100]), 64, interleaved=interleaved)
    tol = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(fast, want, rtol=tol, atol=tol)
    # operands the fast path must not take still get the long road's answer or error
    with pytest.raises(TypeError, match="interleaved"):
        posemb.apply_rope(q, cos, sin, interleaved="yes")
    with pytest.raises(TypeError, match="x must be a float"):
        posemb.apply_rope(q.astype(np.int32), cos, sin)
    with pytest.raises(ValueError, match="must broadcast"):
        posemb.apply_rope(q, np.concatenate([cos, cos]), np.concatenate([sin, sin, sin]))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_fast_road_in_place_backward_and_unsqueezed_tables(rng, dtype, interleaved):
    # the fast road also takes out=x, the backward gufunc, and tables
    # (1, ..., s, r) of no more axes than x; every answer equals the long
    # road's bits, and what it refuses gets the long road's named error
    from posemb._rope import _apply_rope_any, _apply_rope_backward_any

    x = rng.standard_normal((2, 3, 5, 16)).astype(dtype)
    cos, sin = posemb.rope_cos_sin(np.arange(5)[None], 16, dtype=dtype, interleaved=interleaved)
    c4, s4 = cos[:, None], sin[:, None]                      # (1, 1, 5, 16), HF's unsqueeze
    cb, sb = posemb.rope_cos_sin(np.arange(10).reshape(2, 5), 16, dtype=dtype,
                                 interleaved=interleaved)
    cb, sb = cb[:, None], sb[:, None]                        # (2, 1, 5, 16): a batch of tables
    for c, s in ((cos[0], sin[0]), (cos, sin), (c4, s4), (cb, sb)):
        want = _apply_rope_any(x, c, s, interleaved=interleaved)
        np.testing.assert_array_equal(posemb.apply_rope(x, c, s, interleaved=interleaved), want)
        back = _apply_rope_backward_any(want, c, s, interleaved=interleaved)
        np.testing.assert_array_equal(
            posemb.apply_rope_backward(want, c, s, interleaved=interleaved), back)
        y = x.copy()
        assert posemb.apply_rope(y, c, s, interleaved=interleaved, out=y) is y
        np.testing.assert_array_equal(y, want)
        assert posemb.apply_rope_backward(y, c, s, interleaved=interleaved, out=y) is y
        np.testing.assert_array_equal(y, back)
    want = oracle(x.astype(np.float64), np.arange(5), 16, interleaved=interleaved)
    tol = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(posemb.apply_rope(x, c4, s4, interleaved=interleaved), want,
                               rtol=tol, atol=tol)
    # tables of more axes than x broadcast x up: the result keeps their axes
    assert posemb.apply_rope(x[0], c4, s4, interleaved=interleaved).shape == (1, 1, 3, 5, 16)[1:]
    c5 = c4[None]
    assert posemb.apply_rope(x[0], c5, c5, interleaved=interleaved).shape == (1, 1, 3, 5, 16)
    # refused on the fast road, named on the long one
    ro = x.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        posemb.apply_rope(ro, c4, s4, out=ro)
    with pytest.raises(ValueError, match="writeable"):
        posemb.apply_rope_backward(ro, c4, s4, out=ro)
    with pytest.raises(ValueError, match="must broadcast"):
        posemb.apply_rope(x, np.concatenate([c4, c4], 2), np.concatenate([s4, s4], 2))
    with pytest.raises(ValueError, match="must broadcast"):
        posemb.apply_rope_backward(x, np.concatenate([c4, c4], 2), np.concatenate([s4, s4], 2))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_fast_road_one_position_tables_and_meta_layout(rng, dtype, interleaved):
    # the fast road (no Python views beyond a swap or a new axis) also takes
    # one position's tables, (r,) or (..., 1, r), against many positions,
    # and Meta's (batch, seq, heads, d) with tables (seq, 1, r) or
    # seq_axis=1: each answer is the long road's bits and the oracle's values
    from posemb._rope import _FAST_FWD, _apply_rope_any, _apply_rope_backward_any, _fast_road

    tol = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    c1, s1 = posemb.rope_cos_sin(37, 16, dtype=dtype, interleaved=interleaved)   # (16,)
    cs, ss = posemb.rope_cos_sin(np.arange(5), 16, dtype=dtype, interleaved=interleaved)
    x_hf = rng.standard_normal((2, 3, 5, 16)).astype(dtype)       # (batch, heads, seq, d)
    x_meta = rng.standard_normal((2, 5, 3, 16)).astype(dtype)     # (batch, seq, heads, d)
    at37 = np.full(5, 37)
    pb = np.array([np.arange(5), np.arange(9, 4, -1)])
    cb, sb = posemb.rope_cos_sin(pb, 16, dtype=dtype, interleaved=interleaved)    # (2, 5, 16)
    cases = [
        # (x, cos, sin, seq_axis, oracle of x in the HF layout, to x's layout)
        (x_hf, c1, s1, None, lambda x: oracle(x, at37, 16, interleaved=interleaved)),
        (x_hf, c1[None], s1[None], None, lambda x: oracle(x, at37, 16, interleaved=interleaved)),
        (x_hf[0, 0], c1[None], s1[None], None,
         lambda x: oracle(x, at37, 16, interleaved=interleaved)),
        (x_meta, cs[:, None], ss[:, None], None,
         lambda x: oracle(x.swapaxes(1, 2), np.arange(5), 16,
                          interleaved=interleaved).swapaxes(1, 2)),
        (x_meta, cs, ss, 1,
         lambda x: oracle(x.swapaxes(1, 2), np.arange(5), 16,
                          interleaved=interleaved).swapaxes(1, 2)),
        # seq_axis=1 with one position (a decode step), and per-batch tables
        (x_meta[:, :1], cs[3:4], ss[3:4], 1,
         lambda x: oracle(x.swapaxes(1, 2), [3], 16, interleaved=interleaved).swapaxes(1, 2)),
        (x_meta, cb, sb, 1,
         lambda x: np.stack([oracle(x[i].swapaxes(0, 1), pb[i], 16,
                                    interleaved=interleaved).swapaxes(0, 1) for i in range(2)])),
    ]
    for x, c, s, axis, want in cases:
        assert _fast_road(_FAST_FWD, x, c, s, interleaved, axis, None) is not None
        got = posemb.apply_rope(x, c, s, interleaved=interleaved, seq_axis=axis)
        assert got.shape == x.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(
            got, _apply_rope_any(x, c, s, interleaved=interleaved, seq_axis=axis))
        np.testing.assert_allclose(got, want(x.astype(np.float64)), rtol=tol, atol=tol)
        back = posemb.apply_rope_backward(got, c, s, interleaved=interleaved, seq_axis=axis)
        np.testing.assert_array_equal(back, _apply_rope_backward_any(
            got, c, s, interleaved=interleaved, seq_axis=axis))
        np.testing.assert_allclose(back, x, rtol=4 * tol, atol=4 * tol)
        y = x.copy()
        assert posemb.apply_rope(y, c, s, interleaved=interleaved, seq_axis=axis, out=y) is y
        np.testing.assert_array_equal(y, got)
        o = np.full_like(x, np.nan)
        assert posemb.apply_rope(x, c, s, interleaved=interleaved, seq_axis=axis, out=o) is o
        np.testing.assert_array_equal(o, got)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_module_fast_road_meta_layout_and_apply_qk(rng, dtype, interleaved):
    # RoPE(x, offset=, seq_axis=1) and apply_qk(q, k, offset=) hand the
    # cached rows straight to the gufunc for both layouts: the long road's
    # bits, the oracle's values, in place or new, and its errors
    tol = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    rope = posemb.RoPE(16, 64, interleaved=interleaved, dtype=dtype)
    assert rope._fast(np.ones((1, 3, 4, 16), dtype), 2, 1, None) is not None
    for seq in (1, 3):
        q = rng.standard_normal((2, seq, 4, 16)).astype(dtype)    # (batch, seq, heads, d)
        k = rng.standard_normal((2, seq, 2, 16)).astype(dtype)
        want_q = oracle(q.swapaxes(1, 2), np.arange(7, 7 + seq), 16,
                        interleaved=interleaved).swapaxes(1, 2)
        got = rope(q, offset=7, seq_axis=1)
        np.testing.assert_array_equal(got, rope._call_any(q, offset=7, seq_axis=1))
        np.testing.assert_allclose(got, want_q, rtol=tol, atol=tol)
        for axis, qq, kk in ((1, q, k), (None, q.swapaxes(1, 2), k.swapaxes(1, 2))):
            gq, gk = rope.apply_qk(qq, kk, offset=7, seq_axis=axis)
            np.testing.assert_array_equal(gq, rope._call_any(qq, offset=7, seq_axis=axis))
            np.testing.assert_array_equal(gk, rope._call_any(kk, offset=7, seq_axis=axis))
            qi, ki = qq.copy(), kk.copy()
            rq, rk = rope.apply_qk(qi, ki, offset=7, seq_axis=axis, inplace=True)
            assert rq is qi and rk is ki
            np.testing.assert_array_equal(qi, gq)
            np.testing.assert_array_equal(ki, gk)
        np.testing.assert_allclose(gq.swapaxes(1, 2), want_q, rtol=tol, atol=tol)
        y = q.copy()
        assert rope(y, offset=7, seq_axis=1, out=y) is y
        np.testing.assert_array_equal(y, got)
    with pytest.raises(ValueError, match="same sequence length"):
        rope.apply_qk(np.ones((1, 4, 3, 16), dtype), np.ones((1, 2, 5, 16), dtype))
    # one kv head (multi-query attention) in Meta's layout, in place: the
    # oracle's values for q and k alike
    q1 = rng.standard_normal((2, 3, 4, 16)).astype(dtype)
    k1 = rng.standard_normal((2, 3, 1, 16)).astype(dtype)
    wq, wk = (oracle(a.swapaxes(1, 2), np.arange(7, 10), 16,
                     interleaved=interleaved).swapaxes(1, 2) for a in (q1, k1))
    assert rope._fast(k1, 7, 1, None) is not None
    rq, rk = rope.apply_qk(q1, k1, offset=7, seq_axis=1, inplace=True)
    assert rq is q1 and rk is k1
    np.testing.assert_allclose(q1, wq, rtol=tol, atol=tol)
    np.testing.assert_allclose(k1, wk, rtol=tol, atol=tol)
    # a k the module refuses leaves q unrotated (nothing written before the error)
    q2 = rng.standard_normal((1, 4, 3, 16)).astype(dtype)
    q2_before = q2.copy()
    with pytest.raises(ValueError, match="k"):
        rope.apply_qk(q2, np.ones((1, 2, 3, 8), dtype), offset=7, inplace=True)
    np.testing.assert_array_equal(q2, q2_before)
    # found by the API fuzzer: no seq, and no tables made yet for x's dtype
    other = np.float32 if dtype == np.float64 else np.float64
    fresh = posemb.RoPE(16, 4, interleaved=interleaved, dtype=other)
    for empty in (np.zeros((2, 0, 16), dtype), np.broadcast_to(dtype(0), (2, 0, 16))):
        got = fresh(empty, offset=0)
        assert got.shape == (2, 0, 16) and got.dtype == dtype
        gq, gk = fresh.apply_qk(empty, empty, offset=0)
        assert gq.shape == gk.shape == (2, 0, 16)
    ro = np.ones((1, 4, 3, 16), dtype)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="q"):
        rope.apply_qk(ro, np.ones((1, 2, 3, 16), dtype), inplace=True)


@pytest.mark.parametrize("unsqueeze_dim", [1, 2, -3, -2])
def test_numpy_apply_rotary_pos_emb_fast_road(rng, unsqueeze_dim):
    # HF's drop-in on plain arrays reshapes the tables and takes the fast
    # road for q and k: HF's formula's values (cos/sin (batch, seq, d)
    # unsqueezed at unsqueeze_dim: (b, h, s, d) at 1, (b, s, h, d) at 2),
    # the long road's bits, and its errors
    from posemb._rope import _FAST_FWD, _fast_road, _rotate_qk_unsqueezed

    meta = unsqueeze_dim in (2, -2)
    cos, sin = posemb.rope_cos_sin(np.arange(6)[None] + 3, 16)        # (1, 6, 16)
    shape_q, shape_k = ((1, 6, 4, 16), (1, 6, 2, 16)) if meta else ((1, 4, 6, 16), (1, 2, 6, 16))
    q = rng.standard_normal(shape_q).astype(np.float32)
    k = rng.standard_normal(shape_k).astype(np.float32)
    c4, s4 = np.expand_dims(cos, unsqueeze_dim), np.expand_dims(sin, unsqueeze_dim)
    assert _fast_road(_FAST_FWD, q, c4, s4, False, None, None) is not None
    gq, gk = posemb.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    lq, lk = _rotate_qk_unsqueezed(q, k, cos, sin, unsqueeze_dim)
    np.testing.assert_array_equal(gq, lq)
    np.testing.assert_array_equal(gk, lk)
    for got, x in ((gq, q), (gk, k)):
        hf = x * c4 + np.concatenate((-x[..., 8:], x[..., :8]), -1) * s4
        np.testing.assert_allclose(got, hf, rtol=1e-6, atol=1e-6)
        xs = x.swapaxes(1, 2) if meta else x
        want = oracle(xs, np.arange(6) + 3, 16)
        np.testing.assert_allclose(got, want.swapaxes(1, 2) if meta else want,
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="unsqueeze_dim"):
        posemb.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=7)
    with pytest.raises(ValueError, match="broadcast"):
        posemb.apply_rotary_pos_emb(q, k[:, :4] if meta else k[:, :, :4], cos, sin,
                                    unsqueeze_dim=unsqueeze_dim)


def test_one_position_tables_on_a_large_array(rng):
    # above one thread's work the new-axis view is not taken (the C walk
    # splits work by positions): the long road broadcasts the tables, with
    # the same values
    from posemb._rope import _PARALLEL_MIN

    seq = _PARALLEL_MIN // (2 * 64 * 4) + 8
    x = rng.standard_normal((1, 2, seq, 64)).astype(np.float32)
    c, s = posemb.rope_cos_sin(1000, 64)
    got = posemb.apply_rope(x, c, s)
    small = posemb.apply_rope(x[:, :, :4], c, s)                 # the new-axis view
    np.testing.assert_array_equal(got[:, :, :4], small)
    np.testing.assert_allclose(got[:, :, -3:], oracle(x[:, :, -3:], np.full(3, 1000), 64),
                               rtol=1e-5, atol=1e-5)


def test_empty_positions_need_no_frequencies():
    # found by the fuzzer: (0, 0) positions with dim 2**31 built 8 GiB of
    # inverse frequencies for an empty result
    cos, sin = posemb.rope_cos_sin(np.zeros((0, 0), np.int64), 2**31)
    assert cos.shape == sin.shape == (0, 0, 2**31) and cos.dtype == np.float32
    with pytest.raises(ValueError, match="base"):
        posemb.rope_cos_sin(np.zeros(0, np.int64), 8, base=-1.0)
    with pytest.raises(ValueError, match="rope_type"):
        posemb.rope_cos_sin(np.zeros(0, np.int64), 8, scaling={"rope_type": "nope"})


def test_fast_paths_refuse_what_the_long_road_refuses():
    cos, sin = posemb.rope_cos_sin(np.arange(1), 8)
    with pytest.raises(ValueError, match=r"cos/sin width \(8\) must not exceed x's last axis"):
        posemb.apply_rope(np.ones((1, 2, 1, 4), np.float32), cos, sin)
    with pytest.raises(ValueError, match="must broadcast"):
        posemb.apply_rope(np.ones((1, 2, 3, 8), np.float32), cos[[0, 0]], sin[[0, 0]])
    huge = np.broadcast_to(np.float32(1), (2**20, 2**10, 1, 64))   # 256 GiB of result
    c64, s64 = posemb.rope_cos_sin(np.arange(1), 64)
    with pytest.raises(MemoryError, match="x: a .* result would need"):
        posemb.apply_rope(huge, c64, s64)
    with pytest.raises(MemoryError, match="x: a .* result would need"):
        posemb.RoPE(64, 8)(huge, offset=0)
