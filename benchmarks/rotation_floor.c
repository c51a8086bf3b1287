/*
 * rotation_floor.c - what a half-split rotation of arrays in the cache
 * costs as plain C loops, without posemb: the floor posemb's small and
 * in-cache calls are judged against (the bench's "small in place",
 * (1, 32, 128, 128) float32, and "in-cache out=", (1, 32, 256, 128)).
 *
 * x is (32, S, 128) float32, 16 bytes past a line (where NumPy puts large
 * arrays); the tables are (S, 128) rows of which only the first half is
 * read (HF's rows repeat their first half).  Timed: in each of 15 rounds
 * (the order reversed every other round) one untimed call, then the best
 * of 10 calls; the median over the rounds:
 *
 *   scale / copy  x *= 1.0000001 in place, or x copied into y;
 *   no tables     the rotation by one cos and sin for every element, held
 *                 in registers: the arithmetic and the access order of the
 *                 rotation, no table reads;
 *   one row       every position rotated by table row 0 (it stays in L1):
 *                 the table reads, but no table traffic from the caches;
 *   rows          each position by its own row, head by head (the row
 *                 read again for each head, from L2 or beyond);
 *   tiles         tiles of 16 positions, each over all heads two at a time
 *                 sharing each table load (posemb's tile walk's order).
 *
 *     cc -O3 -mavx2 -ffp-contract=off -o /tmp/rotation_floor benchmarks/rotation_floor.c
 *     /tmp/rotation_floor
 *
 * (-ffp-contract=off: a product and a sum rounded apart, no fused
 * multiply-add, as posemb's kernels and HF's formula do; it builds without
 * -mavx2 too, with 16-byte vectors, and for aarch64.)  On a Zen 3 EPYC VM
 * (32 KiB L1d, 512 KiB L2, 32 MiB L3), 2026-11-29, four runs: in place "no
 * tables" 1.05-1.15x the scale, "one row" 1.16-1.24x, "rows" 1.39-1.54x,
 * "tiles" 1.22-1.37x; out of place 1.07-1.14x, 1.14-1.25x, 1.54-1.68x and
 * 1.33-1.45x a copy.  A variant not kept here, four heads sharing each
 * table load instead of two, measured slower (in place 1.39-1.54x, out of
 * place 1.66-1.69x, three runs).  This file built as a library and called
 * from Python, twice: out of place "tiles" 1.43-1.52x a copy.  Loops like
 * these written with intrinsics and called on the arrays of a Python
 * process measured slower still, posemb's own call on the same arrays
 * within 5% of the loop without table reads and faster than the loops
 * with them: see the benchmarks README, "fifth session".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define H 32
#define D 128
#define HALF (D / 2)
#define TILE 16
#define ROUNDS 15
#define CALLS 10

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* VW floats (GCC and Clang vector extensions: one AVX2 register with
 * -mavx2, else 16 bytes: SSE2, NEON), loaded and stored unaligned */
