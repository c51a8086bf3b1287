/*
 * binding.c - the only C that sees CPython and NumPy: posemb._core.  Two
 * tables: GUFUNCS, NumPy (generalized) ufuncs over the kernels (NumPy does
 * broadcasting, out=, axes=, dtypes, copies of overlapping operands and
 * __array_ufunc__), and METHODS, plain functions over arrays the Python
 * layer prepared, their arguments taken by one converter (to_array).  C
 * checks what protects memory and defined behaviour (dtypes, ranks,
 * contiguity, shapes, overlap, posemb.h's limits); Python checks meaning
 * first, naming the user's argument.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>
#include <fenv.h>
#include "posemb.h"

/* ---- Arguments */

enum { ANY_FLOAT = -1, REAL_FLOAT = -2 };        /* f16/f32/f64; f32/f64 */
enum { OUT = 1, STRIDED = 2, OPTIONAL = 4 };     /* arg.flags */
/* An array argument: its spec (name, dtype, rank, flags), then the array. */
typedef struct { const char *name; int type, ndim, flags; PyArrayObject *a; } arg;

#define DATA(s) PyArray_DATA((s).a)
#define DIM(s, i) PyArray_DIM((s).a, i)
#define STRIDE(s, i) PyArray_STRIDE((s).a, i)

static int fail(PyObject *e, const char *f, const char *n) { return PyErr_Format(e, f, n), 0; }

/* O& converter: an aligned ndarray of the spec's dtype in native byte
 * order and rank, C-contiguous unless STRIDED, writeable if OUT. */
static int to_array(PyObject *o, void *p)
{
    arg *s = (arg *)p;
    PyArrayObject *a = (PyArrayObject *)o;
    const int t = PyArray_Check(o) ? PyArray_TYPE(a) : -3;
    if (o == Py_None && (s->flags & OPTIONAL))
        return s->a = NULL, 1;
    if (t == -3)
        return fail(PyExc_TypeError, "%s must be a numpy.ndarray", s->name);
    if (!(s->type == ANY_FLOAT ? t == NPY_HALF || t == NPY_FLOAT || t == NPY_DOUBLE
          : s->type == REAL_FLOAT ? t == NPY_FLOAT || t == NPY_DOUBLE : t == s->type) ||
        !PyArray_ISNBO(PyArray_DESCR(a)->byteorder))
        return fail(PyExc_TypeError, "%s has the wrong dtype (or byte order)", s->name);
    if (PyArray_NDIM(a) != s->ndim)
        return fail(PyExc_ValueError, "%s has the wrong number of dimensions", s->name);
    if (!PyArray_ISALIGNED(a))
        return fail(PyExc_ValueError, "%s must be aligned", s->name);
    if (!(s->flags & STRIDED) && !PyArray_IS_C_CONTIGUOUS(a))
        return fail(PyExc_ValueError, "%s must be C-contiguous", s->name);
    if ((s->flags & OUT) && !PyArray_ISWRITEABLE(a))
        return fail(PyExc_ValueError, "%s must be writeable", s->name);
    s->a = a;
    return 1;
}

/* 0 float16, 1 float32, 2 float64 */
#define ftype(s) (PyArray_TYPE((s)->a) == NPY_HALF ? 0 : PyArray_TYPE((s)->a) == NPY_FLOAT ? 1 : 2)

/* b has a's dtype (or the given type number) */
static int same_type(const arg *b, int type)
{
    return PyArray_TYPE(b->a) == type ||
           fail(PyExc_TypeError, "%s has the wrong dtype for the other arguments", b->name);
}

/* s has shape dims (-1: any) */
static int shape_is(const arg *s, const npy_intp *dims)
{
    for (int i = 0; i < s->ndim; i++)
        if (dims[i] >= 0 && PyArray_DIM(s->a, i) != dims[i])
            return fail(PyExc_ValueError, "%s has the wrong shape", s->name);
    return 1;
}
#define SHAPE_IS(s, ...) shape_is(&(s), (const npy_intp[]){__VA_ARGS__})

/* The byte range [r[0], r[1]) an array can touch; empty for a size-0 array. */
static void extent(PyArrayObject *a, char **r)
{
    r[0] = r[1] = PyArray_BYTES(a);
    for (int i = 0; PyArray_SIZE(a) > 0 && i <= PyArray_NDIM(a); i++) {
        const npy_intp span = i == PyArray_NDIM(a) ? PyArray_ITEMSIZE(a)
                              : (PyArray_DIM(a, i) - 1) * PyArray_STRIDE(a, i);
        r[span > 0] += span;
    }
}

/* out shares no memory with in (conservative: byte extents) */
static int disjoint(const arg *out, const arg *in)
{
    char *a[2], *b[2];
    if (in->a == NULL)
        return 1;
    extent(out->a, a);
    extent(in->a, b);
    return !(a[0] < b[1] && b[0] < a[1] && a[0] != a[1] && b[0] != b[1]) ||
           (PyErr_Format(PyExc_ValueError, "%s and %s must not share memory", out->name,
                         in->name), 0);
}

/* lo <= v <= hi, else ValueError naming the argument */
static int in_range(long long v, long long lo, long long hi, const char *name)
{
    return (v >= lo && v <= hi) ||
           (PyErr_Format(PyExc_ValueError, "%s must be in [%lld, %lld], got %lld", name, lo,
                         hi, v), 0);
}

/* query_offset and the sizes q, k within limit */
static int extent_ok(long long offset, npy_intp q, npy_intp k, long long limit)
{
    return in_range(offset, -limit, limit, "query_offset") &&
           in_range(q, 0, limit, "query_length") && in_range(k, 0, limit, "key_length");
}

