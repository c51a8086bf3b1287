/*
 * module.c - the one binding file: registers posemb's plain-C kernels with
 * CPython and the NumPy C API as posemb._core.
 *
 * Vector ops are real generalized ufuncs, so broadcasting, out=, axes=,
 * dtype dispatch and __array_ufunc__ (dask) come from NumPy.  Core
 * dimensions are checked by process_core_dims_func (NumPy >= 2.1) before
 * any loop runs; the loops themselves never fail and never need the GIL.
 * Table generators are plain functions over C-contiguous buffers that the
 * Python layer allocates; they check every argument before touching memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include "posemb.h"

/* ------------------------------------------------------------------ */
/* Shared: gufunc creation and argument checks                          */
/* ------------------------------------------------------------------ */

/*
 * Make a gufunc with ntypes loops and add it to the module: funcs[i] is
 * called with data[i] = &kernels[i] (an array of kernel_size-byte structs
 * naming the C kernel), types is ntypes rows of nin + nout type numbers;
 * check (may be NULL) validates core dims before any loop runs.  NumPy's default operand flags
 * treat an output that is exactly an input (out=x) as elementwise, so that
 * call runs in place with no copy; this is safe because every kernel reads
 * a pair before writing it.  Any other overlap makes NumPy copy first.
 */
static int
add_gufunc(PyObject *module, const char *name, const char *doc,
           PyUFuncGenericFunction *funcs, void **data, const void *kernels,
           size_t kernel_size, int ntypes, const char *types, int nin,
           int nout, const char *signature, PyUFunc_ProcessCoreDimsFunc *check)
{
    PyUFuncObject *uf;
    int i, rc;

    for (i = 0; i < ntypes; i++)
        data[i] = (void *)((const char *)kernels + (size_t)i * kernel_size);
    uf = (PyUFuncObject *)PyUFunc_FromFuncAndDataAndSignature(
        funcs, data, (char *)types, ntypes, nin, nout, PyUFunc_None, name,
        doc, 0, signature);
    if (uf == NULL)
        return -1;
    uf->process_core_dims_func = check;
    rc = PyModule_AddObject(module, name, (PyObject *)uf);
    if (rc < 0)
        Py_DECREF(uf);
    return rc;
}

/*
 * Argument checks for the plain-function bindings (each raises an error
 * naming the argument and returns -1, or returns 0).  PE_ANY_FLOAT as a
 * type number accepts float16, float32 and float64.
 */
#define PE_ANY_FLOAT (-1)

static const char *
type_name(int typenum)
{
    switch (typenum) {
    case NPY_HALF: return "float16";
    case NPY_FLOAT: return "float32";
    case NPY_DOUBLE: return "float64";
    case NPY_INT64: return "int64";
    case PE_ANY_FLOAT: return "float16, float32 or float64";
    default: return "another dtype";
    }
}

/* The float type number of an ndarray (float16 only if allow_half), or -1. */
static int
float_type_of(PyObject *obj, const char *name, int allow_half)
{
    int t;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray", name);
        return -1;
    }
    t = PyArray_TYPE((PyArrayObject *)obj);
    if (t == NPY_FLOAT || t == NPY_DOUBLE || (allow_half && t == NPY_HALF))
        return t;
    PyErr_Format(PyExc_TypeError, "%s must have dtype %s", name,
                 allow_half ? "float16, float32 or float64"
                            : "float32 or float64");
    return -1;
}

/* An aligned ndarray of the dtype (native byte order) and rank, any strides. */
static int
check_strided(PyObject *obj, const char *name, int typenum, int ndim,
              int writeable)
{
    PyArrayObject *a;
    int t;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray", name);
        return -1;
    }
    a = (PyArrayObject *)obj;
    t = PyArray_TYPE(a);
    if ((typenum == PE_ANY_FLOAT ? (t != NPY_HALF && t != NPY_FLOAT && t != NPY_DOUBLE)
                                 : t != typenum) ||
        !PyArray_ISNBO(PyArray_DESCR(a)->byteorder)) {
        PyErr_Format(PyExc_TypeError, "%s must have dtype %s in native byte order",
                     name, type_name(typenum));
        return -1;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must have %d dimension(s), got %d",
                     name, ndim, PyArray_NDIM(a));
        return -1;
    }
    if (!PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be aligned", name);
        return -1;
    }
    if (writeable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be writeable", name);
        return -1;
    }
    return 0;
}

/* As check_strided, and C-contiguous. */
static int
check_array(PyObject *obj, const char *name, int typenum, int ndim,
            int writeable)
{
    if (check_strided(obj, name, typenum, ndim, writeable) < 0)
        return -1;
    if (!PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj)) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous", name);
        return -1;
    }
    return 0;
}

/* The byte range [lo, hi) an array can touch; empty for a size-0 array. */
static void
array_extent(PyArrayObject *a, char **lo, char **hi)
{
    char *l = PyArray_BYTES(a), *h = PyArray_BYTES(a);
    int i;
    if (PyArray_SIZE(a) == 0) {
        *lo = *hi = l;
        return;
    }
    for (i = 0; i < PyArray_NDIM(a); i++) {
        const npy_intp span = (PyArray_DIM(a, i) - 1) * PyArray_STRIDE(a, i);
        if (span < 0)
            l += span;
        else
            h += span;
    }
    *lo = l;
    *hi = h + PyArray_ITEMSIZE(a);
}

/* May a and b share memory?  Conservative: compares byte extents. */
static int
extents_overlap(PyArrayObject *a, PyArrayObject *b)
{
    char *alo, *ahi, *blo, *bhi;
    array_extent(a, &alo, &ahi);
    array_extent(b, &blo, &bhi);
    return alo < bhi && blo < ahi && alo != ahi && blo != bhi;
}

