"""Trust: the right answer or a clear exception naming the argument, quickly,
with the process alive -- never a NaN table from finite parameters, an
out-of-memory kill, a minutes-long scan or a bare MemoryError.

Memory tests run a child process under an address-space cap
(``RLIMIT_AS``) of what it uses after import plus a little more than the
result: a call whose temporaries are several times its result fails there.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from decimal import Decimal, getcontext
from pathlib import Path

import numpy as np
import pytest

import posemb
from posemb import _checks

ROOT = Path(__file__).resolve().parents[1]
# where the posemb under test lives (this checkout, or an installed wheel's
# site-packages when .ci/wheel_*.sh test a wheel): subprocesses import that one
POSEMB_HOME = str(Path(posemb.__file__).resolve().parents[1])


def run_child(code: str, *, timeout: float = 120, cap: int | None = None) -> dict:
    """Run ``code`` in a fresh interpreter (the posemb under test first on the path),
    under ``RLIMIT_AS`` = its address space after importing posemb + ``cap``
    bytes when ``cap`` is given.  ``code`` sets ``result`` (JSON-able)."""
    prog = textwrap.dedent("""
        import json, os, resource, sys
        import numpy as np, posemb
        cap = %r
        if cap is not None:
            vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (vm + cap, resource.RLIM_INFINITY))
        result = None
        try:
    """) % (cap,) + textwrap.indent(textwrap.dedent(code), "    ") + textwrap.dedent("""
        except Exception as e:
            result = {"error": type(e).__name__, "message": str(e)}
        print("RESULT", json.dumps(result))
    """)
    if cap is not None and "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("an RLIMIT_AS cap cannot be measured under AddressSanitizer "
                    "(its shadow memory is address space)")
    env = dict(os.environ, PYTHONPATH=POSEMB_HOME, POSEMB_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                       timeout=timeout, env=env, cwd=POSEMB_HOME)
    assert p.returncode == 0, p.stderr[-2000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


# ---------------------------------------------------------------- validation once


def test_limits_are_defined_once_in_checks():
    """No module but _checks spells a limit (2**20, 2**52, 2**53, 2**61, 2**62)
    in code (messages may quote them)."""
    import io
    import tokenize

    offenders = []
    for path in sorted((ROOT / "posemb").glob("*.py")):
        if path.name in ("_checks.py", "_bench.py", "__main__.py"):   # the CLI prints KiB/MiB
            continue
        toks = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
                if t.type in (tokenize.NUMBER, tokenize.OP)]
        for a, op, b in zip(toks, toks[1:], toks[2:]):
            if (a.string in ("2", "1") and op.string in ("**", "<<")
                    and b.string in ("20", "52", "53", "61", "62")):
                offenders.append(f"{path.name}:{a.start[0]}: {a.line.strip()}")
    assert offenders == []


def test_no_bare_memory_error_in_python():
    for path in sorted((ROOT / "posemb").glob("*.py")):
        text = path.read_text()
        assert not re.search(r"MemoryError\(\s*\)", text), path.name
        assert "PyErr_NoMemory" not in text


@pytest.mark.parametrize("call, name", [
    (lambda: posemb.rope_cos_sin(np.broadcast_to(np.int64(1), (2**34,)), 128), "positions"),
    (lambda: posemb.RoPE(128, 2**40), "seq_len"),
    (lambda: posemb.RoPE(0, 2**53 + 1), "seq_len"),      # found by the fuzzer: no width, 2**53 rows
    (lambda: posemb.RoPE(8, 4).cos_sin(seq_len=2**50), "seq_len"),
    (lambda: posemb.precompute_freqs_cis(128, 2**45), "end"),
    (lambda: posemb.compute_frequencies(128, 2**45), "seq_len"),
    (lambda: posemb.rope_scaling_parameters(2**62), "dim"),
    (lambda: posemb.sinusoidal(2**40, 2**20), "seq_len and dim"),
    (lambda: posemb.AbsolutePE(2**20, 2**40), "max_length and embedding_size"),
    (lambda: posemb.causal_mask(2**40, 2**40), "query_length and key_length"),
    (lambda: posemb.attention_mask(2**40, causal=False), "query_length and key_length"),
    (lambda: posemb.attention_mask(2**30, causal=False, window=3),
     "query_length and key_length"),
    (lambda: posemb.alibi_bias(2**40, 4, 4), "num_heads"),
    (lambda: posemb.alibi_bias(4, 2**30, 2**30), "slopes_or_num_heads, query_length and key_length"),
    (lambda: posemb.alibi_slopes(2**53), "num_heads"),
    (lambda: posemb.relative_position_index(1, 2**53, 3), "query_length and key_length"),
    (lambda: posemb.padding_mask([1], 2**45), "lengths and max_length"),
    (lambda: posemb.LearnedPE(2**40, 2**10), "max_length and dim"),
    (lambda: posemb.scaled_dot_product_attention(np.ones((2**20, 1)), np.ones((2**20, 1)),
                                                 np.ones((2**20, 1))), "q and k"),
    (lambda: posemb.learned_pe_backward(np.ones((1, 4)), np.zeros(1, np.int64),
                                        num_positions=2**60), "num_positions"),
])
def test_result_too_large_is_a_named_memory_error(call, name):
    with pytest.raises(MemoryError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(name + ":"), msg
    assert re.search(r"would need \d+ bytes", msg), msg


def test_memory_limit_follows_rlimit_as():
    got = run_child("""
        import resource
        lim = posemb._checks.memory_limit()
        try:
            posemb.rope_cos_sin(np.arange(2**24), 128)   # 16 GiB of tables, cap 1 GiB
            result = {"limit": lim}
        except MemoryError as e:
            result = {"limit": lim, "message": str(e)}
    """, cap=1 << 30)
    assert got["limit"] <= (1 << 30) + (64 << 20)
    assert got["message"].startswith("positions: the tables for positions of shape (16777216,) "
                                     "would need 17314086912 bytes (16.1 GiB), more than the ")


# ---------------------------------------------------------------- bounded temporaries

# (call, result bytes): each must succeed with an address-space cap of its
# result plus half of it; before blocking they needed 3x-6x their result.
BOUNDED = [
    ("precompute_freqs_cis", "r = posemb.precompute_freqs_cis(128, 2**19)\n"
     "result = [bool(np.isfinite(r).all()), float(r[12345, 7].real)]", 2**19 * 64 * 8),
    ("rope_scaling_parameters", "inv, a = posemb.rope_scaling_parameters(2**25, scaling="
     "{'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 4096})\n"
     "result = [float(inv[1]), float(inv[-1])]", 2**24 * 8),
    ("rope_cos_sin float16", "c, s = posemb.rope_cos_sin(np.arange(2**20), 64, "
     "dtype=np.float16)\nresult = [float(c[1000, 0]), float(s[1000, 0])]", 2 * 2**20 * 64 * 2),
    ("xpos_cos_sin", "t = posemb.xpos_cos_sin(np.arange(2**19), 64, center=2**18, scale_base=2.0**16)\n"
     "result = [float(t[0][1000, 0]), float(t[3][5, 3])]", 4 * 2**19 * 64 * 4),
    ("mrope_cos_sin", "c, s = posemb.mrope_cos_sin(np.arange(3 * 2**20).reshape(3, -1) % 999, "
     "64, [8, 12, 12])\nresult = [float(c[7, 3]), float(s[-1, -1])]", 2 * 2**20 * 64 * 4),
    ("sinusoidal strided out", "o = np.empty((2**20, 128), np.float32)[:, ::2]\n"
     "posemb.sinusoidal(2**20, 64, out=o)\nresult = [float(o[1000, 1])]",
     2**20 * 128 * 4 * 4 // 5),     # the buffer is 2x the table: a full copy exceeds the cap
]


@pytest.mark.parametrize("name, code, nbytes", BOUNDED, ids=[b[0] for b in BOUNDED])
def test_temporaries_are_a_fraction_of_the_result(name, code, nbytes):
    got = run_child(code + "\n", cap=nbytes + nbytes // 2 + (48 << 20), timeout=300)
    assert isinstance(got, list), got


def test_empty_width_with_a_huge_length_returns_at_once():
    # found by the fuzzer: 2**40 rows of nothing looped over 2**17 blocks of positions
    got = run_child("""
        r = posemb.precompute_freqs_cis(0, 2**40)
        result = [list(r.shape), str(r.dtype)]
    """, timeout=30)
    assert got == [[2**40, 0], "complex64"]


def test_blocked_tables_equal_unblocked():
    """The blocks change no bit: float16 tables, freqs_cis, xpos, mrope."""
    pos = np.arange(70000)
    c16, s16 = posemb.rope_cos_sin(pos, 130, dtype=np.float16)
    c64, s64 = posemb.rope_cos_sin(pos, 130, dtype=np.float64)
    assert np.array_equal(c16, c64.astype(np.float16))
    assert np.array_equal(s16, s64.astype(np.float16))
    f = posemb.precompute_freqs_cis(64, 70000)
    c64, s64 = posemb.rope_cos_sin(pos, 64, dtype=np.float64)
    assert np.array_equal(f.real, c64[:, :32].astype(np.float32))
    assert np.array_equal(f.imag, s64[:, :32].astype(np.float32))
    np.testing.assert_allclose(f.real, np.cos(np.outer(pos, posemb.rope_inv_freq(64))),
                               rtol=0, atol=6e-8)
    t = posemb.xpos_cos_sin(pos, 16, center=35000, dtype=np.float64)
    c, s = posemb.rope_cos_sin(pos, 16, dtype=np.float64)
    zeta = (np.arange(0, 16, 2) + 0.4 * 16) / (1.4 * 16)
    scale = np.tile(zeta ** ((pos[:, None] - 35000) / 512.0), 2)
    np.testing.assert_allclose(t[0], c * scale, rtol=1e-14)
    np.testing.assert_allclose(t[3], s / scale, rtol=1e-14)
    mp = np.stack([pos % 7, pos % 11, pos % 13])
    mc, ms = posemb.mrope_cos_sin(mp, 16, [2, 3, 3], dtype=np.float64)
    inv = posemb.rope_inv_freq(16)
    band = np.repeat([0, 1, 2], [2, 3, 3])
    ang = mp[band].T * inv
    assert np.array_equal(mc, np.concatenate([np.cos(ang)] * 2, -1)) or np.allclose(
        mc, np.concatenate([np.cos(ang)] * 2, -1), rtol=0, atol=2e-16)


def test_wide_sinusoidal_has_bounded_scratch_and_right_values():
    # 528 bytes of scratch per feature used to make this a bare MemoryError() under a cap
    got = run_child("""
        pe = posemb.sinusoidal(1, 2**22, start=3, dtype=np.float64)
        result = [float(pe[0, 0]), float(pe[0, 1]), float(pe[0, 2**21 + 4]), float(pe[0, -1])]
    """, cap=(2**22 * 8) * 2 + (48 << 20))
    w = lambda i: 10000.0 ** (-2.0 * i / 2**22)
    assert got == pytest.approx([np.sin(3.0), np.cos(3.0), np.sin(3 * w(2**20 + 2)),
                                 np.cos(3 * w(2**21 - 1))], abs=1e-15)


@pytest.mark.parametrize("dim", [510, 512, 514, 1030, 4097])
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoidal_frequency_blocks_match_oracle(dim, layout):
    pe = posemb.sinusoidal(70, dim, start=5, layout=layout, dtype=np.float64)
    p = np.arange(5, 75, dtype=np.float64)[:, None]
    w = 10000.0 ** (-2.0 * np.arange((dim + 1) // 2) / dim)
    s, c = np.sin(p * w), np.cos(p * w)
    if layout == "interleaved":
        ref = np.empty((70, 2 * w.size))
        ref[:, 0::2], ref[:, 1::2] = s, c
        ref = ref[:, :dim]
    else:
        ref = np.zeros((70, dim))
        ref[:, :dim // 2 + dim % 2] = s[:, :dim // 2 + dim % 2]
        ref[:, :dim // 2] = s[:, :dim // 2]
        ref[:, dim // 2:2 * (dim // 2)] = c[:, :dim // 2]
    np.testing.assert_allclose(pe, ref, rtol=0, atol=2e-14)


# ---------------------------------------------------------------- broadcast positions

HUGE = "np.broadcast_to(np.int64(3), (2**40,))"


@pytest.mark.parametrize("call", [
    f"posemb.rope_cos_sin({HUGE}, 64)",
    f"posemb.RoPE(64, 16).cos_sin({HUGE})",
    f"posemb.RoPE(64, 16)(np.broadcast_to(np.float32(1), (2**40, 64)), positions={HUGE})",
    f"posemb.mrope_cos_sin(np.broadcast_to(np.int64(3), (3, 2**40)), 64, [8, 12, 12])",
    f"posemb.xpos_cos_sin({HUGE}, 64)",
    f"posemb.axial_rope_cos_sin(np.broadcast_to(np.int64(3), (2**40, 2)), 64)",
    f"posemb.learned_pe_forward(np.ones((2, 64)), np.ones((4, 64)), {HUGE})",
])
def test_huge_broadcast_positions_fail_at_once(call):
    # each scanned 2**40 elements (minutes) before failing; the child has 60 s
    got = run_child(f"{call}\nresult = 'no error'", timeout=60)
    assert got["error"] in ("MemoryError", "ValueError"), got
    assert "positions" in got["message"], got


def test_broadcast_positions_scan_only_unique_memory():
    pos = np.broadcast_to(np.array([[5], [2**53]]), (2, 10**6))
    with pytest.raises(ValueError, match="positions must be < 2\\*\\*53, got 9007199254740992"):
        posemb.rope_cos_sin(pos, 8)
    ok = np.broadcast_to(np.int64(7), (5, 3))
    c, s = posemb.rope_cos_sin(ok, 8, dtype=np.float64)
    assert np.array_equal(c, np.broadcast_to(posemb.rope_cos_sin([7], 8, dtype=np.float64)[0],
                                             (5, 3, 8)))
    rope = posemb.RoPE(8, 4, dtype=np.float64)
    assert np.array_equal(rope.cos_sin(ok)[1], s)


# ---------------------------------------------------------------- finite tables


@pytest.mark.parametrize("call, name", [
    (lambda: posemb.rope_cos_sin(np.arange(4), 8, scaling={"rope_type": "linear",
                                                           "factor": 5e-324}),
     "scaling['factor']"),
    (lambda: posemb.rope_cos_sin(np.arange(4), 8, scaling={
        "rope_type": "yarn", "factor": 5e-324, "original_max_position_embeddings": 4096}),
     "scaling['factor']"),
    (lambda: posemb.rope_cos_sin(np.arange(4), 8, scaling={
        "rope_type": "llama3", "factor": 5e-324, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
     "scaling['factor']"),
    (lambda: posemb.rope_cos_sin(np.arange(4), 8, scaling={
        "rope_type": "longrope", "short_factor": [5e-324] * 4, "long_factor": [1.0] * 4,
        "original_max_position_embeddings": 4096}),
     "scaling['short_factor']"),
    (lambda: posemb.rope_cos_sin(np.arange(4), 8, scaling={
        "rope_type": "yarn", "factor": 4.0, "attention_factor": 1e300,
        "original_max_position_embeddings": 4096}),
     "attention factor"),
    (lambda: posemb.RoPE(8, 4, scale=1e308), "scale"),
    (lambda: posemb.sinusoidal(4, 1000, base=1e-300, start=10**12), "base"),
    (lambda: posemb.rope_cos_sin(np.arange(4), 8, base=2**1030), "base"),
])
def test_non_finite_tables_are_a_named_value_error(call, name):
    with pytest.raises(ValueError) as e:
        call()
    assert name in str(e.value)


def test_tiny_factor_that_still_fits_gives_a_finite_table():
    c, s = posemb.rope_cos_sin(np.arange(4), 8, dtype=np.float64,
                               scaling={"rope_type": "linear", "factor": 1e-300})
    inv = posemb.rope_inv_freq(8) / 1e-300
    ref = np.cos(np.arange(4)[:, None] * inv)
    assert np.isfinite(c).all() and np.isfinite(s).all()
    np.testing.assert_array_equal(c[:, :4], ref)


def test_dynamic_factor_1e300_is_finite_and_exact():
    """base' = base * (f*L/M - (f-1)) ** (d/(d-2)) overflows float64 (it raised
    OverflowError (34, 'Numerical result out of range')); its powers do not."""
    inv, attn = posemb.rope_scaling_parameters(
        8, 10000.0, {"rope_type": "dynamic", "factor": 1e300},
        max_position_embeddings=2, seq_len=10)
    getcontext().prec = 60
    f, L, M, d = Decimal(1e300), Decimal(10), Decimal(2), Decimal(8)
    log_base = Decimal(10000).ln() + d / (d - 2) * (f * L / M - (f - 1)).ln()
    ref = [float((-(Decimal(2 * i) / d) * log_base).exp()) for i in range(4)]
    np.testing.assert_allclose(inv, ref, rtol=1e-13)
    assert attn == 1.0
    c, s = posemb.rope_cos_sin(np.arange(10), 8, scaling={"rope_type": "dynamic",
                                                           "factor": 1e300},
                               max_position_embeddings=2)
    assert np.isfinite(c).all() and np.isfinite(s).all()


# ---------------------------------------------------------------- named errors


def test_huge_original_length_names_it():
    for scaling in ({"rope_type": "yarn", "factor": 2.0,
                     "original_max_position_embeddings": 2**1030},
                    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 2**1030}):
        with pytest.raises(ValueError, match=r"scaling\['original_max_position_embeddings'\] "
                                             r"must be <= 2\*\*53"):
            posemb.rope_cos_sin(np.arange(4), 8, scaling=scaling)
    with pytest.raises(ValueError, match=r"max_position_embeddings must be <= 2\*\*53"):
        posemb.rope_scaling_parameters(8, scaling={"rope_type": "dynamic", "factor": 2.0},
                                       max_position_embeddings=2**1030)


@pytest.mark.parametrize("call, name", [
    (lambda m: posemb.learned_pe_forward(m, np.zeros((4, 2))), "x"),
    (lambda m: posemb.learned_pe_forward(np.zeros((1, 3, 2)), m[0]), "weight"),
    (lambda m: posemb.apply_rope(m, *posemb.rope_cos_sin(np.arange(3), 2)), "x"),
    (lambda m: posemb.add_sinusoidal(m), "x"),
    (lambda m: posemb.rope_cos_sin(np.ma.masked_array([1, 2], [0, 1]), 8), "positions"),
])
def test_masked_arrays_are_refused_by_name(call, name):
    m = np.ma.masked_array(np.zeros((1, 3, 2)), mask=[[[0, 1], [0, 0], [0, 0]]])
    with pytest.raises(TypeError, match=rf"^{name} is a numpy.ma.MaskedArray"):
        call(m)


def test_bench_threads_zero_is_a_usage_error():
    p = subprocess.run([sys.executable, "-m", "posemb", "bench", "--threads", "0"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=POSEMB_HOME), cwd=POSEMB_HOME)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert "argument --threads: must be an integer >= 1, got 0" in p.stderr


# ---------------------------------------------------------------- dask


def _dask_cases():
    x = np.random.default_rng(0).standard_normal((2, 16, 8)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(16), 8)
    w = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    return x, [
        ("apply_rope", lambda a: posemb.apply_rope(a, cos, sin)),
        ("apply_rope_backward", lambda a: posemb.apply_rope_backward(a, cos, sin)),
        ("RoPE", lambda a: posemb.RoPE(8, 16)(a)),
        ("add_sinusoidal", lambda a: posemb.add_sinusoidal(a)),
        ("AbsolutePE", lambda a: posemb.AbsolutePE(8, 32)(a)),
        ("AbsolutePE julia axes", lambda a: posemb.AbsolutePE(16, 32)(a, seq_axis=-1,
                                                                       feature_axis=-2)),
        ("learned_pe_forward", lambda a: posemb.learned_pe_forward(a, w)),
        ("learned_pe_forward positions",
         lambda a: posemb.learned_pe_forward(a, w, np.arange(16)[::-1])),
        ("rotate_half", lambda a: posemb.rotate_half(a)),
        ("neg_half", lambda a: posemb.neg_half(a, axis=1)),
    ]


@pytest.mark.parametrize("chunks", [(1, 4, 8), (2, 16, 4), (1, 3, 2)])
@pytest.mark.parametrize("case", [c[0] for c in _dask_cases()[1]])
def test_dask_chunked_along_any_axis(case, chunks):
    da = pytest.importorskip("dask.array")
    x, cases = _dask_cases()
    f = dict(cases)[case]
    y = f(da.from_array(x, chunks=chunks))
    assert type(y).__module__.startswith("dask")
    assert np.array_equal(np.asarray(y.compute()), f(x))