/* Call F_f16/F_f32/F_f64 by float type t (f32/f64 only: TYPED2). */
#define TYPED(t, F, ...) \
    ((t) == 0 ? F##_f16(__VA_ARGS__) : (t) == 1 ? F##_f32(__VA_ARGS__) : F##_f64(__VA_ARGS__))
#define TYPED2(t, F, ...) ((t) == 1 ? F##_f32(__VA_ARGS__) : F##_f64(__VA_ARGS__))
#define UNLOCKED(stmt) do { Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS } while (0)
#define PARSE(...) if (!PyArg_ParseTuple(args, __VA_ARGS__)) return NULL
#define PYFN(name) static PyObject *py##name(PyObject *Py_UNUSED(self), PyObject *args)
#define LOOP(name) \
    static void name(char **args, npy_intp const *dims, npy_intp const *steps, void *data)

/* ---- Generalized ufuncs */

/* ---- Ctrl-C in a long gufunc call
 *
 * The loops below are legacy ufunc loops (PyUFunc_FromFuncAndDataAndSignature)
 * without NPY_METH_REQUIRES_PYAPI: NumPy calls them with the GIL released,
 * once per stretch of outer iterations its iterator hands out, and never asks
 * PyErr_Occurred() between or after them.  A long kernel asks
 * stop_on_signal() every ~100 ms; PyErr_CheckSignals() runs the Python
 * handler (SIGINT: KeyboardInterrupt) and so consumes the signal; the
 * exception it sets is all that is left of the Ctrl-C.  NumPy
 * then (1) calls the loop again for the remaining outer iterations, and (2)
 * checks the floating-point flags the loops raised: if any is set it calls
 * Python -- PyErr_WarnEx, or an np.errstate call= function or log object --
 * with that exception pending, which can replace it (SystemError: "returned
 * a result with an exception set") or clear it (the Ctrl-C is lost and the
 * half-written output returned).  NumPy fails the call only later, when
 * NpyIter_Deallocate finds PyErr_Occurred().
 *
 * So a loop long enough to be stopped (PE_STOP_CHECK_BYTES of work) first
 * asks whether the calling thread already has an error set -- an earlier
 * loop of the same call stopped -- or a signal came, and then returns at
 * once; and a long loop that ends with an error set leaves the floating-
 * point flags clear, so NumPy's check finds nothing and runs no Python
 * before the exception reaches NumPy's own PyErr_Occurred() test (a failed
 * call has no result whose flags matter; NumPy skips that check itself for
 * a loop that reports an error).  No state is kept between calls: the
 * thread's error indicator is the record, and short loops (a decode step)
 * ask nothing.
 * The signal cannot be watched without being consumed instead (both
 * PyErr_CheckSignals and PyOS_InterruptOccurred clear its flag), and
 * re-raising it with PyErr_SetInterrupt would run the handler twice and
 * cover SIGINT only.  A signal after the last check is not consumed: the
 * eval loop raises it when the call returns. */

/* 1 if the calling thread has a Python error set (asked under the GIL) */
static int error_set(void)
{
    PyGILState_STATE st = PyGILState_Ensure();
    const int set = PyErr_Occurred() != NULL;
    PyGILState_Release(st);
    return set;
}

/* Asked by long kernels (with or without the GIL) every ~100 ms: 1 if a
 * signal handler raised (Ctrl-C) or an error is already set (no handler
 * runs with an exception set), the error left for NumPy to report. */
static int stop_on_signal(void)
{
    PyGILState_STATE st = PyGILState_Ensure();
    const int stop = PyErr_Occurred() != NULL || PyErr_CheckSignals() < 0;
    PyGILState_Release(st);
    return stop;
}

/* Before a loop of about `bytes` of work: 1 (skip it) if it is long enough
 * to be stopped and an earlier loop of the call stopped, or a signal came
 * since (stop_on_signal).  Kernels ask only after ~100 ms of their own
 * work, so without this a call that NumPy splits into loops shorter than
 * that never asked: on a Zen 5 EPYC, 8 float16 grids of 2^24 values in 4
 * loops (0.4 s) ran to their end through Ctrl-C. */
static int loop_skipped(double bytes)
{
    if (bytes < (double)PE_STOP_CHECK_BYTES || !stop_on_signal())
        return 0;
    feclearexcept(FE_ALL_EXCEPT);
    return 1;
}

/* After a loop of about `bytes` of work: a stopped call leaves no
 * floating-point flag for NumPy to report through Python. */
static void loop_done(double bytes)
{
    if (bytes >= (double)PE_STOP_CHECK_BYTES && error_set())
        feclearexcept(FE_ALL_EXCEPT);
}

/* Each loop's data is a code: 4 * kind + type (type 0..3: float16, float32,
 * float64, bfloat16 as uint16 bits; kind: RoPE's 0..3, else 0). */
#define CODE (*(const int *)data)

/* (h,s,d),(s,r),(s,r)->(h,s,d); dims {n, h, s, d, r}; steps: 4 outer, then
 * x (h, s, d), cos (s, r), sin (s, r), y (h, s, d) */
LOOP(rope_loop)
{
    /* values moved (x and y), at 2 bytes each at least */
    const double bytes = 4.0 * (double)dims[0] * (double)dims[1] * (double)dims[2] *
                         (double)dims[3];
    if (loop_skipped(bytes))
        return;
    const pe_rope_grid g = {
        dims[0], dims[1], dims[2], dims[3], dims[4],
        args[0], args[1], args[2], args[3],
        steps[0], steps[4], steps[5], steps[3], steps[11], steps[12],
        steps[1], steps[7], steps[2], steps[9],
        steps[6], steps[8], steps[10], steps[13], stop_on_signal};
    pe_rope_apply(&g, CODE / 4, CODE % 4);
    loop_done(bytes);
}

/* (d)->(d); dims {n, d} */
LOOP(rotate_half_loop)
{
    const pe_unary_loop L = {dims[0], dims[1], args[0], args[1],
                             steps[0], steps[1], steps[2], steps[3]};
    TYPED(CODE, pe_rotate_half, &L);
}

/* (s,d),(s,d)->(s,d); dims {n, s, d}; 3 outer + 6 core steps */
LOOP(sinusoidal_rows_loop)
{
    const double bytes = 4.0 * (double)dims[0] * (double)dims[1] * (double)dims[2];
    if (loop_skipped(bytes))
        return;
    const pe_sinusoidal_grid g = {
        dims[0], dims[1], dims[2], args[0], args[1], args[2],
        steps[0], steps[1], steps[2], steps[3], steps[5], steps[7],
        steps[4], steps[6], steps[8], stop_on_signal};
    pe_sinusoidal_add_grid(&g, 2 << CODE);   /* x's element size */
    loop_done(bytes);
}

/* (d),(),(m,d)->(d); dims {n, d, m}; 4 outer + 4 core steps */
LOOP(learned_loop)
{
    const double bytes = 4.0 * (double)dims[0] * (double)dims[1];
    if (loop_skipped(bytes))
        return;
    const pe_learned_loop L = {
        dims[0], dims[1], dims[2], args[0], args[1], args[2], args[3],
        steps[0], steps[1], steps[2], steps[3], steps[4], steps[5], steps[6], steps[7],
        stop_on_signal};
    pe_learned_fwd_run(&L, CODE);
    loop_done(bytes);
}

/* Core dims before any loop runs.  RoPE (nin 3): r <= d (an odd r is
 * allowed: dask probes with every dimension 1; the unpaired feature is
 * copied); rotate_half (nin 1): d even. */
static int core_dims(PyUFuncObject *uf, npy_intp *core)
{
    if (uf->nin == 3 ? core[3] <= core[2] : core[0] % 2 == 0)
        return 0;
    PyErr_Format(PyExc_ValueError, uf->nin == 3
                 ? "%s: cos/sin width (last axis, %zd) must not exceed x's last axis (%zd)"
                 : "%s: the rotated axis must have even length, got %zd",
                 uf->name, (Py_ssize_t)core[uf->nin == 3 ? 3 : 0], (Py_ssize_t)core[2]);
    return -1;
}

enum { H = NPY_HALF, F = NPY_FLOAT, D = NPY_DOUBLE, I64 = NPY_INT64, U16 = NPY_UINT16 };
static const char types_3[12] = {H, H, H, H, F, F, F, F, D, D, D, D};
static const char types_1[6] = {H, H, F, F, D, D}, types_bf16[4] = {U16, U16, U16, U16};
/* float16 x takes a float64 table, so the sum is rounded once */
static const char types_add[9] = {H, D, H, F, F, F, D, D, D};
static const char types_learned[12] = {H, I64, H, H, F, I64, F, F, D, I64, D, D};
static const char types_learned_bf16[4] = {U16, I64, U16, U16};
static const int codes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

#define ROPE_SIG "(h,s,d),(s,r),(s,r)->(h,s,d)"
#define ROPE_DOC(what) \
    what " on a (heads, positions, features) grid, tables (positions, r <= d); " \
    "features past r are copied.  " ROPE_SIG "."
#define BF16_DOC ROPE_DOC("RoPE on bfloat16 bit patterns (uint16), float32 maths rounded once")

/* One row per gufunc: name, signature, loop, first code, type numbers, loops
 * (3: float16, float32, float64), nin, core-dims check, doc. */
static const struct gufunc {
    const char *name, *signature;
    PyUFuncGenericFunction loop;
    int code;
    const char *types;
    int ntypes, nin;
    PyUFunc_ProcessCoreDimsFunc *check;
    const char *doc;
} GUFUNCS[] = {
    {"rope_half_fwd", ROPE_SIG, rope_loop, 0, types_3, 3, 3, core_dims,
     ROPE_DOC("Half-split RoPE y = x*cos + rotate_half(x)*sin (GPT-NeoX, HF rotate_half)")},
    {"rope_half_back", ROPE_SIG, rope_loop, 4, types_3, 3, 3, core_dims,
     ROPE_DOC("The adjoint (gradient) of rope_half_fwd")},
    {"rope_inter_fwd", ROPE_SIG, rope_loop, 8, types_3, 3, 3, core_dims,
     ROPE_DOC("Interleaved RoPE on pairs (2i, 2i+1) (GPT-J, Meta)")},
    {"rope_inter_back", ROPE_SIG, rope_loop, 12, types_3, 3, 3, core_dims,
     ROPE_DOC("The adjoint (gradient) of rope_inter_fwd")},
    {"rope_bf16_half_fwd", ROPE_SIG, rope_loop, 3, types_bf16, 1, 3, core_dims, BF16_DOC},
    {"rope_bf16_half_back", ROPE_SIG, rope_loop, 7, types_bf16, 1, 3, core_dims, BF16_DOC},
    {"rope_bf16_inter_fwd", ROPE_SIG, rope_loop, 11, types_bf16, 1, 3, core_dims, BF16_DOC},
    {"rope_bf16_inter_back", ROPE_SIG, rope_loop, 15, types_bf16, 1, 3, core_dims, BF16_DOC},
    {"rotate_half", "(d)->(d)", rotate_half_loop, 0, types_1, 3, 1, core_dims,
     "rotate_half: concat(-x[h:], x[:h]) over an even axis, (d)->(d)."},
    {"sinusoidal_add_rows", "(s,d),(s,d)->(s,d)", sinusoidal_rows_loop, 0, types_add, 3, 2,
     NULL, "y = x + t over (..., seq, dim) grids; float16 x takes a float64 t, rounded once."},
    {"learned_pe_fwd", "(d),(),(m,d)->(d)", learned_loop, 0, types_learned, 3, 3, NULL,
     "Learned forward y = x + w[pos]; a position outside [0, m) gives a NaN row."},
    {"learned_pe_fwd_bf16", "(d),(),(m,d)->(d)", learned_loop, 3, types_learned_bf16, 1, 3, NULL,
     "learned_pe_fwd on bfloat16 bit patterns (uint16), the sum rounded once."},
};
#define NGUFUNCS (sizeof GUFUNCS / sizeof GUFUNCS[0])

/* NumPy keeps the pointers it is given: static storage per gufunc. */
static PyUFuncGenericFunction gufunc_loops[NGUFUNCS][3];
static void *gufunc_data[NGUFUNCS][3];

static int add_gufuncs(PyObject *m)
{
    for (size_t i = 0; i < NGUFUNCS; i++) {
        const struct gufunc *g = &GUFUNCS[i];
        for (int t = 0; t < g->ntypes; t++)
            gufunc_loops[i][t] = g->loop, gufunc_data[i][t] = (void *)&codes[g->code + t];
        PyUFuncObject *uf = (PyUFuncObject *)PyUFunc_FromFuncAndDataAndSignature(
            gufunc_loops[i], gufunc_data[i], (char *)g->types, g->ntypes, g->nin, 1,
            PyUFunc_None, g->name, g->doc, 0, g->signature);
        if (uf == NULL)
            return -1;
        uf->process_core_dims_func = g->check;
        const int rc = PyModule_AddObjectRef(m, g->name, (PyObject *)uf);
        Py_DECREF(uf);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ---- Plain functions (their Python callers check every value first) */

PYFN(_rope_table)
{
    arg pos = {"positions", NPY_INT64, 1, 0, 0}, inv = {"inv_freq", NPY_DOUBLE, 1, 0, 0};
    arg cos = {"cos", REAL_FLOAT, 2, OUT, 0}, sin = {"sin", REAL_FLOAT, 2, OUT, 0};
    double attn;
    int inter;
    PARSE("O&O&dpO&O&:_rope_table", to_array, &pos, to_array, &inv, &attn, &inter,
          to_array, &cos, to_array, &sin);
    if (!same_type(&sin, PyArray_TYPE(cos.a)) || !SHAPE_IS(cos, DIM(pos, 0), 2 * DIM(inv, 0)) ||
        !SHAPE_IS(sin, DIM(pos, 0), 2 * DIM(inv, 0)) || !disjoint(&cos, &sin) ||
        !disjoint(&cos, &pos) || !disjoint(&cos, &inv) || !disjoint(&sin, &pos) ||
        !disjoint(&sin, &inv))
        return NULL;
    UNLOCKED(TYPED2(ftype(&cos), pe_rope_table, DIM(pos, 0), DATA(pos), DIM(inv, 0),
                    DATA(inv), attn, inter, DATA(cos), DATA(sin)));
    Py_RETURN_NONE;
}

/* Any strides, out may be x.  posemb.apply_rope_varlen checks cu_seqlens and
 * offsets, naming them; checked again here (read once): no read out of range. */
PYFN(_rope_varlen)
{
    arg x = {"x", ANY_FLOAT, 3, STRIDED, 0}, out = {"out", ANY_FLOAT, 3, OUT | STRIDED, 0};
    arg cos = {"cos", ANY_FLOAT, 2, STRIDED, 0}, sin = {"sin", ANY_FLOAT, 2, STRIDED, 0};
    arg cu = {"cu_seqlens", NPY_INT64, 1, 0, 0}, off = {"offset", NPY_INT64, 1, OPTIONAL, 0};
    int inter, back, rc;
    ptrdiff_t where;
    PARSE("O&O&O&O&O&ppO&:_rope_varlen", to_array, &x, to_array, &cu, to_array, &off,
          to_array, &cos, to_array, &sin, &inter, &back, to_array, &out);
    if (!same_type(&out, PyArray_TYPE(x.a)) || !same_type(&cos, PyArray_TYPE(x.a)) ||
        !same_type(&sin, PyArray_TYPE(x.a)) || !SHAPE_IS(out, DIM(x, 0), DIM(x, 1), DIM(x, 2)) ||
        !SHAPE_IS(sin, DIM(cos, 0), DIM(cos, 1)) || !in_range(DIM(cu, 0), 1, 1LL << 62, "cu") ||
        (off.a != NULL && !SHAPE_IS(off, DIM(cu, 0) - 1)))
        return NULL;
    const pe_rope_varlen a = {
        DIM(cu, 0) - 1, DIM(x, 0), DIM(x, 1), DIM(x, 2), DIM(cos, 1), DIM(cos, 0), DATA(cu),
        off.a ? DATA(off) : NULL, DATA(x), DATA(cos), DATA(sin), DATA(out), STRIDE(x, 0),
        STRIDE(x, 1), STRIDE(x, 2), STRIDE(out, 0), STRIDE(out, 1), STRIDE(out, 2),
        STRIDE(cos, 0), STRIDE(cos, 1), STRIDE(sin, 0), STRIDE(sin, 1)};
    if ((rc = pe_rope_varlen_check(&a, &where)) != PE_VARLEN_OK)
        return PyErr_Format(rc == PE_VARLEN_OUT_OF_RANGE ? PyExc_IndexError : PyExc_ValueError,
                            "cu_seqlens and offset do not fit x and cos/sin (sequence %zd)",
                            (Py_ssize_t)where);
    UNLOCKED(rc = pe_rope_varlen_apply(&a, pe_rope_kernel(2 * !!inter + !!back, ftype(&x))));
    return rc != PE_VARLEN_OK ? PyErr_Format(PyExc_RuntimeError, "cu_seqlens or offset "
                                             "changed during _rope_varlen")
                              : Py_NewRef(Py_None);
}

PYFN(_sinusoidal_table)
{
    arg inv = {"inv_freq", NPY_DOUBLE, 1, 0, 0}, out = {"out", ANY_FLOAT, 2, OUT, 0};
    long long start;
    int concat;
    double *work;
    PARSE("LO&pO&:_sinusoidal_table", &start, to_array, &inv, &concat, to_array, &out);
    if (!SHAPE_IS(inv, PE_SINUSOIDAL_NFREQ(DIM(out, 1))) ||
        !in_range(start, 0, PE_MAX_EXACT - DIM(out, 0), "start"))
        return NULL;
    if (DIM(out, 0) == 0 || DIM(out, 1) == 0)
        Py_RETURN_NONE;
    if (PE_SINUSOIDAL_NFREQ(DIM(out, 1)) > PY_SSIZE_T_MAX / 8 / PE_SINUSOIDAL_WORK(1) ||
        (work = PyMem_Malloc((size_t)PE_SINUSOIDAL_WORK(DIM(out, 1)) * 8)) == NULL)
        return PyErr_NoMemory();
    UNLOCKED(TYPED(ftype(&out), pe_sinusoidal_table, DIM(out, 0), start, DIM(out, 1),
                   DATA(inv), concat, DATA(out), work));
    return PyMem_Free(work), Py_NewRef(Py_None);
}

/* _to_float16(src, out): a float32 result (a float16 gradient's float32
 * sums) rounded to float16, out of the same 2-D shape. */
PYFN(_to_float16)
{
    arg src = {"src", NPY_FLOAT, 2, 0, 0}, out = {"out", NPY_HALF, 2, OUT, 0};
    PARSE("O&O&:_to_float16", to_array, &src, to_array, &out);
    if (!SHAPE_IS(out, DIM(src, 0), DIM(src, 1)) || !disjoint(&out, &src))
        return NULL;
    UNLOCKED(pe_float_to_half_run(DATA(src), DATA(out), PyArray_SIZE(src.a)));
    Py_RETURN_NONE;
}

/* _learned_back(grad_out, positions, grad_weight, assign) and
 * _learned_back_bf16: grad_out bfloat16 bit patterns (uint16), grad_weight
 * float32. */
static PyObject *learned_back(PyObject *args, int bf16)
{
    arg g = {"grad_out", bf16 ? NPY_UINT16 : ANY_FLOAT, 2, 0, 0};
    arg pos = {"positions", NPY_INT64, 1, 0, 0}, gw = {"grad_weight", REAL_FLOAT, 2, OUT, 0};
    int assign = 0;
    int64_t *work = NULL;
    PARSE(bf16 ? "O&O&O&|p:_learned_back_bf16" : "O&O&O&|p:_learned_back", to_array, &g,
          to_array, &pos, to_array, &gw, &assign);
    if (!same_type(&gw, !bf16 && ftype(&g) == 2 ? NPY_DOUBLE : NPY_FLOAT) ||
        !SHAPE_IS(pos, DIM(g, 0)) || !SHAPE_IS(gw, -1, DIM(g, 1)) || !disjoint(&gw, &g) ||
        !disjoint(&gw, &pos))
        return NULL;
    for (npy_intp t = 0; t < DIM(g, 0); t++) {
        const npy_int64 p = ((const npy_int64 *)DATA(pos))[t];
        if (p < 0 || p >= DIM(gw, 0))
            return PyErr_Format(PyExc_IndexError, "positions must be in [0, %zd), got %lld",
                                (Py_ssize_t)DIM(gw, 0), (long long)p);
    }
    const npy_intp nwork = pe_learned_back_work(DIM(g, 0), DIM(gw, 0));
    if (nwork > 0 && (nwork > PY_SSIZE_T_MAX / 8 ||
                      (work = PyMem_Malloc((size_t)nwork * 8)) == NULL))
        return PyErr_NoMemory();
    if (bf16)
        UNLOCKED(pe_learned_back_bf16(DIM(g, 0), DIM(g, 1), DATA(g), DATA(pos), DIM(gw, 0),
                                      DATA(gw), work, assign));
    else
        UNLOCKED(TYPED(ftype(&g), pe_learned_back, DIM(g, 0), DIM(g, 1), DATA(g), DATA(pos),
                       DIM(gw, 0), DATA(gw), work, assign));
    return PyMem_Free(work), Py_NewRef(Py_None);
}

PYFN(_learned_back) { return learned_back(args, 0); }
PYFN(_learned_back_bf16) { return learned_back(args, 1); }

/* HF's T5 bucket parameters into spec, with a PyMem boundary table. */
static int t5_spec(pe_t5_spec *spec, int bidirectional, long long nb, long long max_distance)
{
    const long long half = bidirectional ? nb / 2 : nb;
    uint64_t *bound;
    if (!in_range(nb, bidirectional ? 4 : 2, PE_T5_MAX_BUCKETS, "num_buckets") ||
        !in_range(max_distance, half / 2 + 1, PE_MAX_EXACT, "max_distance"))
        return -1;
    if ((bound = PyMem_Malloc((size_t)half * sizeof(uint64_t))) == NULL)
        return PyErr_NoMemory(), -1;
    UNLOCKED(pe_t5_boundaries(bidirectional, nb, max_distance, bound));
    *spec = (pe_t5_spec){bidirectional, nb, bound};
    return 0;
}

/* out is relative_position itself or disjoint */
PYFN(_t5_bucket)
{
    arg rp = {"relative_position", NPY_INT64, 1, 0, 0}, out = {"out", NPY_INT64, 1, OUT, 0};
    int bi;
    long long nb, md;
    pe_t5_spec spec;
    PARSE("O&O&pLL:_t5_bucket", to_array, &rp, to_array, &out, &bi, &nb, &md);
    if (!SHAPE_IS(out, DIM(rp, 0)) || (DATA(out) != DATA(rp) && !disjoint(&out, &rp)) ||
        t5_spec(&spec, bi, nb, md) < 0)
        return NULL;
    UNLOCKED(pe_t5_bucket_i64(&spec, DIM(rp, 0), DATA(rp), DATA(out)));
    return PyMem_Free((void *)spec.bound), Py_NewRef(Py_None);
}

/* The output type for input in: the same, but a gradient (backward) of
 * float16 or bfloat16 (bit patterns: uint16) sums into float32. */
static int out_type(const arg *in, int backward)
{
    const int t = PyArray_TYPE(in->a);
    return backward && (t == NPY_HALF || t == NPY_UINT16) ? NPY_FLOAT : t;
}

/* _t5_bias(table, out, bidirectional, max_distance, query_offset) and
 * _t5_bias_backward(grad, out, ...): table (num_buckets, heads) <-> bias
 * (heads, q, k), one float dtype (a float16 grad: a float32 out);
 * _t5_bias_backward_bf16: grad bfloat16 bit patterns, out float32.
 * backward: 0, 1, or 2 for bfloat16. */
static PyObject *t5_bias(PyObject *args, int backward)
{
    arg tab = {backward ? "out" : "table", backward ? REAL_FLOAT : ANY_FLOAT, 2,
               backward ? OUT : 0, 0};
    arg bias = {backward ? "grad_bias" : "out", backward == 2 ? NPY_UINT16 : ANY_FLOAT, 3,
                backward ? 0 : OUT, 0};
    arg *in = backward ? &bias : &tab, *out = backward ? &tab : &bias;
    int bi, rc;
    long long md, off;
    pe_t5_spec spec;
    PARSE(backward == 2 ? "O&O&pLL:_t5_bias_backward_bf16"
          : backward ? "O&O&pLL:_t5_bias_backward" : "O&O&pLL:_t5_bias", to_array, in,
          to_array, out, &bi, &md, &off);
    const npy_intp heads = DIM(tab, 1), q = DIM(bias, 1), k = DIM(bias, 2);
    if (!same_type(out, out_type(in, backward)) || !disjoint(out, in) ||
        !(backward ? SHAPE_IS(tab, -1, DIM(bias, 0)) : SHAPE_IS(bias, heads, -1, -1)) ||
        !extent_ok(off, q, k, PE_MAX_EXTENT) ||
        t5_spec(&spec, bi, DIM(tab, 0), md) < 0)
        return NULL;
    UNLOCKED(rc = backward == 2 ? pe_t5_bias_back_bf16(&spec, heads, q, k, off, DATA(bias),
                                                       DATA(tab))
                  : backward ? TYPED(ftype(&bias), pe_t5_bias_back, &spec, heads, q, k, off,
                                     DATA(bias), DATA(tab))
                             : TYPED(ftype(&tab), pe_t5_bias, &spec, heads, q, k, off,
                                     DATA(tab), DATA(bias)));
    PyMem_Free((void *)spec.bound);
    return rc < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
}

PYFN(_t5_bias) { return t5_bias(args, 0); }
PYFN(_t5_bias_backward) { return t5_bias(args, 1); }
PYFN(_t5_bias_backward_bf16) { return t5_bias(args, 2); }

PYFN(_shaw_index)
{
    arg out = {"out", NPY_INT64, 2, OUT, 0};
    long long K;
    PARSE("O&L:_shaw_index", to_array, &out, &K);
    if (!in_range(K, 0, PE_MAX_EXTENT, "max_relative_position") ||
        !extent_ok(0, DIM(out, 0), DIM(out, 1), PE_MAX_EXTENT))
        return NULL;
    if (PyArray_SIZE(out.a) > 0)
        UNLOCKED(pe_shaw_index_i64(DIM(out, 0), DIM(out, 1), K, DATA(out)));
    Py_RETURN_NONE;
}

/* _shaw_embed(table, out) and _shaw_embed_backward(grad, out): table
 * (2K + 1, dim) <-> embeddings (q, k, dim), one float dtype (a float16 grad:
 * a float32 out); _shaw_embed_backward_bf16: grad bfloat16 bit patterns,
 * out float32.  backward: 0, 1, or 2 for bfloat16. */
static PyObject *shaw_embed(PyObject *args, int backward)
{
    arg tab = {backward ? "out" : "table", backward ? REAL_FLOAT : ANY_FLOAT, 2,
               backward ? OUT : 0, 0};
    arg emb = {backward ? "grad" : "out", backward == 2 ? NPY_UINT16 : ANY_FLOAT, 3,
               backward ? 0 : OUT, 0};
    arg *in = backward ? &emb : &tab, *out = backward ? &tab : &emb;
    int rc = 0;
    PARSE(backward == 2 ? "O&O&:_shaw_embed_backward_bf16"
          : backward ? "O&O&:_shaw_embed_backward" : "O&O&:_shaw_embed", to_array, in,
          to_array, out);
    if (!same_type(out, out_type(in, backward)) || !disjoint(out, in) ||
        !SHAPE_IS(emb, -1, -1, DIM(tab, 1)) ||
        !extent_ok(0, DIM(emb, 0), DIM(emb, 1), PE_MAX_EXTENT) ||
        !(DIM(tab, 0) % 2 == 1 ||
          fail(PyExc_ValueError, "%s must have 2*max_relative_position + 1 rows", tab.name)))
        return NULL;
    if (PyArray_SIZE(emb.a) == 0)   /* no addends (backward: zeros) */
        return memset(DATA(tab), 0, backward ? (size_t)PyArray_NBYTES(tab.a) : 0),
               Py_NewRef(Py_None);
    if (backward == 2)
        UNLOCKED(rc = pe_shaw_embed_back_bf16(DIM(emb, 0), DIM(emb, 1), DIM(tab, 0) / 2,
                                              DIM(tab, 1), DATA(emb), DATA(tab)));
    else if (backward)
        UNLOCKED(rc = TYPED(ftype(&emb), pe_shaw_embed_back, DIM(emb, 0), DIM(emb, 1),
                            DIM(tab, 0) / 2, DIM(tab, 1), DATA(emb), DATA(tab)));
    else  /* (a gather: cannot fail) */
        UNLOCKED(TYPED(ftype(&tab), pe_shaw_embed, DIM(emb, 0), DIM(emb, 1), DIM(tab, 0) / 2,
                       DIM(tab, 1), DATA(tab), DATA(emb)));
    return rc < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
}

PYFN(_shaw_embed) { return shaw_embed(args, 0); }
PYFN(_shaw_embed_backward) { return shaw_embed(args, 1); }
PYFN(_shaw_embed_backward_bf16) { return shaw_embed(args, 2); }
/* _alibi_bias(slopes, out, query_offset, symmetric), out float16/32/64;
 * _alibi_bias_bf16: out bfloat16 bit patterns (uint16). */
static PyObject *alibi(PyObject *args, int bf16)
{
    arg sl = {"slopes", NPY_DOUBLE, 1, 0, 0};
    arg out = {"out", bf16 ? NPY_UINT16 : ANY_FLOAT, 3, OUT, 0};
    long long off;
    int sym, rc;
    PARSE(bf16 ? "O&O&Lp:_alibi_bias_bf16" : "O&O&Lp:_alibi_bias", to_array, &sl, to_array,
          &out, &off, &sym);
    if (!SHAPE_IS(out, DIM(sl, 0), -1, -1) || !disjoint(&out, &sl) ||
        !extent_ok(off, DIM(out, 1), DIM(out, 2), PE_MAX_EXACT_DISTANCE))
        return NULL;
    if (bf16)
        UNLOCKED(rc = pe_alibi_bias_bf16(DIM(out, 0), DIM(out, 1), DIM(out, 2), off, DATA(sl),
                                         sym, DATA(out)));
    else
        UNLOCKED(rc = TYPED(ftype(&out), pe_alibi_bias, DIM(out, 0), DIM(out, 1), DIM(out, 2),
                            off, DATA(sl), sym, DATA(out)));
    return rc < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
}

PYFN(_alibi_bias) { return alibi(args, 0); }
PYFN(_alibi_bias_bf16) { return alibi(args, 1); }

/* window < 1: none */
PYFN(_causal_mask)
{
    arg out = {"out", NPY_BOOL, 2, OUT, 0};
    long long off, window;
    PARSE("O&LL:_causal_mask", to_array, &out, &off, &window);
    if (!extent_ok(off, DIM(out, 0), DIM(out, 1), PE_MAX_EXTENT))
        return NULL;
    if (window > PE_MAX_EXTENT)   /* wider than any mask: no window */
        window = -1;
    if (PyArray_SIZE(out.a) > 0)
        UNLOCKED(pe_causal_mask(DIM(out, 0), DIM(out, 1), off, window, DATA(out)));
    Py_RETURN_NONE;
}

PYFN(_padding_mask)
{
    arg len = {"lengths", NPY_INT64, 1, 0, 0}, out = {"out", NPY_BOOL, 2, OUT, 0};
    int left;
    PARSE("O&O&p:_padding_mask", to_array, &len, to_array, &out, &left);
    if (!SHAPE_IS(out, DIM(len, 0), -1) || !disjoint(&out, &len))
        return NULL;
    for (npy_intp b = 0; b < DIM(len, 0); b++)
        if (!in_range(((const npy_int64 *)DATA(len))[b], 0, DIM(out, 1), "lengths"))
            return NULL;
    UNLOCKED(pe_padding_mask(DIM(len, 0), DIM(out, 1), DATA(len), left, DATA(out)));
    Py_RETURN_NONE;
}

PYFN(_set_num_threads)
{
    int n;
    PARSE("i:set_num_threads", &n);
    if (!in_range(n, 1, INT_MAX, "n"))
        return NULL;
    return PyLong_FromLong(pe_set_num_threads(n));
}

PYFN(_get_num_threads) { return (void)args, PyLong_FromLong(pe_get_num_threads()); }

PYFN(_dispatch)
{
    char l2[32], llc[32], from[32];   /* the cache sizes the kernels block for,
                                       * and the smallest output streamed, in KiB */
    snprintf(l2, sizeof l2, "%td KiB", pe_cache_l2_bytes() >> 10);
    snprintf(llc, sizeof llc, "%td KiB", pe_cache_llc_bytes() >> 10);
    snprintf(from, sizeof from, "%zu KiB", pe_cpu_stream_min_bytes() >> 10);
    return (void)args, Py_BuildValue(
        "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "level", pe_cpu_name(pe_cpu_level()),
        "supported", pe_cpu_name(pe_cpu_supported()), "rope", pe_family_isa(PE_FAMILY_ROPE),
        "sinusoidal", pe_family_isa(PE_FAMILY_SINUSOIDAL), "learned",
        pe_family_isa(PE_FAMILY_LEARNED), "streaming_stores", pe_family_isa(PE_FAMILY_STREAM),
        "l2_cache", l2, "last_level_cache", llc, "streaming_partial_lines",
        pe_cpu_partial_lines() ? "yes" : "no (whole lines only)", "streaming_from", from);
}

/* _stream_min_bytes(v) -> pe_cpu_stream_min_bytes() after setting it to v
 * bytes (at least PE_STREAM_MIN_BYTES, whole KiB; -1: back to the rule;
 * None: unchanged), for the tests of both store paths */
PYFN(_stream_min_bytes)
{
    PyObject *v;
    Py_ssize_t n = -2;
    PARSE("O:_stream_min_bytes", &v);
    if (v != Py_None) {
        if (PyBool_Check(v) || !PyIndex_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "_stream_min_bytes: v must be None or an int");
            return NULL;
        }
        n = PyNumber_AsSsize_t(v, NULL);   /* (clamped: a huge v streams nothing) */
        if (n == -1 && PyErr_Occurred())
            return NULL;
        if (n != -1 && n < PE_STREAM_MIN_BYTES) {
            PyErr_SetString(PyExc_ValueError,
                            "_stream_min_bytes: v must be -1 or a size of at least 4 MiB");
            return NULL;
        }
    }
    return PyLong_FromSize_t(pe_cpu_set_stream_min_bytes(n));
}

/* _partial_lines(v) -> pe_cpu_partial_lines() after setting it to v (0 or
 * 1; None: unchanged), for the tests of both store paths */
PYFN(_partial_lines)
{
    PyObject *v;
    PARSE("O:_partial_lines", &v);
    if (v != Py_None && v != Py_False && v != Py_True) {
        PyErr_SetString(PyExc_TypeError, "_partial_lines: v must be None or a bool");
        return NULL;
    }
    return PyBool_FromLong(pe_cpu_set_partial_lines(v == Py_None ? -1 : v == Py_True));
}

/* _choice(v) -> (setting, ((ps, ps) per kind)): the measured choices
 * (pe_choice_way) after setting them to v (-1: measure; 0 or 1: that way
 * for every kind; None: unchanged), each kind's best picoseconds per byte
 * for way 0 and way 1 (0: none yet), for show_config and the tests */
PYFN(_choice)
{
    PyObject *v, *kinds;
    int way = -2;
    PARSE("O:_choice", &v);
    if (v != Py_None) {
        if (PyBool_Check(v) || !PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "_choice: v must be None, -1, 0 or 1");
            return NULL;
        }
        long w = PyLong_AsLong(v);
        if (w == -1 && PyErr_Occurred())
            PyErr_Clear(), w = 2;   /* (too large either way) */
        if (w < -1 || w > 1) {
            PyErr_SetString(PyExc_ValueError, "_choice: v must be None, -1, 0 or 1");
            return NULL;
        }
        way = (int)w;
    }
    way = pe_choice_set(way);
    if ((kinds = PyTuple_New(PE_CHOICE_KINDS)) == NULL)
        return NULL;
    for (int k = 0; k < PE_CHOICE_KINDS; k++) {
        PyObject *pair = Py_BuildValue("(II)", pe_choice_best(k, 0), pe_choice_best(k, 1));
        if (pair == NULL || PyTuple_SetItem(kinds, k, pair) < 0)   /* (steals pair) */
            return Py_DECREF(kinds), NULL;
    }
    return Py_BuildValue("(iN)", way, kinds);
}

/* ---- The output cache (runtime/memory.c's pe_out_cache) as a NumPy
 * allocator.  It is installed only for the allocation of one large output
 * (_out_cache_empty; NumPy keeps the allocator in a context variable), and
 * every array it allocated frees (or resizes) through it, whenever that is:
 * NumPy does both with the GIL held, which is the cache's lock (so no
 * free-threaded build installs it).  The capsule owns the cache: arrays
 * hold references to it, so it lives until the last of them is freed. */

typedef struct { PyDataMem_Handler h; pe_out_cache c; } out_handler;
typedef struct { PyObject *handler; } core_state;   /* the module's state */

static void *oc_malloc(void *c, size_t n) { return pe_out_cache_malloc(c, n); }
static void *oc_calloc(void *c, size_t k, size_t n) { return pe_out_cache_calloc(c, k, n); }
static void *oc_realloc(void *c, void *p, size_t n) { return pe_out_cache_realloc(c, p, n); }
static void oc_free(void *c, void *p, size_t n) { (void)n, pe_out_cache_free(c, p); }

static void out_handler_free(PyObject *capsule)
{
    out_handler *o = PyCapsule_GetPointer(capsule, "mem_handler");
    if (o != NULL) {
        pe_out_cache_set_limit(&o->c, 0);
        free(o);
    }
}

static PyObject *out_handler_new(void)
{
    out_handler *o = calloc(1, sizeof *o);
    if (o == NULL)
        return PyErr_NoMemory();
    strcpy(o->h.name, "posemb_output_cache");
    o->h.version = 1;
    o->h.allocator = (PyDataMemAllocator){&o->c, oc_malloc, oc_calloc, oc_realloc, oc_free};
    o->c.limit = pe_out_cache_default_limit();
    PyObject *capsule = PyCapsule_New(&o->h, "mem_handler", out_handler_free);
    if (capsule == NULL)
        free(o);
    return capsule;
}

/* _out_cache_empty(shape, dtype) -> a new uninitialised array whose memory
 * comes from (and returns to) the output cache: the cache is NumPy's
 * allocator for this one allocation, installed and restored here, where no
 * Python code (no signal handler, no __array_finalize__: a base-class
 * array) can run between the two. */
static PyObject *py_out_cache_empty(PyObject *self, PyObject *args)
{
    PyObject *shape, *dtype, *a, *old;
    npy_intp dims[NPY_MAXDIMS];
    core_state *st = PyModule_GetState(self);
    PARSE("OO!:_out_cache_empty", &shape, &PyArrayDescr_Type, &dtype);
    const int nd = PyArray_IntpFromSequence(shape, dims, NPY_MAXDIMS);
    if (st == NULL || nd < 0)
        return NULL;
#ifdef Py_GIL_DISABLED   /* (the cache's lock is the GIL) */
    old = Py_NewRef(Py_None);
#else
    if ((old = PyDataMem_SetHandler(st->handler)) == NULL)
        return NULL;
#endif
    a = PyArray_Empty(nd, dims, (PyArray_Descr *)Py_NewRef(dtype), 0);
    if (old != Py_None) {
        PyObject *mine = PyDataMem_SetHandler(old);
        if (mine == NULL)
            Py_CLEAR(a);
        Py_XDECREF(mine);
    }
    Py_DECREF(old);
    return a;
}

/* _out_cache(limit) -> (limit, bytes kept, blocks kept); limit None:
 * unchanged, an int >= 0 (beyond size_t: no limit) */
static PyObject *py_out_cache(PyObject *self, PyObject *args)
{
    PyObject *v;
    core_state *st = PyModule_GetState(self);
    PARSE("O:_out_cache", &v);
    out_handler *o = st == NULL ? NULL : PyCapsule_GetPointer(st->handler, "mem_handler");
    if (o == NULL)
        return NULL;
    if (v != Py_None) {
        int over = 0;    /* (+1: an int beyond long long, more than any memory) */
        const long long n = PyLong_AsLongLongAndOverflow(v, &over);
        if (n == -1 && PyErr_Occurred())
            return NULL;
        if (over < 0 || (over == 0 && n < 0))
            return PyErr_SetString(PyExc_ValueError, "limit must be >= 0"), NULL;
        pe_out_cache_set_limit(&o->c, over > 0 || (unsigned long long)n > SIZE_MAX
                                          ? SIZE_MAX : (size_t)n);
    }
    return Py_BuildValue("(KKi)", (unsigned long long)o->c.limit,
                         (unsigned long long)o->c.held, o->c.nkeep);
}

#define METHOD(name, doc) {#name, py##name, METH_VARARGS, #name doc}
static PyMethodDef METHODS[] = {
    METHOD(_rope_table, "(positions, inv_freq, attention_scale, interleaved, cos, sin)"),
    METHOD(_rope_varlen, "(x, cu_seqlens, offsets, cos, sin, interleaved, backward, out)"),
    METHOD(_sinusoidal_table, "(start, inv_freq, concat, out)"),
    METHOD(_learned_back, "(grad_out, positions, grad_weight, assign=False)"),
    METHOD(_learned_back_bf16, "(grad_out, positions, grad_weight, assign=False), grad_out "
                                "bfloat16 bits"),
    METHOD(_to_float16, "(src, out)"),
    METHOD(_t5_bucket, "(relative_position, out, bidirectional, num_buckets, max_distance)"),
    METHOD(_t5_bias, "(table, out, bidirectional, max_distance, query_offset)"),
    METHOD(_t5_bias_backward, "(grad, out, bidirectional, max_distance, query_offset)"),
    METHOD(_t5_bias_backward_bf16, "(grad, out, ...), grad bfloat16 bits"),
    METHOD(_shaw_index, "(out, max_relative_position)"),
    METHOD(_shaw_embed, "(table, out)"),
    METHOD(_shaw_embed_backward, "(grad, out)"),
    METHOD(_shaw_embed_backward_bf16, "(grad, out), grad bfloat16 bits"),
    METHOD(_alibi_bias, "(slopes, out, query_offset, symmetric)"),
    METHOD(_alibi_bias_bf16, "(slopes, out, query_offset, symmetric), out bfloat16 bits"),
    METHOD(_causal_mask, "(out, query_offset, window)"),
    METHOD(_padding_mask, "(lengths, out, left)"),
    {"set_num_threads", py_set_num_threads, METH_VARARGS, "set_num_threads(n) -> threads used"},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "get_num_threads() -> threads used"},
    {"_dispatch", py_dispatch, METH_NOARGS, "_dispatch() -> CPU level and ISA per family"},
    METHOD(_out_cache_empty, "(shape, dtype) -> a new array from the output cache"),
    METHOD(_partial_lines,
           "(v) -> may streaming stores leave lines partly written; v None: unchanged"),
    METHOD(_stream_min_bytes,
           "(v) -> the smallest output streamed, after setting it to v bytes (-1: the rule)"),
    METHOD(_out_cache, "(limit) -> (limit, bytes kept, blocks kept); limit None: unchanged"),
    METHOD(_choice, "(v) -> (setting, best ps/byte of way 0 and 1 per kind); v None: unchanged"),
    {NULL, NULL, 0, NULL}};

