"""posemb.learned_pe_forward / learned_pe_backward / LearnedPE against PyTorch.

Reference (the "Positional Encodings in Transformer Models" tutorial (Machine Learning Mastery), TorchLean):
``y = x + nn.Embedding(max_len, D)(positions)``,
with autograd's ``weight.grad`` as the backward (a scatter-add in which repeated
positions accumulate).
"""
import numpy as np
import pytest
from _torch import torch

import posemb
from posemb import _core



# ---------------------------------------------------------------- references

def torch_embedding(weight):
    """nn.Embedding holding a copy of ``weight``."""
    w = torch.from_numpy(np.array(weight))
    emb = torch.nn.Embedding(w.shape[0], w.shape[1], dtype=w.dtype)
    with torch.no_grad():
        emb.weight.copy_(w)
    return emb


def torch_forward_backward(x, weight, positions, grad_out):
    """The MLM tutorial's x + position_embeddings(positions), then autograd."""
    emb = torch_embedding(weight)
    xt = torch.from_numpy(np.array(x)).requires_grad_(True)
    y = xt + emb(torch.from_numpy(np.array(positions, dtype=np.int64)))
    y.backward(torch.from_numpy(np.array(grad_out)))
    return y.detach().numpy(), xt.grad.numpy(), emb.weight.grad.numpy()


def tutorial_learned_encoding(max_seq_len, dim):
    """The MLM tutorial's LearnedPositionalEncoding, verbatim in behaviour
    (the class is made on first use: torch may be absent)."""

    class LearnedPositionalEncoding(torch.nn.Module):
        def __init__(self, max_seq_len, dim):
            super().__init__()
            self.position_embeddings = torch.nn.Embedding(max_seq_len, dim)

        def forward(self, x):
            positions = torch.arange(x.size(1), device=x.device).expand(x.size(0), -1)
            return x + self.position_embeddings(positions)

    return LearnedPositionalEncoding(max_seq_len, dim)


# ---------------------------------------------------------------- forward

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [1, 7, 64])
def test_forward_backward_match_torch_random_positions_with_repeats(rng, dtype, dim):
    max_len, batch, seq = 16, 4, 50            # 200 tokens on 16 rows: many repeats
    w = rng.standard_normal((max_len, dim)).astype(dtype)
    x = rng.standard_normal((batch, seq, dim)).astype(dtype)
    pos = rng.integers(0, max_len, (batch, seq))
    g = rng.standard_normal((batch, seq, dim)).astype(dtype)
    y_ref, gx_ref, gw_ref = torch_forward_backward(x, w, pos, g)

    y = posemb.learned_pe_forward(x, w, pos)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, y_ref)
    gw = posemb.learned_pe_backward(g, pos, num_positions=max_len)
    assert gw.dtype == dtype and gw.shape == (max_len, dim)
    np.testing.assert_array_equal(gw, gw_ref)     # same order of sums: same bits
    np.testing.assert_array_equal(g, gx_ref)      # grad_x is grad_out

    pe = posemb.LearnedPE(max_len, dim, dtype=dtype, seed=1)
    pe.weight[...] = w
    np.testing.assert_array_equal(pe(x, pos), y_ref)
    gx, gw2 = pe.backward(g, pos)
    assert gx is g
    np.testing.assert_array_equal(gw2, gw_ref)


def test_backward_matches_torch_many_tokens(rng):
    """8x512 tokens: above PyTorch's 3000-index serial threshold, still equal."""
    max_len, dim = 300, 32
    pos = rng.integers(0, max_len, (8, 512))
    g = rng.standard_normal((8, 512, dim), dtype=np.float32)
    x = np.zeros_like(g)
    w = np.zeros((max_len, dim), np.float32)
    _, _, gw_ref = torch_forward_backward(x, w, pos, g)
    np.testing.assert_array_equal(posemb.learned_pe_backward(g, pos, num_positions=max_len),
                                  gw_ref)


def test_backward_table_much_larger_than_batch(rng):
    """Few tokens, a tall table: the token-order loop, same result."""
    pos = np.array([[9999, 3, 9999, 0, 3]])
    g = rng.standard_normal((1, 5, 6))
    _, _, gw_ref = torch_forward_backward(np.zeros_like(g), np.zeros((10000, 6)), pos, g)
    gw = posemb.learned_pe_backward(g, pos, num_positions=10000)
    np.testing.assert_array_equal(gw, gw_ref)
    expect = np.zeros((10000, 6))
    np.add.at(expect, pos[0], g[0])
    np.testing.assert_array_equal(gw, expect)


