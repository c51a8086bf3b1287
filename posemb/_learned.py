"""Learned position encodings: the fused forward, the backward, LearnedPE.

Conventions (PyTorch ``nn.Embedding`` and its gradient; GPT-2/BERT position
embeddings; TorchLean's learned positional encoding):

* ``weight`` is the ``(max_length, dim)`` table (``nn.Embedding(max_length, dim)``).
* Forward ``y = x + weight[positions]`` for ``x`` of shape ``(..., seq, dim)``;
  ``positions`` default to ``offset + arange(seq)`` and broadcast to
  ``x.shape[:-1]``.
* Backward: ``grad_x = grad_out`` and ``grad_weight[p]`` is the sum of
  ``grad_out`` over every token at position ``p``, accumulated in token order
  (C order of ``grad_out.shape[:-1]``) exactly as PyTorch's ``Embedding``
  gradient on the CPU.
* A position outside ``[0, max_length)`` is an IndexError naming the value,
  raised before anything is written.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _checks
from . import _native as _core
from ._bfloat16 import accepts_bfloat16
from ._threads import cached_output, new_output

__all__ = ["learned_pe_forward", "learned_pe_backward", "LearnedPE"]


def _positions(positions: Any, offset: Any, shape: tuple[int, ...], limit: int,
               name: str) -> np.ndarray:
    """int64 positions broadcastable to shape[:-1], each in [0, limit)."""
    lead = tuple(shape[:-1])
    if positions is None:
        if len(shape) < 2:
            raise ValueError(
                f"{name} must have shape (..., seq, dim) when positions is not given, "
                f"got {tuple(shape)}")
        start = _checks.size(offset, "offset")
        seq = shape[-2]
        if seq and start + seq > limit:
            raise IndexError(
                f"positions must be < {limit}, got {start + seq - 1} "
                f"(offset={start}, seq={seq})")
        return np.arange(start, start + seq, dtype=np.int64)
    if _checks.size(offset, "offset") != 0:
        raise ValueError("offset applies only when positions is not given "
                         "(positions are absolute)")
    pos = _checks.integer_array(positions, "positions")
    try:
        ok = np.broadcast_shapes(pos.shape, lead) == lead
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"positions of shape {pos.shape} must broadcast to {name}.shape[:-1] = {lead}")
    return _checks.positions_array(pos, limit=limit)


def _forward_positions(x: Any, weight: Any, positions: Any, offset: Any) -> np.ndarray:
    """The forward's shapes checked; its positions as int64."""
    if len(weight.shape) != 2:
        raise ValueError(
            f"weight must have shape (max_length, dim), got {tuple(weight.shape)}")
    if len(x.shape) == 0 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"weight's width ({weight.shape[1]}) must equal x's last axis, "
            f"got x of shape {tuple(x.shape)}")
    return _positions(positions, offset, tuple(x.shape), weight.shape[0], "x")


def forward_bf16_bits(x: np.ndarray, weight: np.ndarray, positions: Any = None,
                      offset: int = 0) -> np.ndarray:
    """learned_pe_forward on bfloat16 bit patterns (uint16 ndarrays, as
    posemb.torch views bfloat16 tensors): each sum formed in float32 and
    rounded once to bfloat16, as torch's bfloat16 addition."""
    pos = _forward_positions(x, weight, positions, offset)
    return _core.learned_pe_fwd_bf16(x, pos, weight, out=new_output(x))


def backward_bf16_bits(grad_out: np.ndarray, positions: Any, num_positions: int,
                       offset: int = 0) -> np.ndarray:
    """learned_pe_backward of a bfloat16 gradient given as bit patterns
    (uint16): the float32 table of its sums (torch rounds it to bfloat16)."""
    g, flat_pos, num_positions = _backward_operands(grad_out, positions, num_positions, offset)
    grad_weight = new_output(g, (num_positions, g.shape[1]), np.float32)
    _core._learned_back_bf16(g, flat_pos, grad_weight, True)
    return grad_weight


