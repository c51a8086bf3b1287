/*
 * rope.c - rotary position embeddings: apply (forward and adjoint),
 * rotate_half, and the cos/sin tables.
 *
 * Every apply kernel is one generalized-ufunc inner loop, signature
 * (d),(r),(r)->(d): see pe_rope_loop in posemb.h.  The one line of maths,
 * for a pair (a, b) of features -- (i, i + r/2) in the half-split layout,
 * (2i, 2i + 1) in the interleaved one:
 *
 *   fwd:  y[a] = x[a]*cos[a] - x[b]*sin[a];   y[b] = x[b]*cos[b] + x[a]*sin[b]
 *   back: y[a] = x[a]*cos[a] + x[b]*sin[b];   y[b] = x[b]*cos[b] - x[a]*sin[a]
 *
 * fwd is HF's x*cos + rotate_half(x)*sin term for term (two products, one
 * sum, no fused multiply-add: the build passes -ffp-contract=off), so with
 * the same tables the float32/float64 results equal PyTorch's bit for bit.
 * back is the exact adjoint of fwd (the gradient with respect to x); for
 * tables made by pe_rope_table it is the inverse rotation.
 *
 * Features 2*(r/2) .. d-1 are copied unchanged: partial rotary, and (for an
 * odd r, which the Python API refuses) the unpaired feature, as in
 * TorchLean's total spec.  The raw gufunc accepts odd r so that dask's
 * dtype probe (all dimensions 1) runs.
 */
#include <math.h>
#include <string.h>

#include "posemb.h"

#define IDX_A_half(i, h) (i)
#define IDX_B_half(i, h) ((i) + (h))
#define IDX_A_inter(i, h) (2 * (i))
#define IDX_B_inter(i, h) (2 * (i) + 1)

#define ROT_fwd(ya, yb, xa, xb, ca, cb, sa, sb) \
    do { ya = xa * ca - xb * sa; yb = xb * cb + xa * sb; } while (0)
#define ROT_back(ya, yb, xa, xb, ca, cb, sa, sb) \
    do { ya = xa * ca + xb * sb; yb = xb * cb - xa * sa; } while (0)

#define LOAD_f16(p) pe_half_to_float(*(const uint16_t *)(const void *)(p))
#define STORE_f16(p, v) (*(uint16_t *)(void *)(p) = pe_float_to_half(v))
#define LOAD_f32(p) (*(const float *)(const void *)(p))
#define STORE_f32(p, v) (*(float *)(void *)(p) = (v))
#define LOAD_f64(p) (*(const double *)(const void *)(p))
#define STORE_f64(p, v) (*(double *)(void *)(p) = (v))

/*
 * Contiguous fast paths for float32/float64: one vector with unit inner
 * strides.  The out-of-place form promises the compiler that x, the tables
 * and y do not overlap (NumPy copies overlapping operands, except the exact
 * in-place case, which takes the second form); both vectorize.
 */
#define DEFINE_ROPE_CONTIG(LAYOUT, DIR, T)                                    \
PE_INLINE void rope_##LAYOUT##_##DIR##_##T##_copy(                               \
    ptrdiff_t d, ptrdiff_t r, const T *restrict x, const T *restrict c,      \
    const T *restrict s, T *restrict y)                                       \
{                                                                             \
    const ptrdiff_t h = r / 2;                                                \
    for (ptrdiff_t i = 0; i < h; i++) {                                       \
        const ptrdiff_t a = IDX_A_##LAYOUT(i, h), b = IDX_B_##LAYOUT(i, h);   \
        T ya, yb;                                                             \
        ROT_##DIR(ya, yb, x[a], x[b], c[a], c[b], s[a], s[b]);                \
        y[a] = ya;                                                            \
        y[b] = yb;                                                            \
    }                                                                         \
    if (d > 2 * h)                                                            \
        memcpy(y + 2 * h, x + 2 * h, (size_t)(d - 2 * h) * sizeof(T));        \
}                                                                             \
PE_INLINE void rope_##LAYOUT##_##DIR##_##T##_inplace(                            \
    ptrdiff_t r, T *xy, const T *restrict c, const T *restrict s)            \
{                                                                             \
    const ptrdiff_t h = r / 2;                                                \
    for (ptrdiff_t i = 0; i < h; i++) {                                       \
        const ptrdiff_t a = IDX_A_##LAYOUT(i, h), b = IDX_B_##LAYOUT(i, h);   \
        const T xa = xy[a], xb = xy[b];                                       \
        T ya, yb;                                                             \
        ROT_##DIR(ya, yb, xa, xb, c[a], c[b], s[a], s[b]);                    \
        xy[a] = ya;                                                           \
        xy[b] = yb;                                                           \
    }                                                                         \
}

