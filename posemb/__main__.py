"""``python -m posemb``: check posemb's RoPE against the PyTorch-style formula
on random data, then print a short speed comparison.

Runs on built-in defaults; ``--help`` lists the few knobs.
``python -m posemb bench [--json] ...`` runs the full benchmark table.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import numpy as np

import posemb


def _median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm up (page faults, caches, lazy tables)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _numpy_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The PyTorch/HF formula written with NumPy: x*cos + rotate_half(x)*sin."""
    h = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[..., h:], x[..., :h]), axis=-1) * sin


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _size(nbytes: int) -> str:
    """A byte count in the largest binary unit that keeps it >= 1 (1 decimal)."""
    for unit in ("GiB", "MiB", "KiB"):
        scale = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}[unit]
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return _plural(nbytes, "byte")


_NO_TORCH = "PyTorch is not installed: skipped"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def check(shape: tuple[int, ...], seed: int) -> bool:
    """Compare posemb with the reference formula; print and return the verdict."""
    rng = np.random.default_rng(seed)
    batch_heads, seq, dim = shape[:-2], shape[-2], shape[-1]
    x = rng.standard_normal(shape, dtype=np.float32)
    rope = posemb.RoPE(dim, seq)
    y = rope(x)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), dim)
    torch = _torch()
    if torch is not None:
        xt = torch.from_numpy(x)
        h = dim // 2
        rh = torch.cat((-xt[..., h:], xt[..., :h]), dim=-1)
        ref = (xt * torch.from_numpy(cos) + rh * torch.from_numpy(sin)).numpy()
        against = f"PyTorch {torch.__version__} HF rotate_half formula"
    else:
        ref = _numpy_rope(x, cos, sin)
        against = "NumPy transcription of the HF rotate_half formula"
    bitwise = bool(np.array_equal(y, ref))
    err = float(np.abs(y.astype(np.float64) - ref).max()) if y.size else 0.0
    # float64 truth of the whole pipeline (angles, tables, rotation)
    ang = np.arange(seq, dtype=np.float64)[:, None] * posemb.rope_inv_freq(dim)
    c64 = np.concatenate([np.cos(ang)] * 2, -1)
    s64 = np.concatenate([np.sin(ang)] * 2, -1)
    truth = _numpy_rope(x.astype(np.float64), c64, s64)
    err64 = float(np.abs(y - truth).max()) if y.size else 0.0
    inv = np.linalg.norm(rope.backward(y) - x) / max(np.linalg.norm(x), 1e-30)
    ok = bitwise and err64 < 1e-5 and inv < 1e-6
    vectors = int(np.prod(batch_heads))
    print(f"posemb {posemb.__version__} RoPE check on random float32 x of shape {shape} "
          f"({_plural(vectors, 'vector')} per position, {_plural(seq, 'position')}, "
          f"head size {dim})")
    if torch is None:
        print(f"  against the PyTorch formula: {_NO_TORCH} (pip install torch; "
              "see the README for the CPU build)")
    print(f"  against {against}: {'bit-identical' if bitwise else f'max |diff| {err:.3g}'}")
    print(f"  against float64 truth: max |err| {err64:.3g}")
    print(f"  backward(forward(x)) == x: relative error {inv:.3g}")
    print(f"  verdict: {'OK' if ok else 'MISMATCH'}")
    return ok


def speed(shape: tuple[int, ...], repeat: int) -> None:
    """Median time of one RoPE application: posemb vs NumPy vs PyTorch."""
    rng = np.random.default_rng(0)
    seq, dim = shape[-2], shape[-1]
    x = rng.standard_normal(shape, dtype=np.float32)
    out = np.empty_like(x)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), dim)
    rows = []
    t_pe = _median_seconds(lambda: posemb.apply_rope(x, cos, sin, out=out), repeat)
    rows.append(("posemb.apply_rope (out=)", t_pe))
    xi = x.copy()
    rows.append(("posemb.apply_rope (in place)",
                 _median_seconds(lambda: posemb.apply_rope(xi, cos, sin, out=xi), repeat)))
    rows.append(("NumPy formula", _median_seconds(lambda: _numpy_rope(x, cos, sin), repeat)))
    torch = _torch()
    threads = ""
    if torch is not None:
        xt, ct, st = torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin)
        h = dim // 2

        def hf() -> Any:
            return xt * ct + torch.cat((-xt[..., h:], xt[..., :h]), dim=-1) * st

        with torch.no_grad():
            rows.append(("PyTorch HF formula", _median_seconds(hf, repeat)))
        threads = f", torch threads {torch.get_num_threads()}"
    nbytes = x.nbytes
    print(f"\nspeed: RoPE on float32 x of shape {shape} ({_size(nbytes)}), "
          f"median of {_plural(repeat, 'run')}{threads}")
    print(f"  {'':32s} {'ms':>9s} {'GB/s':>7s} {'vs posemb':>10s}")
    for name, t in rows:
        gbs = 2 * nbytes / t / 1e9  # read x, write y (tables stay in cache)
        print(f"  {name:32s} {t * 1e3:9.3f} {gbs:7.2f} {t / t_pe:9.2f}x")
    if torch is None:
        print(f"  {'PyTorch HF formula':32s} {_NO_TORCH}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from posemb import _bench
        return _bench.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m posemb",
        description="Check posemb's RoPE against the PyTorch formula and compare speed. "
                    "'python -m posemb bench --help' for the full benchmark.")
    parser.add_argument("--shape", type=lambda s: tuple(int(v) for v in s.split(",")),
                        default=(1, 32, 1024, 128),
                        help="x shape as comma-separated ints, features last "
                             "(default 1,32,1024,128)")
    parser.add_argument("--repeat", type=int, default=20, help="timing repeats (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if len(args.shape) < 2 or args.shape[-1] % 2:
        parser.error("--shape needs at least (seq, dim) with an even dim")
    ok = check(args.shape, args.seed)
    speed(args.shape, max(args.repeat, 1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
