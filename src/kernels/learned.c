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
 * Rows read in an order the hardware prefetcher cannot guess (table rows
 * picked by position, the backward's tokens grouped by block) start cold,
 * so the kernels fetch the next such row a little ahead of use
 * (pe_prefetch).
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

/* Row adds are compiled twice (portable C, and C for AVX2 on x86-64,
 * picked by the dispatch): same bits on all. */
/*
 * With scratch (a table not much taller than the batch), the table is cut
 * into blocks of R consecutive rows, R a power of two whose rows fill
 * about half of one core's L2 (read at run time).  The tokens are grouped
 * by block, stably (a counting sort, O(n + m)), and each block is finished
 * before the next: its tokens, in token order, are added into its rows,
 * which stay in L2 while their addends stream in.  Every element still
 * gets its addends in token order, so the result is the serial loop's
 * bits.  For the common batch of sequences (positions arange(s) in every
 * row), a block's tokens are b runs of R consecutive gradient rows, each
 * read front to back, and the gradient is read once in all.
 *
 * It replaced two walks: token order over a table kept in the last-level
 * cache (each gradient row added into its table row there), and buckets
 * of one row each (a jump in the gradient per row, which measured 3.6x
 * one read of the gradient against token order's 1.9x on a Zen 5 EPYC).
 * Measured on a Zen 3 EPYC VM (32 MiB L3, 512 KiB L2), 1 thread, old and
 * new builds alternated process by process, minima, positions in runs
 * (arange(2048) per batch row): 8x2048 tokens of 1024
 * float32 features into 2048 rows 5.7-6.1 ms (token order) -> 4.5-5.0 ms;
 * the same with 2 or 4 batches (16-32 MiB of gradient) 1.3-1.5 -> 0.7-1.1
 * ms and 2.2-3.1 -> 1.6-2.4 ms; 8x2048 tokens of 512 float64 6.5-7.1 ->
 * 5.2-5.6 ms.  Here one-row buckets measured the same as blocks for 4
 * and 8 tokens per row (interleaved in one process), so blocks are kept
 * for the machines where a jump per row costs.  Scattered positions keep
 * token order over a table in the last-level cache, as one block per
 * thread (learned_block_shift): random positions, the case above, 6.9-7.5
 * -> 5.8-6.4 ms at 1 thread, 3.9-4.6 ms both at 2.
 *
 * The pool splits the blocks: each part owns disjoint rows of gw and
 * visits their tokens in order, so the result is the same bits for any
 * thread count.  Parts are cut by work, not by blocks: block c costs its
 * tokens plus its rows, so positions in runs that fill part of the table
 * (a short sequence in a tall table) still keep every thread busy.
 * Scattered positions have one block per thread, so a skewed scatter (a
 * few hot rows in random order) can leave a thread with little to do.
 */
#define LEARNED_BLOCK_MAX_ROWS 4096
typedef struct {
    ptrdiff_t d, m, rowbytes;
    int shift;          /* R = 1 << shift rows per block */
    ptrdiff_t blocks;
    const void *g;
    void *gw;
    const int64_t *end, *order, *key;   /* block c's tokens: order[lo(c) .. end[c]) */
    int64_t total;      /* tokens in blocks: order[0 .. total) */
    int assign;
} learned_back_job;

/* the row adds fetch the next token's row this far ahead of use
 * (about 8% faster for 4 KB rows of an L3-resident g) */
#define LEARNED_PREFETCH_BYTES 1024

/* Scratch for the blocks when the table is not much larger than the batch. */
ptrdiff_t pe_learned_back_work(ptrdiff_t n, ptrdiff_t m)
{
    return m <= 2 * n ? 2 * n + m + 1 : 0;
}

/* Do the positions come mostly in runs (p, p + 1, ...), as sequences do? */
static int learned_in_runs(ptrdiff_t n, const int64_t *pos)
{
    ptrdiff_t runs = 0;
    for (ptrdiff_t t = 1; t < n; t++)
        runs += pos[t - 1] < INT64_MAX && pos[t] == pos[t - 1] + 1;
    return 2 * runs >= n;
}

/*
 * log2 of the rows per block.  Positions in runs: rows of rowbytes filling
 * about half of L2, or single rows when the batch holds fewer than 4
 * tokens per row (a row then gets its few addends back to back, from L1;
 * blocks measured 10-20% slower there: 2x65536 tokens of 256 float32
 * features, 65536 positions, 9.9 ms for single rows against 11.1-12.2 ms
 * for blocks of 2-256 rows, interleaved in one process, 1 thread; at 4 and
 * 8 tokens per row both within the noise of each other).  Scattered
 * positions into a table that stays in the last-level cache (a quarter of
 * it): one block per thread, so each thread reads its tokens' gradient
 * rows in token order, front to back, and adds them into the table there;
 * small blocks would read the gradient a scattered row at a time.
 * Measured, 8x2048 random positions in 2048 rows of 1024 float32, block
 * sizes interleaved in one process, minima of 21: 1 thread, one block
 * 4.8-5.4 ms against 6.2-6.9 ms for 64 rows; 2 threads, two blocks
 * 3.6-3.8 against 4.4-4.6 ms.  (Positions in runs: one block per thread
 * was 0-5% slower than 64 rows.)
 */
static int learned_block_shift(ptrdiff_t rowbytes, ptrdiff_t n, ptrdiff_t m,
                               const int64_t *pos)
{
    const ptrdiff_t budget = pe_cache_l2_bytes() / 2;
    int s = 0;
    if (m * rowbytes <= pe_cache_llc_bytes() / 4 && !learned_in_runs(n, pos)) {
        const ptrdiff_t parts = pe_get_num_threads();
        while (((ptrdiff_t)1 << s) * parts < m)
            s++;
        return s;
    }
    if (n / 4 < m)
        return 0;
    while (((ptrdiff_t)2 << s) <= LEARNED_BLOCK_MAX_ROWS &&
           ((ptrdiff_t)2 << s) * rowbytes <= budget)
        s++;
    return s;
}

/*
 * Group token indices by block (p >> shift), stably (a counting sort,
 * O(n + m)).  Given pos (n), m, work (2n + m + 1).  Returned: key (n, in
 * work: pos[t], or -1 outside [0, m)), order (n, in work) and end (the
 * blocks' ends) with block c = order[lo(c) .. end[c]), lo(c) = c ?
 * end[c-1] : 0, tokens ascending in each block.  pos is read once here
 * (key is a private snapshot), so the blocks stay in bounds even if pos
 * changes meanwhile (learned_in_runs reads it before, only to choose R).
 */
static void learned_blocks(ptrdiff_t n, const int64_t *pos, ptrdiff_t m, int shift,
                           int64_t *work, int64_t **end, int64_t **key, int64_t **order)
{
    const ptrdiff_t blocks = m ? ((m - 1) >> shift) + 1 : 0;
    int64_t *e = work, *k = work + m + 1, *o = k + n;
    memset(e, 0, (size_t)(blocks + 1) * sizeof *e);
    for (ptrdiff_t t = 0; t < n; t++) {
        const int64_t p = pos[t];
        k[t] = (p >= 0 && p < m) ? p : -1;
        if (k[t] >= 0)
            e[(k[t] >> shift) + 1]++;
    }
    for (ptrdiff_t c = 1; c <= blocks; c++)      /* e[c] = the start of block c */
        e[c] += e[c - 1];
    for (ptrdiff_t t = 0; t < n; t++)   /* e[c] ends as the end of block c */
        if (k[t] >= 0)
            o[e[k[t] >> shift]++] = t;
    *end = e;
    *key = k;
    *order = o;
}

/*
 * Blocks [0, c) hold lo(c) + min(c R, m) units of work (their tokens and
 * rows).  Returned: the first block whose work starts at or after u
 * (blocks if none), so work ranges [b, e) map to disjoint block ranges.
 */
static ptrdiff_t learned_block_first(const learned_back_job *j, ptrdiff_t u)
{
    ptrdiff_t lo = 0, hi = j->blocks;
    while (lo < hi) {
        const ptrdiff_t mid = lo + (hi - lo) / 2;
        const ptrdiff_t rows = (mid << j->shift) < j->m ? mid << j->shift : j->m;
        if ((mid ? j->end[mid - 1] : 0) + rows >= u)
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
 * With work, tokens are visited block by block (above); with assign, a
 * row's first addend is stored as 0 + g (the bits of adding it to a
 * zeroed table: -0 becomes +0) and a row with no token is zeroed there, so
 * the table needs no separate zeroing pass.  Without work (a table much
 * larger than the batch), tokens are visited in order, after zeroing the
 * table on the pool when assign is set.
 */
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
            pe_prefetch(next + c, e * (ptrdiff_t)sizeof(TG));                 \
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
typedef rows_fn_f16 rows_fn_bf16;


#define DEFINE_LEARNED_BACK(TG, TW, SUF, CVT)                                 \
/* work units [begin, end) of the blocked job: disjoint blocks of rows */     \
static void learned_back_task_##SUF(void *ctx, ptrdiff_t begin, ptrdiff_t end)\
{                                                                             \
    const learned_back_job *j = (const learned_back_job *)ctx;                \
    const TG *g = (const TG *)j->g;                                           \
    TW *gw = (TW *)j->gw;                                                     \
    unsigned char fresh[LEARNED_BLOCK_MAX_ROWS];  /* rows with no addend yet */\
    const ptrdiff_t c1 = learned_block_first(j, end);                         \
    for (ptrdiff_t c = learned_block_first(j, begin); c < c1; c++) {          \
        const ptrdiff_t p0 = c << j->shift;                                   \
        const ptrdiff_t rows = j->m - p0 < ((ptrdiff_t)1 << j->shift)         \
                                   ? j->m - p0 : (ptrdiff_t)1 << j->shift;    \
        /* rows with no addend yet are tracked; a larger block is zeroed */   \
        const int track = j->assign && rows <= LEARNED_BLOCK_MAX_ROWS;        \
        if (track)                                                            \
            memset(fresh, 1, (size_t)rows);                                   \
        else if (j->assign)                                                   \
            memset(gw + p0 * j->d, 0, (size_t)(rows * j->rowbytes));          \
        for (int64_t k = c ? j->end[c - 1] : 0; k < j->end[c]; k++) {         \
            const int64_t t = j->order[k], r = j->key[t] - p0;                \
            /* the next token's row (in this block or the next) */            \
            const int64_t next = k + 1 < j->total ? j->order[k + 1] : t;      \
            learned_table.rows_##SUF(j->d, g + t * j->d, gw + j->key[t] * j->d,\
                                    g + next * j->d, track && fresh[r]);      \
            if (track)                                                        \
                fresh[r] = 0;                                                 \
        }                                                                     \
        if (track)                                                            \
            for (ptrdiff_t r = 0; r < rows; r++)                              \
                if (fresh[r])                                                 \
                    memset(gw + (p0 + r) * j->d, 0, (size_t)j->rowbytes);     \
    }                                                                         \
}                                                                             \
void pe_learned_back_##SUF(ptrdiff_t n, ptrdiff_t d, const TG *g,             \
                           const int64_t *pos, ptrdiff_t m, TW *gw,           \
                           int64_t *work, int assign)                         \
{                                                                             \
    learned_back_job j;                                                       \
    j.d = d;                                                                  \
    j.m = m;                                                                  \
    j.rowbytes = d * (ptrdiff_t)sizeof(TW);                                   \
    j.g = g;                                                                  \
    j.gw = gw;                                                                \
    j.assign = assign;                                                        \
    if (work != NULL && pe_learned_back_work(n, m) > 0) {                     \
        int64_t *e, *k, *o;                                                   \
        j.shift = learned_block_shift(j.rowbytes, n, m, pos);                 \
        j.blocks = m ? ((m - 1) >> j.shift) + 1 : 0;                          \
        learned_blocks(n, pos, m, j.shift, work, &e, &k, &o);                 \
        j.end = e;                                                            \
        j.key = k;                                                            \
        j.order = o;                                                          \
        j.total = j.blocks ? e[j.blocks - 1] : 0;                             \
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
DEFINE_LEARNED_ROWS(uint16_t, float, f16, CVT_HALF, learned_back_rows_f16, )
DEFINE_LEARNED_ROWS_ALL(uint16_t, float, bf16, bf16_value)

#if defined(PE_X86_SIMD)
#include <immintrin.h>
/*
 * float16 with F16C (the AVX2 level), 8 values per conversion: the
 * widening is exact and vcvtps2ph rounds to nearest even, NaNs made quiet
 * as pe_float_to_half makes them, so these give the portable loops' bits.
 * (The portable loops convert one value at a time, through a function in
 * another file: 8x2048 tokens of 1024 float16 features took 43 ms for the
 * backward and 160 ms for the forward, against 5-6 ms in float32.)
 */
__attribute__((target("avx2,f16c")))
static void learned_back_rows_f16_f16c(ptrdiff_t d, const uint16_t *restrict src,
                                       float *restrict dst, const uint16_t *next,
                                       int first)
{
    const ptrdiff_t chunk = LEARNED_PREFETCH_BYTES / (ptrdiff_t)sizeof *src;
    for (ptrdiff_t c = 0; c < d; c += chunk) {
        const ptrdiff_t e = d - c < chunk ? d - c : chunk;
        ptrdiff_t i = c;
        if (next != NULL)
            pe_prefetch(next + c, e * (ptrdiff_t)sizeof *src);
        for (; i + 8 <= c + e; i += 8) {
            const __m256 v = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(const void *)(src + i)));
            _mm256_storeu_ps(dst + i, _mm256_add_ps(first ? _mm256_setzero_ps()
                                                          : _mm256_loadu_ps(dst + i), v));
        }
        for (; i < c + e; i++)
            dst[i] = (first ? 0.0f : dst[i]) + pe_half_to_float(src[i]);
    }
}

