"""posemb for PyTorch: CPU tensors in and out, autograd through posemb's kernels.

``import posemb.torch`` (needs PyTorch: ``pip install "posemb[torch]"``;
``import posemb`` alone never imports torch).  Every function here takes
and returns CPU ``torch.Tensor``\\ s:

* **No copies.**  Tensors are handed to posemb's C kernels as NumPy views of
  their own memory (``Tensor.numpy()``: contiguous or strided alike), and the
  results come back as tensors over the arrays the kernels wrote
  (``torch.from_numpy``).
* **Autograd.**  Each differentiable call is a ``torch.autograd.Function``
  whose backward also runs posemb's C kernels: the RoPE gradient is
  :func:`posemb.apply_rope_backward` (the inverse rotation), the learned
  table's gradient is :func:`posemb.learned_pe_backward`, the T5 table's
  :func:`posemb.t5_relative_bias_backward`.  Gradients to RoPE's ``cos``/``sin``
  and to ALiBi slopes, rarely trained, are computed with plain tensor/NumPy
  arithmetic.  Backward passes are not themselves differentiable
  (no double backward).
* **dtypes.**  float32 and float64 natively, float16 through posemb's float16
  kernels (computed in float32, rounded once), bfloat16 computed in float32
  and returned as bfloat16.  Mixed inputs follow PyTorch's type promotion.
* **CPU only.**  A CUDA (or meta, MPS, ...) tensor is a ``TypeError``: posemb
  is a CPU library; keep PyTorch's own formulas on accelerators.

Examples
--------
>>> import torch, posemb.torch as pt
>>> rope = pt.RotaryEmbedding(dim=64, max_position_embeddings=2048)
>>> q = torch.randn(2, 8, 10, 64, requires_grad=True)    # (batch, heads, seq, head_dim)
>>> k = torch.randn(2, 2, 10, 64, requires_grad=True)
>>> cos, sin = rope(q, torch.arange(10)[None].expand(2, 10))
>>> q_emb, k_emb = pt.apply_rotary_pos_emb(q, k, cos, sin)
>>> (q_emb.sum() + k_emb.sum()).backward()
>>> q.grad.shape, k.grad.shape
(torch.Size([2, 8, 10, 64]), torch.Size([2, 2, 10, 64]))
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

try:
    import torch
    from torch import nn
    from torch.autograd.function import once_differentiable
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "posemb.torch needs PyTorch: pip install \"posemb[torch]\" "
        "(the rest of posemb works without it)") from e

import posemb
from posemb import _rope as _rope_bits

__all__ = [
    "apply_rope",
    "apply_rotary_pos_emb",
    "RotaryEmbedding",
    "sinusoidal",
    "alibi_bias",
    "t5_relative_bias",
    "LearnedPositionalEmbedding",
]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TO_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


# ---------------------------------------------------------------- tensor <-> array


def _check(t: Any, name: str, *, floating: bool = True) -> torch.Tensor:
    """A CPU, strided tensor (of a float dtype when ``floating``)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_cpu and t.layout == torch.strided and (not floating or t.dtype in _FLOATS):
        return t           # (the common case, in few attribute reads: decode steps)
    if t.device.type != "cpu":
        raise TypeError(
            f"posemb is a CPU library: {name} is on device '{t.device}'. Move it with "
            f"{name}.cpu(), or use PyTorch's own formula on that device.")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if floating and t.dtype not in _FLOATS:
        raise TypeError(
            f"{name} must be a float16, bfloat16, float32 or float64 tensor, got {t.dtype}")
    return t


def _check_device(device: Any) -> None:
    if device is not None and torch.device(device).type != "cpu":
        raise TypeError(f"posemb is a CPU library: device must be 'cpu', got '{device}'")


def _result_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """PyTorch's promotion of the inputs' dtypes (the dtype of the result)."""
    return functools.reduce(torch.promote_types, (t.dtype for t in tensors))


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in: bfloat16 goes through float32."""
    return torch.float32 if dtype == torch.bfloat16 else dtype


def _view(t: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """``t`` as a NumPy array of ``dtype``: a view of its memory when the
    dtypes agree (strides kept), else a converted copy."""
    t = t.detach()
    if t.dtype != dtype:
        t = t.to(dtype)
    return t.resolve_neg().resolve_conj().numpy()


def _tensor(a: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A tensor over ``a``'s memory (a copy only for read-only arrays), cast
    to ``dtype`` when given and different."""
    if not a.flags.writeable:
        a = np.array(a)
    t = torch.from_numpy(a)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return t


