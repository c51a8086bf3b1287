/*
 * test_kernels.c - posemb's C kernels without Python, each against a
 * float64 reference computed here from the formula (no posemb code in the
 * reference).  Built and run by the CI scripts: natively, linked with musl
 * (.ci/musl.sh), and cross-compiled for aarch64 and run under qemu-user
 * (.ci/aarch64.sh), where the NEON RoPE kernels (rope_neon.c) are also
 * checked bit for bit against the portable ones.
 *
 *   cc -std=c11 -O2 -ffp-contract=off -Isrc tests/c/test_kernels.c <kernels> -lm -pthread
 *   ./a.out            # prints one line per check, exits 1 on any failure
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "posemb.h"
#include "rope_neon.h"

static int checks, failures;

static void report(int ok, const char *what, double worst, double tol)
{
    checks++;
    if (!ok)
        failures++;
    printf("%-4s %-48s max err/tol = %.3g\n", ok ? "ok" : "FAIL", what,
           tol > 0 ? worst / tol : worst);
}

/* xorshift64*: the same numbers on every platform */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void)           /* uniform in [-1, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-52 - 1.0;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* ------------------------------------------------------------------ */
/* RoPE apply                                                           */
/* ------------------------------------------------------------------ */

enum { HALF = 0, INTER = 1 };
enum { FWD = 0, BACK = 1 };

static const char *const layout_names[] = {"half", "inter"};
static const char *const dir_names[] = {"fwd", "back"};

static pe_rope_fn portable_f32(int layout, int dir)
{
    static const pe_rope_fn fns[2][2] = {
        {pe_rope_half_fwd_f32, pe_rope_half_back_f32},
        {pe_rope_inter_fwd_f32, pe_rope_inter_back_f32}};
    return fns[layout][dir];
}

static pe_rope_fn portable_f64(int layout, int dir)
{
    static const pe_rope_fn fns[2][2] = {
        {pe_rope_half_fwd_f64, pe_rope_half_back_f64},
        {pe_rope_inter_fwd_f64, pe_rope_inter_back_f64}};
    return fns[layout][dir];
}

#if defined(PE_HAVE_NEON_ROPE)
static pe_rope_fn neon_f32(int layout, int dir)
{
    static const pe_rope_fn fns[2][2] = {
        {pe_rope_half_fwd_f32_neon, pe_rope_half_back_f32_neon},
        {pe_rope_inter_fwd_f32_neon, pe_rope_inter_back_f32_neon}};
    return fns[layout][dir];
}
#endif

/* pair i's feature indices */
static void pair(int layout, ptrdiff_t i, ptrdiff_t h, ptrdiff_t *a, ptrdiff_t *b)
{
    *a = layout == HALF ? i : 2 * i;
    *b = layout == HALF ? i + h : 2 * i + 1;
}

/*
 * n vectors of d features (vector k at x + k*d*stride floats, features
 * `stride` apart); full-width tables of r features per vector, the angle of
 * pair i of vector k = (k + 3) * base^(-2i/r) (+ 0.25 for feature b),
 * computed in float64 here.
 * Tables and x are float32 values; the reference is their exact float64
 * formula, so a float32 kernel may differ by the roundings of two products
 * and one sum: |err| <= 2.01 * 2^-24 * (|x_a c_a| + |x_b s_a|) (+ tiny).
 */
typedef struct rope_case {
    ptrdiff_t n, d, r, stride;
    int inplace;
} rope_case;

static void make_tables(int layout, ptrdiff_t n, ptrdiff_t r, double *c, double *s)
{
    const ptrdiff_t h = r / 2;
    for (ptrdiff_t k = 0; k < n; k++)
        for (ptrdiff_t i = 0; i < h; i++) {
            const double angle = (double)(k + 3) * pow(10000.0, -2.0 * (double)i / (double)r);
            ptrdiff_t a, b;
            pair(layout, i, h, &a, &b);
            /* a and b get different values (the contract allows any
             * tables), so swapping them in a kernel cannot go unseen */
            c[k * r + a] = cos(angle);
            s[k * r + a] = sin(angle);
            c[k * r + b] = cos(angle + 0.25);
            s[k * r + b] = sin(angle + 0.25);
        }
}

/* run kernel fn (float32, or float64 when f64) on case t; y gets the output,
 * vector k feature j at y[k*d + j] (as float64) */
