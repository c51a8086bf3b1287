"""One call of each posemb kernel family on small arrays, and the error paths,
for .ci/valgrind.sh (memcheck).  Small on purpose: valgrind runs it ~50x slower."""
import os
import sys

import numpy as np

import posemb
from posemb import _core

rng = np.random.default_rng(0)
# outputs past 4 MiB stream, as in the test suite (by default only from 3/4
# of the last-level cache: see pe_cpu_stream_min_bytes)
_core._stream_min_bytes(4 << 20)


def expect_error(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except (TypeError, ValueError, IndexError, MemoryError):
        return
    raise AssertionError(f"{fn} did not raise")


# every registered public call once (tests/registry.py), then the families' layouts below
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import registry  # noqa: E402

for _name, _fn, _args, _kwargs, _ in registry.REGISTRY:
    _fn(*_args, **_kwargs)
for _name, _fn, _args, _kwargs in registry.ERROR_CALLS:
    expect_error(_fn, *_args, **_kwargs)


# RoPE: gufunc path (every dtype, both layouts, partial, strided, in place), grid path, tables
for dt in (np.float16, np.float32, np.float64):
    x = rng.standard_normal((2, 5, 10)).astype(dt)
    cos, sin = posemb.rope_cos_sin(np.arange(5), 8, dtype=dt)
    for il in (False, True):
        y = posemb.apply_rope(x, cos, sin, interleaved=il)
        posemb.apply_rope_backward(y[:, ::-1], cos[::-1], sin[::-1], interleaved=il)
        posemb.apply_rope(x, cos, sin, interleaved=il, out=x)
    posemb.rotate_half(x)
    posemb.neg_half(x, axis=0)
    xb = rng.standard_normal((2, 4, 64, 64)).astype(dt)
    cb, sb = posemb.rope_cos_sin(np.arange(64), 64, dtype=dt)
    posemb.apply_rope(xb, cb, sb)
    posemb.apply_rope(xb[:, :, ::-1], cb, sb, interleaved=True, out=np.empty_like(xb))
rope = posemb.RoPE(16, 8, rotary_dim=8)
rope(rng.standard_normal((3, 12, 16)), offset=2)
rope.backward(rng.standard_normal((3, 12, 16)).astype(np.float16), np.arange(12))
posemb.precompute_freqs_cis(16, 8)
posemb.apply_rotary_emb(np.ones((1, 4, 2, 8)), np.ones((1, 4, 1, 8)),
                        posemb.precompute_freqs_cis(8, 4))
posemb.apply_rotary_pos_emb(np.ones((1, 2, 4, 8)), np.ones((1, 1, 4, 8)),
                            *posemb.rope_cos_sin(np.arange(4)[None], 8))

# packed variable-length batches (rope_varlen.c): every dtype, strided x and tables,
# per-sequence offsets, in place, and the C checks' error path
for dt in (np.float16, np.float32, np.float64):
    xv = rng.standard_normal((9, 3, 10)).astype(dt)
    cv, sv = posemb.rope_cos_sin(np.arange(12), 8, dtype=dt)
    cu = np.array([0, 4, 4, 9])
    posemb.apply_rope_varlen(xv[:, ::-1], cu, cv[::-1], sv[::-1], offset=np.array([2, 0, 7]))
    posemb.apply_rope_varlen(xv, cu, cv, sv, interleaved=True, out=xv)
    rope.apply_varlen(rng.standard_normal((9, 2, 16)).astype(dt), cu, offset=2**40)
    expect_error(posemb.apply_rope_varlen, xv, cu, cv[:4], sv[:4])
    expect_error(posemb.apply_rope_varlen, xv, np.array([0, 5, 4, 9]), cv, sv)

# sinusoidal
for dt in (np.float16, np.float32, np.float64):
    for layout in ("interleaved", "concat"):
        posemb.sinusoidal(70, 9, start=2**40, layout=layout, dtype=dt)
        posemb.add_sinusoidal(rng.standard_normal((2, 7, 9)).astype(dt), start=3, layout=layout)
posemb.AbsolutePE(8, 16)(np.ones((2, 8, 5), np.float32), seq_axis=-1, feature_axis=-2)
# the grid kernel: column tiles, batch groups, and streaming stores into a
# 5 MiB out that is not vector-aligned (valgrind hides AVX-512: the AVX2 form)
_core.sinusoidal_add_rows(np.ones((3, 1, 9000), np.float32), np.ones((1, 9000), np.float32))
_core.sinusoidal_add_rows(np.ones((40, 1, 8)), np.ones((1, 8)))
xs = np.ones((5, 256, 1024), np.float32)
ys = np.empty(xs.size + 4, np.float32)[1:1 + xs.size].reshape(xs.shape)
_core.sinusoidal_add_rows(xs, np.ones((256, 1024), np.float32), out=ys)
assert ys[-1, -1, -1] == 2.0
del xs, ys

# learned
for dt in (np.float16, np.float32, np.float64):
    x = rng.standard_normal((3, 6, 8)).astype(dt)
    w = rng.standard_normal((10, 8)).astype(dt)
    posemb.learned_pe_forward(x, w, np.array([9, 0, 9, 3, 3, 1]))
    posemb.learned_pe_backward(x, np.array([9, 0, 9, 3, 3, 1]), num_positions=10)
    posemb.learned_pe_backward(rng.standard_normal((300, 8)).astype(dt),
                               rng.integers(0, 10, 300), num_positions=10)
pe = posemb.LearnedPE(10, 8, seed=0)
pe.backward(pe(np.ones((2, 4, 8), np.float32), offset=3), offset=3)
# an output past 4 MiB (streaming stores, table-row prefetch)
xl = rng.standard_normal((2, 520, 1024)).astype(np.float32)
posemb.learned_pe_forward(xl, rng.standard_normal((600, 1024)).astype(np.float32),
                          rng.integers(0, 600, (2, 520)), out=np.empty_like(xl))

# relative
posemb.t5_relative_position_bucket(np.array([-2**63, -64, -1, 0, 1, 15, 16, 2**63 - 1]))
for dt in (np.float16, np.float32, np.float64):
    t = rng.standard_normal((32, 3)).astype(dt)
    posemb.t5_relative_bias(t, 7, 9, query_offset=-4)
    posemb.t5_relative_bias_backward(rng.standard_normal((2, 3, 7, 9)).astype(dt),
                                     num_buckets=32, query_length=7, key_length=9)
    posemb.relative_embeddings(rng.standard_normal((5, 4)).astype(dt), 6, 8)
    posemb.relative_embeddings_backward(rng.standard_normal((6, 8, 4)).astype(dt), 2, 6, 8)
posemb.relative_position_index(6, 9, 3)

# ALiBi, masks, attention
posemb.alibi_bias(6, 5, 9, dtype=np.float16)
posemb.alibi_bias([0.5, 0.25], 5, 9, symmetric=True, query_offset=-3)
posemb.causal_mask(5, 9, window=3)
posemb.padding_mask([0, 3, 9], 9, side="left")
posemb.create_padding_mask([1, 4], 5)
posemb.scaled_dot_product_attention(np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 2)),
                                    mask=posemb.causal_mask(3, 5),
                                    bias=posemb.alibi_bias(2, 3, 5))

