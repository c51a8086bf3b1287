"""Time building a (12, 2048, 2048) float32 attention bias: posemb vs PyTorch.

    python benchmarks/bench_bias.py [--heads 12] [--length 2048] [--repeat 7]

Rows:
  T5     posemb.t5_relative_bias   vs HF's T5Attention.compute_bias in torch
  ALiBi  posemb.alibi_bias         vs -m_h * (i - j) in torch (float32)
  limit  writing the same bytes: np.full (fresh array) and out.fill (reused)

posemb's kernels run on one thread, so torch is pinned to one thread too
(torch.set_num_threads(1)).  Both sides allocate their output on each call,
as a model would.  Times are medians over --repeat runs after one warm-up.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

import posemb


def median_time(fn, repeat: int) -> float:
    fn()                                         # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hf_relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                                max_distance=128):
    """HF transformers' T5Attention._relative_position_bucket."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def hf_compute_bias(weight, query_length, key_length):
    """HF's T5Attention.compute_bias (returns the (1, H, q, k) view, as HF does)."""
    context_position = torch.arange(query_length, dtype=torch.long)[:, None]
    memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
    relative_position = memory_position - context_position
    bucket = hf_relative_position_bucket(relative_position)
    values = torch.nn.functional.embedding(bucket, weight)
    return values.permute([2, 0, 1]).unsqueeze(0)


def torch_alibi(slopes, query_length, key_length):
    """-m_h * (i - j) in float32, queries at the last positions."""
    i = torch.arange(key_length - query_length, key_length, dtype=torch.float32)[:, None]
    j = torch.arange(key_length, dtype=torch.float32)[None, :]
    return -slopes[:, None, None] * (i - j)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    H, L, R = args.heads, args.length, args.repeat
    torch.set_num_threads(1)

    rng = np.random.default_rng(0)
    table = rng.standard_normal((32, H)).astype(np.float32)
    weight = torch.from_numpy(table)
    slopes = posemb.alibi_slopes(H)
    slopes_t = torch.from_numpy(slopes.astype(np.float32))

    # same values first: the comparison is between equal results
    assert np.array_equal(posemb.t5_relative_bias(table, L, L), hf_compute_bias(weight, L, L)[0])
    np.testing.assert_allclose(posemb.alibi_bias(slopes, L, L), torch_alibi(slopes_t, L, L),
                               rtol=1e-6)

    reused = np.empty((H, L, L), np.float32)
    t_full = median_time(lambda: np.full((H, L, L), 1.0, np.float32), R)
    t_fill = median_time(lambda: reused.fill(1.0), R)
    rows = [
        ("T5", median_time(lambda: posemb.t5_relative_bias(table, L, L), R),
         median_time(lambda: hf_compute_bias(weight, L, L), R)),
        ("ALiBi", median_time(lambda: posemb.alibi_bias(slopes, L, L), R),
         median_time(lambda: torch_alibi(slopes_t, L, L), R)),
    ]

    mb = H * L * L * 4 / 1e6
    print(f"bias ({H}, {L}, {L}) float32 = {mb:.0f} MB; median of {R}; 1 thread "
          f"(torch {torch.__version__}, numpy {np.__version__})")
    print(f"limit: np.full {t_full * 1e3:8.2f} ms   out.fill {t_fill * 1e3:8.2f} ms")
    print(f"{'':6} {'posemb ms':>10} {'torch ms':>10} {'torch/posemb':>13} "
          f"{'posemb/np.full':>15} {'posemb/fill':>12}")
    for name, tp, tt in rows:
        print(f"{name:6} {tp * 1e3:10.2f} {tt * 1e3:10.2f} {tt / tp:13.1f} "
              f"{tp / t_full:15.2f} {tp / t_fill:12.2f}")


if __name__ == "__main__":
    main()
