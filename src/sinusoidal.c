/*
 * sinusoidal.c - sinusoidal (absolute) position encodings: the table, and
 * the elementwise x + table used to add it without a broadcast copy.
 *
 * The one line of maths (Vaswani et al.; PositionalEmbeddings.jl AbsolutePE;
 * TorchLean), for a position p and w_i = base**(-2i/dim):
 *
 *   interleaved:  PE[p, 2i] = sin(p*w_i),   PE[p, 2i+1] = cos(p*w_i)
 *   concat:       PE[p, i]  = sin(p*w_i),   PE[p, h+i]  = cos(p*w_i)
 *
 * Accuracy.  Every value is computed in float64 and rounded once to the
 * output type, so a float32 table agrees with float64 truth to float32
 * rounding at any position (a float32 angle p*w is off by ~p * 6e-8 rad).
 *
 * Speed.  Calling sin and cos for each of n*dim entries is slow, so rows
 * come in blocks of K = PE_SINUSOIDAL_BLOCK positions p0 + k, p0 a multiple
 * of K and 0 <= k < K: with a = p0*w_i and b = k*w_i, the angle-sum identities
 *
 *   sin(a + b) = sin(a)cos(b) + cos(a)sin(b)
 *   cos(a + b) = cos(a)cos(b) - sin(a)sin(b)
 *
 * in float64 cost 4 products and 2 sums per pair, and libm is called only
 * about 2*(n/K + min(n, K)) times per frequency.  Each value is off by a few float64
 * ulps (~1e-15) from sin/cos of the float64 angle, itself off by
 * ~|p*w| * 1e-16 from the exact one; both are far below float32 rounding.
 */
#include <math.h>
#include <string.h>

#include "posemb.h"

/*
 * Given v, a double.  Returned: v rounded once to the nearest binary16.
 * (float)v rounds to nearest; rounding to odd instead (truncate, then set
 * the last bit when inexact) keeps the sticky information, and since
 * float32 has 13 more bits than binary16 the second rounding is then exact
 * round-to-nearest-even of v.
 */
static uint16_t double_to_half(double v)
{
    float f = (float)v;
    if ((double)f != v && isfinite(f)) {
        uint32_t bits;
        if (fabs((double)f) > fabs(v))
            f = nextafterf(f, 0.0f);
        memcpy(&bits, &f, sizeof bits);
        bits |= 1u;
        memcpy(&f, &bits, sizeof f);
    }
    return pe_float_to_half(f);
}

#define TO_f16(v) double_to_half(v)
#define TO_f32(v) ((float)(v))
#define TO_f64(v) (v)

/*
 * Given n rows from position start, dim features, ceil(dim/2) inverse
 * frequencies, the layout flag and scratch work.  Returned: out (n, dim).
 * The one line: out[p, 2i] = sin(p*w_i), out[p, 2i+1] = cos(p*w_i)
 * (interleaved), or [sin(p*w) | cos(p*w) | 0 if dim is odd] (concat).
 *
 * Blocks are aligned to absolute positions (p0 = p - p % K), so the value
 * for a position does not depend on start or n: a table of rows 30..39 is
 * bit for bit rows 30..39 of a longer one.  Only the offsets k = p % K that
 * occur are tabulated, so a one-row table (a decoding step) costs two libm
 * calls per frequency, as computing it directly would.
 */
