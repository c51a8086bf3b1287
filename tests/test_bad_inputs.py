"""Bad input never crashes: every public function and method, each argument
given the wrong type, dtype, rank or shape, size 0, odd sizes, bad positions,
NaN/inf, huge sizes, odd layouts (non-contiguous, reversed, zero-stride,
byte-swapped, read-only, unaligned) and bad or overlapping ``out=``.

Table-driven: each public callable has a spec (a good call plus a kind for
each argument); generic variants per kind are generated from it.  Every case
either raises a clear exception naming the argument, or returns the result
the same call gives on plain C-contiguous copies of its inputs (or the
float64 oracle of posemb._reference).  Inputs other than ``out`` are never
modified.  ``test_case_count`` prints how many cases ran.
"""
import contextlib
import os
import resource

import numpy as np
import pytest

import posemb
from posemb import _reference as R

from _layouts import lay

# ------------------------------------------------------------------ kinds

F, SIZE, OFFSET, POS, REAL, DTYPE, FLAG, OUT, CHOICE, OTHER = (
    "float", "size", "offset", "pos", "real", "dtype", "flag", "out", "choice", "other")


class Spec:
    """A public callable with a good call and a kind for each argument.

    kinds[name] = (kind, options); options by kind:
      float: bad_shapes (list of ValueError shapes), optional (None is allowed)
      size:  minimum, optional, odd (odd values are a ValueError)
      pos:   err (IndexError or ValueError for negative/too large), top
      real:  positive
      out:   -
    """

    def __init__(self, name, fn, args, kinds, oracle=None, tol=0.0):
        self.name, self.fn, self.args, self.kinds = name, fn, dict(args), kinds
        self.oracle, self.tol = oracle, tol


