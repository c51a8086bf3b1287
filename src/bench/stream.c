/*
 * stream.c - posemb._stream, an extension for the benchmarks only (not part
 * of posemb._core): the memory-bandwidth "limit" that `python -m posemb
 * bench` compares each kernel to, the most trivial pass over the same bytes
 * on the same thread pool code (its own instance: the caller passes the
 * thread count).
 *
 *   pe_stream_scale_f32: x[i] *= a          (read + write in place)
 *   pe_stream_copy:      y[i]  = x[i]       (read + write elsewhere)
 *   pe_stream_fill_f32:  y[i]  = a          (write only)
 *   pe_stream_read_f32:  sum of x           (read only)
 *
 * Contiguous buffers; parts of at least PE_PARALLEL_MIN_BYTES per thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>

#include "posemb.h"

typedef struct { float *x; const char *src; char *dst; float a; } stream_job;

static void scale_task(void *ctx, ptrdiff_t b, ptrdiff_t e)
{
    const stream_job *j = (const stream_job *)ctx;
    float *restrict x = j->x;
    const float a = j->a;
    for (ptrdiff_t i = b; i < e; i++)
        x[i] *= a;
}

static void fill_task(void *ctx, ptrdiff_t b, ptrdiff_t e)
{
    const stream_job *j = (const stream_job *)ctx;
    float *restrict x = j->x;
    const float a = j->a;
    for (ptrdiff_t i = b; i < e; i++)
        x[i] = a;
}

static void copy_task(void *ctx, ptrdiff_t b, ptrdiff_t e)
{
    const stream_job *j = (const stream_job *)ctx;
    memcpy(j->dst + b, j->src + b, (size_t)(e - b));
}

/* The read pass sums with explicit vectors where it can: CPython's build
 * flags include -fwrapv, which keeps GCC from vectorizing the C loop, and a
 * slow "limit" would flatter every kernel compared with it. */
#if defined(PE_X86_SIMD)
#include <emmintrin.h>
static void read_task(void *ctx, ptrdiff_t b, ptrdiff_t e)
{
    const stream_job *j = (const stream_job *)ctx;
    const float *x = j->x;
    __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float tail = 0.0f;
    ptrdiff_t i = b;
    for (; i + 16 <= e; i += 16) {      /* four independent sums: streams */
        a0 = _mm_add_ps(a0, _mm_loadu_ps(x + i));
        a1 = _mm_add_ps(a1, _mm_loadu_ps(x + i + 4));
        a2 = _mm_add_ps(a2, _mm_loadu_ps(x + i + 8));
        a3 = _mm_add_ps(a3, _mm_loadu_ps(x + i + 12));
    }
    for (; i < e; i++)
        tail += x[i];
    {   /* a volatile sink keeps the loads */
        float lanes[4];
        volatile float sink;
        _mm_storeu_ps(lanes, _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)));
        sink = lanes[0] + lanes[1] + lanes[2] + lanes[3] + tail;
        (void)sink;
    }
}
#else
static void read_task(void *ctx, ptrdiff_t b, ptrdiff_t e)
{
    const stream_job *j = (const stream_job *)ctx;
    const float *restrict x = j->x;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};   /* independent sums: streams */
    ptrdiff_t i = b;
    for (; i + 8 <= e; i += 8)
        for (int u = 0; u < 8; u++)
            acc[u] += x[i + u];
    for (; i < e; i++)
        acc[0] += x[i];
    {   /* a volatile sink keeps the loads */
        volatile float sink = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] +
                              acc[5] + acc[6] + acc[7];
        (void)sink;
    }
}
#endif

void pe_stream_read_f32(ptrdiff_t n, const float *x)
{
    stream_job j = {(float *)x, NULL, NULL, 1.0f};
    pe_parallel_for(n, PE_PARALLEL_MIN_BYTES / 4, read_task, &j);
}

void pe_stream_scale_f32(ptrdiff_t n, float *x, float a)
{
    stream_job j = {x, NULL, NULL, a};
    pe_parallel_for(n, PE_PARALLEL_MIN_BYTES / 8, scale_task, &j);
}

