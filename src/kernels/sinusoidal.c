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
 * Speed.  Calling sin and cos for each of n*dim entries is slow.  Write a
 * position as p = P + q*K + k with P a multiple of K*Q, 0 <= q < Q and
 * 0 <= k < K (K = PE_SINUSOIDAL_BLOCK, Q = PE_SINUSOIDAL_SUPER).  libm
 * gives sin/cos of P*w, of q*K*w and of k*w; the angle-sum identities
 *
 *   sin(a + b) = sin(a)cos(b) + cos(a)sin(b)
 *   cos(a + b) = cos(a)cos(b) - sin(a)sin(b)
 *
 * in float64 combine them, first into the block value (P + q*K)*w, then
 * into each row: 4 products and 2 sums per value.  libm is called about
 * 2*(n/(K*Q) + min(n/K, Q) + min(n, K)) times per frequency instead of 2n.
 * Each value is off by a few float64 ulps (~1e-15) from sin/cos of the
 * float64 angle, itself off by ~|p*w| * 1e-16 from the exact one; both
 * are far below float32 rounding.  The split depends on p alone, so a
 * value does not depend on start or n (rows 30..39 of a table are bit for
 * bit those of any other table holding those positions).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "posemb.h"

#define TO_f16(v) pe_double_to_half(v)
#define TO_f32(v) ((float)(v))
#define TO_f64(v) (v)

/* Row loops are compiled twice (portable C, and C for AVX2 on x86-64,
 * picked by the dispatch): same bits on all. */
/*
 * The frequencies f0 <= i < f1 of one row, from the block values sa, ca
 * (p0*w_i) and the offset values sb, cb (k*w_i), each indexed i - f0:
 * sin/cos(p0*w + k*w) by the angle-sum identities, rounded once.  The range
 * holding frequency h = dim/2 (odd dim only) writes the last column.
 */
#define DEFINE_SINUSOIDAL_ROW(T, SUF, NAME, ATTR)                             \
ATTR static void NAME(ptrdiff_t f0, ptrdiff_t f1, ptrdiff_t dim,   \
                                 int concat, const double *restrict sa,       \
                                 const double *restrict ca,                   \
                                 const double *restrict sb,                   \
                                 const double *restrict cb, T *restrict row)  \
{                                                                             \
    const ptrdiff_t h = dim / 2, m = (f1 < h ? f1 : h) - f0;                  \
    if (concat) {                                                             \
        for (ptrdiff_t i = 0; i < m; i++) {                                   \
            row[f0 + i] = TO_##SUF(sa[i] * cb[i] + ca[i] * sb[i]);            \
            row[h + f0 + i] = TO_##SUF(ca[i] * cb[i] - sa[i] * sb[i]);        \
        }                                                                     \
        if (f1 > h)                                                           \
            row[dim - 1] = TO_##SUF(0.0);                                     \
    } else {                                                                  \
        for (ptrdiff_t i = 0; i < m; i++) {                                   \
            row[2 * (f0 + i)] = TO_##SUF(sa[i] * cb[i] + ca[i] * sb[i]);      \
            row[2 * (f0 + i) + 1] = TO_##SUF(ca[i] * cb[i] - sa[i] * sb[i]);  \
        }                                                                     \
        if (f1 > h)       /* odd dim ends with a sin column */                \
            row[dim - 1] = TO_##SUF(sa[h - f0] * cb[h - f0] + ca[h - f0] * sb[h - f0]); \
    }                                                                         \
}

/*
 * AVX-512F forms of the float32 and float64 rows, picked at run time: the
 * same products, sums and one rounding as the C rows (explicit intrinsics,
 * so no contraction into FMA can change a bit; masked loads and stores for
 * the last frequencies), with the interleaving done by one permute per
 * 64-byte output line.  The AVX2 clone of the C row spends about 2.2
 * instructions per value, this about 1.
 */
#if defined(PE_X86_SIMD)
#include <immintrin.h>
#define PE_AVX512 __attribute__((target("avx512f")))

/*
 * float16 from float64 values, 4 or 8 at a time (F16C, the AVX2 level), as
 * pe_double_to_half: the table rows and x + table (formed in float64; x
 * widens exactly) are rounded once to binary16.  That one rounding is made
 * of two: to
 * float32 rounding to odd (truncate, then set the last bit if anything was
 * dropped), then to binary16 to nearest even.  float32 keeps 13 more bits
 * than binary16, so the second rounding sees the first one's inexactness
 * in that sticky bit and gives the correctly rounded result (Boldo and
 * Melquiond, "Emulation of FMA and correctly rounded sums: proved
 * algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008).
 * NaNs keep their sign and top payload bits, made quiet, as
 * pe_double_to_half; overflow gives inf, underflow a signed zero.
 */
