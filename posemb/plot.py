"""Pictures of positional embeddings (needs matplotlib: ``pip install "posemb[plot]"``).

Each function returns a :class:`matplotlib.figure.Figure` made without
pyplot (no global state, any backend): a notebook shows it as the cell's
value, and ``fig.savefig("name.png")`` writes it to a file.
``import posemb`` alone never imports matplotlib.

Examples
--------
>>> import io, posemb.plot
>>> fig = posemb.plot.sinusoidal(64, 32)
>>> buf = io.BytesIO(); fig.savefig(buf, format="png"); buf.getvalue()[:4]
b'\\x89PNG'
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

try:
    import matplotlib
    from matplotlib import colors
    from matplotlib.figure import Figure
except ImportError as e:  # pragma: no cover - exercised only without matplotlib
    raise ImportError(
        "posemb.plot needs matplotlib: pip install \"posemb[plot]\" "
        "(the rest of posemb works without it)") from e

import posemb

__all__ = ["sinusoidal", "rope_frequencies", "bias"]


class _Figure(Figure):
    """A Figure that a notebook shows as a PNG with no ``%matplotlib`` setup:
    figures made without pyplot get no display hook from the inline backend
    until pyplot is imported."""

    def _repr_png_(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()


def sinusoidal(seq_len: int = 100, dim: int = 128, *, base: float = 10000.0,
               layout: str = "interleaved", start: int = 0,
               figsize: tuple[float, float] = (7.0, 3.6), cmap: str = "RdBu_r") -> Figure:
    """Heatmap of the sinusoidal table, positions down and features across.

    The picture PositionalEmbeddings.jl shows for ``AbsolutePE``: fast
    sin/cos stripes in the first features, slow ones to the right (the
    wavelengths grow geometrically from ``2*pi`` to ``base * 2*pi``).  Values
    are :func:`posemb.sinusoidal` in float64.

    Parameters
    ----------
    seq_len, dim : int
        Positions (rows) and features (columns).
    base : float
    layout : {"interleaved", "concat"}
    start : int
        First position.
    figsize : (float, float)
        Inches.
    cmap : str
        A matplotlib colormap name (diverging: values are in ``[-1, 1]``).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import posemb.plot
    >>> fig = posemb.plot.sinusoidal(100, 64, layout="concat")
    >>> fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()
    ('feature', 'position')
    """
    table = posemb.sinusoidal(seq_len, dim, base=base, start=start, layout=layout,
                              dtype=np.float64)
    fig = _Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(table, aspect="auto", cmap=cmap, vmin=-1.0, vmax=1.0,
                   interpolation="nearest",
                   extent=(-0.5, dim - 0.5, start + seq_len - 0.5, start - 0.5))
    ax.set_xlabel("feature")
    ax.set_ylabel("position")
    ax.set_title(f"sinusoidal position encoding ({layout}, dim {dim}, base {base:g})")
    fig.colorbar(im, ax=ax, label="value")
    return fig


def rope_frequencies(dim: int = 128, seq_len: int = 512, *, base: float = 10000.0,
                     scaling: Mapping[str, Any] | None = None,
                     max_position_embeddings: int | None = None,
                     figsize: tuple[float, float] = (10.0, 3.8)) -> Figure:
    """RoPE's angles per dimension and position, and the wavelength per pair.

    Left: ``cos(p * inv_freq[i])`` for positions ``p < seq_len`` (rows) and
    pair index ``i`` (columns) -- the rotation each position gives each
    pair, like the angle charts of "LLaMA Nuts and Bolts" (chapter 10, RoPE): the first
    pairs turn fast, the last barely move.  Right: each pair's wavelength
    ``2*pi / inv_freq[i]`` in positions (log scale), and with ``scaling`` (a
    transformers ``rope_scaling`` dict) the scaled wavelengths beside the
    plain ones, with the original context length marked.

    Parameters
    ----------
    dim : int
        Rotary width (even).
    seq_len : int
        Positions in the heatmap.
    base : float
        ``rope_theta``.
    scaling : dict, optional
        See :func:`posemb.rope_scaling_parameters`; the heatmap then uses the
        scaled frequencies (and the attention factor is printed in the legend).
    max_position_embeddings : int, optional
        For the scaling types that need it.
    figsize : (float, float)

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import posemb.plot
    >>> llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    >>> fig = posemb.plot.rope_frequencies(128, 256, base=500000.0, scaling=llama3)
    >>> len(fig.axes)                           # heatmap, wavelengths, colorbar
    3
    """
    plain = posemb.rope_inv_freq(dim, base)
    inv, attn = posemb.rope_scaling_parameters(
        dim, base, scaling, max_position_embeddings=max_position_embeddings, seq_len=seq_len)
    seq_len = posemb._checks.size(seq_len, "seq_len")
    angle = np.outer(np.arange(seq_len, dtype=np.float64), inv)
    fig = _Figure(figsize=figsize, layout="constrained")
    ax_map, ax_wl = fig.subplots(1, 2, width_ratios=(1.25, 1.0))
    im = ax_map.imshow(np.cos(angle), aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0,
                       interpolation="nearest",
                       extent=(-0.5, dim // 2 - 0.5, seq_len - 0.5, -0.5))
    ax_map.set_xlabel("pair index i")
    ax_map.set_ylabel("position p")
    scaled = "" if scaling is None else f", {dict(scaling).get('rope_type', dict(scaling).get('type'))}"
    ax_map.set_title(rf"$\cos(p\,\theta_i)$, dim {dim}, base {base:g}{scaled}")
    fig.colorbar(im, ax=ax_map)

    i = np.arange(dim // 2)
    ax_wl.semilogy(i, 2 * np.pi / plain, label="plain", color="tab:blue")
    if scaling is not None:
        name = dict(scaling).get("rope_type", dict(scaling).get("type", "scaled"))
        label = f"{name}" + (f" (attention factor {attn:.3g})" if attn != 1.0 else "")
        ax_wl.semilogy(i, 2 * np.pi / inv, label=label, color="tab:orange", linestyle="--")
        orig = dict(scaling).get("original_max_position_embeddings", max_position_embeddings)
        if orig:
            ax_wl.axhline(float(orig), color="gray", linewidth=0.8, linestyle=":")
            ax_wl.annotate(f"original context {orig}", (0, float(orig)), fontsize=8,
                           color="gray", xytext=(2, 3), textcoords="offset points")
    ax_wl.set_xlabel("pair index i")
    ax_wl.set_ylabel(r"wavelength $2\pi/\theta_i$ (positions)")
    ax_wl.set_title("wavelength per pair")
    ax_wl.grid(True, which="major", alpha=0.3)
    ax_wl.legend(loc="upper left", fontsize=8)
    return fig


def _panels(values: Any, max_heads: int) -> list[tuple[str, np.ndarray]]:
    """(title, 2-D matrix) panels from a matrix, a (heads, q, k) stack or a mapping."""
    if isinstance(values, Mapping):
        out = []
        for title, v in values.items():
            a = np.asarray(v)
            if a.ndim == 3 and a.shape[0] == 1:
                a = a[0]
            if a.ndim != 2:
                raise ValueError(f"values[{title!r}] must be a (query, key) matrix, "
                                 f"got shape {a.shape}")
            out.append((str(title), a))
        if not out:
            raise ValueError("values is an empty mapping")
        return out
    a = np.asarray(values)
    if a.ndim == 4 and a.shape[0] == 1:            # HF's (1, heads, q, k)
        a = a[0]
    if a.ndim == 2:
        return [("", a)]
    if a.ndim != 3:
        raise ValueError(f"values must be (query, key) or (heads, query, key), got shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError("values has no heads")
    max_heads = posemb._checks.size(max_heads, "max_heads", minimum=1)
    heads: Sequence[int] = range(a.shape[0])
    if a.shape[0] > max_heads:
        heads = sorted(set(np.linspace(0, a.shape[0] - 1, max_heads).round().astype(int).tolist()))
    return [(f"head {h}", a[h]) for h in heads]


def bias(values: Any, *, title: str | None = None, max_heads: int = 4,
         cmap: str | None = None, shared_scale: bool = True,
         panel_size: float = 2.6) -> Figure:
    """Heatmaps of attention biases or masks, queries down and keys across.

    ``values`` is a ``(query, key)`` matrix, a ``(heads, query, key)`` stack
    (:func:`posemb.alibi_bias`, :func:`posemb.t5_relative_bias`; at most
    ``max_heads`` heads are drawn, evenly spaced), or a mapping of panel
    titles to matrices (to put masks side by side).  Boolean masks (True =
    may attend, as :func:`posemb.causal_mask`) are drawn in two colours;
    ``-inf`` entries (additive masks, a bias with a mask added) are drawn
    gray.  Float panels share one colour scale unless ``shared_scale=False``
    (ALiBi's later heads are nearly flat on the first head's scale).

    Parameters
    ----------
    values : array_like, or mapping of str to array_like
    title : str, optional
        Figure title.
    max_heads : int
    cmap : str, optional
        Colormap for float values (default ``"viridis"``).
    shared_scale : bool
        One colour scale (and colorbar) for all float panels, or one each.
    panel_size : float
        Inches per panel.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import posemb, posemb.plot
    >>> fig = posemb.plot.bias(posemb.alibi_bias(8, 16, 16), title="ALiBi, 8 heads")
    >>> [ax.get_title() for ax in fig.axes[:4]]
    ['head 0', 'head 2', 'head 5', 'head 7']
    >>> fig = posemb.plot.bias({"causal": posemb.causal_mask(8),
    ...                         "window 3": posemb.causal_mask(8, window=3)})
    >>> len(fig.axes)
    2
    """
    panels = _panels(values, max_heads)
    is_mask = [p.dtype == np.bool_ for _, p in panels]
    floats = [p.astype(np.float64) for (_, p), m in zip(panels, is_mask) if not m]
    finite = [f[np.isfinite(f)] for f in floats]
    lo = min((float(f.min()) for f in finite if f.size), default=0.0)
    hi = max((float(f.max()) for f in finite if f.size), default=1.0)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    n = len(panels)
    bar = 0.9 if floats and shared_scale else 0.6 * len(floats)
    fig = _Figure(figsize=(panel_size * n + bar + 0.2, panel_size + 0.6), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    scale = colors.Normalize(lo, hi)
    float_cmap = matplotlib.colormaps[cmap or "viridis"].with_extremes(bad="0.85")
    mask_cmap = colors.ListedColormap(["0.9", "tab:blue"])
    im = None
    for ax, (name, p), m in zip(axes, panels, is_mask):
        q, k = p.shape
        extent = (-0.5, k - 0.5, q - 0.5, -0.5)
        if m:
            ax.imshow(p.astype(np.uint8), cmap=mask_cmap, vmin=0, vmax=1, aspect="equal",
                      interpolation="nearest", extent=extent)
        else:
            f = np.where(np.isfinite(p), p.astype(np.float64), np.nan)
            norm = scale
            if not shared_scale:
                ok = f[np.isfinite(f)]
                a, b = (float(ok.min()), float(ok.max())) if ok.size else (0.0, 1.0)
                norm = colors.Normalize(a, b) if a < b else colors.Normalize(a - 0.5, b + 0.5)
            im = ax.imshow(np.ma.masked_invalid(f), cmap=float_cmap, norm=norm, aspect="equal",
                           interpolation="nearest", extent=extent)
            if not shared_scale:
                fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("key", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("query", fontsize=8)
    if im is not None and shared_scale:
        fig.colorbar(im, ax=list(axes), shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig
