/*
 * relative.c - relative position biases and embeddings: T5's bucketed bias
 * (forward and table gradient) and Shaw et al.'s clipped relative table
 * (index, gather and table gradient).
 *
 * Both depend on a query/key pair only through rp = key_pos - query_pos,
 * so every (heads, q, k) output is made of q + k - 1 diagonals: the kernels
 * compute each diagonal's value once (per head) and fill rows with memcpy,
 * so the cost is that of writing the output.  Row i of an output whose
 * diagonal values are D[0 .. q+k-2] (D[t] for key - query = t - (q - 1))
 * is the contiguous slice D[q-1-i .. q-1-i+k).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "posemb.h"

/* ------------------------------------------------------------------ */
/* T5 buckets                                                           */
/* ------------------------------------------------------------------ */

/*
 * HF's large-distance formula for a magnitude a >= max_exact, as float32
 * operations in HF's order (torch evaluates it on float32 tensors, the
 * Python-float divisor rounded to float32 first):
 *   f(a) = float(log(float(a) / me) / float(log(max_distance / me)) * (nb - me))
 * The log is the correctly rounded float32 log (from the float64 log).
 */
static double t5_large(uint64_t a, float me, float log_ratio, float span)
{
    const float x = (float)a / me;
    const float l = (float)log((double)x);
    const float f = l / log_ratio * span;
    return (double)f;
}

/*
 * Given: bidirectional flag, num_buckets and max_distance as in HF.
 * Returned: bound[b - 1] for b = 1 .. nb - 1 (nb = num_buckets / 2 when
 * bidirectional, else num_buckets), the smallest magnitude |rp| that HF
 * puts in bucket b or above (UINT64_MAX if none), so that
 *   bucket(|rp|) = #{ b : bound[b - 1] <= |rp| }.
 * The maths: bound[b-1] = b for b < me = nb/2; above it, the smallest a with
 * f(a) >= b - me, found by a galloping then bisecting search over the
 * monotone f (HF truncates f toward zero and f >= 0 there).
 */
void pe_t5_boundaries(int bidirectional, int64_t num_buckets,
                      int64_t max_distance, uint64_t *bound)
{
    const int64_t nb = bidirectional ? num_buckets / 2 : num_buckets;
    const int64_t me = nb / 2;
    const float mef = (float)me;
    const float log_ratio = (float)log((double)max_distance / (double)me);
    const float span = (float)(nb - me);
    const uint64_t top = (uint64_t)1 << 63;   /* largest |rp| of an int64 */
    uint64_t lo = (uint64_t)me;               /* f(lo) >= 0: bucket me */
    int64_t b;

    for (b = 1; b < nb; b++) {
        uint64_t hi, step;
        const double want = (double)(b - me);
        if (b <= me) {
            bound[b - 1] = (uint64_t)b;
            continue;
        }
        if (lo == UINT64_MAX || t5_large(top, mef, log_ratio, span) < want) {
            bound[b - 1] = lo = UINT64_MAX;   /* never reached */
            continue;
        }
        /* gallop: find hi > lo with f(hi) >= want, f(lo) < want or lo minimal */
        step = 1;
        hi = lo;
        while (t5_large(hi, mef, log_ratio, span) < want) {
            lo = hi;
            hi = (top - hi > step) ? hi + step : top;
            step *= 2;
        }
        if (t5_large(lo, mef, log_ratio, span) >= want) {
            bound[b - 1] = lo;                 /* lo itself qualifies */
            continue;
        }
        /* bisect: f(lo) < want <= f(hi) */
        while (hi - lo > 1) {
            const uint64_t mid = lo + (hi - lo) / 2;
            if (t5_large(mid, mef, log_ratio, span) >= want)
                hi = mid;
            else
                lo = mid;
        }
        bound[b - 1] = lo = hi;
    }
}

/* #{ k < n : bound[k] <= a }, bound sorted ascending. */
static inline int64_t count_le(const uint64_t *bound, int64_t n, uint64_t a)
{
    if (n <= 64) {            /* branch-free linear count */
        int64_t c = 0;
        for (int64_t k = 0; k < n; k++)
            c += bound[k] <= a;
        return c;
    }
    {                          /* branch-free lower bound */
        const uint64_t *base = bound;
        int64_t len = n;
        while (len > 1) {
            const int64_t half = len / 2;
            base = (base[half - 1] <= a) ? base + half : base;
            len -= half;
        }
        return (base - bound) + (base[0] <= a);
    }
}