def _scatter_reference(g, pos, m, dtype):
    """zeros + np.add.at (unbuffered, in index order: the bits of a serial loop)."""
    gw = np.zeros((m, g.shape[1]), dtype)
    np.add.at(gw, pos, g.astype(dtype))
    return gw


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n, m", [(200, 16), (200, 400), (12000, 9000), (5, 1000), (0, 3),
                                  (7, 0)])
def test_backward_assign_ignores_prior_contents(rng, dtype, n, m):
    """assign=True starts every row from zero: a NaN-filled table gives the same bits
    as a zeroed one, row by row (m <= 2n: each row summed from its tokens, a row
    with none zeroed) and in token order (a tall table)."""
    d = 9
    acc = np.float64 if dtype == np.float64 else np.float32
    g = rng.standard_normal((n, d)).astype(dtype)
    pos = rng.integers(0, max(m, 1), n) if m else np.zeros(n, np.int64)
    if m == 0:
        g, pos = g[:0], pos[:0]
    expect = _scatter_reference(g, pos, m, acc)
    gw = np.full((m, d), np.nan, acc)
    _core._learned_back(g, pos, gw, True)
    np.testing.assert_array_equal(gw, expect)
    # without assign the same call accumulates onto the contents
    gw = np.ones((m, d), acc)
    _core._learned_back(g, pos, gw)
    np.testing.assert_array_equal(gw, _scatter_reference(np.concatenate(
        [np.ones((m, d), acc), g.astype(acc)]), np.concatenate(
        [np.arange(m), pos]).astype(np.int64), m, acc))


