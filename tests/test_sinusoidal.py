"""posemb.sinusoidal / add_sinusoidal / AbsolutePE against PyTorch reference formulas.

References (Vaswani et al. section 3.5; PositionalEmbeddings.jl ``AbsolutePE``;
TorchLean): the "Positional Encodings in Transformer Models" tutorial (Machine Learning Mastery)
``create_sinusoidal_encodings`` (interleaved, float32 as written), the same
formula in float64 as "truth", and the concatenated layout
``[sin(p*w) | cos(p*w)]`` zero-padded for odd dims.
"""
import math

import numpy as np
import pytest
from _torch import torch

import posemb
from posemb import _core


# ---------------------------------------------------------------- references

def torch_sinusoid(seq_len, dim, start=0, base=10000.0, dtype=None):
    """The MLM tutorial's create_sinusoidal_encodings, computed in ``dtype``, with a
    start position, a base, and TorchLean's rule for odd dims (i = j // 2)."""
    dtype = torch.float32 if dtype is None else dtype
    i = torch.arange(0, (dim + 1) // 2, dtype=dtype)
    div_term = torch.exp(-np.log(base) * (2 * i / max(dim, 1)))
    position = torch.arange(start, start + seq_len, dtype=dtype).unsqueeze(1)
    pe = torch.zeros(seq_len, dim, dtype=dtype)
    angle = position * div_term
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)[:, : dim // 2]
    return pe


def torch_truth(seq_len, dim, start=0, base=10000.0, layout="interleaved"):
    """float64 truth (Vaswani et al.): angle p * base**(-2i/D) in float64."""
    h = dim // 2
    nf = (dim + 1) // 2 if layout == "interleaved" else h
    i = torch.arange(nf, dtype=torch.float64)
    w = torch.pow(torch.tensor(base, dtype=torch.float64), -(2 * i) / max(dim, 1))
    p = torch.arange(start, start + seq_len, dtype=torch.float64).unsqueeze(1)
    angle = p * w
    if layout == "interleaved":
        pe = torch.zeros(seq_len, dim, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)[:, :h]
        return pe
    parts = [torch.sin(angle), torch.cos(angle)]
    if dim % 2:
        parts.append(torch.zeros(seq_len, 1, dtype=torch.float64))
    return torch.cat(parts, dim=-1)


F32_TOL = 1.2e-7  # the bound for float32 output against float64 truth


# ---------------------------------------------------------------- the table

def test_known_values():
    pe = posemb.sinusoidal(3, 6, dtype=np.float64)
    np.testing.assert_array_equal(pe[0], [0, 1, 0, 1, 0, 1])
    w = [1.0, 10000.0 ** (-2 / 6), 10000.0 ** (-4 / 6)]
    expect = [f(2 * wi) for wi in w for f in (math.sin, math.cos)]
    np.testing.assert_allclose(pe[2], expect, rtol=0, atol=1e-15)
    # base 100, dim 2: w = 1 -> (sin p, cos p)
    np.testing.assert_allclose(posemb.sinusoidal(1, 2, base=100.0, start=3, dtype=np.float64),
                               [[math.sin(3), math.cos(3)]], rtol=0, atol=1e-15)


@pytest.mark.parametrize("dim", [1, 2, 7, 64, 768])
@pytest.mark.parametrize("start", [0, 37])
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_interleaved_matches_torch(dim, start, base):
    seq = 96
    truth = torch_truth(seq, dim, start, base).numpy()
    ours32 = posemb.sinusoidal(seq, dim, start=start, base=base)
    ours64 = posemb.sinusoidal(seq, dim, start=start, base=base, dtype=np.float64)
    assert ours32.dtype == np.float32 and ours32.shape == (seq, dim)
    assert np.abs(ours32 - truth).max() <= F32_TOL
    assert np.abs(ours64 - truth).max() <= 1e-13
    # the seed's float32 PyTorch formula agrees to its own (float32 angle) accuracy
    ref32 = torch_sinusoid(seq, dim, start, base).numpy()
    np.testing.assert_allclose(ours32, ref32, rtol=0, atol=2e-5)
    # and in float64 it is the truth
    ref64 = torch_sinusoid(seq, dim, start, base, dtype=torch.float64).numpy()
    np.testing.assert_allclose(ours64, ref64, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dim", [1, 2, 5, 6, 513])
def test_concat_matches_torch(dim):
    truth = torch_truth(40, dim, start=3, layout="concat").numpy()
    ours = posemb.sinusoidal(40, dim, start=3, layout="concat", dtype=np.float64)
    np.testing.assert_allclose(ours, truth, rtol=0, atol=1e-13)
    if dim % 2:
        assert np.all(ours[:, -1] == 0)
    h = dim // 2
    # same frequencies as the interleaved layout, columns reordered
    inter = posemb.sinusoidal(40, dim, start=3, dtype=np.float64)
    np.testing.assert_array_equal(ours[:, :h], inter[:, 0:2 * h:2])
    np.testing.assert_array_equal(ours[:, h:2 * h], inter[:, 1:2 * h:2])


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_every_width_and_frequency_range(layout):
    """Widths around the 8-frequency vectors of the row kernels (masked
    tails, odd dims) and frequency chunks of a split table (3000 rows): each
    float64 value within 1e-13 of truth (plus the truth's own angle rounding,
    ~|p| * 1.1e-16), float32 its rounding."""
    old = posemb.get_num_threads()
    try:
        for threads in (1, 3):
            posemb.set_num_threads(threads)
            for dim in list(range(1, 20)) + [31, 33, 47, 63, 65, 100, 129, 1001]:
                n = 3000 if dim >= 100 else 40
                truth = torch_truth(n, dim, 123, layout=layout).numpy()
                t64 = posemb.sinusoidal(n, dim, start=123, layout=layout, dtype=np.float64)
                assert np.abs(t64 - truth).max() <= 1e-13 + 2.5e-16 * (123 + n), dim
                np.testing.assert_array_equal(
                    posemb.sinusoidal(n, dim, start=123, layout=layout), t64.astype(np.float32))
    finally:
        posemb.set_num_threads(old)


def test_no_fused_multiply_add_in_the_binary():
    """The float64-exact formulas rely on separate products and sums
    (-ffp-contract=off); the AVX-512 row kernels enable an ISA with FMA, so
    check that the compiler formed none anywhere in posemb._core."""
    import platform
    import shutil
    import subprocess
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None:
        pytest.skip("needs objdump on x86-64")
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", _core.__file__],
                         capture_output=True, text=True, check=True).stdout
    fma = [line for line in asm.splitlines()
           if any(op in line for op in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub"))]
    assert not fma, fma[:5]


def test_odd_dim_ends_with_sin_column():
    pe = posemb.sinusoidal(20, 7, dtype=np.float64)
    p = np.arange(20.0)
    np.testing.assert_allclose(pe[:, 6], np.sin(p * 10000.0 ** (-6 / 7)), rtol=0, atol=1e-15)
    np.testing.assert_allclose(pe[:, 5], np.cos(p * 10000.0 ** (-4 / 7)), rtol=0, atol=1e-15)


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_empty_tables(layout):
    assert posemb.sinusoidal(5, 0, layout=layout).shape == (5, 0)
    assert posemb.sinusoidal(0, 8, layout=layout).shape == (0, 8)
    assert posemb.sinusoidal(0, 0, layout=layout).shape == (0, 0)


def test_float32_accuracy_at_large_positions():
    """Up to p = 2**20: posemb stays within float32 rounding of float64 truth,
    the seed's float32 PyTorch formula does not."""
    seq, dim = 256, 512
    start = 2**20 - seq + 1                       # last row is position 2**20
    truth = torch_truth(seq, dim, start).numpy()
    ours = posemb.sinusoidal(seq, dim, start=start)
    ref32 = torch_sinusoid(seq, dim, start).numpy()
    err_ours = np.abs(ours.astype(np.float64) - truth).max()
    err_torch = np.abs(ref32.astype(np.float64) - truth).max()
    assert err_ours <= F32_TOL
    assert err_torch > F32_TOL
    assert err_torch > 1e-3                       # float32 angles are off by ~0.06 rad here
    # the bound holds for the concat layout too
    truth_c = torch_truth(seq, dim, start, layout="concat").numpy()
    ours_c = posemb.sinusoidal(seq, dim, start=start, layout="concat")
    assert np.abs(ours_c.astype(np.float64) - truth_c).max() <= F32_TOL


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_every_dtype_is_rounded_once_from_float64(layout):
    kw = dict(start=1000, layout=layout)
    t64 = posemb.sinusoidal(300, 33, dtype=np.float64, **kw)
    np.testing.assert_array_equal(posemb.sinusoidal(300, 33, dtype=np.float32, **kw),
                                  t64.astype(np.float32))
    t16 = posemb.sinusoidal(300, 33, dtype=np.float16, **kw)
    assert t16.dtype == np.float16
    np.testing.assert_array_equal(t16, t64.astype(np.float16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_start_shifts_rows(dtype):
    """A row's value depends only on its position, bit for bit (float64 too)."""
    full = posemb.sinusoidal(200, 10, dtype=dtype)
    np.testing.assert_array_equal(posemb.sinusoidal(50, 10, start=150, dtype=dtype), full[150:])
    for start, n in [(61, 7), (30, 10), (31, 2), (5, 1), (0, 33), (95, 64)]:
        np.testing.assert_array_equal(posemb.sinusoidal(n, 10, start=start, dtype=dtype),
                                      full[start:start + n])


@pytest.mark.parametrize("layout", ["C", "F", "strided", "reversed", "transposed", "swapped",
                                    "unaligned"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_table_into_out(dtype, layout):
    """out= fills any writeable layout with the bits of the fresh table."""
    from _layouts import lay
    expect = posemb.sinusoidal(70, 33, start=1000, layout="concat", dtype=dtype)
    out = lay(np.full((70, 33), 7.0), dtype, layout)
    got = posemb.sinusoidal(70, 33, start=1000, layout="concat", out=out)
    assert got is out
    np.testing.assert_array_equal(out.astype(dtype), expect)
    # dtype may repeat out's own
    assert posemb.sinusoidal(70, 33, start=1000, layout="concat", dtype=dtype, out=out) is out


def test_table_into_reused_large_out():
    """The multithreaded fill of a reused buffer (frequency chunks) is the
    fresh table bit for bit, both layouts, a start past one super-block."""
    buf = np.empty((3000, 770), np.float32)
    for layout in ("interleaved", "concat"):
        posemb.sinusoidal(3000, 770, start=5000, layout=layout, out=buf)
        np.testing.assert_array_equal(
            buf, posemb.sinusoidal(3000, 770, start=5000, layout=layout))
        assert np.abs(buf.astype(np.float64) - torch_truth(
            3000, 770, 5000, layout=layout).numpy()).max() <= F32_TOL


@pytest.mark.parametrize("shape", [(3000, 770), (20000, 20), (40, 4096)])
def test_table_split_over_threads_is_serial_bits(shape):
    """Frequency chunks (wide tables), row chunks (narrow ones) and any
    thread count give the serial table bit for bit."""
    n, dim = shape
    old = posemb.get_num_threads()
    try:
        posemb.set_num_threads(1)
        want = {lay: posemb.sinusoidal(n, dim, start=777, layout=lay, dtype=np.float64)
                for lay in ("interleaved", "concat")}
        for threads in (2, 3, 4, 7):
            posemb.set_num_threads(threads)
            for lay, w in want.items():
                got = posemb.sinusoidal(n, dim, start=777, layout=lay, dtype=np.float64)
                np.testing.assert_array_equal(got, w)
                np.testing.assert_array_equal(
                    posemb.sinusoidal(n, dim, start=777, layout=lay), w.astype(np.float32))
    finally:
        posemb.set_num_threads(old)


def test_table_out_bad_arguments():
    with pytest.raises(ValueError, match="out"):
        posemb.sinusoidal(4, 6, out=np.empty((4, 7), np.float32))
    with pytest.raises(ValueError, match="out"):
        posemb.sinusoidal(4, 6, out=np.empty(24, np.float32))
    ro = np.empty((4, 6), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        posemb.sinusoidal(4, 6, out=ro)
    with pytest.raises(TypeError, match="out"):
        posemb.sinusoidal(4, 6, out=np.empty((4, 6), np.int32))
    with pytest.raises(TypeError, match="out"):
        posemb.sinusoidal(4, 6, out=np.zeros((4, 6)).tolist())
    with pytest.raises(TypeError, match="dtype"):
        posemb.sinusoidal(4, 6, dtype=np.float32, out=np.empty((4, 6)))
    with pytest.raises(TypeError, match="dtype"):
        posemb.sinusoidal(4, 6, dtype=np.int8, out=np.empty((4, 6)))
    assert posemb.sinusoidal(2, 2).dtype == np.float32          # still the default


# ---------------------------------------------------------------- add_sinusoidal

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [0, 1, 16, 33])
def test_add_matches_torch(rng, dtype, dim):
    x = rng.standard_normal((3, 20, dim)).astype(dtype)
    y = posemb.add_sinusoidal(x, start=4)
    assert y.dtype == dtype and y.shape == x.shape
    # x + pe as PyTorch does it, with posemb's table (bit for bit) ...
    table = posemb.sinusoidal(20, dim, start=4, dtype=dtype)
    np.testing.assert_array_equal(y, (torch.from_numpy(x) + torch.from_numpy(table)).numpy())
    # ... and against the seed formula itself
    tdt = torch.float32 if dtype == np.float32 else torch.float64
    ref = torch.from_numpy(x) + torch_sinusoid(20, dim, 4, dtype=tdt)
    np.testing.assert_allclose(y, ref.numpy(), rtol=0, atol=1e-5)


def test_add_concat_layout(rng):
    x = rng.standard_normal((2, 9, 7))
    y = posemb.add_sinusoidal(x, layout="concat", base=50.0)
    np.testing.assert_array_equal(
        y, x + posemb.sinusoidal(9, 7, layout="concat", base=50.0, dtype=np.float64))


def test_add_float16_rounds_once(rng):
    x = (rng.standard_normal((4, 50, 24)) * 8).astype(np.float16)
    y = posemb.add_sinusoidal(x, start=2**20)
    assert y.dtype == np.float16
    t64 = posemb.sinusoidal(50, 24, start=2**20, dtype=np.float64)
    np.testing.assert_array_equal(y, (x.astype(np.float64) + t64).astype(np.float16))


def test_float16_rounding_matches_numpy_cast(rng):
    """float64 -> float16 in one rounding, as NumPy's cast: ties, subnormals,
    overflow, signed zeros, inf and NaN."""
    h = np.arange(0, 0x7c00, dtype=np.uint16).view(np.float16).astype(np.float64)
    nxt = np.nextafter(h, np.inf)
    special = np.array([0.0, -0.0, 2.0**-25, 2.0**-25 * 1.0000001, 2.0**-24 * 1.5,
                        65504.0, 65519.99, 65520.0, 1e300, np.inf, -np.inf, 2.0**-1074])
    values = np.concatenate([h, (h[:-1] + h[1:]) / 2, nxt, -h, special,
                             rng.standard_normal(10000) * 10.0 ** rng.uniform(-9, 5, 10000)])
    for t in (values, -values):
        with np.errstate(over="ignore"):           # (overflow to inf, as NumPy's cast)
            y = _core.sinusoidal_add_rows(np.zeros((1, t.size), np.float16), t[None])[0]
            expect = (0.0 + t).astype(np.float16)          # +0 + -0 is +0
        np.testing.assert_array_equal(y.view(np.uint16), expect.view(np.uint16))
    assert np.isnan(_core.sinusoidal_add_rows(np.zeros((1, 1), np.float16), np.array([[np.nan]])))[0, 0]


def test_add_strided_and_broadcast_inputs(rng):
    big = rng.standard_normal((2, 30, 40)).astype(np.float32)
    x = big[:, ::3, 1::2][:, :, ::-1]              # (2, 10, 20), no unit strides
    assert not x.flags.c_contiguous
    table = posemb.sinusoidal(10, 20)
    np.testing.assert_array_equal(posemb.add_sinusoidal(x), np.ascontiguousarray(x) + table)
    row = rng.standard_normal((1, 10, 20)).astype(np.float32)
    xb = np.broadcast_to(row, (5, 10, 20))          # read-only, zero batch stride
    y = posemb.add_sinusoidal(xb)
    assert y.shape == (5, 10, 20)
    np.testing.assert_array_equal(y, np.broadcast_to(row + table, (5, 10, 20)))
    # more leading axes
    x4 = rng.standard_normal((2, 3, 10, 20))
    np.testing.assert_array_equal(posemb.add_sinusoidal(x4),
                                  x4 + posemb.sinusoidal(10, 20, dtype=np.float64))


def test_add_out_and_in_place(rng):
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    expect = x + posemb.sinusoidal(6, 8)
    out = np.empty_like(x)
    assert posemb.add_sinusoidal(x, out=out) is out
    np.testing.assert_array_equal(out, expect)
    assert posemb.add_sinusoidal(x, out=x) is x
    np.testing.assert_array_equal(x, expect)


# ---------------------------------------------------------------- the (seq, dim) grid kernel

def _add_ref(x, t):
    """NumPy's x + t, float16 x rounded once from a float64 sum."""
    if x.dtype == np.float16:
        return (x.astype(np.float64) + t).astype(np.float16)
    return x + t


def _table_for(x, rng):
    t_dtype = np.float64 if x.dtype == np.float16 else x.dtype
    return rng.standard_normal(x.shape[-2:]).astype(t_dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 20, 33), (20, 33), (2, 3, 7, 5), (1, 1, 9000),
                                   (50, 1, 16), (4, 6000, 1), (3, 2000, 300),
                                   (2, 2, 600000)])
def test_add_rows_matches_numpy(rng, dtype, shape):
    """Tiles of whole rows (one tile, or several: 2000 rows of a table larger
    than an L2 of up to 2 MiB), a row split into tiles (600000 features, more
    than such an L2 holds), one row per batch shared out by batch groups (seq
    1), more leading axes."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    t = _table_for(x, rng)
    y = _core.sinusoidal_add_rows(x, t)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint8), _add_ref(x, t).view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_add_rows_strided_broadcast_and_in_place(rng, dtype):
    big = (rng.standard_normal((3, 40, 90)) * 4).astype(dtype)
    x = big[:, ::2, 1::3][:, :, ::-1]                # (3, 20, 30), no unit strides
    t = _table_for(x, rng)
    np.testing.assert_array_equal(_core.sinusoidal_add_rows(x, t), _add_ref(x, t))
    out = np.zeros((3, 20, 60), dtype)[:, :, ::2]    # strided out
    _core.sinusoidal_add_rows(x, t, out=out)
    np.testing.assert_array_equal(out, _add_ref(x, t))
    xb = np.broadcast_to(x[:1], (5, 20, 30))         # zero batch stride
    np.testing.assert_array_equal(_core.sinusoidal_add_rows(xb, t), _add_ref(xb, t))
    tb = np.broadcast_to(t[:1], t.shape)             # zero row stride in the table
    np.testing.assert_array_equal(_core.sinusoidal_add_rows(x, tb), _add_ref(x, tb))
    xc = np.ascontiguousarray(x)
    expect = _add_ref(xc, t)
    assert _core.sinusoidal_add_rows(xc, t, out=xc) is xc
    np.testing.assert_array_equal(xc, expect)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_add_rows_transposed_grid(rng, dtype):
    """Julia's (batch, features, seq): positions contiguous, the grid is
    walked with the table read transposed."""
    x = (rng.standard_normal((6, 70, 45)) * 4).astype(dtype)     # (batch, dim, seq)
    t = _table_for(x.transpose(0, 2, 1), rng)                     # (seq, dim)
    y = _core.sinusoidal_add_rows(x, t, axes=[(2, 1), (0, 1), (2, 1)])
    np.testing.assert_array_equal(y, _add_ref(x, t.T))
    out = np.empty_like(x)
    _core.sinusoidal_add_rows(x, t, out=out, axes=[(2, 1), (0, 1), (2, 1)])
    np.testing.assert_array_equal(out, y)


@pytest.mark.parametrize("dtype, offset", [(np.float32, 0), (np.float32, 1), (np.float32, 3),
                                           (np.float64, 0), (np.float64, 1)])
def test_add_rows_streaming_large_out(rng, dtype, offset, partial_lines):
    """An out-of-place output past the streaming threshold (4 MiB in this
    suite: conftest) takes the streaming-store path: rows whose start is not
    vector-aligned (offset elements into a buffer), an odd row length, and
    the same bits as NumPy's x + t."""
    z = np.dtype(dtype).itemsize
    assert _core._stream_min_bytes(None) == 4 << 20
    shape = (max(1, (5 << 20) // (z * 300 * 1001)), 300, 1001)
    x = rng.standard_normal(shape).astype(dtype)
    t = rng.standard_normal(shape[1:]).astype(dtype)
    buf = np.empty(x.size + 16, dtype)
    out = buf[offset:offset + x.size].reshape(shape)
    assert out.nbytes >= 4 << 20 and out.ctypes.data % 16 == (buf.ctypes.data + offset * z) % 16
    assert _core.sinusoidal_add_rows(x, t, out=out) is out
    np.testing.assert_array_equal(out, x + t)
    # the same grid through the public entry points
    pe = posemb.AbsolutePE(1001, 300, dtype=dtype)
    np.testing.assert_array_equal(pe(x, out=out), x + pe.embeddings)
    np.testing.assert_array_equal(posemb.add_sinusoidal(x, out=out),
                                  x + posemb.sinusoidal(300, 1001, dtype=dtype))


# ---------------------------------------------------------------- AbsolutePE

def test_absolute_pe_julia_example(rng):
    """PositionalEmbeddings.jl's documented example: AbsolutePE(512, 1000) on randn(Float32, 100, 512, 32), which
    in NumPy's row-major order is (32, 512, 100) = (batch, features, seq)."""
    pe = posemb.AbsolutePE(512, 1000)
    emb = pe.embeddings
    assert emb.shape == (1000, 512) and emb.dtype == np.float32
    np.testing.assert_array_equal(emb, posemb.sinusoidal(1000, 512))
    assert np.abs(emb.astype(np.float64) - torch_truth(1000, 512).numpy()).max() <= F32_TOL
    x = rng.standard_normal((32, 512, 100), dtype=np.float32)
    y = pe(x, seq_axis=-1, feature_axis=-2)
    assert y.shape == (32, 512, 100) and y.dtype == np.float32
    # Julia: x .+ reshape(permutedims(embeddings[:, 1:seq]), seq, features, 1)
    xt = torch.from_numpy(x)
    ref = xt + torch.from_numpy(emb[:100].copy()).T.unsqueeze(0)
    np.testing.assert_array_equal(y, ref.numpy())
    ref_seed = xt + torch_sinusoid(100, 512).T.unsqueeze(0)
    np.testing.assert_allclose(y, ref_seed.numpy(), rtol=0, atol=1e-5)
    # positive axis numbers name the same axes
    np.testing.assert_array_equal(pe(x, seq_axis=2, feature_axis=1), y)


def test_absolute_pe_default_axes_and_start(rng):
    pe = posemb.AbsolutePE(16, 40, base=100.0, dtype=np.float64)
    x = rng.standard_normal((3, 10, 16))
    np.testing.assert_array_equal(pe(x), x + pe.embeddings[:10])
    np.testing.assert_array_equal(pe(x, start=30), x + pe.embeddings[30:40])
    np.testing.assert_array_equal(pe(x, start=30), posemb.add_sinusoidal(x, start=30, base=100.0))
    # seq first, features last, batch in the middle
    xm = rng.standard_normal((10, 3, 16))
    np.testing.assert_array_equal(pe(xm, seq_axis=0), xm + pe.embeddings[:10, None, :])
    # a float32 input uses a float32 table (x + PE as PyTorch); float16 rounds once
    x32 = x.astype(np.float32)
    np.testing.assert_array_equal(pe(x32), x32 + posemb.sinusoidal(10, 16, base=100.0))
    x16 = x.astype(np.float16)
    np.testing.assert_array_equal(
        pe(x16), (x16.astype(np.float64) + pe.embeddings[:10]).astype(np.float16))
    out = np.empty_like(x)
    assert pe(x, out=out) is out
    np.testing.assert_array_equal(out, x + pe.embeddings[:10])


def test_absolute_pe_odd_and_zero_sizes(rng):
    pe = posemb.AbsolutePE(5, 8)
    x = rng.standard_normal((2, 8, 5)).astype(np.float32)
    np.testing.assert_array_equal(pe(x), x + posemb.sinusoidal(8, 5))
    assert posemb.AbsolutePE(0, 4)(np.zeros((2, 3, 0))).shape == (2, 3, 0)
    assert posemb.AbsolutePE(4, 0)(np.zeros((2, 0, 4))).shape == (2, 0, 4)


def test_absolute_pe_embeddings_read_only():
    pe = posemb.AbsolutePE(8, 4)
    with pytest.raises(ValueError):
        pe.embeddings[0, 0] = 1.0


# ---------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("kwargs, error, name", [
    (dict(seq_len=-1, dim=4), ValueError, "seq_len"),
    (dict(seq_len=2.5, dim=4), TypeError, "seq_len"),
    (dict(seq_len=True, dim=4), TypeError, "seq_len"),
    (dict(seq_len=4, dim=-2), ValueError, "dim"),
    (dict(seq_len=4, dim="8"), TypeError, "dim"),
    (dict(seq_len=4, dim=8, base=0.0), ValueError, "base"),
    (dict(seq_len=4, dim=8, base=float("inf")), ValueError, "base"),
    (dict(seq_len=4, dim=8, base="e"), TypeError, "base"),
    (dict(seq_len=4, dim=8, start=-1), ValueError, "start"),
    (dict(seq_len=4, dim=8, start=2**53 - 3), ValueError, "start"),
    (dict(seq_len=4, dim=8, start=1.0), TypeError, "start"),
    (dict(seq_len=4, dim=8, layout="sincos"), ValueError, "layout"),
    (dict(seq_len=4, dim=8, layout=None), ValueError, "layout"),
    (dict(seq_len=4, dim=8, dtype=np.int32), TypeError, "dtype"),
    (dict(seq_len=4, dim=8, dtype="complex64"), TypeError, "dtype"),
])
def test_sinusoidal_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        posemb.sinusoidal(**kwargs)


def test_add_sinusoidal_bad_arguments():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(TypeError, match="x"):
        posemb.add_sinusoidal(np.zeros((2, 3, 4), np.int64))
    with pytest.raises(ValueError, match="x"):
        posemb.add_sinusoidal(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="start"):
        posemb.add_sinusoidal(x, start=-1)
    with pytest.raises(ValueError, match="base"):
        posemb.add_sinusoidal(x, base=-2.0)
    with pytest.raises(ValueError, match="layout"):
        posemb.add_sinusoidal(x, layout="half")
    with pytest.raises(ValueError):                  # NumPy checks out's shape
        posemb.add_sinusoidal(x, out=np.empty((2, 3, 5), np.float32))


def test_absolute_pe_bad_arguments():
    with pytest.raises(ValueError, match="embedding_size"):
        posemb.AbsolutePE(-1, 10)
    with pytest.raises(ValueError, match="max_length"):
        posemb.AbsolutePE(8, -1)
    with pytest.raises(TypeError, match="max_length"):
        posemb.AbsolutePE(8, 10.0)
    with pytest.raises(ValueError, match="base"):
        posemb.AbsolutePE(8, 10, base=0)
    with pytest.raises(TypeError, match="dtype"):
        posemb.AbsolutePE(8, 10, dtype=np.int16)
    pe = posemb.AbsolutePE(8, 10)
    x = np.zeros((2, 6, 8), np.float32)
    with pytest.raises(ValueError, match=r"seq \(6\) \+ start \(5\).*max_length \(10\)"):
        pe(x, start=5)
    with pytest.raises(ValueError, match="max_length"):
        pe(np.zeros((1, 11, 8), np.float32))
    with pytest.raises(ValueError, match="start"):
        pe(x, start=-1)
    with pytest.raises(ValueError, match="embedding_size"):
        pe(np.zeros((2, 6, 7), np.float32))
    with pytest.raises(ValueError, match="embedding_size"):
        pe(x, seq_axis=-1, feature_axis=-2)          # features on the wrong axis
    with pytest.raises(ValueError, match="seq_axis"):
        pe(x, seq_axis=3)
    with pytest.raises(ValueError, match="feature_axis"):
        pe(x, feature_axis=-4)
    with pytest.raises(ValueError, match="seq_axis and feature_axis"):
        pe(x, seq_axis=-1, feature_axis=2)
    with pytest.raises(TypeError, match="x"):
        pe(np.zeros((2, 6, 8), np.int32))
    with pytest.raises(ValueError, match="x"):
        pe(np.zeros(8, np.float32))


def test_table_binding_checks_arguments():
    inv = np.ones(2)
    out = np.zeros((3, 4))
    with pytest.raises(ValueError, match="inv_freq"):
        _core._sinusoidal_table(0, np.ones(3), False, out)
    with pytest.raises(TypeError, match="inv_freq"):
        _core._sinusoidal_table(0, np.ones(2, np.float32), False, out)
    with pytest.raises(ValueError, match="out"):
        _core._sinusoidal_table(0, inv, False, np.zeros((3, 8))[:, ::2])
    with pytest.raises(ValueError, match="out"):
        _core._sinusoidal_table(0, inv, False, np.zeros(4))
    ro = np.zeros((3, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        _core._sinusoidal_table(0, inv, False, ro)
    with pytest.raises(TypeError, match="out"):
        _core._sinusoidal_table(0, inv, False, np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match="start"):
        _core._sinusoidal_table(-1, inv, False, out)
    with pytest.raises(ValueError, match="start"):
        _core._sinusoidal_table(2**53 - 2, inv, False, out)
    assert np.all(out == 0)                          # nothing was written
