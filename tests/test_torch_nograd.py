"""posemb.torch's RoPE without autograd machinery: when no input needs a
gradient (torch.no_grad(), or plain tensors), apply_rope and
apply_rotary_pos_emb call the kernel directly; the results are the same
bits as the autograd path and as HF's formula."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import posemb  # noqa: E402
import posemb.torch as pt  # noqa: E402


def hf(x, c, s):
    h = x.shape[-1] // 2
    return x * c + torch.cat((-x[..., h:], x[..., :h]), -1) * s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("unsqueeze_dim", [1, -3, 2])
def test_no_grad_equals_autograd_and_hf(dtype, unsqueeze_dim):
    g = torch.Generator().manual_seed(0)
    b, hq, hk, s, d = 2, 4, 2, 5, 16
    if unsqueeze_dim == 2:                       # (b, s, h, d)
        q = torch.randn(b, s, hq, d, generator=g).to(dtype)
        k = torch.randn(b, s, hk, d, generator=g).to(dtype)
    else:
        q = torch.randn(b, hq, s, d, generator=g).to(dtype)
        k = torch.randn(b, hk, s, d, generator=g).to(dtype)
    cos, sin = pt.RotaryEmbedding(dim=d)(q.float(), torch.arange(s).expand(b, s))
    cos, sin = cos.to(dtype), sin.to(dtype)
    with torch.no_grad():
        qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert qe.grad_fn is None and ke.grad_fn is None and qe.dtype == dtype
    qg = q.clone().requires_grad_()
    qa, ka = pt.apply_rotary_pos_emb(qg, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert qa.grad_fn is not None
    assert torch.equal(qe, qa.detach()) and torch.equal(ke, ka)
    c, s_ = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    if dtype != torch.float16:                    # HF's float16 rounds each product
        assert torch.equal(qe, hf(q, c, s_)) and torch.equal(ke, hf(k, c, s_))
    # plain tensors (grad mode on, nothing requires grad): no autograd either
    qp, kp = pt.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert qp.grad_fn is None and torch.equal(qp, qe) and torch.equal(kp, ke)
    y = pt.apply_rope(q, c, s_)
    assert y.grad_fn is None and torch.equal(y, qe)


def test_no_grad_with_parameters_neg_bits_and_views():
    """Inputs that require grad under no_grad, a tensor with its neg bit set,
    strided views: the direct path still computes HF's values."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 6, 8, generator=g)
    base = torch.randn(1, 4, 6, 8, generator=g)
    k_neg = -base
    k_neg_bit = torch._neg_view(base) if hasattr(torch, "_neg_view") else -base
    cos, sin = pt.RotaryEmbedding(dim=8)(q, torch.arange(6)[None])
    qp = torch.nn.Parameter(q.clone())
    with torch.no_grad():
        for kk in (k_neg, k_neg_bit, base.transpose(1, 2).contiguous().transpose(1, 2)):
            qe, ke = pt.apply_rotary_pos_emb(qp, kk, cos, sin)
            c, s_ = cos.unsqueeze(1), sin.unsqueeze(1)
            assert torch.equal(qe, hf(q, c, s_))
            assert torch.equal(ke, hf(kk.resolve_neg(), c, s_))
            assert qe.grad_fn is None
    # mixed dtypes promote as PyTorch does, without autograd
    with torch.no_grad():
        qe, _ = pt.apply_rotary_pos_emb(q.double(), base, cos, sin)
    assert qe.dtype == torch.float64
    np.testing.assert_allclose(qe.numpy(), hf(q.double(), cos.double().unsqueeze(1),
                                              sin.double().unsqueeze(1)).numpy(), rtol=1e-6)


def _hf_partial(x, c, s):
    """HF's formula on the first r = c.shape[-1] features, the rest passed
    through (broadcast to the rotated part's shape)."""
    r = c.shape[-1]
    rot = hf(x[..., :r], c, s)
    return torch.cat([rot, x[..., r:].expand(rot.shape[:-1] + (x.shape[-1] - r,))], -1)


