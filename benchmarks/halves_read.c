/*
 * halves_read.c - what the half-split layout's access order costs the
 * memory system, without posemb.  A half-split rotation pairs element i of
 * a row with element i + d/2, so it walks each row as two streams half a
 * row apart: line 0 beside line h, line 1 beside line h + 1, ...  This
 * times an in-place pass over 128 MiB (x *= 1.0001, 16 bytes past a line,
 * where NumPy puts large arrays) in rows of 256 B to 4 KiB:
 *
 *   in order   each row's lines one after another (an in-place scale);
 *   halves     line i beside line i + h, as the rotation reads them;
 *   prefetched the same, with every line of the row prefetched in order
 *              just before it (posemb's prefetch_position does this for
 *              half-split rows of 1 KiB or more beyond the cache).
 *
 * Each the best of 7 in interleaved rounds.
 *
 *     cc -O3 -o /tmp/halves_read benchmarks/halves_read.c && /tmp/halves_read
 *
 * (add -mavx2 or -mavx512f for the vector widths posemb's kernels use).
 * On a Zen 4 EPYC VM, one run each: the halves took 1.0-1.03x the in-order
 * time with rows of 256 and 512 bytes at every width; with rows of 1 KiB
 * 0.98x (16-byte vectors), 1.29x (-mavx2) and 1.70x (-mavx512f); with 2
 * and 4 KiB 2.1-2.7x.  Prefetched: 0.95-1.11x (one 1.26x).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES ((size_t)128 << 20)
#define LINE 64

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* (inlined: GCC drops calls it does not inline to a function that only
 * prefetches, finding it free of side effects) */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline void prefetch_lines(const char *p, size_t n)
{
#if defined(__GNUC__) || defined(__clang__)
    const uintptr_t end = (uintptr_t)p + n;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)(LINE - 1); a < end; a += LINE)
        __builtin_prefetch((const void *)a);
#else
    (void)p;
    (void)n;
#endif
}

/* one line's floats (16) times k, in place */
static void scale_line(float *p)
{
    for (int j = 0; j < LINE / (int)sizeof(float); j++)
        p[j] *= 1.0001f;
}

/* mode 0: in order; 1: halves side by side; 2: halves, row prefetched */
static void pass(float *x, size_t row_bytes, int mode)
{
    const size_t row = row_bytes / sizeof(float), half = row / 2, step = LINE / sizeof(float);
    for (size_t r = 0; r + row <= BYTES / sizeof(float); r += row) {
        float *p = x + r;
        if (mode == 0) {
            for (size_t i = 0; i < row; i += step)
                scale_line(p + i);
            continue;
        }
        if (mode == 2)
            prefetch_lines((const char *)p, row_bytes);
        for (size_t i = 0; i < half; i += step) {
            scale_line(p + i);
            scale_line(p + half + i);
        }
    }
}

int main(void)
{
    static const size_t rows[] = {256, 512, 1024, 2048, 4096};
    enum { NR = sizeof rows / sizeof rows[0], MODES = 3, ROUNDS = 7 };
    double best[NR][MODES];
    char *raw = malloc(BYTES + 2 * LINE);
    if (raw == NULL)
        return 1;
    /* 16 bytes past a line */
    float *x = (float *)(void *)(raw + (LINE - (uintptr_t)raw % LINE) % LINE + 16);
    for (size_t i = 0; i < BYTES / sizeof(float); i++)
        x[i] = 1.0f;
    for (int i = 0; i < NR; i++)
        for (int m = 0; m < MODES; m++)
            best[i][m] = 1e30;
    for (int k = 0; k < ROUNDS; k++)
        for (int i = 0; i < NR; i++)
            for (int m = 0; m < MODES; m++) {
                const int mm = k % 2 ? MODES - 1 - m : m;
                const double t0 = now();
                pass(x, rows[i], mm);
                const double t = now() - t0;
                if (t < best[i][mm])
                    best[i][mm] = t;
            }
    printf("128 MiB in place, rows of R bytes; best of %d, ms (x the in-order pass)\n", ROUNDS);
    for (int i = 0; i < NR; i++)
        printf("R = %4zu: in order %6.2f   halves %6.2f (%.2fx)   prefetched %6.2f (%.2fx)\n",
               rows[i], 1e3 * best[i][0], 1e3 * best[i][1], best[i][1] / best[i][0],
               1e3 * best[i][2], best[i][2] / best[i][0]);
    printf("(x = %g)\n", (double)x[BYTES / sizeof(float) / 2]);
    free(raw);
    return 0;
}
