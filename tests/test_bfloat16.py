"""bfloat16 NumPy arrays (ml_dtypes): computed in float32, rounded once.

The oracle rounds a float64 to bfloat16 by hand (8 significant bits,
nearest, ties to even) from its exact binary expansion, independent of
ml_dtypes' own casts (which round float64 through float32, i.e. twice).
"""
import numpy as np
import pytest

import posemb
from posemb._bfloat16 import round_to_bfloat16

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


def round_once(v):
    """float64 -> the nearest bfloat16 (as float64), ties to even; normal range."""
    v = np.asarray(v, dtype=np.float64)
    m, e = np.frexp(v)                      # v = m * 2**e, 0.5 <= |m| < 1
    scaled = np.abs(m) * 2.0**8             # 8 significant bits
    t = np.trunc(scaled)
    rem = scaled - t                        # exact
    up = (rem > 0.5) | ((rem == 0.5) & (t % 2 == 1))
    return np.sign(v) * np.ldexp(t + up, e - 8)


def test_round_to_bfloat16_rounds_float64_once(rng):
    tricky = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-40),
                       0.0, -0.0, 1e-30, 3.0e38])
    assert float(round_to_bfloat16(tricky[:1], BF16)[0]) == 1 + 2**-7   # twice: 1.0
    v = np.concatenate([tricky, rng.standard_normal(20000) * 10.0 ** rng.integers(-20, 20, 20000)])
    got = round_to_bfloat16(v, BF16).astype(np.float64)
    np.testing.assert_array_equal(got, round_once(v))
    # float32 -> bfloat16 is a single rounding: ml_dtypes' own cast
    f = rng.standard_normal(10000).astype(np.float32)
    np.testing.assert_array_equal(round_to_bfloat16(f, BF16).view(np.uint16),
                                  f.astype(BF16).view(np.uint16))


def _f32_then_round(y32):
    return y32.astype(BF16)                 # one rounding from float32


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_bfloat16_is_float32_rounded_once(rng, interleaved):
    x = rng.standard_normal((2, 4, 16, 64)).astype(BF16)
    cos, sin = posemb.rope_cos_sin(np.arange(16), 64, interleaved=interleaved)
    y = posemb.apply_rope(x, cos, sin, interleaved=interleaved)
    assert y.dtype == BF16
    want = _f32_then_round(posemb.apply_rope(x.astype(np.float32), cos, sin,
                                             interleaved=interleaved))
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    g = posemb.apply_rope_backward(x, cos, sin, interleaved=interleaved)
    np.testing.assert_array_equal(
        g.view(np.uint16),
        _f32_then_round(posemb.apply_rope_backward(x.astype(np.float32), cos, sin,
                                                   interleaved=interleaved)).view(np.uint16))
    # bfloat16 tables too: widened exactly to float32
    yb = posemb.apply_rope(x, cos.astype(BF16), sin.astype(BF16), interleaved=interleaved)
    wb = posemb.apply_rope(x.astype(np.float32), cos.astype(BF16).astype(np.float32),
                           sin.astype(BF16).astype(np.float32), interleaved=interleaved)
    np.testing.assert_array_equal(yb.view(np.uint16), _f32_then_round(wb).view(np.uint16))
    out = np.empty_like(x)
    assert posemb.apply_rope(x, cos, sin, interleaved=interleaved, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_tables_in_bfloat16_round_the_exact_table_once():
    pos = np.arange(0, 9000, 7)
    cos, sin = posemb.rope_cos_sin(pos, 128, dtype=BF16)
    c64, s64 = posemb.rope_cos_sin(pos, 128, dtype=np.float64)
    assert cos.dtype == BF16
    np.testing.assert_array_equal(cos.astype(np.float64), round_once(c64))
    np.testing.assert_array_equal(sin.astype(np.float64), round_once(s64))
    table = posemb.sinusoidal(64, 32, dtype=BF16)
    np.testing.assert_array_equal(table.astype(np.float64),
                                  round_once(posemb.sinusoidal(64, 32, dtype=np.float64)))


def test_modules_take_bfloat16(rng):
    rope = posemb.RoPE(32, 64)
    x = rng.standard_normal((3, 10, 32)).astype(BF16)
    want = _f32_then_round(rope(x.astype(np.float32), offset=5))
    np.testing.assert_array_equal(rope(x, offset=5).view(np.uint16), want.view(np.uint16))
    xi = x.copy()
    assert rope(xi, offset=5, out=xi) is xi
    np.testing.assert_array_equal(xi.view(np.uint16), want.view(np.uint16))
    q, k = x.copy(), x[:1].copy()
    qi, ki = rope.apply_qk(q, k, offset=5, inplace=True)
    assert qi is q and ki is k and q.dtype == BF16
    np.testing.assert_array_equal(q.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(k.view(np.uint16), want[:1].view(np.uint16))
    back = rope.backward(x, offset=5)
    np.testing.assert_array_equal(
        back.view(np.uint16),
        _f32_then_round(rope.backward(x.astype(np.float32), offset=5)).view(np.uint16))
    pe = posemb.AbsolutePE(32, 20)
    np.testing.assert_array_equal(
        pe(x).view(np.uint16), _f32_then_round(pe(x.astype(np.float32))).view(np.uint16))
    w = rng.standard_normal((12, 32)).astype(np.float32)
    np.testing.assert_array_equal(
        posemb.learned_pe_forward(x, w).view(np.uint16),
        _f32_then_round(posemb.learned_pe_forward(x.astype(np.float32), w)).view(np.uint16))
