"""posemb's kernels on a dask array chunked along the batch axis.

posemb's apply kernels are NumPy generalized ufuncs (``apply_rope`` is
``(d),(r),(r)->(d)``, ``learned_pe_forward`` is ``(d),(),(m,d)->(d)``), so a
dask array passed to them is handled by dask itself through NumPy's
``__array_ufunc__`` protocol: the call returns a lazy dask array, and each
chunk is later rotated by posemb's C kernel in its own task.  Only the core
axes (the features) must be whole in every chunk; batch, heads and
sequence may be split any way.  The same code runs on a dask.distributed
cluster when the data is larger than one machine's memory.

    python examples/dask_rope.py            # checks itself against NumPy
"""
from __future__ import annotations

import dask
import dask.array as da
import numpy as np

import posemb


def main(batch: int = 16, heads: int = 8, seq: int = 256, head_dim: int = 64,
         chunk: int = 4) -> dict[str, float]:
    # queries chunked along batch: (batch, heads, seq, head_dim), 4 sequences per chunk
    q = da.random.default_rng(0).standard_normal(
        (batch, heads, seq, head_dim), chunks=(chunk, heads, seq, head_dim), dtype=np.float32)

    # 1. apply_rope with shared (seq, head_dim) tables: lazy, one task per chunk
    cos, sin = posemb.rope_cos_sin(np.arange(seq), head_dim)
    q_rot = posemb.apply_rope(q, cos, sin)
    assert isinstance(q_rot, da.Array) and q_rot.chunks == q.chunks

    # 2. the RoPE module's cached tables, each sequence at its own offset
    #    (tables that vary along batch are chunked like q: dask's gufunc needs
    #    loop axes chunked alike)
    rope = posemb.RoPE(head_dim, 1024)
    offsets = np.arange(batch) * 7
    pos = offsets[:, None, None] + np.arange(seq)              # (batch, 1, seq)
    c_off, s_off = rope.cos_sin(pos)                           # (batch, 1, seq, head_dim)
    c_off = da.from_array(c_off, chunks=(chunk, 1, seq, head_dim))
    s_off = da.from_array(s_off, chunks=(chunk, 1, seq, head_dim))
    q_off = posemb.apply_rope(q, c_off, s_off)

    # 3. HF's drop-in on q and k, and a learned table added per token
    k = q[:, :2]                                               # 2 key/value heads
    hf_cos, hf_sin = posemb.rope_cos_sin(np.arange(seq)[None], head_dim)
    q_hf, k_hf = posemb.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    x = q.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head_dim)   # (batch, seq, dim)
    weight = np.random.default_rng(1).standard_normal((seq, heads * head_dim)).astype(np.float32)
    x_pe = posemb.learned_pe_forward(x, weight)

    # compute everything in one pass over the chunks (threads here; a cluster works alike)
    q_np, q_rot_np, q_off_np, q_hf_np, k_hf_np, x_pe_np = dask.compute(
        q, q_rot, q_off, q_hf, k_hf, x_pe)

    errors = {
        "apply_rope": float(np.abs(q_rot_np - posemb.apply_rope(q_np, cos, sin)).max()),
        "offsets": float(np.abs(q_off_np - rope(q_np, offset=offsets)).max()),
        "apply_rotary_pos_emb": float(max(
            np.abs(q_hf_np - posemb.apply_rope(q_np, hf_cos[:, None], hf_sin[:, None])).max(),
            np.abs(k_hf_np - posemb.apply_rope(q_np[:, :2], hf_cos[:, None],
                                               hf_sin[:, None])).max())),
        "learned_pe_forward": float(np.abs(
            x_pe_np - (q_np.transpose(0, 2, 1, 3).reshape(batch, seq, -1) + weight)).max()),
    }
    return errors


if __name__ == "__main__":
    errs = main()
    for name, err in errs.items():
        print(f"{name:22s} dask vs NumPy: max |diff| = {err:.3g}")
    assert all(e == 0.0 for e in errs.values()), errs
    print("dask results equal NumPy's bit for bit")