/* The strided loop: any inner strides, any dtype (CT is the compute type). */
#define ROPE_STRIDED_BODY(LAYOUT, DIR, T, CT, SUF)                            \
    for (ptrdiff_t i = 0; i < h; i++) {                                       \
        const ptrdiff_t a = IDX_A_##LAYOUT(i, h), b = IDX_B_##LAYOUT(i, h);   \
        const CT xa = LOAD_##SUF(x + a * L->x_inner);                         \
        const CT xb = LOAD_##SUF(x + b * L->x_inner);                         \
        const CT ca = LOAD_##SUF(c + a * L->cos_inner);                       \
        const CT cb = LOAD_##SUF(c + b * L->cos_inner);                       \
        const CT sa = LOAD_##SUF(s + a * L->sin_inner);                       \
        const CT sb = LOAD_##SUF(s + b * L->sin_inner);                       \
        CT ya, yb;                                                            \
        ROT_##DIR(ya, yb, xa, xb, ca, cb, sa, sb);                            \
        STORE_##SUF(y + a * L->y_inner, ya);                                  \
        STORE_##SUF(y + b * L->y_inner, yb);                                  \
    }                                                                         \
    if (y != x || L->y_inner != L->x_inner)                                   \
        for (ptrdiff_t i = 2 * h; i < L->d; i++)                              \
            memcpy(y + i * L->y_inner, x + i * L->x_inner, sizeof(T));

#define DEFINE_ROPE_FAST(LAYOUT, DIR, T, SUF)                                 \
DEFINE_ROPE_CONTIG(LAYOUT, DIR, T)                                            \
PE_SIMD_CLONES                                                                \
void pe_rope_##LAYOUT##_##DIR##_##SUF(const pe_rope_loop *L)                  \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(T);                                 \
    const int contig = L->x_inner == z && L->y_inner == z &&                  \
                       L->cos_inner == z && L->sin_inner == z;                \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const char *x = L->x + k * L->x_step;                                 \
        const char *c = L->cos + k * L->cos_step;                             \
        const char *s = L->sin + k * L->sin_step;                             \
        char *y = L->y + k * L->y_step;                                       \
        if (contig && y == x) {                                               \
            rope_##LAYOUT##_##DIR##_##T##_inplace(                            \
                L->r, (T *)(void *)y, (const T *)(const void *)c,             \
                (const T *)(const void *)s);                                  \
        } else if (contig) {                                                  \
            rope_##LAYOUT##_##DIR##_##T##_copy(                               \
                L->d, L->r, (const T *)(const void *)x,                       \
                (const T *)(const void *)c, (const T *)(const void *)s,       \
                (T *)(void *)y);                                              \
        } else {                                                              \
            ROPE_STRIDED_BODY(LAYOUT, DIR, T, T, SUF)                         \
        }                                                                     \
    }                                                                         \
}

#define DEFINE_ROPE_HALFPREC(LAYOUT, DIR)                                     \
void pe_rope_##LAYOUT##_##DIR##_f16(const pe_rope_loop *L)                    \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const char *x = L->x + k * L->x_step;                                 \
        const char *c = L->cos + k * L->cos_step;                             \
        const char *s = L->sin + k * L->sin_step;                             \
        char *y = L->y + k * L->y_step;                                       \
        ROPE_STRIDED_BODY(LAYOUT, DIR, uint16_t, float, f16)                  \
    }                                                                         \
}