static void run_rope(pe_rope_fn fn, int f64, const rope_case *t, const double *x,
                     const double *c, const double *s, double *y)
{
    const ptrdiff_t z = f64 ? 8 : 4, nd = t->n * t->d * t->stride, nr = t->n * t->r;
    char *xb = xmalloc((size_t)(nd * z)), *yb = xmalloc((size_t)(nd * z));
    char *cb = xmalloc((size_t)(nr * z)), *sb = xmalloc((size_t)(nr * z));
    for (ptrdiff_t k = 0; k < t->n; k++)
        for (ptrdiff_t j = 0; j < t->d; j++) {
            const ptrdiff_t at = (k * t->d + j) * t->stride;
            if (f64) {
                ((double *)(void *)xb)[at] = x[k * t->d + j];
                ((double *)(void *)yb)[at] = -7.0;
            } else {
                ((float *)(void *)xb)[at] = (float)x[k * t->d + j];
                ((float *)(void *)yb)[at] = -7.0f;
            }
        }
    for (ptrdiff_t m = 0; m < nr; m++) {
        if (f64) {
            ((double *)(void *)cb)[m] = c[m];
            ((double *)(void *)sb)[m] = s[m];
        } else {
            ((float *)(void *)cb)[m] = (float)c[m];
            ((float *)(void *)sb)[m] = (float)s[m];
        }
    }
    pe_rope_loop L;
    L.n = t->n;
    L.d = t->d;
    L.r = t->r;
    L.x = xb;
    L.cos = cb;
    L.sin = sb;
    L.y = t->inplace ? xb : yb;
    L.x_step = L.y_step = t->d * t->stride * z;
    L.cos_step = L.sin_step = t->r * z;
    L.x_inner = L.y_inner = t->stride * z;
    L.cos_inner = L.sin_inner = z;
    L.m = 1;
    L.x_outer = L.cos_outer = L.sin_outer = L.y_outer = 0;
    fn(&L);
    const char *out = t->inplace ? xb : yb;
    for (ptrdiff_t k = 0; k < t->n; k++)
        for (ptrdiff_t j = 0; j < t->d; j++) {
            const ptrdiff_t at = (k * t->d + j) * t->stride;
            y[k * t->d + j] = f64 ? ((const double *)(const void *)out)[at]
                                  : (double)((const float *)(const void *)out)[at];
        }
    free(xb);
    free(yb);
    free(cb);
    free(sb);
}

/* max |y - reference| / tolerance over the case (> 1 fails) */
static double rope_error(int layout, int dir, int f64, const rope_case *t, const double *x,
                         const double *c, const double *s, const double *y)
{
    const ptrdiff_t h = t->r / 2;
    const double eps = f64 ? 0x1p-53 : 0x1p-24;
    double worst = 0.0;
    for (ptrdiff_t k = 0; k < t->n; k++) {
        const double *xk = x + k * t->d, *ck = c + k * t->r, *sk = s + k * t->r;
        const double *yk = y + k * t->d;
        for (ptrdiff_t i = 0; i < h; i++) {
            ptrdiff_t a, b;
            pair(layout, i, h, &a, &b);
            /* the inputs as the kernel sees them (rounded to float32) */
            double xa = xk[a], xb = xk[b], ca = ck[a], cb = ck[b], sa = sk[a], sb = sk[b];
            if (!f64) {
                xa = (float)xa; xb = (float)xb; ca = (float)ca; cb = (float)cb;
                sa = (float)sa; sb = (float)sb;
            }
            double ra, rb, ta, tb;
            if (dir == FWD) {
                ra = xa * ca - xb * sa;
                rb = xb * cb + xa * sb;
                ta = fabs(xa * ca) + fabs(xb * sa);
                tb = fabs(xb * cb) + fabs(xa * sb);
            } else {
                ra = xa * ca + xb * sb;
                rb = xb * cb - xa * sa;
                ta = fabs(xa * ca) + fabs(xb * sb);
                tb = fabs(xb * cb) + fabs(xa * sa);
            }
            const double ea = fabs(yk[a] - ra) / (2.01 * eps * ta + 1e-300);
            const double eb = fabs(yk[b] - rb) / (2.01 * eps * tb + 1e-300);
            if (!(ea <= worst))
                worst = ea;
            if (!(eb <= worst))
                worst = eb;
        }
        for (ptrdiff_t j = 2 * h; j < t->d; j++) {      /* copied unchanged */
            const double xj = f64 ? xk[j] : (double)(float)xk[j];
            if (yk[j] != xj)
                worst = INFINITY;
        }
    }
    return worst;
}

