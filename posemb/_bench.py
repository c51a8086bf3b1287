"""``python -m posemb bench``: posemb against the PyTorch formula (eager and
``torch.compile``), ONNX Runtime's ``RotaryEmbedding`` operator, the NumPy
formula and this machine's limit, measured side by side in one run.

The *limit* is the fastest trivial streaming pass over the same bytes (an
in-place scale for in-place kernels, a copy for out-of-place ones, a fill
for generated tables, a read for reductions): the best of C passes compiled
by the bench (posemb/_bench_stream.py: plain and streaming stores at the
CPU's vector width, on 1 thread and on the bench's thread count) and
NumPy's own, so ``posemb / limit`` says how close a kernel is to the memory
bandwidth, whatever the machine.  The large cases are sized from the
last-level cache read at run time (at least 4x it), so they measure memory,
not cache.  Every time is the median of repeated runs taken in interleaved
rounds; PyTorch and ONNX Runtime run with the same thread count.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import posemb
from posemb import _bench_ort, _bench_stream, _native

try:
    from posemb import _stream     # the bench-only extension built with posemb
except ImportError:      # a build without it
    _stream = None  # type: ignore[assignment]

Fn = Callable[[], Any]

#: peer columns: result key -> table title
COLUMNS = {"torch": "torch", "compile": "compile", "ort": "onnxrt", "numpy": "numpy",
           "contig": "contig"}


@dataclass
class Limit:
    kind: str                        # scale, copy, fill, read, or a description
    fns: dict[str, Fn]               # variant name -> pass; the fastest is the limit


@dataclass
class Case:
    family: str
    name: str
    shape: str
    posemb: Fn
    limit: Limit | None = None
    torch: Fn | None = None          # PyTorch eager
    compile: Fn | None = None        # torch.compile of the same formula
    ort: Fn | None = None            # ONNX Runtime
    numpy: Fn | None = None
    contig: Fn | None = None         # posemb on the contiguous layout of the same data
    per_call: bool = False           # tiny call: time a loop, report microseconds
    calls: int = 1                   # calls per timed sample when per_call
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # entered once around the row's timing, for every column (the decode
    # rows: torch.no_grad(), as transformers' generate() runs a whole step)
    context: Callable[[], Any] | None = None


def median_times(fns: list[Fn], repeat: int, calls: int = 1, rounds: int = 5,
                 warm_s: float = 0.03, settle_s: list[float] | None = None) -> list[float]:
    """Median seconds per call of each of `fns`, over `repeat` samples of
    `calls` calls taken in `rounds` interleaved rounds.  In every round each
    function first runs for `warm_s` seconds (at least once), then takes
    that round's samples: a virtual CPU that idled, or ran something else,
    is up to 4x slower for its first milliseconds (measured here), and a
    warm function sees its own data in cache as a loop of it would leave
    it.  A machine whose speed drifts during the run shifts every
    function's samples alike, so the ratios of the medians hold.  After a
    function's samples the round waits settle_s[i] seconds (if given): for
    threads it leaves spinning (see _bench_ort.SPIN_SETTLE_S)."""
    rounds = max(1, min(rounds, repeat))
    samples: list[list[float]] = [[] for _ in fns]
    settle = settle_s or [0.0] * len(fns)
    for r in range(rounds):
        n = repeat // rounds + (1 if r < repeat % rounds else 0)
        for fn, out, wait in zip(fns, samples, settle):
            t0 = time.perf_counter()
            fn()
            while time.perf_counter() - t0 < warm_s:
                fn()
            for _ in range(n):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                out.append((time.perf_counter() - t0) / calls)
            if wait > 0:
                time.sleep(wait)
    return [float(np.median(x)) for x in samples]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


# ---------------------------------------------------------------- the machine


def llc_bytes() -> tuple[int, str]:
    """The last-level cache's size in bytes and where it was read: the size
    posemb's runtime probed (one core's view: sysfs on Linux, else
    ``sysconf``), the one its kernels size their blocks from."""
    kib = int(_native._dispatch()["last_level_cache"].split()[0])
    return kib << 10, "posemb runtime: sysfs, else sysconf"


@dataclass
class Config:
    quick: bool
    threads: int
    llc: int
    compile: bool                    # torch.compile columns
    ort: bool                        # ONNX Runtime columns
    stream: Any                      # the compiled passes, or None

    def big_seq(self, heads: int, dim: int, itemsize: int, minimum: int = 4096) -> int:
        """A power-of-two sequence length making (1, heads, seq, dim) at
        least 4x the last-level cache (and at least `minimum`)."""
        s = minimum
        while heads * s * dim * itemsize < 4 * self.llc:
            s *= 2
        return s

    def compiled(self, fn: Fn | None) -> Fn | None:
        """torch.compile(fn), warmed (compiled) now, or None when disabled
        or when compiling fails."""
        torch = _torch()
        if fn is None or not self.compile or torch is None:
            return None
        try:
            c = torch.compile(fn, dynamic=False)
            c()
            c()
        except Exception as e:   # noqa: BLE001 - a missing compiler, an unsupported op
            print(f"posemb bench: torch.compile failed ({type(e).__name__}: {e}); "
                  "column left empty", file=sys.stderr)
            return None
        return c


CFG: Config | None = None


def _cfg() -> Config:
    assert CFG is not None
    return CFG


def _limit(kind: str, a: np.ndarray | None = None, b: np.ndarray | None = None, *,
           fresh: bool = False, shape: tuple[int, ...] | None = None) -> Limit:
    """The streaming passes moving the bytes a kernel moves.

    scale: a in place.  copy: a into b, or (fresh) into a new array like a.
    fill: a, or (shape) a new float32 array.  read: a."""
    cfg = _cfg()
    fns: dict[str, Fn] = {}
    threads = sorted({1, cfg.threads})
    st = cfg.stream
    new: Callable[[], np.ndarray] | None = None      # a fresh output per call
    if kind == "fill" and a is None:
        assert shape is not None
        fill_shape = shape
        fns["numpy"] = lambda: np.zeros(fill_shape, np.float32)   # calloc: pages on touch
        new = lambda: np.empty(fill_shape, np.float32)           # noqa: E731
    elif kind == "copy" and fresh:
        assert a is not None
        src = a
        fns["numpy"] = src.copy
        new = lambda: np.empty_like(src)                          # noqa: E731
    assert a is not None or new is not None
    if a is not None:
        flat = a.reshape(-1).view(np.float32)      # the same bytes as float32
    if kind == "scale":
        def np_scale() -> Any:
            with np.errstate(all="ignore"):    # (other dtypes' bytes may read as NaN)
                return np.multiply(flat, np.float32(1), out=flat)
        fns["numpy"] = np_scale
    elif kind == "copy" and not fresh:
        assert a is not None and b is not None
        dst, src2 = b, a
        fns["numpy"] = lambda: np.copyto(dst, src2)
    elif kind == "fill" and a is not None:
        fns["numpy"] = lambda: flat.fill(0)
    elif kind == "read":
        fns["numpy"] = lambda: np.add.reduce(flat)
    if st is not None:
        for variant in ("plain", "nt", "C"):
            var = "libc" if variant == "C" else variant
            for t in threads:
                fns[f"{variant}/{t}t"] = _stream_pass(st, kind, var, t, a, b, new)
    if _stream is not None and all(v is None or (v.flags.c_contiguous and v.flags.aligned
                                                 and v.nbytes % 4 == 0) for v in (a, b)):
        for t in threads:
            fns[f"ext/{t}t"] = _ext_pass(kind, t, a, b, new)
    return Limit(("new " if new is not None else "") + kind, fns)


def _stream_pass(st: Any, kind: str, var: str, t: int, a: np.ndarray | None,
                 b: np.ndarray | None, new: Callable[[], np.ndarray] | None) -> Fn:
    """One compiled streaming pass as a no-argument function."""
    if new is not None:
        def fresh() -> Any:
            out = new()
            if kind == "copy":
                st.run("copy", var, t, out, a)
            else:
                st.run("fill", var, t, out)
            return out
        return fresh
    assert a is not None
    flat = a.reshape(-1).view(np.float32)
    if kind in ("scale", "read"):
        return lambda: st.run(kind, var, t, flat)
    if kind == "copy":
        return lambda: st.run("copy", var, t, b, a)
    return lambda: st.run("fill", var, t, a)


def _ext_pass(kind: str, t: int, a: np.ndarray | None, b: np.ndarray | None,
              new: Callable[[], np.ndarray] | None) -> Fn:
    """One pass of the posemb._stream extension (built with posemb, on its
    own pool of t threads) as a no-argument function."""
    assert _stream is not None
    ext = _stream

    def f32(v: np.ndarray) -> np.ndarray:
        return v.reshape(-1).view(np.float32)
    if new is not None:
        def fresh() -> Any:
            out = new()
            if kind == "copy":
                assert a is not None
                ext.stream("copy", t, f32(a), f32(out))
            else:
                ext.stream("fill", t, f32(out))
            return out
        return fresh
    assert a is not None
    fa = f32(a)
    if kind == "copy":
        assert b is not None
        fb = f32(b)
        return lambda: ext.stream("copy", t, fa, fb)
    return lambda: ext.stream(kind, t, fa)


# ---------------------------------------------------------------- RoPE


def _hf(torch: Any, interleaved: bool = False) -> Callable[[Any, Any, Any], Any]:
    """HF's q*cos + rotate_half(q)*sin (or the interleaved pairs' formula)."""
    def rope(x: Any, c: Any, s: Any) -> Any:
        if interleaved:
            p = x.unflatten(-1, (-1, 2))
            rot = torch.stack((-p[..., 1], p[..., 0]), -1).flatten(-2)
        else:
            h = x.shape[-1] // 2
            rot = torch.cat((-x[..., h:], x[..., :h]), -1)
        return x * c + rot * s
    return rope


def _rope_cases(cfg: Config) -> list[Case]:
    torch = _torch()
    cases: list[Case] = []
    rng = np.random.default_rng(0)
    H, D = 32, 128
    S = 2048 if cfg.quick else cfg.big_seq(H, D, 4)
    label = f"1x{H}x{S}x{D}"
    x = rng.standard_normal((1, H, S, D), dtype=np.float32)
    xi = x.copy()
    y = np.empty_like(x)
    cos, sin = posemb.rope_cos_sin(np.arange(S), D)
    ci, si = posemb.rope_cos_sin(np.arange(S), D, interleaved=True)
    pos = np.arange(S, dtype=np.int64)[None]
    half_c = np.ascontiguousarray(cos[:, :D // 2])
    half_s = np.ascontiguousarray(sin[:, :D // 2])

    def tfn(xa: np.ndarray, c: np.ndarray, s: np.ndarray, inter: bool = False) -> Fn | None:
        if torch is None:
            return None
        xt, ct, st = torch.from_numpy(xa), torch.from_numpy(c), torch.from_numpy(s)
        f = _hf(torch, inter)

        def run() -> Any:
            with torch.no_grad():
                return f(xt, ct, st)
        return run

    def ort(xa: np.ndarray, heads: int, inter: bool = False, out: np.ndarray | None = None,
            c: np.ndarray = half_c, s: np.ndarray = half_s, p: np.ndarray = pos) -> Fn | None:
        if not cfg.ort:
            return None
        return _bench_ort.OrtRope(xa, heads, c.astype(xa.dtype), s.astype(xa.dtype), p,
                                  interleaved=inter, threads=cfg.threads, out=out)

    t_half = tfn(x, cos, sin)
    cases.append(Case("rope", "half-split in place", label,
                      lambda: posemb.apply_rope(xi, cos, sin, out=xi),
                      limit=_limit("scale", xi), torch=t_half, compile=cfg.compiled(t_half)))
    y_ort = np.empty_like(x)
    cases.append(Case("rope", "half-split out=", label,
                      lambda: posemb.apply_rope(x, cos, sin, out=y),
                      limit=_limit("copy", x, y), torch=t_half,
                      ort=ort(x, H, out=y_ort), note="onnxrt: I/O binding into a reused output"))
    cases.append(Case("rope", "half-split new array", label,
                      lambda: posemb.apply_rope(x, cos, sin),
                      limit=_limit("copy", x, fresh=True), torch=t_half, ort=ort(x, H),
                      note="a freed output's memory reused: posemb.set_output_cache"))
    cases.append(Case("rope", "half-split into fresh memory", label,
                      lambda: posemb.apply_rope(x, cos, sin, out=np.empty_like(x)),
                      limit=_limit("copy", x, fresh=True),
                      note="out=np.empty_like(x): what a new array costs without the cache"))
    t_int = tfn(x, ci, si, True)
    cases.append(Case("rope", "interleaved in place", label,
                      lambda: posemb.apply_rope(xi, ci, si, out=xi, interleaved=True),
                      limit=_limit("scale", xi), torch=t_int, compile=cfg.compiled(t_int)))
    cases.append(Case("rope", "interleaved out=", label,
                      lambda: posemb.apply_rope(x, ci, si, out=y, interleaved=True),
                      limit=_limit("copy", x, y), torch=t_int,
                      ort=ort(x, H, True, out=y_ort)))
    # float64: the same bytes as the float32 cases, half the positions
    S64 = S // 2
    x64 = rng.standard_normal((1, H, S64, D))
    c64, s64 = posemb.rope_cos_sin(np.arange(S64), D, dtype=np.float64)
    cases.append(Case("rope", "float64 in place", f"1x{H}x{S64}x{D}",
                      lambda: posemb.apply_rope(x64, c64, s64, out=x64),
                      limit=_limit("scale", x64), torch=tfn(x64, c64, s64)))
    y64 = np.empty_like(x64)
    cases.append(Case("rope", "float64 out=", f"1x{H}x{S64}x{D}",
                      lambda: posemb.apply_rope(x64, c64, s64, out=y64),
                      limit=_limit("copy", x64, y64), torch=tfn(x64, c64, s64)))
    # head size 256 (Gemma's): rows of 1 KiB, as float64's above
    x256 = rng.standard_normal((1, H, S64, 2 * D)).astype(np.float32)
    c256, s256 = posemb.rope_cos_sin(np.arange(S64), 2 * D)
    cases.append(Case("rope", "head size 256 in place", f"1x{H}x{S64}x{2 * D}",
                      lambda: posemb.apply_rope(x256, c256, s256, out=x256),
                      limit=_limit("scale", x256), torch=tfn(x256, c256, s256)))

    # strided q/k, new output (the form models use): the contiguous column
    # is posemb on a contiguous array of the same size
    bshd = np.ascontiguousarray(x.transpose(0, 2, 1, 3))        # (1, S, H, D)
    q_hf = bshd.transpose(0, 2, 1, 3)                            # HF's view().transpose(1, 2)
    contig_new = lambda: posemb.apply_rope(x, cos, sin)          # noqa: E731
    cases.append(Case("rope", "HF transposed q, new array", label,
                      lambda: posemb.apply_rope(q_hf, cos, sin),
                      limit=_limit("copy", x, fresh=True), torch=tfn(q_hf, cos, sin),
                      ort=ort(bshd.reshape(1, S, H * D), H), contig=contig_new,
                      note="x.view(b,s,h,d).transpose(1,2); onnxrt: (b,s,h*d) input"))
    q_hf_i = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    cases.append(Case("rope", "HF transposed q, in place", label,
                      lambda: posemb.apply_rope(q_hf_i, cos, sin, out=q_hf_i),
                      limit=_limit("scale", q_hf_i.base if q_hf_i.base is not None else q_hf_i),
                      contig=lambda: posemb.apply_rope(xi, cos, sin, out=xi)))
    cm, sm = cos[:, None, :], sin[:, None, :]
    cases.append(Case("rope", "Meta (b,s,h,d), new array", f"1x{S}x{H}x{D}",
                      lambda: posemb.apply_rope(bshd, cm, sm),
                      limit=_limit("copy", x, fresh=True), torch=tfn(bshd, cm, sm),
                      ort=ort(bshd.reshape(1, S, H * D), H), contig=contig_new,
                      note="tables (s,1,d)"))
    qkv = rng.standard_normal((1, S, H + 16, D), dtype=np.float32)   # fused q | k, v (8 each)
    q_sl = qkv[:, :, :H].transpose(0, 2, 1, 3)
    cases.append(Case("rope", "sliced heads of fused qkv", label,
                      lambda: posemb.apply_rope(q_sl, cos, sin),
                      limit=_limit("copy", x, fresh=True), torch=tfn(q_sl, cos, sin),
                      contig=contig_new, note="qkv.view(b,s,h+16,d)[:, :, :h].transpose(1,2)"))
    q_neg = x[:, ::-1]
    cases.append(Case("rope", "negative head stride", label,
                      lambda: posemb.apply_rope(q_neg, cos, sin),
                      limit=_limit("copy", x, fresh=True), contig=contig_new,
                      note="x[:, ::-1]"))

    # float16: the limit is a copy of the same bytes, sized (like every large
    # case) to 4x the last-level cache in its own bytes
    S16 = 2048 if cfg.quick else cfg.big_seq(H, D, 2)
    label16 = f"1x{H}x{S16}x{D}"
    x16 = rng.standard_normal((1, H, S16, D), dtype=np.float32).astype(np.float16)
    x16i = x16.copy()
    c16, s16 = (t.astype(np.float16) for t in posemb.rope_cos_sin(np.arange(S16), D))
    hc16, hs16 = (np.ascontiguousarray(t[:, :D // 2]) for t in (c16, s16))
    t16 = tfn(x16, c16, s16)
    cases.append(Case("rope", "float16 new array", label16,
                      lambda: posemb.apply_rope(x16, c16, s16),
                      limit=_limit("copy", x16, fresh=True), torch=t16, compile=cfg.compiled(t16),
                      ort=ort(x16, H, c=hc16, s=hs16, p=np.arange(S16, dtype=np.int64)[None])))
    y16 = np.empty_like(x16)
    cases.append(Case("rope", "float16 out=", label16,
                      lambda: posemb.apply_rope(x16, c16, s16, out=y16),
                      limit=_limit("copy", x16, y16), torch=t16))
    cases.append(Case("rope", "float16 in place", label16,
                      lambda: posemb.apply_rope(x16i, c16, s16, out=x16i),
                      limit=_limit("scale", x16i), torch=t16))

    # bfloat16 (ml_dtypes, optional): the same bytes as float16
    try:
        from ml_dtypes import bfloat16 as bf
    except ImportError:
        bf = None
    if bf is not None:
        xb = x16.astype(np.float32).astype(bf)
        xbi = xb.copy()
        yb = np.empty_like(xb)
        cb, sb = (t.astype(np.float32).astype(bf) for t in (c16, s16))
        cases.append(Case("rope", "bfloat16 out= (ml_dtypes)", label16,
                          lambda: posemb.apply_rope(xb, cb, sb, out=yb),
                          limit=_limit("copy", xb, yb)))
        cases.append(Case("rope", "bfloat16 in place (ml_dtypes)", label16,
                          lambda: posemb.apply_rope(xbi, cb, sb, out=xbi),
                          limit=_limit("scale", xbi)))

    # small: fits in L2
    xs = rng.standard_normal((1, H, 128, D), dtype=np.float32)
    cs, ss = cos[:128], sin[:128]
    ts = tfn(xs, cs, ss)
    ys = np.empty_like(xs)
    cases.append(Case("rope", "small in place", f"1x{H}x128x{D}",
                      lambda: posemb.apply_rope(xs, cs, ss, out=xs),
                      limit=_limit("scale", xs), torch=ts, compile=cfg.compiled(ts),
                      ort=ort(xs, H, out=ys, p=pos[:, :128]), per_call=True, calls=20))
    xsm = np.ascontiguousarray(xs.transpose(0, 2, 1, 3))      # Meta's (b, s, h, d)
    ysm = np.empty_like(xsm)
    cases.append(Case("rope", "small Meta (b,s,h,d) in place", f"1x128x{H}x{D}",
                      lambda: posemb.apply_rope(xsm, cs, ss, seq_axis=1, out=xsm),
                      limit=_limit("scale", xsm),
                      ort=ort(xsm.reshape(1, 128, H * D), H, out=ysm.reshape(1, 128, H * D),
                              p=pos[:, :128]),
                      contig=lambda: posemb.apply_rope(xs, cs, ss, out=xs),
                      per_call=True, calls=20, note="seq_axis=1"))

    # prefill-sized: x and y together a quarter of the last-level cache
    # (x 4 MiB of a 32 MiB cache; 16 to 1024 positions): streaming stores
    # would send y to memory
    Sm = max(16, min(1024, cfg.llc // 8 // (H * D * 4)))
    xm = rng.standard_normal((1, H, Sm, D), dtype=np.float32)
    ym = np.empty_like(xm)
    cm_, sm_ = cos[:Sm], sin[:Sm]
    tm = tfn(xm, cm_, sm_)
    cases.append(Case("rope", "in-cache out=", f"1x{H}x{Sm}x{D}",
                      lambda: posemb.apply_rope(xm, cm_, sm_, out=ym),
                      limit=_limit("copy", xm, ym), torch=tm, compile=cfg.compiled(tm),
                      ort=ort(xm, H, out=np.empty_like(xm), p=pos[:, :Sm]),
                      note="x + y: about 1/4 of the last-level cache"))

    # decode step: one new token per head, table row from the cache
    q = rng.standard_normal((1, 32, 1, 128), dtype=np.float32)
    k = rng.standard_normal((1, 8, 1, 128), dtype=np.float32)
    rope = posemb.RoPE(128, 4096)
    cr, sr = rope.cos_sin(offset=1000, seq_len=1)
    cr, sr = np.array(cr), np.array(sr)
    t_dec = None
    if torch is not None:
        qt, kt = torch.from_numpy(q), torch.from_numpy(k)
        crt, srt = torch.from_numpy(cr), torch.from_numpy(sr)
        f = _hf(torch)

        def t_dec() -> Any:
            return f(qt, crt, srt), f(kt, crt, srt)
    o_dec = None
    if cfg.ort:
        pd = np.array([[1000]], np.int64)
        oq = ort(q, 32, out=np.empty_like(q), p=pd)
        ok = ort(k, 8, out=np.empty_like(k), p=pd)

        def o_dec() -> Any:
            return oq(), ok()        # type: ignore[misc]
    qk = np.concatenate([q, k], axis=1)

    def copy_qk() -> Any:
        return q.copy(), k.copy()
    # limit: the raw gufunc on the same operands, i.e. what the Python API
    # adds to a call (issue: at most 1.3x for apply_rope, 1.6x for RoPE)
    raw = Limit("raw gufunc", {"gufunc": lambda: _native.rope_half_fwd(q, cr, sr)})
    cases.append(Case("rope", "decode step apply_rope(q)", "1x32x1x128",
                      lambda: posemb.apply_rope(q, cr, sr), limit=raw, per_call=True,
                      calls=2000, note="limit: the raw gufunc call"))
    cases.append(Case("rope", "decode step RoPE(q, offset=)", "1x32x1x128",
                      lambda: rope(q, offset=1000), limit=raw, per_call=True, calls=2000,
                      note="the cached module: table rows looked up per call; "
                           "limit: the raw gufunc call"))
    cases.append(Case("rope", "decode step q and k", "1x32x1x128 + 1x8x1x128",
                      lambda: (posemb.apply_rope(q, cr, sr), posemb.apply_rope(k, cr, sr)),
                      limit=Limit("new copy", {"numpy": copy_qk}),
                      torch=t_dec, ort=o_dec, per_call=True, calls=1000,
                      context=torch.no_grad if torch is not None else None,
                      note="limit: copies of q and k; onnxrt: I/O binding; "
                           "torch under no_grad(), entered once"))
    del qk
    return cases


# ---------------------------------------------------------------- tables


def _sinusoidal_cases(cfg: Config) -> list[Case]:
    torch = _torch()
    n, d = (2048, 1024) if cfg.quick else (8192, 1024)

    def np_formula() -> np.ndarray:   # the seed tutorial's formula, float64 NumPy
        i = np.arange(d // 2)
        div = np.exp(-np.log(10000.0) * (2 * i / d))
        ang = np.arange(n)[:, None] * div
        pe = np.zeros((n, d))
        pe[:, 0::2] = np.sin(ang)
        pe[:, 1::2] = np.cos(ang)
        return pe

    t_fn = None
    if torch is not None:
        def t_fn() -> Any:   # the MLM tutorial's create_sinusoidal_encodings, float32
            i = torch.arange(0, d // 2)
            div_term = torch.exp(-np.log(10000) * (2 * i / d))
            position = torch.arange(n).unsqueeze(1)
            pe = torch.zeros(n, d)
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            return pe

    x = np.random.default_rng(2).standard_normal((8, 512, 1024), dtype=np.float32)
    y = np.empty_like(x)
    pe512 = posemb.sinusoidal(512, 1024)
    absolute = posemb.AbsolutePE(1024, 512)
    t_add = None
    if torch is not None:
        xt, pet = torch.from_numpy(x), torch.from_numpy(pe512)

        def t_add() -> Any:
            return xt + pet

    x16 = x.astype(np.float16)
    y16 = np.empty_like(x16)
    pe16 = pe512.astype(np.float16)
    t_add16 = None
    if torch is not None:
        xt16, pet16 = torch.from_numpy(x16), torch.from_numpy(pe16)

        def t_add16() -> Any:
            return xt16 + pet16

    table = np.empty((n, d), np.float32)
    return [
        Case("sinusoidal", "sinusoidal table (float64-exact)", f"{n}x{d}",
             lambda: posemb.sinusoidal(n, d), limit=_limit("fill", shape=(n, d)),
             torch=t_fn, numpy=np_formula,
             note="torch/numpy: the seed's formula in float32/float64"),
        Case("sinusoidal", "sinusoidal(out=) (reused)", f"{n}x{d}",
             lambda: posemb.sinusoidal(n, d, out=table),
             limit=_limit("fill", table),
             torch=t_fn, numpy=np_formula,
             note="limit: filling the same reused buffer"),
        Case("sinusoidal", "add_sinusoidal out=", "8x512x1024",
             lambda: posemb.add_sinusoidal(x, out=y),
             limit=_limit("copy", x, y),
             torch=t_add, numpy=lambda: x + pe512,
             note="makes the table each call; torch/numpy: x + a precomputed table"),
        Case("sinusoidal", "AbsolutePE(x, out=) (cached)", "8x512x1024",
             lambda: absolute(x, out=y),
             limit=_limit("copy", x, y),
             torch=t_add, numpy=lambda: x + pe512,
             note="torch/numpy: x + a precomputed table"),
        Case("sinusoidal", "add_sinusoidal float16 out=", "8x512x1024",
             lambda: posemb.add_sinusoidal(x16, out=y16),
             limit=_limit("copy", x16, y16),
             torch=t_add16, numpy=lambda: x16 + pe16,
             note="rounded once from float64; torch/numpy: float16 x + a float16 table"),
    ]


def _learned_cases(cfg: Config) -> list[Case]:
    torch = _torch()
    b, s, d, m = (2, 2048, 1024, 2048) if cfg.quick else (8, 2048, 1024, 2048)
    rng = np.random.default_rng(3)
    g = rng.standard_normal((b, s, d), dtype=np.float32)
    pos = rng.integers(0, m, (b, s))

    def np_add_at() -> np.ndarray:
        gw = np.zeros((m, d), np.float32)
        np.add.at(gw, pos.reshape(-1), g.reshape(-1, d))
        return gw

    t_fn = None
    if torch is not None:
        gt = torch.from_numpy(g).reshape(-1, d)
        pt = torch.from_numpy(pos.reshape(-1))

        def t_fn() -> Any:
            return torch.zeros(m, d).index_add_(0, pt, gt)

    w = rng.standard_normal((m, d), dtype=np.float32) * 0.02
    y = np.empty_like(g)
    t_fwd = None
    if torch is not None:
        emb = torch.nn.Embedding(m, d)
        with torch.no_grad():
            emb.weight.copy_(torch.from_numpy(w))
        xt = torch.from_numpy(g)

        def t_fwd() -> Any:
            with torch.no_grad():
                return xt + emb(pt.reshape(b, s))

    seq = np.tile(np.arange(s), (b, 1))      # nn.Embedding's usual positions
    g16 = g.astype(np.float16)
    t_seq = t_fn16 = None
    if torch is not None:
        pt_seq = torch.from_numpy(seq.reshape(-1))
        gt16 = torch.from_numpy(g16).reshape(-1, d)

        def t_seq() -> Any:
            return torch.zeros(m, d).index_add_(0, pt_seq, gt)

        def t_fn16() -> Any:
            return torch.zeros(m, d, dtype=torch.float16).index_add_(0, pt_seq, gt16)

    return [
        Case("learned", "learned_pe_backward", f"{b}x{s} tokens, width {d}",
             lambda: posemb.learned_pe_backward(g, pos, num_positions=m),
             limit=_limit("read", g),
             torch=t_fn, compile=cfg.compiled(t_fn), numpy=np_add_at,
             note="random positions; torch: zeros + index_add_; numpy: np.add.at"),
        Case("learned", "learned_pe_backward in order", f"{b}x{s} tokens, width {d}",
             lambda: posemb.learned_pe_backward(g, seq, num_positions=m),
             limit=_limit("read", g),
             torch=t_seq, compile=cfg.compiled(t_seq),
             note="positions arange(seq) in every batch row"),
        Case("learned", "learned_pe_backward float16", f"{b}x{s} tokens, width {d}",
             lambda: posemb.learned_pe_backward(g16, seq, num_positions=m),
             limit=_limit("read", g16), torch=t_fn16,
             note="positions in order; summed in float32; torch: float16 zeros + index_add_"),
        Case("learned", "learned_pe_forward out=", f"{b}x{s}x{d}",
             lambda: posemb.learned_pe_forward(g, w, pos[:, :], out=y),
             limit=_limit("copy", g, y),
             torch=t_fwd, numpy=lambda: g + w[pos],
             note="torch: x + nn.Embedding(positions)"),
    ]


def _hf_t5_bucket(torch: Any, rp: Any, num_buckets: int = 32, max_distance: int = 128) -> Any:
    """HF T5Attention._relative_position_bucket (bidirectional)."""
    import math
    num_buckets //= 2
    buckets = (rp > 0).to(torch.long) * num_buckets
    rp = torch.abs(rp)
    max_exact = num_buckets // 2
    is_small = rp < max_exact
    large = max_exact + (torch.log(rp.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rp, large)


def _bias_cases(cfg: Config) -> list[Case]:
    torch = _torch()
    heads, L = (12, 1024) if cfg.quick else (12, 2048)
    rng = np.random.default_rng(4)
    table = rng.standard_normal((32, heads)).astype(np.float32)
    slopes = posemb.alibi_slopes(heads)
    t_t5 = t_alibi = None
    if torch is not None:
        weight = torch.from_numpy(table)
        slopes_t = torch.from_numpy(slopes.astype(np.float32))

        def t_t5() -> Any:   # HF compute_bias, made contiguous like a model uses it
            ctx = torch.arange(L, dtype=torch.long)[:, None]
            mem = torch.arange(L, dtype=torch.long)[None, :]
            bucket = _hf_t5_bucket(torch, mem - ctx)
            values = torch.nn.functional.embedding(bucket, weight)
            return values.permute([2, 0, 1]).unsqueeze(0).contiguous()

        def t_alibi() -> Any:
            i = torch.arange(L, dtype=torch.float32)[:, None]
            j = torch.arange(L, dtype=torch.float32)[None, :]
            return -slopes_t[:, None, None] * (i - j)

    t_alibi16 = None
    if torch is not None:
        slopes_t16 = torch.from_numpy(slopes.astype(np.float16))

        def t_alibi16() -> Any:
            i = torch.arange(L, dtype=torch.float16)[:, None]
            j = torch.arange(L, dtype=torch.float16)[None, :]
            return -slopes_t16[:, None, None] * (i - j)

    def np_alibi() -> np.ndarray:
        i = np.arange(L, dtype=np.float32)[:, None]
        j = np.arange(L, dtype=np.float32)[None, :]
        return -slopes.astype(np.float32)[:, None, None] * (i - j)

    shape = f"{heads}x{L}x{L}"
    buf = np.empty((heads, L, L), np.float32)
    return [
        Case("bias", "t5_relative_bias", shape, lambda: posemb.t5_relative_bias(table, L, L),
             limit=_limit("fill", shape=(heads, L, L)), torch=t_t5,
             note="torch: HF compute_bias (+ .contiguous())"),
        Case("bias", "alibi_bias", shape, lambda: posemb.alibi_bias(slopes, L, L),
             limit=_limit("fill", shape=(heads, L, L)), torch=t_alibi,
             numpy=np_alibi, note="torch/numpy: -m_h * (i - j)"),
        Case("bias", "alibi_bias float16", shape,
             lambda: posemb.alibi_bias(slopes, L, L, dtype=np.float16),
             limit=_limit("fill", shape=(heads, L, L // 2)), torch=t_alibi16,
             note="rounded once from float64; limit: a float32 fill of the same bytes; "
                  "torch: -m_h * (i - j) in float16"),
        Case("bias", "t5_relative_bias out= (reused)", shape,
             lambda: posemb.t5_relative_bias(table, L, L, out=buf),
             limit=_limit("fill", buf), torch=t_t5,
             note="limit: filling the same reused buffer"),
        Case("bias", "alibi_bias out= (reused)", shape,
             lambda: posemb.alibi_bias(slopes, L, L, out=buf),
             limit=_limit("fill", buf), torch=t_alibi,
             numpy=np_alibi),
    ]


# ---------------------------------------------------------------- torch adapter


def _torch_cases(cfg: Config) -> list[Case]:
    """posemb.torch against the PyTorch formulas (autograd, bfloat16, decode,
    a whole attention step)."""
    torch = _torch()
    if torch is None:
        return []
    import posemb.torch as pt

    rows = []
    quick = cfg.quick
    b, hq, hk, s, d = (1, 32, 8, 1024, 128) if quick else (1, 32, 8, 4096, 128)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(b, hq, s, d, generator=gen, requires_grad=True)
    k = torch.randn(b, hk, s, d, generator=gen, requires_grad=True)
    gq, gk = torch.randn(b, hq, s, d, generator=gen), torch.randn(b, hk, s, d, generator=gen)
    cos, sin = pt.RotaryEmbedding(dim=d, max_position_embeddings=s)(q, torch.arange(s)[None])
    hf = _hf(torch)

    def rope_posemb() -> Any:
        qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin)
        torch.autograd.backward((qe, ke), (gq, gk))

    def rope_torch() -> Any:
        c, s_ = cos.unsqueeze(1), sin.unsqueeze(1)
        torch.autograd.backward((hf(q, c, s_), hf(k, c, s_)), (gq, gk))

    rows.append(Case("torch", "apply_rotary_pos_emb fwd+bwd", f"{b}x{hq}|{hk}x{s}x{d}",
                     rope_posemb, torch=rope_torch, compile=cfg.compiled(rope_torch),
                     note="torch: HF x*cos + rotate_half(x)*sin, autograd"))

    # bfloat16 forward (no gradient needed): computed in float32, rounded once
    qb, kb = q.detach().to(torch.bfloat16), k.detach().to(torch.bfloat16)
    cb, sb = cos.to(torch.bfloat16), sin.to(torch.bfloat16)

    def bf_torch() -> Any:
        c, s_ = cb.unsqueeze(1), sb.unsqueeze(1)
        return hf(qb, c, s_), hf(kb, c, s_)

    rows.append(Case("torch", "apply_rotary_pos_emb bfloat16", f"{b}x{hq}|{hk}x{s}x{d}",
                     lambda: pt.apply_rotary_pos_emb(qb, kb, cb, sb), torch=bf_torch,
                     compile=cfg.compiled(bf_torch), note="no input requires grad"))

    # decode: one token, q and k, under no_grad; limit: posemb's NumPy call
    qd = torch.randn(1, hq, 1, d, generator=gen)
    kd = torch.randn(1, hk, 1, d, generator=gen)
    cd, sd = pt.RotaryEmbedding(dim=d, max_position_embeddings=4096)(qd, torch.tensor([[1000]]))
    qn, kn = qd.numpy(), kd.numpy()
    cn, sn = cd.unsqueeze(1).numpy(), sd.unsqueeze(1).numpy()

    def dec_posemb() -> Any:
        return pt.apply_rotary_pos_emb(qd, kd, cd, sd)

    def dec_torch() -> Any:
        c, s_ = cd.unsqueeze(1), sd.unsqueeze(1)
        return hf(qd, c, s_), hf(kd, c, s_)

    # (torch.no_grad() entered once around the timing, as generate() runs
    # under it: entering and leaving it per call costs ~4 us on its own)
    rows.append(Case("torch", "decode apply_rotary_pos_emb", f"1x{hq}|{hk}x1x{d}",
                     dec_posemb, torch=dec_torch,
                     limit=Limit("posemb numpy", {
                         "numpy": lambda: (posemb.apply_rope(qn, cn, sn),
                                           posemb.apply_rope(kn, cn, sn))}),
                     per_call=True, calls=500, context=torch.no_grad,
                     note="under torch.no_grad(), entered once; "
                          "limit: posemb.apply_rope on the arrays"))

    # decode with autograd: forward and backward of one token's q and k
    qg, kg = qd.clone().requires_grad_(True), kd.clone().requires_grad_(True)

    def dec_grad(rope: Callable[[Any, Any], Any]) -> Fn:
        def run() -> Any:
            a, b_ = rope(qg, kg)
            (a.sum() + b_.sum()).backward()
        return run

    def hf_qk(q_: Any, k_: Any) -> Any:
        c, s_ = cd.unsqueeze(1), sd.unsqueeze(1)
        return hf(q_, c, s_), hf(k_, c, s_)

    rows.append(Case("torch", "decode apply_rotary_pos_emb fwd+bwd", f"1x{hq}|{hk}x1x{d}",
                     dec_grad(lambda q_, k_: pt.apply_rotary_pos_emb(q_, k_, cd, sd)),
                     torch=dec_grad(hf_qk), per_call=True, calls=200,
                     note="q and k require grad; torch: HF's formula, autograd"))

    bs, seq, width, m = (4, 1024, 768, 2048) if quick else (8, 2048, 768, 2048)
    pe = pt.LearnedPositionalEmbedding(m, width)
    emb = torch.nn.Embedding(m, width)
    with torch.no_grad():
        emb.weight.copy_(pe.weight)
    x = torch.randn(bs, seq, width, generator=gen, requires_grad=True)
    gy = torch.randn(bs, seq, width, generator=gen)
    pos = torch.arange(seq)

    rows.append(Case("torch", "LearnedPositionalEmbedding fwd+bwd", f"{bs}x{seq}x{width}",
                     lambda: pe(x).backward(gy),
                     torch=lambda: (x + emb(pos)).backward(gy),
                     note="torch: x + nn.Embedding(positions)"))

    heads, L = (12, 512) if quick else (12, 1024)
    table = torch.nn.Parameter(torch.randn(32, heads, generator=gen))
    gb = torch.randn(heads, L, L, generator=gen)

    def t5_torch() -> Any:
        ctx = torch.arange(L, dtype=torch.long)[:, None]
        mem = torch.arange(L, dtype=torch.long)[None, :]
        bucket = _hf_t5_bucket(torch, mem - ctx)
        torch.nn.functional.embedding(bucket, table).permute([2, 0, 1]).backward(gb)

    rows.append(Case("torch", "t5_relative_bias fwd+bwd", f"{heads}x{L}x{L}",
                     lambda: pt.t5_relative_bias(table, L, L).backward(gb), torch=t5_torch,
                     note="torch: HF compute_bias, autograd to the table"))
    rows.append(_attention_step(cfg, torch, pt))
    return rows


def _attention_step(cfg: Config, torch: Any, pt: Any) -> Case:
    """A small Llama-style attention block, forward + backward: q/k/v
    projections, HF's view().transpose(1, 2), RoPE, causal grouped-query
    scaled_dot_product_attention, output projection.  posemb: RoPE by
    posemb.torch.apply_rotary_pos_emb; torch: HF's formula; all else alike."""
    b, s, hidden, nq, nkv = (1, 256, 512, 8, 2) if cfg.quick else (1, 1024, 1024, 16, 4)
    hd = hidden // nq
    gen = torch.Generator().manual_seed(7)
    w = [torch.nn.Parameter(torch.randn(o, hidden, generator=gen) * hidden ** -0.5)
         for o in (nq * hd, nkv * hd, nkv * hd, hidden)]
    wo = torch.nn.Parameter(torch.randn(hidden, nq * hd, generator=gen) * hidden ** -0.5)
    x = torch.randn(b, s, hidden, generator=gen, requires_grad=True)
    gy = torch.randn(b, s, hidden, generator=gen)
    cos, sin = pt.RotaryEmbedding(dim=hd, max_position_embeddings=s)(x, torch.arange(s)[None])
    hf = _hf(torch)
    F = torch.nn.functional

    def step(rope: Callable[[Any, Any], Any]) -> Fn:
        def run() -> Any:
            q = F.linear(x, w[0]).view(b, s, nq, hd).transpose(1, 2)
            k = F.linear(x, w[1]).view(b, s, nkv, hd).transpose(1, 2)
            v = F.linear(x, w[2]).view(b, s, nkv, hd).transpose(1, 2)
            q, k = rope(q, k)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            F.linear(o.transpose(1, 2).reshape(b, s, nq * hd), wo).backward(gy)
        return run

    def hf_rope(q: Any, k: Any) -> Any:
        c, s_ = cos.unsqueeze(1), sin.unsqueeze(1)
        return hf(q, c, s_), hf(k, c, s_)

    return Case("torch", "Llama attention fwd+bwd (end to end)",
                f"{b}x{s}x{hidden}, {nq}|{nkv} heads",
                step(lambda q, k: pt.apply_rotary_pos_emb(q, k, cos, sin)), torch=step(hf_rope),
                note="whole step; only RoPE differs")


