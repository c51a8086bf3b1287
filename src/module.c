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

/* Core dims of (d),(r),(r)->(d): the table width r is even and <= d. */
static int
rope_core_dims(PyUFuncObject *ufunc, npy_intp *core)
{
    const npy_intp d = core[0], r = core[1];
    if (r % 2 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: cos/sin width (last axis) must be even, got %zd",
                     ufunc->name, (Py_ssize_t)r);
        return -1;
    }
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
/* Sinusoidal (absolute) encodings                                      */
/* ------------------------------------------------------------------ */

typedef struct {
    void (*fn)(const pe_sinusoidal_add_loop *);
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
    ((const sinusoidal_add_kernel *)data)->fn(&L);
}

static const sinusoidal_add_kernel sinusoidal_add_k[3] = {
    {pe_sinusoidal_add_f16}, {pe_sinusoidal_add_f32}, {pe_sinusoidal_add_f64}};
static PyUFuncGenericFunction sinusoidal_add_funcs[3] = {
    sinusoidal_add_loop, sinusoidal_add_loop, sinusoidal_add_loop};
/* float16 x takes a float64 table, so the sum is rounded once */
static const char sinusoidal_add_types[9] = {
    NPY_HALF, NPY_DOUBLE, NPY_HALF,
    NPY_FLOAT, NPY_FLOAT, NPY_FLOAT,
    NPY_DOUBLE, NPY_DOUBLE, NPY_DOUBLE};
static void *sinusoidal_add_data[3];

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
    work = (double *)PyMem_RawMalloc((size_t)PE_SINUSOIDAL_WORK(dim) *
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
    PyMem_RawFree(work);
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
    return PyModule_AddFunctions(m, sinusoidal_methods);
}

/* ------------------------------------------------------------------ */
/* Learned encodings, forward and backward                              */
/* ------------------------------------------------------------------ */

typedef struct { void (*fn)(const pe_learned_loop *); } learned_kernel;

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
    ((const learned_kernel *)data)->fn(&L);
}

static const learned_kernel learned_fwd_k[3] = {
    {pe_learned_fwd_f16}, {pe_learned_fwd_f32}, {pe_learned_fwd_f64}};
static PyUFuncGenericFunction learned_fwd_funcs[3] = {
    learned_fwd_loop, learned_fwd_loop, learned_fwd_loop};
static const char learned_fwd_types[12] = {
    NPY_HALF, NPY_INT64, NPY_HALF, NPY_HALF,
    NPY_FLOAT, NPY_INT64, NPY_FLOAT, NPY_FLOAT,
    NPY_DOUBLE, NPY_INT64, NPY_DOUBLE, NPY_DOUBLE};
static void *learned_fwd_data[3];

/* Do two C-contiguous arrays share any byte? */
static int
learned_overlap(PyArrayObject *a, PyArrayObject *b)
{
    const char *a0 = PyArray_BYTES(a), *b0 = PyArray_BYTES(b);
    const npy_intp na = PyArray_NBYTES(a), nb = PyArray_NBYTES(b);
    return na > 0 && nb > 0 && a0 < b0 + nb && b0 < a0 + na;
}

/*
 * _learned_back(grad_out, positions, grad_weight)
 * grad_out: float16/32/64 (n, d); positions: int64 (n,), each in [0, m);
 * grad_weight: (m, d) of grad_out's dtype (float32 for float16), writeable,
 * sharing no memory with the inputs.  All C-contiguous.  Adds every
 * grad_out row into its position's grad_weight row, in token order.
 * Every argument is checked before anything is written.
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

    if (!PyArg_ParseTuple(args, "OOO:_learned_back", &g_o, &pos_o, &gw_o))
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
    if (learned_overlap(gw, g) || learned_overlap(gw, pos)) {
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
        work = (int64_t *)PyMem_RawMalloc((size_t)nwork * sizeof(int64_t));
        if (work == NULL)
            return PyErr_NoMemory();
    }

    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_HALF)
        pe_learned_back_f16(n, d, (const uint16_t *)PyArray_DATA(g), p, m,
                            (float *)PyArray_DATA(gw), work);
    else if (typenum == NPY_FLOAT)
        pe_learned_back_f32(n, d, (const float *)PyArray_DATA(g), p, m,
                            (float *)PyArray_DATA(gw), work);
    else
        pe_learned_back_f64(n, d, (const double *)PyArray_DATA(g), p, m,
                            (double *)PyArray_DATA(gw), work);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(work);
    Py_RETURN_NONE;
}

static PyMethodDef learned_methods[] = {
    {"_learned_back", py_learned_back, METH_VARARGS,
     "_learned_back(grad_out, positions, grad_weight)\n\n"
     "grad_weight[positions[t]] += grad_out[t] in token order "
     "(see posemb.learned_pe_backward)."},
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
    if (register_rope(m) < 0 || register_sinusoidal(m) < 0 ||
        register_learned(m) < 0 || register_relative(m) < 0 ||
        register_alibi(m) < 0 || register_masks(m) < 0)
        goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