/* a and b must not share memory (conservative: byte extents) */
static int
check_disjoint(PyObject *a, const char *na, PyObject *b, const char *nb)
{
    if (extents_overlap((PyArrayObject *)a, (PyArrayObject *)b)) {
        PyErr_Format(PyExc_ValueError, "%s and %s must not share memory", na, nb);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* RoPE: apply gufuncs, rotate_half, tables                             */
/* ------------------------------------------------------------------ */

typedef struct { pe_rope_fn fn; npy_intp itemsize; } rope_kernel;
typedef struct { void (*fn)(const pe_unary_loop *); } unary_kernel;

/* signature (d),(r),(r)->(d); dims = {n, d, r}; 4 outer + 4 core steps */
static void
rope_loop(char **args, npy_intp const *dims, npy_intp const *steps,
          void *data)
{
    pe_rope_loop L;
    L.n = dims[0];
    L.d = dims[1];
    L.r = dims[2];
    L.x = args[0];
    L.cos = args[1];
    L.sin = args[2];
    L.y = args[3];
    L.x_step = steps[0];
    L.cos_step = steps[1];
    L.sin_step = steps[2];
    L.y_step = steps[3];
    L.x_inner = steps[4];
    L.cos_inner = steps[5];
    L.sin_inner = steps[6];
    L.y_inner = steps[7];
    pe_rope_parallel(((const rope_kernel *)data)->fn, &L,
                     ((const rope_kernel *)data)->itemsize);
}

/* signature (d)->(d); dims = {n, d}; 2 outer + 2 core steps */
static void
unary_loop(char **args, npy_intp const *dims, npy_intp const *steps,
           void *data)
{
    pe_unary_loop L;
    L.n = dims[0];
    L.d = dims[1];
    L.x = args[0];
    L.y = args[1];
    L.x_step = steps[0];
    L.y_step = steps[1];
    L.x_inner = steps[2];
    L.y_inner = steps[3];
    ((const unary_kernel *)data)->fn(&L);
}

/*
 * Core dims of (d),(r),(r)->(d): the table width r must not exceed d.  An
 * odd r is allowed here (its unpaired feature is copied) because dask
 * probes gufuncs with every dimension 1; posemb.apply_rope refuses it.
 */
static int
rope_core_dims(PyUFuncObject *ufunc, npy_intp *core)
{
    const npy_intp d = core[0], r = core[1];
    if (r > d) {
        PyErr_Format(PyExc_ValueError,
                     "%s: cos/sin width (last axis, %zd) must not exceed "
                     "x's last axis (%zd)",
                     ufunc->name, (Py_ssize_t)r, (Py_ssize_t)d);
        return -1;
    }
    return 0;
}

/* Core dim of (d)->(d) for rotate_half: d is even. */
static int
even_core_dim(PyUFuncObject *ufunc, npy_intp *core)
{
    if (core[0] % 2 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the rotated axis must have even length, got %zd",
                     ufunc->name, (Py_ssize_t)core[0]);
        return -1;
    }
    return 0;
}

static const rope_kernel rope_half_fwd[3] = {{pe_rope_half_fwd_f16, 2},
                                             {pe_rope_half_fwd_f32, 4},
                                             {pe_rope_half_fwd_f64, 8}};
static const rope_kernel rope_half_back[3] = {{pe_rope_half_back_f16, 2},
                                              {pe_rope_half_back_f32, 4},
                                              {pe_rope_half_back_f64, 8}};
static const rope_kernel rope_inter_fwd[3] = {{pe_rope_inter_fwd_f16, 2},
                                              {pe_rope_inter_fwd_f32, 4},
                                              {pe_rope_inter_fwd_f64, 8}};
static const rope_kernel rope_inter_back[3] = {{pe_rope_inter_back_f16, 2},
                                               {pe_rope_inter_back_f32, 4},
                                               {pe_rope_inter_back_f64, 8}};
/* bfloat16 as uint16 bit patterns (posemb.torch's bfloat16 tensors) */
static const rope_kernel rope_bf16_k[4] = {{pe_rope_half_fwd_bf16, 2},
                                           {pe_rope_half_back_bf16, 2},
                                           {pe_rope_inter_fwd_bf16, 2},
                                           {pe_rope_inter_back_bf16, 2}};
static const char rope_bf16_types[4] = {NPY_UINT16, NPY_UINT16, NPY_UINT16, NPY_UINT16};
static void *rope_bf16_data[4][1];
/* by kind: 0 half fwd, 1 half back, 2 interleaved fwd, 3 interleaved back */
static const rope_kernel *const rope_by_kind[4] = {
    rope_half_fwd, rope_half_back, rope_inter_fwd, rope_inter_back};
static const unary_kernel rotate_half_k[3] = {
    {pe_rotate_half_f16}, {pe_rotate_half_f32}, {pe_rotate_half_f64}};

static PyUFuncGenericFunction rope_funcs[3] = {rope_loop, rope_loop, rope_loop};
static PyUFuncGenericFunction unary_funcs[3] = {unary_loop, unary_loop,
                                                unary_loop};
static const char rope_types[12] = {
    NPY_HALF, NPY_HALF, NPY_HALF, NPY_HALF,
    NPY_FLOAT, NPY_FLOAT, NPY_FLOAT, NPY_FLOAT,
    NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE};
static const char unary_types[6] = {NPY_HALF, NPY_HALF, NPY_FLOAT, NPY_FLOAT,
                                     NPY_DOUBLE, NPY_DOUBLE};

/* NumPy keeps the data pointers it is given: one static array per ufunc. */
static void *rope_half_fwd_data[3], *rope_half_back_data[3],
    *rope_inter_fwd_data[3], *rope_inter_back_data[3], *rotate_half_data[3];

/*
 * _rope_table(positions, inv_freq, attention_scale, interleaved, cos, sin)
 * positions: int64 (n,); inv_freq: float64 (h,); cos, sin: float32 or
 * float64 (n, 2h), C-contiguous, writeable, not overlapping the inputs.
 */
static PyObject *
py_rope_table(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *pos_o, *inv_o, *cos_o, *sin_o;
    double attn;
    int interleaved, typenum;
    npy_intp n, h, i;
    const npy_int64 *pos;

    if (!PyArg_ParseTuple(args, "OOdpOO:_rope_table", &pos_o, &inv_o, &attn,
                          &interleaved, &cos_o, &sin_o))
        return NULL;
    if (check_array(pos_o, "positions", NPY_INT64, 1, 0) < 0 ||
        check_array(inv_o, "inv_freq", NPY_DOUBLE, 1, 0) < 0)
        return NULL;
    if (!PyArray_Check(cos_o)) {
        PyErr_SetString(PyExc_TypeError, "cos must be a numpy.ndarray");
        return NULL;
    }
    typenum = PyArray_TYPE((PyArrayObject *)cos_o);
    if (typenum != NPY_FLOAT && typenum != NPY_DOUBLE) {
        PyErr_SetString(PyExc_TypeError, "cos must be float32 or float64");
        return NULL;
    }
    if (check_array(cos_o, "cos", typenum, 2, 1) < 0 ||
        check_array(sin_o, "sin", typenum, 2, 1) < 0)
        return NULL;
    n = PyArray_DIM((PyArrayObject *)pos_o, 0);
    h = PyArray_DIM((PyArrayObject *)inv_o, 0);
    for (i = 0; i < 2; i++) {
        PyArrayObject *t = (PyArrayObject *)(i ? sin_o : cos_o);
        if (PyArray_DIM(t, 0) != n || PyArray_DIM(t, 1) != 2 * h) {
            PyErr_Format(PyExc_ValueError,
                         "%s must have shape (%zd, %zd)", i ? "sin" : "cos",
                         (Py_ssize_t)n, (Py_ssize_t)(2 * h));
            return NULL;
        }
    }
    if (check_disjoint(cos_o, "cos", sin_o, "sin") < 0 ||
        check_disjoint(cos_o, "cos", pos_o, "positions") < 0 ||
        check_disjoint(cos_o, "cos", inv_o, "inv_freq") < 0 ||
        check_disjoint(sin_o, "sin", pos_o, "positions") < 0 ||
        check_disjoint(sin_o, "sin", inv_o, "inv_freq") < 0)
        return NULL;
    pos = (const npy_int64 *)PyArray_DATA((PyArrayObject *)pos_o);
    for (i = 0; i < n; i++) {
        /* positions must be exact as float64 */
        if (pos[i] > ((npy_int64)1 << 53) || pos[i] < -((npy_int64)1 << 53)) {
            PyErr_Format(PyExc_ValueError,
                         "positions must satisfy |p| <= 2**53, got %lld",
                         (long long)pos[i]);
            return NULL;
        }
    }

    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        pe_rope_table_f32(n, pos, h,
                          (const double *)PyArray_DATA((PyArrayObject *)inv_o),
                          attn, interleaved,
                          (float *)PyArray_DATA((PyArrayObject *)cos_o),
                          (float *)PyArray_DATA((PyArrayObject *)sin_o));
    else
        pe_rope_table_f64(n, pos, h,
                          (const double *)PyArray_DATA((PyArrayObject *)inv_o),
                          attn, interleaved,
                          (double *)PyArray_DATA((PyArrayObject *)cos_o),
                          (double *)PyArray_DATA((PyArrayObject *)sin_o));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}


static PyObject *
py_rope_grid(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *xo, *co, *so, *yo;
    PyArrayObject *x, *c, *s, *y;
    int kind, typenum, k, t, simd = 3;
    const rope_kernel *kern;
    pe_rope_grid g;

    if (!PyArg_ParseTuple(args, "iOOOO|i:_rope_grid", &kind, &xo, &co, &so, &yo,
                          &simd))
        return NULL;
    if (kind < 0 || kind > 3) {
        PyErr_SetString(PyExc_ValueError, "kind must be 0..3");
        return NULL;
    }
    if (!PyArray_Check(xo)) {
        PyErr_SetString(PyExc_TypeError, "x must be a numpy.ndarray");
        return NULL;
    }
    typenum = PyArray_TYPE((PyArrayObject *)xo);
    k = typenum == NPY_HALF ? 0 : typenum == NPY_FLOAT ? 1
        : typenum == NPY_DOUBLE ? 2 : -1;
    if (k < 0) {
        PyErr_SetString(PyExc_TypeError, "x must be float16, float32 or float64");
        return NULL;
    }
    if (check_strided(xo, "x", typenum, 4, 0) < 0 ||
        check_strided(co, "cos", typenum, 4, 0) < 0 ||
        check_strided(so, "sin", typenum, 4, 0) < 0 ||
        check_strided(yo, "out", typenum, 4, 1) < 0)
        return NULL;
    x = (PyArrayObject *)xo;
    c = (PyArrayObject *)co;
    s = (PyArrayObject *)so;
    y = (PyArrayObject *)yo;
    for (t = 0; t < 4; t++) {
        if (PyArray_DIM(y, t) != PyArray_DIM(x, t)) {
            PyErr_SetString(PyExc_ValueError, "out must have x's shape");
            return NULL;
        }
    }
    for (t = 0; t < 2; t++) {
        PyArrayObject *tab = t ? s : c;
        const char *nm = t ? "sin" : "cos";
        if (PyArray_DIM(tab, 1) != 1 ||
            (PyArray_DIM(tab, 0) != 1 && PyArray_DIM(tab, 0) != PyArray_DIM(x, 0)) ||
            (PyArray_DIM(tab, 2) != 1 && PyArray_DIM(tab, 2) != PyArray_DIM(x, 2))) {
            PyErr_Format(PyExc_ValueError,
                         "%s must have shape (1|B, 1, 1|S, r) for x of shape (B, H, S, d)",
                         nm);
            return NULL;
        }
    }
    g.B = PyArray_DIM(x, 0);
    g.H = PyArray_DIM(x, 1);
    g.S = PyArray_DIM(x, 2);
    g.d = PyArray_DIM(x, 3);
    g.r = PyArray_DIM(c, 3);
    if (PyArray_DIM(s, 3) != g.r || g.r % 2 != 0 || g.r > g.d) {
        PyErr_SetString(PyExc_ValueError,
                        "cos/sin width must be equal, even and at most x's last axis");
        return NULL;
    }
    /* out is x itself, or shares no memory with any input */
    if (!(PyArray_DATA(y) == PyArray_DATA(x) &&
          PyArray_STRIDE(y, 0) == PyArray_STRIDE(x, 0) &&
          PyArray_STRIDE(y, 1) == PyArray_STRIDE(x, 1) &&
          PyArray_STRIDE(y, 2) == PyArray_STRIDE(x, 2) &&
          PyArray_STRIDE(y, 3) == PyArray_STRIDE(x, 3))) {
        if (extents_overlap(y, x)) {
            PyErr_SetString(PyExc_ValueError, "out overlaps x");
            return NULL;
        }
    }
    if (extents_overlap(y, c) || extents_overlap(y, s)) {
        PyErr_SetString(PyExc_ValueError, "out overlaps cos or sin");
        return NULL;
    }
    g.x = PyArray_BYTES(x);
    g.y = PyArray_BYTES(y);
    g.cos = PyArray_BYTES(c);
    g.sin = PyArray_BYTES(s);
    g.x_b = PyArray_STRIDE(x, 0);
    g.x_h = PyArray_STRIDE(x, 1);
    g.x_s = PyArray_STRIDE(x, 2);
    g.x_inner = PyArray_STRIDE(x, 3);
    g.y_b = PyArray_STRIDE(y, 0);
    g.y_h = PyArray_STRIDE(y, 1);
    g.y_s = PyArray_STRIDE(y, 2);
    g.y_inner = PyArray_STRIDE(y, 3);
    g.cos_b = PyArray_DIM(c, 0) == 1 ? 0 : PyArray_STRIDE(c, 0);
    g.cos_s = PyArray_DIM(c, 2) == 1 ? 0 : PyArray_STRIDE(c, 2);
    g.cos_inner = PyArray_STRIDE(c, 3);
    g.sin_b = PyArray_DIM(s, 0) == 1 ? 0 : PyArray_STRIDE(s, 0);
    g.sin_s = PyArray_DIM(s, 2) == 1 ? 0 : PyArray_STRIDE(s, 2);
    g.sin_inner = PyArray_STRIDE(s, 3);
    kern = &rope_by_kind[kind][k];
    Py_BEGIN_ALLOW_THREADS
    {
        /* f32/f64: SIMD kernels, duplicated half-split tables */
        if (k > 0)
            pe_rope_grid_fast(&g, kind, kern->itemsize, simd);
        else
            pe_rope_grid_run(kern->fn, &g, kern->itemsize);
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(yo);
    return yo;
}

/* set_num_threads(n) -> n actually used; get_num_threads() */
static PyObject *
py_set_num_threads(PyObject *Py_UNUSED(self), PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 1");
        return NULL;
    }
    return PyLong_FromLong(pe_set_num_threads(n > 1024 ? 1024 : (int)n));
}

static PyObject *
py_get_num_threads(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(arg))
{
    return PyLong_FromLong(pe_get_num_threads());
}

/* _stream(kind, a, b): the benchmarks' bandwidth limit on the pool.
 * kind "scale": a *= 1 in place; "fill": a[:] = 0; "copy": b[:] = a;
 * "read": sum a (read only).
 * a, b: C-contiguous float32 arrays (b writeable, same size, disjoint). */
static PyObject *
py_stream(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *kind;
    PyObject *ao, *bo = Py_None;
    PyArrayObject *a;
    if (!PyArg_ParseTuple(args, "sO|O:_stream", &kind, &ao, &bo))
        return NULL;
    if (check_array(ao, "a", NPY_FLOAT, PyArray_Check(ao) ?
                    PyArray_NDIM((PyArrayObject *)ao) : 1, 0) < 0)
        return NULL;
    a = (PyArrayObject *)ao;
    if (strcmp(kind, "copy") == 0) {
        PyArrayObject *b;
        if (check_array(bo, "b", NPY_FLOAT, PyArray_Check(bo) ?
                        PyArray_NDIM((PyArrayObject *)bo) : 1, 1) < 0)
            return NULL;
        b = (PyArrayObject *)bo;
        if (PyArray_NBYTES(b) != PyArray_NBYTES(a) ||
            extents_overlap(a, b)) {
            PyErr_SetString(PyExc_ValueError, "b must match a's size, disjoint");
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        pe_stream_copy(PyArray_NBYTES(a), PyArray_DATA(a), PyArray_DATA(b));
        Py_END_ALLOW_THREADS
    } else if (strcmp(kind, "read") == 0) {
        Py_BEGIN_ALLOW_THREADS
        pe_stream_read_f32(PyArray_SIZE(a), (const float *)PyArray_DATA(a));
        Py_END_ALLOW_THREADS
    } else if (strcmp(kind, "scale") == 0 || strcmp(kind, "fill") == 0) {
        const int fill = kind[0] == 'f';
        if (!PyArray_ISWRITEABLE(a)) {
            PyErr_SetString(PyExc_ValueError, "a must be writeable");
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        if (fill)
            pe_stream_fill_f32(PyArray_SIZE(a), (float *)PyArray_DATA(a), 0.0f);
        else
            pe_stream_scale_f32(PyArray_SIZE(a), (float *)PyArray_DATA(a), 1.0f);
        Py_END_ALLOW_THREADS
    } else {
        PyErr_SetString(PyExc_ValueError,
                        "kind must be 'scale', 'fill', 'copy' or 'read'");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef rope_methods[] = {
    {"_rope_grid", py_rope_grid, METH_VARARGS,
     "_rope_grid(kind, x, cos, sin, out, simd=3): position-blocked RoPE on "
     "(B, H, S, d); simd caps the vector level (0 C, 1 SSE2, 2 AVX2, 3 AVX-512), for tests."},
    {"set_num_threads", py_set_num_threads, METH_O,
     "set_num_threads(n) -> the thread count now used by posemb's kernels."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS,
     "get_num_threads() -> the thread count used by posemb's kernels."},
    {"_stream", py_stream, METH_VARARGS,
     "_stream(kind, a, b=None): benchmark bandwidth limit ('scale', 'fill', 'copy', 'read')."},
    {"_rope_table", py_rope_table, METH_VARARGS,
     "_rope_table(positions, inv_freq, attention_scale, interleaved, cos, sin)"
     "\n\nFill full-width rotary tables in place (see posemb.rope_cos_sin)."},
    {NULL, NULL, 0, NULL}};

/* Register the RoPE family: gufuncs and table functions. */
static int
register_rope(PyObject *m)
{
#define ADD_ROPE(NAME, KERNELS, DOC)                                          \
    if (add_gufunc(m, NAME, DOC, rope_funcs, KERNELS##_data, KERNELS,         \
                   sizeof(rope_kernel), 3, rope_types, 3, 1,                 \
                   "(d),(r),(r)->(d)", rope_core_dims) < 0)                                       \
        return -1;

    ADD_ROPE("rope_half_fwd", rope_half_fwd,
             "Half-split RoPE: y = x*cos + rotate_half(x)*sin on the first r "
             "features, (d),(r),(r)->(d).")
    ADD_ROPE("rope_half_back", rope_half_back,
             "Adjoint of rope_half_fwd (its gradient), (d),(r),(r)->(d).")
    ADD_ROPE("rope_inter_fwd", rope_inter_fwd,
             "Interleaved RoPE on pairs (2i, 2i+1), (d),(r),(r)->(d).")
    ADD_ROPE("rope_inter_back", rope_inter_back,
             "Adjoint of rope_inter_fwd (its gradient), (d),(r),(r)->(d).")
#undef ADD_ROPE
    {
        static const char *const names[4] = {"rope_bf16_half_fwd", "rope_bf16_half_back",
                                             "rope_bf16_inter_fwd", "rope_bf16_inter_back"};
        int i;
        for (i = 0; i < 4; i++)
            if (add_gufunc(m, names[i],
                           "RoPE on bfloat16 bit patterns (uint16): computed in "
                           "float32, rounded once to nearest even, (d),(r),(r)->(d).",
                           rope_funcs, rope_bf16_data[i], &rope_bf16_k[i],
                           sizeof(rope_kernel), 1, rope_bf16_types, 3, 1,
                           "(d),(r),(r)->(d)", rope_core_dims) < 0)
                return -1;
    }

    if (add_gufunc(m, "rotate_half",
                   "rotate_half: concat(-x[h:], x[:h]) over an even axis, "
                   "(d)->(d).",
                   unary_funcs, rotate_half_data, rotate_half_k,
                   sizeof(unary_kernel), 3, unary_types, 1, 1, "(d)->(d)",
                   even_core_dim) < 0)
        return -1;
    return PyModule_AddFunctions(m, rope_methods);
}

/* ------------------------------------------------------------------ */
/* RoPE variants: packed variable-length batches (rope_varlen.c)        */
/* ------------------------------------------------------------------ */

/* Turn a pe_rope_varlen_check code into a Python exception. */
static void
varlen_error(int rc, const pe_rope_varlen *a, ptrdiff_t w)
{
    const int64_t *cu = a->cu_seqlens;
    switch (rc) {
    case PE_VARLEN_BAD_START:
        PyErr_Format(PyExc_ValueError, "cu_seqlens must start at 0, got %lld",
                     (long long)cu[0]);
        break;
    case PE_VARLEN_DECREASING:
        PyErr_Format(PyExc_ValueError,
                     "cu_seqlens must be non-decreasing, got cu_seqlens[%zd] = %lld "
                     "after %lld", (Py_ssize_t)w, (long long)cu[w],
                     (long long)cu[w - 1]);
        break;
    case PE_VARLEN_BAD_END:
        PyErr_Format(PyExc_ValueError,
                     "cu_seqlens must end at total_tokens = x.shape[0] = %zd and "
                     "never exceed it, got cu_seqlens[%zd] = %lld",
                     (Py_ssize_t)a->total, (Py_ssize_t)w, (long long)cu[w]);
        break;
    case PE_VARLEN_NEGATIVE_OFFSET:
        PyErr_Format(PyExc_ValueError, "offset[%zd] = %lld must be >= 0",
                     (Py_ssize_t)w, (long long)a->offsets[w]);
        break;
    case PE_VARLEN_OUT_OF_RANGE: {
        /* no "last position" (off + len - 1): it overflows for offsets near 2**63 */
        const long long len = (long long)(cu[w + 1] - cu[w]);
        const long long off = a->offsets ? (long long)a->offsets[w] : 0;
        PyErr_Format(PyExc_IndexError,
                     "cu_seqlens and offset: sequence %zd has %lld tokens from "
                     "position offset[%zd] = %lld on, but cos/sin have only %zd rows",
                     (Py_ssize_t)w, len, (Py_ssize_t)w, off, (Py_ssize_t)a->rows);
        break;
    }
    case PE_VARLEN_BAD_WIDTH:
        PyErr_Format(PyExc_ValueError,
                     "cos/sin width (%zd) must not exceed x's last axis (%zd)",
                     (Py_ssize_t)a->r, (Py_ssize_t)a->d);
        break;
    default:
        PyErr_SetString(PyExc_ValueError, "invalid sizes for _rope_varlen");
    }
}

/*
 * _rope_varlen(x, cu_seqlens, offsets, cos, sin, interleaved, backward, out)
 * x, out: (total, heads, d) of one float dtype, aligned, any strides (out may
 * be x); cu_seqlens: int64 (nseq + 1,); offsets: None or int64 (nseq,);
 * cos, sin: (rows, r) of x's dtype, r even <= d.
 */
static PyObject *
py_rope_varlen(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *x_o, *cu_o, *off_o, *cos_o, *sin_o, *out_o;
    PyArrayObject *x, *out, *cs, *sn, *cu;
    int interleaved, backward, typenum, i, rc;
    ptrdiff_t where;
    pe_rope_varlen a;
    pe_rope_fn fn;
    static const pe_rope_fn kernels[2][2][3] = {
        {{pe_rope_half_fwd_f16, pe_rope_half_fwd_f32, pe_rope_half_fwd_f64},
         {pe_rope_half_back_f16, pe_rope_half_back_f32, pe_rope_half_back_f64}},
        {{pe_rope_inter_fwd_f16, pe_rope_inter_fwd_f32, pe_rope_inter_fwd_f64},
         {pe_rope_inter_back_f16, pe_rope_inter_back_f32,
          pe_rope_inter_back_f64}}};

    if (!PyArg_ParseTuple(args, "OOOOOppO:_rope_varlen", &x_o, &cu_o, &off_o,
                          &cos_o, &sin_o, &interleaved, &backward, &out_o))
        return NULL;
    if (check_strided(x_o, "x", PE_ANY_FLOAT, 3, 0) < 0 ||
        check_strided(out_o, "out", PE_ANY_FLOAT, 3, 1) < 0 ||
        check_strided(cos_o, "cos", PE_ANY_FLOAT, 2, 0) < 0 ||
        check_strided(sin_o, "sin", PE_ANY_FLOAT, 2, 0) < 0 ||
        check_array(cu_o, "cu_seqlens", NPY_INT64, 1, 0) < 0)
        return NULL;
    x = (PyArrayObject *)x_o;
    out = (PyArrayObject *)out_o;
    cs = (PyArrayObject *)cos_o;
    sn = (PyArrayObject *)sin_o;
    cu = (PyArrayObject *)cu_o;
    typenum = PyArray_TYPE(x);
    if (PyArray_TYPE(out) != typenum || PyArray_TYPE(cs) != typenum ||
        PyArray_TYPE(sn) != typenum) {
        PyErr_SetString(PyExc_TypeError,
                        "x, out, cos and sin must have the same dtype");
        return NULL;
    }
    for (i = 0; i < 3; i++) {
        if (PyArray_DIM(out, i) != PyArray_DIM(x, i)) {
            PyErr_SetString(PyExc_ValueError, "out must have the shape of x");
            return NULL;
        }
    }
    if (PyArray_DIM(cs, 0) != PyArray_DIM(sn, 0) ||
        PyArray_DIM(cs, 1) != PyArray_DIM(sn, 1)) {
        PyErr_SetString(PyExc_ValueError, "cos and sin must have the same shape");
        return NULL;
    }
    if (PyArray_DIM(cs, 1) % 2 != 0) {
        PyErr_SetString(PyExc_ValueError, "cos/sin width must be even");
        return NULL;
    }
    if (PyArray_DIM(cu, 0) < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "cu_seqlens must have at least one entry (batch + 1)");
        return NULL;
    }
    a.nseq = PyArray_DIM(cu, 0) - 1;
    a.offsets = NULL;
    if (off_o != Py_None) {
        if (check_array(off_o, "offset", NPY_INT64, 1, 0) < 0)
            return NULL;
        if (PyArray_DIM((PyArrayObject *)off_o, 0) != a.nseq) {
            PyErr_Format(PyExc_ValueError,
                         "offset must have one entry per sequence (%zd), got %zd",
                         (Py_ssize_t)a.nseq,
                         (Py_ssize_t)PyArray_DIM((PyArrayObject *)off_o, 0));
            return NULL;
        }
        a.offsets = (const int64_t *)PyArray_DATA((PyArrayObject *)off_o);
    }
    a.total = PyArray_DIM(x, 0);
    a.heads = PyArray_DIM(x, 1);
    a.d = PyArray_DIM(x, 2);
    a.r = PyArray_DIM(cs, 1);
    a.rows = PyArray_DIM(cs, 0);
    a.cu_seqlens = (const int64_t *)PyArray_DATA(cu);
    a.x = PyArray_BYTES(x);
    a.y = PyArray_BYTES(out);
    a.cos = PyArray_BYTES(cs);
    a.sin = PyArray_BYTES(sn);
    a.x_token = PyArray_STRIDE(x, 0);
    a.x_head = PyArray_STRIDE(x, 1);
    a.x_inner = PyArray_STRIDE(x, 2);
    a.y_token = PyArray_STRIDE(out, 0);
    a.y_head = PyArray_STRIDE(out, 1);
    a.y_inner = PyArray_STRIDE(out, 2);
    a.cos_row = PyArray_STRIDE(cs, 0);
    a.cos_inner = PyArray_STRIDE(cs, 1);
    a.sin_row = PyArray_STRIDE(sn, 0);
    a.sin_inner = PyArray_STRIDE(sn, 1);

    rc = pe_rope_varlen_check(&a, &where);
    if (rc != PE_VARLEN_OK) {
        varlen_error(rc, &a, where);
        return NULL;
    }
    fn = kernels[interleaved ? 1 : 0][backward ? 1 : 0]
                [typenum == NPY_HALF ? 0 : typenum == NPY_FLOAT ? 1 : 2];
    Py_BEGIN_ALLOW_THREADS
    rc = pe_rope_varlen_apply(&a, fn);
    Py_END_ALLOW_THREADS
    if (rc != PE_VARLEN_OK) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cu_seqlens or offset changed during _rope_varlen");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef rope_variant_methods[] = {
    {"_rope_varlen", py_rope_varlen, METH_VARARGS,
     "_rope_varlen(x, cu_seqlens, offsets, cos, sin, interleaved, backward, out)"
     "\n\nRotate a packed (total, heads, d) batch in out (see "
     "posemb.apply_rope_varlen)."},
    {NULL, NULL, 0, NULL}};

/* Register the RoPE variants that need their own C entry points. */
static int
register_rope_variants(PyObject *m)
{
    return PyModule_AddFunctions(m, rope_variant_methods);
}

/* ------------------------------------------------------------------ */
/* Sinusoidal (absolute) encodings                                      */
/* ------------------------------------------------------------------ */

typedef struct {
    void (*fn)(const pe_sinusoidal_add_loop *);
    npy_intp itemsize;      /* of x and y */
} sinusoidal_add_kernel;

/* elementwise (x, t) -> y; dims = {n}; 3 steps */
static void
sinusoidal_add_loop(char **args, npy_intp const *dims, npy_intp const *steps,
                    void *data)
{
    pe_sinusoidal_add_loop L;
    L.n = dims[0];
    L.x = args[0];
    L.t = args[1];
    L.y = args[2];
    L.x_step = steps[0];
    L.t_step = steps[1];
    L.y_step = steps[2];
    pe_sinusoidal_add_parallel(((const sinusoidal_add_kernel *)data)->fn, &L,
                               ((const sinusoidal_add_kernel *)data)->itemsize);
}

static const sinusoidal_add_kernel sinusoidal_add_k[3] = {
    {pe_sinusoidal_add_f16, 2}, {pe_sinusoidal_add_f32, 4},
    {pe_sinusoidal_add_f64, 8}};
static PyUFuncGenericFunction sinusoidal_add_funcs[3] = {
    sinusoidal_add_loop, sinusoidal_add_loop, sinusoidal_add_loop};
/* float16 x takes a float64 table, so the sum is rounded once */
static const char sinusoidal_add_types[9] = {
    NPY_HALF, NPY_DOUBLE, NPY_HALF,
    NPY_FLOAT, NPY_FLOAT, NPY_FLOAT,
    NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE};
static void *sinusoidal_add_data[3];

/* signature (s,d),(s,d)->(s,d); dims = {n, s, d}; 3 outer + 6 core steps */
static void
sinusoidal_add_rows_loop(char **args, npy_intp const *dims,
                         npy_intp const *steps, void *data)
{
    pe_sinusoidal_grid g;
    g.B = dims[0];
    g.S = dims[1];
    g.D = dims[2];
    g.x = args[0];
    g.t = args[1];
    g.y = args[2];
    g.x_b = steps[0];
    g.t_b = steps[1];
    g.y_b = steps[2];
    g.x_s = steps[3];
    g.x_d = steps[4];
    g.t_s = steps[5];
    g.t_d = steps[6];
    g.y_s = steps[7];
    g.y_d = steps[8];
    pe_sinusoidal_add_grid(&g, (int)((const sinusoidal_add_kernel *)data)->itemsize);
}

static PyUFuncGenericFunction sinusoidal_add_rows_funcs[3] = {
    sinusoidal_add_rows_loop, sinusoidal_add_rows_loop, sinusoidal_add_rows_loop};
static void *sinusoidal_add_rows_data[3];

/*
 * _sinusoidal_table(start, inv_freq, concat, out)
 * start: int >= 0 with start + n <= 2**53; inv_freq: float64 (ceil(dim/2),);
 * out: float16/32/64 (n, dim), C-contiguous, writeable.  Fills out with
 * the rows for positions start .. start+n-1.
 */
static PyObject *
py_sinusoidal_table(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *inv_o, *out_o;
    PyArrayObject *out, *inv;
    long long start;
    int concat, typenum;
    npy_intp n, dim, nf;
    double *work;

    if (!PyArg_ParseTuple(args, "LOpO:_sinusoidal_table", &start, &inv_o,
                          &concat, &out_o))
        return NULL;
    if (check_array(inv_o, "inv_freq", NPY_DOUBLE, 1, 0) < 0)
        return NULL;
    if (!PyArray_Check(out_o)) {
        PyErr_SetString(PyExc_TypeError, "out must be a numpy.ndarray");
        return NULL;
    }
    typenum = PyArray_TYPE((PyArrayObject *)out_o);
    if (typenum != NPY_HALF && typenum != NPY_FLOAT && typenum != NPY_DOUBLE) {
        PyErr_SetString(PyExc_TypeError,
                        "out must be float16, float32 or float64");
        return NULL;
    }
    if (check_array(out_o, "out", typenum, 2, 1) < 0)
        return NULL;
    out = (PyArrayObject *)out_o;
    inv = (PyArrayObject *)inv_o;
    n = PyArray_DIM(out, 0);
    dim = PyArray_DIM(out, 1);
    nf = PE_SINUSOIDAL_NFREQ(dim);
    if (PyArray_DIM(inv, 0) != nf) {
        PyErr_Format(PyExc_ValueError,
                     "inv_freq must have ceil(dim/2) = %zd values, got %zd",
                     (Py_ssize_t)nf, (Py_ssize_t)PyArray_DIM(inv, 0));
        return NULL;
    }
    if (start < 0 || start > ((long long)1 << 53) - (long long)n) {
        PyErr_Format(PyExc_ValueError,
                     "start must satisfy 0 <= start and start + %zd <= 2**53, "
                     "got %lld", (Py_ssize_t)n, start);
        return NULL;
    }
    if (n == 0 || dim == 0)
        Py_RETURN_NONE;
    if (nf > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(double) /
                 (2 * PE_SINUSOIDAL_BLOCK + 2 * PE_SINUSOIDAL_SUPER + 4))
        return PyErr_NoMemory();
    work = (double *)PyMem_Malloc((size_t)PE_SINUSOIDAL_WORK(dim) *
                                  sizeof(double));
    if (work == NULL)
        return PyErr_NoMemory();

    Py_BEGIN_ALLOW_THREADS
    const double *w = (const double *)PyArray_DATA(inv);
    if (typenum == NPY_HALF)
        pe_sinusoidal_table_f16(n, (int64_t)start, dim, w, concat,
                                (uint16_t *)PyArray_DATA(out), work);
    else if (typenum == NPY_FLOAT)
        pe_sinusoidal_table_f32(n, (int64_t)start, dim, w, concat,
                                (float *)PyArray_DATA(out), work);
    else
        pe_sinusoidal_table_f64(n, (int64_t)start, dim, w, concat,
                                (double *)PyArray_DATA(out), work);
    Py_END_ALLOW_THREADS
    PyMem_Free(work);
    Py_RETURN_NONE;
}

static PyMethodDef sinusoidal_methods[] = {
    {"_sinusoidal_table", py_sinusoidal_table, METH_VARARGS,
     "_sinusoidal_table(start, inv_freq, concat, out)\n\n"
     "Fill a sinusoidal table in place (see posemb.sinusoidal)."},
    {NULL, NULL, 0, NULL}};

/* Register the sinusoidal family (sinusoidal.c): the add ufunc, the table. */
static int
register_sinusoidal(PyObject *m)
{
    if (add_gufunc(m, "sinusoidal_add",
                   "y = x + t elementwise; float16 x takes a float64 table t "
                   "and the sum is rounded once.",
                   sinusoidal_add_funcs, sinusoidal_add_data,
                   sinusoidal_add_k, sizeof(sinusoidal_add_kernel), 3,
                   sinusoidal_add_types, 2, 1, NULL, NULL) < 0)
        return -1;
    if (add_gufunc(m, "sinusoidal_add_rows",
                   "y = x + t over (..., seq, dim) grids, t (seq, dim) broadcast "
                   "over the leading axes: the position-blocked form of "
                   "sinusoidal_add (same types, same bits).",
                   sinusoidal_add_rows_funcs, sinusoidal_add_rows_data,
                   sinusoidal_add_k, sizeof(sinusoidal_add_kernel), 3,
                   sinusoidal_add_types, 2, 1, "(s,d),(s,d)->(s,d)", NULL) < 0)
        return -1;
    return PyModule_AddFunctions(m, sinusoidal_methods);
}

/* ------------------------------------------------------------------ */
/* Learned encodings, forward and backward                              */
/* ------------------------------------------------------------------ */

typedef struct {
    void (*fn)(const pe_learned_loop *);
    npy_intp itemsize;
    void (*nt)(const pe_learned_loop *);    /* streaming stores, or NULL */
} learned_kernel;

/* signature (d),(),(m,d)->(d); dims = {n, d, m}; 4 outer + 4 core steps */
static void
learned_fwd_loop(char **args, npy_intp const *dims, npy_intp const *steps,
                 void *data)
{
    pe_learned_loop L;
    L.n = dims[0];
    L.d = dims[1];
    L.m = dims[2];
    L.x = args[0];
    L.pos = args[1];
    L.w = args[2];
    L.y = args[3];
    L.x_step = steps[0];
    L.pos_step = steps[1];
    L.w_step = steps[2];
    L.y_step = steps[3];
    L.x_inner = steps[4];
    L.w_row = steps[5];
    L.w_inner = steps[6];
    L.y_inner = steps[7];
    {
        const learned_kernel *k = (const learned_kernel *)data;
        /* a large out-of-place output: skip the read-for-ownership */
        const int stream = k->nt != NULL && L.y != L.x &&
                           L.n * L.d * k->itemsize >= PE_STREAM_MIN_BYTES &&
                           pe_memory_resident(L.y + L.n / 2 * L.y_step);
        pe_learned_fwd_parallel(stream ? k->nt : k->fn, &L, k->itemsize);
    }
}

static const learned_kernel learned_fwd_k[3] = {
    {pe_learned_fwd_f16, 2, NULL}, {pe_learned_fwd_f32, 4, pe_learned_fwdnt_f32},
    {pe_learned_fwd_f64, 8, pe_learned_fwdnt_f64}};
static PyUFuncGenericFunction learned_fwd_funcs[3] = {
    learned_fwd_loop, learned_fwd_loop, learned_fwd_loop};
static const char learned_fwd_types[12] = {
    NPY_HALF, NPY_INT64, NPY_HALF, NPY_HALF,
    NPY_FLOAT, NPY_INT64, NPY_FLOAT, NPY_FLOAT,
    NPY_DOUBLE, NPY_INT64, NPY_DOUBLE, NPY_DOUBLE};
static void *learned_fwd_data[3];

/*
 * _learned_back(grad_out, positions, grad_weight, assign=False)
 * grad_out: float16/32/64 (n, d); positions: int64 (n,), each in [0, m);
 * grad_weight: (m, d) of grad_out's dtype (float32 for float16), writeable,
 * sharing no memory with the inputs.  All C-contiguous.  Adds every
 * grad_out row into its position's grad_weight row, in token order; with
 * assign, grad_weight's contents are ignored (the sums start from zero, so
 * np.empty will do).  Every argument is checked before anything is written.
 */
static PyObject *
py_learned_back(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *g_o, *pos_o, *gw_o;
    PyArrayObject *g, *pos, *gw;
    int typenum, acc_type;
    npy_intp n, d, m, t, nwork;
    const npy_int64 *p;
    int64_t *work = NULL;
    int assign = 0;

    if (!PyArg_ParseTuple(args, "OOO|p:_learned_back", &g_o, &pos_o, &gw_o,
                          &assign))
        return NULL;
    if (!PyArray_Check(g_o)) {
        PyErr_SetString(PyExc_TypeError, "grad_out must be a numpy.ndarray");
        return NULL;
    }
    typenum = PyArray_TYPE((PyArrayObject *)g_o);
    if (typenum != NPY_HALF && typenum != NPY_FLOAT && typenum != NPY_DOUBLE) {
        PyErr_SetString(PyExc_TypeError,
                        "grad_out must be float16, float32 or float64");
        return NULL;
    }
    acc_type = typenum == NPY_DOUBLE ? NPY_DOUBLE : NPY_FLOAT;
    if (check_array(g_o, "grad_out", typenum, 2, 0) < 0 ||
        check_array(pos_o, "positions", NPY_INT64, 1, 0) < 0 ||
        check_array(gw_o, "grad_weight", acc_type, 2, 1) < 0)
        return NULL;
    g = (PyArrayObject *)g_o;
    pos = (PyArrayObject *)pos_o;
    gw = (PyArrayObject *)gw_o;
    n = PyArray_DIM(g, 0);
    d = PyArray_DIM(g, 1);
    m = PyArray_DIM(gw, 0);
    if (PyArray_DIM(pos, 0) != n) {
        PyErr_Format(PyExc_ValueError,
                     "positions must have grad_out's %zd rows, got %zd",
                     (Py_ssize_t)n, (Py_ssize_t)PyArray_DIM(pos, 0));
        return NULL;
    }
    if (PyArray_DIM(gw, 1) != d) {
        PyErr_Format(PyExc_ValueError,
                     "grad_weight must have grad_out's width %zd, got %zd",
                     (Py_ssize_t)d, (Py_ssize_t)PyArray_DIM(gw, 1));
        return NULL;
    }
    if (extents_overlap(gw, g) || extents_overlap(gw, pos)) {
        PyErr_SetString(PyExc_ValueError,
                        "grad_weight must not share memory with grad_out or "
                        "positions");
        return NULL;
    }
    p = (const npy_int64 *)PyArray_DATA(pos);
    for (t = 0; t < n; t++) {
        if (p[t] < 0 || p[t] >= m) {
            PyErr_Format(PyExc_IndexError,
                         "positions must be in [0, %zd), got %lld",
                         (Py_ssize_t)m, (long long)p[t]);
            return NULL;
        }
    }

    nwork = pe_learned_back_work(n, m);
    if (nwork > 0) {
        if (nwork > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int64_t))
            return PyErr_NoMemory();
        work = (int64_t *)PyMem_Malloc((size_t)nwork * sizeof(int64_t));
        if (work == NULL)
            return PyErr_NoMemory();
    }

    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_HALF)
        pe_learned_back_f16(n, d, (const uint16_t *)PyArray_DATA(g), p, m,
                            (float *)PyArray_DATA(gw), work, assign);
    else if (typenum == NPY_FLOAT)
        pe_learned_back_f32(n, d, (const float *)PyArray_DATA(g), p, m,
                            (float *)PyArray_DATA(gw), work, assign);
    else
        pe_learned_back_f64(n, d, (const double *)PyArray_DATA(g), p, m,
                            (double *)PyArray_DATA(gw), work, assign);
    Py_END_ALLOW_THREADS
    PyMem_Free(work);
    Py_RETURN_NONE;
}

static PyMethodDef learned_methods[] = {
    {"_learned_back", py_learned_back, METH_VARARGS,
     "_learned_back(grad_out, positions, grad_weight, assign=False)\n\n"
     "grad_weight[positions[t]] += grad_out[t] in token order "
     "(see posemb.learned_pe_backward); assign: start from zero instead of "
     "grad_weight's contents."},
    {NULL, NULL, 0, NULL}};

/*
 * Register the learned family (learned.c).  The forward is a gufunc
 * (d),(),(m,d)->(d) with the whole table as a core operand: NumPy then
 * broadcasts positions against x, takes strided x and out=, and the loop
 * adds W[p] straight from the table (no gathered temporary).  The backward
 * writes to addresses chosen by the data, so it is a plain function that
 * checks every position before the first write.
 */
static int
register_learned(PyObject *m)
{
    if (add_gufunc(m, "learned_pe_fwd",
                   "Learned forward y = x + w[pos], (d),(),(m,d)->(d); a "
                   "position outside [0, m) gives a NaN row.",
                   learned_fwd_funcs, learned_fwd_data, learned_fwd_k,
                   sizeof(learned_kernel), 3, learned_fwd_types, 3, 1,
                   "(d),(),(m,d)->(d)", NULL) < 0)
        return -1;
    return PyModule_AddFunctions(m, learned_methods);
}

/* ------------------------------------------------------------------ */
/* Relative position bias: T5 buckets, Shaw tables                      */
/* ------------------------------------------------------------------ */

/* Largest size or |offset| the bias and mask functions accept: keeps
 * every key - query difference well inside int64. */
#define PE_MAX_EXTENT ((npy_int64)1 << 61)

/* -1 with ValueError unless |offset| and the sizes are <= limit. */
static int
check_extent(npy_int64 offset, npy_intp q, npy_intp k, npy_int64 limit)
{
    if (offset > limit || offset < -limit) {
        PyErr_Format(PyExc_ValueError,
                     "query_offset must satisfy |query_offset| <= %lld, got %lld",
                     (long long)limit, (long long)offset);
        return -1;
    }
    if (q > limit || k > limit) {
        PyErr_Format(PyExc_ValueError,
                     "query_length and key_length must be <= %lld",
                     (long long)limit);
        return -1;
    }
    return 0;
}

/* Most buckets accepted: the boundary table has one entry per bucket. */
#define PE_T5_MAX_BUCKETS ((npy_int64)1 << 20)

/*
 * Check HF's T5 bucket parameters and fill spec with a PyMem-allocated
 * boundary table (free spec->bound with PyMem_Free).  0 or -1.
 */
static int
t5_spec_new(pe_t5_spec *spec, int bidirectional, npy_int64 num_buckets,
            npy_int64 max_distance)
{
    const npy_int64 least = bidirectional ? 4 : 2;
    npy_int64 nb, me;
    uint64_t *bound;

    if (num_buckets < least || num_buckets > PE_T5_MAX_BUCKETS) {
        PyErr_Format(PyExc_ValueError,
                     "num_buckets must be in [%lld, %lld] (%s), got %lld",
                     (long long)least, (long long)PE_T5_MAX_BUCKETS,
                     bidirectional ? "bidirectional" : "unidirectional",
                     (long long)num_buckets);
        return -1;
    }
    nb = bidirectional ? num_buckets / 2 : num_buckets;
    me = nb / 2;
    if (max_distance <= me || max_distance > ((npy_int64)1 << 53)) {
        PyErr_Format(PyExc_ValueError,
                     "max_distance must be > %lld (the exact buckets) and "
                     "<= 2**53, got %lld",
                     (long long)me, (long long)max_distance);
        return -1;
    }
    bound = (uint64_t *)PyMem_Malloc((size_t)nb * sizeof(uint64_t));
    if (bound == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    pe_t5_boundaries(bidirectional, num_buckets, max_distance, bound);
    Py_END_ALLOW_THREADS
    spec->bidirectional = bidirectional;
    spec->num_buckets = num_buckets;
    spec->bound = bound;
    return 0;
}

/*
 * _t5_bucket(relative_position, out, bidirectional, num_buckets, max_distance)
 * relative_position, out: int64 (n,), C-contiguous; out writeable and
 * either relative_position itself or disjoint from it.
 */
static PyObject *
py_t5_bucket(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *rp_o, *out_o;
    int bidirectional;
    long long num_buckets, max_distance;
    pe_t5_spec spec;
    npy_intp n;

    if (!PyArg_ParseTuple(args, "OOpLL:_t5_bucket", &rp_o, &out_o,
                          &bidirectional, &num_buckets, &max_distance))
        return NULL;
    if (check_array(rp_o, "relative_position", NPY_INT64, 1, 0) < 0 ||
        check_array(out_o, "out", NPY_INT64, 1, 1) < 0)
        return NULL;
    n = PyArray_DIM((PyArrayObject *)rp_o, 0);
    if (PyArray_DIM((PyArrayObject *)out_o, 0) != n) {
        PyErr_Format(PyExc_ValueError, "out must have shape (%zd,)",
                     (Py_ssize_t)n);
        return NULL;
    }
    if (PyArray_DATA((PyArrayObject *)out_o) !=
            PyArray_DATA((PyArrayObject *)rp_o) &&
        check_disjoint(rp_o, "relative_position", out_o, "out") < 0)
        return NULL;
    if (t5_spec_new(&spec, bidirectional, num_buckets, max_distance) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pe_t5_bucket_i64(&spec, n,
                     (const int64_t *)PyArray_DATA((PyArrayObject *)rp_o),
                     (int64_t *)PyArray_DATA((PyArrayObject *)out_o));
    Py_END_ALLOW_THREADS
    PyMem_Free((void *)spec.bound);
    Py_RETURN_NONE;
}

/*
 * _t5_bias(table, out, bidirectional, max_distance, query_offset)
 * table: (num_buckets, heads); out: (heads, q, k) of the same float dtype,
 * writeable, disjoint from table.
 */
static PyObject *
py_t5_bias(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *table_o, *out_o;
    int bidirectional, typenum, rc = 0;
    long long max_distance, offset;
    npy_intp nbk, heads, q, k;
    pe_t5_spec spec;
    const void *table;
    void *out;

    if (!PyArg_ParseTuple(args, "OOpLL:_t5_bias", &table_o, &out_o,
                          &bidirectional, &max_distance, &offset))
        return NULL;
    if ((typenum = float_type_of(table_o, "table", 1)) < 0)
        return NULL;
    if (check_array(table_o, "table", typenum, 2, 0) < 0 ||
        check_array(out_o, "out", typenum, 3, 1) < 0 ||
        check_disjoint(table_o, "table", out_o, "out") < 0)
        return NULL;
    nbk = PyArray_DIM((PyArrayObject *)table_o, 0);
    heads = PyArray_DIM((PyArrayObject *)table_o, 1);
    q = PyArray_DIM((PyArrayObject *)out_o, 1);
    k = PyArray_DIM((PyArrayObject *)out_o, 2);
    if (PyArray_DIM((PyArrayObject *)out_o, 0) != heads) {
        PyErr_Format(PyExc_ValueError,
                     "out must have %zd heads (table's second axis)",
                     (Py_ssize_t)heads);
        return NULL;
    }
    if (check_extent(offset, q, k, PE_MAX_EXTENT) < 0)
        return NULL;
    if (t5_spec_new(&spec, bidirectional, nbk, max_distance) < 0)
        return NULL;
    table = PyArray_DATA((PyArrayObject *)table_o);
    out = PyArray_DATA((PyArrayObject *)out_o);
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_HALF)
        rc = pe_t5_bias_f16(&spec, heads, q, k, offset,
                            (const uint16_t *)table, (uint16_t *)out);
    else if (typenum == NPY_FLOAT)
        rc = pe_t5_bias_f32(&spec, heads, q, k, offset, (const float *)table,
                            (float *)out);
    else
        rc = pe_t5_bias_f64(&spec, heads, q, k, offset, (const double *)table,
                            (double *)out);
    Py_END_ALLOW_THREADS
    PyMem_Free((void *)spec.bound);
    if (rc < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/*
 * _t5_bias_backward(grad, out, bidirectional, max_distance, query_offset)
 * grad: (heads, q, k); out: (num_buckets, heads), same dtype (float32 or
 * float64), writeable, disjoint from grad.
 */
static PyObject *
py_t5_bias_backward(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *grad_o, *out_o;
    int bidirectional, typenum, rc = 0;
    long long max_distance, offset;
    npy_intp nbk, heads, q, k;
    pe_t5_spec spec;
    const void *grad;
    void *out;

    if (!PyArg_ParseTuple(args, "OOpLL:_t5_bias_backward", &grad_o, &out_o,
                          &bidirectional, &max_distance, &offset))
        return NULL;
    if ((typenum = float_type_of(grad_o, "grad_bias", 0)) < 0)
        return NULL;
    if (check_array(grad_o, "grad_bias", typenum, 3, 0) < 0 ||
        check_array(out_o, "out", typenum, 2, 1) < 0 ||
        check_disjoint(grad_o, "grad_bias", out_o, "out") < 0)
        return NULL;
    heads = PyArray_DIM((PyArrayObject *)grad_o, 0);
    q = PyArray_DIM((PyArrayObject *)grad_o, 1);
    k = PyArray_DIM((PyArrayObject *)grad_o, 2);
    nbk = PyArray_DIM((PyArrayObject *)out_o, 0);
    if (PyArray_DIM((PyArrayObject *)out_o, 1) != heads) {
        PyErr_Format(PyExc_ValueError,
                     "out must have shape (num_buckets, %zd)", (Py_ssize_t)heads);
        return NULL;
    }
    if (check_extent(offset, q, k, PE_MAX_EXTENT) < 0)
        return NULL;
    if (t5_spec_new(&spec, bidirectional, nbk, max_distance) < 0)
        return NULL;
    grad = PyArray_DATA((PyArrayObject *)grad_o);
    out = PyArray_DATA((PyArrayObject *)out_o);
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        rc = pe_t5_bias_back_f32(&spec, heads, q, k, offset,
                                 (const float *)grad, (float *)out);
    else
        rc = pe_t5_bias_back_f64(&spec, heads, q, k, offset,
                                 (const double *)grad, (double *)out);
    Py_END_ALLOW_THREADS
    PyMem_Free((void *)spec.bound);
    if (rc < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* _shaw_index(out, max_relative_position): out int64 (q, k), writeable. */
static PyObject *
py_shaw_index(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *out_o;
    long long K;
    npy_intp q, k;

    if (!PyArg_ParseTuple(args, "OL:_shaw_index", &out_o, &K))
        return NULL;
    if (check_array(out_o, "out", NPY_INT64, 2, 1) < 0)
        return NULL;
    if (K < 0 || K > PE_MAX_EXTENT) {
        PyErr_Format(PyExc_ValueError,
                     "max_relative_position must be in [0, 2**61], got %lld", K);
        return NULL;
    }
    q = PyArray_DIM((PyArrayObject *)out_o, 0);
    k = PyArray_DIM((PyArrayObject *)out_o, 1);
    if (check_extent(0, q, k, PE_MAX_EXTENT) < 0)
        return NULL;
    if (q == 0 || k == 0)   /* empty: the kernel would still walk q rows */
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pe_shaw_index_i64(q, k, (ptrdiff_t)K,
                      (int64_t *)PyArray_DATA((PyArrayObject *)out_o));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* Rows 2K + 1 of a Shaw table, or -1 with ValueError naming name. */
static npy_intp
shaw_clip(PyObject *table_o, const char *name)
{
    const npy_intp rows = PyArray_DIM((PyArrayObject *)table_o, 0);
    if (rows % 2 != 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s must have 2*max_relative_position + 1 rows (odd), got %zd",
                     name, (Py_ssize_t)rows);
        return -1;
    }
    return rows / 2;
}

/*
 * _shaw_embed(table, out): table (2K + 1, dim); out (q, k, dim), same
 * float dtype, writeable, disjoint from table.
 */
static PyObject *
py_shaw_embed(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *table_o, *out_o;
    int typenum;
    npy_intp K, dim, q, k;
    const void *table;
    void *out;

    if (!PyArg_ParseTuple(args, "OO:_shaw_embed", &table_o, &out_o))
        return NULL;
    if ((typenum = float_type_of(table_o, "table", 1)) < 0)
        return NULL;
    if (check_array(table_o, "table", typenum, 2, 0) < 0 ||
        check_array(out_o, "out", typenum, 3, 1) < 0 ||
        check_disjoint(table_o, "table", out_o, "out") < 0)
        return NULL;
    if ((K = shaw_clip(table_o, "table")) < 0)
        return NULL;
    dim = PyArray_DIM((PyArrayObject *)table_o, 1);
    q = PyArray_DIM((PyArrayObject *)out_o, 0);
    k = PyArray_DIM((PyArrayObject *)out_o, 1);
    if (PyArray_DIM((PyArrayObject *)out_o, 2) != dim) {
        PyErr_Format(PyExc_ValueError, "out's last axis must be %zd (table's)",
                     (Py_ssize_t)dim);
        return NULL;
    }
    if (check_extent(0, q, k, PE_MAX_EXTENT) < 0)
        return NULL;
    if (q == 0 || k == 0 || dim == 0)   /* empty: the kernel would still walk q rows */
        Py_RETURN_NONE;
    table = PyArray_DATA((PyArrayObject *)table_o);
    out = PyArray_DATA((PyArrayObject *)out_o);
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_HALF)
        pe_shaw_embed_f16(q, k, K, dim, (const uint16_t *)table, (uint16_t *)out);
    else if (typenum == NPY_FLOAT)
        pe_shaw_embed_f32(q, k, K, dim, (const float *)table, (float *)out);
    else
        pe_shaw_embed_f64(q, k, K, dim, (const double *)table, (double *)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/*
 * _shaw_embed_backward(grad, out): grad (q, k, dim); out (2K + 1, dim),
 * same dtype (float32 or float64), writeable, disjoint from grad.
 */
static PyObject *
py_shaw_embed_backward(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *grad_o, *out_o;
    int typenum, rc;
    npy_intp K, dim, q, k;
    const void *grad;
    void *out;

    if (!PyArg_ParseTuple(args, "OO:_shaw_embed_backward", &grad_o, &out_o))
        return NULL;
    if ((typenum = float_type_of(grad_o, "grad", 0)) < 0)
        return NULL;
    if (check_array(grad_o, "grad", typenum, 3, 0) < 0 ||
        check_array(out_o, "out", typenum, 2, 1) < 0 ||
        check_disjoint(grad_o, "grad", out_o, "out") < 0)
        return NULL;
    if ((K = shaw_clip(out_o, "out")) < 0)
        return NULL;
    q = PyArray_DIM((PyArrayObject *)grad_o, 0);
    k = PyArray_DIM((PyArrayObject *)grad_o, 1);
    dim = PyArray_DIM((PyArrayObject *)grad_o, 2);
    if (PyArray_DIM((PyArrayObject *)out_o, 1) != dim) {
        PyErr_Format(PyExc_ValueError, "out's last axis must be %zd (grad's)",
                     (Py_ssize_t)dim);
        return NULL;
    }
    if (check_extent(0, q, k, PE_MAX_EXTENT) < 0)
        return NULL;
    grad = PyArray_DATA((PyArrayObject *)grad_o);
    out = PyArray_DATA((PyArrayObject *)out_o);
    if (q == 0 || k == 0 || dim == 0) {   /* no addends: the kernel would walk q rows */
        memset(out, 0, (size_t)PyArray_NBYTES((PyArrayObject *)out_o));
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        rc = pe_shaw_embed_back_f32(q, k, K, dim, (const float *)grad, (float *)out);
    else
        rc = pe_shaw_embed_back_f64(q, k, K, dim, (const double *)grad,
                                    (double *)out);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef relative_methods[] = {
    {"_t5_bucket", py_t5_bucket, METH_VARARGS,
     "_t5_bucket(relative_position, out, bidirectional, num_buckets, "
     "max_distance)\n\nHF T5 buckets of a flat int64 array (see "
     "posemb.t5_relative_position_bucket)."},
    {"_t5_bias", py_t5_bias, METH_VARARGS,
     "_t5_bias(table, out, bidirectional, max_distance, query_offset)\n\n"
     "Fill out (heads, q, k) from a (num_buckets, heads) table."},
    {"_t5_bias_backward", py_t5_bias_backward, METH_VARARGS,
     "_t5_bias_backward(grad, out, bidirectional, max_distance, "
     "query_offset)\n\nScatter-add grad (heads, q, k) into out "
     "(num_buckets, heads)."},
    {"_shaw_index", py_shaw_index, METH_VARARGS,
     "_shaw_index(out, max_relative_position)\n\nFill out (q, k) with "
     "clip(j - (k - q + i), -K, K) + K."},
    {"_shaw_embed", py_shaw_embed, METH_VARARGS,
     "_shaw_embed(table, out)\n\nGather a (2K + 1, dim) table into out "
     "(q, k, dim)."},
    {"_shaw_embed_backward", py_shaw_embed_backward, METH_VARARGS,
     "_shaw_embed_backward(grad, out)\n\nScatter-add grad (q, k, dim) into "
     "out (2K + 1, dim)."},
    {NULL, NULL, 0, NULL}};

/* Register the relative family (relative.c). */
static int
register_relative(PyObject *m)
{
    return PyModule_AddFunctions(m, relative_methods);
}

/* ------------------------------------------------------------------ */
/* ALiBi                                                                */
/* ------------------------------------------------------------------ */

/*
 * _alibi_bias(slopes, out, query_offset, symmetric)
 * slopes: float64 (heads,); out: float32 or float64 (heads, q, k),
 * writeable, disjoint from slopes.  |query_offset|, q, k <= 2**52 so that
 * every distance is exact in float64.
 */
static PyObject *
py_alibi_bias(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *slopes_o, *out_o;
    long long offset;
    int symmetric, typenum, rc;
    npy_intp heads, q, k;
    const double *slopes;
    void *out;

    if (!PyArg_ParseTuple(args, "OOLp:_alibi_bias", &slopes_o, &out_o,
                          &offset, &symmetric))
        return NULL;
    if (check_array(slopes_o, "slopes", NPY_DOUBLE, 1, 0) < 0)
        return NULL;
    if ((typenum = float_type_of(out_o, "out", 0)) < 0)
        return NULL;
    if (check_array(out_o, "out", typenum, 3, 1) < 0 ||
        check_disjoint(slopes_o, "slopes", out_o, "out") < 0)
        return NULL;
    heads = PyArray_DIM((PyArrayObject *)slopes_o, 0);
    q = PyArray_DIM((PyArrayObject *)out_o, 1);
    k = PyArray_DIM((PyArrayObject *)out_o, 2);
    if (PyArray_DIM((PyArrayObject *)out_o, 0) != heads) {
        PyErr_Format(PyExc_ValueError, "out must have %zd heads (one per slope)",
                     (Py_ssize_t)heads);
        return NULL;
    }
    if (check_extent(offset, q, k, (npy_int64)1 << 52) < 0)
        return NULL;
    slopes = (const double *)PyArray_DATA((PyArrayObject *)slopes_o);
    out = PyArray_DATA((PyArrayObject *)out_o);
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        rc = pe_alibi_bias_f32(heads, q, k, offset, slopes, symmetric,
                               (float *)out);
    else
        rc = pe_alibi_bias_f64(heads, q, k, offset, slopes, symmetric,
                               (double *)out);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef alibi_methods[] = {
    {"_alibi_bias", py_alibi_bias, METH_VARARGS,
     "_alibi_bias(slopes, out, query_offset, symmetric)\n\nFill out "
     "(heads, q, k) with -m_h * (p_i - j) (or -m_h * |p_i - j|)."},
    {NULL, NULL, 0, NULL}};

/* Register the ALiBi family (alibi.c). */
static int
register_alibi(PyObject *m)
{
    return PyModule_AddFunctions(m, alibi_methods);
}

/* ------------------------------------------------------------------ */
/* Attention masks                                                      */
/* ------------------------------------------------------------------ */

/*
 * _causal_mask(out, query_offset, window): out bool (q, k), writeable;
 * window < 1 means no window.
 */
static PyObject *
py_causal_mask(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *out_o;
    long long offset, window;
    npy_intp q, k;

    if (!PyArg_ParseTuple(args, "OLL:_causal_mask", &out_o, &offset, &window))
        return NULL;
    if (check_array(out_o, "out", NPY_BOOL, 2, 1) < 0)
        return NULL;
    q = PyArray_DIM((PyArrayObject *)out_o, 0);
    k = PyArray_DIM((PyArrayObject *)out_o, 1);
    if (check_extent(offset, q, k, PE_MAX_EXTENT) < 0)
        return NULL;
    if (window > PE_MAX_EXTENT)   /* wider than any mask: no window */
        window = -1;
    if (q == 0 || k == 0)         /* empty: the kernel would still walk q rows */
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pe_causal_mask(q, k, offset, window,
                   (unsigned char *)PyArray_DATA((PyArrayObject *)out_o));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/*
 * _padding_mask(lengths, out, left): lengths int64 (batch,) with
 * 0 <= lengths[b] <= max_length; out bool (batch, max_length), writeable.
 */
static PyObject *
py_padding_mask(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *len_o, *out_o;
    int left;
    npy_intp batch, max_length, b;
    const npy_int64 *lengths;

    if (!PyArg_ParseTuple(args, "OOp:_padding_mask", &len_o, &out_o, &left))
        return NULL;
    if (check_array(len_o, "lengths", NPY_INT64, 1, 0) < 0 ||
        check_array(out_o, "out", NPY_BOOL, 2, 1) < 0 ||
        check_disjoint(len_o, "lengths", out_o, "out") < 0)
        return NULL;
    batch = PyArray_DIM((PyArrayObject *)len_o, 0);
    max_length = PyArray_DIM((PyArrayObject *)out_o, 1);
    if (PyArray_DIM((PyArrayObject *)out_o, 0) != batch) {
        PyErr_Format(PyExc_ValueError, "out must have %zd rows (one per length)",
                     (Py_ssize_t)batch);
        return NULL;
    }
    lengths = (const npy_int64 *)PyArray_DATA((PyArrayObject *)len_o);
    for (b = 0; b < batch; b++) {
        if (lengths[b] < 0 || lengths[b] > max_length) {
            PyErr_Format(PyExc_ValueError,
                         "lengths must be in [0, max_length=%zd], got %lld",
                         (Py_ssize_t)max_length, (long long)lengths[b]);
            return NULL;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    pe_padding_mask(batch, max_length, lengths, left,
                    (unsigned char *)PyArray_DATA((PyArrayObject *)out_o));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef mask_methods[] = {
    {"_causal_mask", py_causal_mask, METH_VARARGS,
     "_causal_mask(out, query_offset, window)\n\nFill a bool (q, k) causal "
     "mask, True = may attend."},
    {"_padding_mask", py_padding_mask, METH_VARARGS,
     "_padding_mask(lengths, out, left)\n\nFill a bool (batch, max_length) "
     "mask, True at real tokens."},
    {NULL, NULL, 0, NULL}};

/* Register the mask family (masks.c). */
static int
register_masks(PyObject *m)
{
    return PyModule_AddFunctions(m, mask_methods);
}

/* ------------------------------------------------------------------ */
/* Module                                                               */
/* ------------------------------------------------------------------ */

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "posemb._core",
    "posemb's C kernels (private; use the functions in posemb).", -1,
    NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC
PyInit__core(void)
{
    PyObject *m;

    import_array();
    import_umath();

    m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (register_rope(m) < 0 || register_rope_variants(m) < 0 ||
        register_sinusoidal(m) < 0 ||
        register_learned(m) < 0 || register_relative(m) < 0 ||
        register_alibi(m) < 0 || register_masks(m) < 0)
        goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
