"""Large RoPE calls, each timed right next to its limit pass, round by round.

    python benchmarks/paired.py [--threads N] [--rounds R]

On a shared VM whose second vCPU comes and goes, the bench's medians over a
case can mix the two states.  Here every sample of posemb's call is followed
at once by a sample of the compiled streaming pass it is compared with (an
in-place scale for in-place calls, a streaming copy for `out=`, from
posemb/_bench_stream.py, at the same thread count), five pairs a round, and
each round prints its own ratio with the 2-thread scale's time (about half
the 1-thread time when both vCPUs are free), so a round can be read with
the state it ran in.  float32 and float64 half-split and interleaved,
float16 and ml_dtypes bfloat16 (skipped without it), HF's tables, arrays of
4x the last-level cache or more, in NumPy's own allocations.
"""
import argparse
import time

import numpy as np

import posemb
from posemb import _bench, _bench_stream


def _cases(cfg: _bench.Config):
    rng = np.random.default_rng(0)
    dtypes = [("float32", np.float32), ("float64", np.float64), ("float16", np.float16)]
    try:
        import ml_dtypes
        dtypes.append(("bfloat16", ml_dtypes.bfloat16))
    except ImportError:
        pass
    for name, dt in dtypes:
        seq = cfg.big_seq(32, 128, np.dtype(dt).itemsize)
        x = rng.standard_normal((1, 32, seq, 128)).astype(dt)
        for inter in ([False, True] if name == "float32" else [False]):
            cos, sin = posemb.rope_cos_sin(np.arange(seq), 128, interleaved=inter)
            cos, sin = cos.astype(dt), sin.astype(dt)
            label = f"{name}{' interleaved' if inter else ''}"
            yield label + " in place", x.copy(), cos, sin, inter, None
            yield label + " out=", x, cos, sin, inter, np.empty_like(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    posemb.set_num_threads(args.threads)
    t = posemb.get_num_threads()
    st = _bench_stream.load()
    if st is None:
        raise SystemExit("no C compiler: the limit passes cannot be built")
    cfg = _bench.Config(quick=False, threads=t, llc=_bench.llc_bytes()[0], compile=False,
                        ort=False, stream=st)
    pairs = []
    for label, x, cos, sin, inter, out in _cases(cfg):
        if out is None:
            def p(x=x, c=cos, s=sin, i=inter):
                posemb.apply_rope(x, c, s, out=x, interleaved=i)
            lim = _bench._stream_pass(st, "scale", "plain", t, x, None, None)
        else:
            def p(x=x, c=cos, s=sin, i=inter, y=out):
                posemb.apply_rope(x, c, s, out=y, interleaved=i)
            lim = _bench._stream_pass(st, "copy", "nt", t, x, out, None)
        p()
        lim()
        pairs.append((label, p, lim))
    probe = np.ones(32 << 20, np.float32)
    print(f"posemb {posemb.__version__}, {t} thread(s); each cell: posemb / limit ms, ratio")
    rows: dict[str, list[str]] = {label: [] for label, _, _ in pairs}
    scales = []
    for _ in range(args.rounds):
        for label, p, lim in pairs:
            tp, tl = [], []
            for _ in range(5):
                t0 = time.perf_counter()
                p()
                tp.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lim()
                tl.append(time.perf_counter() - t0)
            a, b = np.median(tp) * 1e3, np.median(tl) * 1e3
            rows[label].append(f"{a:6.2f}/{b:6.2f} {a / b:4.2f}x")
        s = []
        for _ in range(3):
            t0 = time.perf_counter()
            st.run("scale", "plain", t, probe)
            s.append(time.perf_counter() - t0)
        scales.append(f"{min(s) * 1e3:.2f} ms")
    print("round's 128 MiB scale:".ljust(30) + " | ".join(f"{x:>20}" for x in scales))
    for label, cells in rows.items():
        print(label.ljust(30) + " | ".join(cells))


if __name__ == "__main__":
    main()
