/*
 * learned.c - learned (trained-table) position encodings: the fused forward
 * x + W[positions] and the backward scatter-add into the table's gradient.
 *
 * The one line of maths (nn.Embedding(max_len, D) plus addition; TorchLean):
 *
 *   fwd:   y[t] = x[t] + W[pos[t]]
 *   back:  dx = dy;   dW[p] = sum of dy[t] over every token t with pos[t] = p
 *
 * The backward is the hot one: NumPy's way is np.add.at, which handles one
 * index at a time through its generic machinery.  Here the tokens are
 * grouped by position by a stable counting sort (no comparison sort,
 * O(n + m)) and each table row is summed from its gradient rows in
 * registers, then stored once.  Each element still receives
 * its addends in token order, so the result has the bits of a serial loop
 * over tokens (and of PyTorch's Embedding backward on the CPU) and is
 * deterministic.
 */
#include <math.h>
#include <string.h>

#include "posemb.h"
#include "bf16_avx2.h"

#define LOAD_f16(p) pe_half_to_float(*(const uint16_t *)(const void *)(p))
#define STORE_f16(p, v) (*(uint16_t *)(void *)(p) = pe_float_to_half(v))
#define LOAD_f32(p) (*(const float *)(const void *)(p))
#define STORE_f32(p, v) (*(float *)(void *)(p) = (v))
#define LOAD_f64(p) (*(const double *)(const void *)(p))
#define STORE_f64(p, v) (*(double *)(void *)(p) = (v))
#define LOAD_bf16(p) bf16_value(*(const uint16_t *)(const void *)(p))
#define STORE_bf16(p, v) (*(uint16_t *)(void *)(p) = pe_float_to_bf16(v))

/* a bfloat16 bit pattern's value: the top half of a float32 (inline, so
 * the loops over rows vectorize) */
static inline float bf16_value(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * Rows read in an order the hardware prefetcher cannot guess (the
 * forward's table rows, picked by position) start cold, so the forward
 * fetches the next such row a little ahead of use (pe_prefetch).
 */

/* ------------------------------------------------------------------ */
/* Forward: y = x + W[pos], gufunc (d),(),(m,d)->(d)                    */
/* ------------------------------------------------------------------ */

/*
 * Contiguous rows for float32/float64.  The out-of-place form promises no
 * overlap (NumPy copies overlapping operands, except the exact in-place
 * case out=x, which takes the second form); both vectorize.
 */
#define DEFINE_LEARNED_CONTIG(T)                                              \
static void learned_fwd_##T##_copy(ptrdiff_t d, const T *restrict x,         \
                                   const T *restrict w, T *restrict y)        \
{                                                                             \
    for (ptrdiff_t j = 0; j < d; j++)                                         \
        y[j] = x[j] + w[j];                                                   \
}                                                                             \
static void learned_fwd_##T##_inplace(ptrdiff_t d, T *xy,                    \
                                      const T *restrict w)                    \
{                                                                             \
    for (ptrdiff_t j = 0; j < d; j++)                                         \
        xy[j] += w[j];                                                        \
}

DEFINE_LEARNED_CONTIG(float)
DEFINE_LEARNED_CONTIG(double)

/* One row, any strides: y[j] = x[j] + w[j] in the compute type CT. */
#define LEARNED_FWD_STRIDED(CT, SUF)                                          \
    for (ptrdiff_t j = 0; j < L->d; j++) {                                    \
        const CT v = LOAD_##SUF(x + j * L->x_inner) +                         \
                     LOAD_##SUF(w + j * L->w_inner);                          \
        STORE_##SUF(y + j * L->y_inner, v);                                   \
    }

