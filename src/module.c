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

/* Check a C-contiguous array of the given dtype and rank; 0 or -1. */
static int
check_array(PyObject *obj, const char *name, int typenum, int ndim,
            int writeable)
{
    PyArrayObject *a;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray", name);
        return -1;
    }
    a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != typenum || !PyArray_ISNBO(PyArray_DESCR(a)->byteorder)) {
        PyErr_Format(PyExc_TypeError, "%s must have dtype %s in native byte order",
                     name, typenum == NPY_INT64 ? "int64"
                           : typenum == NPY_FLOAT ? "float32" : "float64");
        return -1;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must have %d dimension(s), got %d",
                     name, ndim, PyArray_NDIM(a));
        return -1;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous and aligned",
                     name);
        return -1;
    }
    if (writeable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be writeable", name);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* RoPE: apply gufuncs, rotate_half, tables                             */
/* ------------------------------------------------------------------ */

typedef struct { pe_rope_fn fn; } rope_kernel;
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
    ((const rope_kernel *)data)->fn(&L);
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

static const rope_kernel rope_half_fwd[3] = {
    {pe_rope_half_fwd_f16}, {pe_rope_half_fwd_f32}, {pe_rope_half_fwd_f64}};
static const rope_kernel rope_half_back[3] = {
    {pe_rope_half_back_f16}, {pe_rope_half_back_f32}, {pe_rope_half_back_f64}};
static const rope_kernel rope_inter_fwd[3] = {
    {pe_rope_inter_fwd_f16}, {pe_rope_inter_fwd_f32}, {pe_rope_inter_fwd_f64}};
static const rope_kernel rope_inter_back[3] = {
    {pe_rope_inter_back_f16}, {pe_rope_inter_back_f32},
    {pe_rope_inter_back_f64}};
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
    if (PyArray_DATA((PyArrayObject *)cos_o) ==
        PyArray_DATA((PyArrayObject *)sin_o) && n * h > 0) {
        PyErr_SetString(PyExc_ValueError, "cos and sin must not share memory");
        return NULL;
    }
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

static PyMethodDef rope_methods[] = {
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

/* Check an aligned, native-byte-order array of a float type and rank. */
static int
check_float_array(PyObject *obj, const char *name, int ndim, int writeable)
{
    PyArrayObject *a;
    int t;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray", name);
        return -1;
    }
    a = (PyArrayObject *)obj;
    t = PyArray_TYPE(a);
    if ((t != NPY_HALF && t != NPY_FLOAT && t != NPY_DOUBLE) ||
        !PyArray_ISNBO(PyArray_DESCR(a)->byteorder)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be float16, float32 or float64 in native byte order",
                     name);
        return -1;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must have %d dimensions, got %d", name,
                     ndim, PyArray_NDIM(a));
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
        const long long len = (long long)(cu[w + 1] - cu[w]);
        const long long off = a->offsets ? (long long)a->offsets[w] : 0;
        PyErr_Format(PyExc_IndexError,
                     "cu_seqlens: sequence %zd has %lld tokens at positions "
                     "%lld..%lld, but cos/sin have only %zd rows",
                     (Py_ssize_t)w, len, off, off + len - 1, (Py_ssize_t)a->rows);
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
    if (check_float_array(x_o, "x", 3, 0) < 0 ||
        check_float_array(out_o, "out", 3, 1) < 0 ||
        check_float_array(cos_o, "cos", 2, 0) < 0 ||
        check_float_array(sin_o, "sin", 2, 0) < 0 ||
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

/* Register the sinusoidal family (sinusoidal.c). */
static int
register_sinusoidal(PyObject *m)
{
    (void)m;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Learned encodings, forward and backward                              */
/* ------------------------------------------------------------------ */

/* Register the learned family (learned.c). */
static int
register_learned(PyObject *m)
{
    (void)m;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Relative position bias: T5 buckets, Shaw tables                      */
/* ------------------------------------------------------------------ */

/* Register the relative family (relative.c). */
static int
register_relative(PyObject *m)
{
    (void)m;
    return 0;
}

/* ------------------------------------------------------------------ */
/* ALiBi                                                                */
/* ------------------------------------------------------------------ */

/* Register the ALiBi family (alibi.c). */
static int
register_alibi(PyObject *m)
{
    (void)m;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Attention masks                                                      */
/* ------------------------------------------------------------------ */

/* Register the mask family (masks.c). */
static int
register_masks(PyObject *m)
{
    (void)m;
    return 0;
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
