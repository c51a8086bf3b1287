"""RoPE variants against PyTorch transcriptions of the systems they reproduce.

References written here, in PyTorch (from the named sources):
- per-sequence offsets, apply_qk and varlen: loops of the plain per-sequence
  rotation (HF rotate_half formula), flash-attn's cu_seqlens convention.
- HF convert_llama_weights_to_hf.py ``permute``; Meta's complex RoPE.
- Qwen2-VL: the rotary embedding over (3, batch, seq) position ids and
  ``apply_multimodal_rotary_pos_emb``; its vision RoPE (``rot_pos_emb``).
- rope-vit ``compute_axial_cis`` (interleaved, complex).
- xPos: lucidrains rotary-embedding-torch (``use_xpos``) and torchscale ``XPOS``.
"""
import math

import numpy as np
import pytest
from _torch import torch

import posemb

def T(a):
    return torch.from_numpy(a)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def half_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def truth_tables(positions, dim, base=10000.0, interleaved=False):
    inv = base ** (-(np.arange(0, dim, 2, dtype=np.float64) / dim))
    ang = np.asarray(positions, np.float64)[..., None] * inv
    if interleaved:
        return np.repeat(np.cos(ang), 2, -1), np.repeat(np.sin(ang), 2, -1)
    return np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)

# ---------------------------------------------------------------- per-sequence offsets


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shape", [(3, 5, 16), (3, 4, 5, 16)])
def test_per_sequence_offsets_equal_loop(rng, interleaved, shape):
    rope = posemb.RoPE(16, 8, interleaved=interleaved)
    x = rng.standard_normal(shape).astype(np.float32)
    offsets = np.array([0, 17, 3])
    y = rope(x, offset=offsets)
    for b, off in enumerate(offsets):
        np.testing.assert_array_equal(y[b], rope(x[b], offset=int(off)))
    np.testing.assert_array_equal(rope.backward(y, offset=offsets), np.stack(
        [rope.backward(y[b], offset=int(o)) for b, o in enumerate(offsets)]))
    # and the HF formula with per-row position ids
    pos = offsets[:, None] + np.arange(shape[-2])
    if not interleaved:
        c, s = truth_tables(pos, 16)
        c, s = T(c.astype(np.float32)), T(s.astype(np.float32))
        if len(shape) == 4:
            c, s = c[:, None], s[:, None]
        np.testing.assert_allclose(y, half_rope(T(x), c, s).numpy(), atol=2e-6)


@pytest.mark.parametrize("offset, err, match", [
    (np.array([1, 2]), ValueError, "offset"),            # batch is 3
    (np.array([[1, 2, 3]]), ValueError, "offset"),
    (np.array([1, -2, 3]), ValueError, "offset"),
    (np.array([1.0, 2.0, 3.0]), TypeError, "offset"),
    (-1, ValueError, "offset"),
    (2.5, TypeError, "offset"),
])
def test_bad_offsets(offset, err, match):
    rope = posemb.RoPE(8, 4)
    x = np.ones((3, 2, 8), np.float32)
    with pytest.raises(err, match=match):
        rope(x, offset=offset)
    with pytest.raises(err, match=match):
        rope.apply_qk(x, x, offset=offset)


def test_offset_array_needs_a_batch_axis():
    rope = posemb.RoPE(8, 4)
    with pytest.raises(ValueError, match="offset"):
        rope(np.ones((2, 8), np.float32), offset=np.array([1, 2]))

# ---------------------------------------------------------------- apply_qk


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_qk_gqa(rng, interleaved):
    rope = posemb.RoPE(32, 64, interleaved=interleaved, rotary_dim=24)
    q = rng.standard_normal((2, 8, 6, 32)).astype(np.float32)
    k = rng.standard_normal((2, 2, 6, 32)).astype(np.float32)
    qr, kr = rope.apply_qk(q, k, offset=5)
    np.testing.assert_array_equal(qr, rope(q, offset=5))
    np.testing.assert_array_equal(kr, rope(k, offset=5))
    # positions per batch row, broadcast over both head counts
    pos = np.array([[0, 1, 2, 3, 4, 5], [9, 3, 7, 1, 0, 2]])[:, None, :]
    qr, kr = rope.apply_qk(q, k, pos)
    np.testing.assert_array_equal(qr, rope(q, pos))
    np.testing.assert_array_equal(kr, rope(k, pos))
    if not interleaved:
        c, s = truth_tables(pos, 24)
        c, s = T(c.astype(np.float32)), T(s.astype(np.float32))
        rq = torch.cat((half_rope(T(q[..., :24]), c, s), T(q[..., 24:])), -1)
        np.testing.assert_allclose(qr, rq.numpy(), atol=2e-6)
    # per-sequence offsets, in place: the same objects come back, rotated
    offs = np.array([3, 40])
    want_q, want_k = rope(q, offset=offs), rope(k, offset=offs)
    q2, k2 = q.copy(), k.copy()
    got_q, got_k = rope.apply_qk(q2, k2, offset=offs, inplace=True)
    assert got_q is q2 and got_k is k2
    np.testing.assert_array_equal(q2, want_q)
    np.testing.assert_array_equal(k2, want_k)
    # in place on views of one packed qkv buffer (no copies)
    qkv = np.concatenate([q, k, k], axis=1)
    qv, kv = qkv[:, :8], qkv[:, 8:10]
    rope.apply_qk(qv, kv, offset=offs, inplace=True)
    np.testing.assert_array_equal(qkv[:, :8], want_q)
    np.testing.assert_array_equal(qkv[:, 8:10], want_k)
    np.testing.assert_array_equal(qkv[:, 10:], k)