static void test_rope(void)
{
    static const rope_case cases[] = {
        {5, 64, 64, 1, 0},   /* head_dim 64 */
        {3, 128, 128, 1, 1}, /* in place */
        {4, 96, 64, 1, 0},   /* partial rotary: 32 features copied */
        {2, 22, 22, 1, 0},   /* h = 11: vector steps plus a scalar tail */
        {3, 6, 6, 1, 1},     /* h = 3: tail only, in place */
        {2, 40, 34, 1, 1},   /* partial, odd h, in place */
        {3, 32, 32, 3, 0},   /* strided features: the portable fallback */
    };
    const size_t ncases = sizeof cases / sizeof cases[0];
    for (int layout = 0; layout < 2; layout++)
        for (int dir = 0; dir < 2; dir++) {
            double worst32 = 0.0, worst64 = 0.0;
            int neon_same = 1;
            double worst_neon = 0.0;
            for (size_t ci = 0; ci < ncases; ci++) {
                const rope_case *t = &cases[ci];
                double *x = xmalloc((size_t)(t->n * t->d) * sizeof(double));
                double *c = xmalloc((size_t)(t->n * t->r) * sizeof(double));
                double *s = xmalloc((size_t)(t->n * t->r) * sizeof(double));
                double *y = xmalloc((size_t)(t->n * t->d) * sizeof(double));
                double *y2 = xmalloc((size_t)(t->n * t->d) * sizeof(double));
                for (ptrdiff_t m = 0; m < t->n * t->d; m++)
                    x[m] = 4.0 * urand();
                make_tables(layout, t->n, t->r, c, s);
                double e;

                run_rope(portable_f32(layout, dir), 0, t, x, c, s, y);
                e = rope_error(layout, dir, 0, t, x, c, s, y);
                if (!(e <= worst32))
                    worst32 = e;
#if defined(PE_HAVE_NEON_ROPE)
                run_rope(neon_f32(layout, dir), 0, t, x, c, s, y2);
                e = rope_error(layout, dir, 0, t, x, c, s, y2);
                if (!(e <= worst_neon))
                    worst_neon = e;
                if (memcmp(y, y2, (size_t)(t->n * t->d) * sizeof(double)) != 0)
                    neon_same = 0;
#endif
                run_rope(portable_f64(layout, dir), 1, t, x, c, s, y);
                e = rope_error(layout, dir, 1, t, x, c, s, y);
                if (!(e <= worst64))
                    worst64 = e;
                free(x);
                free(c);
                free(s);
                free(y);
                free(y2);
            }
            char what[96];
            snprintf(what, sizeof what, "rope %s %s f32 vs float64 formula",
                     layout_names[layout], dir_names[dir]);
            report(worst32 <= 1.0, what, worst32, 0);
            snprintf(what, sizeof what, "rope %s %s f64 vs float64 formula",
                     layout_names[layout], dir_names[dir]);
            report(worst64 <= 1.0, what, worst64, 0);
#if defined(PE_HAVE_NEON_ROPE)
            snprintf(what, sizeof what, "rope %s %s f32 NEON vs float64 formula",
                     layout_names[layout], dir_names[dir]);
            report(worst_neon <= 1.0, what, worst_neon, 0);
            snprintf(what, sizeof what, "rope %s %s f32 NEON == portable, bit for bit",
                     layout_names[layout], dir_names[dir]);
            report(neon_same, what, neon_same ? 0.0 : 1.0, 0);
#else
            (void)worst_neon;
            (void)neon_same;
#endif
        }
}

/* RoPE through the grid driver (pe_rope_apply: position blocks on the
 * pool, the kernels of each CPU level this machine runs) equals one call of
 * the portable kernel, in and out of place, both layouts and directions;
 * with HF's duplicated tables, and with one row not duplicated (its tile
 * takes the full kernel: tile_tables) */