DEFINE_ROPE_FAST(half, fwd, float, f32)
DEFINE_ROPE_FAST(half, fwd, double, f64)
DEFINE_ROPE_FAST(half, back, float, f32)
DEFINE_ROPE_FAST(half, back, double, f64)
DEFINE_ROPE_FAST(inter, fwd, float, f32)
DEFINE_ROPE_FAST(inter, fwd, double, f64)
DEFINE_ROPE_FAST(inter, back, float, f32)
DEFINE_ROPE_FAST(inter, back, double, f64)
DEFINE_ROPE_HALFPREC(half, fwd)
DEFINE_ROPE_HALFPREC(half, back)
DEFINE_ROPE_HALFPREC(inter, fwd)
DEFINE_ROPE_HALFPREC(inter, back)

/*
 * Half-split kernels for duplicated tables (cos[i + h] == cos[i] and
 * sin[i + h] == sin[i] for every row, as every HF-convention table has):
 * the same formula with cb = ca and sb = sa, so the same bits as the
 * full-width kernel, with 4 loads per pair instead of 6.  The caller
 * checks the duplication (pe_rope_tables_duplicated); non-contiguous
 * vectors take the full-width kernel.
 */
#define DEFINE_ROPE_DUP(DIR, T, SUF)                                          \
PE_SIMD_CLONES                                                                \
void pe_rope_dup_##DIR##_##SUF(const pe_rope_loop *L)                         \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(T);                                 \
    if (L->x_inner != z || L->y_inner != z || L->cos_inner != z ||            \
        L->sin_inner != z) {                                                  \
        pe_rope_half_##DIR##_##SUF(L);                                        \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const T *restrict c = (const T *)(const void *)(L->cos + k * L->cos_step); \
        const T *restrict s = (const T *)(const void *)(L->sin + k * L->sin_step); \
        if (L->x + k * L->x_step == L->y + k * L->y_step) {                   \
            T *restrict lo = (T *)(void *)(L->y + k * L->y_step);             \
            T *restrict hi = lo + h;                                          \
            for (ptrdiff_t i = 0; i < h; i++) {                               \
                const T xa = lo[i], xb = hi[i];                               \
                T ya, yb;                                                     \
                ROT_##DIR(ya, yb, xa, xb, c[i], c[i], s[i], s[i]);            \
                lo[i] = ya;                                                   \
                hi[i] = yb;                                                   \
            }                                                                 \
        } else {                                                              \
            const T *restrict x = (const T *)(const void *)(L->x + k * L->x_step); \
            T *restrict y = (T *)(void *)(L->y + k * L->y_step);              \
            for (ptrdiff_t i = 0; i < h; i++) {                               \
                T ya, yb;                                                     \
                ROT_##DIR(ya, yb, x[i], x[i + h], c[i], c[i], s[i], s[i]);    \
                y[i] = ya;                                                    \
                y[i + h] = yb;                                                \
            }                                                                 \
            if (L->d > 2 * h)                                                 \
                memcpy(y + 2 * h, x + 2 * h, (size_t)(L->d - 2 * h) * sizeof(T)); \
        }                                                                     \
    }                                                                         \
}

DEFINE_ROPE_DUP(fwd, float, f32)
DEFINE_ROPE_DUP(fwd, double, f64)
DEFINE_ROPE_DUP(back, float, f32)
DEFINE_ROPE_DUP(back, double, f64)

/*
 * Streaming-store forms of the duplicated-table kernels, for large
 * out-of-place outputs: a plain store first reads the destination line
 * (read-for-ownership), so an out-of-place pass moves three streams where
 * a copy moves two; non-temporal stores skip that read.  SSE2 (baseline on
 * x86-64) with the same mul/mul/add-or-sub per value as the C loop, so the
 * same bits.  Vectors that are not 16-byte aligned with h a multiple of the
 * vector width, and in-place vectors, take the plain kernel.
 */
#if defined(__SSE2__)
#include <emmintrin.h>