def _x(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


X = _x((2, 3, 8))
COS, SIN = posemb.rope_cos_sin(np.arange(3), 8)
ROPE = posemb.RoPE(8, 6, rotary_dim=6)
APE = posemb.AbsolutePE(8, 6)
LPE = posemb.LearnedPE(6, 8, seed=1)
T5T = _x((32, 2))
T5G = _x((2, 3, 4))
SHT = _x((5, 3))
SHG = _x((3, 4, 3))


def rope_oracle(backward):
    def f(x, cos, sin, interleaved=False, out=None):
        fn = R.apply_rope_backward if backward else R.apply_rope
        return fn(np.array(x, np.float64), np.array(cos, np.float64), np.array(sin, np.float64),
                  interleaved=bool(interleaved))
    return f


SPECS = [
    Spec("rope_inv_freq", posemb.rope_inv_freq, dict(dim=8, base=10000.0),
         dict(dim=(SIZE, dict(odd=True)), base=(REAL, dict(positive=True)))),
    Spec("rope_cos_sin", posemb.rope_cos_sin,
         dict(positions=np.arange(3), dim=8, base=10000.0, interleaved=False, dtype=np.float32),
         dict(positions=(POS, dict(err=ValueError, top=2**53)), dim=(SIZE, dict(odd=True)),
              base=(REAL, dict(positive=True)), interleaved=(FLAG, {}), dtype=(DTYPE, {}))),
    Spec("apply_rope", posemb.apply_rope,
         dict(x=X, cos=COS, sin=SIN, interleaved=False, out=None),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 6), (2, 3, 7)])),
              cos=(F, dict(bad_shapes=[(), (3, 10), (3, 7), (2, 8)])),
              sin=(F, dict(bad_shapes=[(), (3, 6), (3, 7), (4, 8)])),
              interleaved=(FLAG, {}), out=(OUT, {})),
         oracle=rope_oracle(False), tol=1e-5),
    Spec("apply_rope_backward", posemb.apply_rope_backward,
         dict(grad=X, cos=COS, sin=SIN, interleaved=True, out=None),
         dict(grad=(F, dict(bad_shapes=[(), (2, 3, 6)])),
              cos=(F, dict(bad_shapes=[(), (3, 10), (3, 5)])),
              sin=(F, dict(bad_shapes=[(), (3, 6)])), interleaved=(FLAG, {}), out=(OUT, {})),
         oracle=lambda grad, cos, sin, interleaved, out: rope_oracle(True)(grad, cos, sin,
                                                                            interleaved),
         tol=1e-5),
    Spec("apply_rotary_pos_emb", posemb.apply_rotary_pos_emb,
         dict(q=_x((1, 2, 3, 8)), k=_x((1, 1, 3, 8)), cos=COS[None], sin=SIN[None],
              unsqueeze_dim=1),
         dict(q=(F, dict(bad_shapes=[(), (1, 2, 3, 6)])), k=(F, dict(bad_shapes=[(1, 1, 3, 4)])),
              cos=(F, dict(bad_shapes=[(), (1, 3, 10)])), sin=(F, dict(bad_shapes=[(1, 3, 6)])),
              unsqueeze_dim=(OFFSET, dict(bad=[(7, ValueError), (2**40, ValueError),
                                               (-9, ValueError)])))),
    Spec("rotate_half", posemb.rotate_half, dict(x=X),
         dict(x=(F, dict(bad_shapes=[(), (3, 7), (0, 5)]))),
         oracle=lambda x: R.rotate_half(np.array(x, np.float64))),
    Spec("neg_half", posemb.neg_half, dict(x=X, axis=-1),
         dict(x=(F, dict(bad_shapes=[(), (3, 7)])),
              axis=(OFFSET, dict(bad=[(3, ValueError), (1, ValueError), (2**40, ValueError),
                                      (-4, ValueError)]))),
         oracle=lambda x, axis: R.rotate_half(np.array(x, np.float64), axis)),
    Spec("precompute_freqs_cis", posemb.precompute_freqs_cis,
         dict(dim=8, end=5, theta=10000.0),
         dict(dim=(SIZE, dict(odd=True)), end=(SIZE, {}), theta=(REAL, dict(positive=True)))),
    Spec("apply_rotary_emb", posemb.apply_rotary_emb,
         dict(xq=_x((1, 3, 2, 8)), xk=_x((1, 3, 1, 8)),
              freqs_cis=posemb.precompute_freqs_cis(8, 3)),
         dict(xq=(F, dict(bad_shapes=[(), (1, 3, 2, 6), (1, 4, 2, 8), (3, 8)])),
              xk=(F, dict(bad_shapes=[(1, 3, 1, 7)])),
              freqs_cis=(OTHER, dict(bad=[(np.ones((3, 4)), TypeError),
                                          (np.ones((3, 3), complex), ValueError),
                                          (np.ones(12, complex), ValueError),
                                          ("x", TypeError), (None, TypeError)])))),
    Spec("compute_frequencies", posemb.compute_frequencies, dict(dim=8, seq_len=5, base=100.0),
         dict(dim=(SIZE, dict(odd=True)), seq_len=(SIZE, {}), base=(REAL, dict(positive=True)))),
    Spec("RoPE", posemb.RoPE,
         dict(head_size=8, seq_len=6, base=10000.0, scale=1.0, interleaved=False, rotary_dim=6,
              dtype=np.float32),
         dict(head_size=(SIZE, dict(minimum=1)), seq_len=(SIZE, {}),
              base=(REAL, dict(positive=True)), scale=(REAL, {}), interleaved=(FLAG, {}),
              rotary_dim=(SIZE, dict(minimum=2, odd=True, optional=True,
                                     bad=[(10, ValueError)])),
              dtype=(DTYPE, {}))),
    Spec("RoPE.__call__", ROPE, dict(x=X, positions=None, offset=0, out=None),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 6), (8,)])),
              positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(SIZE, {}), out=(OUT, {}))),
    Spec("RoPE.backward", ROPE.backward, dict(grad=X, positions=np.arange(3), offset=0, out=None),
         dict(grad=(F, dict(bad_shapes=[(), (2, 3, 6)])),
              positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(1, ValueError)])), out=(OUT, {}))),
    Spec("RoPE.cos_sin", ROPE.cos_sin, dict(positions=None, offset=2, seq_len=3, dtype=None),
         dict(positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(SIZE, {}), seq_len=(SIZE, {}), dtype=(DTYPE, dict(optional=True)))),
    Spec("set_num_threads", posemb.set_num_threads, dict(n=posemb.get_num_threads()),
         dict(n=(SIZE, dict(minimum=1)))),
    Spec("sinusoidal", posemb.sinusoidal,
         dict(seq_len=5, dim=7, base=10000.0, start=3, layout="concat", dtype=np.float64),
         dict(seq_len=(SIZE, {}), dim=(SIZE, {}), base=(REAL, dict(positive=True)),
              start=(SIZE, {}), layout=(CHOICE, {}), dtype=(DTYPE, {}))),
    Spec("add_sinusoidal", posemb.add_sinusoidal,
         dict(x=X, start=2, base=10000.0, layout="interleaved", out=None),
         dict(x=(F, dict(bad_shapes=[(), (8,)])), start=(SIZE, {}),
              base=(REAL, dict(positive=True)), layout=(CHOICE, {}), out=(OUT, {})),
         oracle=lambda x, start, base, layout, out: np.array(x, np.float64) + R.sinusoidal(
             x.shape[-2], x.shape[-1], base=base, start=start, layout=layout), tol=1e-6),
    Spec("AbsolutePE", posemb.AbsolutePE,
         dict(embedding_size=8, max_length=6, base=10000.0, dtype=np.float32),
         dict(embedding_size=(SIZE, {}), max_length=(SIZE, {}),
              base=(REAL, dict(positive=True)), dtype=(DTYPE, {}))),
    Spec("AbsolutePE.__call__", APE,
         dict(x=X, start=1, out=None, seq_axis=-2, feature_axis=-1),
         dict(x=(F, dict(bad_shapes=[(), (8,), (2, 3, 7), (2, 7, 8)])),
              start=(SIZE, dict(bad=[(4, ValueError)])), out=(OUT, {}),
              seq_axis=(OFFSET, dict(bad=[(-1, ValueError), (3, ValueError), (2**70, ValueError)])),
              feature_axis=(OFFSET, dict(bad=[(-2, ValueError), (-4, ValueError)])))),
    Spec("learned_pe_forward", posemb.learned_pe_forward,
         dict(x=X, weight=_x((6, 8)), positions=np.array([5, 0, 2]), offset=0, out=None),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 7)])),
              weight=(F, dict(bad_shapes=[(), (8,), (6, 7), (1, 6, 8), (6, 9)])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(1, ValueError)])), out=(OUT, {})),
         oracle=lambda x, weight, positions, offset, out: R.learned_forward(
             x, weight, offset + np.arange(x.shape[-2]) if positions is None else positions),
         tol=1e-5),
    Spec("learned_pe_backward", posemb.learned_pe_backward,
         dict(grad_out=X, positions=None, num_positions=6, offset=2),
         dict(grad_out=(F, dict(bad_shapes=[()])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              num_positions=(SIZE, dict(bad=[(4, IndexError)], match="positions")),
              offset=(SIZE, {})),
         oracle=lambda grad_out, positions, num_positions, offset: R.learned_backward(
             grad_out, offset + np.arange(grad_out.shape[-2]) if positions is None else positions,
             num_positions), tol=1e-5),
    Spec("LearnedPE", posemb.LearnedPE,
         dict(max_length=6, dim=8, dtype=np.float32, std=0.02, seed=0),
         dict(max_length=(SIZE, {}), dim=(SIZE, {}), dtype=(DTYPE, {}), std=(REAL, {}),
              seed=(OTHER, dict(bad=[("x", TypeError), (-1, TypeError), (1.5, TypeError)])))),
    Spec("LearnedPE.forward", LPE.forward, dict(x=X, positions=None, offset=1),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 7)])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(4, IndexError)], match="positions")))),
    Spec("LearnedPE.backward", LPE.backward, dict(grad_out=X, positions=np.array([1, 1, 5]),
                                                  offset=0),
         dict(grad_out=(F, dict(bad_shapes=[()])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(1, ValueError)])))),
    Spec("t5_relative_position_bucket", posemb.t5_relative_position_bucket,
         dict(relative_position=np.arange(-5, 5), bidirectional=True, num_buckets=32,
              max_distance=128),
         dict(relative_position=(POS, dict(signed=True)), bidirectional=(FLAG, {}),
              num_buckets=(SIZE, dict(minimum=4, bad=[(2**21, ValueError)])),
              max_distance=(SIZE, dict(bad=[(8, ValueError), (2**54, ValueError)])))),
    Spec("t5_relative_bias", posemb.t5_relative_bias,
         dict(table=T5T, query_length=3, key_length=4, bidirectional=True, num_buckets=32,
              max_distance=128, query_offset=1),
         dict(table=(F, dict(bad_shapes=[(), (32,), (31, 2), (1, 32, 2)])),
              query_length=(SIZE, {}), key_length=(SIZE, {}), bidirectional=(FLAG, {}),
              num_buckets=(SIZE, dict(minimum=4, bad=[(31, ValueError)])),
              max_distance=(SIZE, dict(bad=[(8, ValueError)])),
              query_offset=(OFFSET, dict(bad=[(2**62, ValueError), (-2**62, ValueError)]))),
         oracle=lambda table, query_length, key_length, bidirectional, num_buckets,
         max_distance, query_offset: R.t5_bias(table, query_length, key_length,
                                               bidirectional=bidirectional,
                                               num_buckets=num_buckets,
                                               max_distance=max_distance,
                                               query_offset=query_offset)),
    Spec("t5_relative_bias_backward", posemb.t5_relative_bias_backward,
         dict(grad_bias=T5G, num_buckets=32, query_length=3, key_length=4, bidirectional=True,
              max_distance=128, query_offset=0),
         dict(grad_bias=(F, dict(bad_shapes=[(), (3, 4), (2, 4, 3), (2, 3, 5)])),
              num_buckets=(SIZE, dict(minimum=4)), query_length=(SIZE, dict(bad=[(2, ValueError)])),
              key_length=(SIZE, dict(bad=[(5, ValueError)])), bidirectional=(FLAG, {}),
              max_distance=(SIZE, dict(bad=[(8, ValueError)])),
              query_offset=(OFFSET, dict(bad=[(2**62, ValueError)]))),
         oracle=lambda grad_bias, num_buckets, query_length, key_length, bidirectional,
         max_distance, query_offset: R.t5_bias_backward(
             grad_bias, num_buckets=num_buckets, bidirectional=bidirectional,
             max_distance=max_distance, query_offset=query_offset), tol=1e-5),
    Spec("relative_position_index", posemb.relative_position_index,
         dict(query_length=3, key_length=5, max_relative_position=2),
         dict(query_length=(SIZE, {}), key_length=(SIZE, {}), max_relative_position=(SIZE, {}))),
    Spec("relative_embeddings", posemb.relative_embeddings,
         dict(table=SHT, query_length=3, key_length=4),
         dict(table=(F, dict(bad_shapes=[(), (5,), (4, 3), (1, 5, 3)])),
              query_length=(SIZE, {}), key_length=(SIZE, {})),
         oracle=lambda table, query_length, key_length: R.shaw_embeddings(
             table, query_length, key_length)),
    Spec("relative_embeddings_backward", posemb.relative_embeddings_backward,
         dict(grad=SHG, max_relative_position=2, query_length=3, key_length=4),
         dict(grad=(F, dict(bad_shapes=[(), (3, 4), (4, 3, 3), (1, 3, 4, 3)])),
              max_relative_position=(SIZE, {}), query_length=(SIZE, dict(bad=[(4, ValueError)])),
              key_length=(SIZE, dict(bad=[(3, ValueError)]))),
         oracle=lambda grad, max_relative_position, query_length, key_length:
         R.shaw_embeddings_backward(grad, max_relative_position), tol=1e-5),
    Spec("alibi_slopes", posemb.alibi_slopes, dict(num_heads=6, dtype=np.float64),
         dict(num_heads=(SIZE, dict(minimum=1)), dtype=(DTYPE, {}))),
    Spec("alibi_bias", posemb.alibi_bias,
         dict(slopes_or_num_heads=np.array([0.5, 0.25, 1.0]), query_length=3, key_length=5,
              symmetric=False, query_offset=None, dtype=np.float32),
         dict(slopes_or_num_heads=(F, dict(bad_shapes=[(2, 2)], ints_ok=True, nonfinite=True,
                                           optional_dtypes=("longdouble",))),
              query_length=(SIZE, dict(bad=[(2**53, ValueError)])), key_length=(SIZE, {}),
              symmetric=(FLAG, {}),
              query_offset=(OFFSET, dict(optional=True, bad=[(2**53, ValueError)])),
              dtype=(DTYPE, {})),
         oracle=lambda slopes_or_num_heads, query_length, key_length, symmetric, query_offset,
         dtype: R.alibi_bias(slopes_or_num_heads, query_length, key_length,
                             symmetric=symmetric, query_offset=query_offset), tol=1e-6),
    Spec("causal_mask", posemb.causal_mask,
         dict(query_length=3, key_length=5, window=2, query_offset=None),
         dict(query_length=(SIZE, {}), key_length=(SIZE, dict(optional=True)),
              window=(SIZE, dict(minimum=1, optional=True)),
              query_offset=(OFFSET, dict(optional=True, bad=[(2**62, ValueError)]))),
         oracle=lambda **kw: R.causal_mask(**kw)),
    Spec("padding_mask", posemb.padding_mask,
         dict(lengths=np.array([0, 3, 5]), max_length=5, side="left"),
         dict(lengths=(POS, dict(err=ValueError, top=6, rank1=True)),
              max_length=(SIZE, dict(bad=[(4, ValueError)])), side=(CHOICE, {})),
         oracle=lambda **kw: R.padding_mask(**kw)),
    Spec("to_additive", posemb.to_additive, dict(mask=posemb.causal_mask(3), dtype=np.float16),
         dict(mask=(OTHER, dict(bad=[(np.ones((3, 3)), TypeError), (np.ones(3, int), TypeError),
                                     ("x", TypeError), (None, TypeError)])),
              dtype=(DTYPE, {}))),
    Spec("create_causal_mask", posemb.create_causal_mask, dict(seq_len=4),
         dict(seq_len=(SIZE, {}))),
    Spec("create_padding_mask", posemb.create_padding_mask,
         dict(lengths=np.array([1, 4]), max_len=4),
         dict(lengths=(POS, dict(err=ValueError, top=5, rank1=True)),
              max_len=(SIZE, dict(bad=[(3, ValueError)])))),
    Spec("scaled_dot_product_attention", posemb.scaled_dot_product_attention,
         dict(q=_x((2, 3, 4)), k=_x((2, 5, 4)), v=_x((2, 5, 3)), mask=posemb.causal_mask(3, 5),
              bias=posemb.alibi_bias(2, 3, 5), scale=None),
         dict(q=(F, dict(bad_shapes=[(), (4,), (2, 3, 5), (3, 3, 4)])),
              k=(F, dict(bad_shapes=[(), (2, 5, 3)])), v=(F, dict(bad_shapes=[(2, 4, 3)])),
              mask=(OTHER, dict(bad=[(np.ones((3, 5), int), TypeError), ("x", TypeError),
                                     (np.ones((3, 4), bool), ValueError)])),
              bias=(F, dict(bad_shapes=[(3, 4)], optional=True)),
              scale=(REAL, dict(optional=True))),
         oracle=lambda q, k, v, mask, bias, scale: R.attention(q, k, v, mask=mask, bias=bias,
                                                               scale=scale), tol=1e-5),
]