static void test_rope_apply_levels(void)
{
    const ptrdiff_t H = 8, S = 1024, d = 64;
    const ptrdiff_t n = H * S * d;
    float *x = xmalloc((size_t)n * sizeof(float)), *xi = xmalloc((size_t)n * sizeof(float));
    float *c = xmalloc((size_t)(S * d) * sizeof(float)), *s = xmalloc((size_t)(S * d) * sizeof(float));
    float *y1 = xmalloc((size_t)n * sizeof(float)), *y2 = xmalloc((size_t)n * sizeof(float));
    int ok = 1;
    for (ptrdiff_t m = 0; m < n; m++)
        x[m] = (float)urand();
    for (ptrdiff_t p = 0; p < S; p++)
        for (ptrdiff_t j = 0; j < d; j++) {   /* duplicated halves, as HF's tables */
            c[p * d + j] = (float)cos(0.01 * (double)(p * (j % (d / 2) + 1)));
            s[p * d + j] = (float)sin(0.01 * (double)(p * (j % (d / 2) + 1)));
        }
    pe_set_num_threads(4);
    for (int variant = 0; variant < 2; variant++)
    for (int level = 0; level <= pe_cpu_supported(); level++) {
        pe_cpu_select(level);
        if (variant == 1 && level == 0)
            c[(S / 2) * d + d - 1] += 1e-3f;   /* a row's halves differ */
        for (int kind = 0; kind < 4; kind++) {
            pe_rope_loop L2 = {S, d, d, (const char *)x, (const char *)c, (const char *)s,
                               (char *)y1, d * 4, d * 4, d * 4, d * 4, 4, 4, 4, 4,
                               1, 0, 0, 0, 0};
            pe_rope_grid g = {1, H, S, d, d, (const char *)x, (const char *)c,
                              (const char *)s, (char *)y2, 0, S * d * 4, d * 4, 0,
                              S * d * 4, d * 4, 0, d * 4, 0, d * 4, 4, 4, 4, 4, NULL};
            for (ptrdiff_t h = 0; h < H; h++) {     /* the reference: head by head */
                L2.x = (const char *)(x + h * S * d);
                L2.y = (char *)(y1 + h * S * d);
                (kind == 0 ? pe_rope_half_fwd_f32 : kind == 1 ? pe_rope_half_back_f32
                 : kind == 2 ? pe_rope_inter_fwd_f32 : pe_rope_inter_back_f32)(&L2);
            }
            pe_rope_apply(&g, kind, 1);
            ok &= memcmp(y1, y2, (size_t)n * sizeof(float)) == 0;
            memcpy(xi, x, (size_t)n * sizeof(float));
            g.x = (const char *)xi;
            g.y = (char *)xi;
            pe_rope_apply(&g, kind, 1);                 /* in place */
            ok &= memcmp(y1, xi, (size_t)n * sizeof(float)) == 0;
        }
    }
    pe_cpu_select(-1);
    report(ok, "rope grid driver at every CPU level == kernel", 0, 0);
    free(x);
    free(xi);
    free(c);
    free(s);
    free(y1);
    free(y2);
}

/* A loop of m groups (pe_rope_loop.m, *_outer) equals m calls of one
 * group, bit for bit: every kernel of pe_rope_kernel, every type, at every
 * CPU level (the full kernels run the groups one call each; the one-pass
 * kernels, which loop over them themselves, run in test_rope_apply_levels
 * through the tile walk) */
