"""Sphinx configuration: the API reference of posemb from its numpydoc docstrings.

Built in CI by .ci/docs.sh with -W (warnings are errors).
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))         # the checkout's posemb (built in place or installed -e)

import posemb  # noqa: E402

project = "posemb"
author = "posemb developers"
copyright = "posemb developers"
release = posemb.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True          # "Attributes" sections as fields, not duplicate targets
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": False, "undoc-members": False}
# type hints name things Sphinx need not resolve (numpy.typing aliases, torch internals)
nitpicky = False
intersphinx_mapping: dict[str, tuple[str, None]] = {}   # no network at build time
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
html_title = f"posemb {release}"


def _undocumented_names(app: object, docname: str, source: list[str]) -> None:
    """Keep the reference complete: any name in posemb.__all__ that api.rst
    does not document yet is appended under "Other" (a new public name is
    documented the moment it is exported)."""
    if docname != "api":
        return
    text = source[0]
    missing = [n for n in posemb.__all__
               if not n.startswith("__") and f":: {n}\n" not in text]
    if missing:
        lines = ["", "Other", "-----", ""]
        for n in missing:
            kind = "autoclass" if isinstance(getattr(posemb, n), type) else "autofunction"
            lines += [f".. {kind}:: {n}", ""]
        source[0] = text + "\n".join(lines)


def setup(app: object) -> None:
    app.connect("source-read", _undocumented_names)  # type: ignore[attr-defined]
