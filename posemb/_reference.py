"""Slow, obviously-correct float64 oracles for every posemb kernel.

Each function is written from the published formulas (the papers and the
Hugging Face / Meta / PyTorch functions named in its docstring) in plain loops or simple NumPy, independent of the C kernels, so the tests can
check a fast path against it over any shape, stride, dtype and position (the
habit of bottleneck's ``slow/`` package).  Results are float64 (int64 for
indices and buckets, bool for masks); inputs are read, never written.
Nothing here is fast, and nothing here validates arguments: give it
well-formed inputs.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "inv_freq",
    "rope_cos_sin",
    "apply_rope",
    "apply_rope_backward",
    "rotate_half",
    "precompute_freqs_cis",
    "apply_rotary_emb",
    "rope_scaling",
    "apply_rope_varlen",
    "convert_rope_layout",
    "mrope_cos_sin",
    "axial_rope_cos_sin",
    "xpos_cos_sin",
    "sinusoidal",
    "learned_forward",
    "learned_backward",
    "t5_bucket",
    "t5_bias",
    "t5_bias_backward",
    "shaw_index",
    "shaw_embeddings",
    "shaw_embeddings_backward",
    "alibi_slopes",
    "alibi_bias",
    "causal_mask",
    "padding_mask",
    "attention",
]


# ------------------------------------------------------------------ RoPE

def inv_freq(dim: int, base: float = 10000.0) -> np.ndarray:
    """``inv_freq[i] = base ** (-(2*i)/dim)`` for ``i < dim // 2``."""
    return np.array([float(base) ** (-(2.0 * i) / dim) for i in range(dim // 2)],
                    dtype=np.float64)


def rope_cos_sin(positions: Any, dim: int, base: float = 10000.0, *, interleaved: bool = False,
                 scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Full-width ``(cos, sin)`` of shape ``positions.shape + (dim,)``, float64.

    ``angle[p, i] = p * scale * inv_freq[i]``; half-split repeats the ``h``
    values as ``concat(c, c)``, interleaved repeats each one twice.
    """
    pos = np.asarray(positions)
    w = inv_freq(dim, base) * scale
    h = dim // 2
    cos = np.zeros(pos.shape + (dim,), np.float64)
    sin = np.zeros(pos.shape + (dim,), np.float64)
    for idx in np.ndindex(pos.shape):
        p = float(int(pos[idx]))
        for i in range(h):
            c, s = math.cos(p * w[i]), math.sin(p * w[i])
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + h)
            cos[idx + (a,)] = cos[idx + (b,)] = c
            sin[idx + (a,)] = sin[idx + (b,)] = s
    return cos, sin


def _pairs(r: int, interleaved: bool) -> list[tuple[int, int]]:
    h = r // 2
    return [((2 * i, 2 * i + 1) if interleaved else (i, i + h)) for i in range(h)]


def _rotate(x: Any, cos: Any, sin: Any, interleaved: bool, backward: bool) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    cos = np.asarray(cos, dtype=np.float64)
    sin = np.asarray(sin, dtype=np.float64)
    r = cos.shape[-1]
    lead = np.broadcast_shapes(x.shape[:-1], cos.shape[:-1], sin.shape[:-1])
    x = np.broadcast_to(x, lead + x.shape[-1:])
    cos = np.broadcast_to(cos, lead + (r,))
    sin = np.broadcast_to(sin, lead + (r,))
    y = np.array(x, dtype=np.float64)          # features >= r pass through
    for a, b in _pairs(r, interleaved):
        xa, xb = x[..., a], x[..., b]
        if not backward:
            # the 2x2 matrix [[c_a, -s_a], [s_b, c_b]] of x*cos + rotate(x)*sin
            y[..., a] = xa * cos[..., a] - xb * sin[..., a]
            y[..., b] = xb * cos[..., b] + xa * sin[..., b]
        else:
            # its transpose (the gradient with respect to x)
            y[..., a] = xa * cos[..., a] + xb * sin[..., b]
            y[..., b] = xb * cos[..., b] - xa * sin[..., a]
    return y


def apply_rope(x: Any, cos: Any, sin: Any, *, interleaved: bool = False) -> np.ndarray:
    """RoPE forward: rotate pairs of the first ``r = cos.shape[-1]`` features."""
    return _rotate(x, cos, sin, interleaved, False)


def apply_rope_backward(grad: Any, cos: Any, sin: Any, *, interleaved: bool = False) -> np.ndarray:
    """Adjoint of :func:`apply_rope` (the transpose of each 2x2 rotation)."""
    return _rotate(grad, cos, sin, interleaved, True)


def rotate_half(x: Any, axis: int = -1) -> np.ndarray:
    """``concat(-x[h:], x[:h])`` along ``axis``."""
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    h = x.shape[-1] // 2
    y = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return np.moveaxis(y, -1, axis)


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> np.ndarray:
    """Meta's ``polar(1, t * inv_freq)``, complex128 ``(end, dim // 2)``."""
    w = inv_freq(dim, theta)
    out = np.zeros((end, dim // 2), np.complex128)
    for t in range(end):
        for i in range(dim // 2):
            out[t, i] = complex(math.cos(t * w[i]), math.sin(t * w[i]))
    return out


def apply_rotary_emb(xq: Any, xk: Any, freqs_cis: Any) -> tuple[np.ndarray, np.ndarray]:
    """Meta's ``view_as_complex(x.reshape(..., h, 2)) * freqs_cis`` (seq on axis 1)."""
    fc = np.asarray(freqs_cis, dtype=np.complex128)
    res = []
    for x in (xq, xk):
        x = np.asarray(x, dtype=np.float64)
        xc = x.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2))
        xc = xc[..., 0] + 1j * xc[..., 1]
        f = fc.reshape((1, fc.shape[0]) + (1,) * (x.ndim - 3) + (fc.shape[1],))
        yc = xc * f
        y = np.stack([yc.real, yc.imag], axis=-1).reshape(x.shape)
        res.append(y)
    return res[0], res[1]


# ------------------------------------------------------------------ RoPE scaling and variants

def rope_scaling(dim: int, base: float = 10000.0, scaling: Any = None, *,
                 max_position_embeddings: Any = None, seq_len: Any = None) -> Any:
    """``(inv_freq, attention_factor)`` of HF ``modeling_rope_utils.py`` (``_compute_*_parameters``),
    one frequency at a time in float64."""
    cfg = dict(scaling or {})
    kind = cfg.get("rope_type", cfg.get("type", "default"))
    kind = "default" if kind == "mrope" else kind
    h = dim // 2
    plain = [float(base) ** (-(2.0 * i) / dim) for i in range(h)]
    attn = 1.0
    if kind == "default":
        inv = plain
    elif kind == "linear":
        inv = [w / float(cfg["factor"]) for w in plain]
    elif kind == "dynamic":
        factor, mp = float(cfg["factor"]), int(max_position_embeddings)
        L = max(seq_len or 0, mp)
        if L > mp:
            b = float(base) * (factor * L / mp - (factor - 1.0)) ** (dim / (dim - 2))
            inv = [b ** (-(2.0 * i) / dim) for i in range(h)]
        else:
            inv = plain
    elif kind == "llama3":
        factor, low, high = (float(cfg[k]) for k in ("factor", "low_freq_factor",
                                                       "high_freq_factor"))
        orig = int(cfg["original_max_position_embeddings"])
        lw, hw = orig / low, orig / high
        inv = []
        for w in plain:
            wl = 2.0 * math.pi / w
            if wl < hw:
                inv.append(w)
            elif wl > lw:
                inv.append(w / factor)
            else:
                s = (orig / wl - low) / (high - low)
                inv.append((1.0 - s) * w / factor + s * w)
    elif kind == "yarn":
        factor = float(cfg["factor"])
        orig = int(cfg.get("original_max_position_embeddings") or max_position_embeddings)

        def m(scale: float, mscale: float = 1.0) -> float:
            return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0

        if cfg.get("attention_factor") is not None:
            attn = float(cfg["attention_factor"])
        elif cfg.get("mscale") and cfg.get("mscale_all_dim"):
            attn = m(factor, float(cfg["mscale"])) / m(factor, float(cfg["mscale_all_dim"]))
        else:
            attn = m(factor)

        def cd(r: float) -> float:
            return dim * math.log(orig / (r * 2.0 * math.pi)) / (2.0 * math.log(base))

        lo, hi = cd(float(cfg.get("beta_fast") or 32)), cd(float(cfg.get("beta_slow") or 1))
        if cfg.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        inv = []
        for i, w in enumerate(plain):
            ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
            inv.append((w / factor) * ramp + w * (1.0 - ramp))
    elif kind == "longrope":
        orig = int(cfg.get("original_max_position_embeddings") or max_position_embeddings)
        long = seq_len is not None and seq_len > orig
        ext = [float(v) for v in cfg["long_factor" if long else "short_factor"]]
        inv = [1.0 / (ext[i] * float(base) ** ((2.0 * i) / dim)) for i in range(h)]
        if cfg.get("factor") is not None:
            factor = float(cfg["factor"])
        elif max_position_embeddings is not None:
            factor = max_position_embeddings / orig
        else:
            factor = 1.0
        if cfg.get("attention_factor") is not None:
            attn = float(cfg["attention_factor"])
        elif factor > 1.0:
            attn = math.sqrt(1.0 + math.log(factor) / math.log(orig))
    else:
        raise ValueError(kind)
    return np.array(inv, np.float64), float(attn)


def apply_rope_varlen(x: Any, cu_seqlens: Any, cos: Any, sin: Any, *,
                      interleaved: bool = False, offset: Any = 0) -> np.ndarray:
    """A packed ``(total, heads, d)`` batch: sequence ``b`` (tokens ``cu[b] .. cu[b+1]-1``)
    rotated by table rows ``offset[b] .. offset[b] + len - 1``, one sequence at a time."""
    x = np.asarray(x, dtype=np.float64)
    cu = [int(v) for v in np.asarray(cu_seqlens).reshape(-1)]
    off = np.broadcast_to(np.asarray(offset, dtype=object), (len(cu) - 1,))
    cos = np.asarray(cos, dtype=np.float64)
    sin = np.asarray(sin, dtype=np.float64)
    y = np.array(x)
    for b in range(len(cu) - 1):
        rows = int(off[b]) + np.arange(cu[b + 1] - cu[b])
        seg = x[cu[b]:cu[b + 1]]                               # (len, heads, d)
        y[cu[b]:cu[b + 1]] = apply_rope(seg, cos[rows][:, None], sin[rows][:, None],
                                        interleaved=interleaved)
    return y


def convert_rope_layout(weight: Any, num_heads: int, *, to: str = "half",
                        rotary_dim: Any = None) -> np.ndarray:
    """HF ``convert_llama_weights_to_hf.permute``: within each head, rows
    ``(2i, 2i+1)`` become ``(i, i + r/2)`` (``to="half"``), or the inverse."""
    w = np.asarray(weight)
    head_dim = w.shape[0] // num_heads
    r = head_dim if rotary_dim is None else rotary_dim
    out = np.array(w)
    for hd in range(num_heads):
        base = hd * head_dim
        for i in range(r // 2):
            for j in range(2):                     # interleaved row 2i + j <-> half row j*r/2 + i
                inter, half = base + 2 * i + j, base + j * (r // 2) + i
                if to == "half":
                    out[half] = w[inter]
                else:
                    out[inter] = w[half]
    return out


def _band_tables(positions_per_band: Any, inv_per_band: Any, interleaved: bool) -> Any:
    """Full-width tables where consecutive frequency bands use their own positions."""
    h = sum(len(f) for f in inv_per_band)
    shape = np.asarray(positions_per_band[0]).shape
    cos = np.zeros(shape + (2 * h,), np.float64)
    sin = np.zeros(shape + (2 * h,), np.float64)
    i = 0
    for pos, inv in zip(positions_per_band, inv_per_band):
        pos = np.asarray(pos)
        for w in inv:
            for idx in np.ndindex(shape):
                a = float(int(pos[idx])) * float(w)
                c, s = math.cos(a), math.sin(a)
                for col in ((2 * i, 2 * i + 1) if interleaved else (i, i + h)):
                    cos[idx + (col,)] = c
                    sin[idx + (col,)] = s
            i += 1
    return cos, sin


def mrope_cos_sin(positions: Any, dim: int, mrope_section: Any, base: float = 10000.0, *,
                  interleaved: bool = False) -> Any:
    """Qwen2-VL: frequency band ``j`` of ``mrope_section`` rotates at ``positions[j]``."""
    pos = np.asarray(positions)
    w = inv_freq(dim, base)
    bands, a = [], 0
    for n in mrope_section:
        bands.append(w[a:a + n])
        a += n
    return _band_tables([pos[j] for j in range(len(bands))], bands, interleaved)


def axial_rope_cos_sin(positions: Any, dim: int, base: float = 10000.0, *,
                       interleaved: bool = False) -> Any:
    """Axis ``j`` of ``positions[..., j]`` rotates group ``j`` of ``dim / n_axes`` features
    with the frequencies of a RoPE of that width."""
    pos = np.asarray(positions)
    axes = pos.shape[-1]
    w = inv_freq(dim // axes, base)
    return _band_tables([pos[..., j] for j in range(axes)], [w] * axes, interleaved)


def xpos_cos_sin(positions: Any, dim: int, base: float = 10000.0, *, scale_base: float = 512.0,
                 center: float = 0.0, interleaved: bool = False) -> Any:
    """Sun et al.: ``zeta_i = (2i + 0.4 dim) / (1.4 dim)``, ``power = (p - center) / scale_base``;
    ``(cos*z**power, sin*z**power, cos/z**power, sin/z**power)``."""
    pos = np.asarray(positions)
    cos, sin = rope_cos_sin(pos, dim, base, interleaved=interleaved)
    h = dim // 2
    scale = np.zeros(pos.shape + (dim,), np.float64)
    for idx in np.ndindex(pos.shape):
        power = (float(int(pos[idx])) - float(center)) / float(scale_base)
        for i in range(h):
            z = ((2.0 * i + 0.4 * dim) / (1.4 * dim)) ** power
            for col in ((2 * i, 2 * i + 1) if interleaved else (i, i + h)):
                scale[idx + (col,)] = z
    return cos * scale, sin * scale, cos / scale, sin / scale


# ------------------------------------------------------------------ sinusoidal

def sinusoidal(seq_len: int, dim: int, *, base: float = 10000.0, start: int = 0,
               layout: str = "interleaved") -> np.ndarray:
    """Vaswani's table for positions ``start .. start+seq_len-1``, float64.

    interleaved: ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``
    (an odd ``dim`` ends with a sine); concat: ``[sin(p w) | cos(p w)]`` with
    a zero last column for odd ``dim``; ``w_i = base ** (-2i/dim)``.
    """
    out = np.zeros((seq_len, dim), np.float64)
    h = dim // 2
    for k in range(seq_len):
        p = float(int(start) + k)
        for j in range(dim):
            if layout == "interleaved":
                w = float(base) ** (-(2.0 * (j // 2)) / dim)
                out[k, j] = math.sin(p * w) if j % 2 == 0 else math.cos(p * w)
            elif j < 2 * h:
                i = j % h
                w = float(base) ** (-(2.0 * i) / dim)
                out[k, j] = math.sin(p * w) if j < h else math.cos(p * w)
    return out


# ------------------------------------------------------------------ learned

def learned_forward(x: Any, weight: Any, positions: Any) -> np.ndarray:
    """``y[..., t, :] = x[..., t, :] + W[positions[..., t]]`` (positions broadcast)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    pos = np.broadcast_to(np.asarray(positions), x.shape[:-1])
    y = np.array(x)
    for idx in np.ndindex(x.shape[:-1]):
        y[idx] = x[idx] + w[int(pos[idx])]
    return y


def learned_backward(grad_out: Any, positions: Any, num_positions: int) -> np.ndarray:
    """``dW[p] = sum of grad_out over every token whose position is p``."""
    g = np.asarray(grad_out, dtype=np.float64)
    pos = np.broadcast_to(np.asarray(positions), g.shape[:-1])
    dw = np.zeros((num_positions, g.shape[-1]), np.float64)
    for idx in np.ndindex(g.shape[:-1]):
        dw[int(pos[idx])] += g[idx]
    return dw


# ------------------------------------------------------------------ T5 / Shaw

def t5_bucket(rp: int, *, bidirectional: bool = True, num_buckets: int = 32,
              max_distance: int = 128) -> int:
    """One HF ``_relative_position_bucket`` value, its float32 log included."""
    rp = int(rp)
    ret = 0
    if bidirectional:
        nb = num_buckets // 2
        ret += nb if rp > 0 else 0
        rp = abs(rp)
    else:
        nb = num_buckets
        rp = -min(rp, 0)
    max_exact = nb // 2
    if rp < max_exact:
        return ret + rp
    f32 = np.float32
    with np.errstate(over="ignore"):
        q = f32(f32(rp) / f32(max_exact))
    val = np.log(q) / f32(math.log(max_distance / max_exact)) * f32(nb - max_exact)
    large = max_exact + (int(val) if np.isfinite(val) else nb)
    return ret + min(large, nb - 1)


def t5_buckets(rp: Any, **kw: Any) -> np.ndarray:
    rp = np.asarray(rp)
    out = np.zeros(rp.shape, np.int64)
    for idx in np.ndindex(rp.shape):
        out[idx] = t5_bucket(int(rp[idx]), **kw)
    return out


def t5_bias(table: Any, query_length: int, key_length: int, *, bidirectional: bool = True,
            num_buckets: int = 32, max_distance: int = 128, query_offset: int = 0) -> np.ndarray:
    """``bias[h, i, j] = table[bucket(j - (query_offset + i)), h]``, float64."""
    t = np.asarray(table, dtype=np.float64)
    query_offset = int(query_offset)          # Python ints: no unsigned wrap-around
    out = np.zeros((t.shape[1], query_length, key_length), np.float64)
    for i in range(query_length):
        for j in range(key_length):
            b = t5_bucket(j - (query_offset + i), bidirectional=bidirectional,
                          num_buckets=num_buckets, max_distance=max_distance)
            out[:, i, j] = t[b]
    return out


def t5_bias_backward(grad_bias: Any, *, num_buckets: int, bidirectional: bool = True,
                     max_distance: int = 128, query_offset: int = 0) -> np.ndarray:
    """``grad_table[b, h]`` = sum of ``grad_bias[..., h, i, j]`` with bucket b."""
    g = np.asarray(grad_bias, dtype=np.float64)
    g = g.sum(axis=tuple(range(g.ndim - 3)))
    heads, q, k = g.shape
    query_offset = int(query_offset)
    out = np.zeros((num_buckets, heads), np.float64)
    for i in range(q):
        for j in range(k):
            b = t5_bucket(j - (query_offset + i), bidirectional=bidirectional,
                          num_buckets=num_buckets, max_distance=max_distance)
            out[b] += g[:, i, j]
    return out


def shaw_index(query_length: int, key_length: int, K: int) -> np.ndarray:
    """``clip(j - (key_length - query_length + i), -K, K) + K``, int64."""
    out = np.zeros((query_length, key_length), np.int64)
    for i in range(query_length):
        for j in range(key_length):
            out[i, j] = min(max(j - (key_length - query_length + i), -K), K) + K
    return out


def shaw_embeddings(table: Any, query_length: int, key_length: int) -> np.ndarray:
    t = np.asarray(table, dtype=np.float64)
    K = (t.shape[0] - 1) // 2
    idx = shaw_index(query_length, key_length, K)
    out = np.zeros((query_length, key_length, t.shape[1]), np.float64)
    for i in range(query_length):
        for j in range(key_length):
            out[i, j] = t[idx[i, j]]
    return out


def shaw_embeddings_backward(grad: Any, K: int) -> np.ndarray:
    g = np.asarray(grad, dtype=np.float64)
    q, k, d = g.shape
    idx = shaw_index(q, k, K)
    out = np.zeros((2 * K + 1, d), np.float64)
    for i in range(q):
        for j in range(k):
            out[idx[i, j]] += g[i, j]
    return out


# ------------------------------------------------------------------ ALiBi

def _slopes_pow2(n: int) -> list:
    return [2.0 ** (-8.0 / n * (i + 1)) for i in range(n)]


def alibi_slopes(n: int) -> np.ndarray:
    """Press's ``get_slopes`` (fairseq), recursively."""
    def slopes(n: int) -> list:
        if n & (n - 1) == 0:
            return _slopes_pow2(n)
        c = 2 ** math.floor(math.log2(n))
        return _slopes_pow2(c) + slopes(2 * c)[0::2][: n - c]
    return np.array(slopes(n), np.float64)


def alibi_bias(slopes: Any, query_length: int, key_length: int, *, symmetric: bool = False,
               query_offset: int | None = None) -> np.ndarray:
    """``-m_h * (p_i - j)`` (or ``-m_h * |p_i - j|``), ``p_i = query_offset + i``."""
    m = np.asarray(slopes, dtype=np.float64)
    off = key_length - query_length if query_offset is None else int(query_offset)
    out = np.zeros((m.shape[0], query_length, key_length), np.float64)
    for h in range(m.shape[0]):
        for i in range(query_length):
            for j in range(key_length):
                dist = (off + i) - j
                out[h, i, j] = -(m[h] * (abs(dist) if symmetric else dist))
    return out


# ------------------------------------------------------------------ masks

def causal_mask(query_length: int, key_length: int | None = None, *,
                window: int | None = None, query_offset: int | None = None) -> np.ndarray:
    """True where key j is visible from query i: ``j <= p_i`` (and ``p_i - W < j``)."""
    k = query_length if key_length is None else key_length
    off = k - query_length if query_offset is None else int(query_offset)
    out = np.zeros((query_length, k), bool)
    for i in range(query_length):
        p = off + i
        for j in range(k):
            out[i, j] = j <= p and (window is None or p - window < j)
    return out


def padding_mask(lengths: Any, max_length: int, *, side: str = "right") -> np.ndarray:
    """True at real tokens: ``p < n`` (right) or ``p >= max_length - n`` (left)."""
    lengths = [int(v) for v in np.asarray(lengths).reshape(-1)]
    out = np.zeros((len(lengths), max_length), bool)
    for b, n in enumerate(lengths):
        for p in range(max_length):
            out[b, p] = p < n if side == "right" else p >= max_length - n
    return out


# ------------------------------------------------------------------ attention

def attention(q: Any, k: Any, v: Any, *, mask: Any = None, bias: Any = None,
              scale: Any = None) -> np.ndarray:
    """``softmax(q k^T * scale + bias, masked) @ v`` row by row; a row with no
    visible key (or no keys) is zero.  q (..., L, E), k (..., S, E), v (..., S, Ev)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    E = q.shape[-1]
    scale = (1.0 / math.sqrt(E) if E else 1.0) if scale is None else scale
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    L, S = q.shape[-2], k.shape[-2]
    q = np.broadcast_to(q, lead + q.shape[-2:])
    k = np.broadcast_to(k, lead + k.shape[-2:])
    v = np.broadcast_to(v, lead + v.shape[-2:])
    b = np.broadcast_to(0.0 if bias is None else np.asarray(bias, np.float64), lead + (L, S))
    m = np.broadcast_to(True if mask is None else np.asarray(mask), lead + (L, S))
    out = np.zeros(lead + (L, v.shape[-1]), np.float64)
    for idx in np.ndindex(lead):
        for i in range(L):
            scores = []
            for j in range(S):
                s = sum(q[idx + (i, e)] * k[idx + (j, e)] for e in range(E)) * scale
                s += b[idx + (i, j)]
                if m.dtype == np.bool_:
                    s = s if m[idx + (i, j)] else -math.inf
                else:
                    s += float(m[idx + (i, j)])
                scores.append(s)
            top = max(scores, default=-math.inf)
            if top == -math.inf:
                continue
            e = [math.exp(s - top) for s in scores]
            total = sum(e)
            for j in range(S):
                out[idx + (i,)] += e[j] / total * v[idx + (j,)]
    return out