def _np_dtype(dtype: torch.dtype) -> Any:
    return _TO_NUMPY[dtype]


def _positions(positions: Any, name: str) -> np.ndarray:
    """Integer positions (a tensor or array-like) as a NumPy int64 array."""
    if isinstance(positions, torch.Tensor):
        _check(positions, name, floating=False)
        if positions.dtype.is_floating_point or positions.dtype.is_complex or \
                positions.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor, got {positions.dtype}")
        positions = positions.detach().to(torch.int64).numpy()
    p = np.asarray(positions)
    if p.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {p.dtype}")
    return p.astype(np.int64, copy=False)


# ---------------------------------------------------------------- RoPE


def _rotate(x: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """The rotation partner of every feature: HF ``rotate_half`` or the
    interleaved ``(-x[2i+1], x[2i])``."""
    if interleaved:
        pairs = x.unflatten(-1, (-1, 2))
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rope_forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  interleaved: bool) -> tuple[torch.Tensor, torch.dtype]:
    """posemb.apply_rope on tensors (no autograd): the result and the dtype
    the kernel computed in."""
    dt = x.dtype
    if dt in _TO_NUMPY and cos.dtype is dt and sin.dtype is dt:
        y = posemb.apply_rope(_array(x), _array(cos), _array(sin), interleaved=interleaved)
        return torch.from_numpy(y), dt
    if dt is torch.bfloat16 and cos.dtype is dt and sin.dtype is dt:
        # one pass: bfloat16 in, float32 maths, rounded once to bfloat16 out
        y = _rope_bits._run_bf16_bits(2 * interleaved, _bf16_bits(x), _bf16_bits(cos),
                                      _bf16_bits(sin))
        return torch.from_numpy(y.view(np.int16)).view(torch.bfloat16), torch.float32
    out_dtype = _result_dtype(x, cos, sin)
    work = _work_dtype(out_dtype)
    y = posemb.apply_rope(_view(x, work), _view(cos, work), _view(sin, work),
                          interleaved=interleaved)
    return _tensor(y, out_dtype), work


def _array(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a tensor that needs no gradient here."""
    try:
        return t.numpy()
    except RuntimeError:   # requires grad (under no_grad), or a neg/conj bit
        return t.detach().resolve_neg().resolve_conj().numpy()


def _bf16_bits(t: torch.Tensor) -> np.ndarray:
    """A bfloat16 tensor's memory as a uint16 array (strides kept)."""
    if t.is_neg():
        t = t.resolve_neg()
    return _array(t.view(torch.int16)).view(np.uint16)


def _needs_grad(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad
                                        or sin.requires_grad)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                interleaved: bool) -> torch.Tensor:
    """apply_rope on checked tensors: the kernel directly when no gradient
    is needed (no autograd.Function machinery), else through autograd."""
    if not _needs_grad(x, cos, sin):
        return _rope_forward(x, cos, sin, interleaved)[0]
    return _ApplyRope.apply(x, cos, sin, interleaved)