static void test_rope_groups(void)
{
    enum { M = 3, N = 2, D = 32, G = M * N * D };
    static const size_t sizes[4] = {2, 4, 8, 2};
    unsigned char x[G * 8], c[M * D * 8], s[M * D * 8], y1[G * 8], y2[G * 8];
    int ok = 1;
    for (int level = 0; level <= pe_cpu_supported(); level++) {
        pe_cpu_select(level);
        for (int type = 0; type < 4; type++) {
            const ptrdiff_t z = (ptrdiff_t)sizes[type];
            for (int i = 0; i < G; i++) {
                const float v = (float)urand();
                const uint16_t hv = type == 0 ? pe_float_to_half(v) : pe_float_to_bf16(v);
                const double dv = v;
                memcpy(x + (size_t)i * (size_t)z, z == 2 ? (const void *)&hv
                       : z == 4 ? (const void *)&v : (const void *)&dv, (size_t)z);
            }
            for (int i = 0; i < M * D; i++) {
                const float cv = (float)cos(0.1 * i), sv = (float)sin(0.1 * i);
                const uint16_t hc = type == 0 ? pe_float_to_half(cv) : pe_float_to_bf16(cv);
                const uint16_t hs = type == 0 ? pe_float_to_half(sv) : pe_float_to_bf16(sv);
                const double dc = cv, ds = sv;
                memcpy(c + (size_t)i * (size_t)z, z == 2 ? (const void *)&hc
                       : z == 4 ? (const void *)&cv : (const void *)&dc, (size_t)z);
                memcpy(s + (size_t)i * (size_t)z, z == 2 ? (const void *)&hs
                       : z == 4 ? (const void *)&sv : (const void *)&ds, (size_t)z);
            }
            for (int kind = 0; kind < 4; kind++) {
                const pe_rope_fn fn = pe_rope_kernel(kind, type);
                /* group o: rows o*N .. o*N+N-1 sharing table row o */
                pe_rope_loop L = {N, D, D, (const char *)x, (const char *)c, (const char *)s,
                                  (char *)y1, D * z, 0, 0, D * z, z, z, z, z,
                                  M, N * D * z, D * z, D * z, N * D * z};
                memset(y1, 0, sizeof y1);
                memset(y2, 0xff, sizeof y2);
                fn(&L);
                L.m = 1;
                L.y = (char *)y2;
                for (int o = 0; o < M; o++) {
                    fn(&L);
                    L.x += N * D * z;
                    L.cos += D * z;
                    L.sin += D * z;
                    L.y += N * D * z;
                }
                ok &= memcmp(y1, y2, (size_t)(G * z)) == 0;
            }
        }
    }
    pe_cpu_select(-1);
    report(ok, "rope m groups == m calls, every kernel and level", 0, 0);
}

/* ------------------------------------------------------------------ */
/* Tables                                                               */
/* ------------------------------------------------------------------ */

/* pe_rope_table_*: cos/sin of pos * inv_freq, rounded once from float64 */
static void test_rope_table(void)
{
    const ptrdiff_t n = 50, h = 16;
    int64_t pos[50];
    double inv[16];
    for (ptrdiff_t k = 0; k < n; k++)
        pos[k] = k * 997 + (k % 3);              /* up to ~49k: large angles */
    for (ptrdiff_t i = 0; i < h; i++)
        inv[i] = pow(500000.0, -2.0 * (double)i / (double)(2 * h));
    float *c32 = xmalloc((size_t)(n * 2 * h) * sizeof(float));
    float *s32 = xmalloc((size_t)(n * 2 * h) * sizeof(float));
    double *c64 = xmalloc((size_t)(n * 2 * h) * sizeof(double));
    double *s64 = xmalloc((size_t)(n * 2 * h) * sizeof(double));
    for (int inter = 0; inter < 2; inter++) {
        pe_rope_table_f32(n, pos, h, inv, 0.75, inter, c32, s32);
        pe_rope_table_f64(n, pos, h, inv, 0.75, inter, c64, s64);
        double w32 = 0.0, w64 = 0.0;
        for (ptrdiff_t k = 0; k < n; k++)
            for (ptrdiff_t i = 0; i < h; i++) {
                /* the angle in float64 has error ~|angle| * 2^-53; cos/sin 1 ulp */
                const double angle = (double)pos[k] * inv[i];
                const double rc = 0.75 * cos(angle), rs = 0.75 * sin(angle);
                const double slack = fabs(angle) * 0x1p-52 + 0x1p-52;
                ptrdiff_t a, b;
                pair(inter ? INTER : HALF, i, h, &a, &b);
                const ptrdiff_t at[2] = {k * 2 * h + a, k * 2 * h + b};
                for (int q = 0; q < 2; q++) {
                    double e32 = fmax(fabs(c32[at[q]] - rc), fabs(s32[at[q]] - rs)) /
                                 (0x1p-24 + slack);
                    double e64 = fmax(fabs(c64[at[q]] - rc), fabs(s64[at[q]] - rs)) /
                                 (4 * slack);
                    if (!(e32 <= w32))
                        w32 = e32;
                    if (!(e64 <= w64))
                        w64 = e64;
                }
            }
        report(w32 <= 1.0, inter ? "rope table interleaved f32 vs cos/sin" :
                                   "rope table half-split f32 vs cos/sin", w32, 0);
        report(w64 <= 1.0, inter ? "rope table interleaved f64 vs cos/sin" :
                                   "rope table half-split f64 vs cos/sin", w64, 0);
    }
    free(c32);
    free(s32);
    free(c64);
    free(s64);
}

