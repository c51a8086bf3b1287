"""The package's shape: no import circle among posemb's modules (the RoPE
stack is _rope_scaling <- _rope <- _rope_variants <- _rope_module)."""
import ast
from pathlib import Path

import posemb

PKG = Path(posemb.__file__).resolve().parent


def _graph():
    deps = {}
    for p in PKG.glob("*.py"):
        out = set()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and n.level == 1:
                out |= {n.module.split(".")[0]} if n.module else {a.name for a in n.names}
        deps[p.stem] = out
    return deps


def test_no_import_circle():
    deps = _graph()
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(deps.get(m, ())):
            if d not in deps:
                continue
            assert state.get(d) != "open", " -> ".join(path + [d])
            if d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(deps):
        if m not in state:
            visit(m, [m])


def test_rope_stack_layers():
    deps = _graph()
    assert deps["_rope_scaling"] & {"_rope", "_rope_variants", "_rope_module"} == set()
    assert deps["_rope"] & {"_rope_variants", "_rope_module"} == set()
    assert "_rope_module" not in deps["_rope_variants"]


def test_one_module_talks_to_core():
    """Only posemb/_native.py imports the C extension."""
    importers = []
    for p in PKG.glob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            names = []
            if isinstance(n, ast.ImportFrom):
                names = [n.module or ""] + [a.name for a in n.names]
            elif isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            if any(x == "_core" or x.endswith("._core") for x in names):
                importers.append(p.name)
    assert sorted(set(importers)) == ["_native.py"]