class _ApplyRope(torch.autograd.Function):
    """y = x*cos + rotate(x)*sin on the first r features (posemb.apply_rope)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                interleaved: bool) -> torch.Tensor:
        y, work = _rope_forward(x, cos, sin, interleaved)
        ctx.interleaved = interleaved
        ctx.work = work
        table_grad = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        ctx.save_for_backward(x if table_grad else None, cos, sin)
        ctx.x_meta = (x.shape, x.dtype)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        x, cos, sin = ctx.saved_tensors
        work = ctx.work
        x_shape, x_dtype = ctx.x_meta
        gx = gc = gs = None
        if ctx.needs_input_grad[0]:
            g = posemb.apply_rope_backward(_view(grad, work), _view(cos, work),
                                           _view(sin, work), interleaved=ctx.interleaved)
            gx = _tensor(g).sum_to_size(x_shape).to(x_dtype)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            r = cos.shape[-1]
            g_r = grad[..., :r].to(work)
            x_r = x[..., :r].to(work)
            if ctx.needs_input_grad[1]:
                gc = (g_r * x_r).sum_to_size(cos.shape).to(cos.dtype)
            if ctx.needs_input_grad[2]:
                gs = (g_r * _rotate(x_r, ctx.interleaved)).sum_to_size(sin.shape).to(sin.dtype)
        return gx, gc, gs, None


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
               interleaved: bool = False) -> torch.Tensor:
    """Rotate ``x`` by the tables, differentiably: :func:`posemb.apply_rope` on tensors.

    ``y = x*cos + rotate(x)*sin`` on the first ``r = cos.shape[-1]`` features
    (partial rotary when ``r < d``; the rest pass through), with
    ``cos``/``sin`` broadcasting against ``x``'s leading axes.  Half-split
    pairs ``(i, i + r/2)`` (HF ``rotate_half``) by default, ``(2i, 2i+1)``
    (GPT-J, Meta) with ``interleaved=True``.  The gradient to ``x`` is the
    inverse rotation, run by :func:`posemb.apply_rope_backward`; ``cos`` and
    ``sin`` get gradients too when they require them.

    Parameters
    ----------
    x : torch.Tensor, shape ``(..., d)``
    cos, sin : torch.Tensor, shape broadcastable to ``(..., r)``, ``r`` even ``<= d``
    interleaved : bool

    Returns
    -------
    torch.Tensor
        The broadcast shape of ``x`` with the tables, dtype promoted as in PyTorch.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    >>> cos = torch.cos(torch.arange(5.0, dtype=torch.float64)[:, None] * torch.ones(8))
    >>> sin = torch.sin(torch.arange(5.0, dtype=torch.float64)[:, None] * torch.ones(8))
    >>> y = pt.apply_rope(x, cos, sin)
    >>> bool(torch.allclose(y.norm(dim=-1), x.norm(dim=-1)))      # a rotation
    True
    >>> y.backward(y.detach())              # the gradient rotates y back to x
    >>> bool(torch.allclose(x.grad, x.detach()))
    True
    """
    _check(x, "x")
    _check(cos, "cos")
    _check(sin, "sin")
    return _apply_rope(x, cos, sin, bool(interleaved))


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                         sin: torch.Tensor, position_ids: Any = None,
                         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for Hugging Face's ``apply_rotary_pos_emb``, with autograd.

    ``cos``/``sin`` (``(batch, seq, rotary_dim)``, from :class:`RotaryEmbedding`
    or HF's rotary module) get a new axis at ``unsqueeze_dim`` to broadcast
    against ``q``/``k`` of shape ``(batch, heads, seq, head_dim)`` (use
    ``unsqueeze_dim=2`` for ``(batch, seq, heads, head_dim)``); both are
    rotated with HF's half-split formula ``x*cos + rotate_half(x)*sin``
    (partial rotary when ``rotary_dim < head_dim``).  ``q`` and ``k`` may have
    different head counts (grouped-query attention).  ``position_ids`` is
    accepted and unused, as in transformers.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> q = torch.randn(1, 4, 6, 8, requires_grad=True)
    >>> k = torch.randn(1, 2, 6, 8, requires_grad=True)
    >>> cos, sin = pt.RotaryEmbedding(dim=8)(q, torch.arange(6)[None])
    >>> qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin)
    >>> qe.shape, ke.shape
    (torch.Size([1, 4, 6, 8]), torch.Size([1, 2, 6, 8]))
    """
    del position_ids  # unused, as in transformers
    _check(q, "q")
    _check(k, "k")
    _check(cos, "cos")
    _check(sin, "sin")
    unsqueeze_dim = posemb._checks.size(unsqueeze_dim, "unsqueeze_dim", minimum=-(2**63))
    if not -(cos.ndim + 1) <= unsqueeze_dim <= cos.ndim:   # torch's IndexError names nothing
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin of shape "
                         f"{tuple(cos.shape)}")
    dt = q.dtype
    if (dt in _TO_NUMPY and k.dtype is dt and cos.dtype is dt and sin.dtype is dt
            and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                                  or cos.requires_grad or sin.requires_grad))):
        # no autograd: one view of each table for both calls (decode steps;
        # written for few interpreter steps: this path is the whole overhead)
        cn, sn = _array(cos), _array(sin)
        ax = unsqueeze_dim if unsqueeze_dim >= 0 else unsqueeze_dim + cn.ndim + 1
        cn = cn.reshape(cn.shape[:ax] + (1,) + cn.shape[ax:])
        sn = sn.reshape(sn.shape[:ax] + (1,) + sn.shape[ax:])
        return (torch.from_numpy(posemb.apply_rope(_array(q), cn, sn)),
                torch.from_numpy(posemb.apply_rope(_array(k), cn, sn)))
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return _apply_rope(q, cos, sin, False), _apply_rope(k, cos, sin, False)


