"""``python -m posemb bench``: posemb against the PyTorch formula, the NumPy
formula and this machine's limit, measured side by side in one run.

The *limit* is the most trivial streaming pass over the same bytes on the same
thread pool (an in-place scale for in-place kernels, a copy for out-of-place
ones, a fill for generated tables), so ``posemb / limit`` says how close a
kernel is to the memory bandwidth, whatever the machine.  Every time is the
median of repeated runs; PyTorch runs with the same thread count.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import posemb

try:
    from posemb import _stream
except ImportError:      # a build without the benchmark extension
    _stream = None

Fn = Callable[[], Any]


def _limit(kind: str, a: np.ndarray, b: np.ndarray | None = None) -> None:
    """The bandwidth limit on posemb's thread count: a streaming pass
    ("scale", "fill", "copy" into b, "read") in the posemb._stream
    extension, or NumPy's single-threaded equivalent without it."""
    if _stream is not None:
        args = (kind, posemb.get_num_threads(), a) + (() if b is None else (b,))
        _stream.stream(*args)
    elif kind == "scale":
        np.multiply(a, 1, out=a)
    elif kind == "fill":
        a.fill(0)
    elif kind == "copy":
        np.copyto(b, a)
    else:
        a.sum()


@dataclass
class Case:
    family: str
    name: str
    shape: str
    posemb: Fn
    limit: Fn | None = None
    limit_kind: str = ""
    torch: Fn | None = None
    numpy: Fn | None = None
    per_call: bool = False           # tiny call: time a loop, report microseconds
    calls: int = 1                   # calls per timed sample when per_call
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def median_times(fns: list[Fn], repeat: int, calls: int = 1, rounds: int = 5,
                 warm_s: float = 0.03) -> list[float]:
    """Median seconds per call of each of `fns`, over `repeat` samples of
    `calls` calls taken in `rounds` interleaved rounds.  In every round each
    function first runs for `warm_s` seconds (at least once), then takes
    that round's samples: a virtual CPU that idled, or ran something else,
    is up to 4x slower for its first milliseconds (measured here), and a
    warm function sees its own data in cache as a loop of it would leave
    it.  A machine whose speed drifts during the run shifts every
    function's samples alike, so the ratios of the medians hold."""
    rounds = max(1, min(rounds, repeat))
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        n = repeat // rounds + (1 if r < repeat % rounds else 0)
        for fn, out in zip(fns, samples):
            t0 = time.perf_counter()
            fn()
            while time.perf_counter() - t0 < warm_s:
                fn()
            for _ in range(n):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                out.append((time.perf_counter() - t0) / calls)
    return [float(np.median(x)) for x in samples]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


# ---------------------------------------------------------------- RoPE