#if defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float v8 __attribute__((vector_size(VW * 4)));
static inline v8 ld(const float *p)
{
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void st(float *p, v8 v)
{
    memcpy(p, &v, sizeof v);
}

/* one row x -> y by the half rows c, s (x == y in place: each step reads
 * the values it writes) */
static inline void rotate_row(const float *x, float *y, const float *c, const float *s)
{
    for (int i = 0; i < HALF; i += VW) {
        const v8 a = ld(x + i), b = ld(x + i + HALF), cv = ld(c + i), sv = ld(s + i);
        st(y + i, a * cv - b * sv);
        st(y + i + HALF, b * cv + a * sv);
    }
}

/* two rows sharing each table load */
static inline void rotate_pair(const float *x, float *y, const float *x2, float *y2,
                               const float *c, const float *s)
{
    for (int i = 0; i < HALF; i += VW) {
        const v8 cv = ld(c + i), sv = ld(s + i);
        const v8 a = ld(x + i), b = ld(x + i + HALF);
        const v8 a2 = ld(x2 + i), b2 = ld(x2 + i + HALF);
        st(y + i, a * cv - b * sv);
        st(y + i + HALF, b * cv + a * sv);
        st(y2 + i, a2 * cv - b2 * sv);
        st(y2 + i + HALF, b2 * cv + a2 * sv);
    }
}

typedef struct {
    const float *x;
    float *y;
    const float *c, *s;   /* (S, D) */
    long S;
} job;

static void scale(const job *j)
{
    const size_t n = (size_t)H * (size_t)j->S * D;
    const float *x = j->x;
    float *y = j->y;
    const v8 k = (v8){0} + 1.0000001f;
    for (size_t i = 0; i < n; i += VW)   /* (explicit vectors: y may be x) */
        st(y + i, ld(x + i) * k);
}

static void copy(const job *j)
{
    memcpy(j->y, j->x, (size_t)H * (size_t)j->S * D * sizeof(float));
}

static void no_tables(const job *j)
{
    float c[HALF], s[HALF];
    for (int i = 0; i < HALF; i++) {
        c[i] = 0.6f;
        s[i] = 0.8f;
    }
    for (long r = 0; r < H * j->S; r++)
        rotate_row(j->x + r * D, j->y + r * D, c, s);
}

static void one_row(const job *j)
{
    for (long r = 0; r < H * j->S; r++)
        rotate_row(j->x + r * D, j->y + r * D, j->c, j->s);
}

static void rows(const job *j)
{
    for (long h = 0; h < H; h++)
        for (long p = 0; p < j->S; p++) {
            const long r = h * j->S + p;
            rotate_row(j->x + r * D, j->y + r * D, j->c + p * D, j->s + p * D);
        }
}

static void tiles(const job *j)
{
    for (long p0 = 0; p0 < j->S; p0 += TILE)
        for (long h = 0; h < H; h += 2)
            for (long p = p0; p < p0 + TILE && p < j->S; p++) {
                const long r = h * j->S + p, r2 = r + j->S;
                rotate_pair(j->x + r * D, j->y + r * D, j->x + r2 * D, j->y + r2 * D,
                            j->c + p * D, j->s + p * D);
            }
}

static int cmp(const void *a, const void *b)
{
    const double u = *(const double *)a, v = *(const double *)b;
    return u < v ? -1 : u > v;
}

#define NFN 5
static void run(const char *title, long S, int in_place)
{
    const size_t n = (size_t)H * (size_t)S * D;
    char *xm = malloc(n * sizeof(float) + 128), *ym = malloc(n * sizeof(float) + 128);
    float *tab = malloc(2 * (size_t)S * D * sizeof(float));
    if (xm == NULL || ym == NULL || tab == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    /* 16 bytes past a line */
    float *x = (float *)(void *)(xm + ((64 - (uintptr_t)xm % 64) % 64) + 16);
    float *y = in_place ? x : (float *)(void *)(ym + ((64 - (uintptr_t)ym % 64) % 64) + 16);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i % 1000) * 0.001f - 0.5f;
    if (!in_place)
        memset(y, 0, n * sizeof(float));
    for (long p = 0; p < S; p++)
        for (int i = 0; i < D; i++) {
            /* any values: the time does not depend on them */
            tab[p * D + i] = 1.0f - 1e-4f * (float)(p % 97);
            tab[(size_t)S * D + (size_t)p * D + i] = 1e-4f * (float)(i % 89);
        }
    const job j = {x, y, tab, tab + (size_t)S * D, S};
    void (*fn[NFN])(const job *) = {in_place ? scale : copy, no_tables, one_row, rows, tiles};
    const char *name[NFN] = {in_place ? "scale" : "copy", "no tables", "one row", "rows",
                             "tiles"};
    double t[NFN][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < NFN; k++) {
            const int f = r % 2 ? k : NFN - 1 - k;
            double best = 1e9;
            fn[f](&j);
            for (int c = 0; c < CALLS; c++) {
                const double t0 = now();
                fn[f](&j);
                const double dt = now() - t0;
                best = dt < best ? dt : best;
            }
            t[f][r] = best;
        }
    printf("%s, (1, %d, %ld, %d) float32, x 16 bytes past a line:\n", title, H, S, D);
    double base = 0;
    for (int k = 0; k < NFN; k++) {
        qsort(t[k], ROUNDS, sizeof(double), cmp);
        const double med = t[k][ROUNDS / 2];
        if (k == 0)
            base = med;
        printf("  %-10s %8.1f us  %.2fx\n", name[k], med * 1e6, med / base);
    }
    free(xm);
    free(ym);
    free(tab);
}

int main(void)
{
    run("in place", 128, 1);
    run("out of place", 256, 0);
    return 0;
}
