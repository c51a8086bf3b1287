"""The RoPEMultiHeadAttention example of PositionalEmbeddings.jl, in NumPy with posemb.

The Julia original (a Flux layer) works on column-major arrays of shape
``(d_model, seqlen, batch)``; the same memory in NumPy's row-major order is
``(batch, seqlen, d_model)``, which is what this port takes.  The steps are
the Julia ones: project with Wq, Wk, Wv; split heads; rotate q and k with
RoPE (half-split pairs, the Julia package's ``neg_half``); scaled, masked
attention; join heads; project with Wo.

Run it: ``python examples/rope_multihead_attention.py``.
"""
from __future__ import annotations

import math

import numpy as np

import posemb


def kaiming_normal(rng: np.random.Generator, fan_out: int, fan_in: int,
                   dtype: np.dtype) -> np.ndarray:
    """WeightInitializers' kaiming_normal: N(0, gain / sqrt(fan_in)), gain = sqrt(2)."""
    return (rng.standard_normal((fan_out, fan_in)) * math.sqrt(2.0 / fan_in)).astype(dtype)


class RoPEMultiHeadAttention:
    """Multi-head self-attention with rotary position embeddings on q and k.

    ``mha(x, mask=None)``: ``x`` is ``(batch, seqlen, d_model)``; ``mask`` is a
    boolean mask, True = may attend (for example
    ``posemb.create_causal_mask(seqlen)``), broadcast against the
    ``(batch, heads, seqlen, seqlen)`` scores.
    """

    def __init__(self, d_model: int, num_heads: int, *, maxlen: int = 1000,
                 rng: np.random.Generator | None = None, dtype=np.float32) -> None:
        head_dim = d_model // num_heads
        if head_dim * num_heads != d_model:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        rng = np.random.default_rng() if rng is None else rng
        self.Wq = kaiming_normal(rng, d_model, d_model, dtype)
        self.Wk = kaiming_normal(rng, d_model, d_model, dtype)
        self.Wv = kaiming_normal(rng, d_model, d_model, dtype)
        self.Wo = kaiming_normal(rng, d_model, d_model, dtype)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = math.sqrt(head_dim)
        self.rope = posemb.RoPE(head_dim, maxlen, dtype=dtype)

    def split_heads(self, x: np.ndarray) -> np.ndarray:
        """(batch, seqlen, d_model) -> (batch, heads, seqlen, head_dim)."""
        batch, seqlen, _ = x.shape
        return x.reshape(batch, seqlen, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)

    def join_heads(self, x: np.ndarray) -> np.ndarray:
        """(batch, heads, seqlen, head_dim) -> (batch, seqlen, d_model)."""
        batch, _, seqlen, _ = x.shape
        return x.transpose(0, 2, 1, 3).reshape(batch, seqlen, self.num_heads * self.head_dim)

    def __call__(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        # project (Julia: W * x per token) and split heads
        q = self.split_heads(x @ self.Wq.T)
        k = self.split_heads(x @ self.Wk.T)
        v = self.split_heads(x @ self.Wv.T)
        # RoPE on q and k at positions 0 .. seqlen-1
        q = self.rope(q)
        k = self.rope(k)
        # softmax(k^T (q / scale)) with the mask, as the Julia code does
        out = posemb.scaled_dot_product_attention(q, k, v, mask=mask, scale=1.0 / self.scale)
        return self.join_heads(out) @ self.Wo.T


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((32, 20, 512), dtype=np.float32)      # Julia: rand(512, 20, 32)
    mha = RoPEMultiHeadAttention(512, 8, rng=rng)
    y = mha(x)
    y_causal = mha(x, mask=posemb.create_causal_mask(20))
    print("input", x.shape, "-> output", y.shape, y.dtype)
    print("causal: first token unchanged by later tokens:",
          bool(np.allclose(y_causal[:, 0], mha(x[:, :1])[:, 0], atol=1e-5)))


if __name__ == "__main__":
    main()