@accepts_bfloat16("x", "weight")
def learned_pe_forward(x: Any, weight: Any, positions: Any = None, *, offset: int = 0,
                       out: np.ndarray | None = None) -> Any:
    """``x + weight[positions]`` in one pass, without a gathered temporary.

    A NumPy generalized ufunc over ``(d),(),(m,d)->(d)``: ``positions``
    broadcast against ``x``'s leading axes, strided ``x`` and ``out=`` (also
    ``out=x``, in place) are accepted.  float16 sums are formed in float32
    and rounded once.  Equals NumPy's ``x + weight[positions]`` bit for bit.

    Parameters
    ----------
    x : array_like, float16/32/64, shape ``(..., seq, dim)``
    weight : array_like, float16/32/64, shape ``(max_length, dim)``
    positions : array_like of int, optional
        Broadcastable to ``x.shape[:-1]``, each in ``[0, max_length)``.
        Default ``offset + arange(seq)``.
    offset : int
        First position when ``positions`` is not given.
    out : numpy.ndarray, optional

    Examples
    --------
    >>> import numpy as np, posemb
    >>> w = np.arange(12.0).reshape(6, 2)              # 6 positions, dim 2
    >>> x = np.zeros((1, 3, 2))
    >>> posemb.learned_pe_forward(x, w, offset=2)
    array([[[4., 5.],
            [6., 7.],
            [8., 9.]]])
    >>> posemb.learned_pe_forward(x, w, np.array([5, 0, 5]))[0, :, 0]
    array([10.,  0., 10.])
    """
    x = _checks.float_operand(x, "x")
    weight = _checks.float_operand(weight, "weight")
    pos = _forward_positions(x, weight, positions, offset)
    x, (pos,) = _checks.dask_operands(x, (pos,), (-1,), others_core=0)
    if out is None:
        return _core.learned_pe_fwd(x, pos, weight,
                                    out=cached_output(x, x.shape, (x.dtype, weight.dtype)))
    return _core.learned_pe_fwd(x, pos, weight, out=_checks.out_operand(out, x.shape))