def test_apply_qk_mixed_dtypes_and_scaling(rng):
    rs = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    rope = posemb.RoPE(16, 32, scaling=rs)
    q = rng.standard_normal((1, 4, 3, 16)).astype(np.float16)
    k = rng.standard_normal((1, 1, 3, 16)).astype(np.float32)
    qr, kr = rope.apply_qk(q, k, offset=200)
    assert qr.dtype == np.float16 and kr.dtype == np.float32
    np.testing.assert_array_equal(qr, rope(q, offset=200))
    c, s = posemb.rope_cos_sin(np.arange(200, 203), 16, scaling=rs)
    np.testing.assert_array_equal(kr, posemb.apply_rope(k, c, s))


def test_apply_qk_errors():
    rope = posemb.RoPE(8, 4)
    q = np.ones((1, 4, 3, 8), np.float32)
    with pytest.raises(ValueError, match=r"^k's last axis must be head_size=8, got shape "):
        rope.apply_qk(q, np.ones((1, 2, 3, 6), np.float32))
    with pytest.raises(ValueError, match=r"^q and k must have the same sequence length"):
        rope.apply_qk(q, np.ones((1, 2, 5, 8), np.float32))
    with pytest.raises(ValueError, match=r"^q's last axis must be head_size=8, got shape "):
        rope.apply_qk(np.ones((1, 4, 3, 4), np.float32), q)
    with pytest.raises(TypeError, match=r"^k must be a float16, float32 or float64 array, "
                                        r"got dtype int32$"):
        rope.apply_qk(q, np.ones((1, 2, 3, 8), np.int32))
    with pytest.raises(ValueError, match=r"must broadcast to k\.shape\[:-1\] = \(3, 2, 3\)"):
        # positions fit q's batch, not k's
        rope.apply_qk(np.ones((2, 4, 3, 8), np.float32), np.ones((3, 2, 3, 8), np.float32),
                      offset=np.array([1, 2]))
    with pytest.raises(TypeError, match="q"):
        rope.apply_qk(q.tolist(), q.copy(), inplace=True)
    ro = q.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="k"):
        rope.apply_qk(q.copy(), ro, inplace=True)
    with pytest.raises(ValueError, match="k"):
        rope.apply_qk(q, q, inplace=True)     # would rotate twice
    with pytest.raises(ValueError, match="positions"):
        rope.apply_qk(q, q, np.arange(5))

# ---------------------------------------------------------------- varlen


def varlen_reference(x, cu, cos, sin, offsets, interleaved):
    """The per-sequence loop: each sequence through apply_rope at its own rows."""
    out = np.empty(x.shape, dtype=np.result_type(x, cos))
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        rows = slice(offsets[b], offsets[b] + hi - lo)
        out[lo:hi] = posemb.apply_rope(x[lo:hi], cos[rows, None], sin[rows, None],
                                       interleaved=interleaved)
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("rot", [16, 10])
def test_varlen_equals_per_sequence_loop(rng, interleaved, dtype, rot):
    lengths = [5, 0, 1, 12, 7]
    cu = np.concatenate([[0], np.cumsum(lengths)])
    x = rng.standard_normal((cu[-1], 3, 16)).astype(dtype)
    cos, sin = posemb.rope_cos_sin(np.arange(40), rot, interleaved=interleaved, dtype=dtype)
    y = posemb.apply_rope_varlen(x, cu, cos, sin, interleaved=interleaved)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, varlen_reference(x, cu, cos, sin, [0] * 5, interleaved))
    # per-sequence offsets (decoding packed sequences), int32 cu_seqlens
    offs = np.array([3, 30, 0, 28, 33])
    y2 = posemb.apply_rope_varlen(x, cu.astype(np.int32), cos, sin, interleaved=interleaved,
                                  offset=offs)
    np.testing.assert_array_equal(y2, varlen_reference(x, cu, cos, sin, offs, interleaved))
    y3 = posemb.apply_rope_varlen(x, cu, cos, sin, interleaved=interleaved, offset=2)
    np.testing.assert_array_equal(y3, varlen_reference(x, cu, cos, sin, [2] * 5, interleaved))
    # in place
    x2 = x.copy()
    assert posemb.apply_rope_varlen(x2, cu, cos, sin, interleaved=interleaved, out=x2) is x2
    np.testing.assert_array_equal(x2, y)


