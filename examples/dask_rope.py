"""posemb's kernels on a dask array chunked along the batch and head axes,
on threads or on a dask.distributed cluster of worker processes.

posemb's apply kernels are NumPy generalized ufuncs (``apply_rope`` is
``(h,s,d),(s,r),(s,r)->(h,s,d)`` and takes dask arrays vector by vector as
``(d),(r),(r)->(d)``, ``learned_pe_forward`` is ``(d),(),(m,d)->(d)``), so a
dask array passed to them is handled by dask itself through NumPy's
``__array_ufunc__`` protocol: the call returns a lazy dask array, and each
chunk is later rotated by posemb's C kernel in its own task.  Chunks may
split any axis: posemb merges a split feature axis (a core axis of the
gufunc) into one chunk and chunks its tables like the array, so a split
sequence keeps its positions.

A ``posemb.RoPE`` also travels to the workers itself (it pickles: its
parameters go, its tables are remade there), e.g. through ``map_blocks``.
Called on one block, it numbers the block's rows from 0 (plus ``offset``),
so a block must hold whole sequences: :func:`rope_blocks` merges chunks
that split the sequence or feature axis before mapping (an automatic
rechunk, never a silently wrong position).

    python examples/dask_rope.py              # threads; checks itself against NumPy
    python examples/dask_rope.py --cluster    # a LocalCluster of 2 worker processes
"""
from __future__ import annotations

import sys
from typing import Any

import dask
import dask.array as da
import numpy as np

import posemb


def rope_blocks(rope: posemb.RoPE, q: da.Array, offset: int = 0) -> da.Array:
    """``rope(q, offset=offset)`` block by block, with ``rope`` shipped to the workers.

    ``q`` is ``(..., seq, head_size)``.  Chunks that split the sequence axis
    (positions would restart in every chunk) or the feature axis (a rotation
    pairs features across the whole head) are merged first.
    """
    if q.ndim < 2:
        raise ValueError(f"q must have shape (..., seq, head_size), got {q.shape}")
    if len(q.chunks[-2]) > 1 or len(q.chunks[-1]) > 1:
        q = q.rechunk({q.ndim - 2: -1, q.ndim - 1: -1})
    return q.map_blocks(rope, offset=offset, dtype=q.dtype)


def main(batch: int = 16, heads: int = 8, seq: int = 256, head_dim: int = 64,
         chunk: int = 4, head_chunk: int | None = None,
         scheduler: Any = "threads") -> dict[str, float]:
    """Every result computed by dask (on ``scheduler``) minus NumPy's: max |diff|."""
    head_chunk = heads if head_chunk is None else head_chunk
    # queries (batch, heads, seq, head_dim), chunked along batch and heads
    q = da.random.default_rng(0).standard_normal(
        (batch, heads, seq, head_dim), chunks=(chunk, head_chunk, seq, head_dim),
        dtype=np.float32)

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

    # 3. the RoPE module itself on the workers (pickled into the graph), on
    #    q's chunks and on chunks that split the sequence (merged first)
    q_mod = rope_blocks(rope, q, offset=5)
    q_split = rope_blocks(rope, q.rechunk({2: seq // 4}), offset=5)

    # 4. HF's drop-in on q and k, and a learned table added per token
    k = q[:, :2]                                               # 2 key/value heads
    hf_cos, hf_sin = posemb.rope_cos_sin(np.arange(seq)[None], head_dim)
    q_hf, k_hf = posemb.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    x = q.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head_dim)   # (batch, seq, dim)
    x = x.rechunk({2: -1})                 # the features (a core axis) whole in each chunk
    weight = np.random.default_rng(1).standard_normal((seq, heads * head_dim)).astype(np.float32)
    x_pe = posemb.learned_pe_forward(x, weight)

    # compute everything in one pass over the chunks
    q_np, q_rot_np, q_off_np, q_mod_np, q_split_np, q_hf_np, k_hf_np, x_pe_np = dask.compute(
        q, q_rot, q_off, q_mod, q_split, q_hf, k_hf, x_pe, scheduler=scheduler)

    def diff(a: np.ndarray, b: np.ndarray) -> float:
        """0.0 only when a and b are equal bit for bit."""
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        if a.tobytes() == b.tobytes():
            return 0.0
        return float(np.abs(a - b).max()) or float("nan")     # e.g. -0.0 against 0.0

    return {
        "apply_rope": diff(q_rot_np, posemb.apply_rope(q_np, cos, sin)),
        "offsets": diff(q_off_np, rope(q_np, offset=offsets)),
        "RoPE on workers": max(diff(q_mod_np, rope(q_np, offset=5)),
                               diff(q_split_np, rope(q_np, offset=5))),
        "apply_rotary_pos_emb": max(
            diff(q_hf_np, posemb.apply_rope(q_np, hf_cos[:, None], hf_sin[:, None])),
            diff(k_hf_np, posemb.apply_rope(q_np[:, :2], hf_cos[:, None], hf_sin[:, None]))),
        "learned_pe_forward": diff(
            x_pe_np, q_np.transpose(0, 2, 1, 3).reshape(batch, seq, -1) + weight),
    }


def main_on_cluster(n_workers: int = 2, **kwargs: Any) -> dict[str, float]:
    """:func:`main` on a ``dask.distributed.LocalCluster`` of worker processes."""
    from dask.distributed import Client, LocalCluster

    with LocalCluster(processes=True, n_workers=n_workers, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        return main(scheduler=client, **kwargs)


if __name__ == "__main__":
    cluster = "--cluster" in sys.argv[1:]
    errs = (main_on_cluster(head_chunk=4) if cluster else main(head_chunk=4))
    where = "a LocalCluster (2 worker processes)" if cluster else "threads"
    for name, err in errs.items():
        print(f"{name:22s} dask on {where} vs NumPy: max |diff| = {err:.3g}")
    assert all(e == 0.0 for e in errs.values()), errs
    print("dask results equal NumPy's bit for bit")