def _rope_cases(quick: bool) -> list[Case]:
    torch = _torch()
    cases = []
    shapes = [(1, 32, 4096, 128), (8, 32, 512, 128)]
    if quick:
        shapes = [(1, 32, 2048, 128)]
    rng = np.random.default_rng(0)
    for shape in shapes:
        seq, dim = shape[2], shape[3]
        x = rng.standard_normal(shape, dtype=np.float32)
        xi = x.copy()
        y = np.empty_like(x)
        cos, sin = posemb.rope_cos_sin(np.arange(seq), dim)
        h = dim // 2

        def np_formula(x=x, cos=cos, sin=sin, h=h):
            return x * cos + np.concatenate((-x[..., h:], x[..., :h]), -1) * sin

        t_fn = None
        if torch is not None:
            xt, ct, st = torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin)

            def t_fn(xt=xt, ct=ct, st=st, h=h):
                with torch.no_grad():
                    return xt * ct + torch.cat((-xt[..., h:], xt[..., :h]), -1) * st

        label = "x".join(map(str, shape))
        cases.append(Case("rope", "apply_rope in place", label,
                          lambda xi=xi, c=cos, s=sin: posemb.apply_rope(xi, c, s, out=xi),  # type: ignore[misc]
                          limit=lambda xi=xi: _limit("scale", xi), limit_kind="scale",  # type: ignore[misc]
                          torch=t_fn, numpy=np_formula))
        cases.append(Case("rope", "apply_rope out=", label,
                          lambda x=x, c=cos, s=sin, y=y: posemb.apply_rope(x, c, s, out=y),  # type: ignore[misc]
                          limit=lambda x=x, y=y: _limit("copy", x, y), limit_kind="copy",  # type: ignore[misc]
                          torch=t_fn, numpy=np_formula))
        cases.append(Case("rope", "apply_rope (new array)", label,
                          lambda x=x, c=cos, s=sin: posemb.apply_rope(x, c, s),  # type: ignore[misc]
                          limit=_fresh_copy(x), limit_kind="copy",
                          torch=t_fn, numpy=np_formula,
                          note="limit: a copy into a new array"))
    # decode step: one new token per head, table row from the cache
    q = rng.standard_normal((1, 32, 1, 128), dtype=np.float32)
    k = rng.standard_normal((1, 8, 1, 128), dtype=np.float32)
    rope = posemb.RoPE(128, 4096)
    cr, sr = rope.cos_sin(offset=1000, seq_len=1)
    t_dec = None
    if torch is not None:
        qt, kt = torch.from_numpy(q), torch.from_numpy(k)
        crt, srt = torch.from_numpy(np.array(cr)), torch.from_numpy(np.array(sr))

        def rh(v):
            return torch.cat((-v[..., 64:], v[..., :64]), -1)

        def t_dec(qt=qt, kt=kt, c=crt, s=srt):
            with torch.no_grad():
                return qt * c + rh(qt) * s, kt * c + rh(kt) * s

    cases.append(Case("rope", "decode step apply_rope(q)", "1x32x1x128",
                      lambda: posemb.apply_rope(q, cr, sr), per_call=True, calls=2000,
                      note="torch column: the formula on q and k"))
    cases.append(Case("rope", "decode step RoPE(q, offset=)", "1x32x1x128",
                      lambda: rope(q, offset=1000), per_call=True, calls=2000,
                      note="the cached module: table rows looked up per call"))
    cases.append(Case("rope", "decode step q and k", "1x32x1x128 + 1x8x1x128",
                      lambda: (posemb.apply_rope(q, cr, sr), posemb.apply_rope(k, cr, sr)),
                      torch=t_dec, per_call=True, calls=1000))
    return cases


# ---------------------------------------------------------------- tables


def _fresh_copy(x: np.ndarray) -> Fn:
    """The limit for an out-of-place kernel returning a new array: a new
    array, copied into on the pool."""
    def copy() -> Any:
        out = np.empty_like(x)
        _limit("copy", x, out)
        return out
    return copy


def _fresh_fill(shape: tuple[int, ...]) -> Fn:
    """The limit for a generated table: a new array, filled on the pool."""
    def fill() -> Any:
        out = np.empty(shape, np.float32)
        _limit("fill", out)
        return out
    return fill


def _sinusoidal_cases(quick: bool) -> list[Case]:
    torch = _torch()
    n, d = (2048, 1024) if quick else (8192, 1024)

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

    table = np.empty((n, d), np.float32)
    return [
        Case("sinusoidal", "sinusoidal table (float64-exact)", f"{n}x{d}",
             lambda: posemb.sinusoidal(n, d), limit=_fresh_fill((n, d)), limit_kind="fill",
             torch=t_fn, numpy=np_formula,
             note="torch/numpy: the seed's formula in float32/float64"),
        Case("sinusoidal", "sinusoidal(out=) (reused)", f"{n}x{d}",
             lambda: posemb.sinusoidal(n, d, out=table),
             limit=lambda: _limit("fill", table), limit_kind="fill",
             torch=t_fn, numpy=np_formula,
             note="limit: filling the same reused buffer"),
        Case("sinusoidal", "add_sinusoidal out=", "8x512x1024",
             lambda: posemb.add_sinusoidal(x, out=y),
             limit=lambda: _limit("copy", x, y), limit_kind="copy",
             torch=t_add, numpy=lambda: x + pe512,
             note="makes the table each call; torch/numpy: x + a precomputed table"),
        Case("sinusoidal", "AbsolutePE(x, out=) (cached)", "8x512x1024",
             lambda: absolute(x, out=y),
             limit=lambda: _limit("copy", x, y), limit_kind="copy",
             torch=t_add, numpy=lambda: x + pe512,
             note="torch/numpy: x + a precomputed table"),
    ]