void pe_stream_fill_f32(ptrdiff_t n, float *x, float a)
{
    stream_job j = {x, NULL, NULL, a};
    pe_parallel_for(n, PE_PARALLEL_MIN_BYTES / 4, fill_task, &j);
}

void pe_stream_copy(ptrdiff_t nbytes, const void *src, void *dst)
{
    stream_job j = {NULL, (const char *)src, (char *)dst, 0.0f};
    pe_parallel_for(nbytes, PE_PARALLEL_MIN_BYTES / 2, copy_task, &j);
}

/* stream(kind, threads, a, b=None): "scale": a *= 1 in place; "fill":
 * a[:] = 0; "copy": b[:] = a; "read": sum a.  a, b: C-contiguous, aligned
 * float32 arrays (a writeable for scale/fill, b writeable, same size). */
static PyObject *
py_stream(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *kind;
    PyArrayObject *a, *b = NULL;
    int threads;
    if (!PyArg_ParseTuple(args, "siO!|O!:stream", &kind, &threads, &PyArray_Type, &a,
                          &PyArray_Type, &b))
        return NULL;
    if (PyArray_TYPE(a) != NPY_FLOAT || !PyArray_IS_C_CONTIGUOUS(a) ||
        !PyArray_ISALIGNED(a) || (b != NULL && (PyArray_TYPE(b) != NPY_FLOAT ||
        !PyArray_IS_C_CONTIGUOUS(b) || !PyArray_ISALIGNED(b) || !PyArray_ISWRITEABLE(b) ||
        PyArray_NBYTES(b) != PyArray_NBYTES(a)))) {
        PyErr_SetString(PyExc_ValueError,
                        "a (and b) must be C-contiguous aligned float32 arrays of one size");
        return NULL;
    }
    pe_set_num_threads(threads);
    if (strcmp(kind, "copy") == 0 && b != NULL) {
        Py_BEGIN_ALLOW_THREADS
        pe_stream_copy(PyArray_NBYTES(a), PyArray_DATA(a), PyArray_DATA(b));
        Py_END_ALLOW_THREADS
    } else if (strcmp(kind, "read") == 0) {
        Py_BEGIN_ALLOW_THREADS
        pe_stream_read_f32(PyArray_SIZE(a), (const float *)PyArray_DATA(a));
        Py_END_ALLOW_THREADS
    } else if ((strcmp(kind, "scale") == 0 || strcmp(kind, "fill") == 0) &&
               PyArray_ISWRITEABLE(a)) {
        const int fill = kind[0] == 'f';
        Py_BEGIN_ALLOW_THREADS
        if (fill)
            pe_stream_fill_f32(PyArray_SIZE(a), (float *)PyArray_DATA(a), 0.0f);
        else
            pe_stream_scale_f32(PyArray_SIZE(a), (float *)PyArray_DATA(a), 1.0f);
        Py_END_ALLOW_THREADS
    } else {
        PyErr_SetString(PyExc_ValueError, "kind must be 'scale' or 'fill' (a writeable), "
                                          "'copy' (with b) or 'read'");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef stream_methods[] = {
    {"stream", py_stream, METH_VARARGS,
     "stream(kind, threads, a, b=None): the benchmarks' bandwidth limit "
     "('scale', 'fill', 'copy', 'read')."},
    {NULL, NULL, 0, NULL}};

static int
stream_exec(PyObject *Py_UNUSED(m))
{
    return PyArray_ImportNumPyAPI();
}

static PyModuleDef_Slot stream_slots[] = {{Py_mod_exec, (void *)stream_exec}, {0, NULL}};

static struct PyModuleDef stream_module = {
    PyModuleDef_HEAD_INIT, "posemb._stream",
    "Benchmark-only streaming passes (see posemb._bench).", 0, stream_methods,
    stream_slots, NULL, NULL, NULL};

PyMODINIT_FUNC
PyInit__stream(void)
{
    return PyModuleDef_Init(&stream_module);
}