def _config_dict(config: Any) -> dict[str, Any]:
    """A transformers config object (``to_dict()``), a dict, or a namespace."""
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    if hasattr(config, "__dict__"):
        return dict(vars(config))
    raise TypeError(f"config must be a dict or a transformers config, got {type(config).__name__}")


class RotaryEmbedding(nn.Module):
    """Hugging Face's rotary module (``LlamaRotaryEmbedding``) on posemb's tables.

    ``forward(x, position_ids) -> (cos, sin)``, each ``(batch, seq, rotary_dim)``
    in ``x``'s dtype, exactly like transformers' module, so it drops into a
    model next to :func:`apply_rotary_pos_emb`.  The tables come from a
    :class:`posemb.RoPE` (angles in float64, rounded once -- transformers forms
    them in float32 and drifts by ~1e-3 rad near position 32k), cached and
    grown on demand; scaling dicts (``linear``, ``dynamic``, ``yarn``,
    ``longrope``, ``llama3``) follow :func:`posemb.rope_scaling_parameters`,
    their attention factor multiplying the tables as in transformers.

    Give either a model ``config`` (a transformers config object or a parsed
    ``config.json`` dict, read by :func:`posemb.rope_config`), or ``dim``
    and friends.

    Parameters
    ----------
    config : dict or transformers config, optional
    device : optional
        Must be None or CPU (posemb is a CPU library).
    dim : int, optional
        Rotary width (even) when no ``config`` is given.
    max_position_embeddings : int
        The model's context length (rows cached up front, at most 4096; the
        length the ``dynamic`` and ``longrope`` types compare against).
    base : float
        ``rope_theta``.
    scaling : dict, optional
        A transformers ``rope_scaling`` dict.
    interleaved : bool
        Tables for the interleaved layout (use ``apply_rope(..., interleaved=True)``).

    Attributes
    ----------
    inv_freq : torch.Tensor
        float32 buffer, ``(rotary_dim // 2,)`` (computed in float64), as in transformers.
    attention_scaling : float
        The yarn/longrope attention factor (1.0 otherwise).
    rope : posemb.RoPE
        The NumPy module that makes and caches the tables.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> config = {"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 500000.0,
    ...           "max_position_embeddings": 131072,
    ...           "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
    ...                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    ...                            "original_max_position_embeddings": 8192}}
    >>> rotary = pt.RotaryEmbedding(config)
    >>> x = torch.randn(2, 4, 7, 64, dtype=torch.bfloat16)
    >>> cos, sin = rotary(x, torch.arange(100, 107)[None].expand(2, 7))
    >>> cos.shape, cos.dtype
    (torch.Size([2, 7, 64]), torch.bfloat16)
    """

    inv_freq: torch.Tensor

    def __init__(self, config: Any = None, device: Any = None, *, dim: int | None = None,
                 max_position_embeddings: int = 2048, base: float = 10000.0,
                 scaling: Any = None, interleaved: bool = False) -> None:
        super().__init__()
        _check_device(device)
        if config is not None:
            if dim is not None or scaling is not None:
                raise TypeError("give either config or dim/scaling, not both")
            rope = posemb.rope_config(_config_dict(config), dtype=np.float32)
            if interleaved:
                rope = posemb.RoPE(rope.head_size, rope.seq_len, base=rope.base,
                                   interleaved=True, rotary_dim=rope.rotary_dim,
                                   scaling=None if rope.scaling["rope_type"] == "default"
                                   else rope.scaling,
                                   max_position_embeddings=rope.max_position_embeddings)
        else:
            if dim is None:
                raise TypeError("RotaryEmbedding needs a config or dim")
            max_pos = posemb._checks.size(max_position_embeddings, "max_position_embeddings",
                                          minimum=1)
            rope = posemb.RoPE(dim, min(max_pos, 4096), base=base, interleaved=interleaved,
                               scaling=scaling, max_position_embeddings=max_pos)
        self.rope = rope
        self.dim = rope.rotary_dim
        self.rope_type = rope.scaling["rope_type"]
        self.attention_scaling = float(rope.attention_factor)
        self.max_seq_len_cached = rope.seq_len
        self.original_max_seq_len = rope.max_position_embeddings
        self.register_buffer("inv_freq", torch.from_numpy(rope.inv_freq.astype(np.float32)),
                             persistent=False)

    def extra_repr(self) -> str:
        return repr(self.rope)

    def forward(self, x: torch.Tensor, position_ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` for ``position_ids`` (``(batch, seq)``), in ``x``'s dtype.

        ``x`` only gives the dtype (and must be on the CPU).

        Examples
        --------
        >>> import math, numpy as np, torch, posemb.torch as pt
        >>> cos, sin = pt.RotaryEmbedding(dim=8).forward(torch.ones(1, 3, 8), torch.arange(3)[None])
        >>> cos.shape, bool(cos[0, 1, 0].item() == np.float32(math.cos(1.0)))   # rounded once
        (torch.Size([1, 3, 8]), True)
        """
        _check(x, "x")
        pos = _positions(position_ids, "position_ids")
        if x.dtype == torch.bfloat16:      # round once, from float64
            cos, sin = self.rope.cos_sin(pos, dtype=np.float64)
            return _tensor(cos, torch.bfloat16), _tensor(sin, torch.bfloat16)
        cos, sin = self.rope.cos_sin(pos, dtype=_np_dtype(x.dtype))
        return _tensor(cos), _tensor(sin)


# ---------------------------------------------------------------- sinusoidal


def sinusoidal(seq_len: int, dim: int, *, base: float = 10000.0, start: int = 0,
               layout: str = "interleaved", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The sinusoidal table as a tensor: :func:`posemb.sinusoidal` (no gradient).

    ``(seq_len, dim)``, every value computed in float64 and rounded once to
    ``dtype`` (bfloat16 included).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> pe = pt.sinusoidal(100, 16)
    >>> pe.shape, pe.dtype, pe[0, :4].tolist()
    (torch.Size([100, 16]), torch.float32, [0.0, 1.0, 0.0, 1.0])
    """
    if dtype not in _FLOATS:
        raise TypeError(f"dtype must be a torch float dtype, got {dtype}")
    np_dt = np.float64 if dtype == torch.bfloat16 else _np_dtype(dtype)
    table = posemb.sinusoidal(seq_len, dim, base=base, start=start, layout=layout, dtype=np_dt)
    return _tensor(table, dtype)


# ---------------------------------------------------------------- ALiBi


class _AlibiBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, slopes: torch.Tensor, q: int, k: int, symmetric: bool,
                offset: int | None, dtype: torch.dtype) -> torch.Tensor:
        np_dt = np.float64 if dtype == torch.bfloat16 else _np_dtype(dtype)
        bias = posemb.alibi_bias(_view(slopes, torch.float64), q, k, symmetric=symmetric,
                                 query_offset=offset, dtype=np_dt)
        ctx.args = (q, k, symmetric, k - q if offset is None else offset)
        ctx.slopes_dtype = slopes.dtype
        return _tensor(bias, dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        q, k, symmetric, off = ctx.args
        # d bias[h, i, j] / d m_h = -(p_i - j)  (or -|p_i - j|): sum it against grad
        dist = (off + np.arange(q, dtype=np.float64))[:, None] - np.arange(k, dtype=np.float64)
        if symmetric:
            dist = np.abs(dist)
        g = _view(grad, torch.float64)
        gs = -np.einsum("hij,ij->h", g, dist)
        return _tensor(gs, ctx.slopes_dtype), None, None, None, None, None


def alibi_bias(slopes_or_num_heads: Any, query_length: int, key_length: int, *,
               symmetric: bool = False, query_offset: int | None = None,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """ALiBi bias ``(heads, query_length, key_length)`` as a tensor: :func:`posemb.alibi_bias`.

    ``bias[h, i, j] = -m_h * (p_i - j)`` (combine with a causal mask), or
    ``-m_h * |p_i - j|`` with ``symmetric=True``; ``p_i = query_offset + i``,
    by default the queries are the last ``query_length`` keys.  With a slopes
    tensor that requires grad (trainable slopes), the bias is differentiable
    with respect to it.

    Parameters
    ----------
    slopes_or_num_heads : int, torch.Tensor or array_like
        A head count (Press's slopes, :func:`posemb.alibi_slopes`) or the slopes.
    query_length, key_length : int
    symmetric : bool
    query_offset : int, optional
    dtype : torch.dtype, optional
        Default: the slopes tensor's dtype, else float32.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> pt.alibi_bias(2, 3, 3)[0]
    tensor([[ 0.0000,  0.0625,  0.1250],
            [-0.0625,  0.0000,  0.0625],
            [-0.1250, -0.0625,  0.0000]])
    >>> m = torch.tensor([0.5, 0.25], requires_grad=True)
    >>> pt.alibi_bias(m, 1, 4).sum().backward()
    >>> m.grad                                     # -(3 + 2 + 1 + 0) per head
    tensor([-6., -6.])
    """
    if dtype is not None and dtype not in _FLOATS:
        raise TypeError(f"dtype must be a torch float dtype, got {dtype}")
    if isinstance(slopes_or_num_heads, torch.Tensor):
        slopes = _check(slopes_or_num_heads, "slopes_or_num_heads")
        if slopes.ndim != 1:
            raise ValueError(f"slopes must be 1-D (one slope per head), got shape "
                             f"{tuple(slopes.shape)}")
        return _AlibiBias.apply(slopes, query_length, key_length, bool(symmetric),
                                query_offset, dtype or slopes.dtype)
    out_dtype = dtype or torch.float32
    np_dt = np.float64 if out_dtype == torch.bfloat16 else _np_dtype(out_dtype)
    bias = posemb.alibi_bias(slopes_or_num_heads, query_length, key_length,
                             symmetric=symmetric, query_offset=query_offset, dtype=np_dt)
    return _tensor(bias, out_dtype)


# ---------------------------------------------------------------- T5


class _T5Bias(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, q: int, k: int, bidirectional: bool,
                max_distance: int, offset: int) -> torch.Tensor:
        work = _work_dtype(table.dtype)
        kw: dict[str, Any] = dict(bidirectional=bidirectional, num_buckets=table.shape[0],
                                  max_distance=max_distance, query_offset=offset)
        bias = posemb.t5_relative_bias(_view(table, work), q, k, **kw)
        ctx.kw = dict(kw, query_length=q, key_length=k)
        ctx.dtypes = (table.dtype, work)
        return _tensor(bias, table.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        dtype, work = ctx.dtypes
        g = posemb.t5_relative_bias_backward(_view(grad, work), **ctx.kw)
        return _tensor(g, dtype), None, None, None, None, None


def t5_relative_bias(table: torch.Tensor, query_length: int, key_length: int, *,
                     bidirectional: bool = True, max_distance: int = 128,
                     query_offset: int = 0) -> torch.Tensor:
    """T5's relative attention bias with the gradient to its table.

    ``bias[h, i, j] = table[bucket(j - (query_offset + i)), h]``, shape
    ``(heads, query_length, key_length)`` -- HF's ``T5Attention.compute_bias``
    without its leading 1 (add ``[None]``), bit for bit, for ``table`` =
    ``relative_attention_bias.weight`` of shape ``(num_buckets, heads)``.  The
    backward is :func:`posemb.t5_relative_bias_backward` (a scatter-add into
    the buckets, summed in float64).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> emb = torch.nn.Embedding(32, 8)               # HF's relative_attention_bias
    >>> bias = pt.t5_relative_bias(emb.weight, 5, 5)
    >>> bias.shape
    torch.Size([8, 5, 5])
    >>> bias.sum().backward()
    >>> emb.weight.grad[0].tolist() == [5.0] * 8      # rp = 0: the 5 diagonal cells
    True
    """
    _check(table, "table")
    if table.ndim != 2:
        raise ValueError(f"table must have shape (num_buckets, heads), got {tuple(table.shape)}")
    return _T5Bias.apply(table, query_length, key_length, bool(bidirectional),
                         max_distance, query_offset)


# ---------------------------------------------------------------- learned


class _LearnedPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, positions: np.ndarray | None,
                offset: int) -> torch.Tensor:
        out_dtype = _result_dtype(x, weight)
        work = _work_dtype(out_dtype)
        y = posemb.learned_pe_forward(_view(x, work), _view(weight, work), positions,
                                      offset=offset)
        ctx.args = (positions, offset, weight.shape[0], work)
        ctx.meta = (x.shape, x.dtype, weight.dtype)
        return _tensor(y, out_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        positions, offset, m, work = ctx.args
        x_shape, x_dtype, w_dtype = ctx.meta
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = grad.sum_to_size(x_shape).to(x_dtype)
        if ctx.needs_input_grad[1]:
            g = posemb.learned_pe_backward(_view(grad, work), positions, num_positions=m,
                                           offset=offset)
            gw = _tensor(g, w_dtype)
        return gx, gw, None, None


class LearnedPositionalEmbedding(nn.Module):
    """A learned position table added to the input (GPT-2/BERT), with its gradient.

    ``forward(x, positions=None, *, offset=0)`` returns ``x + weight[positions]``
    for ``x`` of shape ``(..., seq, embedding_dim)``, positions defaulting to
    ``offset .. offset+seq-1``: one pass, no gathered temporary
    (:func:`posemb.learned_pe_forward`).  ``weight.grad`` is accumulated by
    :func:`posemb.learned_pe_backward` -- equal to ``nn.Embedding``'s gradient,
    repeated positions summed in token order.

    Parameters
    ----------
    num_positions : int
        Rows of the table (the longest sequence).
    embedding_dim : int
    std : float
        The table starts as ``N(0, std**2)`` draws (GPT-2: 0.02).
    dtype : torch.dtype, optional
    device : optional
        None or CPU.

    Attributes
    ----------
    weight : torch.nn.Parameter
        ``(num_positions, embedding_dim)``.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> pe = pt.LearnedPositionalEmbedding(512, 64)
    >>> x = torch.zeros(8, 100, 64, requires_grad=True)
    >>> y = pe(x)                                     # x + weight[:100]
    >>> torch.equal(y[3], pe.weight[:100])
    True
    >>> y.sum().backward()
    >>> pe.weight.grad[0, 0].item(), pe.weight.grad[100, 0].item(), x.grad.shape
    (8.0, 0.0, torch.Size([8, 100, 64]))
    """

    def __init__(self, num_positions: int, embedding_dim: int, *, std: float = 0.02,
                 dtype: torch.dtype | None = None, device: Any = None) -> None:
        super().__init__()
        _check_device(device)
        if dtype is not None and dtype not in _FLOATS:   # else torch: "can require gradients"
            raise TypeError(f"dtype must be a torch float dtype, got {dtype}")
        self.num_positions = posemb._checks.size(num_positions, "num_positions")
        self.embedding_dim = posemb._checks.size(embedding_dim, "embedding_dim")
        self.std = float(std)
        self.weight = nn.Parameter(torch.empty(self.num_positions, self.embedding_dim,
                                               dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw the table from ``N(0, std**2)``.

        Examples
        --------
        >>> import torch, posemb.torch as pt
        >>> pe = pt.LearnedPositionalEmbedding(4, 2, std=0.0)
        >>> pe.reset_parameters(); float(pe.weight.detach().abs().sum())
        0.0
        """
        with torch.no_grad():
            nn.init.normal_(self.weight, mean=0.0, std=self.std)

    def extra_repr(self) -> str:
        return f"{self.num_positions}, {self.embedding_dim}, std={self.std}"

    def forward(self, x: torch.Tensor, positions: Any = None, *,
                offset: int = 0) -> torch.Tensor:
        """``x + weight[positions]`` (positions broadcast to ``x.shape[:-1]``).

        Examples
        --------
        >>> import torch, posemb.torch as pt
        >>> pe = pt.LearnedPositionalEmbedding(16, 4)
        >>> y = pe(torch.zeros(2, 3, 4), torch.tensor([[0, 1, 2], [5, 5, 5]]))
        >>> torch.equal(y[1, 2], pe.weight[5])
        True
        """
        _check(x, "x")
        _check(self.weight, "weight")
        pos = None if positions is None else _positions(positions, "positions")
        return _LearnedPE.apply(x, self.weight, pos, offset)