#define NT_fwd_ps(ya, yb, xa, xb, c, s) \
    do { ya = _mm_sub_ps(_mm_mul_ps(xa, c), _mm_mul_ps(xb, s)); \
         yb = _mm_add_ps(_mm_mul_ps(xb, c), _mm_mul_ps(xa, s)); } while (0)
#define NT_back_ps(ya, yb, xa, xb, c, s) \
    do { ya = _mm_add_ps(_mm_mul_ps(xa, c), _mm_mul_ps(xb, s)); \
         yb = _mm_sub_ps(_mm_mul_ps(xb, c), _mm_mul_ps(xa, s)); } while (0)
#define NT_fwd_pd(ya, yb, xa, xb, c, s) \
    do { ya = _mm_sub_pd(_mm_mul_pd(xa, c), _mm_mul_pd(xb, s)); \
         yb = _mm_add_pd(_mm_mul_pd(xb, c), _mm_mul_pd(xa, s)); } while (0)
#define NT_back_pd(ya, yb, xa, xb, c, s) \
    do { ya = _mm_add_pd(_mm_mul_pd(xa, c), _mm_mul_pd(xb, s)); \
         yb = _mm_sub_pd(_mm_mul_pd(xb, c), _mm_mul_pd(xa, s)); } while (0)

#define DEFINE_ROPE_DUPNT(DIR, T, SUF, V, W, PS)                              \
void pe_rope_dupnt_##DIR##_##SUF(const pe_rope_loop *L)                       \
{                                                                             \
    const ptrdiff_t h = L->r / 2, z = (ptrdiff_t)sizeof(T);                   \
    if (L->x_inner != z || L->y_inner != z || L->cos_inner != z ||            \
        L->sin_inner != z || h % W != 0 || L->x == L->y) {                    \
        pe_rope_dup_##DIR##_##SUF(L);                                         \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const T *c = (const T *)(const void *)(L->cos + k * L->cos_step);     \
        const T *s = (const T *)(const void *)(L->sin + k * L->sin_step);     \
        const T *x = (const T *)(const void *)(L->x + k * L->x_step);         \
        T *y = (T *)(void *)(L->y + k * L->y_step);                           \
        if (((uintptr_t)y & 15u) != 0) {                                      \
            pe_rope_loop one = *L;                                            \
            one.n = 1;                                                        \
            one.x = (const char *)x;                                          \
            one.y = (char *)y;                                                \
            one.cos = (const char *)c;                                        \
            one.sin = (const char *)s;                                        \
            pe_rope_dup_##DIR##_##SUF(&one);                                  \
            continue;                                                         \
        }                                                                     \
        for (ptrdiff_t i = 0; i < h; i += W) {                                \
            const V xa = _mm_loadu_##PS(x + i), xb = _mm_loadu_##PS(x + i + h);\
            const V cv = _mm_loadu_##PS(c + i), sv = _mm_loadu_##PS(s + i);   \
            V ya, yb;                                                         \
            NT_##DIR##_##PS(ya, yb, xa, xb, cv, sv);                          \
            _mm_stream_##PS(y + i, ya);                                       \
            _mm_stream_##PS(y + i + h, yb);                                   \
        }                                                                     \
        if (L->d > 2 * h)                                                     \
            memcpy(y + 2 * h, x + 2 * h, (size_t)(L->d - 2 * h) * sizeof(T)); \
    }                                                                         \
    _mm_sfence();   /* order the streaming stores before the job completes */ \
}

DEFINE_ROPE_DUPNT(fwd, float, f32, __m128, 4, ps)
DEFINE_ROPE_DUPNT(back, float, f32, __m128, 4, ps)
DEFINE_ROPE_DUPNT(fwd, double, f64, __m128d, 2, pd)
DEFINE_ROPE_DUPNT(back, double, f64, __m128d, 2, pd)
#else
void pe_rope_dupnt_fwd_f32(const pe_rope_loop *L) { pe_rope_dup_fwd_f32(L); }
void pe_rope_dupnt_back_f32(const pe_rope_loop *L) { pe_rope_dup_back_f32(L); }
void pe_rope_dupnt_fwd_f64(const pe_rope_loop *L) { pe_rope_dup_fwd_f64(L); }
void pe_rope_dupnt_back_f64(const pe_rope_loop *L) { pe_rope_dup_back_f64(L); }
#endif