# the output cache: a large output kept, taken back, resized, released
xc = np.ones((1, 2, 4096, 128), np.float32)            # 4 MiB: the cache's smallest block
cc, sc = posemb.rope_cos_sin(np.arange(4096), 128)
y = posemb.apply_rope(xc, cc, sc)
del y
y = posemb.apply_rope(xc, cc, sc)
y.resize((16,), refcheck=False)
del y
y = posemb.add_sinusoidal(xc)
posemb.empty_cache()
del y
posemb.set_output_cache(0)
expect_error(_core._out_cache_empty, (2, -3), np.dtype(np.float32))
expect_error(_core._out_cache_empty, (2, 3), np.float32)

# error paths: Python checks and the C functions' own checks
expect_error(posemb.apply_rope, np.ones((3, 4)), np.ones((3, 6)), np.ones((3, 6)))
expect_error(posemb.learned_pe_forward, np.ones((3, 4)), np.ones((2, 4)), np.array([0, 1, 2]))
expect_error(posemb.t5_relative_bias, np.ones((31, 2)), 3, 3)
expect_error(posemb.RoPE, 2**40, 2**40)
expect_error(posemb.causal_mask, 2**40, 2**40)
expect_error(_core._t5_bias, np.ones((32, 2), np.float32), np.ones((3, 3, 3), np.float32),
             True, 128, 0)
expect_error(_core._learned_back, np.ones((3, 4), np.float32), np.array([0, 5, 1]),
             np.zeros((4, 4), np.float32))
expect_error(_core._shaw_embed, np.ones((4, 2)), np.ones((3, 3, 2)))
expect_error(_core._sinusoidal_table, -1, np.ones(2), False, np.ones((2, 4)))
xg = np.ones((1, 1, 2, 4))
expect_error(_core.rope_half_fwd, xg, np.ones((1, 3, 4)), np.ones((1, 3, 4)))
expect_error(_core._padding_mask, np.array([5]), np.zeros((1, 3), bool), False)
posemb.set_num_threads(1)
posemb.apply_rope(xb, cb, sb)
print("valgrind driver: done")
