/*
 * strided_read.c - what reading the "sliced heads" layout costs the memory
 * system, without posemb: q taken from a fused projection,
 * qkv.view(b, s, h + 16, d)[:, :, :h], is 16 KiB of every 24 KiB (h = 32,
 * d = 128, float32).  This times a read-only pass over those bytes against
 * a read of the same number of bytes laid out densely, and of the whole
 * span (gaps included), and the sliced read with each line of the next
 * period prefetched as the same line of this one is read, into L2
 * (prefetcht1 on x86) or into L1 (prefetcht0), as posemb's heads-inner
 * walk does one head at a time; each the best of 7 in interleaved rounds.  (The
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

/* the sum of `use` bytes (floats) at the start of each of n periods; pf:
 * prefetch the next period's line (1: into L2, 2: into L1, 0: none) */
static float read_pass(const float *p, size_t n, size_t period, size_t use, int pf)
{
    float acc[16] = {0};
    for (size_t i = 0; i < n; i++) {
        const float *q = p + i * (period / sizeof(float));
        for (size_t j = 0; j < use / sizeof(float); j += 16) {
#if defined(__GNUC__) || defined(__clang__)
            if (pf == 1)
                __builtin_prefetch(q + period / sizeof(float) + j, 0, 2);
            else if (pf == 2)
                __builtin_prefetch(q + period / sizeof(float) + j, 0, 3);
#endif
            for (int k = 0; k < 16; k++)
                acc[k] += q[j + (size_t)k];
        }
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
    float *a = malloc(span + period);   /* (a period of slack: the last prefetches) */
    if (a == NULL)
        return 1;
    memset(a, 1, span + period);
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    volatile float sink = 0;
    for (int round = 0; round < 7; round++) {
        const size_t args[5][4] = {{n, use, use, 0}, {n, period, use, 0},
                                   {n, period, period, 0}, {n, period, use, 1},
                                   {n, period, use, 2}};
        for (int c = 0; c < 5; c++) {
            const double t0 = now();
            sink += read_pass(a, args[c][0], args[c][1], args[c][2], (int)args[c][3]);
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
    printf("sliced, next period prefetched to L2: %7.2f ms  (%.2fx)\n", 1e3 * best[3],
           best[3] / best[0]);
    printf("sliced, next period prefetched to L1: %7.2f ms  (%.2fx)\n", 1e3 * best[4],
           best[4] / best[0]);
    free(a);
    return sink != 0;
}