__attribute__((target("avx2,f16c")))
static inline __m128 pd_to_ps_odd(__m256d d)
{
    const __m128 f = _mm256_cvtpd_ps(d);                   /* nearest even */
    const __m256d back = _mm256_cvtps_pd(f);
    const __m256d abs = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
    /* rounded away from zero (|f| > |d|) or inexact; false for NaN */
    const __m256i away = _mm256_castpd_si256(
        _mm256_cmp_pd(_mm256_and_pd(back, abs), _mm256_and_pd(d, abs), _CMP_GT_OQ));
    const __m256i inexact = _mm256_castpd_si256(_mm256_cmp_pd(back, d, _CMP_NEQ_OQ));
    const __m256i low = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);   /* 64 -> 32-bit masks */
    __m128i bits = _mm_add_epi32(_mm_castps_si128(f), _mm256_castsi256_si128(
                                     _mm256_permutevar8x32_epi32(away, low)));   /* truncated */
    bits = _mm_or_si128(bits, _mm_srli_epi32(_mm256_castsi256_si128(
                                  _mm256_permutevar8x32_epi32(inexact, low)), 31));
    return _mm_castsi128_ps(bits);
}


/* The float16 rows: DEFINE_SINUSOIDAL_ROW's products and sums, 4
 * frequencies at a time, rounded once through pd_to_ps_odd and F16C. */
__attribute__((target("avx2,f16c")))
static void sinusoidal_row_f16_f16c(ptrdiff_t f0, ptrdiff_t f1, ptrdiff_t dim, int concat,
                                    const double *restrict sa, const double *restrict ca,
                                    const double *restrict sb, const double *restrict cb,
                                    uint16_t *restrict row)
{
    const ptrdiff_t h = dim / 2, m = (f1 < h ? f1 : h) - f0;
    ptrdiff_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const __m256d a = _mm256_loadu_pd(sa + i), c = _mm256_loadu_pd(ca + i);
        const __m256d b = _mm256_loadu_pd(sb + i), d = _mm256_loadu_pd(cb + i);
        const __m128 s4 = pd_to_ps_odd(_mm256_add_pd(_mm256_mul_pd(a, d), _mm256_mul_pd(c, b)));
        const __m128 c4 = pd_to_ps_odd(_mm256_sub_pd(_mm256_mul_pd(c, d), _mm256_mul_pd(a, b)));
        if (concat) {
            _mm_storel_epi64((__m128i *)(void *)(row + f0 + i),
                             _mm_cvtps_ph(s4, _MM_FROUND_TO_NEAREST_INT));
            _mm_storel_epi64((__m128i *)(void *)(row + h + f0 + i),
                             _mm_cvtps_ph(c4, _MM_FROUND_TO_NEAREST_INT));
        } else {
            const __m256 sc = _mm256_set_m128(_mm_unpackhi_ps(s4, c4), _mm_unpacklo_ps(s4, c4));
            _mm_storeu_si128((__m128i *)(void *)(row + 2 * (f0 + i)),
                             _mm256_cvtps_ph(sc, _MM_FROUND_TO_NEAREST_INT));
        }
    }
    for (; i < m; i++) {
        const uint16_t sv = TO_f16(sa[i] * cb[i] + ca[i] * sb[i]);
        const uint16_t cv = TO_f16(ca[i] * cb[i] - sa[i] * sb[i]);
        row[concat ? f0 + i : 2 * (f0 + i)] = sv;
        row[concat ? h + f0 + i : 2 * (f0 + i) + 1] = cv;
    }
    if (f1 > h)
        row[dim - 1] = concat ? TO_f16(0.0)
                              : TO_f16(sa[h - f0] * cb[h - f0] + ca[h - f0] * sb[h - f0]);
}


/* sin, cos of (p0 + k)*w for 8 frequencies, lanes past `left` zero */
#define ROW8(left, i)                                                         \
    const __mmask8 k8 = (left) >= 8 ? (__mmask8)0xff                          \
                                     : (__mmask8)((1u << (left)) - 1u);       \
    const __m512d a = _mm512_maskz_loadu_pd(k8, sa + (i));                    \
    const __m512d c = _mm512_maskz_loadu_pd(k8, ca + (i));                    \
    const __m512d b = _mm512_maskz_loadu_pd(k8, sb + (i));                    \
    const __m512d d = _mm512_maskz_loadu_pd(k8, cb + (i));                    \
    const __m512d sv = _mm512_add_pd(_mm512_mul_pd(a, d), _mm512_mul_pd(c, b)); \
    const __m512d cv = _mm512_sub_pd(_mm512_mul_pd(c, d), _mm512_mul_pd(a, b))