@pytest.mark.parametrize("q_shape, table_shape", [
    ((1, 4, 5, 8), (2, 5, 8)),       # tables' batch broadcasts q's
    ((2, 4, 5, 8), (1, 5, 8)),       # q's batch broadcasts the tables'
    ((3, 4, 5, 8), (3, 5, 8)),
    ((1, 4, 5, 8), (1, 5, 6)),       # partial rotary
    ((1, 4, 5, 8), (1, 1, 8)),       # one table row for every position
    ((4, 5, 8), (1, 5, 8)),          # q without a batch axis
])
def test_no_grad_broadcasting_as_hf(q_shape, table_shape):
    """The no-grad road hands HF's (batch, seq, dim) tables to the gufunc as
    they are; every broadcast gives HF's shapes and values (float64)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(*q_shape, generator=g, dtype=torch.float64)
    k = torch.randn(*q_shape[:-3], 2, *q_shape[-2:], generator=g, dtype=torch.float64) \
        if len(q_shape) == 4 else torch.randn(2, *q_shape[-2:], generator=g, dtype=torch.float64)
    c = torch.randn(*table_shape, generator=g, dtype=torch.float64)
    s = torch.randn(*table_shape, generator=g, dtype=torch.float64)
    with torch.no_grad():
        qe, ke = pt.apply_rotary_pos_emb(q, k, c, s)
    for got, x in ((qe, q), (ke, k)):
        want = _hf_partial(x, c.unsqueeze(1), s.unsqueeze(1))
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-15)
    with pytest.raises(ValueError, match="must broadcast"):
        pt.apply_rotary_pos_emb(q, k, torch.randn(1, 7, 8, dtype=torch.float64),
                                torch.randn(1, 7, 8, dtype=torch.float64))


def test_large_no_grad_outputs_reuse_the_output_cache():
    """A large result under no_grad is a NumPy output wrapped by
    torch.from_numpy: its memory returns to posemb's output cache when the
    tensor is freed, and the next call of that size reuses it."""
    limit = posemb._native._out_cache(None)[0]
    posemb.empty_cache()
    try:
        q, k = torch.randn(1, 32, 1024, 128), torch.randn(1, 8, 1024, 128)
        cos, sin = pt.RotaryEmbedding(dim=128)(q, torch.arange(1024)[None])
        want = hf(q, cos[:, None], sin[:, None]), hf(k, cos[:, None], sin[:, None])
        with torch.no_grad():
            a, b = pt.apply_rotary_pos_emb(q, k, cos, sin)
            where = a.data_ptr()
            a.fill_(float("nan"))
            del a, b
            assert posemb._native._out_cache(None)[1:] == ((q.numel() + k.numel()) * 4, 2)
            a, b = pt.apply_rotary_pos_emb(q, k, cos, sin)
        assert a.data_ptr() == where
        torch.testing.assert_close(a, want[0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(b, want[1], rtol=1e-6, atol=1e-6)
    finally:
        posemb.set_output_cache(limit)
        posemb.empty_cache()


def test_large_autograd_outputs_and_gradients_reuse_the_output_cache():
    """With autograd too, forward results and input gradients are posemb
    outputs wrapped by torch.from_numpy: freed, their memory goes back to
    the output cache, and the next step of the same shapes reuses it (the
    values are HF's formula and its autograd gradients)."""
    limit = posemb._native._out_cache(None)[0]
    posemb.empty_cache()
    try:
        gen = torch.Generator().manual_seed(3)
        q = torch.randn(1, 32, 1024, 128, generator=gen, requires_grad=True)
        k = torch.randn(1, 8, 1024, 128, generator=gen, requires_grad=True)
        gq, gk = torch.randn(q.shape, generator=gen), torch.randn(k.shape, generator=gen)
        cos, sin = pt.RotaryEmbedding(dim=128)(q, torch.arange(1024)[None])
        qr, kr = q.detach().clone().requires_grad_(True), k.detach().clone().requires_grad_(True)
        torch.autograd.backward((hf(qr, cos[:, None], sin[:, None]),
                                 hf(kr, cos[:, None], sin[:, None])), (gq, gk))
        used = set()
        for step in range(2):
            qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin)
            torch.autograd.backward((qe, ke), (gq, gk))
            ptrs = {qe.data_ptr(), ke.data_ptr(), q.grad.data_ptr(), k.grad.data_ptr()}
            if step:
                assert ptrs == used            # every block came back from the cache
            used = ptrs
            torch.testing.assert_close(qe, hf(q.detach(), cos[:, None], sin[:, None]),
                                       rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(q.grad, qr.grad, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(k.grad, kr.grad, rtol=1e-6, atol=1e-6)
            for t in (qe, ke, q.grad, k.grad):
                t.detach().fill_(float("nan"))     # reused memory is overwritten
            del t, qe, ke
            q.grad = k.grad = None
            assert posemb._native._out_cache(None)[2] == 4
    finally:
        posemb.set_output_cache(limit)
        posemb.empty_cache()