/* ------------------------------------------------------------------ */
/* rotate_half: y = concat(-x[h:], x[:h])                              */
/* ------------------------------------------------------------------ */

#define NEG_f16(v) ((uint16_t)((v) ^ 0x8000u))  /* exact, like -x */
#define NEG_f32(v) (-(v))
#define NEG_f64(v) (-(v))

#define DEFINE_ROTATE_HALF(T, SUF)                                            \
void pe_rotate_half_##SUF(const pe_unary_loop *L)                             \
{                                                                             \
    const ptrdiff_t h = L->d / 2;                                             \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const char *x = L->x + k * L->x_step;                                 \
        char *y = L->y + k * L->y_step;                                       \
        for (ptrdiff_t i = 0; i < h; i++) {                                   \
            const T lo = *(const T *)(const void *)(x + i * L->x_inner);      \
            const T hi = *(const T *)(const void *)(x + (i + h) * L->x_inner);\
            *(T *)(void *)(y + i * L->y_inner) = NEG_##SUF(hi);               \
            *(T *)(void *)(y + (i + h) * L->y_inner) = lo;                    \
        }                                                                     \
    }                                                                         \
}

DEFINE_ROTATE_HALF(uint16_t, f16)
DEFINE_ROTATE_HALF(float, f32)
DEFINE_ROTATE_HALF(double, f64)

/* ------------------------------------------------------------------ */
/* cos/sin tables                                                       */
/* ------------------------------------------------------------------ */

#define DEFINE_ROPE_TABLE(T, SUF)                                             \
void pe_rope_table_##SUF(ptrdiff_t n, const int64_t *pos, ptrdiff_t h,        \
                         const double *inv_freq, double attn, int interleaved,\
                         T *cos_out, T *sin_out)                              \
{                                                                             \
    for (ptrdiff_t k = 0; k < n; k++) {                                       \
        const double p = (double)pos[k];                                      \
        T *crow = cos_out + k * 2 * h, *srow = sin_out + k * 2 * h;           \
        for (ptrdiff_t i = 0; i < h; i++) {                                   \
            const double angle = p * inv_freq[i];                             \
            const T cv = (T)(attn * cos(angle)), sv = (T)(attn * sin(angle)); \
            if (interleaved) {                                                \
                crow[2 * i] = crow[2 * i + 1] = cv;                           \
                srow[2 * i] = srow[2 * i + 1] = sv;                           \
            } else {                                                          \
                crow[i] = crow[i + h] = cv;                                   \
                srow[i] = srow[i + h] = sv;                                   \
            }                                                                 \
        }                                                                     \
    }                                                                         \
}

DEFINE_ROPE_TABLE(float, f32)
DEFINE_ROPE_TABLE(double, f64)

/* ------------------------------------------------------------------ */
/* Drivers: the thread pool, and position-blocked grids                 */
/* ------------------------------------------------------------------ */

typedef struct { pe_rope_fn fn; const pe_rope_loop *L; } rope_range_job;

static void rope_range_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const rope_range_job *job = (const rope_range_job *)ctx;
    pe_rope_loop sub = *job->L;
    sub.n = end - begin;
    sub.x += begin * sub.x_step;
    sub.cos += begin * sub.cos_step;
    sub.sin += begin * sub.sin_step;
    sub.y += begin * sub.y_step;
    job->fn(&sub);
}

/* bytes one vector touches: x and y, and its table rows */
static ptrdiff_t rope_vector_bytes(ptrdiff_t d, ptrdiff_t r, ptrdiff_t itemsize)
{
    const ptrdiff_t b = (2 * d + 2 * r) * itemsize;
    return b > 0 ? b : 1;
}

void pe_rope_parallel(pe_rope_fn fn, const pe_rope_loop *L, ptrdiff_t itemsize)
{
    rope_range_job job = {fn, L};
    const ptrdiff_t grain =
        PE_PARALLEL_MIN_BYTES / rope_vector_bytes(L->d, L->r, itemsize) + 1;
    pe_parallel_for(L->n, grain, rope_range_task, &job);
}