PE_AVX512 static void
sinusoidal_row_f32_avx512(ptrdiff_t f0, ptrdiff_t f1, ptrdiff_t dim, int concat,
                          const double *sa, const double *ca,
                          const double *sb, const double *cb, float *row)
{
    const ptrdiff_t h = dim / 2, m = (f1 < h ? f1 : h) - f0;
    const __m512i idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19,
                                          4, 20, 5, 21, 6, 22, 7, 23);
    for (ptrdiff_t i = 0; i < m; i += 8) {
        const ptrdiff_t left = m - i;
        ROW8(left, i);
        const __m512 s16 = _mm512_castps256_ps512(_mm512_cvtpd_ps(sv));
        const __m512 c16 = _mm512_castps256_ps512(_mm512_cvtpd_ps(cv));
        if (concat) {
            _mm512_mask_storeu_ps(row + f0 + i, (__mmask16)k8, s16);
            _mm512_mask_storeu_ps(row + h + f0 + i, (__mmask16)k8, c16);
        } else {
            const __mmask16 k16 = left >= 8 ? (__mmask16)0xffff
                                            : (__mmask16)((1u << (2 * left)) - 1u);
            _mm512_mask_storeu_ps(row + 2 * (f0 + i), k16,
                                  _mm512_permutex2var_ps(s16, idx, c16));
        }
    }
    if (f1 > h) {               /* odd dim: the last column */
        if (concat) {
            row[dim - 1] = 0.0f;
        } else {
            ROW8(1, h - f0);
            _mm512_mask_storeu_ps(row + dim - 1, (__mmask16)1,
                                  _mm512_castps256_ps512(_mm512_cvtpd_ps(sv)));
            (void)cv;
        }
    }
}

PE_AVX512 static void
sinusoidal_row_f64_avx512(ptrdiff_t f0, ptrdiff_t f1, ptrdiff_t dim, int concat,
                          const double *sa, const double *ca,
                          const double *sb, const double *cb, double *row)
{
    const ptrdiff_t h = dim / 2, m = (f1 < h ? f1 : h) - f0;
    const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
    const __m512i hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    for (ptrdiff_t i = 0; i < m; i += 8) {
        const ptrdiff_t left = m - i;
        ROW8(left, i);
        if (concat) {
            _mm512_mask_storeu_pd(row + f0 + i, k8, sv);
            _mm512_mask_storeu_pd(row + h + f0 + i, k8, cv);
        } else {
            const ptrdiff_t n2 = 2 * (left >= 8 ? 8 : left);    /* values */
            const __mmask8 klo = n2 >= 8 ? (__mmask8)0xff
                                         : (__mmask8)((1u << n2) - 1u);
            const __mmask8 khi = n2 <= 8 ? (__mmask8)0
                               : n2 >= 16 ? (__mmask8)0xff
                                          : (__mmask8)((1u << (n2 - 8)) - 1u);
            _mm512_mask_storeu_pd(row + 2 * (f0 + i), klo,
                                  _mm512_permutex2var_pd(sv, lo, cv));
            _mm512_mask_storeu_pd(row + 2 * (f0 + i) + 8, khi,
                                  _mm512_permutex2var_pd(sv, hi, cv));
        }
    }
    if (f1 > h) {               /* odd dim: the last column */
        if (concat) {
            row[dim - 1] = 0.0;
        } else {
            ROW8(1, h - f0);
            _mm512_mask_storeu_pd(row + dim - 1, (__mmask8)1, sv);
            (void)cv;
        }
    }
}

#endif

/* sin/cos of k*w_i for each i < nf into s[k*nf + i], c[k*nf + i]. */
static void sinusoidal_offsets(ptrdiff_t nf, const double *inv_freq, double k,
                               double *s, double *c)
{
    for (ptrdiff_t i = 0; i < nf; i++) {
        const double b = k * inv_freq[i];
        s[i] = sin(b);
        c[i] = cos(b);
    }
}

typedef void (*row_fn_f16)(ptrdiff_t, ptrdiff_t, ptrdiff_t, int, const double *,
                           const double *, const double *, const double *, uint16_t *);
typedef void (*row_fn_f32)(ptrdiff_t, ptrdiff_t, ptrdiff_t, int, const double *,
                           const double *, const double *, const double *, float *);
typedef void (*row_fn_f64)(ptrdiff_t, ptrdiff_t, ptrdiff_t, int, const double *,
                           const double *, const double *, const double *, double *);
typedef void (*add_row_fn)(ptrdiff_t n, const char *x, const char *t, char *y);

static void sinusoidal_row_f16(ptrdiff_t, ptrdiff_t, ptrdiff_t, int, const double *,
                               const double *, const double *, const double *, uint16_t *);
static void sinusoidal_row_f32(ptrdiff_t, ptrdiff_t, ptrdiff_t, int, const double *,
                               const double *, const double *, const double *, float *);
static void sinusoidal_row_f64(ptrdiff_t, ptrdiff_t, ptrdiff_t, int, const double *,
                               const double *, const double *, const double *, double *);

/* The kernels of the dispatched CPU level (pe_sinusoidal_dispatch); the
 * portable ones until it runs (C-only callers). */
static struct {
    row_fn_f16 row_f16;
    row_fn_f32 row_f32;
    row_fn_f64 row_f64;
    add_row_fn add_nt[2];      /* float32, float64; NULL: no streaming stores */
    void (*add_f16)(const pe_sinusoidal_add_loop *);
} sinusoidal_table = {sinusoidal_row_f16, sinusoidal_row_f32, sinusoidal_row_f64,
                      {NULL, NULL}, pe_sinusoidal_add_f16};

