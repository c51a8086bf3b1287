/*
 * stream.c - the memory-bandwidth "limit" that the benchmarks compare to:
 * the most trivial pass over the same bytes, on the same thread pool.
 *
 *   pe_stream_scale_f32: x[i] *= a          (read + write in place)
 *   pe_stream_copy:      y[i]  = x[i]       (read + write elsewhere)
 *   pe_stream_fill_f32:  y[i]  = a          (write only)
 *
 * Contiguous buffers; parts of at least PE_PARALLEL_MIN_BYTES per thread.
 */
#include <string.h>

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
