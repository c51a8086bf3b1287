"""Benchmark posemb's learned-encoding backward and sinusoidal table.

Run:  python benchmarks/bench_learned.py [--repeat N] [--max-length M]

Prints median wall times and ratios against the naive NumPy way and PyTorch:

* learned backward, the scatter-add of grad_out (8 x 2048 tokens, width 1024,
  random positions) into a (max_length, 1024) gradient table:
  posemb.learned_pe_backward vs np.add.at vs torch.Tensor.index_add_;
  every timing includes making the zeroed gradient table;
* learned forward x + weight[positions]: posemb vs NumPy vs PyTorch;
* the sinusoidal table (8192, 1024): posemb (float64 angles, rounded once)
  vs the seed tutorial's PyTorch float32 formula.

posemb's kernels run on one thread, so PyTorch is given one thread too
(torch.set_num_threads(1)).  The last column is each row's time divided by
posemb's: above 1 means posemb is that many times faster.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

# Benchmark the checkout this script lives in (build it first with
# `python setup.py build_ext --inplace`), not whichever posemb is installed.
_ROOT = Path(__file__).resolve().parents[1]
if (_ROOT / "posemb" / "__init__.py").exists():
    sys.path.insert(0, str(_ROOT))

import posemb  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:  # the PyTorch rows are skipped
    torch = None


def median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up (page faults, caches, lazy init)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def report(title: str, rows: list[tuple[str, float]]) -> None:
    """One table: the first row is posemb; ratio = row time / posemb time."""
    ours = rows[0][1]
    print(f"\n{title}")
    print(f"  {'implementation':<46} {'median':>11} {'time / posemb':>14}")
    for name, t in rows:
        print(f"  {name:<46} {t * 1e3:8.2f} ms {t / ours:13.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9, help="timed runs per row (median)")
    ap.add_argument("--max-length", type=int, default=2048, help="rows of the table")
    args = ap.parse_args()
    threads = 1
    if torch is not None:
        torch.set_num_threads(threads)
    print(f"numpy {np.__version__}, torch {torch.__version__ if torch else 'not installed'}, "
          f"posemb {posemb.__version__}; threads: posemb 1, torch {threads}; "
          f"median of {args.repeat} runs\nposemb from {Path(posemb.__file__).parent}")

    batch, seq, dim, m = 8, 2048, 1024, args.max_length
    rng = np.random.default_rng(0)
    grad = rng.standard_normal((batch, seq, dim), dtype=np.float32)
    pos = rng.integers(0, m, (batch, seq))

    def ours_back():
        return posemb.learned_pe_backward(grad, pos, num_positions=m)

    def numpy_back():
        gw = np.zeros((m, dim), np.float32)
        np.add.at(gw, pos.reshape(-1), grad.reshape(-1, dim))
        return gw

    rows = [("posemb.learned_pe_backward", median_time(ours_back, args.repeat)),
            ("np.add.at", median_time(numpy_back, max(3, args.repeat // 3)))]
    if torch is not None:
        g_t = torch.from_numpy(grad).reshape(-1, dim)
        p_t = torch.from_numpy(pos).reshape(-1)

        def torch_back():
            return torch.zeros(m, dim).index_add_(0, p_t, g_t)

        rows.append(("torch.Tensor.index_add_", median_time(torch_back, args.repeat)))
        assert np.array_equal(ours_back(), torch_back().numpy())
    assert np.array_equal(ours_back(), numpy_back())
    report(f"learned backward: {batch}x{seq} tokens, width {dim}, random positions "
           f"in [0, {m}), float32", rows)

    x = rng.standard_normal((batch, seq, dim), dtype=np.float32)
    weight = rng.standard_normal((m, dim), dtype=np.float32)
    rows = [("posemb.learned_pe_forward", median_time(
                lambda: posemb.learned_pe_forward(x, weight, pos), args.repeat)),
            ("numpy x + weight[positions]", median_time(lambda: x + weight[pos], args.repeat))]
    if torch is not None:
        x_t, w_t, p_t2 = torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(pos)
        rows.append(("torch x + F.embedding(positions, weight)", median_time(
            lambda: x_t + torch.nn.functional.embedding(p_t2, w_t), args.repeat)))
    report(f"learned forward: {batch}x{seq} tokens, width {dim}, float32", rows)

    n, d = 8192, 1024
    rows = [("posemb.sinusoidal (float64 angles -> float32)",
             median_time(lambda: posemb.sinusoidal(n, d), args.repeat))]
    if torch is not None:
        def torch_table():
            i = torch.arange(0, d // 2)
            div_term = torch.exp(-np.log(10000.0) * (2 * i / d))
            position = torch.arange(n).unsqueeze(1)
            pe = torch.zeros(n, d)
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            return pe

        rows.append(("PyTorch float32 formula (seed tutorial)",
                     median_time(torch_table, args.repeat)))
    p = np.arange(n, dtype=np.float64)[:, None]
    w = 10000.0 ** (-np.arange(0, d, 2) / d)

    def numpy_table():
        pe = np.empty((n, d), np.float32)
        pe[:, 0::2] = np.sin(p * w)
        pe[:, 1::2] = np.cos(p * w)
        return pe

    rows.append(("NumPy float64 formula", median_time(numpy_table, args.repeat)))
    report(f"sinusoidal table ({n}, {d}), float32 output", rows)


if __name__ == "__main__":
    main()
