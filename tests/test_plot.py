"""posemb.plot: each figure renders with Agg to a PNG of the expected size that
is not blank; the README's pictures are made by the script in the repo."""
import io
import pathlib
import runpy

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("PIL")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

import posemb
import posemb.plot

ROOT = pathlib.Path(__file__).resolve().parents[1]


def render(fig, dpi=50):
    assert isinstance(fig, Figure)
    FigureCanvasAgg(fig)                      # the Agg backend, whatever the default
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    data = buf.getvalue()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = fig.get_size_inches() * dpi
    assert img.size == (round(w), round(h))
    pixels = np.asarray(img).reshape(-1, 3)
    colours = np.unique(pixels, axis=0)
    assert len(colours) > 20, "image is (nearly) blank"
    # mostly not the white background: the heatmaps are drawn
    assert (pixels.min(axis=1) < 240).mean() > 0.2
    return img


def test_sinusoidal():
    fig = posemb.plot.sinusoidal(64, 32)
    render(fig)
    im = fig.axes[0].get_images()[0]
    np.testing.assert_array_equal(im.get_array(), posemb.sinusoidal(64, 32, dtype=np.float64))
    render(posemb.plot.sinusoidal(10, 7, layout="concat", start=100, figsize=(4, 3)))


def test_rope_frequencies():
    render(posemb.plot.rope_frequencies(64, 128))
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    fig = posemb.plot.rope_frequencies(64, 128, base=1e6, scaling=yarn)
    render(fig)
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert legend[0] == "plain" and legend[1].startswith("yarn (attention factor 1.14")


def test_bias_alibi_t5_masks():
    render(posemb.plot.bias(posemb.alibi_bias(12, 16, 16), title="ALiBi"))
    table = np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32)
    fig = posemb.plot.bias(posemb.t5_relative_bias(table, 8, 20)[None])   # HF's (1, H, q, k)
    assert [a.get_title() for a in fig.axes[:3]] == ["head 0", "head 1", "head 2"]
    render(fig)
    render(posemb.plot.bias(posemb.causal_mask(16)))
    additive = posemb.to_additive(posemb.causal_mask(16)) + posemb.alibi_bias([0.5], 16, 16)[0]
    render(posemb.plot.bias({"additive": additive, "mask": posemb.causal_mask(16, window=3)},
                            shared_scale=False))


def test_bias_rejects_bad_shapes():
    with pytest.raises(ValueError, match="query, key"):
        posemb.plot.bias(np.zeros(5))
    with pytest.raises(ValueError, match="matrix"):
        posemb.plot.bias({"x": np.zeros((2, 3, 3))})
    with pytest.raises(ValueError, match="empty"):
        posemb.plot.bias({})


def test_readme_image_script(tmp_path):
    mod = runpy.run_path(str(ROOT / "examples" / "make_readme_images.py"))
    assert mod["main"](["make_readme_images.py", str(tmp_path)]) == 0
    made = sorted(p.name for p in tmp_path.glob("*.png"))
    committed = sorted(p.name for p in (ROOT / "docs" / "images").glob("*.png"))
    assert made == committed and made
    readme = (ROOT / "README.md").read_text()
    for name in made:
        assert f"docs/images/{name}" in readme, f"README does not show {name}"
        for path in (tmp_path / name, ROOT / "docs" / "images" / name):
            assert 5_000 < path.stat().st_size < 100_000, path
            with Image.open(path) as img:
                assert img.size[0] >= 300 and img.size[1] >= 200



def test_notebooks_show_the_figures_as_png():
    # no %matplotlib and no pyplot: IPython calls _repr_png_
    png = posemb.plot.bias(posemb.causal_mask(4))._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
