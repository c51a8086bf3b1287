/*
 * stream.c - the memory-bandwidth "limit" that the benchmarks compare to:
 * the most trivial pass over the same bytes, on the same thread pool.
 *
 *   pe_stream_scale_f32: x[i] *= a          (read + write in place)
 *   pe_stream_copy:      y[i]  = x[i]       (read + write elsewhere)
 *   pe_stream_fill_f32:  y[i]  = a          (write only)
 *   pe_stream_read_f32:  sum of x           (read only)
 *
 * Contiguous buffers; parts of at least PE_PARALLEL_MIN_BYTES per thread.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1   /* mincore */
#endif
#include <string.h>

#include "posemb.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>

int pe_memory_resident(const void *p)
{
    const long page = sysconf(_SC_PAGESIZE);
    unsigned char v = 0;
    if (page <= 0)
        return 1;
    if (mincore((void *)((uintptr_t)p & ~((uintptr_t)page - 1u)), 1, &v) != 0)
        return 1;
    return v & 1u;
}
#else
int pe_memory_resident(const void *p)
{
    (void)p;
    return 1;
}
#endif

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
#if defined(__SSE2__)
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