/* The row of vector k; a position outside [0, m) gives a NaN row. */
#define LEARNED_FWD_ROW(CT, SUF)                                              \
    const char *x = L->x + k * L->x_step;                                     \
    const int64_t p = *(const int64_t *)(const void *)(L->pos +               \
                                                        k * L->pos_step);     \
    char *y = L->y + k * L->y_step;                                           \
    const char *w;                                                            \
    if (p < 0 || p >= L->m) {                                                 \
        for (ptrdiff_t j = 0; j < L->d; j++)                                  \
            STORE_##SUF(y + j * L->y_inner, (CT)NAN);                         \
        continue;                                                             \
    }                                                                         \
    w = L->w + k * L->w_step + (ptrdiff_t)p * L->w_row;

/*
 * Given n vectors x[k], positions pos[k] and the (m, d) table w.
 * Returned: y[k, j] = x[k, j] + w[pos[k], j].
 */
#define DEFINE_LEARNED_FWD(T, SUF)                                            \
void pe_learned_fwd_##SUF(const pe_learned_loop *L)                           \
{                                                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(T);                                 \
    const int contig = L->x_inner == z && L->w_inner == z && L->y_inner == z; \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        LEARNED_FWD_ROW(T, SUF)                                               \
        if (contig && y == x)                                                 \
            learned_fwd_##T##_inplace(L->d, (T *)(void *)y,                   \
                                      (const T *)(const void *)w);            \
        else if (contig)                                                      \
            learned_fwd_##T##_copy(L->d, (const T *)(const void *)x,          \
                                   (const T *)(const void *)w,                \
                                   (T *)(void *)y);                           \
        else                                                                  \
            LEARNED_FWD_STRIDED(T, SUF)                                       \
    }                                                                         \
}

DEFINE_LEARNED_FWD(float, f32)
DEFINE_LEARNED_FWD(double, f64)

/*
 * float16: the sum of two binary16 values is formed in float32 and rounded
 * once.  (A float32 sum of two halves is exact unless their exponents
 * differ by more than 12, and then it cannot land on a binary16 tie, so
 * this is the correctly rounded half sum, as NumPy's and PyTorch's.)
 */
void pe_learned_fwd_f16(const pe_learned_loop *L)
{
    for (ptrdiff_t k = 0; k < L->n; k++) {
        LEARNED_FWD_ROW(float, f16)
        LEARNED_FWD_STRIDED(float, f16)
    }
}

/* bfloat16 bit patterns: the sum formed in float32 and rounded once, as
 * torch's bfloat16 addition (and float16's rule above). */
void pe_learned_fwd_bf16(const pe_learned_loop *L)
{
    for (ptrdiff_t k = 0; k < L->n; k++) {
        LEARNED_FWD_ROW(float, bf16)
        LEARNED_FWD_STRIDED(float, bf16)
    }
}

/*
 * Streaming-store forms for large out-of-place outputs: a plain store first
 * reads the destination line (read-for-ownership), so y = x + w[p] would
 * move four streams where a copy moves two; non-temporal stores skip that
 * read.  SSE2 (baseline on x86-64), the same x + w per value as the C loop,
 * so the same bits.  Each 64-byte line of y is filled by consecutive
 * stores (rows in order, each row front to back; rows of a dense y share
 * their boundary lines with the next row, written next).  While a row
 * streams, the next vector's table row (random with random positions) is
 * prefetched line by line.  Anything else - in place, strided, a y that is
 * not 16-byte aligned, rows not a multiple of 16 bytes - takes the plain
 * kernel.
 */
#if defined(PE_X86_SIMD)
#include <emmintrin.h>

