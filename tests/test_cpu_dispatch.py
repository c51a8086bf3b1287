"""The one CPU dispatch: POSEMB_CPU picks the level at import, show_config()
reports it, and every level gives the same bits (.ci/cpu_levels.sh runs the
kernel tests at each level this machine has)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import posemb

ORDER = ["baseline", "sse2", "avx2", "avx512", "avx512bf16"]
# where the posemb under test lives (this checkout, or an installed wheel's
# site-packages when .ci/wheel_*.sh test a wheel): the children import that one
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(posemb.__file__)))


def _config_in_child(level):
    env = dict(os.environ, POSEMB_CPU=level, PYTHONPATH=ROOT)
    code = "import json, posemb; print(json.dumps(posemb.show_config(print_=False)))"
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def test_show_config_reflects_override():
    """This process: the level is POSEMB_CPU's (clamped to the CPU's)."""
    cfg = posemb.show_config(print_=False)
    assert cfg["supported"] in ORDER and cfg["level"] in ORDER
    want = os.environ.get("POSEMB_CPU")
    if want in ORDER:
        assert ORDER.index(cfg["level"]) == min(ORDER.index(want), ORDER.index(cfg["supported"]))
    else:
        assert cfg["level"] == cfg["supported"]
    for family in ("rope", "sinusoidal", "learned"):
        assert ORDER.index(cfg[family]) <= ORDER.index(cfg["level"])
    if cfg["level"] == "baseline":
        assert cfg["rope"] == cfg["sinusoidal"] == cfg["learned"] == "baseline"
        assert cfg["streaming_stores"] == "none"


def test_show_config_prints(capsys):
    cfg = posemb.show_config()
    out = capsys.readouterr().out
    assert "level:" in out and cfg["level"] in out


@pytest.mark.parametrize("level", ORDER)
def test_every_level_in_a_child(level):
    supported = posemb.show_config(print_=False)["supported"]
    cfg, err = _config_in_child(level)
    want = ORDER[min(ORDER.index(level), ORDER.index(supported))]
    assert cfg["level"] == want
    if ORDER.index(level) > ORDER.index(supported):
        assert "POSEMB_CPU" in err      # clamped, with a warning
    if want == "baseline":
        assert cfg["rope"] == "baseline" and cfg["streaming_stores"] == "none"
    if want == "avx2":
        assert cfg["rope"] == "avx2"
    if want == "avx512bf16":
        # bfloat16 RoPE rounds with AVX512_BF16; the rest is the avx512 level's
        assert cfg["rope"] == "avx512bf16"
        assert cfg["sinusoidal"] == "avx512" and cfg["streaming_stores"] == "avx512"
    if want == "avx512":
        assert cfg["sinusoidal"] == "avx512"
        # RoPE's AVX-512 kernels also need AVX-512DQ (else it stays at AVX2)
        if sys.platform == "linux":
            with open("/proc/cpuinfo") as f:
                dq = " avx512dq" in f.read()
            assert cfg["rope"] == ("avx512" if dq else "avx2")
        else:
            assert cfg["rope"] in ("avx512", "avx2")


def test_unknown_level_warns_and_is_ignored():
    cfg, err = _config_in_child("pentium")
    assert "POSEMB_CPU=pentium" in err and "ignored" in err
    # the warning names every level, in order
    assert "is not one of " + ", ".join(ORDER) + ": ignored" in err
    assert cfg["level"] == cfg["supported"]


def _half_outputs():
    """float16 results of the F16C kernels (at the AVX2 level; one value at a
    time below it): learned forward and backward with NaN payloads, infs,
    subnormals, overflow and a tail after 8-value vectors; x + table in
    float64 rounded once, for every float16 bit pattern of x; sinusoidal
    tables (both layouts, an odd width) rounded once from float64; the
    learned loops and the relative backwards on the same bits read as
    bfloat16."""
    from posemb import _core, _learned, _relative
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 5, 21)) * 300).astype(np.float16)
    x.view(np.uint16)[0, 0, :4] = [0x7c01, 0xfe55, 0x7c00, 0x0001]
    x[0, 1, :3] = [65504, -65504, 6e-8]
    w = (rng.standard_normal((7, 21)) * 300).astype(np.float16)
    w[:, :3] = [65504, -65504, -6e-8]
    pos = rng.integers(0, 7, (3, 5))
    every = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(256, 256)
    with np.errstate(over="ignore", invalid="ignore"):
        return [posemb.learned_pe_forward(x, w, pos).tobytes(),
                posemb.learned_pe_backward(x, pos, num_positions=7).tobytes(),
                _core.sinusoidal_add_rows(every, rng.standard_normal((256, 256))).tobytes(),
                _core.sinusoidal_add_rows(every, rng.standard_normal((256, 256)) * 1e-4).tobytes(),
                posemb.sinusoidal(300, 45, start=1000, dtype=np.float16).tobytes(),
                posemb.sinusoidal(300, 45, layout="concat", dtype=np.float16).tobytes(),
                _learned.forward_bf16_bits(x.view(np.uint16), w.view(np.uint16), pos).tobytes(),
                _learned.backward_bf16_bits(x.view(np.uint16), pos, 7).tobytes(),
                _relative.t5_bias_backward_bf16_bits(x.view(np.uint16), num_buckets=8,
                                                     query_length=5, key_length=21).tobytes(),
                _relative.shaw_backward_bf16_bits(x.view(np.uint16), 2, 3, 5).tobytes()]


def test_bits_do_not_depend_on_level():
    """A child at each level computes RoPE, sinusoidal and learned results
    whose bytes must equal this process's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 300, 64)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(300), 64)
    here = [posemb.apply_rope(x, cos, sin).tobytes(),
            posemb.sinusoidal(50, 40).tobytes()] + _half_outputs()
    code = ("import sys, numpy as np, posemb\n"
            "rng = np.random.default_rng(3)\n"
            "x = rng.standard_normal((2, 4, 300, 64)).astype(np.float32)\n"
            "cos, sin = posemb.rope_cos_sin(np.arange(300), 64)\n"
            "sys.stdout.buffer.write(posemb.apply_rope(x, cos, sin).tobytes())\n"
            "sys.stdout.buffer.write(posemb.sinusoidal(50, 40).tobytes())\n"
            f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
            "from test_cpu_dispatch import _half_outputs\n"
            "sys.stdout.buffer.write(b''.join(_half_outputs()))\n")
    for level in ORDER:
        env = dict(os.environ, POSEMB_CPU=level, PYTHONPATH=ROOT)
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == b"".join(here), level