/*
 * Given: spec, n relative positions rp.
 * Returned: out[n] = HF's T5Attention._relative_position_bucket(rp), i.e.
 *   bidirectional:  (rp > 0) * nb + bucket(|rp|)     (nb = num_buckets / 2)
 *   else:           bucket(max(-rp, 0))              (nb = num_buckets)
 * with bucket(a) = #{ b : bound[b-1] <= a }.  |rp| is taken as unsigned, so
 * INT64_MIN (where HF's torch.abs overflows) lands in the farthest bucket.
 */
void pe_t5_bucket_i64(const pe_t5_spec *s, ptrdiff_t n, const int64_t *rp,
                      int64_t *out)
{
    const int64_t nb = s->bidirectional ? s->num_buckets / 2 : s->num_buckets;
    for (ptrdiff_t i = 0; i < n; i++) {
        const int64_t r = rp[i];
        uint64_t a;
        int64_t base = 0;
        if (s->bidirectional) {
            a = r < 0 ? (uint64_t)0 - (uint64_t)r : (uint64_t)r;
            base = r > 0 ? nb : 0;
        } else {
            a = r < 0 ? (uint64_t)0 - (uint64_t)r : 0;
        }
        out[i] = base + count_le(s->bound, nb - 1, a);
    }
}

/* Buckets of the q + k - 1 diagonals: rp = t - (q - 1) - query_offset. */
static int64_t *diagonal_buckets(const pe_t5_spec *s, ptrdiff_t q, ptrdiff_t k,
                                 int64_t query_offset)
{
    const ptrdiff_t nd = q + k - 1;
    int64_t *b = (int64_t *)malloc((size_t)nd * sizeof(int64_t));
    if (b == NULL)
        return NULL;
    for (ptrdiff_t t = 0; t < nd; t++)
        b[t] = (int64_t)(t - (q - 1)) - query_offset;
    pe_t5_bucket_i64(s, nd, b, b);
    return b;
}

/*
 * Given: spec, table (num_buckets, heads), sizes, query_offset.
 * Returned: out (heads, q, k) with
 *   out[h, i, j] = table[bucket(j - (query_offset + i)), h]
 * (HF's compute_bias without the leading 1).  Each of the q + k - 1
 * diagonal values is looked up once per head; rows are memcpy'd slices.
 * Returns 0, or -1 if scratch memory could not be allocated.
 */
#define DEFINE_T5_BIAS(T, SUF)                                                \
int pe_t5_bias_##SUF(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,       \
                     ptrdiff_t k, int64_t query_offset, const T *table,       \
                     T *out)                                                  \
{                                                                             \
    const ptrdiff_t nd = q + k - 1;                                           \
    int64_t *bucket;                                                          \
    T *diag;                                                                  \
    if (heads == 0 || q == 0 || k == 0)                                       \
        return 0;                                                             \
    bucket = diagonal_buckets(s, q, k, query_offset);                         \
    diag = (T *)malloc((size_t)heads * (size_t)nd * sizeof(T));               \
    if (bucket == NULL || diag == NULL) {                                     \
        free(bucket);                                                         \
        free(diag);                                                           \
        return -1;                                                            \
    }                                                                         \
    for (ptrdiff_t h = 0; h < heads; h++)                                     \
        for (ptrdiff_t t = 0; t < nd; t++)                                    \
            diag[h * nd + t] = table[bucket[t] * heads + h];                  \
    pe_toeplitz_fill(heads, q, k, (ptrdiff_t)sizeof(T), diag, out);          \
    free(bucket);                                                             \
    free(diag);                                                               \
    return 0;                                                                 \
}

DEFINE_T5_BIAS(uint16_t, f16)
DEFINE_T5_BIAS(float, f32)
DEFINE_T5_BIAS(double, f64)

/*
 * Given: spec, grad (heads, q, k) of the bias, sizes, query_offset.
 * Returned: table_grad (num_buckets, heads), the gradient of the table:
 *   table_grad[b, h] = sum over (i, j) with bucket(j - query_offset - i) = b
 *                      of grad[h, i, j]
 * (a scatter-add).  Each diagonal is summed first, then the diagonals of a
 * bucket; all sums are in float64, rounded once to T.  A float16 or
 * bfloat16 grad (TG) is widened a row at a time (exactly) and gives a
 * float32 table_grad.
 * Returns 0, or -1 if scratch memory could not be allocated.
 */