#define DEFINE_LEARNED_FWDNT(T, SUF, V, W, PS)                                \
static void learned_fwd_row_nt_##SUF(ptrdiff_t d, const T *x, const T *w,     \
                                     T *y, const char *next)                  \
{                                                                             \
    const ptrdiff_t line = 64 / (ptrdiff_t)sizeof(T);                         \
    ptrdiff_t j = 0;                                                          \
    if (next != NULL)           /* the next table row, a line at a time */    \
        for (; j + line <= d; j += line) {                                    \
            pe_prefetch(next + j * (ptrdiff_t)sizeof(T), 1);                \
            for (ptrdiff_t i = j; i < j + line; i += W)                       \
                _mm_stream_##PS(y + i, _mm_add_##PS(_mm_loadu_##PS(x + i),    \
                                                    _mm_loadu_##PS(w + i)));  \
        }                                                                     \
    for (; j < d; j += W)                                                     \
        _mm_stream_##PS(y + j, _mm_add_##PS(_mm_loadu_##PS(x + j),            \
                                            _mm_loadu_##PS(w + j)));          \
}                                                                             \
static void learned_fwdnt_##SUF(const pe_learned_loop *L)                     \
{                                                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(T);                                 \
    if (L->x_inner != z || L->w_inner != z || L->y_inner != z ||              \
        L->x == L->y || (L->d * z) % 16 != 0 || L->y_step % 16 != 0 ||        \
        ((uintptr_t)L->y & 15u) != 0) {                                       \
        pe_learned_fwd_##SUF(L);                                              \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const char *next = NULL;                                              \
        LEARNED_FWD_ROW(T, SUF)                                               \
        if (k + 1 < L->n) {     /* the next vector's table row, if valid */   \
            const int64_t q = *(const int64_t *)(const void *)(               \
                L->pos + (k + 1) * L->pos_step);                              \
            if (q >= 0 && q < L->m)                                           \
                next = L->w + (k + 1) * L->w_step + (ptrdiff_t)q * L->w_row;  \
        }                                                                     \
        learned_fwd_row_nt_##SUF(L->d, (const T *)(const void *)x,            \
                                 (const T *)(const void *)w, (T *)(void *)y,  \
                                 next);                                       \
    }                                                                         \
    _mm_sfence();   /* order the streaming stores before the job completes */ \
}

DEFINE_LEARNED_FWDNT(float, f32, __m128, 4, ps)
DEFINE_LEARNED_FWDNT(double, f64, __m128d, 2, pd)
#endif

/* ------------------------------------------------------------------ */
/* Backward: gw[pos[t]] += g[t]                                         */
/* ------------------------------------------------------------------ */

/*
 * With scratch (a table not much taller than the batch), the tokens are
 * grouped by position, stably (a counting sort, O(n + m)), and each table
 * row is then made in one go: its addends, in token order, are summed in
 * registers a chunk of columns at a time (32 float32 values at the AVX2
 * level, 8 in portable C), read side by side from all of the row's
 * gradient rows, and the chunk is stored once.  The table is written
 * front to back, and (with assign) read back only for rows of more than
 * LEARNED_SUM_GROUP addends: a longer list is summed in groups, the row
 * carrying the partial sums from one group to the next.  The gradient is
 * read once, from as many places at a time as a group has addends.  Every element
 * still gets its addends in token order, starting from +0 (assign) or
 * from the table's value, so the result is the serial loop's bits.
 *
 * It replaced blocks of rows filling half of L2 (tokens in token order
 * within a block) and, for scattered positions into a table within a
 * quarter of the last-level cache, token order over the whole table (each
 * gradient row added into its table row there, in L3).  Measured on a Zen
 * 4 EPYC VM (32 MiB L3, 1 MiB L2, AVX-512), 8x2048 tokens of 1024 float32
 * features into 2048 rows, 1 thread, minima of 15: in C, token order 4.0-
 * 4.7 ms (AVX2 and AVX-512 alike) against 2.5-3.1 ms (positions arange(2048)
 * per batch row) and 3.4-3.5 ms (random) for these sums (AVX-512 no faster
 * than AVX2; software prefetch of the next chunks made them 10-20% slower;
 * a row summed whole into L1, one gradient row after another, 6.3-7.5 ms).
 *
 * The pool splits the rows: each part owns disjoint rows of gw, so the
 * result is the same bits for any thread count.  Parts are cut by work,
 * not by rows: row p costs its tokens plus one, so the thread that takes a
 * hot row takes few others (a row is never split: with fewer hot rows than
 * threads, one thread does most of the work).
 */
typedef struct {
    ptrdiff_t d, m, rowbytes;
    const void *g;
    void *gw;
    const int64_t *end, *order;   /* row p's tokens: order[lo(p) .. end[p]) */
    int assign;
} learned_back_job;