def test_varlen_torch_formula_and_layouts(rng):
    cu = np.array([0, 4, 9])
    base = rng.standard_normal((9, 4, 32))
    x = base[:, ::2, ::2]                      # strided tokens/heads/features
    cos, sin = posemb.rope_cos_sin(np.arange(16), 16, dtype=np.float64)
    y = posemb.apply_rope_varlen(x, cu, cos, sin)
    pos = np.concatenate([np.arange(4), np.arange(5)])
    c, s = truth_tables(pos, 16)
    np.testing.assert_allclose(y, half_rope(T(x.copy()), T(c)[:, None], T(s)[:, None]).numpy(),
                               atol=1e-14)
    # byte-swapped input, F-order, strided tables, out with a partial overlap
    np.testing.assert_array_equal(posemb.apply_rope_varlen(x.astype(">f8"), cu, cos, sin), y)
    np.testing.assert_array_equal(posemb.apply_rope_varlen(np.asfortranarray(x), cu, cos, sin), y)
    wide_c, wide_s = posemb.rope_cos_sin(np.arange(16), 16, dtype=np.float64)
    np.testing.assert_array_equal(
        posemb.apply_rope_varlen(x, cu, np.repeat(wide_c, 2, 0)[::2], wide_s), y)
    buf = np.zeros((10, 2, 16))
    buf[1:] = x
    src = buf[1:]
    posemb.apply_rope_varlen(src, cu, cos, sin, out=buf[:-1])
    np.testing.assert_array_equal(buf[:-1], y)
    # float32 x with float64 tables promotes, as apply_rope does
    y32 = posemb.apply_rope_varlen(x.astype(np.float32), cu, cos, sin)
    assert y32.dtype == np.float64
    # zero sequences, zero tokens
    e = posemb.apply_rope_varlen(np.ones((0, 2, 8)), np.array([0]), cos[:, :8], sin[:, :8])
    assert e.shape == (0, 2, 8)


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(cu_seqlens=np.array([1, 4, 9])), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 6, 4, 9])), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 4, 8])), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 4, 10])), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 12, 9])), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0.0, 4.0, 9.0])), TypeError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([[0, 4, 9]])), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([], dtype=int)), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 9], dtype=np.uint64) * 2**62), ValueError, "cu_seqlens"),
    (dict(cos_rows=4), IndexError, "cu_seqlens"),                 # 5 tokens, 4 rows
    (dict(offset=np.array([0, 4])), IndexError, "cu_seqlens"),     # 4 + 5 > 8 rows
    (dict(offset=4), IndexError, "cu_seqlens"),
    (dict(offset=np.array([0, -1])), ValueError, "offset"),
    (dict(offset=np.array([0, 1, 2])), ValueError, "offset"),
    (dict(offset=np.array([0.0, 1.0])), TypeError, "offset"),
    (dict(offset=-1), ValueError, "offset"),
    (dict(x=np.ones((9, 8))), ValueError, "x"),
    (dict(x=np.ones((9, 2, 8), np.int64)), TypeError, "x"),
    (dict(x=np.ones((9, 2, 6))), ValueError, "cos"),               # width 8 > 6
    (dict(cos=np.ones(8)), ValueError, "cos"),
    (dict(sin=np.ones((8, 6))), ValueError, "sin"),
    (dict(cos=np.ones((8, 7)), sin=np.ones((8, 7))), ValueError, "cos"),
    (dict(out=np.empty((9, 2, 8), np.float32)), TypeError, "out"),
    (dict(out=np.empty((9, 2, 4))), ValueError, "out"),
    (dict(out=[0.0]), TypeError, "out"),
    (dict(out=np.broadcast_to(np.empty(8), (9, 2, 8))), ValueError, "out"),
])
def test_varlen_bad_input(kwargs, err, match):
    cos, sin = posemb.rope_cos_sin(np.arange(kwargs.pop("cos_rows", 8)), 8, dtype=np.float64)
    args = dict(x=np.ones((9, 2, 8)), cu_seqlens=np.array([0, 4, 9]), cos=cos, sin=sin)
    args.update(kwargs)
    x, cu, c, s = args.pop("x"), args.pop("cu_seqlens"), args.pop("cos"), args.pop("sin")
    with pytest.raises(err, match=match):
        posemb.apply_rope_varlen(x, cu, c, s, **args)


def test_varlen_core_refuses_bad_buffers():
    """The C entry point checks its own arguments: errors, never a crash."""
    f = posemb._core._rope_varlen
    x = np.ones((4, 2, 8))
    cu = np.array([0, 4], dtype=np.int64)
    c = np.ones((8, 8))
    with pytest.raises(TypeError, match="dtype"):
        f(x, cu, None, c.astype(np.float32), c.astype(np.float32), False, False, x)
    with pytest.raises(ValueError, match="cu_seqlens"):
        f(x, np.array([0, 9, 4], dtype=np.int64)[::2], None, c, c, False, False, x)
    with pytest.raises(TypeError, match="cu_seqlens"):
        f(x, cu.astype(np.int32), None, c, c, False, False, x)
    with pytest.raises(ValueError, match="offset"):
        f(x, cu, np.zeros(3, dtype=np.int64), c, c, False, False, x)
    with pytest.raises(ValueError, match="out"):
        f(x, cu, None, c, c, False, False, np.ones((4, 2, 7)))
    with pytest.raises(IndexError, match="cu_seqlens"):
        f(x, cu, np.array([2**62], dtype=np.int64), c, c, False, False, x)
    with pytest.raises(ValueError, match="cu_seqlens"):
        f(x, np.array([0, -2**62, 4], dtype=np.int64), None, c, c, False, False, x)