#define DEFINE_T5_BIAS_BACK(TG, T, SUF, TC, ROW)                              \
int pe_t5_bias_back_##SUF(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,  \
                          ptrdiff_t k, int64_t query_offset, const TG *grad,  \
                          T *table_grad)                                      \
{                                                                             \
    const ptrdiff_t nd = q + k - 1, nbk = (ptrdiff_t)s->num_buckets;          \
    int64_t *bucket = NULL;                                                   \
    double *diag = NULL, *acc;                                                \
    TC *wide = NULL;                    /* a widened row (float16 grad) */    \
    acc = (double *)calloc((size_t)(nbk * heads) + 1, sizeof(double));        \
    if (acc == NULL)                                                          \
        return -1;                                                            \
    if (heads > 0 && q > 0 && k > 0) {                                        \
        bucket = diagonal_buckets(s, q, k, query_offset);                     \
        diag = (double *)malloc((size_t)nd * sizeof(double));                 \
        if (sizeof(TG) != sizeof(TC))                                         \
            wide = (TC *)malloc((size_t)k * sizeof(TC));                      \
        if (bucket == NULL || diag == NULL ||                                 \
            (sizeof(TG) != sizeof(TC) && wide == NULL)) {                     \
            free(bucket);                                                     \
            free(diag);                                                       \
            free(wide);                                                       \
            free(acc);                                                        \
            return -1;                                                        \
        }                                                                     \
        for (ptrdiff_t h = 0; h < heads; h++) {                               \
            const TG *g = grad + h * q * k;                                   \
            memset(diag, 0, (size_t)nd * sizeof(double));                     \
            for (ptrdiff_t i = 0; i < q; i++) {                               \
                double *d = diag + (q - 1 - i);                               \
                const TC *row = ROW(g + i * k, wide, k);                      \
                for (ptrdiff_t j = 0; j < k; j++)                             \
                    d[j] += (double)row[j];                                   \
            }                                                                 \
            for (ptrdiff_t t = 0; t < nd; t++)                                \
                acc[bucket[t] * heads + h] += diag[t];                        \
        }                                                                     \
    }                                                                         \
    for (ptrdiff_t e = 0; e < nbk * heads; e++)                               \
        table_grad[e] = (T)acc[e];                                            \
    free(bucket);                                                             \
    free(diag);                                                               \
    free(wide);                                                               \
    free(acc);                                                                \
    return 0;                                                                 \
}

/* a gradient row as the compute type: itself, or float16 widened into wide */
#define ROW_AS_IS(row, wide, n) (row)
#define ROW_WIDENED(row, wide, n) \
    (pe_half_to_float_run((row), (wide), (n)), (const float *)(wide))
#define ROW_WIDENED_BF16(row, wide, n) \
    (pe_bf16_to_float_run((row), (wide), (n)), (const float *)(wide))

DEFINE_T5_BIAS_BACK(uint16_t, float, f16, float, ROW_WIDENED)
DEFINE_T5_BIAS_BACK(uint16_t, float, bf16, float, ROW_WIDENED_BF16)
DEFINE_T5_BIAS_BACK(float, float, f32, float, ROW_AS_IS)
DEFINE_T5_BIAS_BACK(double, double, f64, double, ROW_AS_IS)

/* ------------------------------------------------------------------ */
/* Shaw et al. relative embeddings                                      */
/* ------------------------------------------------------------------ */

/*
 * Query i sits at key position p_i = k - q + i.  Key j maps to table row
 *   idx(i, j) = clip(j - p_i, -K, K) + K.
 * For a row i the keys split into three runs: j <= p_i - K (row 0),
 * p_i - K < j < p_i + K (rows j - p_i + K, consecutive), j >= p_i + K
 * (row 2K).  shaw_runs returns the first j of the middle and last runs,
 * both clamped to [0, k].
 */
static void shaw_runs(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K, ptrdiff_t i,
                      ptrdiff_t *mid, ptrdiff_t *end)
{
    const ptrdiff_t p = k - q + i;
    ptrdiff_t a = p - K + 1, b = p + K;
    a = a < 0 ? 0 : (a > k ? k : a);
    b = b < 0 ? 0 : (b > k ? k : b);
    *mid = a;
    *end = b < a ? a : b;
}

/*
 * Given: q, k, K.  Returned: out (q, k) int64,
 *   out[i, j] = clip(j - (k - q + i), -K, K) + K.
 */
void pe_shaw_index_i64(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K, int64_t *out)
{
    for (ptrdiff_t i = 0; i < q; i++) {
        int64_t *o = out + i * k;
        const ptrdiff_t p = k - q + i;
        ptrdiff_t mid, end, j;
        shaw_runs(q, k, K, i, &mid, &end);
        for (j = 0; j < mid; j++)
            o[j] = 0;
        for (; j < end; j++)
            o[j] = (int64_t)(j - p + K);
        for (; j < k; j++)
            o[j] = (int64_t)(2 * K);
    }
}