def test_streaming_partial_lines_probe_and_setting():
    """The runtime's streaming-store probe answers once per process, the
    answer shows in show_config(), and _partial_lines sets it (for tests)
    and rejects anything but None or a bool."""
    from posemb import _core
    old = _core._partial_lines(None)
    assert isinstance(old, bool)
    try:
        for v in (True, False):
            assert _core._partial_lines(v) is v
            assert _core._partial_lines(None) is v
            want = "yes" if v else "no (whole lines only)"
            assert posemb.show_config(print_=False)["streaming_partial_lines"] == want
        with pytest.raises(TypeError, match="bool"):
            _core._partial_lines(1)
    finally:
        _core._partial_lines(old)


def test_streaming_threshold_rule_and_setting(rng):
    """Outputs are streamed from 3/4 of the last-level cache on, within 4 and
    24 MiB (show_config's streaming_from); _stream_min_bytes sets it (for
    tests: at least 4 MiB, whole KiB), -1 restores the rule, and anything
    else is refused.  An output between 4 MiB and the rule's size (where the
    rule is above 4 MiB) gives the formula's bits, with plain stores by
    default and streamed when set so."""
    from posemb import _core
    old = _core._stream_min_bytes(None)
    llc = int(posemb.show_config(print_=False)["last_level_cache"].split()[0]) << 10
    want = min(max(llc // 4 * 3, 4 << 20), 24 << 20)
    try:
        assert _core._stream_min_bytes(-1) == want
        assert posemb.show_config(print_=False)["streaming_from"] == f"{want >> 10} KiB"
        assert _core._stream_min_bytes(5 << 20) == 5 << 20
        assert _core._stream_min_bytes(None) == 5 << 20
        assert _core._stream_min_bytes(np.int64((5 << 20) + 100)) == 5 << 20    # whole KiB
        for bad, err in ((-2, ValueError), ((4 << 20) - 1024, ValueError), (0, ValueError),
                         (-(1 << 70), ValueError), (True, TypeError),
                         (1.5, TypeError), ("4194304", TypeError)):
            with pytest.raises(err, match="_stream_min_bytes: v must be"):
                _core._stream_min_bytes(bad)
            assert _core._stream_min_bytes(None) == 5 << 20, bad                 # unchanged
        assert _core._stream_min_bytes(1 << 70) == (2**31 - 1) << 10           # never
        # (1, 8, 1040, 128) float32: 4.06 MiB, into an output whose pages are
        # in memory (streaming needs them there)
        x = rng.standard_normal((1, 8, 1040, 128), dtype=np.float32)
        cos, sin = posemb.rope_cos_sin(np.arange(1040), 128)
        # HF's x * cos + rotate_half(x) * sin, term for term in float32
        expect = x * cos + np.concatenate([-x[..., 64:], x[..., :64]], axis=-1) * sin
        out = np.zeros_like(x)
        for v in (-1, 4 << 20, -1):
            _core._stream_min_bytes(v)
            out[...] = 0
            assert posemb.apply_rope(x, cos, sin, out=out) is out
            np.testing.assert_array_equal(out, expect)
    finally:
        _core._stream_min_bytes(old)