def _learned_cases(quick: bool) -> list[Case]:
    torch = _torch()
    b, s, d, m = (2, 2048, 1024, 2048) if quick else (8, 2048, 1024, 2048)
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

    return [
        Case("learned", "learned_pe_backward", f"{b}x{s} tokens, width {d}",
             lambda: posemb.learned_pe_backward(g, pos, num_positions=m),
             limit=lambda: _limit("read", g), limit_kind="read",
             torch=t_fn, numpy=np_add_at,
             note="torch: zeros + index_add_; numpy: np.add.at"),
        Case("learned", "learned_pe_forward out=", f"{b}x{s}x{d}",
             lambda: posemb.learned_pe_forward(g, w, pos[:, :], out=y),
             limit=lambda: _limit("copy", g, y), limit_kind="copy",
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


def _bias_cases(quick: bool) -> list[Case]:
    torch = _torch()
    heads, L = (12, 1024) if quick else (12, 2048)
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

    def np_alibi() -> np.ndarray:
        i = np.arange(L, dtype=np.float32)[:, None]
        j = np.arange(L, dtype=np.float32)[None, :]
        return -slopes.astype(np.float32)[:, None, None] * (i - j)

    shape = f"{heads}x{L}x{L}"
    buf = np.empty((heads, L, L), np.float32)
    return [
        Case("bias", "t5_relative_bias", shape, lambda: posemb.t5_relative_bias(table, L, L),
             limit=_fresh_fill((heads, L, L)), limit_kind="fill", torch=t_t5,
             note="torch: HF compute_bias (+ .contiguous())"),
        Case("bias", "alibi_bias", shape, lambda: posemb.alibi_bias(slopes, L, L),
             limit=_fresh_fill((heads, L, L)), limit_kind="fill", torch=t_alibi,
             numpy=np_alibi, note="torch/numpy: -m_h * (i - j)"),
        Case("bias", "t5_relative_bias out= (reused)", shape,
             lambda: posemb.t5_relative_bias(table, L, L, out=buf),
             limit=lambda: _limit("fill", buf), limit_kind="fill", torch=t_t5,
             note="limit: filling the same reused buffer"),
        Case("bias", "alibi_bias out= (reused)", shape,
             lambda: posemb.alibi_bias(slopes, L, L, out=buf),
             limit=lambda: _limit("fill", buf), limit_kind="fill", torch=t_alibi,
             numpy=np_alibi),
    ]


# ---------------------------------------------------------------- torch adapter


def _torch_cases(quick: bool) -> list[Case]:
    """posemb.torch forward + backward against the PyTorch formulas' autograd."""
    torch = _torch()
    if torch is None:
        return []
    import posemb.torch as pt

    rows = []
    b, hq, hk, s, d = (1, 32, 8, 1024, 128) if quick else (1, 32, 8, 4096, 128)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(b, hq, s, d, generator=gen, requires_grad=True)
    k = torch.randn(b, hk, s, d, generator=gen, requires_grad=True)
    gq, gk = torch.randn(b, hq, s, d, generator=gen), torch.randn(b, hk, s, d, generator=gen)
    cos, sin = pt.RotaryEmbedding(dim=d, max_position_embeddings=s)(q, torch.arange(s)[None])

    def rh(x: Any) -> Any:
        return torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1)

    def rope_posemb() -> Any:
        qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin)
        torch.autograd.backward((qe, ke), (gq, gk))

    def rope_torch() -> Any:
        c, s_ = cos.unsqueeze(1), sin.unsqueeze(1)
        torch.autograd.backward((q * c + rh(q) * s_, k * c + rh(k) * s_), (gq, gk))

    rows.append(Case("torch", "apply_rotary_pos_emb fwd+bwd", f"{b}x{hq}|{hk}x{s}x{d}",
                     rope_posemb, torch=rope_torch,
                     note="torch: HF x*cos + rotate_half(x)*sin, autograd"))

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
    return rows


FAMILIES: dict[str, Callable[[bool], list[Case]]] = {
    "rope": _rope_cases,
    "sinusoidal": _sinusoidal_cases,
    "learned": _learned_cases,
    "bias": _bias_cases,
    "torch": _torch_cases,
}


def _thread_scaling(repeat: int) -> dict[str, Any]:
    """Large in-place RoPE with 1 thread vs all threads."""
    x = np.random.default_rng(1).standard_normal((1, 32, 4096, 128), dtype=np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(4096), 128)
    old = posemb.get_num_threads()
    n = max(old, 2)

    def with_threads(k: int) -> Fn:
        def fn() -> Any:
            posemb.set_num_threads(k)
            return posemb.apply_rope(x, cos, sin, out=x)
        return fn

    try:
        t1, tn = median_times([with_threads(1), with_threads(n)], repeat)
        n = posemb.set_num_threads(n)
    finally:
        posemb.set_num_threads(old)
    return {"shape": "1x32x4096x128", "t1_ms": t1 * 1e3, "threads": n,
            "tn_ms": tn * 1e3, "speedup": t1 / tn}


