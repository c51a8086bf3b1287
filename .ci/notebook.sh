#!/usr/bin/env bash
# The tour notebook: committed without outputs, executed top to bottom in a
# fresh kernel (nbclient); any cell error fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
python - <<'PY'
import time

import nbclient
import nbformat

path = "examples/tour.ipynb"
nb = nbformat.read(path, as_version=4)
nbformat.validate(nb)
dirty = [i for i, c in enumerate(nb.cells)
         if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
assert not dirty, f"{path}: cells {dirty} have outputs; commit it stripped"
t0 = time.perf_counter()
client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                 resources={"metadata": {"path": "examples"}})
client.execute()       # raises CellExecutionError on the first failing cell
code = sum(c.cell_type == "code" for c in nb.cells)
errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
          if o.output_type == "error"]
assert not errors, errors
print(f"notebook: {path} ran {code} code cells without error "
      f"in {time.perf_counter() - t0:.1f}s")
PY