/* pe_sinusoidal_table_*: Vaswani's table (interleaved and concatenated) */
static void test_sinusoidal_table(void)
{
    const ptrdiff_t n = 300, dim = 34;
    const int64_t start = 1000;
    const ptrdiff_t nf = PE_SINUSOIDAL_NFREQ(dim);
    double *inv = xmalloc((size_t)nf * sizeof(double));
    double *work = xmalloc((size_t)PE_SINUSOIDAL_WORK(dim) * sizeof(double));
    float *t32 = xmalloc((size_t)(n * dim) * sizeof(float));
    double *t64 = xmalloc((size_t)(n * dim) * sizeof(double));
    for (ptrdiff_t i = 0; i < nf; i++)
        inv[i] = pow(10000.0, -2.0 * (double)i / (double)dim);
    for (int concat = 0; concat < 2; concat++) {
        pe_sinusoidal_table_f32(n, start, dim, inv, concat, t32, work);
        pe_sinusoidal_table_f64(n, start, dim, inv, concat, t64, work);
        double w32 = 0.0, w64 = 0.0;
        for (ptrdiff_t k = 0; k < n; k++)
            for (ptrdiff_t j = 0; j < dim; j++) {
                const double p = (double)(start + k);
                double ref, angle;
                if (!concat) {
                    angle = p * inv[j / 2];
                    ref = j % 2 ? cos(angle) : sin(angle);
                } else {
                    const ptrdiff_t hh = dim / 2;
                    angle = p * inv[j % hh];
                    ref = j < hh ? sin(angle) : cos(angle);
                }
                const double slack = fabs(angle) * 0x1p-50 + 0x1p-52;
                const double e32 = fabs(t32[k * dim + j] - ref) / (0x1p-24 + slack);
                const double e64 = fabs(t64[k * dim + j] - ref) / (4 * slack);
                if (!(e32 <= w32))
                    w32 = e32;
                if (!(e64 <= w64))
                    w64 = e64;
            }
        report(w32 <= 1.0, concat ? "sinusoidal table concat f32 vs sin/cos"
                                  : "sinusoidal table interleaved f32 vs sin/cos", w32, 0);
        report(w64 <= 1.0, concat ? "sinusoidal table concat f64 vs sin/cos"
                                  : "sinusoidal table interleaved f64 vs sin/cos", w64, 0);
    }
    free(inv);
    free(work);
    free(t32);
    free(t64);
}

/* ------------------------------------------------------------------ */
/* float16                                                              */
/* ------------------------------------------------------------------ */

/* binary16 -> float64, from the bit fields */
static double half_value(uint16_t h)
{
    const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(1024 + m), e - 25);
    return sign ? -v : v;
}

static void test_half(void)
{
    int to_float_ok = 1, round_trip_ok = 1, rounding_ok = 1;
    for (uint32_t u = 0; u < 65536; u++) {
        const uint16_t h = (uint16_t)u;
        const double want = half_value(h);
        const float got = pe_half_to_float(h);
        if (isnan(want)) {
            if (!isnan(got))
                to_float_ok = 0;
            continue;
        }
        if ((double)got != want || !signbit(got) != !signbit(want))
            to_float_ok = 0;
        if (pe_float_to_half(got) != h)
            round_trip_ok = 0;
        /* halfway to the next half up rounds to the even neighbour */
        const int e = (h >> 10) & 31;
        if (e < 30 && !(h & 0x8000)) {
            const double next = half_value((uint16_t)(h + 1));
            const float mid = (float)((want + next) / 2);   /* exact in float32 */
            const uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
            if (pe_float_to_half(mid) != even)
                rounding_ok = 0;
        }
    }
    report(to_float_ok, "half -> float, all 65536 values", 0, 0);
    report(round_trip_ok, "float -> half round trip, all finite values", 0, 0);
    report(rounding_ok, "float -> half ties to even, every midpoint", 0, 0);
}

/* ------------------------------------------------------------------ */
/* The output cache (runtime/memory.c)                                   */
/* ------------------------------------------------------------------ */