/* ---- Module (multi-phase initialisation) */

/* The CPU level, once: the best this CPU runs, or POSEMB_CPU (a name of
 * pe_cpu_name's); above the CPU's: clamped, and an unknown name ignored,
 * each with a RuntimeWarning. */
static int select_cpu(void)
{
    const char *env = getenv("POSEMB_CPU");
    const int want = pe_cpu_parse(env);
    if (env != NULL && env[0] != '\0' && want < 0) {
        char names[128] = "";   /* the level names, from dispatch.c's one list */
        for (int i = 0; i < PE_CPU_LEVELS; i++) {
            const size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", pe_cpu_name(i));
        }
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "POSEMB_CPU=%s is not one of %s: ignored",
                             env, names) < 0)
            return -1;
    }
    const int got = pe_cpu_select(want);
    if (want > got &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "POSEMB_CPU=%s: this CPU (or build) runs "
                         "at most %s; using %s", env, pe_cpu_name(got), pe_cpu_name(got)) < 0)
        return -1;
    return 0;
}

/* one of posemb.h's limits, for the Python layer's checks */
static int add_limit(PyObject *m, const char *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    const int rc = v == NULL ? -1 : PyModule_AddObjectRef(m, name, v);
    Py_XDECREF(v);
    return rc;
}