FAMILIES: dict[str, Callable[[Config], list[Case]]] = {
    "rope": _rope_cases,
    "sinusoidal": _sinusoidal_cases,
    "learned": _learned_cases,
    "bias": _bias_cases,
    "torch": _torch_cases,
}


def _thread_scaling(repeat: int) -> dict[str, Any]:
    """In-place RoPE with 1 thread vs all threads, over sizes from 4 KiB to
    4x the last-level cache: the pool must never make a call slower."""
    cfg = _cfg()
    old = posemb.get_num_threads()
    n = max(old, 2)
    cos, sin = posemb.rope_cos_sin(np.arange(cfg.big_seq(32, 128, 4, 1) if not cfg.quick
                                             else 2048), 128)
    sizes = []
    seq = 1
    big = 1 if cfg.quick else 4
    while True:
        heads = 8 if seq == 1 else 32
        sizes.append((heads, seq))
        if heads * seq * 128 * 4 >= big * cfg.llc or seq >= cos.shape[0]:
            break
        seq = min(seq * 4, cos.shape[0])
    steps: list[dict[str, Any]] = []
    try:
        for heads, seq in sizes:
            x = np.random.default_rng(1).standard_normal((1, heads, seq, 128), dtype=np.float32)
            c, s = cos[:seq], sin[:seq]

            # each sample a loop of calls moving up to 64 MiB (at least
            # one call, at most 5000), the thread count set once per
            # sample: samples of a fraction of a millisecond (16-64 calls
            # of 64-256 KiB) read 0.69x and 0.89x for calls that run the
            # same instructions with 1 and 2 threads set (serial:
            # callgrind, (1, 32, 16, 128), equal counts), Zen 3 EPYC VM
            calls = max(1, min(5000, (1 << 26) // x.nbytes))

            def with_threads(k: int, x: Any = x, c: Any = c, s: Any = s,
                             calls: int = calls) -> Fn:
                def fn() -> Any:
                    posemb.set_num_threads(k)
                    for _ in range(calls):
                        posemb.apply_rope(x, c, s, out=x)
                return fn
            reps = max(3, repeat)
            t1, tn = [t / calls for t in median_times([with_threads(1), with_threads(n)],
                                                      reps, rounds=reps)]
            steps.append({"shape": f"1x{heads}x{seq}x128", "bytes": x.nbytes,
                          "t1_s": float(t1), "tn_s": float(tn), "speedup": t1 / tn})
        n = posemb.set_num_threads(n)
    finally:
        posemb.set_num_threads(old)
    last = steps[-1]
    t1_last, tn_last = float(last["t1_s"]), float(last["tn_s"])
    return {"shape": last["shape"], "t1_ms": t1_last * 1e3, "threads": n,
            "tn_ms": tn_last * 1e3, "speedup": t1_last / tn_last, "sizes": steps}


def _have_compiler() -> bool:
    return bool(shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
                or shutil.which("clang++"))


def run(families: list[str], quick: bool, repeat: int, *, compile: bool | None = None,
        ort: bool | None = None) -> dict[str, Any]:
    """Time every case of `families`; `compile`/`ort` add the torch.compile
    and ONNX Runtime columns (default: ONNX Runtime when installed;
    torch.compile when a C++ compiler is present and not `quick`)."""
    global CFG
    torch = _torch()
    threads = posemb.get_num_threads()
    if torch is not None:
        torch.set_num_threads(threads)
    llc, llc_src = llc_bytes()
    if compile is None:
        compile = not quick and _have_compiler()
    if ort is None:
        ort = _bench_ort.available()
    stream = _bench_stream.load()
    CFG = Config(quick, threads, llc, bool(compile and torch is not None), bool(ort), stream)
    rows = []
    for fam in families:
        for case in FAMILIES[fam](CFG):
            # tiny calls: as many samples as the large cases, each in its
            # own round (they had a third as many, 5 of 20 calls for the
            # small cases, whose ratio read 1.19x-1.71x in different runs)
            rounds = repeat if case.per_call else 5
            calls = case.calls if case.per_call else 1
            row: dict[str, Any] = {"family": case.family, "kernel": case.name,
                                   "shape": case.shape, "note": case.note}
            fns: list[tuple[str, Fn]] = [("posemb", case.posemb)]
            lim = case.limit.fns if case.limit else {}
            fns += [(f"limit:{k}", f) for k, f in lim.items()]
            fns += [(c, getattr(case, c)) for c in COLUMNS if getattr(case, c) is not None]
            settle = [_bench_ort.SPIN_SETTLE_S if k == "ort" and threads > 1 else 0.0
                      for k, _ in fns]
            with case.context() if case.context else contextlib.nullcontext():
                timed = dict(zip([k for k, _ in fns],
                                 median_times([f for _, f in fns], repeat, calls, rounds,
                                              settle_s=settle)))
            row["posemb_s"] = timed["posemb"]
            if lim:
                best = min(lim, key=lambda k: timed[f"limit:{k}"])
                row["limit_s"] = timed[f"limit:{best}"]
                row["limit_variant"] = best
                row["limit_variants_s"] = {k: timed[f"limit:{k}"] for k in lim}
            else:
                row["limit_s"] = None
            row["limit_kind"] = case.limit.kind if case.limit else ""
            row["posemb_over_limit"] = (row["posemb_s"] / row["limit_s"]
                                        if row["limit_s"] else None)
            for c in COLUMNS:
                row[f"{c}_s"] = timed.get(c)
                if c == "contig":
                    row["posemb_over_contig"] = (row["posemb_s"] / row["contig_s"]
                                                 if row["contig_s"] else None)
                else:
                    row[f"{c}_over_posemb"] = (row[f"{c}_s"] / row["posemb_s"]
                                               if row[f"{c}_s"] else None)
            row.update(case.extra)
            rows.append(row)
    result = {
        "posemb": posemb.__version__,
        "numpy": np.__version__,
        "torch": getattr(torch, "__version__", None),
        "onnxruntime": _ort_version() if ort else None,
        "threads": threads,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "llc_bytes": llc,
        "llc_source": llc_src,
        "stream_level": stream.level if stream else None,
        "compile": CFG.compile,
        "repeat": repeat,
        "rows": rows,
    }
    if "rope" in families:
        result["thread_scaling"] = _thread_scaling(max(3, repeat // 2))
    return result


def _ort_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


def _fmt_time(s: float | None, per_call: bool) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.2f}us" if per_call or s < 1e-4 else f"{s * 1e3:.3f}ms"


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def format_table(result: dict[str, Any]) -> str:
    llc = result.get("llc_bytes") or 0
    lines = [f"posemb {result['posemb']} bench: numpy {result['numpy']}, "
             f"torch {result['torch'] or 'not installed'}"
             f"{' (+compile)' if result.get('compile') else ''}, "
             f"onnxruntime {result.get('onnxruntime') or '-'}, {result['threads']} thread(s), "
             f"median of {result['repeat']} runs in interleaved rounds",
             f"last-level cache: {llc / 2**20:.1f} MiB ({result.get('llc_source')}); "
             f"limit: the fastest of NumPy and C passes ({result.get('stream_level') or 'none'})"]
    head = (f"{'kernel':36s} {'shape':22s} {'posemb':>10s} {'limit':>19s} {'p/limit':>8s}"
            + "".join(f" {t:>10s} {('p/' if c == 'contig' else '/p'):>6s}"
                      for c, t in COLUMNS.items()))
    fam = None
    for r in result["rows"]:
        if r["family"] != fam:
            fam = r["family"]
            lines += ["", f"[{fam}]", head]
        per = r["posemb_s"] < 1e-4
        lim = (f"{_fmt_time(r['limit_s'], per)} {r['limit_kind']}" if r["limit_s"] else "-")
        cols = ""
        for c in COLUMNS:
            ratio = r["posemb_over_contig"] if c == "contig" else r[f"{c}_over_posemb"]
            cols += f" {_fmt_time(r[f'{c}_s'], per):>10s} {_fmt_ratio(ratio):>6s}"
        lines.append(
            f"{r['kernel']:36s} {r['shape']:22s} {_fmt_time(r['posemb_s'], per):>10s} "
            f"{lim:>19s} {_fmt_ratio(r['posemb_over_limit']):>8s}{cols}"
            + (f"  ({r['note']})" if r["note"] else ""))
    lines += ["", "x/p: that column's time over posemb's (above 1: posemb is faster); "
                  "p/contig: posemb here over posemb on the contiguous layout"]
    sc = result.get("thread_scaling")
    if sc:
        lines += ["", f"thread scaling, in-place RoPE, 1 vs {sc['threads']} threads:"]
        for st in sc.get("sizes", []):
            lines.append(f"  {st['shape']:18s} {st['bytes'] / 1024:>10.0f} KiB  "
                         f"1 thread {_fmt_time(st['t1_s'], False):>10s}  "
                         f"{sc['threads']} threads {_fmt_time(st['tn_s'], False):>10s}  "
                         f"speedup {st['speedup']:.2f}x")
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (else argparse's usage error, no traceback)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {v}")
    return v


def bench(families: str | Sequence[str] | None = None, *, quick: bool = False,
          repeat: int = 15, threads: int | None = None, show: bool = True,
          compile: bool | None = None, ort: bool | None = None) -> dict[str, Any]:
    """Time posemb against the PyTorch formula, the NumPy formula and this
    machine's memory limit: what ``python -m posemb bench`` prints.

    Parameters
    ----------
    families : str or list of str, optional
        Kernel families among ``"bias"``, ``"learned"``, ``"rope"``,
        ``"sinusoidal"``, ``"torch"`` (default: all).
    quick : bool
        Smaller shapes and fewer cases (seconds per family, not minutes).
    repeat : int
        Runs per median, at least 3.
    threads : int, optional
        posemb's (and torch's) thread count for the run; restored afterwards.
    show : bool
        Print the table.
    compile, ort : bool, optional
        Add the ``torch.compile`` column (default: when a C++ compiler is
        present and not ``quick``) and ONNX Runtime's (default: when
        ``onnxruntime`` is installed).

    Returns
    -------
    dict
        Versions, thread count, the last-level cache size the large cases
        were sized from (``llc_bytes``) and one row per kernel: ``posemb_s``,
        ``limit_s``, ``torch_s``, ``compile_s``, ``ort_s``, ``numpy_s``,
        ``contig_s`` (median seconds, None where not measured) and their
        ratios.

    Examples
    --------
    >>> import posemb
    >>> result = posemb.bench("rope", quick=True, repeat=3)   # doctest: +SKIP
    posemb 0.1.0 bench: numpy 2.3.4, torch 2.13.0+cpu, 2 thread(s), ...
    >>> [r["kernel"] for r in result["rows"]][:2]             # doctest: +SKIP
    ['apply_rope in place', 'apply_rope out=']
    """
    if families is None:
        fams = list(FAMILIES)
    else:
        fams = [families] if isinstance(families, str) else list(families)
        unknown = [f for f in fams if f not in FAMILIES]
        if unknown or not fams:
            raise ValueError(f"families must be among {sorted(FAMILIES)}, got {families!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int):
        raise TypeError(f"repeat must be an int, got {type(repeat).__name__}")
    old = posemb.get_num_threads()
    try:
        if threads is not None:
            posemb.set_num_threads(threads)
        result = run(fams, quick, max(repeat, 3), compile=compile, ort=ort)
    finally:
        posemb.set_num_threads(old)
    if show:
        print(format_table(result))
    return result


def _plain(doc: str) -> str:
    """A docstring as plain text for ``--help``: no ``literal`` or *emphasis* marks."""
    return re.sub(r"\*([^*\s][^*]*)\*", r"\1", doc.replace("``", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posemb bench",
                                     description=_plain(__doc__ or ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="only these kernel families (repeatable; default all)")
    parser.add_argument("--repeat", type=_positive_int, default=15,
                        help="runs per median (default 15)")
    parser.add_argument("--quick", action="store_true",
                        help="smaller shapes (not sized from the cache), no torch.compile")
    parser.add_argument("--threads", type=_positive_int,
                        help="posemb (and torch) thread count, >= 1")
    parser.add_argument("--compile", dest="compile", action="store_true", default=None,
                        help="torch.compile columns (default: when a C++ compiler is "
                             "present and not --quick)")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--no-ort", dest="ort", action="store_false", default=None,
                        help="leave out ONNX Runtime's column")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    result = bench(args.family, quick=args.quick, repeat=args.repeat, threads=args.threads,
                   show=not args.json, compile=args.compile, ort=args.ort)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0
