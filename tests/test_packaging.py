"""The sdist holds every source the build needs, builds a wheel on its own, and
carries the project's metadata (version from posemb.__version__, extras, URLs)."""
import email
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

import posemb

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD_FILES = ["setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"]


BUILD_OUTPUTS = (".so", ".o", ".pyd", ".pyc", ".pyo")


def git_files(*paths):
    """The tracked files under paths; in a copy of the tree without .git (as
    .ci/sanitize.sh makes from `git ls-files`), the files on disk there that
    are not build outputs."""
    if shutil.which("git") is not None and (ROOT / ".git").exists():
        out = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        return set(out.stdout.split())
    found = set()
    for top in paths:
        for f in (ROOT / top).rglob("*"):
            rel = f.relative_to(ROOT)
            if f.is_file() and "__pycache__" not in rel.parts and not f.name.endswith(BUILD_OUTPUTS):
                found.add(rel.as_posix())
    return found


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    pytest.importorskip("build")         # python -m build (the test extra has it)
    out = tmp_path_factory.mktemp("sdist")
    # the build requirements (setuptools, numpy) are installed: no isolated env to fetch
    proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation",
                           "--outdir", str(out), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = out.glob("posemb-*.tar.gz")
    return path


def members(path):
    with tarfile.open(path) as tar:
        names = tar.getnames()
    top = f"posemb-{posemb.__version__}/"
    assert all(n == top.rstrip("/") or n.startswith(top) for n in names), names[:5]
    return {n[len(top):] for n in names if n.startswith(top)}


def test_sdist_has_every_source(sdist):
    have = members(sdist)
    # the sources, and what the tests read (they must pass from the unpacked sdist)
    want = git_files("src", "posemb", "tests", "examples", "docs", "benchmarks") | set(BUILD_FILES)
    assert want, "git ls-files found nothing"
    missing = sorted(want - have)
    assert not missing, f"the sdist lacks {missing}"
    assert {"posemb/py.typed", "posemb/_core.pyi", "posemb/torch.py", "posemb/plot.py"} <= have
    built = sorted(n for n in have if n.endswith(BUILD_OUTPUTS))
    assert not built, f"build outputs in the sdist: {built}"


def test_sdist_metadata(sdist):
    with tarfile.open(sdist) as tar:
        pkg_info = tar.extractfile(f"posemb-{posemb.__version__}/PKG-INFO").read().decode()
    meta = email.message_from_string(pkg_info)
    assert meta["Name"] == "posemb"
    assert meta["Version"] == posemb.__version__          # single-sourced
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.10"
    assert set(meta.get_all("Provides-Extra")) >= {"torch", "plot", "test", "docs"}
    requires = meta.get_all("Requires-Dist")
    assert 'torch==2.13.0; extra == "torch"' in requires
    assert 'torch==2.13.0; extra == "test"' in requires
    assert any(r.startswith("matplotlib") and 'extra == "plot"' in r for r in requires)
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Programming Language :: C" in classifiers
    assert len(meta.get_all("Project-URL")) >= 3
    assert "posemb" in meta.get_payload()                 # the README is the description


@pytest.mark.slow
def test_sdist_alone_builds_a_wheel(sdist, tmp_path):
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path, filter="data")
        else:  # pragma: no cover - Python < 3.10.12
            tar.extractall(tmp_path)
    src = tmp_path / f"posemb-{posemb.__version__}"
    assert not (src / ".git").exists()
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                           "--outdir", str(tmp_path / "dist"), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("posemb-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert any(n.startswith("posemb/_core.") and n.endswith((".so", ".pyd")) for n in names)
    assert {"posemb/py.typed", "posemb/_core.pyi", "posemb/torch.py", "posemb/plot.py"} <= names
    py = {f for f in git_files("posemb") if f.endswith(".py")}
    assert py <= names, sorted(py - names)