#if defined(PE_X86_SIMD)
#define DEFINE_SINUSOIDAL_ROWS(T, SUF)                                        \
    DEFINE_SINUSOIDAL_ROW(T, SUF, sinusoidal_row_##SUF, )                     \
    DEFINE_SINUSOIDAL_ROW(T, SUF, sinusoidal_row_##SUF##_avx2,                \
                          __attribute__((target("avx2"))))
#else
#define DEFINE_SINUSOIDAL_ROWS(T, SUF) DEFINE_SINUSOIDAL_ROW(T, SUF, sinusoidal_row_##SUF, )
#endif

/*
 * Given n rows from position start, dim features, ceil(dim/2) inverse
 * frequencies, the layout flag, a frequency range [f0, f1) and scratch work
 * (PE_SINUSOIDAL_WORK(f1 - f0) doubles at least).  Returned: the columns of
 * those frequencies in out (n, dim).
 * The one line: out[p, 2i] = sin(p*w_i), out[p, 2i+1] = cos(p*w_i)
 * (interleaved), or [sin(p*w) | cos(p*w) | 0 if dim is odd] (concat).
 * Only the offsets k and q that occur are tabulated, so a one-row table (a
 * decoding step) costs six libm calls per frequency.
 */
#define DEFINE_SINUSOIDAL_TABLE(T, SUF)                                       \
static void sinusoidal_rows_##SUF(ptrdiff_t n, int64_t start, ptrdiff_t dim,  \
                                  const double *inv_freq, int concat, T *out, \
                                  double *work, ptrdiff_t f0, ptrdiff_t f1)   \
{                                                                             \
    const int64_t K = PE_SINUSOIDAL_BLOCK, KQ = K * PE_SINUSOIDAL_SUPER;      \
    const ptrdiff_t nf = f1 - f0;                                             \
    const double *w = inv_freq + f0;                                          \
    double *sin_k = work, *cos_k = sin_k + K * nf;       /* k*w, k < K */     \
    double *sin_q = cos_k + K * nf;                      /* q*K*w, q < Q */   \
    double *cos_q = sin_q + PE_SINUSOIDAL_SUPER * nf;                         \
    double *sin_P = cos_q + PE_SINUSOIDAL_SUPER * nf, *cos_P = sin_P + nf;    \
    double *sin_a = cos_P + nf, *cos_a = sin_a + nf;     /* block values */   \
    int64_t P_done = -1;                                                      \
    const row_fn_##SUF row = sinusoidal_table.row_##SUF;                      \
    if (n <= 0 || nf <= 0)                                                    \
        return;                                                               \
    for (int64_t r = 0; r < n && r < K; r++) {      /* the k in use */        \
        const int64_t k = (start + r) % K;                                    \
        sinusoidal_offsets(nf, w, (double)k, sin_k + k * nf, cos_k + k * nf); \
    }                                                                         \
    for (int64_t b = start / K, nb = 0;             /* the q in use */        \
         b <= (start + n - 1) / K && nb < PE_SINUSOIDAL_SUPER; b++, nb++) {   \
        const int64_t q = b % PE_SINUSOIDAL_SUPER;                            \
        sinusoidal_offsets(nf, w, (double)(q * K), sin_q + q * nf,            \
                           cos_q + q * nf);                                   \
    }                                                                         \
    for (int64_t r = 0; r < n;) {                                             \
        const int64_t p = start + r, k0 = p % K, P = p - p % KQ;              \
        const int64_t q = (p % KQ) / K, rows = n - r < K - k0 ? n - r : K - k0;\
        const double *sq = sin_q + q * nf, *cq = cos_q + q * nf;              \
        if (P != P_done) {                                                    \
            sinusoidal_offsets(nf, w, (double)P, sin_P, cos_P);               \
            P_done = P;                                                       \
        }                                                                     \
        for (ptrdiff_t i = 0; i < nf; i++) {        /* (P + q*K)*w */         \
            sin_a[i] = sin_P[i] * cq[i] + cos_P[i] * sq[i];                   \
            cos_a[i] = cos_P[i] * cq[i] - sin_P[i] * sq[i];                   \
        }                                                                     \
        for (int64_t k = k0; k < k0 + rows; k++)                              \
            row(f0, f1, dim, concat, sin_a, cos_a, sin_k + k * nf,            \
                cos_k + k * nf, out + (r + k - k0) * dim);                    \
        r += rows;                                                            \
    }                                                                         \
}

/*
 * The public table functions split the table into up to get_num_threads()
 * chunks run on the pool, each with its own scratch (chunk 0 uses the
 * caller's; the others are allocated here, and if that fails the table is
 * made serially).  A chunk is a range of frequencies (all rows) or, for
 * tables of many rows, a range of rows (all frequencies): a row chunk
 * repeats the libm calls of the offsets k*w (up to 2*BLOCK per frequency),
 * a frequency chunk repeats none but shares each output row.  A value
 * depends on its position and frequency alone, so the split does not
 * change a single bit.
 */
