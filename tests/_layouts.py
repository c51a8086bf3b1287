"""Array layouts the hardening tests generate (bottleneck's ``tests/util.py`` habit).

``lay(a, dtype, layout)`` returns an array equal to ``a.astype(dtype)`` in
the given memory layout, so a test can feed the same values to a kernel in
every layout and compare against one oracle.
"""
import numpy as np

LAYOUTS = ("C", "F", "strided", "reversed", "transposed", "swapped", "readonly",
           "unaligned")


def lay(a, dtype, layout):
    a = np.asarray(a)
    dtype = np.dtype(dtype)
    v = np.array(a, dtype=dtype)          # C-contiguous copy of the values
    if layout == "C":
        return v
    if layout == "F":
        return np.asfortranarray(v)
    if layout == "strided":
        big = np.zeros(tuple(2 * n + 1 for n in v.shape), dtype)
        view = big[tuple(slice(1, None, 2) for _ in v.shape)]
        view[...] = v
        return view
    if layout == "reversed":
        rev = tuple(slice(None, None, -1) for _ in v.shape)
        return np.ascontiguousarray(v[rev])[rev]
    if layout == "transposed":
        return np.ascontiguousarray(v.T).T
    if layout == "swapped":
        return v.astype(dtype.newbyteorder())
    if layout == "readonly":
        v.flags.writeable = False
        return v
    if layout == "unaligned":
        if dtype.itemsize == 1 or v.size == 0:
            return v
        buf = np.zeros(v.nbytes + 1, np.uint8)
        u = buf[1:].view(dtype).reshape(v.shape)
        u[...] = v
        return u
    raise ValueError(layout)


def f64(a):
    """Values of a (any layout, dtype) as a C-contiguous float64 array."""
    return np.array(a, dtype=np.float64)


def eps(dtype):
    return float(np.finfo(np.dtype(dtype)).eps)
