"""The full benchmark suite: every kernel family, full-size shapes.

    python benchmarks/run.py [--json] [--repeat N] [--threads N] [--family rope ...]

The same harness as ``python -m posemb bench`` (posemb/_bench.py): posemb's
time, the PyTorch formula's, the NumPy formula's and the machine's streaming
limit on the same thread pool, as medians and ratios measured in one run.
"""
import sys

from posemb._bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