typedef struct {
    void (*rows)(ptrdiff_t, int64_t, ptrdiff_t, const double *, int, void *,
                 double *, ptrdiff_t, ptrdiff_t);
    ptrdiff_t n, dim, itemsize;
    ptrdiff_t row_chunks, freq_chunks;
    int64_t start;
    const double *inv_freq;
    int concat;
    char *out;
    double *work;           /* chunk c uses work + c * PE_SINUSOIDAL_WORK */
} sinusoidal_job;

/* frequency chunk boundaries on multiples of 16 (whole output lines) */
static ptrdiff_t freq_bound(ptrdiff_t nf, ptrdiff_t c, ptrdiff_t chunks)
{
    return c >= chunks ? nf : (nf * c / chunks) & ~(ptrdiff_t)15;
}

static void sinusoidal_chunks(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const sinusoidal_job *j = (const sinusoidal_job *)ctx;
    const ptrdiff_t nf = PE_SINUSOIDAL_NFREQ(j->dim);
    for (ptrdiff_t c = begin; c < end; c++) {
        const ptrdiff_t rc = c / j->freq_chunks, fc = c % j->freq_chunks;
        const ptrdiff_t lo = j->n * rc / j->row_chunks;
        const ptrdiff_t hi = j->n * (rc + 1) / j->row_chunks;
        const ptrdiff_t f1 = freq_bound(nf, fc + 1, j->freq_chunks);
        /* frequency blocks of at most FREQS: bounded scratch */
        for (ptrdiff_t f = freq_bound(nf, fc, j->freq_chunks); f < f1;
             f += PE_SINUSOIDAL_FREQS)
            j->rows(hi - lo, j->start + lo, j->dim, j->inv_freq, j->concat,
                    j->out + lo * j->dim * j->itemsize,
                    j->work + c * PE_SINUSOIDAL_WORK(j->dim), f,
                    f1 - f < PE_SINUSOIDAL_FREQS ? f1 : f + PE_SINUSOIDAL_FREQS);
    }
}

static void sinusoidal_parallel(sinusoidal_job *j, double *work)
{
    const ptrdiff_t nf = PE_SINUSOIDAL_NFREQ(j->dim);
    const ptrdiff_t bytes = j->n * j->dim * j->itemsize;
    ptrdiff_t chunks = pe_get_num_threads();
    double *extra = NULL;
    if (chunks > bytes / PE_PARALLEL_MIN_BYTES + 1)
        chunks = bytes / PE_PARALLEL_MIN_BYTES + 1;
    j->row_chunks = j->freq_chunks = 1;
    if (nf >= 16 * chunks) {
        j->freq_chunks = chunks;
    } else {                            /* few frequencies: split the rows */
        if (chunks > j->n / PE_SINUSOIDAL_BLOCK)
            chunks = j->n / PE_SINUSOIDAL_BLOCK;
        if (chunks < 1)
            chunks = 1;
        j->row_chunks = chunks;
    }
    if (chunks > 1)
        extra = (double *)malloc((size_t)chunks * (size_t)PE_SINUSOIDAL_WORK(j->dim)
                                 * sizeof(double));
    if (extra == NULL) {
        j->row_chunks = j->freq_chunks = 1;
        j->work = work;
        sinusoidal_chunks(j, 0, 1);
        return;
    }
    j->work = extra;
    pe_parallel_for(chunks, 1, sinusoidal_chunks, j);
    free(extra);
}

#define DEFINE_SINUSOIDAL_PUBLIC(T, SUF)                                      \
static void sinusoidal_rows_any_##SUF(ptrdiff_t n, int64_t start,             \
                                      ptrdiff_t dim, const double *inv_freq,  \
                                      int concat, void *out, double *work,    \
                                      ptrdiff_t f0, ptrdiff_t f1)             \
{                                                                             \
    sinusoidal_rows_##SUF(n, start, dim, inv_freq, concat, (T *)out, work,    \
                          f0, f1);                                            \
}                                                                             \
void pe_sinusoidal_table_##SUF(ptrdiff_t n, int64_t start, ptrdiff_t dim,     \
                               const double *inv_freq, int concat, T *out,   \
                               double *work)                                  \
{                                                                             \
    sinusoidal_job j;                                                         \
    if (n <= 0 || dim <= 0)                                                   \
        return;                                                               \
    j.rows = sinusoidal_rows_any_##SUF;                                       \
    j.n = n;                                                                  \
    j.dim = dim;                                                              \
    j.itemsize = (ptrdiff_t)sizeof(T);                                        \
    j.start = start;                                                          \
    j.inv_freq = inv_freq;                                                    \
    j.concat = concat;                                                        \
    j.out = (char *)out;                                                      \
    sinusoidal_parallel(&j, work);                                            \
}

DEFINE_SINUSOIDAL_ROW(uint16_t, f16, sinusoidal_row_f16, )
DEFINE_SINUSOIDAL_ROWS(float, f32)
DEFINE_SINUSOIDAL_ROWS(double, f64)
DEFINE_SINUSOIDAL_TABLE(uint16_t, f16)
DEFINE_SINUSOIDAL_TABLE(float, f32)
DEFINE_SINUSOIDAL_TABLE(double, f64)
DEFINE_SINUSOIDAL_PUBLIC(uint16_t, f16)
DEFINE_SINUSOIDAL_PUBLIC(float, f32)
DEFINE_SINUSOIDAL_PUBLIC(double, f64)

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
            pe_double_to_half((double)pe_half_to_float(xv) + tv);
    }
}