/* addends summed side by side (gradient rows read at a time) */
#define LEARNED_SUM_GROUP 16

/* Scratch for the grouping when the table is not much larger than the batch. */
ptrdiff_t pe_learned_back_work(ptrdiff_t n, ptrdiff_t m)
{
    return m <= 2 * n ? 2 * n + m + 1 : 0;
}

/*
 * Group token indices by position, stably (a counting sort, O(n + m)).
 * Given pos (n), m, work (2n + m + 1).  Returned: end (m) and order (n, in
 * work) with row p's tokens order[lo(p) .. end[p]), lo(p) = p ? end[p-1]
 * : 0, ascending.  pos is read once here (into a private snapshot), so the
 * rows stay in bounds even if pos changes meanwhile.
 */
static void learned_group(ptrdiff_t n, const int64_t *pos, ptrdiff_t m, int64_t *work,
                          int64_t **end, int64_t **order)
{
    int64_t *e = work, *k = work + m + 1, *o = k + n;
    memset(e, 0, (size_t)(m + 1) * sizeof *e);
    for (ptrdiff_t t = 0; t < n; t++) {
        const int64_t p = pos[t];
        k[t] = (p >= 0 && p < m) ? p : -1;
        if (k[t] >= 0)
            e[k[t] + 1]++;
    }
    for (ptrdiff_t p = 1; p <= m; p++)      /* e[p] = the start of row p */
        e[p] += e[p - 1];
    for (ptrdiff_t t = 0; t < n; t++)       /* e[p] ends as the end of row p */
        if (k[t] >= 0)
            o[e[k[t]]++] = t;
    *end = e;
    *order = o;
}

/*
 * Rows [0, p) hold lo(p) + p units of work (their tokens and rows).
 * Returned: the first row whose work starts at or after u (m if none), so
 * work ranges [b, e) map to disjoint row ranges.
 */
static ptrdiff_t learned_row_first(const learned_back_job *j, ptrdiff_t u)
{
    ptrdiff_t lo = 0, hi = j->m;
    while (lo < hi) {
        const ptrdiff_t mid = lo + (hi - lo) / 2;
        if ((mid ? j->end[mid - 1] : 0) + mid >= u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* units of work (rows) per part so that a part moves PE_PARALLEL_MIN_BYTES */
static ptrdiff_t learned_back_grain(ptrdiff_t rowbytes)
{
    return rowbytes > 0 ? PE_PARALLEL_MIN_BYTES / rowbytes + 1
                        : PE_PARALLEL_MIN_BYTES;
}

/* rows [begin, end) of the table set to +0 (all bits zero) */
static void learned_back_zero_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const learned_back_job *j = (const learned_back_job *)ctx;
    memset((char *)j->gw + begin * j->rowbytes, 0,
           (size_t)((end - begin) * j->rowbytes));
}

/*
 * The sums, portable C: columns [c, c + w) of dst set to (zero ? +0 :
 * dst) + g[idx[0]] + ... + g[idx[k - 1]], in that order; w at most 8, a
 * constant where it is inlined for whole chunks (the accumulators then
 * stay in registers).
 */
#define DEFINE_LEARNED_SUM_COLS(TG, TW, SUF, CVT)                             \
static inline void learned_sum_cols_##SUF(ptrdiff_t d, const TG *g,           \
                                          const int64_t *idx, ptrdiff_t k,    \
                                          TW *dst, ptrdiff_t c, ptrdiff_t w,  \
                                          int zero)                           \
{                                                                             \
    TW acc[8];                                                                \
    for (ptrdiff_t i = 0; i < w; i++)                                         \
        acc[i] = zero ? (TW)0 : dst[c + i];                                   \
    for (ptrdiff_t q = 0; q < k; q++) {                                       \
        const TG *s = g + idx[q] * d + c;                                     \
        for (ptrdiff_t i = 0; i < w; i++)                                     \
            acc[i] += CVT(s[i]);                                              \
    }                                                                         \
    for (ptrdiff_t i = 0; i < w; i++)                                         \
        dst[c + i] = acc[i];                                                  \
}                                                                             \
static void learned_sum_##SUF(ptrdiff_t d, const TG *g, const int64_t *idx,   \
                              ptrdiff_t k, TW *dst, int zero)                 \
{                                                                             \
    ptrdiff_t c = 0;                                                          \
    for (; c + 8 <= d; c += 8)                                                \
        learned_sum_cols_##SUF(d, g, idx, k, dst, c, 8, zero);                \
    if (c < d)                                                                \
        learned_sum_cols_##SUF(d, g, idx, k, dst, c, d - c, zero);            \
}

