"""What a user reads from ``python -m posemb`` (the self-check) and
``python -m posemb bench --help``: plain text, right plurals and units, and
a word when the PyTorch comparison was skipped."""
import subprocess
import sys

import pytest

import posemb
import posemb.__main__ as cli


def test_self_check_singular_and_small_sizes(capsys):
    assert cli.main(["--shape", "8,8", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "(1 vector per position, 8 positions, head size 8)" in out
    assert "(256 bytes)" in out and "0 MiB" not in out
    assert "median of 1 run" in out and "1 runs" not in out
    assert "verdict: OK" in out


def test_self_check_plurals_and_units(capsys):
    assert cli.main(["--shape", "2,3,512,64", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "(6 vectors per position, 512 positions, head size 64)" in out
    assert "(768.0 KiB)" in out and "median of 2 runs" in out      # 2*3*512*64*4 bytes


def test_self_check_says_when_torch_was_skipped(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_torch", lambda: None)
    assert cli.main(["--shape", "4,16", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "against the PyTorch formula: PyTorch is not installed: skipped" in out
    assert "against NumPy transcription" in out
    speed = out[out.index("speed:"):]
    assert "PyTorch HF formula" in speed and "skipped" in speed


def test_size_units():
    assert cli._size(1) == "1 byte" and cli._size(1023) == "1023 bytes"
    assert cli._size(1024) == "1.0 KiB" and cli._size(3 << 20) == "3.0 MiB"
    assert cli._size(5 << 30) == "5.0 GiB"


def test_bench_help_is_plain_text():
    out = subprocess.run([sys.executable, "-m", "posemb", "bench", "--help"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert "python -m posemb bench: posemb against the PyTorch formula" in out
    assert "``" not in out and "*limit*" not in out and "The limit is" in out


def test_bench_checks_its_arguments():
    with pytest.raises(ValueError, match="families must be among"):
        posemb.bench("attention")
    with pytest.raises(ValueError, match="families must be among"):
        posemb.bench([])
    with pytest.raises(TypeError, match="repeat"):
        posemb.bench("rope", repeat=2.5)