/* ------------------------------------------------------------------ */
/* x + table on the pool                                                */
/* ------------------------------------------------------------------ */


/* ------------------------------------------------------------------ */
/* x + table over a (batch, seq, features) grid                         */
/* ------------------------------------------------------------------ */

/*
 * Streaming-store rows for large out-of-place outputs: a plain store first
 * reads the destination line (read-for-ownership), so an out-of-place add
 * moves three streams where a copy moves two.  A row is one contiguous run
 * of stores, so each 64-byte output line is filled by consecutive stores;
 * the head up to the vector alignment and the tail use plain stores.  The
 * sums are the same single additions as the C loop: the same bits.  SSE2
 * is the x86-64 baseline; AVX2 and AVX-512F forms are picked at run time
 * (additions only, so no contraction can change a bit).
 */
#if defined(PE_X86_SIMD)

#define DEFINE_ADD_NT(NAME, ATTR, T, V, ALIGN, W, LOAD, ADD, STREAM)          \
ATTR static void NAME(ptrdiff_t n, const char *xc, const char *tc, char *yc)  \
{                                                                             \
    const T *x = (const T *)(const void *)xc;                                 \
    const T *t = (const T *)(const void *)tc;                                 \
    T *y = (T *)(void *)yc;                                                   \
    ptrdiff_t k = 0;                                                          \
    for (; k < n && ((uintptr_t)(y + k) & (ALIGN - 1u)) != 0; k++)            \
        y[k] = x[k] + t[k];                                                   \
    for (; k + W <= n; k += W) {                                              \
        const V v = ADD(LOAD(x + k), LOAD(t + k));                            \
        STREAM(y + k, v);                                                     \
    }                                                                         \
    for (; k < n; k++)                                                        \
        y[k] = x[k] + t[k];                                                   \
}

DEFINE_ADD_NT(add_nt_f32_sse2, , float, __m128, 16, 4, _mm_loadu_ps,
              _mm_add_ps, _mm_stream_ps)
DEFINE_ADD_NT(add_nt_f64_sse2, , double, __m128d, 16, 2, _mm_loadu_pd,
              _mm_add_pd, _mm_stream_pd)
DEFINE_ADD_NT(add_nt_f32_avx2, __attribute__((target("avx2"))), float,
              __m256, 32, 8, _mm256_loadu_ps, _mm256_add_ps, _mm256_stream_ps)
DEFINE_ADD_NT(add_nt_f64_avx2, __attribute__((target("avx2"))), double,
              __m256d, 32, 4, _mm256_loadu_pd, _mm256_add_pd, _mm256_stream_pd)
DEFINE_ADD_NT(add_nt_f32_avx512, __attribute__((target("avx512f"))), float,
              __m512, 64, 16, _mm512_loadu_ps, _mm512_add_ps, _mm512_stream_ps)
DEFINE_ADD_NT(add_nt_f64_avx512, __attribute__((target("avx512f"))), double,
              __m512d, 64, 8, _mm512_loadu_pd, _mm512_add_pd, _mm512_stream_pd)

__attribute__((target("avx2,f16c")))
static void sinusoidal_add_f16_f16c(const pe_sinusoidal_add_loop *L)
{
    const uint16_t *x = (const uint16_t *)(const void *)L->x;
    const double *t = (const double *)(const void *)L->t;
    uint16_t *y = (uint16_t *)(void *)L->y;
    ptrdiff_t k = 0;
    if (L->x_step != 2 || L->t_step != 8 || L->y_step != 2) {
        pe_sinusoidal_add_f16(L);
        return;
    }
    for (; k + 8 <= L->n; k += 8) {
        const __m256 xf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + k)));
        const __m256d s0 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xf)),
                                         _mm256_loadu_pd(t + k));
        const __m256d s1 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xf, 1)),
                                         _mm256_loadu_pd(t + k + 4));
        const __m256 f = _mm256_set_m128(pd_to_ps_odd(s1), pd_to_ps_odd(s0));
        _mm_storeu_si128((__m128i *)(void *)(y + k), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; k < L->n; k++)
        y[k] = pe_double_to_half((double)pe_half_to_float(x[k]) + t[k]);
}
#endif