#define DEFINE_SINUSOIDAL_TABLE(T, SUF)                                       \
void pe_sinusoidal_table_##SUF(ptrdiff_t n, int64_t start, ptrdiff_t dim,     \
                               const double *inv_freq, int concat, T *out,   \
                               double *work)                                  \
{                                                                             \
    const ptrdiff_t K = PE_SINUSOIDAL_BLOCK;                                  \
    const ptrdiff_t nf = PE_SINUSOIDAL_NFREQ(dim), h = dim / 2;               \
    double *sin_b = work, *cos_b = work + K * nf;  /* [k*nf + i], k*w_i */    \
    double *sin_a = work + 2 * K * nf, *cos_a = sin_a + nf;  /* p0*w_i */     \
    if (n <= 0 || dim <= 0)                                                   \
        return;                                                               \
    for (ptrdiff_t r = 0; r < n && r < K; r++) {  /* the offsets in use */    \
        const ptrdiff_t k = (ptrdiff_t)((start + r) % K);                     \
        for (ptrdiff_t i = 0; i < nf; i++) {                                  \
            const double b = (double)k * inv_freq[i];                         \
            sin_b[k * nf + i] = sin(b);                                       \
            cos_b[k * nf + i] = cos(b);                                       \
        }                                                                     \
    }                                                                         \
    for (ptrdiff_t r = 0; r < n;) {                                           \
        const ptrdiff_t k0 = (ptrdiff_t)((start + r) % K);                    \
        const double p0 = (double)(start + r - k0);                           \
        const ptrdiff_t rows = n - r < K - k0 ? n - r : K - k0;               \
        for (ptrdiff_t i = 0; i < nf; i++) {                                  \
            const double a = p0 * inv_freq[i];                                \
            sin_a[i] = sin(a);                                                \
            cos_a[i] = cos(a);                                                \
        }                                                                     \
        for (ptrdiff_t k = k0; k < k0 + rows; k++) {                          \
            T *row = out + (r + k - k0) * dim;                                \
            const double *sb = sin_b + k * nf, *cb = cos_b + k * nf;          \
            if (concat) {                                                     \
                for (ptrdiff_t i = 0; i < h; i++) {                           \
                    const double s = sin_a[i] * cb[i] + cos_a[i] * sb[i];     \
                    const double c = cos_a[i] * cb[i] - sin_a[i] * sb[i];     \
                    row[i] = TO_##SUF(s);                                     \
                    row[h + i] = TO_##SUF(c);                                 \
                }                                                             \
                if (dim > 2 * h)                                              \
                    row[dim - 1] = TO_##SUF(0.0);                             \
            } else {                                                          \
                for (ptrdiff_t i = 0; i < h; i++) {                           \
                    const double s = sin_a[i] * cb[i] + cos_a[i] * sb[i];     \
                    const double c = cos_a[i] * cb[i] - sin_a[i] * sb[i];     \
                    row[2 * i] = TO_##SUF(s);                                 \
                    row[2 * i + 1] = TO_##SUF(c);                             \
                }                                                             \
                if (dim > 2 * h)  /* odd dim ends with a sin column */        \
                    row[dim - 1] =                                            \
                        TO_##SUF(sin_a[h] * cb[h] + cos_a[h] * sb[h]);        \
            }                                                                 \
        }                                                                     \
        r += rows;                                                            \
    }                                                                         \
}

DEFINE_SINUSOIDAL_TABLE(uint16_t, f16)
DEFINE_SINUSOIDAL_TABLE(float, f32)
DEFINE_SINUSOIDAL_TABLE(double, f64)

/* ------------------------------------------------------------------ */
/* x + table, elementwise                                               */
/* ------------------------------------------------------------------ */

/* Given x, t.  Returned: y = x + t (the same type throughout). */
#define DEFINE_SINUSOIDAL_ADD(T, SUF)                                         \
void pe_sinusoidal_add_##SUF(const pe_sinusoidal_add_loop *L)                 \
{                                                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(T);                                 \
    if (L->x_step == z && L->t_step == z && L->y_step == z) {                 \
        const T *x = (const T *)(const void *)L->x;                           \
        const T *t = (const T *)(const void *)L->t;                           \
        T *y = (T *)(void *)L->y;                                             \
        for (ptrdiff_t k = 0; k < L->n; k++)                                  \
            y[k] = x[k] + t[k];                                               \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const T xv = *(const T *)(const void *)(L->x + k * L->x_step);        \
        const T tv = *(const T *)(const void *)(L->t + k * L->t_step);        \
        *(T *)(void *)(L->y + k * L->y_step) = xv + tv;                       \
    }                                                                         \
}

DEFINE_SINUSOIDAL_ADD(float, f32)
DEFINE_SINUSOIDAL_ADD(double, f64)

/* Given x (float16), t (float64).  Returned: y = half(x + t), one rounding. */
void pe_sinusoidal_add_f16(const pe_sinusoidal_add_loop *L)
{
    for (ptrdiff_t k = 0; k < L->n; k++) {
        const uint16_t xv = *(const uint16_t *)(const void *)(L->x + k * L->x_step);
        const double tv = *(const double *)(const void *)(L->t + k * L->t_step);
        *(uint16_t *)(void *)(L->y + k * L->y_step) =
            double_to_half((double)pe_half_to_float(xv) + tv);
    }
}
