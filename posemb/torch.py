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
import math
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
from posemb import _alibi as _alibi_bits
from posemb import _learned as _learned_bits
from posemb import _relative as _relative_bits
from posemb import _rope as _rope_bits

#: the half-split forward gufunc, for the decode step's direct call
_ROPE_HALF_FWD = _rope_bits._FAST_FWD[False]
_NEW_RESULT = _rope_bits._new_result    # (into the output cache when large)

__all__ = [
    "apply_rope",
    "apply_rotary_pos_emb",
    "RotaryEmbedding",
    "apply_rotary_pos_emb_convention",
    "apply_rotary_pos_emb_interleave",
    "apply_rotary_pos_emb_gptj",
    "apply_rotary_emb",
    "create_sinusoidal_positions",
    "sinusoidal",
    "relative_embeddings",
    "RelativePositionEmbedding",
    "apply_multimodal_rotary_pos_emb",
    "alibi_bias",
    "build_alibi_tensor",
    "build_mpt_alibi_tensor",
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
    return _array(t if t.dtype is dtype else t.detach().to(dtype))


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
                  interleaved: bool, tables: Any = None) -> tuple[torch.Tensor, torch.dtype]:
    """posemb.apply_rope on tensors (no autograd): the result and the dtype
    the kernel computed in.  ``tables``: NumPy views of cos and sin when
    all three have x's native dtype (made here when None)."""
    dt = x.dtype
    if dt in _TO_NUMPY and cos.dtype is dt and sin.dtype is dt:
        cn, sn = tables or (_array(cos), _array(sin))
        return torch.from_numpy(posemb.apply_rope(_array(x), cn, sn,
                                                  interleaved=interleaved)), dt
    if dt is torch.bfloat16 and cos.dtype is dt and sin.dtype is dt:
        # one pass: bfloat16 in, float32 maths, rounded once to bfloat16 out
        y = _rope_bits._run_bf16_bits(2 * interleaved, _bf16_bits(x), _bf16_bits(cos),
                                      _bf16_bits(sin))
        return _bf16_tensor(y), torch.float32
    out_dtype = _result_dtype(x, cos, sin)
    work = _work_dtype(out_dtype)
    y = posemb.apply_rope(_view(x, work), _view(cos, work), _view(sin, work),
                          interleaved=interleaved)
    return _tensor(y, out_dtype), work