/*
 * One table row: dst = (assign ? +0 : dst) + its k addends in order, in
 * groups of LEARNED_SUM_GROUP (a row with none is zeroed when assign).
 */
#define DEFINE_LEARNED_ROW(TG, TW, SUF)                                       \
static void learned_row_##SUF(ptrdiff_t d, const TG *g, const int64_t *idx,   \
                              ptrdiff_t k, TW *dst, int assign)               \
{                                                                             \
    if (k == 0) {                                                             \
        if (assign)                                                           \
            memset(dst, 0, (size_t)d * sizeof *dst);                          \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t q = 0; q < k; q += LEARNED_SUM_GROUP)                      \
        learned_table.sum_##SUF(d, g, idx + q,                                \
                                k - q < LEARNED_SUM_GROUP ? k - q : LEARNED_SUM_GROUP, \
                                dst, assign && q == 0);                       \
}

/* the token-order loop for a table much taller than the batch */
#define DEFINE_LEARNED_ADD(TG, TW, SUF, CVT)                                  \
static void learned_add_##SUF(ptrdiff_t d, const TG *restrict src,            \
                              TW *restrict dst)                               \
{                                                                             \
    for (ptrdiff_t i = 0; i < d; i++)                                         \
        dst[i] += CVT(src[i]);                                                \
}

#define CVT_SAME(v) (v)
#define CVT_HALF(v) pe_half_to_float(v)

DEFINE_LEARNED_SUM_COLS(float, float, f32, CVT_SAME)
DEFINE_LEARNED_SUM_COLS(double, double, f64, CVT_SAME)
DEFINE_LEARNED_SUM_COLS(uint16_t, float, f16, CVT_HALF)
DEFINE_LEARNED_SUM_COLS(uint16_t, float, bf16, bf16_value)
DEFINE_LEARNED_ADD(float, float, f32, CVT_SAME)
DEFINE_LEARNED_ADD(double, double, f64, CVT_SAME)
DEFINE_LEARNED_ADD(uint16_t, float, f16, CVT_HALF)
DEFINE_LEARNED_ADD(uint16_t, float, bf16, bf16_value)

#if defined(PE_X86_SIMD)
#include <immintrin.h>
/*
 * The sums at the AVX2 level: 4 vectors of accumulators per chunk (32
 * float32 values, 16 float64), each addend's chunk loaded, widened
 * (float16 with F16C: exact; bfloat16 by a shift: exact) and added in
 * order; the last d % chunk columns through the portable loop.  The same
 * operations per element in the same order: the portable loops' bits.
 */