static int core_exec(PyObject *m)
{
    core_state *st = PyModule_GetState(m);
    return st == NULL || PyArray_ImportNumPyAPI() < 0 || PyUFunc_ImportUFuncAPI() < 0 ||
                   (st->handler = out_handler_new()) == NULL || select_cpu() < 0 ||
                   add_gufuncs(m) < 0 || add_limit(m, "MAX_EXTENT", PE_MAX_EXTENT) < 0 ||
                   add_limit(m, "MAX_EXACT", PE_MAX_EXACT) < 0 ||
                   add_limit(m, "MAX_EXACT_DISTANCE", PE_MAX_EXACT_DISTANCE) < 0 ||
                   add_limit(m, "T5_MAX_BUCKETS", PE_T5_MAX_BUCKETS) < 0 ||
                   add_limit(m, "OUT_CACHE_MIN_BYTES", (long long)PE_OUT_CACHE_MIN_BYTES) < 0 ||
                   add_limit(m, "PARALLEL_MIN_BYTES", (long long)PE_PARALLEL_MIN_BYTES) < 0
               ? -1 : 0;
}

static PyModuleDef_Slot core_slots[] = {{Py_mod_exec, (void *)core_exec}, {0, NULL}};

static void core_free(void *m)
{
    core_state *st = PyModule_GetState(m);
    if (st != NULL)
        Py_CLEAR(st->handler);
}

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "posemb._core", "posemb's C kernels (private; use posemb's API).",
    sizeof(core_state), METHODS, core_slots, NULL, NULL, core_free};

PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&core_module); }