def _array(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a tensor that needs no gradient here."""
    if t.requires_grad:    # (asked first: numpy()'s RuntimeError costs ~10 us)
        t = t.detach()
    try:
        return t.numpy()
    except RuntimeError:   # a neg/conj bit
        return t.resolve_neg().resolve_conj().numpy()


def _bf16_bits(t: torch.Tensor) -> np.ndarray:
    """A bfloat16 tensor's memory as a uint16 array (strides kept)."""
    if t.is_neg():
        t = t.resolve_neg()
    return _array(t.view(torch.int16)).view(np.uint16)


def _bf16_tensor(bits: np.ndarray) -> torch.Tensor:
    """A bfloat16 tensor over bit patterns (uint16) a kernel wrote: _bf16_bits' inverse."""
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


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
        need = ctx.needs_input_grad
        return (*_rope_grads(grad, x, ctx.x_meta, cos, sin, ctx.work, ctx.interleaved,
                             need[0], need[1], need[2]), None)


def _rope_grads(grad: torch.Tensor, x: torch.Tensor | None, x_meta: tuple[Any, Any],
                cos: torch.Tensor, sin: torch.Tensor, work: torch.dtype, interleaved: bool,
                need_x: bool, need_cos: bool, need_sin: bool,
                tables: Any = None) -> tuple[Any, Any, Any]:
    """The gradients of y = apply_rope(x, cos, sin) to x, cos and sin (None
    where not needed): x's is the inverse rotation (posemb's kernel); the
    tables', rarely trained, plain tensor arithmetic (x is saved only then).
    ``tables``: the forward's NumPy views of cos and sin in ``work``, or None."""
    gx = gc = gs = None
    if need_x:
        cn, sn = tables or (_view(cos, work), _view(sin, work))
        g = posemb.apply_rope_backward(_view(grad, work), cn, sn, interleaved=interleaved)
        gx = _tensor(g)
        if gx.shape != x_meta[0]:
            gx = gx.sum_to_size(x_meta[0])
        if gx.dtype != x_meta[1]:
            gx = gx.to(x_meta[1])
    if need_cos or need_sin:
        assert x is not None
        r = cos.shape[-1]
        p = r - (r & 1)     # an odd r's last feature has no partner: passed through
        g_r = grad[..., :p].to(work)
        x_r = x[..., :p].to(work)

        def table_grad(prod: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
            if p < r:       # (so that table entry gets no gradient)
                prod = torch.cat((prod, torch.zeros_like(prod[..., :1])), dim=-1)
            return prod.sum_to_size(table.shape).to(table.dtype)
        if need_cos:
            gc = table_grad(g_r * x_r, cos)
        if need_sin:
            gs = table_grad(g_r * _rotate(x_r, interleaved), sin)
    return gx, gc, gs


class _ApplyRopeQK(torch.autograd.Function):
    """apply_rope of q and of k by the same tables, as one autograd node
    (half the Python autograd machinery of two: a decode step with
    gradients is mostly that machinery)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dt = q.dtype     # (one view of each table for q, k and the backward)
        tables = ((_array(cos), _array(sin)) if dt in _TO_NUMPY and k.dtype is dt
                  and cos.dtype is dt and sin.dtype is dt else None)
        yq, work = _rope_forward(q, cos, sin, False, tables)
        yk, work_k = _rope_forward(k, cos, sin, False, tables)
        ctx.work = (work, work_k)
        ctx.tables = tables
        table_grad = ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
        ctx.save_for_backward(q if table_grad else None, k if table_grad else None, cos, sin)
        ctx.x_meta = ((q.shape, q.dtype), (k.shape, k.dtype))
        return yq, yk

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_q: torch.Tensor, grad_k: torch.Tensor) -> Any:
        q, k, cos, sin = ctx.saved_tensors
        need = ctx.needs_input_grad
        gq, cq, sq = _rope_grads(grad_q, q, ctx.x_meta[0], cos, sin, ctx.work[0], False,
                                 need[0], need[2], need[3], ctx.tables)
        gk, ck, sk = _rope_grads(grad_k, k, ctx.x_meta[1], cos, sin, ctx.work[1], False,
                                 need[1], need[2], need[3], ctx.tables)
        return (gq, gk, None if cq is None else cq + ck, None if sq is None else sq + sk)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
               interleaved: bool = False, seq_axis: int | None = None) -> torch.Tensor:
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
    cos, sin : torch.Tensor, shape broadcastable to ``(..., r)``, ``r <= d``
        (odd ``r``: the unpaired last feature passes through)
    interleaved : bool
    seq_axis : int, optional
        The axis of ``x`` the tables' position axis (their second to last)
        runs along: default the second to last (``(batch, heads, seq, d)``);
        ``seq_axis=1`` for ``(batch, seq, heads, d)`` (Meta, flash-attn).

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
    if seq_axis is not None:    # singleton axes after the tables' position axis
        cos, sin = _rope_bits._grow_tables(
            cos, sin, x.dim() - 2 - _rope_bits._seq_axis(seq_axis, x.dim()))
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
    # (decode steps: this function's own steps are the whole overhead, so
    # the common case -- plain CPU tensors of one NumPy float dtype -- is
    # asked in few attribute reads; numpy() below refuses other layouts)
    dt = q.dtype if type(q) is type(k) is type(cos) is type(sin) is torch.Tensor else None
    plain = (dt in _TO_NUMPY and k.dtype is dt and cos.dtype is dt and sin.dtype is dt
             and q.is_cpu and k.is_cpu and cos.is_cpu and sin.is_cpu)
    if not plain:
        _check(q, "q")
        _check(k, "k")
        _check(cos, "cos")
        _check(sin, "sin")
    if type(unsqueeze_dim) is not int:
        unsqueeze_dim = posemb._checks.size(unsqueeze_dim, "unsqueeze_dim", minimum=-(2**63))
    nd = cos.ndim
    if not -(nd + 1) <= unsqueeze_dim <= nd:   # torch's IndexError names nothing
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin of shape "
                         f"{tuple(cos.shape)}")
    if plain and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                                   or cos.requires_grad or sin.requires_grad)):
        # no autograd: one view of each table for both calls
        try:
            cn, sn, qn, kn = cos.numpy(), sin.numpy(), q.numpy(), k.numpy()
        except (RuntimeError, TypeError):   # requires_grad, a neg/conj bit, a layout
            for t, name in ((q, "q"), (k, "k"), (cos, "cos"), (sin, "sin")):
                _check(t, name)
            cn, sn, qn, kn = _array(cos), _array(sin), _array(q), _array(k)
        ax = unsqueeze_dim if unsqueeze_dim >= 0 else unsqueeze_dim + nd + 1
        cs = cn.shape
        if (nd == 3 and ax == 1 and qn.ndim == 4 and kn.ndim == 4 and sn.shape == cs
                and not cs[-1] & 1):
            # HF's layout: tables (batch, seq, dim) unsqueezed at 1 against q
            # and k (batch, heads, seq, head_dim), all of one native float
            # dtype: the gufunc (h,s,d),(s,r),(s,r)->(h,s,d) broadcasts the
            # batch axes itself; what it refuses takes the long road below,
            # which names the argument
            try:
                return (torch.from_numpy(_NEW_RESULT(_ROPE_HALF_FWD, qn, cn, sn)),
                        torch.from_numpy(_NEW_RESULT(_ROPE_HALF_FWD, kn, cn, sn)))
            except (ValueError, MemoryError):
                pass
        cn = cn.reshape(cs[:ax] + (1,) + cs[ax:])
        sn = sn.reshape(sn.shape[:ax] + (1,) + sn.shape[ax:])
        return (torch.from_numpy(posemb.apply_rope(qn, cn, sn)),
                torch.from_numpy(posemb.apply_rope(kn, cn, sn)))
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    if _needs_grad(q, cos, sin) and _needs_grad(k, cos, sin):
        yq, yk = _ApplyRopeQK.apply(q, k, cos, sin)
        return yq, yk
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


def _convention(convention: Any) -> Any:
    from posemb._conventions import RopeConvention
    if convention is None:
        return RopeConvention()
    if isinstance(convention, RopeConvention):
        return convention
    return posemb.rope_convention(convention)


def _apply_convention(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      conv: Any) -> torch.Tensor:
    """Rotate ``x`` as the model family ``conv`` does, from its rotary module's tables."""
    if conv.pairs == "half":
        return apply_rope(x, cos, sin)
    if conv.tables == "half":      # GLM, DeepSeek-V3: cat(c, c) -> repeat_interleave(c[:r/2], 2)
        h = cos.shape[-1] // 2
        cos = cos[..., :h].repeat_interleave(2, dim=-1)
        sin = sin[..., :h].repeat_interleave(2, dim=-1)
    y = apply_rope(x, cos, sin, interleaved=True)
    if conv.output == "deinterleaved":   # DeepSeek-V3's apply_rotary_pos_emb_interleave
        r = cos.shape[-1]
        parts = [y[..., 0:r:2], y[..., 1:r:2]]
        if r < y.shape[-1]:
            parts.append(y[..., r:])
        y = torch.cat(parts, dim=-1)
    return y


def apply_rotary_pos_emb_convention(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                                    sin: torch.Tensor, convention: Any = None,
                                    unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A model family's ``apply_rotary_pos_emb``, from its rotary module's tables, with autograd.

    ``convention`` is a ``model_type`` (``"llama"``, ``"cohere"``, ``"glm4"``,
    ``"deepseek_v3"``, ...), a config dict or a :class:`posemb.RopeConvention`
    (see :func:`posemb.rope_convention`).  ``cos``/``sin`` are what that
    family's rotary module (or :class:`RotaryEmbedding` built from its config)
    returns, ``(batch, seq, width)``; they get a new axis at ``unsqueeze_dim``.
    Cohere pairs ``(2i, 2i+1)`` with repeated tables; GLM takes the first half
    of ``cat(c, c)`` tables and repeats it; DeepSeek-V3 does the same and
    returns the rotated features de-interleaved (``apply_rotary_pos_emb_interleave``).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> cfg = {"model_type": "glm4", "hidden_size": 64, "num_attention_heads": 2}
    >>> rotary = pt.RotaryEmbedding(cfg)
    >>> q, k = torch.randn(1, 2, 5, 32), torch.randn(1, 2, 5, 32)
    >>> cos, sin = rotary(q, torch.arange(5)[None])
    >>> cos.shape                               # partial rotary: 0.5 of head_dim 32
    torch.Size([1, 5, 16])
    >>> qe, ke = pt.apply_rotary_pos_emb_convention(q, k, cos, sin, "glm4")
    >>> bool(torch.equal(qe[..., 16:], q[..., 16:]))
    True
    """
    conv = _convention(convention)
    _check(q, "q")
    _check(k, "k")
    _check(cos, "cos")
    _check(sin, "sin")
    unsqueeze_dim = posemb._checks.size(unsqueeze_dim, "unsqueeze_dim", minimum=-(2**63))
    if not -(cos.ndim + 1) <= unsqueeze_dim <= cos.ndim:
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin of shape "
                         f"{tuple(cos.shape)}")
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return _apply_convention(q, cos, sin, conv), _apply_convention(k, cos, sin, conv)


def apply_rotary_pos_emb_interleave(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                                    sin: torch.Tensor, position_ids: Any = None,
                                    unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for DeepSeek-V3's ``apply_rotary_pos_emb_interleave``, with autograd.

    ``q``/``k`` hold interleaved pairs ``(2i, 2i+1)``; ``cos``/``sin`` are the
    half-split ``cat(c, c)`` tables of :class:`RotaryEmbedding`; the result
    holds the rotated even features then the rotated odd ones, as in
    transformers.  ``position_ids`` is unused.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> q = torch.randn(1, 2, 3, 8)
    >>> cos, sin = pt.RotaryEmbedding(dim=8)(q, torch.arange(3)[None])
    >>> qe, _ = pt.apply_rotary_pos_emb_interleave(q, q, cos, sin)
    >>> bool(torch.allclose(qe[0, 0, 0], torch.cat([q[0, 0, 0, 0::2], q[0, 0, 0, 1::2]])))
    True
    """
    del position_ids
    return apply_rotary_pos_emb_convention(q, k, cos, sin, "deepseek_v3", unsqueeze_dim)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor, *,
                     unsqueeze_dim: int = -2) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for Meta's/Llama 4's/DeepSeek-V2's ``apply_rotary_emb``, with autograd.

    Pairs ``(2i, 2i+1)`` of ``xq``/``xk`` are complex numbers multiplied by
    ``freqs_cis`` (complex, ``(..., seq, head_dim // 2)``), here as the
    interleaved rotation of posemb's kernels.  ``freqs_cis`` gets a new axis at
    ``unsqueeze_dim``: the default ``-2`` fits ``(batch, seq, heads, head_dim)``
    (Meta's ``(seq, d/2)`` and Llama 4's ``(batch, seq, d/2)`` tables); use
    ``unsqueeze_dim=1`` for DeepSeek-V2's ``(batch, heads, seq, head_dim)``.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> angle = torch.arange(4.0)[:, None] * torch.tensor([1.0, 0.01])
    >>> freqs_cis = torch.polar(torch.ones_like(angle), angle)           # (seq, d/2)
    >>> xq = torch.randn(1, 4, 2, 4, requires_grad=True)                  # (batch, seq, heads, d)
    >>> q, k = pt.apply_rotary_emb(xq, xq, freqs_cis)
    >>> ref = torch.view_as_real(torch.view_as_complex(xq.detach().reshape(1, 4, 2, 2, 2))
    ...                          * freqs_cis[:, None]).flatten(3)
    >>> bool(torch.allclose(q, ref))
    True
    """
    _check(xq, "xq")
    _check(xk, "xk")
    if not isinstance(freqs_cis, torch.Tensor) or not freqs_cis.is_complex():
        raise TypeError("freqs_cis must be a complex torch.Tensor (polar(1, angle))")
    f = freqs_cis.unsqueeze(unsqueeze_dim)
    cos = f.real.repeat_interleave(2, dim=-1)
    sin = f.imag.repeat_interleave(2, dim=-1)
    return (apply_rope(xq, cos, sin, interleaved=True).to(xq.dtype),
            apply_rope(xk, cos, sin, interleaved=True).to(xk.dtype))


def create_sinusoidal_positions(num_pos: int, dim: int, *, base: float = 10000.0,
                                precision: str = "exact") -> torch.Tensor:
    """GPT-J/CodeGen's ``embed_positions`` buffer: ``cat(sin, cos)``, ``(num_pos, dim)``.

    Angles ``p * base ** (-2i/dim)`` for ``i < dim // 2``; ``precision="exact"``
    rounds each value once from float64, ``"float32"`` follows transformers'
    ``create_sinusoidal_positions`` (float32 frequencies and products,
    PyTorch's float32 ``sin``/``cos``) bit for bit.  Use with
    :func:`apply_rotary_pos_emb_gptj`.

    Examples
    --------
    >>> import posemb.torch as pt
    >>> pt.create_sinusoidal_positions(2048, 64).shape
    torch.Size([2048, 64])
    """
    from posemb import _rope_precision as rp
    rp.check_precision(precision)
    n = posemb._checks.size(num_pos, "num_pos")
    d = posemb._checks.even_size(dim, "dim")
    if precision == "float32":
        inv = rp.float32_rope_parameters(d, float(base), {"rope_type": "default"},
                                         max_position_embeddings=None, power=_torch_power)[0]
        ang = torch.arange(n, dtype=torch.int64).float()[:, None] * torch.from_numpy(inv)
        return torch.cat((torch.sin(ang), torch.cos(ang)), dim=1)
    if precision == "bfloat16":
        raise ValueError("precision='bfloat16' is the Go walk-through's recipe for "
                         "precompute_freqs_cis; GPT-J tables support 'exact' and 'float32'")
    cos, sin = posemb.rope_cos_sin(np.arange(n), d, base, dtype=np.float32)
    return torch.from_numpy(np.concatenate([sin[:, :d // 2], cos[:, :d // 2]], axis=1))


def apply_rotary_pos_emb_gptj(tensor: torch.Tensor, sin: torch.Tensor,
                              cos: torch.Tensor) -> torch.Tensor:
    """Drop-in for GPT-J/CodeGen's ``apply_rotary_pos_emb(tensor, sin, cos)``, with autograd.

    ``tensor`` is ``(batch, seq, heads, rotary_dim)``, ``sin``/``cos`` are
    ``(batch, seq, rotary_dim // 2)`` (halves of the ``embed_positions``
    rows); pairs ``(2i, 2i+1)`` rotate by angle ``i`` (``rotate_every_two``).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> sincos = pt.create_sinusoidal_positions(16, 8)[None, :5]      # (1, 5, 8)
    >>> sin, cos = sincos[..., :4], sincos[..., 4:]
    >>> pt.apply_rotary_pos_emb_gptj(torch.randn(1, 5, 3, 8), sin, cos).shape
    torch.Size([1, 5, 3, 8])
    """
    _check(tensor, "tensor")
    _check(sin, "sin")
    _check(cos, "cos")
    sin = sin[:, :, None, :].repeat_interleave(2, dim=3)
    cos = cos[:, :, None, :].repeat_interleave(2, dim=3)
    return apply_rope(tensor, cos, sin, interleaved=True)


def _torch_power(base: Any, exponents: Any) -> np.ndarray:
    """float32 ``base ** exponents`` computed by PyTorch (as transformers does)."""
    b = torch.tensor(base, dtype=torch.float32)
    e = torch.from_numpy(np.ascontiguousarray(exponents)) if isinstance(exponents, np.ndarray) \
        else exponents
    return (b ** e).numpy()


class _LayerRope:
    """One layer type's RoPE in a :class:`RotaryEmbedding`."""

    def __init__(self, rope: Any, precision: str) -> None:
        from posemb import _rope_precision as rp
        self.rope = rope
        self.rope_type = rope.scaling["rope_type"]
        self.attention_scaling = float(rope.attention_factor)
        self.original_max_seq_len = rope.max_position_embeddings
        self.max_seq_len_cached = rope.max_position_embeddings or rope.seq_len
        self.precision = precision
        self.inv_freq32 = None
        if precision == "float32":
            self.inv_freq32, self.attention_scaling = rp.float32_rope_parameters(
                rope.rotary_dim, rope.base, rope.scaling,
                max_position_embeddings=rope.max_position_embeddings, power=_torch_power)
            self.original_inv_freq32 = self.inv_freq32

    def inv_freq(self) -> np.ndarray:
        if self.inv_freq32 is not None:
            return self.inv_freq32
        return self.rope.inv_freq

    def update(self, seq_len: int) -> None:
        """transformers' ``dynamic_frequency_update``: keep the longest length's frequencies."""
        if self.rope_type != "dynamic" or self.original_max_seq_len is None:
            return
        from posemb import _rope_precision as rp
        if seq_len > self.max_seq_len_cached:       # growth
            self.max_seq_len_cached = seq_len
            if self.precision == "float32":
                self.inv_freq32, _ = rp.float32_rope_parameters(
                    self.rope.rotary_dim, self.rope.base, self.rope.scaling,
                    max_position_embeddings=self.original_max_seq_len, seq_len=seq_len,
                    power=_torch_power)
        if seq_len < self.original_max_seq_len < self.max_seq_len_cached:   # reset
            self.max_seq_len_cached = self.original_max_seq_len
            if self.precision == "float32":
                self.inv_freq32 = self.original_inv_freq32

    def _mrope_positions(self, pos: np.ndarray, mrope: Any) -> np.ndarray:
        if pos.ndim == 2:
            return np.broadcast_to(pos, (len(mrope[0]),) + pos.shape)
        if pos.ndim != 3 or pos.shape[0] != len(mrope[0]):
            raise ValueError(f"position_ids for M-RoPE must have shape ({len(mrope[0])}, batch, "
                             f"seq) or (batch, seq), got {pos.shape}")
        return pos

    def tables(self, pos: np.ndarray, dtype: torch.dtype, repeat: bool,
               mrope: Any = None, polar: bool = False) -> Any:
        """``(cos, sin)``, or ``polar(1, angle)`` (complex64, half width) when ``polar``."""
        rope = self.rope
        top = int(pos.max()) + 1 if pos.size else 0
        self.update(top)
        if self.precision == "float32" or self.precision == "bfloat16":
            return self._framework_tables(pos, top, dtype, repeat, mrope, polar)
        seq_len = self.max_seq_len_cached if self.rope_type == "dynamic" else top
        if self.rope_type == "dynamic" and seq_len <= (self.original_max_seq_len or 0):
            seq_len = None
        np_dt = np.float64 if dtype == torch.bfloat16 else _np_dtype(dtype)
        kw = dict(scaling=rope.scaling, max_position_embeddings=rope.max_position_embeddings,
                  dtype=np_dt, interleaved=repeat)
        if mrope is not None:
            sections, interleaved_m = mrope
            cos, sin = posemb.mrope_cos_sin(self._mrope_positions(pos, mrope), rope.rotary_dim,
                                            sections, rope.base, mrope_interleaved=interleaved_m,
                                            **kw)
        elif self.rope_type == "dynamic":
            cos, sin = posemb.rope_cos_sin(pos, rope.rotary_dim, rope.base, seq_len=seq_len, **kw)
        else:
            cos, sin = rope.cos_sin(pos, dtype=np_dt) if repeat == rope.interleaved else \
                posemb.rope_cos_sin(pos, rope.rotary_dim, rope.base, **kw)
        if polar:
            return torch.complex(_tensor(cos[..., 0::2]), _tensor(sin[..., 0::2]))
        return _tensor(cos, dtype), _tensor(sin, dtype)

    def _framework_tables(self, pos: np.ndarray, top: int, dtype: torch.dtype, repeat: bool,
                          mrope: Any, polar: bool) -> Any:
        from posemb import _rope_precision as rp
        rope = self.rope
        if self.precision == "bfloat16":
            if rope.scaling["rope_type"] != "default" or mrope is not None:
                raise ValueError("precision='bfloat16' (the Go walk-through's recipe) supports "
                                 "unscaled, single-axis RoPE only")
            inv = rp.bfloat16_inv_freq(rope.rotary_dim, rope.base)
            ang: torch.Tensor = torch.from_numpy(rp.bfloat16_angles(pos, inv)).double()
            attention = 1.0
        else:
            inv_np = self.inv_freq32
            attention = self.attention_scaling
            if self.rope_type == "longrope":
                inv_np, attention = rp.float32_rope_parameters(
                    rope.rotary_dim, rope.base, rope.scaling,
                    max_position_embeddings=rope.max_position_embeddings, seq_len=top,
                    power=_torch_power)
            inv_t = torch.from_numpy(inv_np)
            if mrope is not None:
                p3 = torch.from_numpy(np.ascontiguousarray(self._mrope_positions(pos, mrope)))
                freqs = p3[..., None].float() * inv_t        # (3, batch, seq, r/2)
                sections, interleaved_m = mrope
                if interleaved_m:
                    axes = posemb._rope_variants._mrope_interleaved_axes(list(sections))
                else:
                    axes = np.repeat(np.arange(len(sections)), sections)
                idx = torch.from_numpy(axes)
                ang = freqs.permute(*range(1, freqs.ndim), 0)  # (batch, seq, r/2, 3)
                ang = ang.gather(-1, idx.expand(ang.shape[:-1])[..., None])[..., 0]
            else:
                ang = torch.from_numpy(np.ascontiguousarray(pos)).float()[..., None] * inv_t
        if polar:   # torch.polar, as DeepSeek-V2's and Llama 4's modules compute it
            if self.precision == "bfloat16":
                ang = ang.float()
            return torch.polar(torch.ones_like(ang), ang) * attention
        emb = ang.repeat_interleave(2, dim=-1) if repeat else torch.cat((ang, ang), dim=-1)
        if self.precision == "bfloat16":
            cos = emb.cos().float() * attention
            sin = emb.sin().float() * attention
        else:
            cos = emb.cos() * attention
            sin = emb.sin() * attention
        return cos.to(dtype), sin.to(dtype)


class RotaryEmbedding(nn.Module):
    """Hugging Face's rotary module (``LlamaRotaryEmbedding`` and kin) on posemb's tables.

    ``forward(x, position_ids, layer_type=None) -> (cos, sin)``, each
    ``(batch, seq, width)`` in ``x``'s dtype, laid out as the model family's own
    module returns them, so it drops into a model next to
    :func:`apply_rotary_pos_emb` (or :meth:`apply_rotary_pos_emb`, the
    family's own apply function).  The tables come from a
    :class:`posemb.RoPE` (angles in float64, rounded once -- transformers
    forms them in float32 and drifts by ~1e-3 rad near position 32k), cached
    and grown on demand; scaling dicts
    (every ``rope_type`` of transformers' ``ROPE_INIT_FUNCTIONS``) follow
    :func:`posemb.rope_scaling_parameters`, their attention factor
    multiplying the tables as in transformers.

    Give either a model ``config`` (a transformers config object or a parsed
    ``config.json`` dict, read by :func:`posemb.rope_config` with the model
    family's layout from :func:`posemb.rope_convention`), or ``dim`` and
    friends.

    **Layouts.**  Half-split ``cat(c, c)`` tables for most families; Cohere's
    ``repeat_interleave(c, 2)`` tables; GLM and DeepSeek-V3 return ``cat(c,
    c)`` and rotate interleaved pairs in their apply functions
    (:meth:`apply_rotary_pos_emb` does the same).  ``interleaved=True`` or
    ``False`` overrides the family: pairs ``(2i, 2i+1)`` with repeated
    tables, or half-split pairs.

    DeepSeek-V2 and Llama 4, whose modules return complex ``freqs_cis =
    polar(1, angle)`` of width ``r/2`` (complex64), get that from ``forward``
    too; use :func:`apply_rotary_emb` with it.

    **Per-layer-type RoPE** (Gemma 3 local/global, ModernBERT, nested
    ``rope_parameters``): one table set per layer type; ``forward`` then needs
    ``layer_type`` (``"full_attention"``, ``"sliding_attention"``), as
    transformers' ``Gemma3RotaryEmbedding`` does.

    **Multimodal RoPE** (Qwen2-VL ``mrope_section``, Qwen3-VL interleaved
    ``mrope_interleaved``): ``position_ids`` of shape ``(3, batch, seq)`` (or
    ``(batch, seq)``, used for all three axes) give the recomposed tables of
    transformers' ``Qwen2VLRotaryEmbedding``/``Qwen3VLTextRotaryEmbedding``.

    **Dynamic NTK state.**  Like transformers' ``dynamic_rope_update``, the
    module keeps the frequencies of the longest sequence it has seen: a
    6000-token call after a 10000-token call (``max_position_embeddings``
    4096) still uses the 10000-token base; a call shorter than
    ``max_position_embeddings`` resets it.  The functional API
    (:func:`posemb.rope_cos_sin`, :class:`posemb.RoPE`) stays per call: its
    frequencies depend only on that call's positions.

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
    interleaved : bool, optional
        Override the layout (default: the config's family, else half-split).
    precision : {"exact", "float32", "bfloat16"}
        ``"exact"`` (default): float64 angles rounded once.  ``"float32"``:
        transformers' own float32 computation (inverse frequencies, angles,
        PyTorch's ``cos``/``sin``), bit for bit.  ``"bfloat16"``: the Go
        walk-through's bfloat16 recipe (unscaled RoPE only).

    Attributes
    ----------
    inv_freq : torch.Tensor
        float32 buffer, ``(rotary_dim // 2,)``, as in transformers (for a
        per-layer-type module, ``<layer_type>_inv_freq``).
    attention_scaling : float
        The yarn/longrope attention factor (1.0 otherwise).
    rope : posemb.RoPE
        The NumPy module that makes and caches the tables.
    convention : posemb.RopeConvention
        The layout in use.

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
    >>> gemma3 = {"model_type": "gemma3_text", "head_dim": 16, "hidden_size": 64,
    ...           "num_attention_heads": 4, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
    ...           "max_position_embeddings": 512}
    >>> rotary = pt.RotaryEmbedding(gemma3)
    >>> cos, sin = rotary(x, torch.arange(7)[None], layer_type="sliding_attention")
    >>> cos.shape
    torch.Size([1, 7, 16])
    """

    inv_freq: torch.Tensor

    def __init__(self, config: Any = None, device: Any = None, *, dim: int | None = None,
                 max_position_embeddings: int = 2048, base: float = 10000.0,
                 scaling: Any = None, interleaved: bool | None = None,
                 precision: str = "exact") -> None:
        super().__init__()
        from dataclasses import replace

        from posemb import _rope_precision as rp
        _check_device(device)
        self.precision = rp.check_precision(precision)
        conv = _convention(None)
        ropes: dict[Any, Any] = {}
        self.mrope: Any = None
        if config is not None:
            if dim is not None or scaling is not None:
                raise TypeError("give either config or dim/scaling, not both")
            cfg = _config_dict(config)
            text = cfg.get("text_config")
            if isinstance(text, Mapping) and cfg.get("hidden_size") is None \
                    and cfg.get("head_dim") is None:
                text = _config_dict(text)
                cfg = dict(text, model_type=text.get("model_type", cfg.get("model_type")))
            conv = posemb.rope_convention(cfg)
            if interleaved is not None:
                conv = replace(conv, pairs="interleaved" if interleaved else "half",
                               tables="repeat" if interleaved else "half", output="pairs")
            table_repeat = conv.tables != "half"
            layers = posemb.layer_rope_parameters(cfg)
            if layers is None:
                ropes[None] = posemb.rope_config(cfg, dtype=np.float32, interleaved=table_repeat)
            else:
                for lt in layers:
                    r = posemb.rope_config(cfg, dtype=np.float32, layer_type=lt,
                                           interleaved=table_repeat)
                    if r is not None:
                        ropes[lt] = r
            params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
            if isinstance(params, Mapping) and params.get("mrope_section") is not None:
                mi = bool(params.get("mrope_interleaved")) or \
                    str(cfg.get("model_type", "")).startswith("qwen3_vl")
                self.mrope = (list(params["mrope_section"]), mi)
        else:
            if dim is None:
                raise TypeError("RotaryEmbedding needs a config or dim")
            max_pos = posemb._checks.size(max_position_embeddings, "max_position_embeddings",
                                          minimum=1)
            if interleaved:
                conv = replace(conv, pairs="interleaved", tables="repeat")
            ropes[None] = posemb.RoPE(dim, min(max_pos, 4096), base=base,
                                      interleaved=bool(interleaved), scaling=scaling,
                                      max_position_embeddings=max_pos)
        self.convention = conv
        self.interleaved = conv.interleaved
        self._layers = {key: _LayerRope(r, self.precision) for key, r in ropes.items()}
        self.layer_types = [k for k in self._layers if k is not None]
        first = next(iter(self._layers.values()))
        self.rope = first.rope
        self.dim = first.rope.rotary_dim
        self.original_max_seq_len = first.original_max_seq_len
        if None in self._layers:
            self.rope_type = first.rope_type
            self.attention_scaling = first.attention_scaling
            self.register_buffer("inv_freq", torch.from_numpy(
                np.asarray(first.inv_freq(), np.float32).copy()), persistent=False)
        else:
            self.rope_type = {k: v.rope_type for k, v in self._layers.items()}
            for k, v in self._layers.items():
                self.register_buffer(f"{k}_inv_freq", torch.from_numpy(
                    np.asarray(v.inv_freq(), np.float32).copy()), persistent=False)
                setattr(self, f"{k}_attention_scaling", v.attention_scaling)

    @property
    def max_seq_len_cached(self) -> int:
        """The length whose dynamic-NTK frequencies are in use (transformers' attribute)."""
        return next(iter(self._layers.values())).max_seq_len_cached

    def extra_repr(self) -> str:
        return f"{self.rope!r}, precision={self.precision!r}"

    def forward(self, x: torch.Tensor, position_ids: Any,
                layer_type: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` for ``position_ids`` (``(batch, seq)``), in ``x``'s dtype.

        ``x`` only gives the dtype (and must be on the CPU).  ``layer_type``
        selects the table set of a per-layer-type config.

        Examples
        --------
        >>> import math, numpy as np, torch, posemb.torch as pt
        >>> cos, sin = pt.RotaryEmbedding(dim=8).forward(torch.ones(1, 3, 8), torch.arange(3)[None])
        >>> cos.shape, bool(cos[0, 1, 0].item() == np.float32(math.cos(1.0)))   # rounded once
        (torch.Size([1, 3, 8]), True)
        """
        _check(x, "x")
        pos = _positions(position_ids, "position_ids")
        if self.layer_types:
            if layer_type is None:
                raise ValueError(f"this rotary module has one RoPE per layer type "
                                 f"{self.layer_types}: pass layer_type=")
            if layer_type not in self._layers:
                raise ValueError(f"layer_type {layer_type!r} has no RoPE here (NoPE or unknown); "
                                 f"expected one of {self.layer_types}")
            layer = self._layers[layer_type]
        else:
            layer = self._layers[None]
        before = layer.max_seq_len_cached
        complex_tables = self.convention.tables == "complex"
        tables = layer.tables(pos, x.dtype, self.convention.tables != "half", self.mrope,
                              polar=complex_tables)
        if layer.max_seq_len_cached != before and layer.rope_type == "dynamic":
            name = "inv_freq" if layer_type is None or not self.layer_types \
                else f"{layer_type}_inv_freq"
            if layer.precision == "float32":
                inv = np.asarray(layer.inv_freq(), np.float32)
            else:
                inv = posemb.rope_inv_freq(
                    layer.rope.rotary_dim, layer.rope.base, scaling=layer.rope.scaling,
                    max_position_embeddings=layer.rope.max_position_embeddings,
                    seq_len=layer.max_seq_len_cached).astype(np.float32)
            setattr(self, name, torch.from_numpy(inv.copy()))
        return tables  # (cos, sin), or DeepSeek-V2's / Llama 4's complex64 freqs_cis

    def apply_rotary_pos_emb(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                             sin: torch.Tensor,
                             unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """This model family's ``apply_rotary_pos_emb`` on tables from :meth:`forward`.

        See :func:`apply_rotary_pos_emb_convention`.

        Examples
        --------
        >>> import torch, posemb.torch as pt
        >>> rotary = pt.RotaryEmbedding({"model_type": "cohere", "hidden_size": 32,
        ...                              "num_attention_heads": 2})
        >>> q = torch.randn(1, 2, 4, 16)
        >>> cos, sin = rotary(q, torch.arange(4)[None])
        >>> qe, ke = rotary.apply_rotary_pos_emb(q, q, cos, sin)
        >>> qe.shape
        torch.Size([1, 2, 4, 16])
        """
        return apply_rotary_pos_emb_convention(q, k, cos, sin, self.convention, unsqueeze_dim)


# ---------------------------------------------------------------- sinusoidal


def sinusoidal(seq_len: int, dim: int, *, base: float = 10000.0, start: int = 0,
               layout: str = "interleaved", dtype: torch.dtype = torch.float32,
               spacing: str = "vaswani", padding_idx: int | None = None) -> torch.Tensor:
    """The sinusoidal table as a tensor: :func:`posemb.sinusoidal` (no gradient).

    ``(seq_len, dim)``, every value computed in float64 and rounded once to
    ``dtype`` (bfloat16 included).  ``spacing="fairseq"`` gives fairseq's
    ``SinusoidalPositionalEmbedding.get_embedding`` (also transformers'
    M2M100/FSMT/Speech2Text): frequencies ``base ** (-i / (h - 1))`` for
    ``i < h = dim // 2`` (the last one exactly ``1/base``), the
    ``[sin | cos]`` order (``layout="concat"``, required), a zero last column
    for odd ``dim``, and the row of position ``padding_idx`` all zeros
    (fairseq's positions then start at ``padding_idx + 1``).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> pe = pt.sinusoidal(100, 16)
    >>> pe.shape, pe.dtype, pe[0, :4].tolist()
    (torch.Size([100, 16]), torch.float32, [0.0, 1.0, 0.0, 1.0])
    >>> fs = pt.sinusoidal(10, 8, layout="concat", spacing="fairseq", padding_idx=1)
    >>> fs[1].abs().sum().item(), round(fs[3, 3].item(), 6)       # row 1 zero; sin(3 * 1e-4)
    (0.0, 0.0003)
    """
    if dtype not in _FLOATS:
        raise TypeError(f"dtype must be a torch float dtype, got {dtype}")
    if spacing not in ("vaswani", "fairseq"):
        raise ValueError(f"spacing must be 'vaswani' or 'fairseq', got {spacing!r}")
    np_dt = np.float64 if dtype == torch.bfloat16 else _np_dtype(dtype)
    if spacing == "vaswani":
        table = posemb.sinusoidal(seq_len, dim, base=base, start=start, layout=layout,
                                  dtype=np_dt)
    else:
        if layout != "concat":
            raise ValueError("spacing='fairseq' uses fairseq's [sin | cos] order: pass "
                             "layout='concat'")
        n = posemb._checks.size(seq_len, "seq_len")
        d = posemb._checks.size(dim, "dim")
        b = posemb._checks.positive_float(base, "base")
        first = posemb._checks.size(start, "start")
        h = d // 2
        if h < 2:
            raise ValueError(f"spacing='fairseq' needs dim >= 4 (it divides by dim // 2 - 1), "
                             f"got {d}")
        freqs = np.exp(np.arange(h, dtype=np.float64) * -(math.log(b) / (h - 1)))
        angles = (first + np.arange(n, dtype=np.float64))[:, None] * freqs
        table = np.zeros((n, d), dtype=np.float64)
        table[:, :h], table[:, h:2 * h] = np.sin(angles), np.cos(angles)
        table = table.astype(np_dt)
    if padding_idx is not None:
        row = posemb._checks.size(padding_idx, "padding_idx") - int(start)
        if 0 <= row < table.shape[0]:
            table[row] = 0
    return _tensor(table, dtype)


# ---------------------------------------------------------------- Shaw relative embeddings


class _ShawEmbed(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, q: int, k: int) -> torch.Tensor:
        work = _work_dtype(table.dtype)
        ctx.args = (q, k, (table.shape[0] - 1) // 2, table.dtype, work)
        if table.dtype == torch.bfloat16:       # a gather: float16's loop moves the bits
            out = posemb.relative_embeddings(_bf16_bits(table).view(np.float16), q, k)
            return _bf16_tensor(out)
        out = posemb.relative_embeddings(_view(table, work), q, k)
        return _tensor(out, table.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        q, k, K, dtype, work = ctx.args
        if grad.dtype == torch.bfloat16:        # widened by the kernel
            g = _relative_bits.shaw_backward_bf16_bits(_bf16_bits(grad), K, q, k)
        else:
            g = posemb.relative_embeddings_backward(_view(grad, work), K, q, k)
        return _tensor(g, dtype), None, None


def relative_embeddings(table: torch.Tensor, query_length: int, key_length: int, *,
                        max_left: int | None = None,
                        max_right: int | None = None) -> torch.Tensor:
    """Shaw et al. relative position embeddings ``(query, key, dim)``, with the table's gradient.

    ``out[i, j] = table[clip(j - p_i, -L, R) + L]`` with the queries at the
    last ``query_length`` key positions (``p_i = key_length - query_length +
    i``).  Symmetric clipping (``L = R = K``, ``table`` of ``2K + 1`` rows)
    runs :func:`posemb.relative_embeddings` and its backward (a scatter-add
    summed in float64).  ``max_left``/``max_right`` give asymmetric limits,
    as Wav2Vec2-BERT's ``left_max_position_embeddings`` /
    ``right_max_position_embeddings`` (``table`` of ``L + R + 1`` rows,
    ``distance_embedding``).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> table = torch.nn.Parameter(torch.randn(5, 4))            # K = 2
    >>> e = pt.relative_embeddings(table, 6, 6)
    >>> e.shape
    torch.Size([6, 6, 4])
    >>> e.sum().backward()
    >>> table.grad[:, 0].tolist()             # cells at distance <= -2, -1, 0, 1, >= 2
    [10.0, 5.0, 6.0, 5.0, 10.0]
    >>> w = torch.nn.Parameter(torch.randn(4, 2))                  # left 1, right 2
    >>> pt.relative_embeddings(w, 3, 3, max_left=1, max_right=2)[0, 2].tolist() == w[3].tolist()
    True
    """
    _check(table, "table")
    if table.ndim != 2:
        raise ValueError(f"table must have shape (rows, dim), got {tuple(table.shape)}")
    q = posemb._checks.size(query_length, "query_length")
    k = posemb._checks.size(key_length, "key_length")
    if max_left is None and max_right is None:
        return _ShawEmbed.apply(table, q, k)
    if max_left is None or max_right is None:
        raise TypeError("give both max_left and max_right (or neither: symmetric clipping)")
    left = posemb._checks.size(max_left, "max_left")
    right = posemb._checks.size(max_right, "max_right")
    if table.shape[0] != left + right + 1:
        raise ValueError(f"table must have max_left + max_right + 1 = {left + right + 1} rows, "
                         f"got {table.shape[0]}")
    pos = np.arange(k - q, k, dtype=np.int64)[:, None]
    index = np.clip(np.arange(k, dtype=np.int64)[None, :] - pos, -left, right) + left
    return table[torch.from_numpy(index)]


class RelativePositionEmbedding(nn.Module):
    """A trainable Shaw relative-position table (``(L + R + 1, dim)``), with its gradient.

    ``forward(query_length, key_length) -> (query, key, dim)``: see
    :func:`relative_embeddings`.  ``max_relative_position=K`` is the
    symmetric case (Shaw et al., tensor2tensor); ``max_left``/``max_right``
    the asymmetric one (Wav2Vec2-BERT).

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> rel = pt.RelativePositionEmbedding(16, max_relative_position=4)
    >>> rel(10, 10).shape, rel.weight.shape
    (torch.Size([10, 10, 16]), torch.Size([9, 16]))
    >>> w2v = pt.RelativePositionEmbedding(16, max_left=64, max_right=8)
    >>> w2v.weight.shape
    torch.Size([73, 16])
    """

    def __init__(self, embedding_dim: int, max_relative_position: int | None = None, *,
                 max_left: int | None = None, max_right: int | None = None,
                 dtype: torch.dtype | None = None, device: Any = None) -> None:
        super().__init__()
        _check_device(device)
        if max_relative_position is not None:
            if max_left is not None or max_right is not None:
                raise TypeError("give max_relative_position or max_left/max_right, not both")
            k = posemb._checks.size(max_relative_position, "max_relative_position")
            self.max_left = self.max_right = None
            rows = 2 * k + 1
        else:
            if max_left is None or max_right is None:
                raise TypeError("give max_relative_position, or both max_left and max_right")
            self.max_left = posemb._checks.size(max_left, "max_left")
            self.max_right = posemb._checks.size(max_right, "max_right")
            rows = self.max_left + self.max_right + 1
        dim = posemb._checks.size(embedding_dim, "embedding_dim")
        self.weight = nn.Parameter(torch.empty(rows, dim, dtype=dtype))
        nn.init.normal_(self.weight)

    def forward(self, query_length: int, key_length: int) -> torch.Tensor:
        """The ``(query_length, key_length, dim)`` embeddings.

        Examples
        --------
        >>> import posemb.torch as pt
        >>> pt.RelativePositionEmbedding(2, 1)(1, 3).shape
        torch.Size([1, 3, 2])
        """
        return relative_embeddings(self.weight, query_length, key_length,
                                   max_left=self.max_left, max_right=self.max_right)


def apply_multimodal_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                                    sin: torch.Tensor, mrope_section: Any,
                                    unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for Qwen2-VL/Qwen2.5-Omni's ``apply_multimodal_rotary_pos_emb``, with autograd.

    ``cos``/``sin`` are per-axis tables ``(3, batch, seq, head_dim)`` (temporal,
    height, width); frequency band section ``j`` (in both halves) comes from
    ``cos[j % 3]``, then the half-split rotation is applied.
    :class:`RotaryEmbedding` built from such a config returns the selected
    ``(batch, seq, head_dim)`` tables directly.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> cos, sin = torch.randn(3, 1, 4, 16), torch.randn(3, 1, 4, 16)
    >>> q = torch.randn(1, 2, 4, 16, requires_grad=True)
    >>> qe, ke = pt.apply_multimodal_rotary_pos_emb(q, q, cos, sin, [2, 3, 3])
    >>> qe.shape
    torch.Size([1, 2, 4, 16])
    """
    _check(cos, "cos")
    _check(sin, "sin")
    sections = [posemb._checks.size(s, "mrope_section") for s in mrope_section]
    if cos.ndim < 1 or cos.shape[-1] != 2 * sum(sections):
        raise ValueError(f"cos/sin must end in 2 * sum(mrope_section) = {2 * sum(sections)} "
                         f"features, got shape {tuple(cos.shape)}")
    split = sections * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1)
    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


# ---------------------------------------------------------------- ALiBi


def _alibi(slopes: Any, q: int, k: int, symmetric: bool, offset: int | None,
           dtype: torch.dtype) -> torch.Tensor:
    """posemb.alibi_bias as a tensor of dtype; bfloat16 made by the kernel
    (through float32, as torch's cast of the float64 bias)."""
    if dtype == torch.bfloat16:
        bits = _alibi_bits.alibi_bias_bf16_bits(slopes, q, k, symmetric=symmetric,
                                                query_offset=offset)
        return _bf16_tensor(bits)
    return _tensor(posemb.alibi_bias(slopes, q, k, symmetric=symmetric, query_offset=offset,
                                     dtype=_np_dtype(dtype)))


class _AlibiBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, slopes: torch.Tensor, q: int, k: int, symmetric: bool,
                offset: int | None, dtype: torch.dtype) -> torch.Tensor:
        ctx.args = (q, k, symmetric, k - q if offset is None else offset)
        ctx.slopes_dtype = slopes.dtype
        return _alibi(_view(slopes, torch.float64), q, k, symmetric, offset, dtype)

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
    return _alibi(slopes_or_num_heads, query_length, key_length, symmetric, query_offset,
                  dtype or torch.float32)


def _bloom_float32_slopes(num_heads: int) -> torch.Tensor:
    """BLOOM's ``_get_alibi_slopes``: float32 powers of a float32-rounded base."""
    c = 1 << (num_heads.bit_length() - 1)
    base = torch.tensor(2 ** (-(2 ** -(math.log2(c) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + c, dtype=torch.int32))
    if c != num_heads:
        extra = torch.tensor(2 ** (-(2 ** -(math.log2(2 * c) - 3))), dtype=torch.float32)
        n = min(c, num_heads - c)
        slopes = torch.cat([slopes, torch.pow(extra, torch.arange(1, 1 + 2 * n, 2,
                                                                   dtype=torch.int32))])
    return slopes


def build_alibi_tensor(attention_mask: torch.Tensor, num_heads: int,
                       dtype: torch.dtype, *, precision: str = "exact") -> torch.Tensor:
    """Drop-in for BLOOM's ``build_alibi_tensor``: ALiBi with padding-aware positions.

    Each key's position counts only the real tokens before it
    (``(attention_mask.cumsum(-1) - 1) * attention_mask``: left padding does
    not shift the positions of the real tokens), times Press's slope of each
    head (:func:`posemb.alibi_slopes`, exact, rounded once to float32).
    Returns ``(batch * num_heads, 1, seq)`` in ``dtype``, as transformers'
    does (the query-independent form: softmax ignores the per-row constant).
    ``precision="float32"`` computes the slopes as BLOOM does (float32 powers
    of a rounded base: an ulp away for head counts such as 16, whose slopes
    are not powers of two), bit for bit.

    Examples
    --------
    >>> import torch, posemb.torch as pt
    >>> mask = torch.tensor([[0, 0, 1, 1, 1]])                 # two padding tokens
    >>> pt.build_alibi_tensor(mask, 2, torch.float32)[0, 0].tolist()
    [0.0, 0.0, 0.0, 0.0625, 0.125]
    """
    _check(attention_mask, "attention_mask", floating=False)
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must be (batch, seq), got {tuple(attention_mask.shape)}")
    if dtype not in _FLOATS:
        raise TypeError(f"dtype must be a torch float dtype, got {dtype}")
    if precision not in ("exact", "float32"):
        raise ValueError(f"precision must be 'exact' or 'float32', got {precision!r}")
    batch, seq = attention_mask.shape
    mask = attention_mask.detach().to(torch.int64)
    positions = (mask.cumsum(dim=-1) - 1) * mask
    if precision == "float32":
        slopes = _bloom_float32_slopes(posemb._checks.size(num_heads, "num_heads", minimum=1))
    else:
        slopes = torch.from_numpy(posemb.alibi_slopes(num_heads, dtype=np.float32))
    alibi = slopes[None, :, None] * positions[:, None, :]
    return alibi.reshape(batch * slopes.shape[0], 1, seq).to(dtype)


def build_mpt_alibi_tensor(num_heads: int, sequence_length: int, alibi_bias_max: float = 8,
                           device: Any = None) -> torch.Tensor:
    """Drop-in for MPT's ``build_mpt_alibi_tensor``: ``(num_heads, 1, sequence_length)``.

    ``bias[h, 0, j] = m_h * (j - (sequence_length - 1))`` with the slopes
    ``2 ** (-alibi_bias_max * (h + 1) / c)`` (:func:`posemb.alibi_slopes`
    with ``alibi_bias_max``), float32.

    Examples
    --------
    >>> import posemb.torch as pt
    >>> pt.build_mpt_alibi_tensor(2, 3, alibi_bias_max=8)[:, 0].tolist()
    [[-0.125, -0.0625, 0.0], [-0.0078125, -0.00390625, 0.0]]
    """
    _check_device(device)
    n = posemb._checks.size(sequence_length, "sequence_length")
    slopes = torch.from_numpy(posemb.alibi_slopes(num_heads, dtype=np.float32,
                                                  alibi_bias_max=alibi_bias_max))
    distance = torch.arange(1 - n, 1, dtype=torch.int32)
    return (distance[None, None, :] * slopes[:, None, None])


# ---------------------------------------------------------------- T5


class _T5Bias(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, q: int, k: int, bidirectional: bool,
                max_distance: int, offset: int) -> torch.Tensor:
        work = _work_dtype(table.dtype)
        kw: dict[str, Any] = dict(bidirectional=bidirectional, num_buckets=table.shape[0],
                                  max_distance=max_distance, query_offset=offset)
        ctx.kw = dict(kw, query_length=q, key_length=k)
        ctx.dtypes = (table.dtype, work)
        if table.dtype == torch.bfloat16:       # a gather: float16's loop moves the bits
            bias = posemb.t5_relative_bias(_bf16_bits(table).view(np.float16), q, k, **kw)
            return _bf16_tensor(bias)
        bias = posemb.t5_relative_bias(_view(table, work), q, k, **kw)
        return _tensor(bias, table.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        dtype, work = ctx.dtypes
        if grad.dtype == torch.bfloat16:        # widened by the kernel
            g = _relative_bits.t5_bias_backward_bf16_bits(_bf16_bits(grad), **ctx.kw)
        else:
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
        ctx.args = (positions, offset, weight.shape[0], work)
        ctx.meta = (x.shape, x.dtype, weight.dtype)
        if x.dtype == weight.dtype == torch.bfloat16:     # the kernel's bfloat16 loop
            bits = _learned_bits.forward_bf16_bits(_bf16_bits(x), _bf16_bits(weight), positions,
                                                   offset)
            return _bf16_tensor(bits)
        y = posemb.learned_pe_forward(_view(x, work), _view(weight, work), positions,
                                      offset=offset)
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
            if grad.dtype == torch.bfloat16:              # read as bfloat16, summed in float32
                g = _learned_bits.backward_bf16_bits(_bf16_bits(grad), positions, m, offset)
            else:
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