#define F16_LOAD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define DEFINE_LEARNED_SUM_AVX2(TG, TW, SUF, TARGET, V, L, ZERO, LOADW, LOADG, ADD, STORE) \
__attribute__((target(TARGET)))                                              \
static void learned_sum_##SUF##_avx2(ptrdiff_t d, const TG *g,                \
                                     const int64_t *idx, ptrdiff_t k,         \
                                     TW *dst, int zero)                       \
{                                                                             \
    ptrdiff_t c = 0;                                                          \
    for (; c + 4 * (L) <= d; c += 4 * (L)) {                                  \
        V a0, a1, a2, a3;                                                     \
        if (zero) {                                                           \
            a0 = a1 = a2 = a3 = ZERO();                                       \
        } else {                                                              \
            a0 = LOADW(dst + c);                                              \
            a1 = LOADW(dst + c + (L));                                        \
            a2 = LOADW(dst + c + 2 * (L));                                    \
            a3 = LOADW(dst + c + 3 * (L));                                    \
        }                                                                     \
        for (ptrdiff_t q = 0; q < k; q++) {                                   \
            const TG *s = g + idx[q] * d + c;                                 \
            a0 = ADD(a0, LOADG(s));                                           \
            a1 = ADD(a1, LOADG(s + (L)));                                     \
            a2 = ADD(a2, LOADG(s + 2 * (L)));                                 \
            a3 = ADD(a3, LOADG(s + 3 * (L)));                                 \
        }                                                                     \
        STORE(dst + c, a0);                                                   \
        STORE(dst + c + (L), a1);                                             \
        STORE(dst + c + 2 * (L), a2);                                         \
        STORE(dst + c + 3 * (L), a3);                                         \
    }                                                                         \
    for (; c < d; c += 8)                                                     \
        learned_sum_cols_##SUF(d, g, idx, k, dst, c, d - c < 8 ? d - c : 8, zero); \
}
DEFINE_LEARNED_SUM_AVX2(float, float, f32, "avx2", __m256, 8, _mm256_setzero_ps,
                        _mm256_loadu_ps, _mm256_loadu_ps, _mm256_add_ps, _mm256_storeu_ps)
DEFINE_LEARNED_SUM_AVX2(double, double, f64, "avx2", __m256d, 4, _mm256_setzero_pd,
                        _mm256_loadu_pd, _mm256_loadu_pd, _mm256_add_pd, _mm256_storeu_pd)
DEFINE_LEARNED_SUM_AVX2(uint16_t, float, f16, "avx2,f16c", __m256, 8, _mm256_setzero_ps,
                        _mm256_loadu_ps, F16_LOAD8, _mm256_add_ps, _mm256_storeu_ps)
DEFINE_LEARNED_SUM_AVX2(uint16_t, float, bf16, "avx2", __m256, 8, _mm256_setzero_ps,
                        _mm256_loadu_ps, PE_BF16_LOAD8, _mm256_add_ps, _mm256_storeu_ps)

/*
 * The forward's float16 (F16C) and bfloat16 rows at the AVX2 level:
 * contiguous rows 8 values at a time (bfloat16 widened by a shift and
 * rounded by bf16_avx2.h's rule, the same bits as pe_float_to_bf16 for
 * these sums), anything else through the portable loop.
 */
#define F16_STORE8(p, v) _mm_storeu_si128((__m128i *)(void *)(p),                  \
                                          _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))
#define BF16_STORE8(p, v) pe_bf16_store8((uint16_t *)(void *)(p), (v))
#define DEFINE_LEARNED_FWD16(NAME, TARGET, SUF, LOAD8, STORE8)                 \
__attribute__((target(TARGET)))                                              \
static void NAME(const pe_learned_loop *L)                                    \
{                                                                             \
    if (L->x_inner != 2 || L->w_inner != 2 || L->y_inner != 2) {              \
        pe_learned_fwd_##SUF(L);                                              \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        ptrdiff_t j;                                                          \
        LEARNED_FWD_ROW(float, SUF)                                           \
        for (j = 0; j + 8 <= L->d; j += 8)                                    \
            STORE8(y + 2 * j, _mm256_add_ps(LOAD8(x + 2 * j), LOAD8(w + 2 * j))); \
        for (; j < L->d; j++)                                                 \
            STORE_##SUF(y + 2 * j, LOAD_##SUF(x + 2 * j) + LOAD_##SUF(w + 2 * j)); \
    }                                                                         \
}
DEFINE_LEARNED_FWD16(learned_fwd_f16_f16c, "avx2,f16c", f16, F16_LOAD8, F16_STORE8)
DEFINE_LEARNED_FWD16(learned_fwd_bf16_avx2, "avx2", bf16, PE_BF16_LOAD8, BF16_STORE8)
#endif