typedef struct {
    pe_rope_fn fn;
    const pe_rope_grid *g;
    ptrdiff_t rows;      /* positions per block */
    ptrdiff_t blocks;    /* blocks per batch entry */
} rope_grid_job;

/* items are (b, block) pairs; each runs every head over the block */
static void rope_grid_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const rope_grid_job *job = (const rope_grid_job *)ctx;
    const pe_rope_grid *g = job->g;
    for (ptrdiff_t t = begin; t < end; t++) {
        const ptrdiff_t b = t / job->blocks;
        const ptrdiff_t s0 = (t % job->blocks) * job->rows;
        const ptrdiff_t rows = g->S - s0 < job->rows ? g->S - s0 : job->rows;
        pe_rope_loop L;
        L.n = rows;
        L.d = g->d;
        L.r = g->r;
        L.cos = g->cos + b * g->cos_b + s0 * g->cos_s;
        L.sin = g->sin + b * g->sin_b + s0 * g->sin_s;
        L.x_step = g->x_s;
        L.y_step = g->y_s;
        L.cos_step = g->cos_s;
        L.sin_step = g->sin_s;
        L.x_inner = g->x_inner;
        L.y_inner = g->y_inner;
        L.cos_inner = g->cos_inner;
        L.sin_inner = g->sin_inner;
        for (ptrdiff_t h = 0; h < g->H; h++) {
            L.x = g->x + b * g->x_b + h * g->x_h + s0 * g->x_s;
            L.y = g->y + b * g->y_b + h * g->y_h + s0 * g->y_s;
            job->fn(&L);
        }
    }
}

void pe_rope_grid_run(pe_rope_fn fn, const pe_rope_grid *g, ptrdiff_t itemsize)
{
    /* a block of table rows (cos and sin) fits in about 16 KiB of L1 */
    const ptrdiff_t row_bytes = 2 * (g->r > 0 ? g->r : 1) * itemsize;
    ptrdiff_t rows = ((ptrdiff_t)16 << 10) / row_bytes;
    rope_grid_job job;
    ptrdiff_t block_bytes;
    if (g->B <= 0 || g->H <= 0 || g->S <= 0)
        return;
    if (rows < 1)
        rows = 1;
    if (rows > g->S)
        rows = g->S;
    job.fn = fn;
    job.g = g;
    job.rows = rows;
    job.blocks = (g->S + rows - 1) / rows;
    block_bytes = g->H * rows * rope_vector_bytes(g->d, 0, itemsize);
    pe_parallel_for(g->B * job.blocks, PE_PARALLEL_MIN_BYTES / block_bytes + 1,
                    rope_grid_task, &job);
}

/*
 * Are the grid's tables duplicated halves (row[i + h] == row[i], bitwise)
 * in every row the grid reads?  Reads each table row once: 1/(B*H) of the
 * bytes of x for the usual broadcast tables.
 */
int pe_rope_tables_duplicated(const pe_rope_grid *g, ptrdiff_t itemsize)
{
    const ptrdiff_t h = g->r / 2;
    const ptrdiff_t nb = g->cos_b == 0 && g->sin_b == 0 ? 1 : g->B;
    const ptrdiff_t ns = g->cos_s == 0 && g->sin_s == 0 ? 1 : g->S;
    if (g->cos_inner != itemsize || g->sin_inner != itemsize || h == 0)
        return 0;
    for (ptrdiff_t b = 0; b < nb; b++) {
        for (ptrdiff_t s = 0; s < ns; s++) {
            const char *c = g->cos + b * g->cos_b + s * g->cos_s;
            const char *sn = g->sin + b * g->sin_b + s * g->sin_s;
            if (memcmp(c, c + h * itemsize, (size_t)(h * itemsize)) != 0 ||
                memcmp(sn, sn + h * itemsize, (size_t)(h * itemsize)) != 0)
                return 0;
        }
    }
    return 1;
}