# ------------------------------------------------------------------ variants

class Case:
    def __init__(self, spec, arg, variant, value, expect, match=None, oracle=True):
        self.spec, self.arg, self.variant, self.value = spec, arg, variant, value
        self.expect, self.match, self.oracle = expect, match, oracle

    @property
    def id(self):
        return f"{self.spec.name}-{self.arg}-{self.variant}"


def _zero_stride(a):
    """A read-only broadcast view equal in shape to a (its first row repeated)."""
    if a.ndim == 0 or a.shape[0] == 0:
        return np.broadcast_to(a, a.shape)
    return np.broadcast_to(a[:1], a.shape)


def _float_variants(spec, name, good, opts):
    for layout in ("F", "strided", "reversed", "transposed", "swapped", "readonly",
                   "unaligned"):
        yield layout, lay(good, good.dtype, layout), None
    yield "zero-stride", _zero_stride(good), None
    if good.size:
        for bad in (np.nan, np.inf, -np.inf):
            v = np.array(good)
            v.flat[0] = bad
            if opts.get("nonfinite"):
                yield f"value-{bad}", v, (ValueError, name)
            else:
                yield f"value-{bad}", v, None
    yield "list", good.tolist(), None
    for dt in (np.float16, np.float64):
        if np.dtype(dt) != good.dtype:
            yield f"dtype-{np.dtype(dt).name}", good.astype(dt), None
    for dt in ("int32", "int64", "uint8", "bool", "complex64", "object", "U1", "longdouble"):
        if opts.get("ints_ok") and dt in ("int32", "int64", "uint8"):
            continue
        v = good.astype(dt) if dt != "U1" else np.full(good.shape, "a")
        if dt == "longdouble" and np.dtype(dt).itemsize == 8:
            continue
        if dt in opts.get("optional_dtypes", ()):
            yield f"dtype-{dt}", v, None
            continue
        yield f"dtype-{dt}", v, (TypeError, name)
    yield "type-str", "abc", (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    yield "type-dict", {"a": 1}, (TypeError, name)
    for shape in opts.get("bad_shapes", []):
        yield f"shape-{shape}", np.ones(shape, good.dtype), (ValueError, name)


def _size_variants(spec, name, good, opts):
    minimum = opts.get("minimum", 0)
    yield "type-float", 2.5, (TypeError, name)
    yield "type-float-integral", float(good if good is not None else 3), (TypeError, name)
    yield "type-str", "3", (TypeError, name)
    yield "type-bool", True, (TypeError, name)
    yield "type-list", [3], (TypeError, name)
    yield "type-array", np.array([2, 4]), (TypeError, name)
    yield "type-complex", 2j, (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    yield "below-minimum", minimum - 1, (ValueError, name)
    yield "very-negative", -2**70, (ValueError, name)
    if good is not None:
        yield "numpy-int64", np.int64(good), None
        if good < 128:
            yield "numpy-int8", np.int8(good), None
    if opts.get("odd") and good is not None:
        yield "odd", good + 1 if good % 2 else good - 1, (ValueError, name)
    for value, err in opts.get("bad", []):
        yield f"bad-{value}", value, (err, opts.get("match", name))


def _offset_variants(spec, name, good, opts):
    yield "type-float", 1.5, (TypeError, name)
    yield "type-str", "1", (TypeError, name)
    yield "type-bool", True, (TypeError, name)
    yield "type-array", np.array([1, 2]), (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    yield "huge", 2**70, (ValueError, name)
    yield "huge-negative", -2**70, (ValueError, name)
    if good is not None:
        yield "numpy-int32", np.int32(good), None
    for value, err in opts.get("bad", []):
        yield f"bad-{value}", value, (err, name)


def _pos_variants(spec, name, good, opts):
    shape = opts.get("shape")
    if good is None:
        good = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        yield "given", good, None
    signed = opts.get("signed")
    for dt in ("int32", "uint8", "int16", "uint64"):
        if signed and dt.startswith("u"):
            continue
        yield f"dtype-{dt}", good.astype(dt), None
    yield "swapped", good.astype(good.dtype.newbyteorder()), None
    yield "reversed", good[::-1], None
    yield "unaligned", lay(good, good.dtype, "unaligned"), None
    yield "list", good.tolist(), None
    if not opts.get("rank1"):
        yield "zero-stride", np.broadcast_to(good.reshape(-1)[:1], good.shape), None
    yield "empty-ok" if opts.get("rank1") else "scalar", \
        (np.zeros(0, np.int64) if opts.get("rank1") else np.int64(0)), None
    for dt in ("float64", "float32", "bool", "complex128", "object"):
        yield f"dtype-{dt}", good.astype(dt), (TypeError, name)
    yield "dtype-str", np.full(good.shape, "1"), (TypeError, name)
    yield "type-str", "abc", (TypeError, name)
    yield "type-float", 1.5, (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    if signed:
        yield "uint64-huge", np.array([2**64 - 1], np.uint64), (ValueError, name)
        yield "int64-extremes", np.array([-2**63, 2**63 - 1]), None
        return
    err = opts["err"]
    neg = good.copy()
    neg.flat[0] = -1
    yield "negative", neg, (err, name)
    big = good.copy()
    big.flat[-1] = opts["top"]
    yield "too-large", big, (err, name)
    yield "uint64-huge", np.full(good.shape, 2**64 - 1, np.uint64), (err, name)
    if opts.get("rank1"):
        yield "rank-2", good[None], (ValueError, name)


def _real_variants(spec, name, good, opts):
    yield "type-str", "abc", (TypeError, name)
    yield "type-complex", 1j, (TypeError, name)
    yield "type-array", np.array([1.0, 2.0]), (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    for bad in (np.nan, np.inf, -np.inf):
        yield f"value-{bad}", bad, (ValueError, name)
    if opts.get("positive"):
        yield "zero", 0.0, (ValueError, name)
        yield "negative", -2.0, (ValueError, name)
    if good is not None:
        yield "numpy-float32", np.float32(good), None
        yield "int", int(good) if float(good).is_integer() else good, None


def _dtype_variants(spec, name, good, opts):
    for bad in ("foo", int, bool, np.complex64, object, np.int8, np.dtype(">f8"), "U3"):
        yield f"bad-{bad}", bad, (TypeError, name)
    yield "string-f4", "f4", None
    yield "type-float16", np.float16, None


def _flag_variants(spec, name, good, opts):
    yield "type-str", "yes", (TypeError, name)
    yield "type-array", np.array([True, False]), (TypeError, name)
    yield "numpy-bool", np.bool_(good), None
    yield "int", int(bool(good)), None


def _choice_variants(spec, name, good, opts):
    yield "wrong-value", "nope", (ValueError, name)
    yield "type-list", [good], (ValueError, name)
    yield "type-None", None, (ValueError, name)
    yield "upper", good.upper(), (ValueError, name)


def _other_variants(spec, name, good, opts):
    for value, err in opts.get("bad", []):
        yield f"bad-{type(value).__name__}", value, (err, name)


def _out_variants(spec, name, good, opts):
    x_name = next(iter(spec.args))
    x = spec.args[x_name]
    plain = spec.fn(**spec.args)
    shape, dtype = plain.shape, plain.dtype
    yield "fresh", np.empty(shape, dtype), None
    yield "F-order", np.asfortranarray(np.empty(shape, dtype)), None
    yield "strided", lay(np.zeros(shape), dtype, "strided"), None
    yield "reversed", lay(np.zeros(shape), dtype, "reversed"), None
    yield "unaligned", lay(np.zeros(shape), dtype, "unaligned"), None
    yield "swapped", np.empty(shape, dtype.newbyteorder()), None
    yield "float64", np.empty(shape, np.float64), None
    yield "alias-input", "ALIAS", None                       # out=x, in place
    yield "overlap-reversed-input", "REVERSED", None         # out=x[::-1] view
    yield "overlap-shifted-input", "SHIFTED", None           # shares all but one element
    yield "readonly", lay(np.zeros(shape), dtype, "readonly"), (ValueError, name)
    yield "zero-stride", np.broadcast_to(np.zeros(shape[-1:], dtype), shape), (ValueError, name)
    yield "wrong-shape", np.empty(shape[:-1] + (shape[-1] + 2,), dtype), (ValueError, name)
    yield "wrong-shape-short", np.empty(shape[1:], dtype), (ValueError, name)
    yield "dtype-int", np.empty(shape, np.int64), (TypeError, name)
    yield "dtype-bool", np.empty(shape, bool), (TypeError, name)
    yield "type-list", np.zeros(shape).tolist(), (TypeError, name)
    yield "type-str", "out", (TypeError, name)
    yield "type-tuple-of-two", (np.empty(shape, dtype), np.empty(shape, dtype)), (TypeError, name)
    del x


GENERATORS = {F: _float_variants, SIZE: _size_variants, OFFSET: _offset_variants,
              POS: _pos_variants, REAL: _real_variants, DTYPE: _dtype_variants,
              FLAG: _flag_variants, CHOICE: _choice_variants, OTHER: _other_variants,
              OUT: _out_variants}


def _cases():
    cases = []
    for spec in SPECS:
        cases.append(Case(spec, "-", "good", None, None))
        for name, (kind, opts) in spec.kinds.items():
            for variant, value, expect in GENERATORS[kind](spec, name, spec.args[name], opts):
                cases.append(Case(spec, name, variant, value,
                                  expect if expect is None else expect[0],
                                  None if expect is None else expect[1]))
    return cases


CASES = _cases()


# ------------------------------------------------------------------ running

def _snapshot(args):
    snap = {}
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            snap[k] = (v.copy(), v.dtype, v.strides, v.flags.writeable)
    return snap


def _plain(v):
    if isinstance(v, list):
        return np.array(v)
    if isinstance(v, np.ndarray):
        return np.array(v, dtype=v.dtype.newbyteorder("=") if v.dtype.kind in "fiuc" else v.dtype)
    return v


def _flat(result):
    if isinstance(result, tuple):
        return list(result)
    if isinstance(result, np.ndarray):
        return [result]
    return []


def _compare(got, want, tol):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)     # LearnedPE.backward returns grad_out itself
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g.astype(np.complex128 if g.dtype.kind == "c" else
                                                np.float64), w, rtol=tol, atol=tol,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def _run(case):
    spec = case.spec
    args = dict(spec.args)
    if case.arg != "-":
        args[case.arg] = case.value
    if case.arg == "positions" and "offset" in args:
        args["offset"] = 0                       # offset applies only without positions
        if "seq_len" in args:
            args["seq_len"] = None
    if case.arg == "out" and isinstance(case.value, str) and case.value.isupper():
        x_name = next(iter(spec.args))
        x = np.array(spec.args[x_name])
        if case.value == "ALIAS":
            args[x_name] = args["out"] = x
        elif case.value == "REVERSED":
            args[x_name] = x
            args["out"] = x[::-1]
        else:
            buf = np.zeros(x.size + 1, x.dtype)
            xin = buf[1:].reshape(x.shape)
            xin[...] = x
            args[x_name] = xin
            args["out"] = buf[:-1].reshape(x.shape)
    snap = _snapshot({k: v for k, v in args.items() if k != "out"})
    aliased = [k for k, v in args.items()
               if k != "out" and isinstance(v, np.ndarray) and args.get("out") is not None
               and isinstance(args["out"], np.ndarray) and np.may_share_memory(v, args["out"])]
    plain_args = {k: _plain(v) for k, v in args.items() if k != "out"}
    if "out" in args:
        plain_args["out"] = None
    if case.expect is not None:
        with pytest.raises(case.expect, match=case.match):
            spec.fn(**args)
    else:
        want = spec.fn(**plain_args)
        got = spec.fn(**args)
        if "out" in args and args["out"] is not None:
            assert got is args["out"]
        _compare(got, want, spec.tol)
        if spec.oracle is not None:
            _compare(got, spec.oracle(**{k: v for k, v in plain_args.items()}),
                     max(spec.tol, 1e-2 if any(getattr(v, "dtype", None) == np.float16
                                               for v in args.values()) else 0))
    for k, (copy, dtype, strides, writeable) in snap.items():
        if k in aliased:
            continue
        v = args[k]
        assert v.dtype == dtype and v.strides == strides and v.flags.writeable == writeable, k
        np.testing.assert_array_equal(v, copy, err_msg=f"{k} was modified")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case):
    _run(case)


# ------------------------------------------------------------------ huge sizes

@contextlib.contextmanager
def limited_address_space(extra=2 << 30):
    """Cap this process's address space at its current size + extra, so that
    an allocation the size checks miss fails instead of paging the machine
    to death.  Not under ASan (its shadow memory is reserved up front)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        yield
        return
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(hard, vm + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


HUGE = [
    ("RoPE-2**40", lambda: posemb.RoPE(2**40, 2**40)),
    ("RoPE-seq-2**40", lambda: posemb.RoPE(64, 2**40)),
    ("RoPE-head-2**62", lambda: posemb.RoPE(2**62, 4)),
    ("RoPE.cos_sin-2**40", lambda: ROPE.cos_sin(seq_len=2**40)),
    ("RoPE.cos_sin-offset", lambda: ROPE.cos_sin(offset=2**52, seq_len=2**40)),
    ("rope_inv_freq-2**62", lambda: posemb.rope_inv_freq(2**62)),
    ("rope_cos_sin-dim", lambda: posemb.rope_cos_sin(np.arange(4), 2**40)),
    ("compute_frequencies", lambda: posemb.compute_frequencies(64, 2**40)),
    ("precompute_freqs_cis", lambda: posemb.precompute_freqs_cis(2**40, 2**40)),
    ("sinusoidal-2**40", lambda: posemb.sinusoidal(2**40, 2**40)),
    ("sinusoidal-2**31", lambda: posemb.sinusoidal(2**31, 2**31)),
    ("sinusoidal-seq-2**62", lambda: posemb.sinusoidal(2**62, 4)),
    ("AbsolutePE", lambda: posemb.AbsolutePE(2**40, 2**40)),
    ("LearnedPE", lambda: posemb.LearnedPE(2**40, 2**40)),
    ("LearnedPE-2**62", lambda: posemb.LearnedPE(2**62, 2**62)),
    ("learned_pe_backward", lambda: posemb.learned_pe_backward(X, num_positions=2**60)),
    ("t5_relative_bias", lambda: posemb.t5_relative_bias(T5T, 2**40, 2**40)),
    ("t5_relative_bias-2**61", lambda: posemb.t5_relative_bias(T5T, 2**61, 2**61)),
    ("relative_position_index", lambda: posemb.relative_position_index(2**40, 2**40, 3)),
    ("relative_position_index-2**61", lambda: posemb.relative_position_index(2**61, 2**61, 2**61)),
    ("relative_embeddings", lambda: posemb.relative_embeddings(SHT, 2**40, 2**40)),
    ("relative_embeddings_backward", lambda: posemb.relative_embeddings_backward(SHG, 2**61, 3, 4)),
    ("alibi_slopes", lambda: posemb.alibi_slopes(2**40)),
    ("alibi_slopes-2**62", lambda: posemb.alibi_slopes(2**62)),
    ("alibi_bias", lambda: posemb.alibi_bias(8, 2**40, 2**40)),
    ("alibi_bias-heads", lambda: posemb.alibi_bias(2**40, 2, 2)),
    ("causal_mask", lambda: posemb.causal_mask(2**40, 2**40)),
    ("causal_mask-2**61", lambda: posemb.causal_mask(2**61)),
    ("create_causal_mask", lambda: posemb.create_causal_mask(2**40)),
    ("padding_mask", lambda: posemb.padding_mask([1], 2**60)),
    ("create_padding_mask", lambda: posemb.create_padding_mask([1], 2**60)),
    ("add_sinusoidal-start", lambda: posemb.add_sinusoidal(X, start=2**62)),
]


@pytest.mark.parametrize("call", [c for _, c in HUGE], ids=[n for n, _ in HUGE])
def test_huge_sizes_fail_cleanly(call):
    """A size whose table cannot exist is a MemoryError or ValueError, at once."""
    with limited_address_space():
        with pytest.raises((MemoryError, ValueError)):
            call()


def test_case_count():
    n = len(CASES) + len(HUGE) + len(EMPTY_BUT_LONG)
    print(f"\nbad-input cases: {n} ({len(CASES)} generated over {len(SPECS)} public "
          f"callables, {len(HUGE)} huge-size and {len(EMPTY_BUT_LONG)} empty-but-long cases)")
    public = {name for name in posemb.__all__ if callable(getattr(posemb, name))}
    covered = {s.name.split(".")[0] for s in SPECS} | {"get_num_threads"}
    assert public <= covered, public - covered
    assert n >= 1000


EMPTY_BUT_LONG = [
    ("relative_position_index", lambda: posemb.relative_position_index(2**40, 0, 3), (2**40, 0)),
    ("relative_embeddings", lambda: posemb.relative_embeddings(SHT, 2**40, 0), (2**40, 0, 3)),
    ("relative_embeddings-dim-0", lambda: posemb.relative_embeddings(SHT[:, :0], 2**40, 1),
     (2**40, 1, 0)),
    ("relative_embeddings_backward", lambda: posemb.relative_embeddings_backward(
        np.empty((2**40, 0, 3)), 2, 2**40, 0), (5, 3)),
    ("causal_mask", lambda: posemb.causal_mask(2**40, 0), (2**40, 0)),
    ("t5_relative_bias", lambda: posemb.t5_relative_bias(T5T, 2**40, 0), (2, 2**40, 0)),
    ("alibi_bias", lambda: posemb.alibi_bias(2, 2**40, 0), (2, 2**40, 0)),
    ("sinusoidal", lambda: posemb.sinusoidal(2**40, 0), (2**40, 0)),
    ("padding_mask", lambda: posemb.padding_mask(np.zeros(0, int), 2**40), (0, 2**40)),
]


@pytest.mark.parametrize("call,shape", [(c, s) for _, c, s in EMPTY_BUT_LONG],
                         ids=[n for n, _, _ in EMPTY_BUT_LONG])
def test_empty_results_with_a_huge_axis_return_at_once(call, shape):
    """An empty output with a 2**40-long axis is returned without walking the
    axis (before the fix, relative_position_index(2**40, 0, 3) and
    causal_mask(2**40, 0) looped over 2**40 empty rows)."""
    got = call()
    assert got.shape == shape
    if got.size:
        assert not got.any()