# ---------------------------------------------------------------- Meta <-> HF layout


def hf_permute(w, n_heads, dim1, dim2):
    """convert_llama_weights_to_hf.py"""
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def meta_rope(x, freqs_cis):
    """Meta llama apply_rotary_emb on one tensor (batch, seq, heads, head_dim), float64."""
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3)


def test_convert_layout_matches_hf_permute(rng):
    w = rng.standard_normal((8 * 16, 64))
    ours = posemb.convert_rope_layout(w, 8)
    np.testing.assert_array_equal(ours, hf_permute(T(w), 8, 128, 64).numpy())
    wk = rng.standard_normal((2 * 16, 64))      # GQA key projection: num_key_value_heads
    np.testing.assert_array_equal(posemb.convert_rope_layout(wk, 2),
                                  hf_permute(T(wk), 2, 32, 64).numpy())
    np.testing.assert_array_equal(posemb.convert_rope_layout(ours, 8, to="interleaved"), w)
    bias = rng.standard_normal(128)                # Qwen2-style q/k biases permute the same way
    np.testing.assert_array_equal(posemb.convert_rope_layout(bias, 8),
                                  hf_permute(T(bias[:, None]), 8, 128, 1).numpy()[:, 0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_meta_rope_on_original_equals_hf_rope_on_converted(rng, dtype):
    hidden, heads, kv_heads, hd, seq = 64, 4, 2, 16, 11
    wq = rng.standard_normal((heads * hd, hidden)).astype(dtype)
    wk = rng.standard_normal((kv_heads * hd, hidden)).astype(dtype)
    x = rng.standard_normal((1, seq, hidden)).astype(dtype)
    start = 7
    # Meta: q = x @ W.T, complex (interleaved) RoPE
    ang = T(np.arange(start, start + seq)[:, None] * 10000.0 ** (-np.arange(0, hd, 2) / hd))
    freqs = torch.polar(torch.ones_like(ang), ang)
    qm = meta_rope(T(x @ wq.T).double().reshape(1, seq, heads, hd), freqs)
    km = meta_rope(T(x @ wk.T).double().reshape(1, seq, kv_heads, hd), freqs)
    # HF: converted weights, half-split RoPE (posemb)
    wq_hf = posemb.convert_rope_layout(wq, heads)
    wk_hf = posemb.convert_rope_layout(wk, kv_heads)
    rope = posemb.RoPE(hd, 32, dtype=dtype)
    q_hf = (x @ wq_hf.T).reshape(1, seq, heads, hd).transpose(0, 2, 1, 3)
    k_hf = (x @ wk_hf.T).reshape(1, seq, kv_heads, hd).transpose(0, 2, 1, 3)
    qh, kh = rope.apply_qk(q_hf, k_hf, offset=start)
    perm = np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])
    atol = 2e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(qh.transpose(0, 2, 1, 3), qm.numpy()[..., perm], atol=atol)
    np.testing.assert_allclose(kh.transpose(0, 2, 1, 3), km.numpy()[..., perm], atol=atol)
    # attention scores are the same (GQA: query head h uses key head h // 2)
    sm = torch.einsum("bqhd,bkhd->bhqk", qm, km.repeat_interleave(2, dim=2)).numpy()
    sh = np.einsum("bhqd,bhkd->bhqk", qh, np.repeat(kh, 2, axis=1))
    np.testing.assert_allclose(sh, sm, atol=atol * 20, rtol=1e-5)
    # and posemb's interleaved RoPE on the original weights is Meta's
    ri = posemb.RoPE(hd, 32, interleaved=True, dtype=dtype)
    qi = ri((x @ wq.T).reshape(1, seq, heads, hd).transpose(0, 2, 1, 3), offset=start)
    np.testing.assert_allclose(qi.transpose(0, 2, 1, 3), qm.numpy(), atol=atol)


def test_convert_layout_partial_rotary(rng):
    w = rng.standard_normal((2 * 12, 5))
    out = posemb.convert_rope_layout(w, 2, rotary_dim=8)
    for h in range(2):
        blk, got = w[h * 12:(h + 1) * 12], out[h * 12:(h + 1) * 12]
        np.testing.assert_array_equal(got[:8], hf_permute(T(blk[:8]), 1, 8, 5).numpy())
        np.testing.assert_array_equal(got[8:], blk[8:])
    np.testing.assert_array_equal(
        posemb.convert_rope_layout(out, 2, to="interleaved", rotary_dim=8), w)