/*
 * Given: table (2K + 1, dim), q, k.  Returned: out (q, k, dim),
 *   out[i, j, :] = table[clip(j - (k - q + i), -K, K) + K, :]
 * The middle run of each row is one memcpy of consecutive table rows.
 */
#define DEFINE_SHAW_EMBED(T, SUF)                                             \
void pe_shaw_embed_##SUF(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K,               \
                         ptrdiff_t dim, const T *table, T *out)               \
{                                                                             \
    const size_t row = (size_t)dim * sizeof(T);                               \
    for (ptrdiff_t i = 0; i < q; i++) {                                       \
        T *o = out + i * k * dim;                                             \
        const ptrdiff_t p = k - q + i;                                        \
        ptrdiff_t mid, end, j;                                                \
        shaw_runs(q, k, K, i, &mid, &end);                                    \
        for (j = 0; j < mid; j++)                                             \
            memcpy(o + j * dim, table, row);                                  \
        if (end > mid)                                                        \
            memcpy(o + mid * dim, table + (mid - p + K) * dim,                \
                   (size_t)(end - mid) * row);                                \
        for (j = end; j < k; j++)                                             \
            memcpy(o + j * dim, table + 2 * K * dim, row);                    \
    }                                                                         \
}

DEFINE_SHAW_EMBED(uint16_t, f16)
DEFINE_SHAW_EMBED(float, f32)
DEFINE_SHAW_EMBED(double, f64)

/*
 * Given: grad (q, k, dim) of pe_shaw_embed's output, K.
 * Returned: table_grad (2K + 1, dim),
 *   table_grad[r, :] = sum over (i, j) with idx(i, j) = r of grad[i, j, :]
 * accumulated in float64 and rounded once to T (float32 for a float16 or
 * bfloat16 grad, widened exactly a query row at a time).
 * Returns 0, or -1 if scratch memory could not be allocated.
 */
#define DEFINE_SHAW_EMBED_BACK(TG, T, SUF, TC, ROW)                           \
int pe_shaw_embed_back_##SUF(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K,           \
                             ptrdiff_t dim, const TG *grad, T *table_grad)    \
{                                                                             \
    const ptrdiff_t rows = 2 * K + 1;                                         \
    double *acc = (double *)calloc((size_t)(rows * dim) + 1, sizeof(double)); \
    TC *wide = sizeof(TG) == sizeof(TC) ? NULL                                \
             : (TC *)malloc((size_t)(k * dim) * sizeof(TC) + 1);              \
    if (acc == NULL || (sizeof(TG) != sizeof(TC) && wide == NULL)) {          \
        free(acc);                                                            \
        free(wide);                                                           \
        return -1;                                                            \
    }                                                                         \
    for (ptrdiff_t i = 0; i < q; i++) {                                       \
        const TC *g = ROW(grad + i * k * dim, wide, k * dim);                 \
        const ptrdiff_t p = k - q + i;                                        \
        ptrdiff_t mid, end, j;                                                \
        double *first = acc, *last = acc + 2 * K * dim;                       \
        shaw_runs(q, k, K, i, &mid, &end);                                    \
        for (j = 0; j < mid; j++)                                             \
            for (ptrdiff_t c = 0; c < dim; c++)                               \
                first[c] += (double)g[j * dim + c];                           \
        {                                                                     \
            double *a = acc + (mid - p + K) * dim;                            \
            const TC *gm = g + mid * dim;                                     \
            for (ptrdiff_t e = 0; e < (end - mid) * dim; e++)                 \
                a[e] += (double)gm[e];                                        \
        }                                                                     \
        for (j = end; j < k; j++)                                             \
            for (ptrdiff_t c = 0; c < dim; c++)                               \
                last[c] += (double)g[j * dim + c];                            \
    }                                                                         \
    for (ptrdiff_t e = 0; e < rows * dim; e++)                                \
        table_grad[e] = (T)acc[e];                                            \
    free(acc);                                                                \
    free(wide);                                                               \
    return 0;                                                                 \
}

DEFINE_SHAW_EMBED_BACK(uint16_t, float, f16, float, ROW_WIDENED)
DEFINE_SHAW_EMBED_BACK(uint16_t, float, bf16, float, ROW_WIDENED_BF16)
DEFINE_SHAW_EMBED_BACK(float, float, f32, float, ROW_AS_IS)
DEFINE_SHAW_EMBED_BACK(double, double, f64, double, ROW_AS_IS)