const char *pe_sinusoidal_dispatch(int level)
{
    sinusoidal_table.row_f16 = sinusoidal_row_f16;
    sinusoidal_table.row_f32 = sinusoidal_row_f32;
    sinusoidal_table.row_f64 = sinusoidal_row_f64;
    sinusoidal_table.add_nt[0] = sinusoidal_table.add_nt[1] = NULL;
    sinusoidal_table.add_f16 = pe_sinusoidal_add_f16;
#if defined(PE_X86_SIMD)
    if (level >= PE_CPU_AVX2) {   /* float16 stays at AVX2 (F16C) on AVX-512 */
        const int z = level >= PE_CPU_AVX512;
        if (pe_cpu_f16c()) {
            sinusoidal_table.row_f16 = sinusoidal_row_f16_f16c;
            sinusoidal_table.add_f16 = sinusoidal_add_f16_f16c;
        }
        sinusoidal_table.row_f32 = z ? sinusoidal_row_f32_avx512 : sinusoidal_row_f32_avx2;
        sinusoidal_table.row_f64 = z ? sinusoidal_row_f64_avx512 : sinusoidal_row_f64_avx2;
        sinusoidal_table.add_nt[0] = z ? add_nt_f32_avx512 : add_nt_f32_avx2;
        sinusoidal_table.add_nt[1] = z ? add_nt_f64_avx512 : add_nt_f64_avx2;
        return z ? "avx512" : "avx2";
    }
    if (level >= PE_CPU_SSE2) {
        sinusoidal_table.add_nt[0] = add_nt_f32_sse2;
        sinusoidal_table.add_nt[1] = add_nt_f64_sse2;
        return "sse2";
    }
#else
    (void)level;
#endif
    return "baseline";
}

typedef struct {
    pe_sinusoidal_grid g;            /* possibly transposed: rows are along S */
    void (*fn)(const pe_sinusoidal_add_loop *);
    add_row_fn nt;                   /* NULL: plain stores */
    ptrdiff_t rows, cols;            /* a tile: rows x cols of the table */
    ptrdiff_t col_tiles, groups;     /* tiles per row band; batch groups */
    ptrdiff_t tz;                    /* table element size */
    int gather;                      /* copy each table tile (strided rows) */
} sinusoidal_grid_job;

/*
 * A tile of the table is added into every batch row before the next tile:
 * as many bytes as one core's L2 (read at run time), whole rows where they
 * fit, so x and y are walked in runs of that size.  Measured on a Zen 4
 * EPYC VM (1 MiB L2, 32 MiB L3), AbsolutePE (8, 512, 1024) float32 out=,
 * minima of 25 in one process per setting: tiles of 16 KiB 1.81-1.84 ms
 * at 1 thread and 1.22 ms at 2 (NumPy's x + table into out= 1.20-1.33 and
 * 1.16-1.21 ms in the same runs), 256 KiB 1.45-1.58 ms, 1 MiB 1.32-1.46
 * and 1.03-1.06 ms, 4 MiB 1.36-1.45 ms.  A table gathered from strided
 * rows is copied a tile at a time into a buffer on the stack, so its tiles
 * stay at PE_SINUSOIDAL_GATHER_BYTES.
 */
#define PE_SINUSOIDAL_GATHER_BYTES ((ptrdiff_t)16 << 10)

/*
 * Copy the tile t[s0:s0+rows, d0:d0+n] (byte strides t_s, t_d) into buf,
 * rows contiguous: a table read across its rows (the transposed walk) is
 * gathered once per tile, not once per batch.
 */
#define DEFINE_GATHER(T, SUF)                                                 \
static void gather_tile_##SUF(const char *t, ptrdiff_t t_s, ptrdiff_t t_d,    \
                              ptrdiff_t rows, ptrdiff_t n, T *buf)            \
{                                                                             \
    const ptrdiff_t as = t_s < 0 ? -t_s : t_s, ad = t_d < 0 ? -t_d : t_d;     \
    if (as <= ad) {         /* along the table's rows: contiguous reads */    \
        for (ptrdiff_t c = 0; c < n; c++)                                     \
            for (ptrdiff_t r = 0; r < rows; r++)                              \
                buf[r * n + c] = *(const T *)(const void *)(t + r * t_s + c * t_d); \
    } else {                                                                  \
        for (ptrdiff_t r = 0; r < rows; r++)                                  \
            for (ptrdiff_t c = 0; c < n; c++)                                 \
                buf[r * n + c] = *(const T *)(const void *)(t + r * t_s + c * t_d); \
    }                                                                         \
}
DEFINE_GATHER(float, f32)
DEFINE_GATHER(double, f64)

