"""Write the PNGs the README shows into docs/images/ (needs matplotlib).

    python examples/make_readme_images.py [OUTDIR]

Every picture is made by posemb.plot from posemb's own tables, so re-running
this after a change to a kernel shows the change.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

import posemb
import posemb.plot

ROOT = pathlib.Path(__file__).resolve().parents[1]
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def figures() -> dict[str, object]:
    causal = posemb.causal_mask(24)
    rp = np.arange(64)[None, :] - np.arange(64)[:, None]          # key - query
    return {
        "sinusoidal.png": posemb.plot.sinusoidal(128, 128),
        "rope_frequencies.png": posemb.plot.rope_frequencies(
            128, 512, base=500000.0, scaling=LLAMA3),
        "alibi.png": posemb.plot.bias(
            np.where(causal, posemb.alibi_bias(8, 24, 24), -np.inf), shared_scale=False,
            title="ALiBi bias + causal mask, 4 of 8 heads (gray: masked)"),
        "t5.png": posemb.plot.bias(
            {"bidirectional": posemb.t5_relative_position_bucket(rp),
             "causal (decoder)": posemb.t5_relative_position_bucket(rp, bidirectional=False)},
            title="T5 buckets of key - query (32 buckets, max_distance 128)", panel_size=3.2),
        "masks.png": posemb.plot.bias(
            {"causal": posemb.causal_mask(12),
             "causal, 4 queries of a KV cache": posemb.causal_mask(4, 12),
             "sliding window 4": posemb.causal_mask(12, window=4),
             "causal & left padding (length 8)":
                 posemb.causal_mask(12) & posemb.padding_mask([8], 12, side="left")},
            title="masks (blue: may attend)"),
    }


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "images"
    out.mkdir(parents=True, exist_ok=True)
    for name, fig in figures().items():
        path = out / name
        fig.savefig(path, dpi=80, pil_kwargs={"optimize": True})
        print(f"{path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
