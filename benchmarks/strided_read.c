/*
 * strided_read.c - what reading the "sliced heads" layout costs the memory
 * system, without posemb: q taken from a fused projection,
 * qkv.view(b, s, h + 16, d)[:, :, :h], is 16 KiB of every 24 KiB (h = 32,
 * d = 128, float32).  This times a read-only pass over those bytes against
 * a read of the same number of bytes laid out densely, and of the whole
 * span (gaps included), each the best of 7 in interleaved rounds.  (The
 * array holds ones: on this VM a read of never-written or zeroed memory
 * is faster, and q is neither.)
 *
 *     cc -O3 -o /tmp/strided_read benchmarks/strided_read.c && /tmp/strided_read
 *
 * posemb's bench row "sliced heads of fused qkv" is posemb's call over
 * that layout; its p/contig column compares it with the dense layout.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the sum of `use` bytes (floats) at the start of each of n periods */
static float read_pass(const float *p, size_t n, size_t period, size_t use)
{
    float acc[16] = {0};
    for (size_t i = 0; i < n; i++) {
        const float *q = p + i * (period / sizeof(float));
        for (size_t j = 0; j < use / sizeof(float); j += 16)
            for (int k = 0; k < 16; k++)
                acc[k] += q[j + (size_t)k];
    }
    float s = 0;
    for (int k = 0; k < 16; k++)
        s += acc[k];
    return s;
}

int main(void)
{
    const size_t use = 32 * 128 * sizeof(float), period = 48 * 128 * sizeof(float);
    const size_t n = 8192, span = period * n;   /* 192 MiB, of which 128 MiB are q */
    float *a = malloc(span);
    if (a == NULL)
        return 1;
    memset(a, 1, span);
    double best[3] = {1e9, 1e9, 1e9};
    volatile float sink = 0;
    for (int round = 0; round < 7; round++) {
        const size_t args[3][3] = {{n, use, use}, {n, period, use}, {n, period, period}};
        for (int c = 0; c < 3; c++) {
            const double t0 = now();
            sink += read_pass(a, args[c][0], args[c][1], args[c][2]);
            const double t = now() - t0;
            if (t < best[c])
                best[c] = t;
        }
    }
    printf("dense read, 128 MiB:                  %7.2f ms\n", 1e3 * best[0]);
    printf("sliced heads' bytes (16 of 24 KiB):   %7.2f ms  (%.2fx the dense read)\n",
           1e3 * best[1], best[1] / best[0]);
    printf("whole span with the gaps, 192 MiB:    %7.2f ms  (%.2fx)\n", 1e3 * best[2],
           best[2] / best[0]);
    free(a);
    return sink != 0;
}