static void test_out_cache(void)
{
    const size_t n = PE_OUT_CACHE_MIN_BYTES, small = 4096;
    pe_out_cache c;
    memset(&c, 0, sizeof c);
    c.limit = 3 * n;
    unsigned char *a = pe_out_cache_malloc(&c, n), *b = pe_out_cache_malloc(&c, n + 64);
    unsigned char *s = pe_out_cache_malloc(&c, small);
    report(a != NULL && b != NULL && s != NULL, "out cache: blocks allocated", 0, 0);
    if (a == NULL || b == NULL || s == NULL)
        return;
    memset(a, 1, n);
    memset(b, 2, n + 64);
    pe_out_cache_free(&c, s);                    /* small: freed, never kept */
    pe_out_cache_free(&c, a);
    report(c.nkeep == 1 && c.held == n, "out cache: a freed large block is kept", 0, 0);
    unsigned char *a2 = pe_out_cache_malloc(&c, n);
    report(a2 == a && c.nkeep == 0 && c.held == 0, "out cache: the same size gets it back",
           0, 0);
    unsigned char *d = pe_out_cache_malloc(&c, n);   /* none kept: a new block */
    report(d != NULL && d != a2, "out cache: a second block of the size is new", 0, 0);
    /* a resized block is forgotten: freed, it is not kept under its old size */
    unsigned char *r = pe_out_cache_realloc(&c, b, n / 2);
    report(r != NULL, "out cache: realloc", 0, 0);
    pe_out_cache_free(&c, r);
    report(c.nkeep == 0, "out cache: a reallocated block is not kept", 0, 0);
    /* the limit: 3n held at most, the oldest released first */
    pe_out_cache_free(&c, a2);
    pe_out_cache_free(&c, d);
    unsigned char *e = pe_out_cache_malloc(&c, 2 * n);
    pe_out_cache_free(&c, e);
    report(c.nkeep == 2 && c.held == 3 * n && c.keep[0].p == d && c.keep[1].p == e,
           "out cache: over the limit the oldest goes", 0, 0);
    pe_out_cache_set_limit(&c, 0);
    report(c.nkeep == 0 && c.held == 0, "out cache: limit 0 frees every block", 0, 0);
    unsigned char *f = pe_out_cache_malloc(&c, n);
    pe_out_cache_free(&c, f);
    report(c.nkeep == 0, "out cache: limit 0 keeps nothing", 0, 0);
    unsigned char *z = pe_out_cache_calloc(&c, 0, 8), *m = pe_out_cache_malloc(&c, 0);
    report(z != NULL && m != NULL, "out cache: 0 bytes give a block", 0, 0);
    pe_out_cache_free(&c, z);
    pe_out_cache_free(&c, m);
}

/* pe_file_line / pe_file_bytes (runtime/memory.c): sysfs and cgroup values */
static void test_file_bytes(void)
{
    static const struct { const char *text; size_t want; } cases[] = {
        {"1048576\n", 1048576}, {"32768K\n", (size_t)32 << 20}, {"2M", (size_t)2 << 20},
        {"max\n", 0}, {"\n", 0}, {"-5\n", 0}};
    const char *path = "pe_file_bytes_test.tmp";
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        if (f == NULL || fputs(cases[i].text, f) < 0) {
            ok = 0;
            if (f != NULL)
                fclose(f);
            break;
        }
        fclose(f);
        ok &= pe_file_bytes(path) == cases[i].want;
    }
    remove(path);
    report(ok, "file bytes: numbers, K/M suffixes, max, empty, negative", 0, 0);
    report(pe_file_bytes("/no/such/posemb/file") == 0, "file bytes: a missing file is 0", 0, 0);
}

/* ------------------------------------------------------------------ */
/* The pool: stoppable jobs                                             */
/* ------------------------------------------------------------------ */

enum { POOL_ITEMS = 4096 };

typedef struct {
    atomic_int count[POOL_ITEMS];   /* how often each item was run */
    int asked, stop_at;             /* stop() calls; stop at the stop_at-th */
} pool_case;

static pool_case *pool_now;         /* the case stop() reads */

/* each chunk takes at least 10 ms of the process's CPU time, so a job of
 * 64 chunks lasts several stop intervals (100 ms) on any thread count */