@pytest.mark.parametrize("args, kwargs, err, match", [
    ((np.ones((10, 4)), 3), {}, ValueError, "num_heads"),
    ((np.ones((10, 4)), 0), {}, ValueError, "num_heads"),
    ((np.ones((10, 4)), 2), {}, ValueError, "weight"),            # head_dim 5
    ((np.ones((8, 4)), 2), {"to": "meta"}, ValueError, "to"),
    ((np.ones((8, 4)), 2), {"rotary_dim": 6}, ValueError, "rotary_dim"),
    ((np.ones((8, 4)), 2), {"rotary_dim": 3}, ValueError, "rotary_dim"),
    ((np.float64(1.0), 1), {}, ValueError, "weight"),
    ((np.ones((8, 4)), 2.0), {}, TypeError, "num_heads"),
])
def test_convert_layout_bad_input(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        posemb.convert_rope_layout(*args, **kwargs)

# ---------------------------------------------------------------- multimodal RoPE


def qwen2vl_rotary(position_ids, dim, base, dtype=torch.float64):
    """Qwen2VLRotaryEmbedding.forward: (3, batch, seq) ids -> (3, batch, seq, dim)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))
    inv = inv_freq[None, None, :, None].expand(3, position_ids.shape[1], -1, 1)
    freqs = (inv @ position_ids[:, :, None, :].to(dtype)).transpose(2, 3)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def qwen2vl_apply_multimodal(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))],
                    dim=-1).unsqueeze(unsqueeze_dim)
    return half_rope(q, cos, sin), half_rope(k, cos, sin)


def qwen2vl_position_ids():
    """Text, a 2 x 3 x 4 (t, h, w) video grid, more text: Qwen2-VL get_rope_index style."""
    text = np.arange(3)
    t, h, w = np.indices((2, 3, 4)).reshape(3, -1) + 3
    after = np.arange(4) + 3 + 4
    ids = np.concatenate([np.tile(text, (3, 1)), np.stack([t, h, w]), np.tile(after, (3, 1))], 1)
    return np.stack([ids, ids + 5], axis=1)     # (3, batch 2, seq 31)


def test_mrope_matches_qwen2vl(rng):
    dim, base, sections = 128, 1e6, [16, 24, 24]
    pos = qwen2vl_position_ids()
    cos, sin = posemb.mrope_cos_sin(pos, dim, sections, base=base, dtype=np.float64)
    assert cos.shape == (2, pos.shape[-1], dim)
    hc, hs = qwen2vl_rotary(T(pos), dim, base)
    q = rng.standard_normal((2, 4, pos.shape[-1], dim))
    k = rng.standard_normal((2, 2, pos.shape[-1], dim))
    rq, rk = qwen2vl_apply_multimodal(T(q), T(k), hc, hs, sections)
    np.testing.assert_allclose(posemb.apply_rope(q, cos[:, None], sin[:, None]), rq.numpy(),
                               atol=1e-12)
    np.testing.assert_allclose(posemb.apply_rope(k, cos[:, None], sin[:, None]), rk.numpy(),
                               atol=1e-12)
    # the drop-in with posemb's per-axis tables equals HF's function given the same tables
    c3, s3 = posemb.rope_cos_sin(pos, dim, base, dtype=np.float32)
    q32, k32 = q.astype(np.float32), k.astype(np.float32)
    qe, ke = posemb.apply_multimodal_rotary_pos_emb(q32, k32, c3, s3, sections)
    rq, rk = qwen2vl_apply_multimodal(T(q32), T(k32), T(c3), T(s3), sections)
    np.testing.assert_array_equal(qe, rq.numpy())
    np.testing.assert_array_equal(ke, rk.numpy())
    # mrope_cos_sin's float32 tables are the selection of the per-axis ones
    c32, s32 = posemb.mrope_cos_sin(pos, dim, sections, base=base)
    np.testing.assert_array_equal(posemb.apply_rope(q32, c32[:, None], s32[:, None]), qe)


def test_mrope_text_only_is_plain_rope_and_interleaved():
    pos = np.tile(np.arange(20), (3, 1))
    c, s = posemb.mrope_cos_sin(pos, 64, [8, 12, 12])
    c1, s1 = posemb.rope_cos_sin(np.arange(20), 64)
    np.testing.assert_array_equal(c, c1)
    np.testing.assert_array_equal(s, s1)
    ci, _ = posemb.mrope_cos_sin(pos, 64, [8, 12, 12], interleaved=True)
    np.testing.assert_array_equal(ci, posemb.rope_cos_sin(np.arange(20), 64, interleaved=True)[0])
    # sections of an interleaved table: pair i of section j at positions[j]
    pos2 = np.stack([np.arange(5), 10 * np.arange(5), 100 * np.arange(5)])
    ci, si = posemb.mrope_cos_sin(pos2, 8, [1, 2, 1], interleaved=True, dtype=np.float64)
    inv = posemb.rope_inv_freq(8)
    want = np.cos(np.stack([pos2[0] * inv[0], pos2[1] * inv[1], pos2[1] * inv[2],
                            pos2[2] * inv[3]], -1))
    np.testing.assert_allclose(ci, np.repeat(want, 2, -1), atol=1e-15)
    # scaling applies (yarn attention factor)
    rs = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8}
    cy, _ = posemb.mrope_cos_sin(pos, 64, [8, 12, 12], scaling=rs, dtype=np.float64)
    np.testing.assert_allclose(cy, posemb.rope_cos_sin(np.arange(20), 64, scaling=rs,
                                                       dtype=np.float64)[0], atol=1e-15)


@pytest.mark.parametrize("call, err, match", [
    (lambda: posemb.mrope_cos_sin(np.zeros((3, 4), int), 16, [2, 3, 2]), ValueError, "mrope_section"),
    (lambda: posemb.mrope_cos_sin(np.zeros((3, 4), int), 16, [4, 5, -1]), ValueError, "mrope_section"),
    (lambda: posemb.mrope_cos_sin(np.zeros((3, 4), int), 16, "abc"), TypeError, "mrope_section"),
    (lambda: posemb.mrope_cos_sin(np.zeros((2, 4), int), 16, [2, 3, 3]), ValueError, "positions"),
    (lambda: posemb.mrope_cos_sin(np.zeros((3, 4)), 16, [2, 3, 3]), TypeError, "positions"),
    (lambda: posemb.mrope_cos_sin(np.zeros((3, 4), int), 15, [2, 3, 3]), ValueError, "dim"),
    (lambda: posemb.apply_multimodal_rotary_pos_emb(
        np.ones((1, 2, 4, 16)), np.ones((1, 2, 4, 16)), np.ones((3, 1, 4, 16)),
        np.ones((3, 1, 4, 8)), [2, 3, 3]), ValueError, "sin"),
    (lambda: posemb.apply_multimodal_rotary_pos_emb(
        np.ones((1, 2, 4, 16)), np.ones((1, 2, 4, 16)), np.ones((2, 1, 4, 16)),
        np.ones((2, 1, 4, 16)), [2, 3, 3]), ValueError, "cos"),
    (lambda: posemb.apply_multimodal_rotary_pos_emb(
        np.ones((1, 2, 4, 16)), np.ones((1, 2, 4, 16)), np.ones((3, 1, 4, 16)),
        np.ones((3, 1, 4, 16)), [2, 3, 3], unsqueeze_dim=7), ValueError, "unsqueeze_dim"),
])
def test_mrope_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call()

# ---------------------------------------------------------------- axial 2-D


def qwen2vl_vision(pos_ids, head_dim, theta=10000.0):
    """Qwen2-VL VisionRotaryEmbedding(head_dim // 2) + rot_pos_emb + apply_rotary_pos_emb_vision."""
    dim = head_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    full = torch.outer(torch.arange(int(pos_ids.max()) + 1, dtype=torch.float64), inv_freq)
    rotary = full[pos_ids].flatten(1)               # (N, head_dim/2): [h bands, w bands]
    emb = torch.cat((rotary, rotary), dim=-1)
    return emb.cos(), emb.sin()


def ropevit_axial_cis(dim, end_x, end_y, theta=100.0):
    """rope-vit compute_axial_cis (float64)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 4)[: (dim // 4)].double() / dim))
    t = torch.arange(end_x * end_y, dtype=torch.float64)
    t_x, t_y = t % end_x, torch.div(t, end_x, rounding_mode="floor")
    fx, fy = torch.outer(t_x, freqs), torch.outer(t_y, freqs)
    return torch.cat([torch.polar(torch.ones_like(fx), fx), torch.polar(torch.ones_like(fy), fy)], -1)


def test_axial_matches_qwen2vl_vision(rng):
    h, w, hd = 4, 6, 80
    rows, cols = np.indices((h, w))
    pos = np.stack([rows.ravel(), cols.ravel()], -1)
    cos, sin = posemb.axial_rope_cos_sin(pos, hd, dtype=np.float64)
    hc, hs = qwen2vl_vision(T(pos), hd)
    np.testing.assert_allclose(cos, hc.numpy(), atol=1e-15)
    np.testing.assert_allclose(sin, hs.numpy(), atol=1e-15)
    x = rng.standard_normal((h * w, 3, hd))               # (tokens, heads, head_dim)
    ref = half_rope(T(x), hc[:, None], hs[:, None])
    np.testing.assert_allclose(posemb.apply_rope(x, cos[:, None], sin[:, None]), ref.numpy(),
                               atol=1e-14)


def test_axial_matches_ropevit(rng):
    end_x, end_y, dim = 5, 3, 32
    cis = ropevit_axial_cis(dim, end_x, end_y)
    t = np.arange(end_x * end_y)
    pos = np.stack([t % end_x, t // end_x], -1)          # rope-vit: x (column) first
    cos, sin = posemb.axial_rope_cos_sin(pos, dim, base=100.0, interleaved=True, dtype=np.float64)
    x = rng.standard_normal((2, end_x * end_y, 4, dim))   # (batch, tokens, heads, dim)
    xc = torch.view_as_complex(T(x).reshape(*x.shape[:-1], -1, 2))
    ref = torch.view_as_real(xc * cis[None, :, None, :]).flatten(3)
    got = posemb.apply_rope(x, cos[:, None], sin[:, None], interleaved=True)
    np.testing.assert_allclose(got, ref.numpy(), atol=1e-14)
    # relative: scores depend only on the 2-D offset between patches
    q = rng.standard_normal(dim)
    k = rng.standard_normal(dim)
    def score(pq, pk):
        cq, sq = posemb.axial_rope_cos_sin(np.array(pq), dim, dtype=np.float64)
        ck, sk = posemb.axial_rope_cos_sin(np.array(pk), dim, dtype=np.float64)
        return posemb.apply_rope(q, cq, sq) @ posemb.apply_rope(k, ck, sk)
    assert score([3, 7], [1, 2]) == pytest.approx(score([12, 15], [10, 10]), abs=1e-12)


def test_axial_more_axes_and_errors():
    pos = np.array([[1, 2, 3]])
    c, _ = posemb.axial_rope_cos_sin(pos, 12, dtype=np.float64)
    inv = posemb.rope_inv_freq(4)
    want = np.cos(np.concatenate([p * inv for p in (1, 2, 3)]))
    np.testing.assert_allclose(c[0], np.concatenate([want, want]), atol=1e-15)
    with pytest.raises(ValueError, match="dim"):
        posemb.axial_rope_cos_sin(np.zeros((4, 2), int), 10)
    with pytest.raises(ValueError, match="positions"):
        posemb.axial_rope_cos_sin(np.int64(3), 8)
    with pytest.raises(ValueError, match="positions"):
        posemb.axial_rope_cos_sin(np.zeros((4, 2), int) - 1, 8)
    with pytest.raises(TypeError, match="positions"):
        posemb.axial_rope_cos_sin(np.zeros((4, 2)), 8)

# ---------------------------------------------------------------- xPos


def lucidrains_xpos(q, k, dim, scale_base, base=10000.0):
    """rotary-embedding-torch RotaryEmbedding(dim, use_xpos=True).rotate_queries_and_keys
    (interleaved: repeat '(n r)', its rotate_half pairs (2i, 2i+1)), float64."""
    seq_len = q.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2)[: dim // 2].double() / dim))
    scale = (torch.arange(0, dim, 2).double() + 0.4 * dim) / (1.4 * dim)
    t = torch.arange(seq_len, dtype=torch.float64)
    freqs = torch.einsum("i,j->ij", t, inv_freq).repeat_interleave(2, -1)
    power = (t - seq_len // 2) / scale_base
    s = (scale ** power[:, None]).repeat_interleave(2, -1)
    rq = q * freqs.cos() * s + rotate_every_two(q) * freqs.sin() * s
    rk = k * freqs.cos() * s ** -1 + rotate_every_two(k) * freqs.sin() * s ** -1
    return rq, rk


def torchscale_xpos(x, head_dim, scale_base=512, offset=0, downscale=False):
    """torchscale XPOS.forward, x (batch*heads, length, head_dim), float64."""
    scale_buf = (torch.arange(0, head_dim, 2).double() + 0.4 * head_dim) / (1.4 * head_dim)
    length = x.shape[1]
    min_pos = -(length + offset) // 2
    max_pos = length + offset + min_pos
    scale = scale_buf ** torch.arange(min_pos, max_pos, 1).double().div(scale_base)[:, None]
    seq_len, dim = scale.shape
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim).double() / dim))
    inp = torch.einsum("i , j -> i j", torch.arange(0, seq_len, dtype=torch.float64), inv_freq)
    sin, cos = torch.sin(inp), torch.cos(inp)
    if scale.shape[0] > length:
        scale, sin, cos = scale[-length:], sin[-length:], cos[-length:]
    if downscale:
        scale = 1 / scale
    sin, cos = (t.repeat_interleave(2, -1) for t in (sin * scale, cos * scale))
    return x * cos + rotate_every_two(x) * sin


def test_xpos_matches_lucidrains(rng):
    dim, seq = 32, 23
    q = rng.standard_normal((2, 3, seq, dim))
    k = rng.standard_normal((2, 3, seq, dim))
    cq, sq, ck, sk = posemb.xpos_cos_sin(np.arange(seq), dim, scale_base=16, center=seq // 2,
                                         interleaved=True, dtype=np.float64)
    rq, rk = lucidrains_xpos(T(q), T(k), dim, 16)
    np.testing.assert_allclose(posemb.apply_rope(q, cq, sq, interleaved=True), rq.numpy(),
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(posemb.apply_rope(k, ck, sk, interleaved=True), rk.numpy(),
                               rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("offset", [0, 9])
def test_xpos_matches_torchscale(rng, offset):
    hd, length = 16, 12
    x = rng.standard_normal((4, length, hd))
    pos = np.arange(offset, offset + length)
    center = -(-(length + offset) // 2)
    cq, sq, ck, sk = posemb.xpos_cos_sin(pos, hd, scale_base=512, center=center,
                                         interleaved=True, dtype=np.float64)
    np.testing.assert_allclose(posemb.apply_rope(x, cq, sq, interleaved=True),
                               torchscale_xpos(T(x), hd, offset=offset).numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(posemb.apply_rope(x, ck, sk, interleaved=True),
                               torchscale_xpos(T(x), hd, offset=offset, downscale=True).numpy(),
                               rtol=1e-13, atol=1e-13)


def test_xpos_relative_decay_and_layouts(rng):
    dim = 16
    q, k = rng.standard_normal(dim), rng.standard_normal(dim)

    def score(pq, pk, center):
        cq, sq, _, _ = posemb.xpos_cos_sin(np.array(pq), dim, scale_base=8, center=center,
                                           dtype=np.float64)
        _, _, ck, sk = posemb.xpos_cos_sin(np.array(pk), dim, scale_base=8, center=center,
                                           dtype=np.float64)
        return posemb.apply_rope(q, cq, sq) @ posemb.apply_rope(k, ck, sk)

    # depends on p_q - p_k only, whatever the center
    assert score(30, 20, 0) == pytest.approx(score(130, 120, 77), rel=1e-12)
    # half-split tables are the interleaved ones with the features reordered
    cq, sq, ck, sk = posemb.xpos_cos_sin(np.arange(5), dim, center=2, dtype=np.float64)
    iq = posemb.xpos_cos_sin(np.arange(5), dim, center=2, interleaved=True, dtype=np.float64)
    np.testing.assert_array_equal(cq[:, :dim // 2], iq[0][:, 0::2])
    np.testing.assert_array_equal(ck[:, dim // 2:], iq[2][:, 1::2])
    # float32 tables are the float64 ones rounded once
    f32 = posemb.xpos_cos_sin(np.arange(5), dim, center=2)
    for a, b in zip(f32, (cq, sq, ck, sk)):
        np.testing.assert_array_equal(a, b.astype(np.float32))


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(scale_base=0), ValueError, "scale_base"),
    (dict(scale_base="x"), TypeError, "scale_base"),
    (dict(center=float("nan")), ValueError, "center"),
    (dict(positions=np.array([0, 10**6])), ValueError, "center"),
    (dict(positions=np.array([0.5])), TypeError, "positions"),
    (dict(dim=7), ValueError, "dim"),
    (dict(dtype=np.int32), TypeError, "dtype"),
])
def test_xpos_bad_input(kwargs, err, match):
    args = dict(positions=np.arange(4), dim=8)
    args.update(kwargs)
    with pytest.raises(err, match=match):
        posemb.xpos_cos_sin(args.pop("positions"), args.pop("dim"), **args)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_apply_varlen_uses_the_cache(rng, interleaved):
    dim, orig = 16, 64
    rs = {"rope_type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)],
          "long_factor": [2.0 + i for i in range(8)], "original_max_position_embeddings": orig}
    rope = posemb.RoPE(dim, 8, scaling=rs, max_position_embeddings=4 * orig,
                       interleaved=interleaved)
    cu = np.array([0, 5, 5, 17])
    x = rng.standard_normal((17, 2, dim)).astype(np.float32)
    for offs in (np.array([0, 0, 0]), np.array([3, 9, 60])):   # within / past the context
        need = int((offs + np.diff(cu)).max())
        c, s = posemb.rope_cos_sin(np.arange(need), dim, scaling=rs,
                                   max_position_embeddings=4 * orig, interleaved=interleaved)
        want = posemb.apply_rope_varlen(x, cu, c, s, interleaved=interleaved, offset=offs)
        np.testing.assert_array_equal(rope.apply_varlen(x, cu, offset=offs), want)
        # = the module applied to each sequence on its own
        for b in range(3):
            seq = x[cu[b]:cu[b + 1]].transpose(1, 0, 2)
            if seq.shape[1]:
                pos = np.arange(int(offs[b]), int(offs[b]) + seq.shape[1])
                cc, ss = posemb.rope_cos_sin(pos, dim, scaling=rs, max_position_embeddings=4 * orig,
                                             interleaved=interleaved, seq_len=need)
                np.testing.assert_array_equal(want[cu[b]:cu[b + 1]].transpose(1, 0, 2),
                                              posemb.apply_rope(seq, cc, ss, interleaved=interleaved))
    x2 = x.copy()
    assert rope.apply_varlen(x2, cu, out=x2) is x2
    with pytest.raises(ValueError, match="cu_seqlens"):   # no huge table is made first
        rope.apply_varlen(x, np.array([0, 2**40, 17]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        rope.apply_varlen(x, np.array([0, 20, 17]))
    with pytest.raises(ValueError, match="x"):
        rope.apply_varlen(x[..., :8], cu)
    with pytest.raises(ValueError, match="offset"):
        rope.apply_varlen(x, cu, offset=np.array([1, 2]))