def run(families: list[str], quick: bool, repeat: int) -> dict[str, Any]:
    torch = _torch()
    threads = posemb.get_num_threads()
    if torch is not None:
        torch.set_num_threads(threads)
    rows = []
    for fam in families:
        for case in FAMILIES[fam](quick):
            reps = repeat if not case.per_call else max(3, repeat // 3)
            calls = case.calls if case.per_call else 1
            row: dict[str, Any] = {"family": case.family, "kernel": case.name,
                                   "shape": case.shape, "note": case.note}
            keys = ["posemb_s", "limit_s", "torch_s", "numpy_s"]
            fns = [case.posemb, case.limit, case.torch, case.numpy]
            timed = median_times([f for f in fns if f is not None], reps, calls)
            for key, fn in zip(keys, fns):
                row[key] = timed.pop(0) if fn is not None else None
            row["limit_kind"] = case.limit_kind
            row["posemb_over_limit"] = (row["posemb_s"] / row["limit_s"]
                                        if row["limit_s"] else None)
            row["torch_over_posemb"] = (row["torch_s"] / row["posemb_s"]
                                        if row["torch_s"] else None)
            row["numpy_over_posemb"] = (row["numpy_s"] / row["posemb_s"]
                                        if row["numpy_s"] else None)
            row.update(case.extra)
            rows.append(row)
    result = {
        "posemb": posemb.__version__,
        "numpy": np.__version__,
        "torch": getattr(torch, "__version__", None),
        "threads": threads,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "repeat": repeat,
        "rows": rows,
    }
    if "rope" in families:
        result["thread_scaling"] = _thread_scaling(max(3, repeat // 2))
    return result


def _fmt_time(s: float | None, per_call: bool) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.2f}us" if per_call or s < 1e-4 else f"{s * 1e3:.3f}ms"


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def format_table(result: dict[str, Any]) -> str:
    lines = [f"posemb {result['posemb']} bench: numpy {result['numpy']}, "
             f"torch {result['torch'] or 'not installed'}, {result['threads']} thread(s), "
             f"median of {result['repeat']} runs in interleaved rounds"]
    head = (f"{'kernel':30s} {'shape':24s} {'posemb':>10s} {'limit':>16s} "
            f"{'posemb/limit':>12s} {'torch':>10s} {'torch/posemb':>12s} "
            f"{'numpy':>10s} {'numpy/posemb':>12s}")
    fam = None
    for r in result["rows"]:
        if r["family"] != fam:
            fam = r["family"]
            lines += ["", f"[{fam}]", head]
        per = r["posemb_s"] < 1e-4
        lim = (f"{_fmt_time(r['limit_s'], per)} {r['limit_kind']}" if r["limit_s"] else "-")
        lines.append(
            f"{r['kernel']:30s} {r['shape']:24s} {_fmt_time(r['posemb_s'], per):>10s} "
            f"{lim:>16s} {_fmt_ratio(r['posemb_over_limit']):>12s} "
            f"{_fmt_time(r['torch_s'], per):>10s} {_fmt_ratio(r['torch_over_posemb']):>12s} "
            f"{_fmt_time(r['numpy_s'], per):>10s} {_fmt_ratio(r['numpy_over_posemb']):>12s}"
            + (f"  ({r['note']})" if r["note"] else ""))
    sc = result.get("thread_scaling")
    if sc:
        lines += ["", f"thread scaling, in-place RoPE {sc['shape']}: 1 thread "
                      f"{sc['t1_ms']:.3f}ms, {sc['threads']} threads {sc['tn_ms']:.3f}ms, "
                      f"speedup {sc['speedup']:.2f}x"]
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
          repeat: int = 15, threads: int | None = None, show: bool = True) -> dict[str, Any]:
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

    Returns
    -------
    dict
        Versions, thread count and one row per kernel: ``posemb_s``,
        ``limit_s``, ``torch_s``, ``numpy_s`` (median seconds, None where not
        measured) and their ratios.

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
        result = run(fams, quick, max(repeat, 3))
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
                                     description=_plain(__doc__ or ""))
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="only these kernel families (repeatable; default all)")
    parser.add_argument("--repeat", type=_positive_int, default=15,
                        help="runs per median (default 15)")
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer cases")
    parser.add_argument("--threads", type=_positive_int,
                        help="posemb (and torch) thread count, >= 1")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    result = bench(args.family, quick=args.quick, repeat=args.repeat, threads=args.threads,
                   show=not args.json)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0