typedef void (*sum_fn_f32)(ptrdiff_t, const float *, const int64_t *, ptrdiff_t, float *, int);
typedef void (*sum_fn_f64)(ptrdiff_t, const double *, const int64_t *, ptrdiff_t, double *,
                           int);
typedef void (*sum_fn_f16)(ptrdiff_t, const uint16_t *, const int64_t *, ptrdiff_t, float *,
                           int);
typedef sum_fn_f16 sum_fn_bf16;

/* The kernels of the dispatched CPU level (pe_learned_dispatch); the
 * portable ones until it runs (C-only callers). */
static struct {
    sum_fn_f16 sum_f16;
    sum_fn_f32 sum_f32;
    sum_fn_f64 sum_f64;
    sum_fn_bf16 sum_bf16;
    void (*fwd_f16)(const pe_learned_loop *);
    void (*fwd_bf16)(const pe_learned_loop *);
    void (*fwdnt[2])(const pe_learned_loop *);   /* NULL: no streaming stores */
} learned_table = {learned_sum_f16, learned_sum_f32, learned_sum_f64, learned_sum_bf16,
                   pe_learned_fwd_f16, pe_learned_fwd_bf16, {NULL, NULL}};

const char *pe_learned_dispatch(int level)
{
    learned_table.sum_f16 = learned_sum_f16;
    learned_table.sum_f32 = learned_sum_f32;
    learned_table.sum_f64 = learned_sum_f64;
    learned_table.sum_bf16 = learned_sum_bf16;
    learned_table.fwd_f16 = pe_learned_fwd_f16;
    learned_table.fwd_bf16 = pe_learned_fwd_bf16;
    learned_table.fwdnt[0] = learned_table.fwdnt[1] = NULL;
#if defined(PE_X86_SIMD)
    if (level >= PE_CPU_SSE2) {
        learned_table.fwdnt[0] = learned_fwdnt_f32;
        learned_table.fwdnt[1] = learned_fwdnt_f64;
    }
    if (level >= PE_CPU_AVX2) {
        if (pe_cpu_f16c()) {
            learned_table.sum_f16 = learned_sum_f16_avx2;
            learned_table.fwd_f16 = learned_fwd_f16_f16c;
        }
        learned_table.sum_bf16 = learned_sum_bf16_avx2;
        learned_table.fwd_bf16 = learned_fwd_bf16_avx2;
        learned_table.sum_f32 = learned_sum_f32_avx2;
        learned_table.sum_f64 = learned_sum_f64_avx2;
        return "avx2";
    }
    return level >= PE_CPU_SSE2 ? "sse2" : "baseline";
#else
    (void)level;
    return "baseline";
#endif
}

/*
 * Given n contiguous rows g[t] of d features, their positions, the table
 * height m, work (pe_learned_back_work(n, m) int64 values, or NULL) and
 * assign.  Returned: gw (m, d) with gw[pos[t], j] += g[t, j], in token
 * order, starting from gw's contents, or from +0 when assign is set (gw's
 * contents are then never read).  With work, row by row (above: a row's
 * first addend is added to +0 when assign is set, the bits of adding it
 * to a zeroed table, -0 becoming +0, and a row with no token is zeroed
 * there); without (a table much taller than the batch), token by token
 * after zeroing the table on the pool when assign is set.  Both give the
 * bits of a serial loop over tokens.
 */