/*
 * The forward's float16 (F16C) and bfloat16 rows at the AVX2 level:
 * contiguous rows 8 values at a time (bfloat16 widened by a shift and
 * rounded by bf16_avx2.h's rule, the same bits as pe_float_to_bf16 for
 * these sums), anything else through the portable loop.
 */
#define F16_LOAD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
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

/* The kernels of the dispatched CPU level (pe_learned_dispatch); the
 * portable ones until it runs (C-only callers). */
static struct {
    rows_fn_f16 rows_f16;
    rows_fn_f32 rows_f32;
    rows_fn_f64 rows_f64;
    rows_fn_bf16 rows_bf16;
    void (*fwd_f16)(const pe_learned_loop *);
    void (*fwd_bf16)(const pe_learned_loop *);
    void (*fwdnt[2])(const pe_learned_loop *);   /* NULL: no streaming stores */
} learned_table = {learned_back_rows_f16, learned_back_rows_f32, learned_back_rows_f64,
                   learned_back_rows_bf16, pe_learned_fwd_f16, pe_learned_fwd_bf16,
                   {NULL, NULL}};

const char *pe_learned_dispatch(int level)
{
    learned_table.rows_f16 = learned_back_rows_f16;
    learned_table.rows_f32 = learned_back_rows_f32;
    learned_table.rows_f64 = learned_back_rows_f64;
    learned_table.rows_bf16 = learned_back_rows_bf16;
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
            learned_table.rows_f16 = learned_back_rows_f16_f16c;
            learned_table.fwd_f16 = learned_fwd_f16_f16c;
        }
        learned_table.rows_bf16 = learned_back_rows_bf16_avx2;
        learned_table.fwd_bf16 = learned_fwd_bf16_avx2;
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
/* float16 and bfloat16 rows accumulate into a float32 table (round once
 * afterwards). */
DEFINE_LEARNED_BACK(uint16_t, float, f16, CVT_HALF)
DEFINE_LEARNED_BACK(uint16_t, float, bf16, bf16_value)

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