def _backward_operands(grad_out: np.ndarray, positions: Any, num_positions: Any,
                       offset: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """The backward's gradient as C-contiguous (tokens, dim) rows, its
    positions flattened to match, and the table's height, all checked."""
    if grad_out.ndim == 0:
        raise ValueError("grad_out must have at least one dimension (features last)")
    num_positions = _checks.size(num_positions, "num_positions")
    pos = _positions(positions, offset, grad_out.shape, num_positions, "grad_out")
    lead = grad_out.shape[:-1]
    n, d = int(np.prod(lead, dtype=np.int64)), grad_out.shape[-1]
    _checks.check_result((num_positions, d), np.float64 if grad_out.dtype == np.float64
                         else np.float32, "num_positions", extra=8 * n)
    flat_pos = _checks.c_array(np.broadcast_to(pos, lead)).reshape(n)
    return _checks.c_array(grad_out).reshape(n, d), flat_pos, num_positions


def learned_pe_backward(grad_out: Any, positions: Any = None, *, num_positions: int,
                        offset: int = 0) -> np.ndarray:
    """Gradient of :func:`learned_pe_forward` with respect to ``weight``.

    ``grad_weight[p]`` is the sum of ``grad_out[..., t, :]`` over every token
    whose position is ``p``; repeated positions accumulate, in token order, so
    the result equals PyTorch's ``nn.Embedding`` ``weight.grad`` (float32 and
    float64 bit for bit).  The gradient with respect to ``x`` is ``grad_out``
    itself.  float16 gradients are summed in float32 and rounded once.

    Parameters
    ----------
    grad_out : array_like, float16/32/64, shape ``(..., seq, dim)``
    positions : array_like of int, optional
        As in the forward; default ``offset + arange(seq)``.
    num_positions : int
        Rows of the table (``max_length``); positions must be below it.
    offset : int

    Returns
    -------
    numpy.ndarray
        ``(num_positions, dim)``, the dtype of ``grad_out``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> g = np.ones((2, 3, 2), np.float32)              # (batch, seq, dim)
    >>> posemb.learned_pe_backward(g, np.array([0, 2, 2]), num_positions=4)
    array([[2., 2.],
           [0., 0.],
           [4., 4.],
           [0., 0.]], dtype=float32)
    """
    grad_out = np.asarray(_checks.float_operand(grad_out, "grad_out"))
    g, flat_pos, num_positions = _backward_operands(grad_out, positions, num_positions, offset)
    d = g.shape[1]
    half = grad_out.dtype == np.float16
    # no zeroing pass: the kernel starts each row from zero itself (assign);
    # a large table from the output cache (warm pages, as a training loop's
    # allocator would give it)
    grad_weight = new_output(g, (num_positions, d), np.float32 if half else grad_out.dtype)
    _core._learned_back(g, flat_pos, grad_weight, True)
    if not half:
        return grad_weight
    rounded = np.empty(grad_weight.shape, np.float16)
    _core._to_float16(grad_weight, rounded)          # (NumPy's cast: 3x the kernel)
    return rounded


class LearnedPE:
    """A learned position-embedding table (GPT-2/BERT style; ``nn.Embedding`` plus add).

    Parameters
    ----------
    max_length : int
        Positions in the table.
    dim : int
        Features.
    dtype : float16, float32 or float64
    std : float
        The table starts as ``N(0, std**2)`` draws (GPT-2 uses 0.02).
    seed : int or numpy.random.Generator, optional

    Attributes
    ----------
    weight : numpy.ndarray
        ``(max_length, dim)``, writeable: an optimiser updates it in place.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> pe = posemb.LearnedPE(512, 64, seed=0)
    >>> x = np.zeros((8, 100, 64), np.float32)
    >>> y = pe(x)                                      # = x + weight[:100]
    >>> bool(np.array_equal(y[0], pe.weight[:100]))
    True
    >>> grad_x, grad_w = pe.backward(np.ones_like(y))
    >>> grad_w.shape, float(grad_w[0, 0]), float(grad_w[100, 0])
    ((512, 64), 8.0, 0.0)
    """

    def __init__(self, max_length: int, dim: int, *, dtype: Any = np.float32,
                 std: float = 0.02, seed: Any = None) -> None:
        self.max_length = _checks.size(max_length, "max_length")
        self.dim = _checks.size(dim, "dim")
        self.dtype = _checks.float_dtype(dtype)
        self.std = _checks.finite_float(std, "std")
        if self.std < 0:
            raise ValueError(f"std must be >= 0, got {std!r}")
        # the weight, and the float64 normal draws it is made from
        _checks.check_result((self.max_length, self.dim), self.dtype, "max_length and dim",
                             extra=_checks.nbytes((self.max_length, self.dim), np.float64))
        try:
            rng = np.random.default_rng(seed)
        except (TypeError, ValueError) as e:
            raise TypeError(f"seed must be None, an int or a numpy Generator: {e}") from None
        self.weight = rng.normal(0.0, self.std, (self.max_length, self.dim)).astype(self.dtype)

    def __repr__(self) -> str:
        return (f"LearnedPE(max_length={self.max_length}, dim={self.dim}, "
                f"dtype={self.dtype.name}, std={self.std})")

    def forward(self, x: Any, positions: Any = None, *, offset: int = 0) -> Any:
        """``x + weight[positions]``; see :func:`learned_pe_forward`."""
        return learned_pe_forward(x, self.weight, positions, offset=offset)

    __call__ = forward

    def backward(self, grad_out: Any, positions: Any = None, *,
                 offset: int = 0) -> tuple[Any, np.ndarray]:
        """``(grad_x, grad_weight)`` for :meth:`forward` at the same positions.

        ``grad_x`` is ``grad_out`` itself; ``grad_weight`` has the table's
        shape and dtype (see :func:`learned_pe_backward`).
        """
        grad_weight = learned_pe_backward(grad_out, positions,
                                          num_positions=self.max_length, offset=offset)
        return grad_out, grad_weight.astype(self.dtype, copy=False)