static void sinusoidal_grid_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const sinusoidal_grid_job *j = (const sinusoidal_grid_job *)ctx;
    const pe_sinusoidal_grid *g = &j->g;
    union {
        float f[PE_SINUSOIDAL_GATHER_BYTES / sizeof(float)];
        double d[PE_SINUSOIDAL_GATHER_BYTES / sizeof(double)];
    } buf;
    for (ptrdiff_t item = begin; item < end; item++) {
        const ptrdiff_t tile = item / j->groups, grp = item % j->groups;
        const ptrdiff_t s0 = tile / j->col_tiles * j->rows;
        const ptrdiff_t d0 = tile % j->col_tiles * j->cols;
        const ptrdiff_t s1 = s0 + j->rows < g->S ? s0 + j->rows : g->S;
        const ptrdiff_t n = d0 + j->cols < g->D ? j->cols : g->D - d0;
        const ptrdiff_t b0 = g->B * grp / j->groups;
        const ptrdiff_t b1 = g->B * (grp + 1) / j->groups;
        const char *t = g->t + s0 * g->t_s + d0 * g->t_d;
        ptrdiff_t t_s = g->t_s, t_d = g->t_d;
        if (j->gather && b1 - b0 > 1) {
            if (j->tz == 4) {
                gather_tile_f32(t, t_s, t_d, s1 - s0, n, buf.f);
                t = (const char *)buf.f;
            } else {
                gather_tile_f64(t, t_s, t_d, s1 - s0, n, buf.d);
                t = (const char *)buf.d;
            }
            t_s = n * j->tz;
            t_d = j->tz;
        }
        for (ptrdiff_t b = b0; b < b1; b++) {
            for (ptrdiff_t s = s0; s < s1; s++) {
                pe_sinusoidal_add_loop L;
                L.n = n;
                L.x = g->x + b * g->x_b + s * g->x_s + d0 * g->x_d;
                L.t = t + b * g->t_b + (s - s0) * t_s;
                L.y = g->y + b * g->y_b + s * g->y_s + d0 * g->y_d;
                L.x_step = g->x_d;
                L.t_step = t_d;
                L.y_step = g->y_d;
                if (j->nt != NULL && t_d == j->tz)
                    j->nt(L.n, L.x, L.t, L.y);
                else
                    j->fn(&L);
            }
        }
    }
#if defined(PE_X86_SIMD)
    if (j->nt != NULL)
        _mm_sfence();   /* order the streaming stores before the task ends */
#endif
}

void pe_sinusoidal_add_grid(const pe_sinusoidal_grid *g, int kind)
{
    const ptrdiff_t z = kind, tz = kind == 2 ? 8 : kind;    /* x/y, t sizes */
    const ptrdiff_t l2 = pe_cache_l2_bytes();
    ptrdiff_t tile_elems;
    sinusoidal_grid_job j;
    ptrdiff_t tiles, threads, item_bytes;
    if (g->B <= 0 || g->S <= 0 || g->D <= 0)
        return;
    j.g = *g;
    j.fn = kind == 2 ? sinusoidal_table.add_f16
         : kind == 4 ? pe_sinusoidal_add_f32 : pe_sinusoidal_add_f64;
    j.nt = NULL;
    /* the inner loop should run along the contiguous axis of x and y */
    if ((g->x_d != z || g->y_d != z) && g->x_s == z && g->y_s == z) {
        ptrdiff_t tmp;
        j.g.S = g->D; j.g.D = g->S;
        tmp = j.g.x_s; j.g.x_s = j.g.x_d; j.g.x_d = tmp;
        tmp = j.g.t_s; j.g.t_s = j.g.t_d; j.g.t_d = tmp;
        tmp = j.g.y_s; j.g.y_s = j.g.y_d; j.g.y_d = tmp;
    }
    /* a table broadcast over the batch but strided along the rows is
     * gathered tile by tile into contiguous scratch */
    j.tz = tz;
    j.gather = j.g.t_d != tz && j.g.t_b == 0 && j.g.B > 1;
    /* streaming stores: out of place, large, rows contiguous */
    if (kind != 2 && sinusoidal_table.add_nt[kind == 8] != NULL && g->y != g->x &&
        j.g.x_d == z && (j.g.t_d == z || j.gather) && j.g.y_d == z &&
        pe_memory_stream_ok(g->y + g->B / 2 * g->y_b + g->S / 2 * g->y_s,
                            ((uintptr_t)g->y | (uintptr_t)j.g.y_b | (uintptr_t)j.g.y_s) % 64 == 0,
                            (size_t)(g->B * g->S * g->D * z)))
        j.nt = sinusoidal_table.add_nt[kind == 8];
    /* a tile: whole rows if a row fits in the budget, else part of one */
    tile_elems = (j.gather || l2 < PE_SINUSOIDAL_GATHER_BYTES ? PE_SINUSOIDAL_GATHER_BYTES
                                                              : l2) / tz;
    if (j.g.D <= tile_elems) {
        j.cols = j.g.D;
        j.rows = tile_elems / j.g.D;
        if (j.rows > j.g.S)
            j.rows = j.g.S;
    } else {
        j.cols = tile_elems;
        j.rows = 1;
    }
    j.col_tiles = (j.g.D + j.cols - 1) / j.cols;
    tiles = (j.g.S + j.rows - 1) / j.rows * j.col_tiles;
    /* too few tiles to share: split the batch as well */
    threads = pe_get_num_threads();
    j.groups = 1;
    if (tiles < 4 * threads) {
        j.groups = (4 * threads + tiles - 1) / tiles;
        if (j.groups > g->B)
            j.groups = g->B;
    }
    item_bytes = j.rows * j.cols * (2 * z + tz) * ((g->B + j.groups - 1) / j.groups);
    pe_parallel_for_stoppable(tiles * j.groups, PE_PARALLEL_MIN_BYTES / item_bytes + 1,
                              item_bytes, sinusoidal_grid_task, &j, g->stop);
}
