"""ONNX Runtime's ``com.microsoft`` ``RotaryEmbedding`` contrib operator as a
bench column (optional: only when ``onnxruntime`` imports).

The one-node model is written as ONNX protobuf bytes by hand (a few fields
of ModelProto/GraphProto/NodeProto, wire format per protobuf's encoding
spec), so the bench needs no ``onnx`` package.  The operator (ONNX Runtime
``contrib_ops/cpu/bert/rotary_embedding.cc``): input ``(batch, seq,
heads*head)`` or ``(batch, heads, seq, head)``, ``position_ids`` int64
``(batch, seq)``, ``cos_cache``/``sin_cache`` ``(max_pos, rotary_dim/2)``.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

# onnx.TensorProto.DataType
_ELEM = {np.dtype(np.float32): 1, np.dtype(np.float16): 10, np.dtype(np.float64): 11}
_INT64 = 7


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, v: int) -> bytes:
    return _key(field, 0) + _varint(v)


def _bytes(field: int, v: bytes | str) -> bytes:
    if isinstance(v, str):
        v = v.encode()
    return _key(field, 2) + _varint(len(v)) + v


def _float(field: int, v: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", v)


def _value_info(name: str, elem: int, dims: list[int | str]) -> bytes:
    shape = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _bytes(2, d))
                     for d in dims)
    tensor = _int(1, elem) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor))


def rotary_model(dtype: Any, rank: int, num_heads: int, interleaved: bool) -> bytes:
    """A ModelProto with one com.microsoft RotaryEmbedding node."""
    elem = _ELEM[np.dtype(dtype)]
    attrs = [_bytes(1, "interleaved") + _int(3, int(interleaved)) + _int(20, 2),
             _bytes(1, "num_heads") + _int(3, num_heads) + _int(20, 2)]
    node = (b"".join(_bytes(1, n) for n in ("input", "position_ids", "cos_cache", "sin_cache"))
            + _bytes(2, "output") + _bytes(3, "rope") + _bytes(4, "RotaryEmbedding")
            + b"".join(_bytes(5, a) for a in attrs) + _bytes(7, "com.microsoft"))
    xdims: list[int | str] = ["b", "s", "hd"] if rank == 3 else ["b", "n", "s", "d"]
    graph = (_bytes(1, node) + _bytes(2, "g")
             + _bytes(11, _value_info("input", elem, xdims))
             + _bytes(11, _value_info("position_ids", _INT64, ["b", "s"]))
             + _bytes(11, _value_info("cos_cache", elem, ["m", "h"]))
             + _bytes(11, _value_info("sin_cache", elem, ["m", "h"]))
             + _bytes(12, _value_info("output", elem, xdims)))
    opsets = _bytes(8, _bytes(1, "") + _int(2, 17)) + _bytes(8, _bytes(1, "com.microsoft")
                                                               + _int(2, 1))
    return _int(1, 8) + _bytes(2, "posemb-bench") + opsets + _bytes(7, graph)


# ONNX Runtime's intra-op threads keep spinning after a run (its default,
# session.intra_op.allow_spinning): at 2 threads, about 30 ms of CPU in the
# 50 ms after a (1, 32, 8192, 128) run, measured from /proc; whatever is
# timed next shares a core with them (posemb's 2-thread out= on the same
# data: 5.2-5.5 ms after itself, 6.0 ms right after ONNX Runtime).  So the
# bench waits this long after ONNX Runtime's samples before timing the next
# column.  ONNX Runtime keeps its spinning for its own back-to-back calls:
# without it, (1, 32, 128, 128) took 64 instead of 47 us.
SPIN_SETTLE_S = 0.1


class OrtRope:
    """A session running the operator on fixed inputs, optionally into a
    bound output (I/O binding: no allocation per call)."""

    def __init__(self, x: np.ndarray, num_heads: int, cos_half: np.ndarray,
                 sin_half: np.ndarray, positions: np.ndarray, *, interleaved: bool = False,
                 threads: int = 1, out: np.ndarray | None = None) -> None:
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        model = rotary_model(x.dtype, x.ndim, num_heads, interleaved)
        self.sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self.feeds = {"input": x, "position_ids": positions,
                      "cos_cache": cos_half, "sin_cache": sin_half}
        self.binding = None
        self.out = out            # the binding holds its address: keep it alive
        if out is not None:
            b = self.sess.io_binding()
            for name, a in self.feeds.items():
                b.bind_cpu_input(name, a)
            b.bind_output("output", "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
            self.binding = b

    def __call__(self) -> Any:
        if self.binding is not None:
            self.sess.run_with_iobinding(self.binding)
            return None
        return self.sess.run(None, self.feeds)[0]


def available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True