#define DEFINE_LEARNED_BACK(TG, TW, SUF)                                      \
DEFINE_LEARNED_ROW(TG, TW, SUF)                                               \
/* work units [begin, end) of the grouped job: disjoint rows */               \
static void learned_back_task_##SUF(void *ctx, ptrdiff_t begin, ptrdiff_t end)\
{                                                                             \
    const learned_back_job *j = (const learned_back_job *)ctx;                \
    const ptrdiff_t p1 = learned_row_first(j, end);                           \
    for (ptrdiff_t p = learned_row_first(j, begin); p < p1; p++) {            \
        const int64_t lo = p ? j->end[p - 1] : 0;                             \
        learned_row_##SUF(j->d, (const TG *)j->g, j->order + lo, j->end[p] - lo, \
                          (TW *)j->gw + p * j->d, j->assign);                 \
    }                                                                         \
}                                                                             \
void pe_learned_back_##SUF(ptrdiff_t n, ptrdiff_t d, const TG *g,             \
                           const int64_t *pos, ptrdiff_t m, TW *gw,           \
                           int64_t *work, int assign)                         \
{                                                                             \
    learned_back_job j = {d, m, d * (ptrdiff_t)sizeof(TW), g, gw, NULL, NULL, assign}; \
    if (work != NULL && pe_learned_back_work(n, m) > 0) {                     \
        int64_t *e, *o;                                                       \
        learned_group(n, pos, m, work, &e, &o);                               \
        j.end = e;                                                            \
        j.order = o;                                                          \
        /* e[m]: the tokens in rows */                                        \
        pe_parallel_for((ptrdiff_t)e[m] + m,                                  \
                        learned_back_grain(d * (ptrdiff_t)sizeof(TG)),        \
                        learned_back_task_##SUF, &j);                         \
        return;                                                               \
    }                                                                         \
    if (assign)                                                               \
        pe_parallel_for(m, learned_back_grain(j.rowbytes),                    \
                        learned_back_zero_task, &j);                          \
    for (ptrdiff_t t = 0; t < n; t++) {                                       \
        const int64_t p = pos[t];                                             \
        if (p >= 0 && p < m)                                                  \
            learned_add_##SUF(d, g + t * d, gw + p * d);                      \
    }                                                                         \
}

DEFINE_LEARNED_BACK(float, float, f32)
DEFINE_LEARNED_BACK(double, double, f64)
/* float16 and bfloat16 rows accumulate into a float32 table (round once
 * afterwards). */
DEFINE_LEARNED_BACK(uint16_t, float, f16)
DEFINE_LEARNED_BACK(uint16_t, float, bf16)

/* ------------------------------------------------------------------ */
/* The forward gufunc loop on the pool (NumPy copies any overlapping    */
/* operand of a gufunc but out=x itself, so vectors split freely)       */
/* ------------------------------------------------------------------ */

typedef struct {
    void (*fn)(const pe_learned_loop *);
    const pe_learned_loop *L;
} learned_fwd_job;

static void learned_fwd_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const learned_fwd_job *j = (const learned_fwd_job *)ctx;
    pe_learned_loop sub = *j->L;
    sub.n = end - begin;
    sub.x += begin * sub.x_step;
    sub.pos += begin * sub.pos_step;
    sub.w += begin * sub.w_step;
    sub.y += begin * sub.y_step;
    j->fn(&sub);
}

void pe_learned_fwd_run(const pe_learned_loop *L, int type)
{
    void (*const plain[4])(const pe_learned_loop *) = {
        learned_table.fwd_f16, pe_learned_fwd_f32, pe_learned_fwd_f64, learned_table.fwd_bf16};
    static const ptrdiff_t itemsizes[4] = {2, 4, 8, 2};
    const ptrdiff_t itemsize = itemsizes[type];
    const ptrdiff_t vec = 3 * (L->d > 0 ? L->d : 1) * itemsize;
    learned_fwd_job j = {plain[type], L};
    /* a large out-of-place output: skip the read-for-ownership */
    if ((type == 1 || type == 2) && learned_table.fwdnt[type - 1] != NULL && L->y != L->x &&
        pe_memory_stream_ok(L->y + L->n / 2 * L->y_step,
                            ((uintptr_t)L->y | (uintptr_t)L->y_step) % 64 == 0,
                            (size_t)(L->n * L->d * itemsize)))
        j.fn = learned_table.fwdnt[type - 1];
    pe_parallel_for_stoppable(L->n, PE_PARALLEL_MIN_BYTES / vec + 1, vec, learned_fwd_task, &j,
                              L->stop);
}