def test_backward_assign_zeroes_rows_without_tokens(rng):
    """4 KiB rows, 8 tokens on each even row: rows no token lands on come
    out +0 from a NaN-filled table, and the others as the serial loop's
    sums."""
    d, m, n = 1024, 300, 1200
    g = rng.standard_normal((n, d), dtype=np.float32)
    pos = 2 * rng.integers(0, m // 2, n)                     # odd rows: no token
    gw = np.full((m, d), np.nan, np.float32)
    _core._learned_back(g, pos, gw, True)
    np.testing.assert_array_equal(gw, _scatter_reference(g, pos, m, np.float32))
    assert not np.signbit(gw[1::2]).any()


def test_backward_negative_zero_and_specials_as_torch():
    """A row's first addend lands as 0 + g: -0 becomes +0, NaN/inf pass, as
    torch.zeros().index_add_ (and unlike a plain copy of the first row)."""
    g = np.array([[-0.0, np.inf, -np.inf, np.nan, 1.0, -0.0],
                  [-0.0, 1.0, 2.0, 3.0, -1.0, 0.0],
                  [-0.0, -0.0, -0.0, -0.0, -0.0, -0.0]], np.float32)
    pos = np.array([0, 0, 2])
    gw = posemb.learned_pe_backward(g, pos, num_positions=3)
    ref = torch.zeros(3, 6).index_add_(0, torch.from_numpy(pos), torch.from_numpy(g)).numpy()
    np.testing.assert_array_equal(gw, ref)
    assert gw.tobytes() == ref.tobytes()                # signs of zeros too
    assert not np.signbit(gw[2]).any() and not np.signbit(gw[1]).any()


def _position_patterns(rng, m, n):
    """Hot rows, a tail of one row, sorted, one row, batches of sequences, random."""
    return [rng.integers(0, min(m, 10), n),
            np.concatenate([np.full(n - n // 4, m - 1), rng.integers(0, m, n // 4)]),
            np.sort(rng.integers(0, m, n)),
            np.full(n, 0),
            np.tile(np.arange(m), n // m + 1)[:n],
            rng.integers(0, m, n)]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("d, m, n", [
    (64, 3000, 4000),     # under 2 tokens per row: many rows with none
    (256, 2000, 8192),    # 4 tokens per row, 1 KiB rows
])
def test_backward_any_thread_count_same_bits(rng, threads, d, m, n):
    """Every way the pool splits the backward (parts of whole table rows,
    cut by their tokens + rows; rows with no token, hot rows) gives the
    serial loop's bits, and torch's, for any thread count and position
    pattern."""
    old = posemb.get_num_threads()
    try:
        posemb.set_num_threads(threads)
        for pos in _position_patterns(rng, m, n):
            g = rng.standard_normal((n, d), dtype=np.float32)
            g[::7] *= 1e8                                    # (order-sensitive sums)
            gw = posemb.learned_pe_backward(g, pos, num_positions=m)
            np.testing.assert_array_equal(gw, _scatter_reference(g, pos, m, np.float32))
            ref = torch.zeros(m, d).index_add_(0, torch.from_numpy(pos), torch.from_numpy(g))
            np.testing.assert_array_equal(gw, ref.numpy())
    finally:
        posemb.set_num_threads(old)


def test_seed_module_default_positions(rng):
    """The MLM tutorial's LearnedPositionalEncoding: positions arange(seq) for each batch row."""
    torch.manual_seed(0)
    mod = tutorial_learned_encoding(512, 24)
    w = mod.position_embeddings.weight.detach().numpy().copy()
    x = rng.standard_normal((3, 40, 24), dtype=np.float32)
    xt = torch.from_numpy(x)
    y_ref = mod(xt)
    g = rng.standard_normal((3, 40, 24), dtype=np.float32)
    y_ref.backward(torch.from_numpy(g))
    np.testing.assert_array_equal(posemb.learned_pe_forward(x, w), y_ref.detach().numpy())
    np.testing.assert_array_equal(posemb.learned_pe_backward(g, num_positions=512),
                                  mod.position_embeddings.weight.grad.numpy())
    pe = posemb.LearnedPE(512, 24)
    pe.weight = w
    np.testing.assert_array_equal(pe(x), y_ref.detach().numpy())


def test_offset(rng):
    w = rng.standard_normal((20, 5))
    x = rng.standard_normal((2, 4, 5))
    np.testing.assert_array_equal(posemb.learned_pe_forward(x, w, offset=16), x + w[16:20])
    g = rng.standard_normal((2, 4, 5))
    expect = np.zeros((20, 5))
    expect[16:20] = g[0] + g[1]
    np.testing.assert_array_equal(posemb.learned_pe_backward(g, num_positions=20, offset=16),
                                  expect)
    pe = posemb.LearnedPE(20, 5, dtype=np.float64)
    np.testing.assert_array_equal(pe(x, offset=3), x + pe.weight[3:7])
    np.testing.assert_array_equal(pe.backward(g, offset=16)[1], expect)


def test_float16(rng):
    w = rng.standard_normal((10, 12)).astype(np.float16)
    x = (rng.standard_normal((3, 8, 12)) * 100).astype(np.float16)
    pos = rng.integers(0, 10, (3, 8))
    y = posemb.learned_pe_forward(x, w, pos)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, x + w[pos])                      # NumPy float16
    np.testing.assert_array_equal(y, (torch.from_numpy(x) + torch_embedding(w)(
        torch.from_numpy(pos))).detach().numpy())                    # PyTorch float16
    # backward: summed in float32 and rounded once
    g = rng.standard_normal((3, 8, 12)).astype(np.float16)
    _, _, gw32 = torch_forward_backward(np.zeros((3, 8, 12), np.float32),
                                        w.astype(np.float32), pos, g.astype(np.float32))
    gw = posemb.learned_pe_backward(g, pos, num_positions=10)
    assert gw.dtype == np.float16
    np.testing.assert_array_equal(gw, gw32.astype(np.float16))


def test_float16_specials_and_vector_tails(rng):
    """float16 rows of 8 values at a time plus a tail (the F16C kernels at the
    AVX2 level, one value at a time below it): subnormals, sums that overflow
    to inf or land on a float16 tie, inf and NaN, against PyTorch's float16
    add (formed in float32, rounded once) and float32 sums rounded once."""
    d, m = 19, 6
    specials = np.array([np.inf, -np.inf, np.nan, 6.0e-8, -6.0e-8, 65504.0, 65504.0, 2050.0,
                         1.0, 3.0e-5, -0.0, 0.0, 1.0e-7, 0.5, -65504.0, 7.0, 1.0, 2.0, 3.0],
                        np.float16)
    x = (rng.standard_normal((2, 5, d)) * 10).astype(np.float16)
    x[0, 0] = specials
    w = (rng.standard_normal((m, d)) * 10).astype(np.float16)
    w[1] = np.array([1.0, 1.0, 1.0, 6.0e-8, 6.0e-8, 16.0, 32.0, 1.0] + [0.5] * 11, np.float16)
    pos = rng.integers(0, m, (2, 5))
    pos[0, 0] = 1
    with np.errstate(over="ignore"):        # (65504 + 16: inf, as NumPy's float16 add)
        y = posemb.learned_pe_forward(x, w, pos)
    ref = (torch.from_numpy(x) + torch.from_numpy(w)[torch.from_numpy(pos)]).numpy()
    np.testing.assert_array_equal(y, ref)
    assert np.isinf(y[0, 0, 5]) and y[0, 0, 7] == 2052.0    # overflow; 2051: tie to even
    g = x
    gw = posemb.learned_pe_backward(g, pos, num_positions=m)
    ref32 = torch.zeros(m, d).index_add_(0, torch.from_numpy(pos.reshape(-1)),
                                         torch.from_numpy(g.reshape(-1, d).astype(np.float32)))
    np.testing.assert_array_equal(gw, ref32.numpy().astype(np.float16))
    assert np.isnan(gw[1, 2]) and np.isinf(gw[1, 0])


def test_broadcast_positions_and_inputs(rng):
    w = rng.standard_normal((30, 8)).astype(np.float32)
    x = rng.standard_normal((4, 6, 8)).astype(np.float32)
    pos_seq = np.array([29, 0, 5, 5, 1, 29])                           # (seq,)
    np.testing.assert_array_equal(posemb.learned_pe_forward(x, w, pos_seq), x + w[pos_seq])
    pos_col = np.array([[3], [7], [3], [0]])                          # (batch, 1)
    np.testing.assert_array_equal(posemb.learned_pe_forward(x, w, pos_col),
                                  x + w[np.broadcast_to(pos_col, (4, 6))])
    np.testing.assert_array_equal(posemb.learned_pe_forward(x, w, 7), x + w[7])
    # broadcast x (zero strides) and more leading axes
    xb = np.broadcast_to(x[:1], (4, 6, 8))
    np.testing.assert_array_equal(posemb.learned_pe_forward(xb, w, pos_seq),
                                  np.ascontiguousarray(xb) + w[pos_seq])
    x4 = rng.standard_normal((2, 3, 6, 8))
    np.testing.assert_array_equal(posemb.learned_pe_forward(x4, w, offset=2),
                                  x4 + w[2:8].astype(np.float64))
    # backward with broadcast positions and a broadcast grad_out
    g = np.broadcast_to(rng.standard_normal((1, 6, 8)).astype(np.float32), (4, 6, 8))
    _, _, gw_ref = torch_forward_backward(np.zeros((4, 6, 8), np.float32), w,
                                          np.broadcast_to(pos_seq, (4, 6)), g)
    np.testing.assert_array_equal(posemb.learned_pe_backward(g, pos_seq, num_positions=30),
                                  gw_ref)


def test_strided_inputs(rng):
    big_w = rng.standard_normal((40, 20))
    w = big_w[::2, 1::2]                                             # (20, 10), strided table
    big = rng.standard_normal((3, 12, 30))
    x = big[:, ::2, ::3][:, :, ::-1]                                 # (3, 6, 10), no unit stride
    pos = rng.integers(0, 20, (3, 6))
    expect = np.ascontiguousarray(x) + np.ascontiguousarray(w)[pos]
    np.testing.assert_array_equal(posemb.learned_pe_forward(x, w, pos), expect)
    g = big[:, 1::2, ::3]
    _, _, gw_ref = torch_forward_backward(np.zeros((3, 6, 10)), w, pos, g)
    np.testing.assert_array_equal(posemb.learned_pe_backward(g, pos, num_positions=20), gw_ref)
    # Fortran-ordered too
    xf = np.asfortranarray(rng.standard_normal((6, 10)))
    np.testing.assert_array_equal(posemb.learned_pe_forward(xf, w), xf + w[:6])


def test_out_and_in_place(rng):
    w = rng.standard_normal((10, 4)).astype(np.float32)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    expect = x + w[:5]
    out = np.empty_like(x)
    assert posemb.learned_pe_forward(x, w, out=out) is out
    np.testing.assert_array_equal(out, expect)
    assert posemb.learned_pe_forward(x, w, out=x) is x
    np.testing.assert_array_equal(x, expect)


def _offset_view(shape, dtype, offset_items):
    """An array of ``shape`` whose data starts offset_items into a fresh buffer."""
    n = int(np.prod(shape))
    return np.empty(n + offset_items, dtype)[offset_items:].reshape(shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_forward_large_outputs_every_store_path(rng, dtype, threads, partial_lines):
    """Outputs of 4 MB and more take streaming stores when y is a separate, 16-byte
    aligned array with rows of whole 16-byte vectors, and the plain kernel
    otherwise (unaligned, odd widths, strided, gapped rows, in place): every way
    gives NumPy's x + w[pos] bit for bit (and a float64 sum rounded once)."""
    old = posemb.get_num_threads()
    try:
        posemb.set_num_threads(threads)
        m = 300
        z = np.dtype(dtype).itemsize
        d = 1024 if dtype == np.float32 else 512                 # 4 KB rows
        b, s = 4, (4 << 20) // (4 * d * z) + 3                   # just over 4 MB
        x = rng.standard_normal((b, s, d)).astype(dtype)
        w = rng.standard_normal((m, d)).astype(dtype)
        pos = rng.integers(0, m, (b, s))
        expect = x + w[pos]
        np.testing.assert_array_equal(
            expect, (x.astype(np.float64) + w[pos].astype(np.float64)).astype(dtype))
        outs = {
            "aligned": np.empty_like(x),
            "unaligned": _offset_view(x.shape, dtype, 1),        # itemsize-aligned only
            "8-byte": _offset_view(x.shape, dtype, 8 // z),      # 16-byte misaligned for f32
            "gapped rows": np.empty((b, s, d + 16), dtype)[:, :, :d],
            "reversed rows": np.empty_like(x)[:, ::-1],
            "strided": np.empty((b, s, 2 * d), dtype)[:, :, ::2],
        }
        for name, out in outs.items():
            out[...] = np.nan
            assert posemb.learned_pe_forward(x, w, pos, out=out) is out, name
            np.testing.assert_array_equal(out, expect, err_msg=name)
        y = posemb.learned_pe_forward(x, w, pos)                # fresh output
        np.testing.assert_array_equal(y, expect)
        # an odd width (rows not whole 16-byte vectors) and in place
        xo = rng.standard_normal((b, s, d + 1)).astype(dtype)
        wo = rng.standard_normal((m, d + 1)).astype(dtype)
        np.testing.assert_array_equal(posemb.learned_pe_forward(xo, wo, pos), xo + wo[pos])
        xi = x.copy()
        assert posemb.learned_pe_forward(xi, w, pos, out=xi) is xi
        np.testing.assert_array_equal(xi, expect)
        # the gufunc called directly: a bad position is a NaN row on every path
        bad = pos.copy()
        bad[1, 2], bad[3, -1] = m, -1
        yb = _core.learned_pe_fwd(x, bad, w)
        assert np.isnan(yb[1, 2]).all() and np.isnan(yb[3, -1]).all()
        ok = np.ones(bad.shape, bool)
        ok[1, 2] = ok[3, -1] = False
        np.testing.assert_array_equal(yb[ok], expect[ok])
    finally:
        posemb.set_num_threads(old)


def test_zero_and_odd_sizes(rng):
    w = rng.standard_normal((5, 0))
    assert posemb.learned_pe_forward(np.zeros((2, 3, 0)), w).shape == (2, 3, 0)
    assert posemb.learned_pe_backward(np.zeros((2, 3, 0)), num_positions=5).shape == (5, 0)
    w = rng.standard_normal((5, 3))
    assert posemb.learned_pe_forward(np.zeros((2, 0, 3)), w).shape == (2, 0, 3)
    np.testing.assert_array_equal(
        posemb.learned_pe_backward(np.zeros((2, 0, 3)), num_positions=5), np.zeros((5, 3)))
    assert posemb.learned_pe_backward(np.zeros((2, 0, 3)), num_positions=0).shape == (0, 3)
    pe = posemb.LearnedPE(0, 3)
    assert pe.weight.shape == (0, 3)
    assert pe(np.zeros((1, 0, 3), np.float32)).shape == (1, 0, 3)


# ---------------------------------------------------------------- LearnedPE

def test_learned_pe_init():
    pe = posemb.LearnedPE(1000, 64, seed=0)
    assert pe.weight.shape == (1000, 64) and pe.weight.dtype == np.float32
    assert abs(pe.weight.mean()) < 1e-3
    assert abs(pe.weight.std() - 0.02) < 1e-3
    np.testing.assert_array_equal(pe.weight, posemb.LearnedPE(1000, 64, seed=0).weight)
    assert not np.array_equal(pe.weight, posemb.LearnedPE(1000, 64, seed=1).weight)
    pe64 = posemb.LearnedPE(10, 4, dtype=np.float64, std=1.0,
                            seed=np.random.default_rng(3))
    assert pe64.weight.dtype == np.float64
    assert np.all(posemb.LearnedPE(3, 4, std=0.0).weight == 0)
    assert "LearnedPE(max_length=10" in repr(pe64)


def test_learned_pe_backward_dtype_follows_table(rng):
    pe = posemb.LearnedPE(8, 4, seed=0)                            # float32 table
    g = rng.standard_normal((2, 8, 4))                              # float64 gradient
    gx, gw = pe.backward(g)
    assert gx is g and gw.dtype == np.float32
    np.testing.assert_array_equal(gw, (g[0] + g[1]).astype(np.float32))


# ---------------------------------------------------------------- bad inputs

def test_out_of_range_positions_raise_and_write_nothing(rng):
    w = rng.standard_normal((10, 4)).astype(np.float32)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    out = np.full_like(x, 7.0)
    for bad, value in [(np.array([0, 1, 10, 2, 3]), "10"), (np.array([0, -1, 2, 3, 4]), "-1"),
                       (np.array([[0, 1, 2, 3, 4], [0, 1, 2, 3, 2**40]]), str(2**40))]:
        with pytest.raises(IndexError, match=f"positions.*{value}"):
            posemb.learned_pe_forward(x, w, bad, out=out)
        with pytest.raises(IndexError, match=f"positions.*{value}"):
            posemb.learned_pe_backward(x, bad, num_positions=10)
        with pytest.raises(IndexError, match=f"positions.*{value}"):
            posemb.LearnedPE(10, 4).backward(x, bad)
    assert np.all(out == 7.0)
    x_before = x.copy()
    with pytest.raises(IndexError, match="positions.*10"):
        posemb.learned_pe_forward(x, w, np.array([0, 1, 10, 2, 3]), out=x)
    np.testing.assert_array_equal(x, x_before)
    # default positions past the table
    with pytest.raises(IndexError, match="positions.*11.*offset=7"):
        posemb.learned_pe_forward(x, w, offset=7, out=out)
    with pytest.raises(IndexError, match="positions must be < 4, got 4"):
        posemb.learned_pe_backward(x, num_positions=4)
    with pytest.raises(IndexError, match="positions.*11"):
        posemb.LearnedPE(10, 4)(x, offset=7)
    assert np.all(out == 7.0)


def test_forward_bad_arguments():
    w = np.zeros((10, 4), np.float32)
    x = np.zeros((2, 5, 4), np.float32)
    with pytest.raises(TypeError, match=r"^x must be a float16, float32 or float64 array, "
                                        r"got dtype int32$"):
        posemb.learned_pe_forward(np.zeros((2, 5, 4), np.int32), w)
    with pytest.raises(ValueError, match=r"^x must have shape \(\.\.\., seq, dim\) when "
                                         r"positions is not given, got \(4,\)$"):
        posemb.learned_pe_forward(np.zeros(4, np.float32), w)    # no seq axis, no positions
    with pytest.raises(TypeError, match="weight"):
        posemb.learned_pe_forward(x, np.zeros((10, 4), np.int64))
    with pytest.raises(ValueError, match="weight"):
        posemb.learned_pe_forward(x, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="weight"):
        posemb.learned_pe_forward(x, np.zeros((10, 5), np.float32))
    with pytest.raises(TypeError, match="positions"):
        posemb.learned_pe_forward(x, w, np.zeros(5))
    with pytest.raises(ValueError, match="positions"):
        posemb.learned_pe_forward(x, w, np.zeros(4, np.int64))    # does not broadcast
    with pytest.raises(ValueError, match="positions"):
        posemb.learned_pe_forward(x, w, np.zeros((3, 2, 5), np.int64))  # would grow x
    with pytest.raises(ValueError, match="offset"):
        posemb.learned_pe_forward(x, w, offset=-1)
    with pytest.raises(TypeError, match="offset"):
        posemb.learned_pe_forward(x, w, offset=1.5)
    with pytest.raises(ValueError, match="offset"):
        posemb.learned_pe_forward(x, w, np.arange(5), offset=2)
    with pytest.raises(ValueError):                                # NumPy checks out's shape
        posemb.learned_pe_forward(x, w, out=np.empty((2, 5, 5), np.float32))


def test_backward_bad_arguments():
    g = np.zeros((2, 5, 4), np.float32)
    with pytest.raises(TypeError, match="num_positions"):
        posemb.learned_pe_backward(g)                             # required keyword
    with pytest.raises(ValueError, match="num_positions"):
        posemb.learned_pe_backward(g, num_positions=-1)
    with pytest.raises(TypeError, match="num_positions"):
        posemb.learned_pe_backward(g, num_positions=5.0)
    with pytest.raises(TypeError, match="grad_out"):
        posemb.learned_pe_backward(np.zeros((2, 5, 4), np.int32), num_positions=5)
    with pytest.raises(ValueError, match="grad_out"):
        posemb.learned_pe_backward(np.float32(1.0), num_positions=5)
    with pytest.raises(ValueError, match="grad_out"):
        posemb.learned_pe_backward(np.zeros(4, np.float32), num_positions=5)
    with pytest.raises(TypeError, match="positions"):
        posemb.learned_pe_backward(g, np.zeros(5, np.float32), num_positions=5)
    with pytest.raises(ValueError, match="positions"):
        posemb.learned_pe_backward(g, np.zeros(3, np.int64), num_positions=5)
    with pytest.raises(ValueError, match="offset"):
        posemb.learned_pe_backward(g, num_positions=5, offset=-2)


def test_to_float16_rounds_as_numpy_and_checks_arguments(rng):
    """The float32 -> float16 rounding of a float16 gradient's sums (F16C at
    the AVX2 level): NumPy's cast's values (ties to even, overflow to inf,
    subnormals), a tail after 8-value vectors; bad arguments named."""
    src = (rng.standard_normal((5, 13)) * 10.0 ** rng.uniform(-9, 5, (5, 13))).astype(np.float32)
    src[0, :6] = [65519.99, 65520.0, 2.0**-25, 2.0**-24 * 1.5, 1.0 + 2.0**-11, np.nan]
    out = np.empty(src.shape, np.float16)
    with np.errstate(over="ignore"):
        _core._to_float16(src, out)
        np.testing.assert_array_equal(out, src.astype(np.float16))
    with pytest.raises(TypeError, match="src"):
        _core._to_float16(src.astype(np.float64), out)
    with pytest.raises(TypeError, match="out"):
        _core._to_float16(src, np.empty(src.shape, np.float32))
    with pytest.raises(ValueError, match="out"):
        _core._to_float16(src, np.empty((5, 12), np.float16))


def _bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _bf16_round(f):
    """float32 -> bfloat16 bits, nearest even; NaN made quiet (as torch)."""
    u = np.asarray(f, np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7fff) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), ((u >> 16) | np.uint32(0x40)).astype(np.uint16), r)


def test_bfloat16_bits_forward_and_backward(rng):
    """The bfloat16 loops (8 values at a time at the AVX2 level; one at a time
    below it and for strided rows; a tail after the vectors): the forward is
    the float32 sum rounded once to nearest even, NaN and inf as torch's
    bfloat16 add; the backward sums each row's tokens in float32."""
    from posemb import _learned
    x = _bf16_round(rng.standard_normal((3, 6, 21)).astype(np.float32) * 100)
    w = _bf16_round(rng.standard_normal((9, 21)).astype(np.float32))
    x[0, 0, :5] = [0x7fc1, 0xff80, 0x7f80, 0x0001, 0x7f7f]      # NaN, -inf, inf, tiny, max
    w[:, :5] = [0x3f80, 0x7f80, 0xff80, 0x8001, 0x7f7f]
    w[2, 5:9] = [0x3b80, 0x3b81, 0x3c00, 0x3c01]        # x + w: ties and near ties
    x[0, 1, 5:9] = [0x3f80, 0x3f80, 0x4080, 0x4080]
    pos = rng.integers(0, 9, (3, 6))
    pos[0, :2] = 2
    with np.errstate(over="ignore", invalid="ignore"):
        want = _bf16_round(_bf16_value(x) + _bf16_value(w)[pos])
        got = _learned.forward_bf16_bits(x, w, pos)
        np.testing.assert_array_equal(got, want)
        strided = np.empty((3, 6, 42), np.uint16)[..., ::2]
        np.testing.assert_array_equal(_core.learned_pe_fwd_bf16(x, pos, w, out=strided), want)
    g = x[:, :, 5:]                                      # finite rows, not contiguous
    gw = _learned.backward_bf16_bits(g, pos, 9)
    assert gw.dtype == np.float32
    np.testing.assert_array_equal(gw, _scatter_reference(_bf16_value(np.ascontiguousarray(g))
                                                         .reshape(-1, 16), pos.reshape(-1), 9,
                                                         np.float32))


def test_learned_pe_bad_arguments():
    with pytest.raises(ValueError, match="max_length"):
        posemb.LearnedPE(-1, 4)
    with pytest.raises(TypeError, match="max_length"):
        posemb.LearnedPE(4.0, 4)
    with pytest.raises(ValueError, match="dim"):
        posemb.LearnedPE(4, -4)
    with pytest.raises(TypeError, match="dtype"):
        posemb.LearnedPE(4, 4, dtype=np.int8)
    with pytest.raises(ValueError, match="std"):
        posemb.LearnedPE(4, 4, std=-0.1)
    with pytest.raises(ValueError, match="std"):
        posemb.LearnedPE(4, 4, std=float("nan"))
    with pytest.raises(TypeError, match="std"):
        posemb.LearnedPE(4, 4, std="wide")
    with pytest.raises(TypeError, match="seed"):
        posemb.LearnedPE(4, 4, seed="abc")
    pe = posemb.LearnedPE(4, 4)
    with pytest.raises(ValueError, match="weight"):
        pe(np.zeros((1, 2, 5), np.float32))


def test_backward_binding_checks_everything_before_writing():
    g = np.ones((4, 3), np.float32)
    pos = np.array([0, 1, 2, 1])
    gw = np.zeros((3, 3), np.float32)
    with pytest.raises(IndexError, match="positions.*got 3"):
        _core._learned_back(g, np.array([0, 1, 2, 3]), gw)
    with pytest.raises(IndexError, match="positions.*got -5"):
        _core._learned_back(g, np.array([0, -5, 2, 1]), gw)
    assert np.all(gw == 0)
    with pytest.raises(TypeError, match="grad_weight"):
        _core._learned_back(g, pos, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="grad_weight"):
        _core._learned_back(g, pos, np.zeros((3, 4), np.float32))
    ro = np.zeros((3, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="grad_weight"):
        _core._learned_back(g, pos, ro)
    with pytest.raises(ValueError, match="grad_weight"):
        _core._learned_back(g, pos, g)                           # overlaps grad_out
    both = np.zeros(11, np.int64)
    with pytest.raises(ValueError, match="grad_weight"):        # overlaps positions
        _core._learned_back(np.ones((4, 3)), both[:4], both[2:11].view(np.float64).reshape(3, 3))
    with pytest.raises(ValueError, match="grad_out"):
        _core._learned_back(np.ones((4, 6), np.float32)[:, ::2], pos, gw)
    with pytest.raises(TypeError, match="grad_out"):
        _core._learned_back(np.ones((4, 3), np.int32), pos, gw)
    with pytest.raises(TypeError, match="positions"):
        _core._learned_back(g, pos.astype(np.int32), gw)
    with pytest.raises(ValueError, match="positions"):
        _core._learned_back(g, pos[:3], gw)
    assert np.all(gw == 0)
    _core._learned_back(g, pos, gw)
    np.testing.assert_array_equal(gw, [[1, 1, 1], [2, 2, 2], [1, 1, 1]])


def test_forward_gufunc_never_reads_out_of_bounds():
    """Called directly (bypassing the checks), a bad position gives NaN, not a crash."""
    w = np.ones((3, 4))
    y = _core.learned_pe_fwd(np.zeros((2, 4)), np.array([5, -1]), w)
    assert np.all(np.isnan(y))
    y16 = _core.learned_pe_fwd(np.zeros((1, 4), np.float16), np.array([3]),
                               np.ones((3, 4), np.float16))
    assert np.all(np.isnan(y16))


@pytest.mark.parametrize("threads", [1, 2])
def test_backward_many_tokens_per_row_is_serial_bits(rng, threads):
    """About 300 tokens per row of a short table (each row's addends summed
    group after group, 200 features: 6 chunks of 32 and a tail of 8): the
    bits of the serial loop, at any thread count."""
    n, m, d = 20000, 64, 200
    g = rng.standard_normal((n, d), dtype=np.float32)
    pos = rng.integers(0, m, n)
    old = posemb.get_num_threads()
    try:
        posemb.set_num_threads(threads)
        gw = posemb.learned_pe_backward(g, pos, num_positions=m)
    finally:
        posemb.set_num_threads(old)
    np.testing.assert_array_equal(gw, _scatter_reference(g, pos, m, np.float32))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("d", [1, 8, 31, 77, 96])
def test_backward_row_sums_every_dtype_width_and_group(rng, threads, dtype, d):
    """The grouped sums (a row's addends read side by side, 32 float32 or 16
    float64 columns per chunk at the AVX2 level, the columns past the last
    chunk and the portable level 8 at a time; a row with more addends than a
    group carries its partial sums to the next group): the serial loop's bits
    for every gradient dtype and width, with a hot row of 40 addends, rows of
    one, rows of none, order-sensitive magnitudes, assigning and
    accumulating."""
    from posemb import _learned
    m, n = 50, 300
    pos = np.concatenate([np.zeros(40, np.int64), rng.integers(1, m - 5, n - 40)])
    rng.shuffle(pos)
    g32 = rng.standard_normal((n, d)).astype(np.float32)
    g32[::5] *= 3e3 if dtype == "float16" else 1e7           # (order-sensitive sums)
    acc = np.float64 if dtype == "float64" else np.float32
    if dtype == "bfloat16":
        g = _bf16_round(g32)                                  # bit patterns
        gv = _bf16_value(g)
    else:
        g = g32.astype(dtype)
        gv = g.astype(acc)
    start = rng.standard_normal((m, d)).astype(acc)
    old = posemb.get_num_threads()
    try:
        posemb.set_num_threads(threads)
        if dtype == "bfloat16":
            got = _learned.backward_bf16_bits(g, pos, m)
            np.testing.assert_array_equal(got, _scatter_reference(gv, pos, m, acc))
            return
        got = np.full((m, d), np.nan, acc)
        _core._learned_back(g, pos, got, True)
        np.testing.assert_array_equal(got, _scatter_reference(gv, pos, m, acc))
        assert not np.signbit(got[m - 5:]).any()              # rows with no token: +0
        got = start.copy()
        _core._learned_back(g, pos, got)
    finally:
        posemb.set_num_threads(old)
    want = start.copy()
    np.add.at(want, pos, gv)                                  # serial, in token order
    np.testing.assert_array_equal(got, want)
