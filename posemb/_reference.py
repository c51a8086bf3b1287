"""Slow, obviously-correct float64 oracles for every posemb kernel.

Each function is written from the formulas of the project's REFERENCE.md in
plain loops or simple NumPy, independent of the C kernels, so the tests can
check a fast path against it over any shape, stride, dtype and position (the
habit of bottleneck's ``slow/`` package).  Results are float64 (int64 for
indices and buckets, bool for masks); inputs are read, never written.
Nothing here is fast, and nothing here validates arguments: give it
well-formed inputs.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = [
    "inv_freq",
    "rope_cos_sin",
    "apply_rope",
    "apply_rope_backward",
    "rotate_half",
    "precompute_freqs_cis",
    "apply_rotary_emb",
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


def rope_cos_sin(positions, dim: int, base: float = 10000.0, *, interleaved: bool = False,
                 scale: float = 1.0):
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


def _pairs(r: int, interleaved: bool):
    h = r // 2
    return [((2 * i, 2 * i + 1) if interleaved else (i, i + h)) for i in range(h)]


def _rotate(x, cos, sin, interleaved: bool, backward: bool) -> np.ndarray:
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


def apply_rope(x, cos, sin, *, interleaved: bool = False) -> np.ndarray:
    """RoPE forward: rotate pairs of the first ``r = cos.shape[-1]`` features."""
    return _rotate(x, cos, sin, interleaved, False)


def apply_rope_backward(grad, cos, sin, *, interleaved: bool = False) -> np.ndarray:
    """Adjoint of :func:`apply_rope` (the transpose of each 2x2 rotation)."""
    return _rotate(grad, cos, sin, interleaved, True)


def rotate_half(x, axis: int = -1) -> np.ndarray:
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


def apply_rotary_emb(xq, xk, freqs_cis):
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

def learned_forward(x, weight, positions) -> np.ndarray:
    """``y[..., t, :] = x[..., t, :] + W[positions[..., t]]`` (positions broadcast)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    pos = np.broadcast_to(np.asarray(positions), x.shape[:-1])
    y = np.array(x)
    for idx in np.ndindex(x.shape[:-1]):
        y[idx] = x[idx] + w[int(pos[idx])]
    return y


def learned_backward(grad_out, positions, num_positions: int) -> np.ndarray:
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


def t5_buckets(rp, **kw) -> np.ndarray:
    rp = np.asarray(rp)
    out = np.zeros(rp.shape, np.int64)
    for idx in np.ndindex(rp.shape):
        out[idx] = t5_bucket(int(rp[idx]), **kw)
    return out


def t5_bias(table, query_length: int, key_length: int, *, bidirectional: bool = True,
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


def t5_bias_backward(grad_bias, *, num_buckets: int, bidirectional: bool = True,
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


def shaw_embeddings(table, query_length: int, key_length: int) -> np.ndarray:
    t = np.asarray(table, dtype=np.float64)
    K = (t.shape[0] - 1) // 2
    idx = shaw_index(query_length, key_length, K)
    out = np.zeros((query_length, key_length, t.shape[1]), np.float64)
    for i in range(query_length):
        for j in range(key_length):
            out[i, j] = t[idx[i, j]]
    return out


def shaw_embeddings_backward(grad, K: int) -> np.ndarray:
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
    def slopes(n):
        if n & (n - 1) == 0:
            return _slopes_pow2(n)
        c = 2 ** math.floor(math.log2(n))
        return _slopes_pow2(c) + slopes(2 * c)[0::2][: n - c]
    return np.array(slopes(n), np.float64)


def alibi_bias(slopes, query_length: int, key_length: int, *, symmetric: bool = False,
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


def padding_mask(lengths, max_length: int, *, side: str = "right") -> np.ndarray:
    """True at real tokens: ``p < n`` (right) or ``p >= max_length - n`` (left)."""
    lengths = [int(v) for v in np.asarray(lengths).reshape(-1)]
    out = np.zeros((len(lengths), max_length), bool)
    for b, n in enumerate(lengths):
        for p in range(max_length):
            out[b, p] = p < n if side == "right" else p >= max_length - n
    return out


# ------------------------------------------------------------------ attention

def attention(q, k, v, *, mask=None, bias=None, scale=None) -> np.ndarray:
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