static void pool_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    pool_case *pc = (pool_case *)ctx;
    const clock_t t0 = clock();
    for (ptrdiff_t i = begin; i < end; i++)
        atomic_fetch_add(&pc->count[i], 1);
    while (clock() - t0 < CLOCKS_PER_SEC / 100 && clock() >= t0)
        ;
}

static int pool_stop(void)
{
    return ++pool_now->asked == pool_now->stop_at;
}

/* every item runs once, stop() is asked between chunks (each time with the
 * job paused, then the rest goes on in a new job), and a stop leaves the
 * items after it unrun */
static void test_pool_stoppable(void)
{
    static pool_case pc;
    const ptrdiff_t item_bytes = PE_STOP_CHECK_BYTES / 64;   /* 64 items a chunk */
    for (int threads = 1; threads <= 2; threads++) {
        char what[64];
        int once = 1, stopped, ran = 0, twice = 0;
        pe_set_num_threads(threads);
        memset(&pc, 0, sizeof pc);
        pool_now = &pc;
        stopped = pe_parallel_for_stoppable(POOL_ITEMS, 1, item_bytes, pool_task, &pc, pool_stop);
        for (int i = 0; i < POOL_ITEMS; i++)
            once &= atomic_load(&pc.count[i]) == 1;
        snprintf(what, sizeof what, "pool: %d thread(s), every item once, asked %d", threads,
                 pc.asked);
        report(!stopped && once && pc.asked >= 1, what, 0, 0);

        memset(&pc, 0, sizeof pc);
        pc.stop_at = 1;
        stopped = pe_parallel_for_stoppable(POOL_ITEMS, 1, item_bytes, pool_task, &pc, pool_stop);
        for (int i = 0; i < POOL_ITEMS; i++) {
            ran += atomic_load(&pc.count[i]) > 0;
            twice |= atomic_load(&pc.count[i]) > 1;
        }
        snprintf(what, sizeof what, "pool: %d thread(s), stopped after %d of %d items", threads,
                 ran, POOL_ITEMS);
        report(stopped == 1 && pc.asked == 1 && ran > 0 && ran < POOL_ITEMS && !twice, what, 0, 0);
    }
}

#if !defined(_WIN32) && !defined(POSEMB_NO_THREADS)
/* seconds on the wall clock (C11) */
static double wall_seconds(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static _Thread_local int on_caller;   /* set on the thread that calls the pool */
static atomic_int ran_on_worker;

/* an item of 200 ms wall time, noting which thread ran it */
static void coarse_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const double t0 = wall_seconds();
    (void)ctx;
    if (!on_caller)
        atomic_store(&ran_on_worker, 1);
    while (begin < end && wall_seconds() - t0 < 0.2)
        ;
}

/* a job of two items each worth a thread (grain 1, as the learned backward
 * and the sinusoidal tables cut theirs) runs on the pool even when its
 * workers have gone to sleep; a job of few fine grains stays on the caller */
static void test_pool_coarse_parts(void)
{
    on_caller = 1;
    pe_set_num_threads(2);
    pe_parallel_for(2, 1, coarse_task, NULL);           /* (starts the worker) */
    for (int fine = 0; fine < 2; fine++) {
        const double t0 = wall_seconds();
        while (wall_seconds() - t0 < 0.1)               /* the worker falls asleep */
            ;
        atomic_store(&ran_on_worker, 0);
        pe_parallel_for(fine ? 4 : 2, fine ? 2 : 1, coarse_task, NULL);
        report(atomic_load(&ran_on_worker) == !fine,
               fine ? "pool: 2 fine grains after idling, on the caller"
                    : "pool: 2 whole parts after idling, on 2 threads", 0, 0);
    }
    pe_set_num_threads(1);
}
#endif

int main(void)
{
#if defined(__aarch64__)
    printf("posemb C kernel tests (aarch64%s)\n",
#if defined(PE_HAVE_NEON_ROPE)
           ", NEON RoPE kernels"
#else
           ""
#endif
    );
#else
    printf("posemb C kernel tests\n");
#endif
    test_rope();
    test_rope_apply_levels();
    test_rope_groups();
    test_rope_table();
    test_sinusoidal_table();
    test_half();
    test_out_cache();
    test_file_bytes();
    test_pool_stoppable();
#if !defined(_WIN32) && !defined(POSEMB_NO_THREADS)
    test_pool_coarse_parts();
#endif
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
