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
 * index at a time through its generic machinery.  Here it is whole-row
 * adds, gw[pos[t]] += g[t], with the tokens grouped by position by a
 * stable counting sort (no comparison sort, O(n + m)) so each table row
 * stays in L1 while its addends stream in.  Each element still receives
 * its addends in token order, so the result has the bits of a serial loop
 * over tokens (and of PyTorch's Embedding backward on the CPU) and is
 * deterministic.
 */
#include <math.h>
#include <string.h>

#include "posemb.h"

#define LOAD_f16(p) pe_half_to_float(*(const uint16_t *)(const void *)(p))
#define STORE_f16(p, v) (*(uint16_t *)(void *)(p) = pe_float_to_half(v))
#define LOAD_f32(p) (*(const float *)(const void *)(p))
#define STORE_f32(p, v) (*(float *)(void *)(p) = (v))
#define LOAD_f64(p) (*(const double *)(const void *)(p))
#define STORE_f64(p, v) (*(double *)(void *)(p) = (v))

/*
 * Rows read in an order the hardware prefetcher cannot guess (table rows
 * picked by position, the backward's bucketed tokens) start cold, so the
 * kernels fetch the next such row a little ahead of use (pe_prefetch).
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

/* Row adds are compiled twice (portable C, and C for AVX2 on x86-64,
 * picked by the dispatch): same bits on all. */
/*
 * The bucketed backward splits the table rows (positions) over the pool:
 * each part owns disjoint rows of gw and visits their tokens in order, so
 * the result is the same bits for any thread count.  Parts are cut by work,
 * not by rows: position p costs its bucket's tokens plus one (its row), so
 * skewed positions (a short sequence in a tall table, one hot position)
 * still keep every thread busy.
 */
typedef struct {
    ptrdiff_t d, m, rowbytes;
    const void *g;
    void *gw;
    const int64_t *end, *order;
    int64_t total;      /* tokens in buckets: order[0 .. total) */
    int assign;
} learned_back_job;

/* the bucketed row adds fetch the next token's row this far ahead of use
 * (about 8% faster for 4 KB rows of an L3-resident g) */
#define LEARNED_PREFETCH_BYTES 1024
/* the token-order adds fetch the whole gradient row this many tokens ahead
 * (if their part adds it), before the row between.  Measured, 8x2048
 * tokens of 1024 float32 features into an L3-resident table, 1 thread,
 * alternating processes, Zen 5 EPYC: random positions 2.50-3.22 -> 2.25-2.79
 * ms, positions in order 2.49-2.67 -> 2.24-2.37 ms (2 threads: 2.47-3.17 ->
 * 2.36-2.84 ms, in order even); 1, 2 or 4 rows ahead within the noise.
 * (Fetching the next row 1 KiB at a time as the current one is added, as
 * the bucketed adds do, measured slower earlier: 4.6 and 6.9 -> 5.3 and
 * 8.3 ms.) */
#define LEARNED_TOK_AHEAD 2

/* Bucket positions when the table is not much larger than the batch. */
ptrdiff_t pe_learned_back_work(ptrdiff_t n, ptrdiff_t m)
{
    return m <= 2 * n ? 2 * n + m + 1 : 0;
}

/* end[p] = the tokens at positions <= p (m values); invalid positions in
 * none.  Returned: the tokens counted. */
static ptrdiff_t learned_counts(ptrdiff_t n, const int64_t *pos, ptrdiff_t m, int64_t *end)
{
    memset(end, 0, (size_t)m * sizeof *end);
    for (ptrdiff_t t = 0; t < n; t++) {
        const int64_t p = pos[t];
        if (p >= 0 && p < m)
            end[p]++;
    }
    for (ptrdiff_t p = 1; p < m; p++)
        end[p] += end[p - 1];
    return m ? (ptrdiff_t)end[m - 1] : 0;
}

/*
 * Group token indices by position, stably (a counting sort, O(n + m)).
 * Given pos (n), m, work (2n + m + 1).  Returned: order (n, in work) with
 * bucket p = order[lo(p) .. end[p]), lo(p) = p ? end[p-1] : 0, tokens
 * ascending in each bucket; invalid positions in no bucket.  pos is read
 * once (a private snapshot), so the buckets stay in bounds even if pos
 * changes meanwhile.
 */
static void learned_buckets(ptrdiff_t n, const int64_t *pos, ptrdiff_t m,
                            int64_t *work, int64_t **end, int64_t **order)
{
    int64_t *e = work, *key = work + m + 1, *o = key + n;
    for (ptrdiff_t t = 0; t < n; t++) {
        const int64_t p = pos[t];
        key[t] = (p >= 0 && p < m) ? p : -1;
    }
    e[0] = 0;                           /* e[p] = the start of bucket p */
    learned_counts(n, key, m, e + 1);
    for (ptrdiff_t t = 0; t < n; t++)   /* e[p] ends as the end of bucket p */
        if (key[t] >= 0)
            o[e[key[t]]++] = t;
    *end = e;
    *order = o;
}

/*
 * Positions [0, p) hold lo(p) + p units of work (their tokens and rows).
 * Returned: the first position whose work starts at or after c (m if none),
 * so work ranges [b, e) map to disjoint position ranges.
 */
static ptrdiff_t learned_back_first(const int64_t *end, ptrdiff_t m,
                                    ptrdiff_t c)
{
    ptrdiff_t lo = 0, hi = m;
    while (lo < hi) {
        const ptrdiff_t mid = lo + (hi - lo) / 2;
        if ((mid ? end[mid - 1] : 0) + mid >= c)
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
 * Given n contiguous rows g[t] of d features, their positions, the table
 * height m, work (pe_learned_back_work(n, m) int64 values, or NULL) and
 * assign.  Returned: gw (m, d) with gw[pos[t], j] += g[t, j], in token
 * order, starting from gw's contents, or from +0 when assign is set (gw's
 * contents are then never read).
 *
 * Every element of gw receives its addends in token order whichever way
 * the loop runs, so both ways give the bits of a serial loop over tokens.
 * With work, tokens are visited grouped by position: each table row is
 * written once while its addends stream through it from L1, instead of
 * once per token; with assign, a row's first addend is stored as 0 + g
 * (the bits of adding it to a zeroed table: -0 becomes +0) and a row with
 * no token is zeroed there, so the table needs no separate zeroing pass.
 * Without work (a table much larger than the batch), tokens are visited in
 * order, after zeroing the table on the pool when assign is set.
 */
/*
 * Token order for a table that stays in the last-level cache (at most a
 * quarter of it, read at run time) while the batch streams past it: the
 * gradient is read once, front to back, each token's row added into its
 * table row: the bits of the serial loop.  Bucketing by position instead
 * reads the gradient rows in position order, a jump per row (measured,
 * 8x2048 tokens of 1024 float32 features, 2048 positions, 1 thread, CPU
 * time: bucketed 3.6x one read of the gradient, token order 1.9x; torch's
 * zeros + index_add_ 2.9x, torch.compile of it 1.9x).  On the pool the
 * table's rows (positions) are cut into one part per thread: each part
 * walks every token in order but reads and adds only its own positions'
 * gradient rows, so the gradient is still read once in all, whole rows at
 * a time, and every element still gets its addends in token order (the
 * same bits for any thread count).  The parts are cut by work, not by
 * rows: a position costs its tokens plus one (its row, as in the bucketed
 * job), counted in a pass over the positions, so a batch whose positions
 * fill part of the table (a few positions, or the first half) still
 * splits.  Splitting the columns instead, each thread reading half of
 * every gradient row, was slower than one thread (4.8 ms against 4.0 ms
 * for the case above).
 *
 * Positions in random order split too.  Each thread then reads about
 * every other gradient row, each fetched whole LEARNED_TOK_AHEAD tokens
 * ahead.  Measured, Zen 3 EPYC VM (32 MiB L3), 8x2048 tokens of 1024
 * float32 features, 2048 positions, 2 threads, against the build that
 * kept random positions on one thread and cut equal rows (alternating
 * processes, 2 runs each; torch's zeros + index_add_ 5.4-6.7 ms): random
 * positions 8.0-8.7 -> 5.5-5.8 ms, positions from [0, 1024) 6.3-6.6 ->
 * 5.1-5.2 ms, from [0, 8) 5.5-5.6 -> 5.1-5.3 ms.  (Before the whole-row
 * fetch existed, random positions split measured 7 ms against 4 ms on one
 * thread on a Zen 5 EPYC, so they ran on one thread; not measured there
 * since.)
 */
typedef struct {
    ptrdiff_t n, d, m, parts;
    const void *g;
    const int64_t *pos;
    void *gw;
    const int64_t *end;     /* tokens at positions <= p, or NULL: equal rows */
    ptrdiff_t total;        /* the job's units of work: tokens + rows */
    int assign;
} learned_tok_job;

/* The first position of part k of the token-order job (m for k = parts):
 * part k adds positions [start(k), start(k + 1)). */
static ptrdiff_t learned_tok_start(const learned_tok_job *j, ptrdiff_t k)
{
    return j->end == NULL ? k * j->m / j->parts
                          : learned_back_first(j->end, j->m, k * j->total / j->parts);
}

static int learned_table_cached(ptrdiff_t m, ptrdiff_t rowbytes, ptrdiff_t n)
{
    return n >= m && m <= pe_cache_llc_bytes() / 4 / (rowbytes > 0 ? rowbytes : 1);
}

#define DEFINE_LEARNED_ROWS(TG, TW, SUF, CVT, NAME, ATTR)                     \
/* dst (+)= src in chunks, each after prefetching next's matching chunk */    \
ATTR static void NAME(ptrdiff_t d, const TG *restrict src,                    \
                                    TW *restrict dst, const TG *next,         \
                                    int first)                                \
{                                                                             \
    const ptrdiff_t chunk = LEARNED_PREFETCH_BYTES / (ptrdiff_t)sizeof(TG);   \
    for (ptrdiff_t c = 0; c < d; c += chunk) {                                \
        const ptrdiff_t e = d - c < chunk ? d - c : chunk;                    \
        if (next != NULL)                                                     \
            pe_prefetch(next + c, e * (ptrdiff_t)sizeof(TG));            \
        if (first)                                                            \
            for (ptrdiff_t i = c; i < c + e; i++)                             \
                dst[i] = (TW)0 + CVT(src[i]);                                 \
        else                                                                  \
            for (ptrdiff_t i = c; i < c + e; i++)                             \
                dst[i] += CVT(src[i]);                                        \
    }                                                                         \
}
#if defined(PE_X86_SIMD)
#define DEFINE_LEARNED_ROWS_ALL(TG, TW, SUF, CVT)                             \
    DEFINE_LEARNED_ROWS(TG, TW, SUF, CVT, learned_back_rows_##SUF, )          \
    DEFINE_LEARNED_ROWS(TG, TW, SUF, CVT, learned_back_rows_##SUF##_avx2,     \
                        __attribute__((target("avx2"))))
#else
#define DEFINE_LEARNED_ROWS_ALL(TG, TW, SUF, CVT)                             \
    DEFINE_LEARNED_ROWS(TG, TW, SUF, CVT, learned_back_rows_##SUF, )
#endif

typedef void (*rows_fn_f32)(ptrdiff_t, const float *, float *, const float *, int);
typedef void (*rows_fn_f64)(ptrdiff_t, const double *, double *, const double *, int);
typedef void (*rows_fn_f16)(ptrdiff_t, const uint16_t *, float *, const uint16_t *, int);


#define DEFINE_LEARNED_BACK(TG, TW, SUF, CVT)                                 \
/* work units [begin, end) of the bucketed job: disjoint table rows */        \
static void learned_back_task_##SUF(void *ctx, ptrdiff_t begin, ptrdiff_t end)\
{                                                                             \
    const learned_back_job *j = (const learned_back_job *)ctx;                \
    const TG *g = (const TG *)j->g;                                           \
    TW *gw = (TW *)j->gw;                                                     \
    const ptrdiff_t p1 = learned_back_first(j->end, j->m, end);               \
    for (ptrdiff_t p = learned_back_first(j->end, j->m, begin); p < p1; p++) {\
        int64_t k = p ? j->end[p - 1] : 0;                                    \
        TW *row = gw + p * j->d;                                              \
        if (j->assign && k == j->end[p]) {                                    \
            memset(row, 0, (size_t)j->rowbytes);                              \
            continue;                                                         \
        }                                                                     \
        for (int first = j->assign; k < j->end[p]; k++, first = 0) {          \
            /* the next token's row (in this bucket or the next) */           \
            const int64_t next = k + 1 < j->total ? j->order[k + 1]           \
                                                  : j->order[k];              \
            learned_table.rows_##SUF(j->d, g + j->order[k] * j->d, row,       \
                                    g + next * j->d, first);                  \
        }                                                                     \
    }                                                                         \
}                                                                             \
/* positions [p0, p1) of part begin .. end of the token-order job: every   \
 * token, in order, whose position is there, added into its row */          \
static void learned_back_tok_task_##SUF(void *ctx, ptrdiff_t begin,           \
                                        ptrdiff_t end)                        \
{                                                                             \
    const learned_tok_job *j = (const learned_tok_job *)ctx;                  \
    const TG *g = (const TG *)j->g;                                           \
    TW *gw = (TW *)j->gw;                                                     \
    const ptrdiff_t p0 = learned_tok_start(j, begin);                         \
    const ptrdiff_t p1 = learned_tok_start(j, end);                           \
    if (j->assign)                                                            \
        memset(gw + p0 * j->d, 0, (size_t)((p1 - p0) * j->d) * sizeof(TW));  \
    for (ptrdiff_t t = 0; t < j->n; t++) {                                    \
        const int64_t p = j->pos[t];                                          \
        if (t + LEARNED_TOK_AHEAD < j->n) {                                   \
            const int64_t q = j->pos[t + LEARNED_TOK_AHEAD];                  \
            if (q >= p0 && q < p1)                                            \
                pe_prefetch(g + (t + LEARNED_TOK_AHEAD) * j->d,               \
                            j->d * (ptrdiff_t)sizeof(TG));                    \
        }                                                                     \
        if (p >= p0 && p < p1)                                                \
            learned_table.rows_##SUF(j->d, g + t * j->d, gw + p * j->d, NULL, 0); \
    }                                                                         \
}                                                                             \
void pe_learned_back_##SUF(ptrdiff_t n, ptrdiff_t d, const TG *g,             \
                           const int64_t *pos, ptrdiff_t m, TW *gw,           \
                           int64_t *work, int assign)                         \
{                                                                             \
    learned_back_job j;                                                       \
    if (learned_table_cached(m, d * (ptrdiff_t)sizeof(TW), n)) {              \
        /* one part per thread, where each moves PE_PARALLEL_MIN_BYTES */     \
        const ptrdiff_t bytes = n * d * (ptrdiff_t)sizeof(TG);                \
        ptrdiff_t parts = pe_get_num_threads();                               \
        if (parts > bytes / PE_PARALLEL_MIN_BYTES)                            \
            parts = bytes / PE_PARALLEL_MIN_BYTES;                            \
        if (parts > m)                                                        \
            parts = m;                                                        \
        if (parts < 2)                                                        \
            parts = 1;                                                        \
        {                                                                     \
            learned_tok_job c = {n, d, m, parts, g, pos, gw, NULL, 0, assign};\
            if (parts > 1 && work != NULL && pe_learned_back_work(n, m) > 0) {\
                c.total = learned_counts(n, pos, m, work) + m;                \
                c.end = work;                                                 \
            }                                                                 \
            pe_parallel_for(parts, 1, learned_back_tok_task_##SUF, &c);       \
        }                                                                     \
        return;                                                               \
    }                                                                         \
    j.d = d;                                                                  \
    j.m = m;                                                                  \
    j.rowbytes = d * (ptrdiff_t)sizeof(TW);                                   \
    j.g = g;                                                                  \
    j.gw = gw;                                                                \
    j.assign = assign;                                                        \
    if (work != NULL && pe_learned_back_work(n, m) > 0) {                     \
        int64_t *e, *o;                                                       \
        learned_buckets(n, pos, m, work, &e, &o);                             \
        j.end = e;                                                            \
        j.order = o;                                                          \
        j.total = m ? e[m - 1] : 0;                                           \
        pe_parallel_for((ptrdiff_t)j.total + m,                               \
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
            learned_table.rows_##SUF(d, g + t * d, gw + p * d, NULL, 0);      \
    }                                                                         \
}

#define CVT_SAME(v) (v)
#define CVT_HALF(v) pe_half_to_float(v)

DEFINE_LEARNED_ROWS_ALL(float, float, f32, CVT_SAME)
DEFINE_LEARNED_ROWS_ALL(double, double, f64, CVT_SAME)
DEFINE_LEARNED_ROWS_ALL(uint16_t, float, f16, CVT_HALF)

/* The kernels of the dispatched CPU level (pe_learned_dispatch); the
 * portable ones until it runs (C-only callers). */
static struct {
    rows_fn_f16 rows_f16;
    rows_fn_f32 rows_f32;
    rows_fn_f64 rows_f64;
    void (*fwdnt[2])(const pe_learned_loop *);   /* NULL: no streaming stores */
} learned_table = {learned_back_rows_f16, learned_back_rows_f32, learned_back_rows_f64,
                   {NULL, NULL}};

const char *pe_learned_dispatch(int level)
{
    learned_table.rows_f16 = learned_back_rows_f16;
    learned_table.rows_f32 = learned_back_rows_f32;
    learned_table.rows_f64 = learned_back_rows_f64;
    learned_table.fwdnt[0] = learned_table.fwdnt[1] = NULL;
#if defined(PE_X86_SIMD)
    if (level >= PE_CPU_SSE2) {
        learned_table.fwdnt[0] = learned_fwdnt_f32;
        learned_table.fwdnt[1] = learned_fwdnt_f64;
    }
    if (level >= PE_CPU_AVX2) {
        learned_table.rows_f16 = learned_back_rows_f16_avx2;
        learned_table.rows_f32 = learned_back_rows_f32_avx2;
        learned_table.rows_f64 = learned_back_rows_f64_avx2;
        return "avx2";
    }
    return level >= PE_CPU_SSE2 ? "sse2" : "baseline";
#else
    (void)level;
    return "baseline";
#endif
}

DEFINE_LEARNED_BACK(float, float, f32, CVT_SAME)
DEFINE_LEARNED_BACK(double, double, f64, CVT_SAME)
/* float16 rows accumulate into a float32 table (round once afterwards). */
DEFINE_LEARNED_BACK(uint16_t, float, f16, CVT_HALF)

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
    static void (*const plain[3])(const pe_learned_loop *) = {
        pe_learned_fwd_f16, pe_learned_fwd_f32, pe_learned_fwd_f64};
    static const ptrdiff_t itemsizes[3] = {2, 4, 8};
    const ptrdiff_t itemsize = itemsizes[type];
    const ptrdiff_t vec = 3 * (L->d > 0 ? L->d : 1) * itemsize;
    learned_fwd_job j = {plain[type], L};
    /* a large out-of-place output: skip the read-for-ownership */
    if (type > 0 && learned_table.fwdnt[type - 1] != NULL && L->y != L->x &&
        L->n * L->d * itemsize >= PE_STREAM_MIN_BYTES &&
        pe_memory_stream_ok(L->y + L->n / 2 * L->y_step,
                            ((uintptr_t)L->y | (uintptr_t)L->y_step) % 64 == 0))
        j.fn = learned_table.fwdnt[type - 1];
    pe_parallel_for_stoppable(L->n, PE_PARALLEL_MIN_BYTES / vec + 1, vec, learned_fwd_task, &j,
                              L->stop);
}
