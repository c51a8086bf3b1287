/*
 * rope.c - rotary position embeddings: apply (forward and adjoint),
 * rotate_half, and the cos/sin tables.
 *
 * Every apply kernel runs n vectors in m groups (pe_rope_loop in
 * posemb.h); the driver pe_rope_apply, the gufunc (h,s,d),(s,r),(s,r)->
 * (h,s,d)'s loop, hands it blocks of positions x heads on the pool.  The
 * one line of maths, for a pair (a, b) of features -- (i, i + r/2) in the
 * half-split layout, (2i, 2i + 1) in the interleaved one:
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
#include <stdlib.h>
#include <string.h>

#include "posemb.h"
#include "bf16_avx2.h"
#include "rope_neon.h"

#define IDX_A_half(i, h) (i)
#define IDX_B_half(i, h) ((i) + (h))
#define IDX_A_inter(i, h) (2 * (i))
#define IDX_B_inter(i, h) (2 * (i) + 1)

#define ROT_fwd(ya, yb, xa, xb, ca, cb, sa, sb) \
    do { ya = xa * ca - xb * sa; yb = xb * cb + xa * sb; } while (0)
#define ROT_back(ya, yb, xa, xb, ca, cb, sa, sb) \
    do { ya = xa * ca + xb * sb; yb = xb * cb - xa * sa; } while (0)

#define IS_INTER_half 0
#define IS_INTER_inter 1
#define IS_BACK_fwd 0
#define IS_BACK_back 1

#define LOAD_f16(p) pe_half_to_float(*(const uint16_t *)(const void *)(p))
#define STORE_f16(p, v) (*(uint16_t *)(void *)(p) = pe_float_to_half(v))
#define LOAD_bf16(p) pe_bf16_to_float(*(const uint16_t *)(const void *)(p))
#define STORE_bf16(p, v) (*(uint16_t *)(void *)(p) = pe_float_to_bf16(v))
#define LOAD_f32(p) (*(const float *)(const void *)(p))
#define STORE_f32(p, v) (*(float *)(void *)(p) = (v))
#define LOAD_f64(p) (*(const double *)(const void *)(p))
/* the C type of a table entry */
#define TT_f16 uint16_t
#define TT_bf16 uint16_t
#define TT_f32 float
#define STORE_f64(p, v) (*(double *)(void *)(p) = (v))

int pe_rope_groups(const pe_rope_loop *L, pe_rope_fn self)
{
    if (L->m <= 1)
        return 0;
    pe_rope_loop one = *L;
    one.m = 1;
    for (ptrdiff_t o = 0; o < L->m; o++) {
        self(&one);
        one.x += L->x_outer;
        one.cos += L->cos_outer;
        one.sin += L->sin_outer;
        one.y += L->y_outer;
    }
    return 1;
}

/* fn over L's heads two at a time (the tile walk's calls to the one-pass
 * kernels, and the realigning kernels' fallback to them: see
 * rope_grid_task) */
static void rope_in_pairs(const pe_rope_loop *L, pe_rope_fn fn)
{
    pe_rope_loop two = *L;
    for (ptrdiff_t k = 0; k < L->n; k += 2) {
        two.n = L->n - k < 2 ? L->n - k : 2;
        two.x = L->x + k * L->x_step;
        two.y = L->y + k * L->y_step;
        fn(&two);
    }
}

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

#define DEFINE_ROPE_FAST(LAYOUT, DIR, T, SUF, NAME, ATTR)                     \
ATTR void NAME(const pe_rope_loop *L)                                         \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(T);                                 \
    if (pe_rope_groups(L, NAME))                                              \
        return;                                                               \
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

/* float16/bfloat16 vector kernels of the dispatched CPU level,
 * [bfloat16][interleaved][back], NULL for the scalar loop: part of the
 * dispatch table, written once by pe_rope_dispatch at import */
static pe_rope_fn rope_halfprec[2][2][2];
/* AVX-512 kernels (16 values per vector; bfloat16's 32, or 16 where the
 * run is not a multiple of 32), [bf16][inter][back]; NULL: none */
static pe_rope_fn rope_halfprec_wide[2][2][2];

/* May L's run of `run` values go 16 at a time (AVX-512)?  Where it is a
 * multiple of 16, and for float16 only in place (see the float16 AVX-512
 * kernels): the one rule for the full and the duplicated-table kernels. */
static int rope_halfprec_wide_ok(const pe_rope_loop *L, int bf16, ptrdiff_t run)
{
    return run % 16 == 0 && (bf16 || L->y == L->x);
}

/* Run L with the vector kernel of its type when the level has one and L
 * allows it (contiguous features and tables, the rotated part a multiple
 * of 8 values; 16 at a time where rope_halfprec_wide_ok): 1 when it ran
 * the whole call. */
static int rope_halfprec_vector(const pe_rope_loop *L, int bf16, int inter, int back)
{
    const pe_rope_fn fn = rope_halfprec[bf16][inter][back],
                     wide = rope_halfprec_wide[bf16][inter][back];
    const ptrdiff_t h = L->r / 2, run = inter ? 2 * h : h;
    if (fn == NULL || L->x_inner != 2 || L->y_inner != 2 || L->cos_inner != 2 ||
        L->sin_inner != 2 || h <= 0 || run % 8 != 0)
        return 0;
    (wide != NULL && rope_halfprec_wide_ok(L, bf16, run) ? wide : fn)(L);
    return 1;
}
#define IS_BF16_f16 0
#define IS_BF16_bf16 1

#define DEFINE_ROPE_HALFPREC(LAYOUT, DIR, SUF)                                \
void pe_rope_##LAYOUT##_##DIR##_##SUF(const pe_rope_loop *L)                  \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, pe_rope_##LAYOUT##_##DIR##_##SUF))                  \
        return;                                                               \
    if (rope_halfprec_vector(L, IS_BF16_##SUF, IS_INTER_##LAYOUT, IS_BACK_##DIR)) \
        return;                                                               \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const char *x = L->x + k * L->x_step;                                 \
        const char *c = L->cos + k * L->cos_step;                             \
        const char *s = L->sin + k * L->sin_step;                             \
        char *y = L->y + k * L->y_step;                                       \
        ROPE_STRIDED_BODY(LAYOUT, DIR, uint16_t, float, SUF)                  \
    }                                                                         \
}

/*
 * Each float32/float64 kernel twice: portable C (the public name), and on
 * x86-64 the same C compiled for AVX2 (which GCC vectorizes 256 bits wide;
 * "avx2" implies no FMA, so the bits are the same), picked by the dispatch.
 */
#if defined(PE_X86_SIMD)
#define PE_AVX2 __attribute__((target("avx2")))
#define DEFINE_ROPE_FAST_BOTH(LAYOUT, DIR, T, SUF)                            \
    DEFINE_ROPE_CONTIG(LAYOUT, DIR, T)                                        \
    DEFINE_ROPE_FAST(LAYOUT, DIR, T, SUF, pe_rope_##LAYOUT##_##DIR##_##SUF, ) \
    DEFINE_ROPE_FAST(LAYOUT, DIR, T, SUF, rope_##LAYOUT##_##DIR##_##SUF##_avx2, \
                     static PE_AVX2)
#else
#define DEFINE_ROPE_FAST_BOTH(LAYOUT, DIR, T, SUF)                            \
    DEFINE_ROPE_CONTIG(LAYOUT, DIR, T)                                        \
    DEFINE_ROPE_FAST(LAYOUT, DIR, T, SUF, pe_rope_##LAYOUT##_##DIR##_##SUF, )
#endif

DEFINE_ROPE_FAST_BOTH(half, fwd, float, f32)
DEFINE_ROPE_FAST_BOTH(half, fwd, double, f64)
DEFINE_ROPE_FAST_BOTH(half, back, float, f32)
DEFINE_ROPE_FAST_BOTH(half, back, double, f64)
DEFINE_ROPE_FAST_BOTH(inter, fwd, float, f32)
DEFINE_ROPE_FAST_BOTH(inter, fwd, double, f64)
DEFINE_ROPE_FAST_BOTH(inter, back, float, f32)
DEFINE_ROPE_FAST_BOTH(inter, back, double, f64)
DEFINE_ROPE_HALFPREC(half, fwd, f16)
DEFINE_ROPE_HALFPREC(half, back, f16)
DEFINE_ROPE_HALFPREC(inter, fwd, f16)
DEFINE_ROPE_HALFPREC(inter, back, f16)
DEFINE_ROPE_HALFPREC(half, fwd, bf16)
DEFINE_ROPE_HALFPREC(half, back, bf16)
DEFINE_ROPE_HALFPREC(inter, fwd, bf16)
DEFINE_ROPE_HALFPREC(inter, back, bf16)

/*
 * Half-split kernels for duplicated tables (cos[i + h] == cos[i] and
 * sin[i + h] == sin[i] for every row, as every HF-convention table has):
 * the same formula with cb = ca and sb = sa, so the same bits as the
 * full-width kernel, with 4 loads per pair instead of 6.  The driver
 * checks the duplication (rows_duplicated) and that vectors and tables
 * are contiguous.
 */
#define DEFINE_ROPE_DUP(DIR, T, SUF, NAME, ATTR)                              \
ATTR void NAME(const pe_rope_loop *L)                                         \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, NAME))                                              \
        return;                                                               \
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

#if defined(PE_X86_SIMD)
#define DEFINE_ROPE_DUP_BOTH(DIR, T, SUF)                                     \
    DEFINE_ROPE_DUP(DIR, T, SUF, rope_dup_##DIR##_##SUF, static)              \
    DEFINE_ROPE_DUP(DIR, T, SUF, rope_dup_##DIR##_##SUF##_avx2, static PE_AVX2)
#else
#define DEFINE_ROPE_DUP_BOTH(DIR, T, SUF)                                     \
    DEFINE_ROPE_DUP(DIR, T, SUF, rope_dup_##DIR##_##SUF, static)
#endif

DEFINE_ROPE_DUP_BOTH(fwd, float, f32)
DEFINE_ROPE_DUP_BOTH(fwd, double, f64)
DEFINE_ROPE_DUP_BOTH(back, float, f32)
DEFINE_ROPE_DUP_BOTH(back, double, f64)

/*
 * x86-64 kernels for duplicated tables, with explicit SSE2 (baseline) or
 * AVX2 (chosen at run time) vectors: the same mul/mul/add-or-sub per value
 * as ROT_fwd/ROT_back, so the same bits (no fused multiply-add: these are
 * separate vector operations and the build passes -ffp-contract=off).
 *
 *   *_one: one pass over each vector, loads before stores for every i, so
 *          y may be x itself (in place); plain unaligned stores.  Two
 *          vectors of each half per step: reading a row half by half in
 *          runs of one vector (lo[i], hi[i], lo[i+1], ...) starves the
 *          hardware prefetcher once the halves are 512 bytes apart.
 *          Measured on a 128 MiB array in place, 1 thread, EPYC: rows of
 *          1 KiB (float32 d=256, float64 d=128) took 11-12 ms in runs of
 *          one vector and 4.8 ms in runs of two (a C loop on one stream);
 *          in the kernel, float64 (1,32,4096,128) in place went from
 *          2.2-2.5x an in-place scale to 1.5-1.7x.
 *   *_nt:  out of place with streaming (non-temporal) stores: a plain
 *          store first reads its line (read-for-ownership), a streaming
 *          store does not.  AVX2: one half of y after the other, so each
 *          64-byte output line is written by consecutive stores; SSE2: both
 *          halves in one pass (see NT_PASSES_sse2).  Needs y, its row steps
 *          and h*itemsize aligned to the store width (16 bytes, AVX2 32:
 *          nt_align).
 *
 * Every kernel needs contiguous vectors and tables and h a multiple of the
 * 16-byte vector width (pe_rope_apply checks); features past 2h are
 * copied.
 */
#if defined(PE_X86_SIMD)
#include <immintrin.h>

#define VF_(P, OP, S) P##_##OP##_##S
#define VF(P, OP, S) VF_(P, OP, S)  /* VF(_mm256, mul, ps): _mm256_mul_ps */
/* lo = xa*c OP1 xb*s, hi = xb*c OP2 xa*s: fwd (sub, add), back (add, sub) */
#define LO_fwd sub
#define HI_fwd add
#define LO_back add
#define HI_back sub
#define VLO(P, S, DIR, xa, xb, c, s) \
    VF(P, LO_##DIR, S)(VF(P, mul, S)(xa, c), VF(P, mul, S)(xb, s))
#define VHI(P, S, DIR, xa, xb, c, s) \
    VF(P, HI_##DIR, S)(VF(P, mul, S)(xb, c), VF(P, mul, S)(xa, s))
#define LO_EXPR(P, S, DIR) \
    VLO(P, S, DIR, VF(P, loadu, S)(x + i), VF(P, loadu, S)(x + i + h), \
        VF(P, loadu, S)(c + i), VF(P, loadu, S)(s + i))
#define HI_EXPR(P, S, DIR) \
    VHI(P, S, DIR, VF(P, loadu, S)(x + i), VF(P, loadu, S)(x + i + h), \
        VF(P, loadu, S)(c + i), VF(P, loadu, S)(s + i))

#define ROW_POINTERS(T) ROW_POINTERS_T(T, T)
/* ... with tables of type TT */
#define ROW_POINTERS_T(T, TT)                                                 \
        const TT *c = (const TT *)(const void *)(L->cos + k * L->cos_step);   \
        const TT *s = (const TT *)(const void *)(L->sin + k * L->sin_step);   \
        const T *x = (const T *)(const void *)(L->x + k * L->x_step);         \
        T *y = (T *)(void *)(L->y + k * L->y_step);
#define COPY_TAIL_OF(T, x, y)                                                 \
        if (L->d > 2 * h && y != x)                                           \
            memcpy(y + 2 * h, x + 2 * h, (size_t)(L->d - 2 * h) * sizeof(T));
#define COPY_TAIL(T) COPY_TAIL_OF(T, x, y)
/*
 * The rows of a one-pass kernel SELF: L's m groups of n rows (pe_rope_loop).
 * Rows that share one table row (cos_step = sin_step = 0: the heads of a
 * position, as the driver hands them over) go two at a time when PAIR_OK,
 * PAIR_STEPS running rows x, x2 -> y, y2 by c, s (each table vector loaded
 * once for both); ROW_STEPS runs one row x -> y by c, s.  Features past 2h
 * are copied (out of place).
 *
 * A call of one such pair (the tile walk's: m positions of two heads)
 * loops over its groups itself, with L's fields read once into locals (a
 * vector store may alias any memory the compiler cannot see is private, so
 * fields read through L are read again after each store): measured through
 * pe_rope_apply from C, 1 thread, Zen 5 EPYC, (1, 32, 128, 128) float32 in
 * place, x on a line / 16 bytes past one, against the general loop below
 * with locals: 24.7-25.4 / 30.2-31.5 us -> 22.8-23.3 / 27.1-28.8 us.  Every
 * other call (the grouped and heads-inner walks' n = 4, H and 1 rows) takes
 * the general loop, one call per group: with locals there, HF's transposed
 * q in place, (1, 32, 8192, 128), one call per head and position, went
 * 4.65-4.67 -> 5.20-5.38 ms (the locals spilled to the stack).
 */
#define ONE_PASS_ROWS(SELF, T, PAIR_OK, PAIR_STEPS, ROW_STEPS)                \
    const ptrdiff_t h = L->r / 2;                                             \
    if (L->n == 2 && L->cos_step == 0 && L->sin_step == 0 && (PAIR_OK)) {     \
        const ptrdiff_t m = L->m > 1 ? L->m : 1, tail = L->d - 2 * h;         \
        const ptrdiff_t xs = L->x_step, ys = L->y_step;                       \
        const ptrdiff_t xo = L->x_outer, co = L->cos_outer;                   \
        const ptrdiff_t so = L->sin_outer, yo = L->y_outer;                   \
        const char *xg = L->x, *cg = L->cos, *sg = L->sin;                    \
        char *yg = L->y;                                                      \
        for (ptrdiff_t o = 0; o < m; o++, xg += xo, cg += co, sg += so, yg += yo) { \
            const T *c = (const T *)(const void *)cg;                         \
            const T *s = (const T *)(const void *)sg;                         \
            const T *x = (const T *)(const void *)xg;                         \
            const T *x2 = (const T *)(const void *)(xg + xs);                 \
            T *y = (T *)(void *)yg;                                           \
            T *y2 = (T *)(void *)(yg + ys);                                   \
            PAIR_STEPS                                                        \
            if (tail > 0 && y != x) {                                         \
                memcpy(y + 2 * h, x + 2 * h, (size_t)tail * sizeof(T));       \
                memcpy(y2 + 2 * h, x2 + 2 * h, (size_t)tail * sizeof(T));     \
            }                                                                 \
        }                                                                     \
        return;                                                               \
    }                                                                         \
    if (pe_rope_groups(L, SELF))                                              \
        return;                                                               \
    ptrdiff_t k = 0;                                                          \
    if (L->cos_step == 0 && L->sin_step == 0 && (PAIR_OK)) {                  \
        const T *c = (const T *)(const void *)L->cos;                         \
        const T *s = (const T *)(const void *)L->sin;                         \
        for (; k + 2 <= L->n; k += 2) {                                       \
            const T *x = (const T *)(const void *)(L->x + k * L->x_step);     \
            const T *x2 = (const T *)(const void *)(L->x + (k + 1) * L->x_step); \
            T *y = (T *)(void *)(L->y + k * L->y_step);                       \
            T *y2 = (T *)(void *)(L->y + (k + 1) * L->y_step);                \
            PAIR_STEPS                                                        \
            COPY_TAIL_OF(T, x, y)                                             \
            COPY_TAIL_OF(T, x2, y2)                                           \
        }                                                                     \
    }                                                                         \
    for (; k < L->n; k++) {                                                   \
        ROW_POINTERS(T)                                                       \
        ROW_STEPS                                                             \
        COPY_TAIL(T)                                                          \
    }

/* two vectors of each half of row x into row y, by table vectors c0, c1
 * (cos[i], cos[i + W]) and s0, s1; X0..X3 hold x's values, loaded before */
#define STORE_STEP(P, S, W, DIR, y, X0, X1, X2, X3)                           \
    VF(P, storeu, S)(y + i, VLO(P, S, DIR, X0, X2, c0, s0));                  \
    VF(P, storeu, S)(y + i + W, VLO(P, S, DIR, X1, X3, c1, s1));              \
    VF(P, storeu, S)(y + i + h, VHI(P, S, DIR, X0, X2, c0, s0));              \
    VF(P, storeu, S)(y + i + h + W, VHI(P, S, DIR, X1, X3, c1, s1));

/* one vector of each half of row x into row y at element i */
#define HALF_STEP(P, S, V, DIR, x, y, i)                                      \
            {                                                                 \
                const V c_ = VF(P, loadu, S)(c + (i)), s_ = VF(P, loadu, S)(s + (i)); \
                const V xa_ = VF(P, loadu, S)(x + (i));                       \
                const V xb_ = VF(P, loadu, S)(x + (i) + h);                   \
                VF(P, storeu, S)(y + (i), VLO(P, S, DIR, xa_, xb_, c_, s_));  \
                VF(P, storeu, S)(y + (i) + h, VHI(P, S, DIR, xa_, xb_, c_, s_)); \
            }
/* the same, 16 bytes (SSE) */
#define SSE_V_ps __m128
#define SSE_V_pd __m128d
#define HALF_STEP16(S, DIR, x, y, i) HALF_STEP(_mm, S, SSE_V_##S, DIR, x, y, i)
/*
 * AVX2 rows whose outputs lie 16 bytes past 32 (NumPy's large arrays start
 * 16 bytes past a line) start with 16 bytes of each half (SSE), so that the
 * 32-byte vectors after them lie on 32 bytes and no store splits a line;
 * the row then ends with one 32-byte and one 16-byte step per half (h is a
 * multiple of 2W where pairs run, of W otherwise).  Measured, Zen 3 EPYC
 * VM, 1 thread, float32 in place through pe_rope_apply from C (best of
 * 15), x 16 bytes past a line, before -> after (x on a line): (1, 8, 4,
 * 128) 0.84 -> 0.43 us (0.37), (1, 32, 16, 128) 7.27 -> 6.53 us (5.2-5.6);
 * (1, 32, 128, 128), from L3, 65.5 -> 65.9 us (49.8-52.7), not found why.
 * Through apply_rope, builds alternated (3 runs): (1, 32, 128, 128) in
 * place 1.55-1.58x -> 1.42-1.48x a NumPy in-place scale; beyond the cache,
 * (1, 32, 8192, 128) 9.1-9.8 -> 8.5-10.2 ms, float64 (1, 32, 4096, 128)
 * 11.5-12.0 -> 9.9-10.6 ms.  (Other levels: none; AVX-512's 64-byte vectors
 * would need 48 bytes.)  The interleaved one-pass kernels peeled the same
 * way measured no clear gain ((1, 32, 16, 128) 8.5-9.0 against 8.0-8.9 us
 * from C; 128 MiB in place 9.8-10.6 against 8.7-10.4 ms) and are not.
 */
#define ROW_PEEL_sse2(y) 0
#define ROW_PEEL_avx512f(y) 0
#define ROW_PEEL_avx2(y) (((uintptr_t)(y) & 31) == 16)
/* a pair's half-split steps: two vectors of each half of both rows (the
 * first and last steps of 16 bytes where ROW_PEEL) */
#define HALF_PAIR_STEPS(ISA, P, S, V, W, DIR)                                 \
            const int peel = ROW_PEEL_##ISA(y) && ROW_PEEL_##ISA(y2);         \
            ptrdiff_t i = 0;                                                  \
            if (peel) {                                                       \
                HALF_STEP16(S, DIR, x, y, 0)                                  \
                HALF_STEP16(S, DIR, x2, y2, 0)                                \
                i = W / 2;                                                    \
            }                                                                 \
            for (; i + 2 * W <= h; i += 2 * W) {                              \
                const V c0 = VF(P, loadu, S)(c + i), c1 = VF(P, loadu, S)(c + i + W); \
                const V s0 = VF(P, loadu, S)(s + i), s1 = VF(P, loadu, S)(s + i + W); \
                const V a0 = VF(P, loadu, S)(x + i), a1 = VF(P, loadu, S)(x + i + W); \
                const V a2 = VF(P, loadu, S)(x + i + h);                      \
                const V a3 = VF(P, loadu, S)(x + i + h + W);                  \
                const V b0 = VF(P, loadu, S)(x2 + i), b1 = VF(P, loadu, S)(x2 + i + W); \
                const V b2 = VF(P, loadu, S)(x2 + i + h);                     \
                const V b3 = VF(P, loadu, S)(x2 + i + h + W);                 \
                STORE_STEP(P, S, W, DIR, y, a0, a1, a2, a3)                   \
                STORE_STEP(P, S, W, DIR, y2, b0, b1, b2, b3)                  \
            }                                                                 \
            if (peel) {                  /* (i = h - 3W/2) */                 \
                HALF_STEP(P, S, V, DIR, x, y, i)                              \
                HALF_STEP(P, S, V, DIR, x2, y2, i)                            \
                HALF_STEP16(S, DIR, x, y, i + W)                              \
                HALF_STEP16(S, DIR, x2, y2, i + W)                            \
            }

/*
 * ISA: sse2, avx2 or avx512f; P/V/W: the vector prefix, type and width
 * (elements).  Rows sharing one table row go in pairs (ONE_PASS_ROWS).
 * Measured in place, 1
 * thread, against an in-place scale (two builds, 6 alternating runs):
 * (1, 32, 128, 128) float32, in cache, 51-62 -> 44-52 us (2.05-2.32x ->
 * 1.80-2.03x; AVX2 level 50 -> 44 us); 128 MiB float32 1.13-1.16x ->
 * 1.06-1.11x; float64 and float32 d=256 (rows of 1 KiB) the same within
 * the noise.  Four at a time (one process, 6 rounds): 1.76x against
 * 1.86x for two in cache, but 128 MiB float32 1.21x against 1.10x.
 */
#define HALF_ROW_STEPS(ISA, P, S, V, W, DIR)                                  \
            const int peel = ROW_PEEL_##ISA(y);                               \
            ptrdiff_t i = 0;                                                  \
            if (peel) {                                                       \
                HALF_STEP16(S, DIR, x, y, 0)                                  \
                i = W / 2;                                                    \
            }                                                                 \
            for (; i + 2 * W <= h; i += 2 * W) {                              \
                const V xa0 = VF(P, loadu, S)(x + i);                         \
                const V xa1 = VF(P, loadu, S)(x + i + W);                     \
                const V xb0 = VF(P, loadu, S)(x + i + h);                     \
                const V xb1 = VF(P, loadu, S)(x + i + h + W);                 \
                const V c0 = VF(P, loadu, S)(c + i), s0 = VF(P, loadu, S)(s + i); \
                const V c1 = VF(P, loadu, S)(c + i + W);                      \
                const V s1 = VF(P, loadu, S)(s + i + W);                      \
                STORE_STEP(P, S, W, DIR, y, xa0, xa1, xb0, xb1)               \
            }                                                                 \
            for (; i + W <= h; i += W)                                        \
                HALF_STEP(P, S, V, DIR, x, y, i)                              \
            if (peel)                    /* (i = h - W/2) */                  \
                HALF_STEP16(S, DIR, x, y, i)
#define DEFINE_ROPE_X86(ISA, DIR, T, SUF, P, S, V, W)                         \
__attribute__((target(#ISA)))                                                 \
static void rope_one_##ISA##_##DIR##_##SUF(const pe_rope_loop *L)             \
{                                                                             \
    ONE_PASS_ROWS(rope_one_##ISA##_##DIR##_##SUF, T, h % (2 * W) == 0,        \
                  HALF_PAIR_STEPS(ISA, P, S, V, W, DIR),                      \
                  HALF_ROW_STEPS(ISA, P, S, V, W, DIR))                       \
}

/* streaming SSE2, 16 bytes at a time: one pass, each step storing both
 * halves' vectors (two lines filled side by side); measured, Zen 5 EPYC, 1
 * thread, (1, 32, 8192, 128) float32 into np.empty_like(x) (16 bytes past
 * a line), toggled in one process against a pass per half: 6.39 -> 5.91
 * and 6.55 -> 6.33 ms (float64 (1, 32, 4096, 128) 6.66 -> 6.52, 7.13 ->
 * 7.10).  The AVX2 kernels (y on 32 bytes) were slower so: 5.51 -> 5.89,
 * 6.09 -> 6.55 ms, and keep a pass per half, 32 bytes at a time. */
#define NT_PASSES_sse2(DIR, T, S, W2)                                         \
        for (ptrdiff_t i = 0; i < h; i += W2) {                               \
            const __typeof__(VF(_mm, loadu, S)(x)) xa = VF(_mm, loadu, S)(x + i); \
            const __typeof__(xa) xb = VF(_mm, loadu, S)(x + i + h);           \
            const __typeof__(xa) cv = VF(_mm, loadu, S)(c + i);               \
            const __typeof__(xa) sv = VF(_mm, loadu, S)(s + i);               \
            VF(_mm, stream, S)(y + i, VLO(_mm, S, DIR, xa, xb, cv, sv));      \
            VF(_mm, stream, S)(y + h + i, VHI(_mm, S, DIR, xa, xb, cv, sv));  \
        }
/* one half [BASE, BASE + h) of y, 32 bytes at a time */
#define NT_HALF_avx2(DIR, S, W2, BASE, EXPR)                                  \
        for (ptrdiff_t i = 0; i < h; i += 2 * W2)                             \
            VF(_mm256, stream, S)(y + BASE + i, EXPR(_mm256, S, DIR));
#define NT_PASSES_avx2(DIR, T, S, W2)                                         \
        NT_HALF_avx2(DIR, S, W2, 0, LO_EXPR)                                  \
        NT_HALF_avx2(DIR, S, W2, h, HI_EXPR)

#define DEFINE_ROPE_X86_NT(ISA, DIR, T, SUF, S, W2)                           \
__attribute__((target(#ISA)))                                                 \
static void rope_nt_##ISA##_##DIR##_##SUF(const pe_rope_loop *L)              \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, rope_nt_##ISA##_##DIR##_##SUF))                     \
        return;                                                               \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        ROW_POINTERS(T)                                                       \
        NT_PASSES_##ISA(DIR, T, S, W2)                                        \
        COPY_TAIL(T)                                                          \
    }                                                                         \
}

#define DEFINE_ROPE_X86_ALL(DIR)                                              \
DEFINE_ROPE_X86(sse2, DIR, float, f32, _mm, ps, __m128, 4)                    \
DEFINE_ROPE_X86(sse2, DIR, double, f64, _mm, pd, __m128d, 2)                  \
DEFINE_ROPE_X86(avx2, DIR, float, f32, _mm256, ps, __m256, 8)                 \
DEFINE_ROPE_X86(avx2, DIR, double, f64, _mm256, pd, __m256d, 4)               \
DEFINE_ROPE_X86_NT(sse2, DIR, float, f32, ps, 4)                              \
DEFINE_ROPE_X86_NT(sse2, DIR, double, f64, pd, 2)                             \
DEFINE_ROPE_X86_NT(avx2, DIR, float, f32, ps, 4)                              \
DEFINE_ROPE_X86_NT(avx2, DIR, double, f64, pd, 2)

DEFINE_ROPE_X86_ALL(fwd)
DEFINE_ROPE_X86_ALL(back)

/*
 * Interleaved pairs (2i, 2i + 1), any tables: with w = swap_pairs(x),
 *   fwd:  y = x*c + (w*s) with the even products negated
 *   back: y = x*c + (w*swap_pairs(s)) with the odd products negated
 * Negating a product and adding is exactly the C formula's subtraction, so
 * the same bits as ROT_fwd/ROT_back.  x is loaded once per vector (an empty
 * asm keeps GCC from folding a second load into the swap: 1.40-1.56x of the
 * in-place scale before, 1.28-1.33x after).  x and y run in order, so streaming
 * stores fill each output line consecutively.  Needs r a multiple of the
 * 16-byte vector width.
 */
static const float inter_sign_fwd_f32[16] = {-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f,
                                             -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f,
                                             -0.0f, 0.0f, -0.0f, 0.0f};
static const float inter_sign_back_f32[16] = {0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f,
                                              0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f,
                                              0.0f, -0.0f, 0.0f, -0.0f};
static const double inter_sign_fwd_f64[8] = {-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0};
static const double inter_sign_back_f64[8] = {0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0};
#define SWAP__mm_ps(v) _mm_shuffle_ps(v, v, 0xB1)
#define SWAP__mm_pd(v) _mm_shuffle_pd(v, v, 1)
#define SWAP__mm256_ps(v) _mm256_permute_ps(v, 0xB1)
#define SWAP__mm256_pd(v) _mm256_permute_pd(v, 5)
#define SWAP__mm512_ps(v) _mm512_permute_ps(v, 0xB1)
#define SWAP__mm512_pd(v) _mm512_permute_pd(v, 0x55)
#define SWAP(P, S, v) SWAP_##P##_##S(v)
#define TSIN_fwd(P, S, v) (v)
#define TSIN_back(P, S, v) SWAP(P, S, v)
/* x*c + (swap(x) * s') ^ sign, with s' = TSIN(s) */
#define INTER_ROT(P, S, xv, cv, tsv, sign)                                    \
    VF(P, add, S)(VF(P, mul, S)(xv, cv),                                      \
                  VF(P, xor, S)(VF(P, mul, S)(SWAP(P, S, xv), tsv), sign))
#define INTER_RESULT(P, S, DIR, SUF, xv)                                      \
    INTER_ROT(P, S, xv, VF(P, loadu, S)(c + i),                               \
              TSIN_##DIR(P, S, VF(P, loadu, S)(s + i)),                       \
              VF(P, loadu, S)(inter_sign_##DIR##_##SUF))
#define INTER_EXPR(P, S, DIR, SUF) INTER_RESULT(P, S, DIR, SUF, VF(P, loadu, S)(x + i))

/* a pair's interleaved steps: one vector of both rows */
#define INTER_PAIR_STEPS(P, S, W, DIR, SUF)                                   \
            for (ptrdiff_t i = 0; i < 2 * h; i += W) {                        \
                const __typeof__(VF(P, loadu, S)(c)) sign =                   \
                    VF(P, loadu, S)(inter_sign_##DIR##_##SUF);                \
                const __typeof__(sign) cv = VF(P, loadu, S)(c + i);           \
                const __typeof__(sign) tsv = TSIN_##DIR(P, S, VF(P, loadu, S)(s + i)); \
                __typeof__(VF(P, loadu, S)(x)) xv = VF(P, loadu, S)(x + i);   \
                __typeof__(VF(P, loadu, S)(x)) xv2 = VF(P, loadu, S)(x2 + i); \
                __asm__("" : "+x"(xv), "+x"(xv2));                            \
                VF(P, storeu, S)(y + i, INTER_ROT(P, S, xv, cv, tsv, sign));  \
                VF(P, storeu, S)(y2 + i, INTER_ROT(P, S, xv2, cv, tsv, sign)); \
            }

/* one row's interleaved steps */
#define INTER_ROW_STEPS(P, S, W, DIR, SUF)                                    \
            for (ptrdiff_t i = 0; i < 2 * h; i += W) {                        \
                __typeof__(VF(P, loadu, S)(x)) xv = VF(P, loadu, S)(x + i);   \
                __asm__("" : "+x"(xv));                                       \
                VF(P, storeu, S)(y + i, INTER_RESULT(P, S, DIR, SUF, xv));    \
            }

/* one pass, plain stores (y may be x) */
#define DEFINE_INTER_ONE(ISA, DIR, T, SUF, P, S, W)                           \
__attribute__((target(#ISA)))                                                 \
static void inter_one_##ISA##_##DIR##_##SUF(const pe_rope_loop *L)            \
{                                                                             \
    /* rows sharing one table row in pairs: (1, 32, 128, 128) float32 in    \
     * place 67-68 -> 47 us, 128 MiB float32 1.14-1.27x -> 1.10-1.15x,      \
     * float64 1.43-1.56x -> 1.29-1.36x an in-place scale (two builds, 3    \
     * alternating runs) */                                                  \
    ONE_PASS_ROWS(inter_one_##ISA##_##DIR##_##SUF, T, (2 * h) % W == 0,       \
                  INTER_PAIR_STEPS(P, S, W, DIR, SUF),                        \
                  INTER_ROW_STEPS(P, S, W, DIR, SUF))                         \
}

/* streaming stores; W2 elements make 16 bytes; AVX2 32 (nt_align) */
/* two vectors per step: this 16-byte loop is bound by instructions, and one
 * vector per step ran (1, 32, 8192, 128) float32 interleaved out= (y 16
 * bytes past a line) in 5.6-6.1 or 7.5-7.7 ms, 1 thread, Zen 5 EPYC, with
 * the same machine code, as the loop fell in the library (an unrelated
 * kernel's change moved it); two per step: 6.1-6.3 ms against 6.1-6.3 ms
 * for the build before that change.  (The half-split passes measured
 * slower unrolled: 6.8 against 6.1-6.4 ms.) */
#define INTER_NT_STEP_sse2(DIR, SUF, S, I)                                    \
        {                                                                     \
            const ptrdiff_t i = (I);                                          \
            VF(_mm, stream, S)(y + i, INTER_EXPR(_mm, S, DIR, SUF));          \
        }
#define INTER_NT_sse2(DIR, SUF, S, W2)                                        \
        {                                                                     \
            ptrdiff_t j = 0;                                                  \
            for (; j + 2 * W2 <= 2 * h; j += 2 * W2) {                        \
                INTER_NT_STEP_sse2(DIR, SUF, S, j)                            \
                INTER_NT_STEP_sse2(DIR, SUF, S, j + W2)                       \
            }                                                                 \
            if (j < 2 * h)                                                    \
                INTER_NT_STEP_sse2(DIR, SUF, S, j)                            \
        }
#define INTER_NT_avx2(DIR, SUF, S, W2)                                        \
        for (ptrdiff_t i = 0; i < 2 * h; i += 2 * W2)                         \
            VF(_mm256, stream, S)(y + i, INTER_EXPR(_mm256, S, DIR, SUF));
#define DEFINE_INTER_NT(ISA, DIR, T, SUF, S, W2)                              \
__attribute__((target(#ISA)))                                                 \
static void inter_nt_##ISA##_##DIR##_##SUF(const pe_rope_loop *L)             \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, inter_nt_##ISA##_##DIR##_##SUF))                    \
        return;                                                               \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        ROW_POINTERS(T)                                                       \
        INTER_NT_##ISA(DIR, SUF, S, W2)                                       \
        COPY_TAIL(T)                                                          \
    }                                                                         \
}

#define DEFINE_INTER_ALL(DIR)                                                 \
DEFINE_INTER_ONE(sse2, DIR, float, f32, _mm, ps, 4)                           \
DEFINE_INTER_ONE(sse2, DIR, double, f64, _mm, pd, 2)                          \
DEFINE_INTER_ONE(avx2, DIR, float, f32, _mm256, ps, 8)                        \
DEFINE_INTER_ONE(avx2, DIR, double, f64, _mm256, pd, 4)                       \
DEFINE_INTER_NT(sse2, DIR, float, f32, ps, 4)                                 \
DEFINE_INTER_NT(sse2, DIR, double, f64, pd, 2)                                \
DEFINE_INTER_NT(avx2, DIR, float, f32, ps, 4)                                 \
DEFINE_INTER_NT(avx2, DIR, double, f64, pd, 2)

DEFINE_INTER_ALL(fwd)
DEFINE_INTER_ALL(back)

/*
 * float32 and float64 into a row y 16 bytes past a line, streamed 32 bytes
 * a store from y - 16 on: each store holds the high half of the output
 * vector before and the low half of this one (vperm2f128), so a row's
 * outputs, which come in address order (half-split: half by half, with
 * duplicated tables c[i], s[i] for i < h; interleaved: pair by pair, any
 * tables), fill each line by two consecutive stores, and the row's last 16
 * bytes go, in carry, to the head's next row (the grouped walk,
 * rope_grid_task).  first: the row starts the head's part of a block,
 * whose first line it shares with the block before: its first 48 bytes
 * are stored plainly.  last: it ends the part: the carried 16 bytes are
 * stored plainly.  (LO_EXPR/HI_EXPR, INTER_RESULT: the steps of the
 * streaming kernels' passes.)  Measured, Zen 3 EPYC VM, 1 thread, (1, 32,
 * S, 128) of 128 MiB, medians of 9 interleaved rounds, against the staged
 * walk into y 48 bytes past a line in the same process (3 runs): float32
 * half-split 0.71-0.93 of its time (1.08-1.25x the straight kernel into y
 * on a line), float64 0.95-0.97; 2 threads (2 runs) 0.83-0.96.
 * Interleaved (later, same VM, 3 runs): float32 0.59-0.64, float64
 * 0.74-0.91 (0.95-1.31x the kernel into y on a line, over two sets of
 * runs); 2 threads (2 runs) 0.76-0.77 and 0.77-0.82.
 */
#define REALIGN_STORE(S, W, v)                                                \
            {                                                                 \
                if (!first || j >= 2 * W)                                     \
                    _mm256_stream_##S(ya + j, _mm256_permute2f128_##S(prev, v, 0x21)); \
                else if (j == 0)                                              \
                    _mm_storeu_##S(ya + W / 2, _mm256_cast##S##256_##S##128(v)); \
                else                                                          \
                    _mm256_storeu_##S(ya + j, _mm256_permute2f128_##S(prev, v, 0x21)); \
                prev = v;                                                     \
                j += W;                                                       \
            }
#define REALIGN_STEPS_half(DIR, SUF, V, S, W)                                 \
    for (int half = 0; half < 2; half++)                                      \
        for (ptrdiff_t i = 0; i < h; i += W) {                                \
            const V v = half ? HI_EXPR(_mm256, S, DIR) : LO_EXPR(_mm256, S, DIR); \
            REALIGN_STORE(S, W, v)                                            \
        }
#define REALIGN_STEPS_inter(DIR, SUF, V, S, W)                                \
    for (ptrdiff_t i = 0; i < 2 * h; i += W) {                                \
        V xv = _mm256_loadu_##S(x + i);                                       \
        __asm__("" : "+x"(xv));                                               \
        const V v = INTER_RESULT(_mm256, S, DIR, SUF, xv);                    \
        REALIGN_STORE(S, W, v)                                                \
    }
#define DEFINE_ROPE_REALIGN(LAYOUT, DIR, SUF, T, V, S, W)                     \
__attribute__((target("avx2")))                                               \
static void LAYOUT##_realign_##DIR##_##SUF(const char *xb, char *yb, const char *cb, \
                                           const char *sb, ptrdiff_t h, char *carry, \
                                           int first, int last)              \
{                                                                             \
    const T *x = (const T *)(const void *)xb;                                 \
    const T *c = (const T *)(const void *)cb;                                 \
    const T *s = (const T *)(const void *)sb;                                 \
    T *ya = (T *)(void *)(yb - 16);    /* (on a line) */                      \
    V prev = _mm256_load_##S((const T *)(const void *)carry);                 \
    ptrdiff_t j = 0;                                                          \
    REALIGN_STEPS_##LAYOUT(DIR, SUF, V, S, W)                                 \
    if (last)                                                                 \
        _mm_storeu_##S(ya + j, _mm256_extractf128_##S(prev, 1));              \
    _mm256_store_##S((T *)(void *)carry, prev);                               \
}
#define DEFINE_ROPE_REALIGN_ALL(LAYOUT)                                       \
DEFINE_ROPE_REALIGN(LAYOUT, fwd, f32, float, __m256, ps, 8)                   \
DEFINE_ROPE_REALIGN(LAYOUT, back, f32, float, __m256, ps, 8)                  \
DEFINE_ROPE_REALIGN(LAYOUT, fwd, f64, double, __m256d, pd, 4)                 \
DEFINE_ROPE_REALIGN(LAYOUT, back, f64, double, __m256d, pd, 4)
DEFINE_ROPE_REALIGN_ALL(half)
DEFINE_ROPE_REALIGN_ALL(inter)

/*
 * AVX-512 one-pass kernels (the same operations, 64 bytes per vector: half
 * the instructions per cache line, so more lines in flight): chosen at run
 * time on CPUs with AVX-512F and DQ (vxorps on zmm is DQ), for runs that
 * are a multiple of 64 bytes.  Separate mul and add/sub instructions, as
 * above (the tests compare bits with PyTorch at every level).
 */
DEFINE_ROPE_X86(avx512f, fwd, float, f32, _mm512, ps, __m512, 16)
DEFINE_ROPE_X86(avx512f, fwd, double, f64, _mm512, pd, __m512d, 8)
DEFINE_ROPE_X86(avx512f, back, float, f32, _mm512, ps, __m512, 16)
DEFINE_ROPE_X86(avx512f, back, double, f64, _mm512, pd, __m512d, 8)
DEFINE_INTER_ONE(avx512dq, fwd, float, f32, _mm512, ps, 16)
DEFINE_INTER_ONE(avx512dq, fwd, double, f64, _mm512, pd, 8)
DEFINE_INTER_ONE(avx512dq, back, float, f32, _mm512, ps, 16)
DEFINE_INTER_ONE(avx512dq, back, double, f64, _mm512, pd, 8)

/*
 * Half-split rows of at least 1 KiB (float64 d = 128, float32 d = 256) in
 * place beyond the last-level cache (AVX-512): pairs of rows sharing one
 * table row, as HALF_PAIR_STEPS, with each step's loads of x issued before
 * the step before it stores.  The compiler may not move them there itself
 * (y may be x), and on a Zen 4 EPYC VM those early loads were what the
 * hardware needed.  Measured, 1 thread, in place from C (one process,
 * medians of 41 calls, each over an in-place scale of the same bytes timed
 * just before it, two builds' calls alternated, order swapped every round):
 * float64 (1, 32, 4096, 128), x 16 bytes past a line: the 32-byte kernels
 * 1.78-1.84x, the 64-byte ones 1.68x, these 1.51-1.54x; x on a line
 * 2.67-2.96x against 1.91-1.94x; float32 (1, 32, 4096, 256) 1.72-1.75x
 * against 1.50-1.55x (x on a line 2.65-2.66x against 1.57-1.59x); through
 * apply_rope (one process, 15 rounds) float64 2.00x against 1.59-1.67x,
 * float32 d = 256 1.69x against 1.58x; 2 threads even.  float32 rows of
 * 512 bytes (d = 128) measured no gain and keep their kernels.  Other calls
 * (one row, tiles of positions) go to the 64-byte kernels.
 */
#define DEFINE_ROPE_PIPE(DIR, T, SUF, S, V, W_)                               \
__attribute__((target("avx512f")))                                            \
static void rope_pipe_avx512f_##DIR##_##SUF(const pe_rope_loop *L)            \
{                                                                             \
    enum { W = W_ };                                                          \
    const ptrdiff_t h = L->r / 2;                                             \
    if (L->m > 1 || L->cos_step != 0 || L->sin_step != 0 || L->n % 2 != 0 ||  \
        h % (2 * W) != 0) {                                                   \
        rope_one_avx512f_##DIR##_##SUF(L);                                    \
        return;                                                               \
    }                                                                         \
    const T *c = (const T *)(const void *)L->cos;                             \
    const T *s = (const T *)(const void *)L->sin;                             \
    for (ptrdiff_t k = 0; k < L->n; k += 2) {                                 \
        const T *x = (const T *)(const void *)(L->x + k * L->x_step);         \
        const T *x2 = (const T *)(const void *)(L->x + (k + 1) * L->x_step);  \
        T *y = (T *)(void *)(L->y + k * L->y_step);                           \
        T *y2 = (T *)(void *)(L->y + (k + 1) * L->y_step);                    \
        V a0 = _mm512_loadu_##S(x), a1 = _mm512_loadu_##S(x + W);             \
        V a2 = _mm512_loadu_##S(x + h), a3 = _mm512_loadu_##S(x + h + W);     \
        V b0 = _mm512_loadu_##S(x2), b1 = _mm512_loadu_##S(x2 + W);           \
        V b2 = _mm512_loadu_##S(x2 + h), b3 = _mm512_loadu_##S(x2 + h + W);   \
        for (ptrdiff_t i = 0;; i += 2 * W) {                                  \
            const ptrdiff_t j = i + 2 * W;                                    \
            const V c0 = _mm512_loadu_##S(c + i), c1 = _mm512_loadu_##S(c + i + W); \
            const V s0 = _mm512_loadu_##S(s + i), s1 = _mm512_loadu_##S(s + i + W); \
            const V p0 = VLO(_mm512, S, DIR, a0, a2, c0, s0);                 \
            const V p1 = VLO(_mm512, S, DIR, a1, a3, c1, s1);                 \
            const V p2 = VHI(_mm512, S, DIR, a0, a2, c0, s0);                 \
            const V p3 = VHI(_mm512, S, DIR, a1, a3, c1, s1);                 \
            const V q0 = VLO(_mm512, S, DIR, b0, b2, c0, s0);                 \
            const V q1 = VLO(_mm512, S, DIR, b1, b3, c1, s1);                 \
            const V q2 = VHI(_mm512, S, DIR, b0, b2, c0, s0);                 \
            const V q3 = VHI(_mm512, S, DIR, b1, b3, c1, s1);                 \
            if (j < h) {           /* (the next step's x, before the stores) */ \
                a0 = _mm512_loadu_##S(x + j), a1 = _mm512_loadu_##S(x + j + W); \
                a2 = _mm512_loadu_##S(x + j + h), a3 = _mm512_loadu_##S(x + j + h + W); \
                b0 = _mm512_loadu_##S(x2 + j), b1 = _mm512_loadu_##S(x2 + j + W); \
                b2 = _mm512_loadu_##S(x2 + j + h), b3 = _mm512_loadu_##S(x2 + j + h + W); \
            }                                                                 \
            _mm512_storeu_##S(y + i, p0), _mm512_storeu_##S(y + i + W, p1);   \
            _mm512_storeu_##S(y + i + h, p2), _mm512_storeu_##S(y + i + h + W, p3); \
            _mm512_storeu_##S(y2 + i, q0), _mm512_storeu_##S(y2 + i + W, q1); \
            _mm512_storeu_##S(y2 + i + h, q2), _mm512_storeu_##S(y2 + i + h + W, q3); \
            if (j >= h)                                                       \
                break;                                                        \
        }                                                                     \
        COPY_TAIL_OF(T, x, y)                                                 \
        COPY_TAIL_OF(T, x2, y2)                                               \
    }                                                                         \
}
DEFINE_ROPE_PIPE(fwd, float, f32, ps, __m512, 16)
DEFINE_ROPE_PIPE(back, float, f32, ps, __m512, 16)
DEFINE_ROPE_PIPE(fwd, double, f64, pd, __m512d, 8)
DEFINE_ROPE_PIPE(back, double, f64, pd, __m512d, 8)

/*
 * The tile walk's half-split rows (two heads sharing a tile's table rows,
 * one call) where x lies past a line by other than a multiple of 32 bytes
 * (NumPy's arrays of a few MiB start 16 bytes past one): every 64-byte
 * load and store of the kernels above then spans two lines.  Here each
 * head's rows of the tile, which lie one after another, are read and
 * written as whole lines: a row's vector j is made from its lines j and
 * j + 1 (vpermt2ps / vpermt2pd by the offset o, in lanes), and each line written holds
 * the last o values of the result vector before it and the first W - o of
 * this one; the line a row shares with the next is written with the next
 * row (the last result vector carried), the run's first and last lines
 * with masks (their other lanes belong to the rows before and after,
 * perhaps to another thread's tile).  Every line is read before it is
 * written, so in place is safe.  The tables are copies of the first halves
 * of HF's duplicated rows on lines (tile_tables'; for Meta's layout, the
 * heads-inner walk's packed rows, cos_outer 0: one row for the run).  The
 * same operations as
 * the kernels above, so the same bits.  Measured, Zen 4 EPYC VM, 1 thread,
 * through apply_rope, the two kernels alternated in one process (medians
 * of 15-21 rounds of 40 calls, each call over an in-place scale of as many
 * bytes timed just before it), x 16 bytes past a line, in place, HF's
 * tables: float32 (1, 32, 128, 128) 50.4-52.4 -> 44.3-45.6 us (1.81-1.84x
 * -> 1.60-1.62x the scale; x on a line: 37.0-37.4 us), (1, 32, 256, 128)
 * 98.7 -> 90.7 us, (1, 8, 128, 128) 23.6 -> 21.7 us, 48 bytes past a line
 * 49.4 -> 45.2 us, d = 64 (1, 32, 256, 64) 51.4 -> 45.8 us; float64 d =
 * 64 (1, 32, 128, 64) 52.5 -> 45.5 us; 2 threads, (1, 32, 384, 128) 2.00x
 * -> 1.68x.  Out of place into y at x's offset: even ((1, 32, 128, 128):
 * 1.29x and 1.30x a copy in one run, 1.60x and 1.63x in another).  Not taken: rows of 8 vectors (float32
 * d = 256: 61.7 -> 73.4 us; float64 d = 128: 62.7 -> 74.0 us), x 32 bytes
 * past a line (40.4 -> 44.9 us: Zen 4 runs a 64-byte load as two 32-byte
 * halves, neither split there).  A first version with the row's step
 * count not a constant (branches and moves in the loop) was 33% slower
 * than the kernels above.  Other calls go to rope_one_avx512f.
 */
/* a run's first line's lanes (those at and past x's offset o) and its last's */
#define LINES_MASKS(MASK, W, o)                                               \
    const MASK first = (MASK)(((1u << (W)) - 1u) << (o)), last = (MASK)((1u << (o)) - 1u);
/* head A's part of step j of row p (DEFINE_ROPE_LINES) */
#define LINES_STEP(DIR, S, V, A)                                              \
    {                                                                         \
        const V lo_next = _mm512_loadu_##S(xa##A + (j + 1) * W);              \
        const V hi_next = p == m - 1 && j == hv - 1                           \
            ? _mm512_maskz_loadu_##S(last, xa##A + 2 * h)                     \
            : _mm512_loadu_##S(xa##A + h + (j + 1) * W);                      \
        const V xl = _mm512_permutex2var_##S(lo_line##A, in_idx, lo_next);    \
        const V xh = _mm512_permutex2var_##S(hi_line##A, in_idx, hi_next);    \
        const V rl = VLO(_mm512, S, DIR, xl, xh, cv, sv);                     \
        const V rh = VHI(_mm512, S, DIR, xl, xh, cv, sv);                     \
        const V ol = _mm512_permutex2var_##S(lo_prev##A, out_idx, rl);        \
        if (p == 0 && j == 0)                                                 \
            _mm512_mask_storeu_##S(ya##A, first, ol);                         \
        else                                                                  \
            _mm512_storeu_##S(ya##A + j * W, ol);                             \
        if (j == 0)                                                           \
            hi_first##A = rh;                                                 \
        else                                                                  \
            _mm512_storeu_##S(ya##A + h + j * W,                              \
                              _mm512_permutex2var_##S(hi_prev##A, out_idx, rh)); \
        lo_prev##A = rl;                                                      \
        hi_prev##A = rh;                                                      \
        lo_line##A = lo_next;                                                 \
        hi_line##A = hi_next;                                                 \
    }
/* head A's row start, row end, and end of its rows */
#define LINES_ROW_START(S, V, A)                                              \
    V lo_line##A = line##A, hi_line##A = _mm512_loadu_##S(xa##A + h);         \
    V lo_prev##A = carry##A, hi_prev##A = carry##A, hi_first##A = carry##A;
#define LINES_ROW_END(S, A)                                                   \
    _mm512_storeu_##S(ya##A + h, _mm512_permutex2var_##S(lo_prev##A, out_idx, hi_first##A)); \
    carry##A = hi_prev##A;                                                    \
    line##A = hi_line##A;                                                     \
    xa##A += 2 * h;                                                           \
    ya##A += 2 * h;
#define LINES_HEAD(T, S, V, A, K)                                              \
    const T *xa##A = (const T *)(const void *)(L->x + (K) * L->x_step) - o;   \
    T *ya##A = (T *)(void *)(L->y + (K) * L->y_step) - o;                     \
    V line##A = _mm512_maskz_loadu_##S(first, xa##A);   /* row 0's line 0 */  \
    V carry##A = _mm512_setzero_##S();   /* the row before's last result */
#define LINES_HEAD_END(S, A)                                                  \
    /* the last row's last o values, in the line the next row begins */      \
    _mm512_mask_storeu_##S(ya##A, last, _mm512_permutex2var_##S(carry##A, out_idx, carry##A));
#define DEFINE_ROPE_LINES(DIR, T, SUF, S, V, W_, MASK)                        \
__attribute__((target("avx512f"), always_inline))                             \
static inline void rope_lines_rows_##DIR##_##SUF(const pe_rope_loop *L, ptrdiff_t o,  \
        ptrdiff_t hv, __m512i in_idx, __m512i out_idx, MASK first, MASK last) \
{                                                                             \
    enum { W = W_ };                                                          \
    const ptrdiff_t h = hv * W, m = L->m > 1 ? L->m : 1;                      \
    ptrdiff_t k = 0;                                                          \
    for (; k + 2 <= L->n; k += 2) {     /* two heads, sharing table loads */  \
        LINES_HEAD(T, S, V, 0, k)                                             \
        LINES_HEAD(T, S, V, 1, k + 1)                                         \
        const char *cg = L->cos, *sg = L->sin;                                \
        for (ptrdiff_t p = 0; p < m; p++, cg += L->cos_outer, sg += L->sin_outer) { \
            const T *c = (const T *)(const void *)cg;                         \
            const T *s = (const T *)(const void *)sg;                         \
            LINES_ROW_START(S, V, 0)                                          \
            LINES_ROW_START(S, V, 1)                                          \
            for (ptrdiff_t j = 0; j < hv; j++) {                              \
                const V cv = _mm512_load_##S(c + j * W), sv = _mm512_load_##S(s + j * W); \
                LINES_STEP(DIR, S, V, 0)                                      \
                LINES_STEP(DIR, S, V, 1)                                      \
            }                                                                 \
            LINES_ROW_END(S, 0)                                               \
            LINES_ROW_END(S, 1)                                               \
        }                                                                     \
        LINES_HEAD_END(S, 0)                                                  \
        LINES_HEAD_END(S, 1)                                                  \
    }                                                                         \
    for (; k < L->n; k++) {                                                   \
        LINES_HEAD(T, S, V, 0, k)                                             \
        const char *cg = L->cos, *sg = L->sin;                                \
        for (ptrdiff_t p = 0; p < m; p++, cg += L->cos_outer, sg += L->sin_outer) { \
            const T *c = (const T *)(const void *)cg;                         \
            const T *s = (const T *)(const void *)sg;                         \
            LINES_ROW_START(S, V, 0)                                          \
            for (ptrdiff_t j = 0; j < hv; j++) {                              \
                const V cv = _mm512_load_##S(c + j * W), sv = _mm512_load_##S(s + j * W); \
                LINES_STEP(DIR, S, V, 0)                                      \
            }                                                                 \
            LINES_ROW_END(S, 0)                                               \
        }                                                                     \
        LINES_HEAD_END(S, 0)                                                  \
    }                                                                         \
}                                                                             \
__attribute__((target("avx512f")))                                            \
static void rope_lines_avx512f_##DIR##_##SUF(const pe_rope_loop *L)           \
{                                                                             \
    enum { W = W_ };                                                          \
    const ptrdiff_t h = L->r / 2, sz = (ptrdiff_t)sizeof(T);                  \
    const ptrdiff_t o = (ptrdiff_t)(((uintptr_t)L->x & 63u) / sizeof(T));     \
    if (L->cos_step != 0 || L->sin_step != 0 || L->r != L->d ||                \
        L->x_outer != L->d * sz || L->y_outer != L->d * sz ||       \
        L->x_inner != sz || L->y_inner != sz || L->cos_inner != sz ||         \
        L->sin_inner != sz || ((uintptr_t)L->x & (sizeof(T) - 1)) != 0 ||     \
        ((uintptr_t)L->x & 31u) == 0 || (h != 2 * W && h != 4 * W) ||          \
        (((uintptr_t)L->x - (uintptr_t)L->y) & 63u) != 0 ||                    \
        L->x_step % 64 != 0 || L->y_step % 64 != 0 ||                         \
        ((uintptr_t)L->cos & 63u) != 0 || ((uintptr_t)L->sin & 63u) != 0 ||   \
        L->cos_outer % 64 != 0 || L->sin_outer % 64 != 0) {                   \
        rope_in_pairs(L, rope_one_avx512f_##DIR##_##SUF);                     \
        return;                                                               \
    }                                                                         \
    const ptrdiff_t hv = h / W;                                              \
    const __m512i in_idx = LINES_INDEX_##S(o);        /* lane i: i + o */     \
    const __m512i out_idx = LINES_INDEX_##S(W - o);   /* lane i: i + W - o */ \
    LINES_MASKS(MASK, W, o)                                                   \
    if (hv == 2)        /* (constant counts: the steps unrolled, no branches) */ \
        rope_lines_rows_##DIR##_##SUF(L, o, 2, in_idx, out_idx, first, last);  \
    else                                                                      \
        rope_lines_rows_##DIR##_##SUF(L, o, 4, in_idx, out_idx, first, last);  \
}
#define LINES_INDEX_ps(a)                                                     \
    _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), \
                     _mm512_set1_epi32((int)(a)))
#define LINES_INDEX_pd(a)                                                     \
    _mm512_add_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi64((long long)(a)))
DEFINE_ROPE_LINES(fwd, float, f32, ps, __m512, 16, __mmask16)
DEFINE_ROPE_LINES(back, float, f32, ps, __m512, 16, __mmask16)
DEFINE_ROPE_LINES(fwd, double, f64, pd, __m512d, 8, __mmask8)
DEFINE_ROPE_LINES(back, double, f64, pd, __m512d, 8, __mmask8)

/*
 * The tile walk's interleaved rows where x lies 16 or 48 bytes past a line
 * (as DEFINE_ROPE_LINES for half-split rows): a pair's two values are
 * neighbours, so each head's rows of the tile, one after another, are a
 * run of whole lines whose lanes meet the same lanes of the tables' rows,
 * which tile_tables placed at x's offset within a line for it.  The
 * run's first and last lines, shared with the rows before and after, are
 * read and written with masks.  The same operations as inter_one, so the
 * same bits.  Measured, Zen 4 EPYC VM, 1 thread, through apply_rope, the
 * two kernels alternated in one process (medians of 15-21 rounds of 40
 * calls, each over an in-place scale timed just before it), x 16 bytes
 * past a line, in place: float32 (1, 32, 128, 128) 51.4-54.5 -> 41.0-42.0
 * us (1.87x -> 1.50-1.51x the scale), 48 bytes past 51.3 -> 41.7 us,
 * (1, 32, 256, 128) 103.9 -> 82.5 us, d = 256 (1, 32, 64, 256) 51.7 ->
 * 41.0 us; float64 (1, 32, 64, 128) 52.4 -> 41.5 us; 2 threads (1, 32,
 * 384, 128) 106.7 -> 83.5 us; out of place into y at x's offset 65.6 ->
 * 61.7 us (1.44x -> 1.36x a copy).  x 32 bytes past a line keeps
 * inter_one (43.8 us, as x on a line: no split halves on Zen 4).  Other
 * calls go to inter_one.
 */
/* inter_lines: line t of the run at xp into yp, lanes mk (the tables' too) */
#define INTER_LINE_MASKED(DIR, S, V, mk, t, xp, yp)                           \
    {                                                                         \
        const V cv_ = _mm512_maskz_loadu_##S(mk, c + (t) * W);                \
        const V tsv_ = TSIN_##DIR(_mm512, S, _mm512_maskz_loadu_##S(mk, s + (t) * W)); \
        _mm512_mask_storeu_##S(yp + (t) * W, mk, INTER_ROT(_mm512, S,          \
            _mm512_maskz_loadu_##S(mk, xp + (t) * W), cv_, tsv_, sign));       \
    }
#define DEFINE_INTER_LINES(DIR, T, SUF, S, V, W_, MASK)                       \
__attribute__((target("avx512f,avx512dq")))                                   \
static void inter_lines_avx512dq_##DIR##_##SUF(const pe_rope_loop *L)         \
{                                                                             \
    enum { W = W_ };                                                          \
    const ptrdiff_t sz = (ptrdiff_t)sizeof(T), row = L->d * sz;               \
    const uintptr_t xo = (uintptr_t)L->x & 63u;                               \
    const ptrdiff_t o = (ptrdiff_t)(xo / sizeof(T));                          \
    if (L->cos_step != 0 || L->sin_step != 0 || L->r != L->d || row % 64 != 0 || \
        L->x_outer != row || L->y_outer != row || L->cos_outer != row ||      \
        L->sin_outer != row || L->x_inner != sz || L->y_inner != sz ||        \
        L->cos_inner != sz || L->sin_inner != sz || (xo & 31u) == 0 ||        \
        xo % (2 * sizeof(T)) != 0 || (((uintptr_t)L->y & 63u) != xo) ||       \
        (((uintptr_t)L->cos & 63u) != xo) || (((uintptr_t)L->sin & 63u) != xo) || \
        L->x_step % 64 != 0 || L->y_step % 64 != 0) {                         \
        rope_in_pairs(L, inter_one_avx512dq_##DIR##_##SUF);                   \
        return;                                                               \
    }                                                                         \
    const ptrdiff_t lines = (L->m > 1 ? L->m : 1) * L->d / W;  /* + 1 */      \
    LINES_MASKS(MASK, W, o)                                                   \
    const V sign = _mm512_loadu_##S(inter_sign_##DIR##_##SUF);                \
    const T *c = (const T *)(const void *)L->cos - o;                         \
    const T *s = (const T *)(const void *)L->sin - o;                         \
    ptrdiff_t k = 0;                                                          \
    for (; k + 2 <= L->n; k += 2) {     /* two heads, sharing table loads */  \
        const T *xa = (const T *)(const void *)(L->x + k * L->x_step) - o;    \
        const T *xb = (const T *)(const void *)(L->x + (k + 1) * L->x_step) - o; \
        T *ya = (T *)(void *)(L->y + k * L->y_step) - o;                      \
        T *yb = (T *)(void *)(L->y + (k + 1) * L->y_step) - o;                \
        INTER_LINE_MASKED(DIR, S, V, first, 0, xa, ya)                        \
        INTER_LINE_MASKED(DIR, S, V, first, 0, xb, yb)                        \
        for (ptrdiff_t t = 1; t < lines; t++) {                               \
            const V cv = _mm512_loadu_##S(c + t * W);                         \
            const V tsv = TSIN_##DIR(_mm512, S, _mm512_loadu_##S(s + t * W)); \
            V xv = _mm512_loadu_##S(xa + t * W), xv2 = _mm512_loadu_##S(xb + t * W); \
            __asm__("" : "+v"(xv), "+v"(xv2));                                \
            _mm512_storeu_##S(ya + t * W, INTER_ROT(_mm512, S, xv, cv, tsv, sign)); \
            _mm512_storeu_##S(yb + t * W, INTER_ROT(_mm512, S, xv2, cv, tsv, sign)); \
        }                                                                     \
        INTER_LINE_MASKED(DIR, S, V, last, lines, xa, ya)                     \
        INTER_LINE_MASKED(DIR, S, V, last, lines, xb, yb)                     \
    }                                                                         \
    for (; k < L->n; k++) {                                                   \
        const T *xa = (const T *)(const void *)(L->x + k * L->x_step) - o;    \
        T *ya = (T *)(void *)(L->y + k * L->y_step) - o;                      \
        for (ptrdiff_t t = 0; t <= lines; t++) {                              \
            const MASK mk = t == 0 ? first : t == lines ? last : (MASK)((1u << W) - 1u); \
            INTER_LINE_MASKED(DIR, S, V, mk, t, xa, ya)                       \
        }                                                                     \
    }                                                                         \
}
DEFINE_INTER_LINES(fwd, float, f32, ps, __m512, 16, __mmask16)
DEFINE_INTER_LINES(back, float, f32, ps, __m512, 16, __mmask16)
DEFINE_INTER_LINES(fwd, double, f64, pd, __m512d, 8, __mmask8)
DEFINE_INTER_LINES(back, double, f64, pd, __m512d, 8, __mmask8)

/* [interleaved][back][f64] */
static const pe_rope_fn rope_one_avx512[2][2][2] = {
    {{rope_one_avx512f_fwd_f32, rope_one_avx512f_fwd_f64},
     {rope_one_avx512f_back_f32, rope_one_avx512f_back_f64}},
    {{inter_one_avx512dq_fwd_f32, inter_one_avx512dq_fwd_f64},
     {inter_one_avx512dq_back_f32, inter_one_avx512dq_back_f64}}};

/* [interleaved][back][f64][avx2] */
static const pe_rope_fn rope_one_x86[2][2][2][2] = {
    {{{rope_one_sse2_fwd_f32, rope_one_avx2_fwd_f32},
      {rope_one_sse2_fwd_f64, rope_one_avx2_fwd_f64}},
     {{rope_one_sse2_back_f32, rope_one_avx2_back_f32},
      {rope_one_sse2_back_f64, rope_one_avx2_back_f64}}},
    {{{inter_one_sse2_fwd_f32, inter_one_avx2_fwd_f32},
      {inter_one_sse2_fwd_f64, inter_one_avx2_fwd_f64}},
     {{inter_one_sse2_back_f32, inter_one_avx2_back_f32},
      {inter_one_sse2_back_f64, inter_one_avx2_back_f64}}}};
static const pe_rope_fn rope_nt_x86[2][2][2][2] = {
    {{{rope_nt_sse2_fwd_f32, rope_nt_avx2_fwd_f32},
      {rope_nt_sse2_fwd_f64, rope_nt_avx2_fwd_f64}},
     {{rope_nt_sse2_back_f32, rope_nt_avx2_back_f32},
      {rope_nt_sse2_back_f64, rope_nt_avx2_back_f64}}},
    {{{inter_nt_sse2_fwd_f32, inter_nt_avx2_fwd_f32},
      {inter_nt_sse2_fwd_f64, inter_nt_avx2_fwd_f64}},
     {{inter_nt_sse2_back_f32, inter_nt_avx2_back_f32},
      {inter_nt_sse2_back_f64, inter_nt_avx2_back_f64}}}};

/*
 * float16 RoPE with F16C conversion (x86-64 CPUs with AVX2 and F16C,
 * checked at run time): 8 values at a time are widened exactly to float32,
 * rotated with the float32 formula (the same mul/mul/add-or-sub as
 * ROT_fwd/ROT_back, no fused multiply-add), and rounded once to float16,
 * to nearest even (the imm8 of vcvtps2ph), as pe_float_to_half does: the
 * same bits as the scalar loop.  Any row steps; features and table entries
 * contiguous (2 bytes apart).  Half-split needs h a multiple of 8,
 * interleaved 2h a multiple of 8; features past 2h are copied.  The two
 * generators below serve bfloat16 too, with its own LOAD and STORE.
 */
#define F16_LOAD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define F16_STORE(p, v) \
    _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))

/* float16 or bfloat16, duplicated half-split tables, any h, one value at a
 * time: the 8-wide dup kernels' fallback when h is not a multiple of 8.
 * Like every
 * dup kernel it reads only the first half of each table row (the grouped
 * walk may pack just those: rows_duplicated). */
#define DEFINE_HALFPREC_DUP_SCALAR(SUF, DIR) DEFINE_HALFPREC_DUP_SCALAR_T(SUF, SUF, DIR, SUF)
/* ... NAME##_dup_scalar_##DIR, tables of TSUF (f16, bf16, or f32: float32
 * copies, see rows_duplicated) */
#define DEFINE_HALFPREC_DUP_SCALAR_T(NAME, SUF, DIR, TSUF)                   \
static void NAME##_dup_scalar_##DIR(const pe_rope_loop *L)                    \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, NAME##_dup_scalar_##DIR))                           \
        return;                                                               \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        ROW_POINTERS_T(uint16_t, TT_##TSUF)                                   \
        for (ptrdiff_t i = 0; i < h; i++) {                                   \
            const float xa = LOAD_##SUF(x + i), xb = LOAD_##SUF(x + i + h);  \
            const float ca = LOAD_##TSUF(c + i), sa = LOAD_##TSUF(s + i);    \
            float ya, yb;                                                     \
            ROT_##DIR(ya, yb, xa, xb, ca, ca, sa, sa);                        \
            STORE_##SUF(y + i, ya);                                           \
            STORE_##SUF(y + i + h, yb);                                       \
        }                                                                     \
        COPY_TAIL(uint16_t)                                                   \
    }                                                                         \
}
DEFINE_HALFPREC_DUP_SCALAR(f16, fwd)
DEFINE_HALFPREC_DUP_SCALAR(f16, back)
DEFINE_HALFPREC_DUP_SCALAR(bf16, fwd)
DEFINE_HALFPREC_DUP_SCALAR(bf16, back)
DEFINE_HALFPREC_DUP_SCALAR_T(f16_ft, f16, fwd, f32)
DEFINE_HALFPREC_DUP_SCALAR_T(f16_ft, f16, back, f32)

/* NAME##_half_##DIR: any tables; NAME##_dup_##DIR: duplicated half-split
 * tables (cb = ca, sb = sa: the same bits with 4 of the 6 loads and
 * conversions), or the kernel OTHER where USE does not hold.
 * Measured, float16 in place, 1 thread, 3 interleaved rounds: (1, 32, 128,
 * 128) 0.059-0.060 -> 0.052-0.054 ms; (1, 32, 16384, 128) 8.4-8.9 -> 8.3-9.4
 * ms (the 9.4 in a round where the in-place scale was slow too).  The
 * bfloat16 ones (below) serve bfloat16 the same way. */
#define HALFPREC_HALF_BODY(P, V, W, LOAD, STORE, DIR, DUP, K0)                \
    HALFPREC_HALF_BODY_T(P, V, W, LOAD, STORE, DIR, DUP, K0, uint16_t, LOAD)
/* ... with tables of C type TT, loaded by TLOAD */
#define HALFPREC_HALF_BODY_T(P, V, W, LOAD, STORE, DIR, DUP, K0, TT, TLOAD)   \
    for (ptrdiff_t k = K0; k < L->n; k++) {                                   \
        ROW_POINTERS_T(uint16_t, TT)                                          \
        for (ptrdiff_t i = 0; i < h; i += W) {                                \
            const V xa = LOAD(x + i), xb = LOAD(x + i + h);                   \
            const V ca = TLOAD(c + i), cb = DUP ? ca : TLOAD(c + i + h);      \
            const V sa = TLOAD(s + i), sb = DUP ? sa : TLOAD(s + i + h);      \
            V ya, yb;                                                         \
            HP_ROT_##DIR(P, ya, yb, xa, xb, ca, cb, sa, sb);                  \
            STORE(y + i, ya);                                                 \
            STORE(y + i + h, yb);                                             \
        }                                                                     \
        COPY_TAIL(uint16_t)                                                   \
    }
#define DEFINE_HALFPREC_HALF(NAME, TARGET, P, V, W, LOAD, STORE, DIR)        \
__attribute__((target(TARGET)))                                               \
static void NAME##_half_##DIR(const pe_rope_loop *L)                          \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, NAME##_half_##DIR))                                 \
        return;                                                               \
    HALFPREC_HALF_BODY(P, V, W, LOAD, STORE, DIR, 0, 0)                       \
}
#define DEFINE_HALFPREC_DUP(NAME, TARGET, P, V, W, LOAD, STORE, DIR, USE, OTHER) \
    DEFINE_HALFPREC_DUP_T(NAME, TARGET, P, V, W, LOAD, STORE, DIR, USE, OTHER, uint16_t, LOAD)
/* ... with tables of C type TT, loaded by TLOAD (float32 copies of the
 * float16 tables: rows_duplicated) */
#define DEFINE_HALFPREC_DUP_T(NAME, TARGET, P, V, W, LOAD, STORE, DIR, USE, OTHER, TT, TLOAD) \
__attribute__((target(TARGET)))                                               \
static void NAME##_dup_##DIR(const pe_rope_loop *L)                           \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, NAME##_dup_##DIR))                                  \
        return;                                                               \
    if (!(USE)) {                                                             \
        OTHER(L);                                                             \
        return;                                                               \
    }                                                                         \
    ptrdiff_t k0 = 0;                                                         \
    if (L->cos_step == 0 && L->sin_step == 0) {                               \
        /* rows sharing one table row (the heads of a position), two at a \
         * time: each table vector loaded and widened once for both.       \
         * Measured, 1 thread, Zen 5 EPYC, in place, AVX-512 level: (1, 32, \
         * 128, 128) 31.4-31.7 -> 25.3-25.4 us (mean over x at 0, 16, 32   \
         * and 48 bytes past a line); (1, 32, 16384, 128) 5.8-6.0 ->        \
         * 5.4-5.7 ms (3 alternating runs, against an in-place scale of     \
         * 4.3-5.0 ms) */                                                    \
        const TT *c = (const TT *)(const void *)L->cos;                       \
        const TT *s = (const TT *)(const void *)L->sin;                       \
        const ptrdiff_t n = L->n, xs = L->x_step, ys = L->y_step;             \
        ptrdiff_t k = 0;                                                      \
        for (; k + 2 <= n; k += 2) {                                          \
            const uint16_t *x = (const uint16_t *)(const void *)(L->x + k * xs); \
            const uint16_t *x2 = (const uint16_t *)(const void *)(L->x + (k + 1) * xs); \
            uint16_t *y = (uint16_t *)(void *)(L->y + k * ys);                \
            uint16_t *y2 = (uint16_t *)(void *)(L->y + (k + 1) * ys);         \
            for (ptrdiff_t i = 0; i < h; i += W) {                            \
                const V ca = TLOAD(c + i), sa = TLOAD(s + i);                 \
                const V xa = LOAD(x + i), xb = LOAD(x + i + h);               \
                const V za = LOAD(x2 + i), zb = LOAD(x2 + i + h);             \
                V ya, yb, wa, wb;                                             \
                HP_ROT_##DIR(P, ya, yb, xa, xb, ca, ca, sa, sa);              \
                HP_ROT_##DIR(P, wa, wb, za, zb, ca, ca, sa, sa);              \
                STORE(y + i, ya);                                             \
                STORE(y + i + h, yb);                                         \
                STORE(y2 + i, wa);                                            \
                STORE(y2 + i + h, wb);                                        \
            }                                                                 \
            COPY_TAIL(uint16_t)                                               \
            COPY_TAIL_OF(uint16_t, x2, y2)                                    \
        }                                                                     \
        k0 = k;                                                               \
    }                                                                         \
    HALFPREC_HALF_BODY_T(P, V, W, LOAD, STORE, DIR, 1, k0, TT, TLOAD)         \
}
#define HP_ROT_fwd(P, ya, yb, xa, xb, ca, cb, sa, sb)                         \
    do { ya = VF(P, sub, ps)(VF(P, mul, ps)(xa, ca), VF(P, mul, ps)(xb, sa)); \
         yb = VF(P, add, ps)(VF(P, mul, ps)(xb, cb), VF(P, mul, ps)(xa, sb)); } while (0)
#define HP_ROT_back(P, ya, yb, xa, xb, ca, cb, sa, sb)                        \
    do { ya = VF(P, add, ps)(VF(P, mul, ps)(xa, ca), VF(P, mul, ps)(xb, sb)); \
         yb = VF(P, sub, ps)(VF(P, mul, ps)(xb, cb), VF(P, mul, ps)(xa, sa)); } while (0)
DEFINE_HALFPREC_HALF(f16c, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, fwd)
DEFINE_HALFPREC_HALF(f16c, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, back)
DEFINE_HALFPREC_DUP(f16c, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, fwd,
                   h % 8 == 0, f16_dup_scalar_fwd)
DEFINE_HALFPREC_DUP(f16c, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, back,
                   h % 8 == 0, f16_dup_scalar_back)

/* float16 and bfloat16 out of place with streaming stores (the *_nt
 * kernels' reasons): the dup kernels (DEFINE_HALFPREC_DUP) storing through
 * 16-byte streaming stores, so y's rows must lie on 16 bytes
 * (pe_rope_apply checks); rows the wide loop does not take go to the
 * plain-store dup kernel.  Measured, 1 thread, Zen 5
 * EPYC, (1, 32, 16384, 128) into a reused np.empty_like(x) (16 bytes past a
 * line), against the dup kernels' plain stores: float16 (F16C, 8 wide)
 * 7.8-8.1 -> 6.5-7.1 ms in 3 alternating runs (a streaming copy of the
 * same bytes 5.0-5.6 ms); bfloat16 (AVX-512, 16 wide then; now 32 wide:
 * bf16x32_nt) 8.2-8.5 -> 7.2-7.4 ms (2 and 3 runs).  bfloat16 8 wide (AVX2)
 * was slower so, at POSEMB_CPU=avx2: 12.4-12.5 -> 13.1-13.5 ms (its
 * conversions bind it), so the AVX2 level has none. */
#define F16_STREAM(p, v) \
    _mm_stream_si128((__m128i *)(void *)(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
DEFINE_HALFPREC_DUP(f16c_nt, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STREAM, fwd,
                   h % 8 == 0, f16c_dup_fwd)
DEFINE_HALFPREC_DUP(f16c_nt, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STREAM, back,
                   h % 8 == 0, f16c_dup_back)

/* the float16 dup kernels reading float32 tables, the grouped walk's
 * widened copy (rows_duplicated): no conversion of table values in the
 * loop.  F32_LOAD8/16: 8 or 16 float32 table values */
#define F32_LOAD8(p) _mm256_loadu_ps((const float *)(const void *)(p))
#define F32_LOAD16(p) _mm512_loadu_ps((const float *)(const void *)(p))
DEFINE_HALFPREC_DUP_T(f16c_ft, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, fwd,
                      h % 8 == 0, f16_ft_dup_scalar_fwd, float, F32_LOAD8)
DEFINE_HALFPREC_DUP_T(f16c_ft, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, back,
                      h % 8 == 0, f16_ft_dup_scalar_back, float, F32_LOAD8)

/* interleaved: y = x*c + (swap(x) * s') with the even (fwd) or odd (back)
 * products negated, s' = s (fwd) or swap(s) (back): INTER_RESULT's maths */
#define DEFINE_HALFPREC_INTER(NAME, TARGET, P, V, W, LOAD, STORE, DIR)       \
__attribute__((target(TARGET)))                                               \
static void NAME##_inter_##DIR(const pe_rope_loop *L)                         \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, NAME##_inter_##DIR))                                \
        return;                                                               \
    const V sign = VF(P, loadu, ps)(inter_sign_##DIR##_f32);                  \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        ROW_POINTERS(uint16_t)                                                \
        for (ptrdiff_t i = 0; i < 2 * h; i += W) {                            \
            const V xv = LOAD(x + i);                                         \
            const V sv = TSIN_##DIR(P, ps, LOAD(s + i));                      \
            const V p = VF(P, xor, ps)(VF(P, mul, ps)(SWAP(P, ps, xv), sv), sign); \
            STORE(y + i, VF(P, add, ps)(VF(P, mul, ps)(xv, LOAD(c + i)), p)); \
        }                                                                     \
        COPY_TAIL(uint16_t)                                                   \
    }                                                                         \
}
DEFINE_HALFPREC_INTER(f16c, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, fwd)
DEFINE_HALFPREC_INTER(f16c, "avx2,f16c", _mm256, __m256, 8, F16_LOAD, F16_STORE, back)

/*
 * bfloat16, 16 (AVX2) or 32 (AVX-512F) values per vector, with no shuffle:
 * each 32-bit lane holds two bfloat16 values, which are exactly the top
 * halves of two float32s, so the even-indexed values widen with one shift
 * (lane << 16) and the odd-indexed ones with one mask (lane & 0xffff0000).
 * The rotation is elementwise, so x, cos and sin split the same way meet
 * lane by lane: a bf16xW value is that pair of float32 vectors, with the
 * few operations the half-split loops (HALFPREC_HALF_BODY,
 * DEFINE_HALFPREC_DUP) use.  In the interleaved layout the split is the
 * layout's own pairs (x[2i] even, x[2i + 1] odd): no swap either.
 * Rounding is pe_float_to_bf16's rule (add 0x7fff plus the kept lsb, keep
 * the top 16 bits) with no test for NaN: every value rounded here is a
 * product or a sum of bfloat16 values (x and both tables), and an x86
 * multiply or add returns one of its NaN operands made quiet, or the
 * default NaN 0xffc00000, so a NaN's low 16 bits are 0 and its top 16
 * already carry the quiet bit 0x40: adding at most 0x8000 leaves them as
 * pe_float_to_bf16 makes them.  The odd lanes keep their top halves and
 * the even ones' are shifted below them.  The earlier kernels (8 and 16
 * wide) spent a widening shuffle on every load and a narrowing one on
 * every store.
 * Measured, 1 thread, Zen 5 EPYC, HF's tables, against those kernels in
 * alternating processes: AVX-512, (1, 32, 128, 128) in place 48 -> 40 us;
 * (1, 32, 16384, 128) in place 5.9-6.1 -> 5.2-5.7 ms, into a reused output
 * (streaming stores) 7.0-7.5 -> 6.2-7.0 ms (a plain copy 6.5-7.0 ms).  At
 * POSEMB_CPU=avx2: 93 -> 56 us (64 us with a NaN test); 11.8-12.4 -> 8.6
 * ms in place, 12.0-12.4 -> 9.2-9.3 ms into a reused output (with a NaN
 * test).  Tried at AVX-512 and not kept: the lsb's bias chosen with mask
 * registers, even.  (The AVX512_BF16 rounding, below, measured 39 against
 * 40 us then, before the single loads; it now serves level avx512bf16.)
 * T##_load loads each vector once (an empty asm keeps GCC from folding the
 * load into both the shift and the mask, which reads the line twice, four
 * times where the vector crosses two lines).  Measured, AVX-512, HF's
 * tables, in place, against the folded loads in alternating processes:
 * 1 thread (1, 32, 128, 128) 33.4-33.5 -> 29.8-30.8 us, (1, 32, 1024, 128)
 * 264-271 -> 244-251 us, (1, 32, 16384, 128) even (5.2-5.9 ms); 2 threads
 * (second vCPU busy) (1, 32, 16384, 128) 4.55-4.93 -> 4.28-4.55 ms.  The
 * streaming kernels keep the folded loads (T##_load_folded): with one
 * load, 1 thread into a reused output 6.30-6.58 -> 6.68-6.86 ms.
 */
#define DEFINE_BF16_PAIR(T, TARGET, P, VPS, VSI, SI)                          \
typedef struct { VPS e, o; } T;                                               \
__attribute__((target(TARGET)))                                               \
static inline T T##_load_as(const uint16_t *p, int once)                      \
{                                                                             \
    VSI v = P##_loadu_##SI((const VSI *)(const void *)p);                     \
    if (once)                                                                 \
        __asm__("" : "+x"(v));                                                \
    const T r = {P##_cast##SI##_ps(P##_slli_epi32(v, 16)),                    \
                 P##_cast##SI##_ps(P##_and_##SI(v, P##_set1_epi32(-65536)))}; \
    return r;                                                                 \
}                                                                             \
__attribute__((target(TARGET)))                                               \
static inline T T##_load(const uint16_t *p) { return T##_load_as(p, 1); }     \
__attribute__((target(TARGET)))                                               \
static inline T T##_load_folded(const uint16_t *p) { return T##_load_as(p, 0); } \
/* v's float32 bits rounded to bfloat16 in their top 16 bits (the low 16 \
 * are left over) */                                                          \
__attribute__((target(TARGET)))                                               \
static inline VSI T##_round_top(VPS v)                                        \
{                                                                             \
    const VSI u = P##_castps_##SI(v);                                         \
    const VSI lsb = P##_and_##SI(P##_srli_epi32(u, 16), P##_set1_epi32(1));   \
    return P##_add_epi32(P##_add_epi32(u, P##_set1_epi32(0x7fff)), lsb);      \
}                                                                             \
BF16_PAIR_OP(T, TARGET, P, mul)                                               \
BF16_PAIR_OP(T, TARGET, P, add)                                               \
BF16_PAIR_OP(T, TARGET, P, sub)
#define BF16_PAIR_OP(T, TARGET, P, OP)                                        \
__attribute__((target(TARGET)))                                               \
static inline T T##_##OP##_ps(T a, T b)                                       \
{                                                                             \
    const T r = {P##_##OP##_ps(a.e, b.e), P##_##OP##_ps(a.o, b.o)};           \
    return r;                                                                 \
}
DEFINE_BF16_PAIR(bf16x16, "avx2", _mm256, __m256, __m256i, si256)
DEFINE_BF16_PAIR(bf16x32, "avx512f", _mm512, __m512, __m512i, si512)

/*
 * bfloat16 with AVX2, 8 values at a time in order (the runs that are not a
 * multiple of 16, which the bf16x16 kernels below take): widened and
 * rounded by bf16_avx2.h (the same rule as bf16x16_round_top, no NaN
 * test, for the same reason), narrowed by a pack.
 */
DEFINE_HALFPREC_DUP(avx2_bf16, "avx2", _mm256, __m256, 8, PE_BF16_LOAD8, pe_bf16_store8, fwd,
                   h % 8 == 0, bf16_dup_scalar_fwd)
DEFINE_HALFPREC_DUP(avx2_bf16, "avx2", _mm256, __m256, 8, PE_BF16_LOAD8, pe_bf16_store8, back,
                   h % 8 == 0, bf16_dup_scalar_back)
DEFINE_HALFPREC_HALF(avx2_bf16, "avx2", _mm256, __m256, 8, PE_BF16_LOAD8, pe_bf16_store8, fwd)
DEFINE_HALFPREC_HALF(avx2_bf16, "avx2", _mm256, __m256, 8, PE_BF16_LOAD8, pe_bf16_store8, back)

DEFINE_HALFPREC_INTER(avx2_bf16, "avx2", _mm256, __m256, 8, PE_BF16_LOAD8, pe_bf16_store8, fwd)
DEFINE_HALFPREC_INTER(avx2_bf16, "avx2", _mm256, __m256, 8, PE_BF16_LOAD8, pe_bf16_store8, back)

/*
 * float16 with AVX-512F, 16 values at a time: the same conversions
 * (vcvtph2ps, vcvtps2ph to nearest even) and maths as the F16C kernels on
 * zmm registers, for rows whose rotated run is a multiple of 16, in place
 * only.  Measured in place, 1 thread, Zen 5 EPYC, HF's tables: (1, 32,
 * 128, 128) 0.038-0.039 -> 0.030-0.033 ms (interleaved 0.049-0.050 ->
 * 0.037-0.038), (1, 32, 8192, 128) 2.73-2.82 -> 2.36-2.53 ms, (1, 32,
 * 16384, 128) 5.3-5.5 -> 5.5-5.7 ms, memory-bound (interleaved 6.7-7.1 ->
 * 5.7-6.1, any tables 6.0-6.4 -> 4.8-6.0); but out of place, from memory,
 * twice the 8-wide kernels' time at every alignment of x and y tried
 * ((1, 32, 8192, 128) duplicated tables 3.7 -> 8.3-8.6 ms, 5.3-5.4 with
 * the rows prefetched; any tables 6.2-6.5 -> 10.4-11.0), for a reason not
 * found (bfloat16's 16-wide kernels are faster out of place than its
 * 8-wide ones).
 */
#define F16_LOAD512(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define F16_STORE512(p, v) \
    _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
DEFINE_HALFPREC_HALF(avx512_f16, "avx512f", _mm512, __m512, 16, F16_LOAD512, F16_STORE512, fwd)
DEFINE_HALFPREC_HALF(avx512_f16, "avx512f", _mm512, __m512, 16, F16_LOAD512, F16_STORE512, back)
DEFINE_HALFPREC_DUP(avx512_f16, "avx512f", _mm512, __m512, 16, F16_LOAD512, F16_STORE512, fwd,
                   rope_halfprec_wide_ok(L, 0, h), f16c_dup_fwd)
DEFINE_HALFPREC_DUP(avx512_f16, "avx512f", _mm512, __m512, 16, F16_LOAD512, F16_STORE512, back,
                   rope_halfprec_wide_ok(L, 0, h), f16c_dup_back)
DEFINE_HALFPREC_DUP_T(avx512_f16_ft, "avx512f", _mm512, __m512, 16, F16_LOAD512, F16_STORE512,
                      fwd, rope_halfprec_wide_ok(L, 0, h), f16c_ft_dup_fwd, float, F32_LOAD16)
DEFINE_HALFPREC_DUP_T(avx512_f16_ft, "avx512f", _mm512, __m512, 16, F16_LOAD512, F16_STORE512,
                      back, rope_halfprec_wide_ok(L, 0, h), f16c_ft_dup_back, float, F32_LOAD16)
DEFINE_HALFPREC_INTER(avx512_f16, "avx512f,avx512dq", _mm512, __m512, 16, F16_LOAD512,
                      F16_STORE512, fwd)
DEFINE_HALFPREC_INTER(avx512_f16, "avx512f,avx512dq", _mm512, __m512, 16, F16_LOAD512,
                      F16_STORE512, back)


/* v's 16 values rounded, in order (vpblendw takes the odd 16-bit words
 * from its second operand) */
__attribute__((target("avx2")))
static inline __m256i bf16x16_round(bf16x16 v)
{
    return _mm256_blend_epi16(_mm256_srli_epi32(bf16x16_round_top(v.e), 16),
                              bf16x16_round_top(v.o), 0xAA);
}
__attribute__((target("avx2")))
static inline void bf16x16_store(uint16_t *p, bf16x16 v)
{
    _mm256_storeu_si256((__m256i *)(void *)p, bf16x16_round(v));
}
__attribute__((target("avx512f")))
static inline __m512i bf16x32_round(bf16x32 v)
{
    /* (odd & 0xffff0000) | (even >> 16): vpternlogd's 0xCA is a ? b : c
     * per bit, a the mask */
    return _mm512_ternarylogic_epi32(_mm512_set1_epi32(-65536), bf16x32_round_top(v.o),
                                     _mm512_srli_epi32(bf16x32_round_top(v.e), 16), 0xCA);
}
__attribute__((target("avx512f")))
static inline void bf16x32_store(uint16_t *p, bf16x32 v)
{
    _mm512_storeu_si512((void *)p, bf16x32_round(v));
}
/* four 16-byte streaming stores (see F16_STREAM) */
__attribute__((target("avx512f")))
static inline void stream_4x16(uint16_t *p, __m512i b)
{
    _mm_stream_si128((__m128i *)(void *)p, _mm512_castsi512_si128(b));
    _mm_stream_si128((__m128i *)(void *)(p + 8), _mm512_extracti32x4_epi32(b, 1));
    _mm_stream_si128((__m128i *)(void *)(p + 16), _mm512_extracti32x4_epi32(b, 2));
    _mm_stream_si128((__m128i *)(void *)(p + 24), _mm512_extracti32x4_epi32(b, 3));
}
__attribute__((target("avx512f")))
static inline void bf16x32_stream(uint16_t *p, bf16x32 v)
{
    stream_4x16(p, bf16x32_round(v));
}

/*
 * Level avx512bf16 (AVX-512 with BW, DQ and AVX512_BF16): the same
 * kernels, rounded by vcvtne2ps2bf16, which rounds two float32 vectors to
 * nearest even in one instruction (a NaN keeps its top 16 bits, quieted:
 * as above, already so), then one vpermw puts the even and odd values
 * back in order.  It reads denormal inputs as 0, so a vector holding one
 * (vfpclassps) takes bf16x32_round instead: the same bits everywhere.
 * Measured, Zen 5 EPYC, HF's tables, against level avx512 (the integer
 * rounding) in alternating processes, the gufunc called in place, 1
 * thread: (1, 32, 128, 128) 25.4-25.8 -> 22.4 us, (1, 32, 1024, 128)
 * 237 -> 214-215 us (float16 216-220 us); into a reused output, (1, 32,
 * 16384, 128): 1 thread 6.40-6.63 against 6.36-6.75 ms, 2 threads 6.02-6.09
 * -> 5.88-6.04 ms.  In place from memory, (1, 32, 16384, 128), it was
 * even there at 1 thread (5.60-6.03 against 5.59-5.79 ms, 6 alternating
 * runs) and slower at 2 (4.61-4.81 against 4.28-4.67 ms), so such calls
 * kept the integer rounding for a while; on a Zen 4 EPYC VM the same calls
 * were faster with this rounding: 1 thread 7.6-8.0 -> 6.5-6.8 ms, 2
 * threads 4.6-7.2 -> 4.6-6.1 ms (4 alternating processes, minima of 9), so
 * now every call at this level takes it.  (Measured once before, when each
 * load was folded into two instructions: 39 against 40 us in cache.)
 */
#define BF16C_TARGET "avx512f,avx512bw,avx512dq,avx512bf16"
DEFINE_BF16_PAIR(bf16x32c, BF16C_TARGET, _mm512, __m512, __m512i, si512)
__attribute__((target(BF16C_TARGET)))
static inline __m512i bf16x32c_round(bf16x32c v)
{
    /* vcvtne2ps2bf16 (a, b) gives b's values in words 0-15 and a's in
     * 16-31: word 2i takes word i (even), word 2i + 1 word 16 + i (odd) */
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                           25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                                           19, 3, 18, 2, 17, 1, 16, 0);
    if (__builtin_expect((_mm512_fpclass_ps_mask(v.e, 0x20) |     /* 0x20: denormal */
                          _mm512_fpclass_ps_mask(v.o, 0x20)) != 0, 0)) {
        const bf16x32 w = {v.e, v.o};
        return bf16x32_round(w);
    }
    return _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(v.o, v.e));
}
__attribute__((target(BF16C_TARGET)))
static inline void bf16x32c_store(uint16_t *p, bf16x32c v)
{
    _mm512_storeu_si512((void *)p, bf16x32c_round(v));
}
__attribute__((target(BF16C_TARGET)))
static inline void bf16x32c_stream(uint16_t *p, bf16x32c v)
{
    stream_4x16(p, bf16x32c_round(v));
}

/* T##_half_##DIR (any tables), T##_inter_##DIR, T##_dup_##DIR (HF's
 * duplicated half-split tables): W values at a time, or OTHER's kernel of
 * the same kind where the run is not a multiple of W */
#define DEFINE_BF16_PAIR_KERNELS(T, TARGET, P, W, DIR, OTHER)                 \
__attribute__((target(TARGET)))                                               \
static void T##_half_##DIR(const pe_rope_loop *L)                             \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, T##_half_##DIR))                                    \
        return;                                                               \
    if (h % W != 0) {                                                         \
        OTHER##_half_##DIR(L);                                                \
        return;                                                               \
    }                                                                         \
    HALFPREC_HALF_BODY(T, T, W, T##_load, T##_store, DIR, 0, 0)               \
}                                                                             \
__attribute__((target(TARGET)))                                               \
static void T##_inter_##DIR(const pe_rope_loop *L)                            \
{                                                                             \
    const ptrdiff_t h = L->r / 2;                                             \
    if (pe_rope_groups(L, T##_inter_##DIR))                                   \
        return;                                                               \
    if (2 * h % W != 0) {                                                     \
        OTHER##_inter_##DIR(L);                                               \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        ROW_POINTERS(uint16_t)                                                \
        for (ptrdiff_t i = 0; i < 2 * h; i += W) {                            \
            const T xv = T##_load(x + i), cv = T##_load(c + i), sv = T##_load(s + i); \
            T yv;                                                             \
            /* the pair (x[2i], x[2i + 1]) is lane i's even and odd value:  \
             * the half-split maths with a = even, b = odd, no swap */       \
            HP_ROT_##DIR(P, yv.e, yv.o, xv.e, xv.o, cv.e, cv.o, sv.e, sv.o);  \
            T##_store(y + i, yv);                                             \
        }                                                                     \
        COPY_TAIL(uint16_t)                                                   \
    }                                                                         \
}                                                                             \
DEFINE_HALFPREC_DUP(T, TARGET, T, T, W, T##_load, T##_store, DIR, h % W == 0, OTHER##_dup_##DIR)
DEFINE_BF16_PAIR_KERNELS(bf16x16, "avx2", _mm256, 16, fwd, avx2_bf16)
DEFINE_BF16_PAIR_KERNELS(bf16x16, "avx2", _mm256, 16, back, avx2_bf16)
DEFINE_BF16_PAIR_KERNELS(bf16x32, "avx512f", _mm512, 32, fwd, bf16x16)
DEFINE_BF16_PAIR_KERNELS(bf16x32, "avx512f", _mm512, 32, back, bf16x16)
DEFINE_HALFPREC_DUP(bf16x32_nt, "avx512f", bf16x32, bf16x32, 32, bf16x32_load_folded,
                   bf16x32_stream, fwd, h % 32 == 0, bf16x16_dup_fwd)
DEFINE_HALFPREC_DUP(bf16x32_nt, "avx512f", bf16x32, bf16x32, 32, bf16x32_load_folded,
                   bf16x32_stream, back, h % 32 == 0, bf16x16_dup_back)
DEFINE_BF16_PAIR_KERNELS(bf16x32c, BF16C_TARGET, _mm512, 32, fwd, bf16x16)
DEFINE_BF16_PAIR_KERNELS(bf16x32c, BF16C_TARGET, _mm512, 32, back, bf16x16)
DEFINE_HALFPREC_DUP(bf16x32c_nt, BF16C_TARGET, bf16x32c, bf16x32c, 32, bf16x32c_load_folded,
                   bf16x32c_stream, fwd, h % 32 == 0, bf16x16_dup_fwd)
DEFINE_HALFPREC_DUP(bf16x32c_nt, BF16C_TARGET, bf16x32c, bf16x32c, 32, bf16x32c_load_folded,
                   bf16x32c_stream, back, h % 32 == 0, bf16x16_dup_back)

/*
 * float16 and bfloat16 out of place into y streamed whole lines, with no
 * staging (the realign walk, like half_realign_fwd_f32): one row, HF's
 * duplicated half-split tables (c[i], s[i], i < h), h a multiple of 32, so
 * each half is whole 64-byte chunks of 32 values.  Each step makes chunk j
 * of both halves (lo: y[i..], hi: y[h + i..]); with y on a line (SHIFT 0)
 * a chunk is a line, streamed in one 64-byte store; with y 16 bytes past a
 * line (SHIFT 1, as NumPy's large arrays start) the line at y - 16 + 64 j
 * is the last 16 bytes of the chunk before and the first 48 of this one
 * (valignd), so the lo chain starts from the head's carry (the previous
 * row's last chunk), the hi chain's first line waits for the lo chain's
 * last chunk, and the row's last 16 bytes go, in carry, to the head's next
 * row.  A whole line per store, so the order of the stores does not matter
 * to the write-combining buffers.  first / last (SHIFT 1): the row starts
 * / ends the head's part of the block, whose first / last line it shares
 * with the block before / after: those bytes are stored plainly.
 * The maths and rounding are the dup kernels' (avx512_f16_dup_*,
 * bf16x32_dup_*, and at level avx512bf16 bf16x32c_dup_*): the same bits.
 * (AVX512_BF16's rounding against the integer one here, Zen 4 EPYC VM,
 * (1, 32, 16384, 128) into np.empty_like(x), 3 alternating processes: 1
 * thread 8.97-9.23 against 9.78-9.84 ms, 2 threads even.)
 * At level AVX2 too (below; float16 where the CPU has F16C); SSE2 stages
 * (see STAGE_ROWS_BYTES).  Measured:
 * see pe_rope_apply.
 */
#define HP_CHUNKS_f16(DIR, lo, hi)                                            \
    {                                                                         \
        const __m512 c0 = F16_LOAD512(c + i), s0 = F16_LOAD512(s + i);        \
        const __m512 c1 = F16_LOAD512(c + i + 16), s1 = F16_LOAD512(s + i + 16); \
        __m512 a0, b0, a1, b1;                                                \
        HP_ROT_##DIR(_mm512, a0, b0, F16_LOAD512(x + i), F16_LOAD512(x + i + h), \
                     c0, c0, s0, s0);                                         \
        HP_ROT_##DIR(_mm512, a1, b1, F16_LOAD512(x + i + 16),                 \
                     F16_LOAD512(x + i + h + 16), c1, c1, s1, s1);            \
        lo = _mm512_inserti64x4(                                              \
            _mm512_castsi256_si512(_mm512_cvtps_ph(a0, _MM_FROUND_TO_NEAREST_INT)), \
            _mm512_cvtps_ph(a1, _MM_FROUND_TO_NEAREST_INT), 1);               \
        hi = _mm512_inserti64x4(                                              \
            _mm512_castsi256_si512(_mm512_cvtps_ph(b0, _MM_FROUND_TO_NEAREST_INT)), \
            _mm512_cvtps_ph(b1, _MM_FROUND_TO_NEAREST_INT), 1);               \
    }
/* bfloat16: a bf16x32 (integer rounding) or bf16x32c (AVX512_BF16) pair */
#define HP_CHUNKS_PAIR(T, DIR, lo, hi)                                        \
    {                                                                         \
        const T cv = T##_load(c + i), sv = T##_load(s + i);                   \
        T a, b;                                                               \
        HP_ROT_##DIR(T, a, b, T##_load(x + i), T##_load(x + i + h), cv, cv, sv, sv); \
        lo = T##_round(a);                                                    \
        hi = T##_round(b);                                                    \
    }
#define HP_CHUNKS_bf16(DIR, lo, hi) HP_CHUNKS_PAIR(bf16x32, DIR, lo, hi)
#define HP_CHUNKS_bf16c(DIR, lo, hi) HP_CHUNKS_PAIR(bf16x32c, DIR, lo, hi)
/* the line ending in chunk v, chunk p before it */
#define HP_LINE(SHIFT, v, p) ((SHIFT) ? _mm512_alignr_epi32(v, p, 12) : (v))
/* a realigning kernel's row: x, c, s as 16-bit values, ya y's line (y 16
 * bytes past it where SHIFT), hb a half's bytes (DEFINE_HP_REALIGN,
 * DEFINE_HP2_REALIGN) */
#define HP_REALIGN_ROW(SHIFT)                                                 \
    const uint16_t *x = (const uint16_t *)(const void *)xb;                   \
    const uint16_t *c = (const uint16_t *)(const void *)cb;                   \
    const uint16_t *s = (const uint16_t *)(const void *)sb;                   \
    char *ya = yb - 16 * (SHIFT);   /* (on a line) */                         \
    const ptrdiff_t hb = 2 * h;     /* a half's bytes */
#define HP_TARGET_f16 "avx512f,f16c"
#define HP_TARGET_bf16 "avx512f"
#define HP_TARGET_bf16c BF16C_TARGET
#define DEFINE_HP_REALIGN(SUF, DIR, SHIFT)                                    \
__attribute__((target(HP_TARGET_##SUF)))                                      \
static void SUF##_realign##SHIFT##_##DIR(const char *xb, char *yb, const char *cb, \
                                         const char *sb, ptrdiff_t h, char *carry, \
                                         int first, int last)                 \
{                                                                             \
    HP_REALIGN_ROW(SHIFT)                                                     \
    __m512i prev = _mm512_load_si512((const void *)carry), hprev = prev, hfirst = prev; \
    for (ptrdiff_t i = 0; i < h; i += 32) {                                   \
        __m512i lo, hi;                                                       \
        HP_CHUNKS_##SUF(DIR, lo, hi)                                          \
        if ((SHIFT) && first && i == 0)                                       \
            _mm512_mask_storeu_epi32(yb, 0x0fff, lo);                         \
        else                                                                  \
            _mm512_stream_si512((void *)(ya + 2 * i), HP_LINE(SHIFT, lo, prev)); \
        if (i == 0)                                                           \
            hfirst = hi;                                                      \
        else                                                                  \
            _mm512_stream_si512((void *)(ya + hb + 2 * i), HP_LINE(SHIFT, hi, hprev)); \
        prev = lo;                                                            \
        hprev = hi;                                                           \
    }                                                                         \
    _mm512_stream_si512((void *)(ya + hb), HP_LINE(SHIFT, hfirst, prev));     \
    if ((SHIFT) && last)                                                      \
        _mm_storeu_si128((__m128i *)(void *)(ya + 2 * hb),                    \
                         _mm512_extracti32x4_epi32(hprev, 3));                \
    _mm512_store_si512((void *)carry, hprev);                                 \
}
DEFINE_HP_REALIGN(f16, fwd, 0)
DEFINE_HP_REALIGN(f16, fwd, 1)
DEFINE_HP_REALIGN(f16, back, 0)
DEFINE_HP_REALIGN(f16, back, 1)
DEFINE_HP_REALIGN(bf16, fwd, 0)
DEFINE_HP_REALIGN(bf16, fwd, 1)
DEFINE_HP_REALIGN(bf16, back, 0)
DEFINE_HP_REALIGN(bf16, back, 1)
DEFINE_HP_REALIGN(bf16c, fwd, 0)
DEFINE_HP_REALIGN(bf16c, fwd, 1)
DEFINE_HP_REALIGN(bf16c, back, 0)
DEFINE_HP_REALIGN(bf16c, back, 1)

/*
 * The same at level AVX2 (F16C for float16): each 64-byte chunk of a half
 * is two 32-byte vectors (v0, v1), a line two streaming stores; with y 16
 * bytes past a line (SHIFT 1) the line ending in chunk v, p before it, is
 * (p1's high 16 bytes, v0's low 16) and (v0's high 16, v1's low 16)
 * (vperm2i128).  The carry is the previous row's last chunk, both vectors.
 * The maths and rounding are f16c_dup_* and bf16x16_dup_*'s: the same
 * bits, but for the payload of a NaN made from two NaNs (float16: GCC may
 * order a product's operands differently; every 16-bit pattern checked
 * against the staged walk).  Measured: see pe_rope_apply.
 */
#define HP2_HALF_f16(DIR, k, lo, hi)                                          \
    {                                                                         \
        const __m256 c0 = F16_LOAD(c + i + k), s0 = F16_LOAD(s + i + k);      \
        const __m256 c1 = F16_LOAD(c + i + k + 8), s1 = F16_LOAD(s + i + k + 8); \
        __m256 a0, b0, a1, b1;                                                \
        HP_ROT_##DIR(_mm256, a0, b0, F16_LOAD(x + i + k), F16_LOAD(x + i + h + k), \
                     c0, c0, s0, s0);                                         \
        HP_ROT_##DIR(_mm256, a1, b1, F16_LOAD(x + i + k + 8),                 \
                     F16_LOAD(x + i + h + k + 8), c1, c1, s1, s1);            \
        lo = _mm256_set_m128i(_mm256_cvtps_ph(a1, _MM_FROUND_TO_NEAREST_INT), \
                              _mm256_cvtps_ph(a0, _MM_FROUND_TO_NEAREST_INT)); \
        hi = _mm256_set_m128i(_mm256_cvtps_ph(b1, _MM_FROUND_TO_NEAREST_INT), \
                              _mm256_cvtps_ph(b0, _MM_FROUND_TO_NEAREST_INT)); \
    }
#define HP2_HALF_bf16(DIR, k, lo, hi)                                         \
    {                                                                         \
        const bf16x16 cv = bf16x16_load(c + i + k), sv = bf16x16_load(s + i + k); \
        bf16x16 a, b;                                                         \
        HP_ROT_##DIR(bf16x16, a, b, bf16x16_load(x + i + k), bf16x16_load(x + i + h + k), \
                     cv, cv, sv, sv);                                         \
        lo = bf16x16_round(a);                                                \
        hi = bf16x16_round(b);                                                \
    }
/* the line ending in chunk (v0, v1), p1 the high vector of the one before,
 * streamed at a (on a line) */
#define HP2_LINE(SHIFT, a, v0, v1, p1)                                        \
    {                                                                         \
        _mm256_stream_si256((__m256i *)(void *)(a),                           \
                            (SHIFT) ? _mm256_permute2x128_si256(p1, v0, 0x21) : (v0)); \
        _mm256_stream_si256((__m256i *)(void *)((a) + 32),                    \
                            (SHIFT) ? _mm256_permute2x128_si256(v0, v1, 0x21) : (v1)); \
    }
#define HP2_TARGET_f16 "avx2,f16c"
#define HP2_TARGET_bf16 "avx2"
#define DEFINE_HP2_REALIGN(SUF, DIR, SHIFT)                                   \
__attribute__((target(HP2_TARGET_##SUF)))                                     \
static void SUF##_realign##SHIFT##_avx2_##DIR(const char *xb, char *yb, const char *cb, \
                                              const char *sb, ptrdiff_t h, char *carry, \
                                              int first, int last)            \
{                                                                             \
    HP_REALIGN_ROW(SHIFT)                                                     \
    __m256i p1 = _mm256_load_si256((const __m256i *)(const void *)(carry + 32)); \
    __m256i hp0 = p1, hp1 = p1, hf0 = p1, hf1 = p1;                           \
    for (ptrdiff_t i = 0; i < h; i += 32) {                                   \
        __m256i lo0, lo1, hi0, hi1;                                           \
        HP2_HALF_##SUF(DIR, 0, lo0, hi0)                                      \
        HP2_HALF_##SUF(DIR, 16, lo1, hi1)                                     \
        if ((SHIFT) && first && i == 0) {                                     \
            _mm256_storeu_si256((__m256i *)(void *)yb, lo0);                  \
            _mm_storeu_si128((__m128i *)(void *)(yb + 32), _mm256_castsi256_si128(lo1)); \
        } else {                                                              \
            HP2_LINE(SHIFT, ya + 2 * i, lo0, lo1, p1)                         \
        }                                                                     \
        if (i == 0) {                                                         \
            hf0 = hi0;                                                        \
            hf1 = hi1;                                                        \
        } else {                                                              \
            HP2_LINE(SHIFT, ya + hb + 2 * i, hi0, hi1, hp1)                   \
        }                                                                     \
        p1 = lo1;                                                             \
        hp0 = hi0;                                                            \
        hp1 = hi1;                                                            \
    }                                                                         \
    HP2_LINE(SHIFT, ya + hb, hf0, hf1, p1)                                    \
    if ((SHIFT) && last)                                                      \
        _mm_storeu_si128((__m128i *)(void *)(ya + 2 * hb), _mm256_extracti128_si256(hp1, 1)); \
    _mm256_store_si256((__m256i *)(void *)carry, hp0);                        \
    _mm256_store_si256((__m256i *)(void *)(carry + 32), hp1);                 \
}
DEFINE_HP2_REALIGN(f16, fwd, 0)
DEFINE_HP2_REALIGN(f16, fwd, 1)
DEFINE_HP2_REALIGN(f16, back, 0)
DEFINE_HP2_REALIGN(f16, back, 1)
DEFINE_HP2_REALIGN(bf16, fwd, 0)
DEFINE_HP2_REALIGN(bf16, fwd, 1)
DEFINE_HP2_REALIGN(bf16, back, 0)
DEFINE_HP2_REALIGN(bf16, back, 1)

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
/* The driver: position-blocked grids on the thread pool               */
/* ------------------------------------------------------------------ */

/* bytes one vector touches: x and y, and its table rows */
static ptrdiff_t rope_vector_bytes(ptrdiff_t d, ptrdiff_t r, ptrdiff_t itemsize)
{
    const ptrdiff_t b = (2 * d + 2 * r) * itemsize;
    return b > 0 ? b : 1;
}

/* heads per group for (b, h, s, d) memory: about 2 KiB of x per call, at
 * most ROPE_GROUP_MAX (float16 rows, 256 bytes: groups of 8 were slower
 * than 4) */
#define ROPE_GROUP_BYTES 2048
#define ROPE_GROUP_MAX 4
/* the measured choices' kinds (pe_choice_way) per decision: one per dtype
 * (4), in place or not; three decisions (see pe_rope_apply) */
#define ROPE_CHOICE_KINDS 8
_Static_assert(3 * ROPE_CHOICE_KINDS == PE_CHOICE_KINDS, "posemb.h's PE_CHOICE_KINDS");
/* rows of x of at least this many bytes (float64 d = 128, float32 head size
 * 256, float16/bfloat16 d = 512) beyond the last-level cache: groups of
 * ROPE_GROUP_MAX * ROPE_LONG_ROW bytes of heads (4 heads of 1 KiB, 2 of 2
 * KiB, ...), the pipelined in-place kernels (DEFINE_ROPE_PIPE), half-split
 * rows of x and table rows prefetched at each position (job->lead, set in
 * pe_rope_apply) */
#define ROPE_LONG_ROW 1024

/* one row x -> y of the realigning streaming kernels (half_realign_fwd_f32):
 * h pairs, the table rows c, s (half-split: their first halves), the
 * head's carry (one vector: 32 bytes; the half-precision kernels' a chunk
 * of 64, of which the AVX2 ones read the last 32; on 64),
 * whether the row begins and ends the head's part of the block */
typedef void (*rope_realign_fn)(const char *x, char *y, const char *c, const char *s,
                                ptrdiff_t h, char *carry, int first, int last);

/* copy_rows_dup's type (the level's version: rope_table.copy_dup) */
typedef int (*rope_copy_dup_fn)(char *, ptrdiff_t, const char *, ptrdiff_t, ptrdiff_t,
                                ptrdiff_t);

typedef struct {
    pe_rope_fn fn;       /* any tables */
    pe_rope_fn dup;      /* blocks whose table rows are duplicated, or NULL */
    const pe_rope_grid *g;
    ptrdiff_t itemsize;
    ptrdiff_t prefetch;  /* bytes of the next head's part to prefetch */
    int one_head;        /* heads-inner walk: one head per call, its row at the
                          * next position prefetched (beyond the LLC, where
                          * the measured choice job->choice_one says so) */
    ptrdiff_t ahead;     /* grouped walk: rows prefetched this many positions ahead */
    ptrdiff_t rows;      /* positions per block */
    ptrdiff_t blocks;    /* blocks per batch entry */
    int heads_inner;     /* x's heads lie closer in memory than its positions */
    ptrdiff_t head_group; /* > 1: heads walked in groups of this many, row by row */
    pe_rope_fn tiled;    /* the one-pass kernel that the tile walk calls for
                          * blocks that use it, or NULL: no tile walk */
    ptrdiff_t tile;      /* positions per tile */
    int streaming;       /* fn uses streaming stores: fence once per task */
    int stage;           /* grouped walk: y staged, streamed in whole lines
                          * (stage_flush) this many bytes a store (16, or 32
                          * where the level has AVX), fenced once per task;
                          * 0: not staged */
    int pack;            /* grouped walk, dup kernel: pack each block's rows */
    rope_realign_fn realign; /* staged walk, the blocks of the one-pass kernel
                              * (half-split: with duplicated tables; float16
                              * and bfloat16: the dup kernel's): this kernel
                              * streams y straight (no staging), or NULL */
    int choice;          /* beyond the last-level cache, the pe_choice kind
                          * that decides, in the grouped walk, ahead (way 1:
                          * ahead, way 0: no prefetch), or -1 */
    int choice_one;      /* ... and in the heads-inner walk, one_head (way 1:
                          * one head per call, way 0: all), or -1 */
    int lead;            /* grouped walk: at each position the group's rows
                          * of x and its table rows prefetched first
                          * (prefetch_position; half-split long rows, set in
                          * pe_rope_apply) */
    int next_l2;         /* ... and the group's rows of x at the next
                          * position prefetched into L2 */
    int pack_ft;         /* float16: the grouped walk packs float32 copies of
                          * the half rows (rows_duplicated) and runs dup_ft,
                          * which reads them, in place of dup */
    pe_rope_fn dup_ft;
    pe_rope_fn lines;    /* the tile walk's kernel where tile_tables copied
                          * its table rows, and the heads-inner walk's
                          * (runs) (rows past a line: rope_lines_avx512f_*,
                          * inter_lines_avx512dq_*; each falls back itself),
                          * or NULL */
    rope_copy_dup_fn copy_dup; /* tile_tables' copy of duplicated half
                                * rows, checked (copy_rows_dup at the
                                * level's width) */
} rope_grid_job;

/* the grouped walk's position k, every line of each row, before the
 * kernel's first load: where next is not 0, first the n rows of x at the
 * next position (next bytes on) into L2 (the order measured); then into
 * L1 the n rows of x (row bytes each) of heads x, x + x_h, ... (n may be
 * 0), each in memory order, and the table rows the kernel reads (tb bytes
 * of c and of s) (inlined: see pe_prefetch) */
PE_INLINE void prefetch_position(const char *x, ptrdiff_t x_h, ptrdiff_t n, ptrdiff_t row,
                                 const char *c, const char *s, ptrdiff_t tb, ptrdiff_t next)
{
    for (ptrdiff_t q = 0; next != 0 && q < n; q++)
        pe_prefetch_lines(x + q * x_h + next, row, 1);
    for (ptrdiff_t q = 0; q < n; q++)
        pe_prefetch_lines(x + q * x_h, row, 0);
    pe_prefetch_lines(c, tb, 0);
    pe_prefetch_lines(s, tb, 0);
}

/* Are table rows s0 .. s0+rows-1 of batch entry b duplicated halves
 * (row[i + h] == row[i], bitwise)?  Reading them brings them into cache
 * just before the block uses them.  With pack (the grouped walk's buffer,
 * or the heads-inner walk's for its runs),
 * their first halves, hb bytes each, are also copied there side by side
 * (cos's then sin's for each position), each row while it is in L1: a pass
 * comparing the block's rows and then one copying them took 0.73 + 0.29 ms
 * of a float64 (1, 32, 4096, 128) call's ~9 ms, 1 thread, Zen 4 EPYC VM;
 * in one pass 0.73-0.77 ms.  (pack's contents are unspecified where 0.)
 * With ft (float16 tables), the copies are widened to float32 (2 hb bytes
 * each), so that the dup kernels convert only x and y.  Why: float16 is
 * bound by its arithmetic at 1 thread.  Zen 4 EPYC VM: in place it ran at
 * about 20 GB/s of x in cache and from memory alike; vcvtph2ps and
 * vcvtps2ph on 512-bit vectors measured one per 2 cycles each, and the
 * pair loop's body (4 + 4 conversions, 8 products, 4 sums per 128 bytes of
 * x) alone, in L1, 5.0 ns per 128 bytes, 26 GB/s, the speed of an
 * in-place scale from memory; the tables' conversions were 2 more.
 * Measured through apply_rope, 1 thread, in place, settings alternated in
 * one process (medians of 31-41 rounds): (1, 32, 512, 128) 205 -> 195 us,
 * (1, 32, 1024, 128) 411 -> 391 us; (1, 32, 16384, 128) 1.41-1.46x an
 * in-place scale -> 1.32-1.40x, (1, 32, 8192, 256) 1.37x -> 1.32x; 2
 * threads even (1.03-1.04x).  The realigning kernels (out of place) keep
 * float16 tables: with float32 ones, even (1.35x a copy both ways), and
 * with blocks of half the rows (the copies' bytes as before) in place was
 * slower (1.36-1.37x -> 1.44-1.45x). */
static int rows_duplicated(const pe_rope_grid *g, ptrdiff_t b, ptrdiff_t s0,
                           ptrdiff_t rows, ptrdiff_t hb, char *pack, int ft)
{
    const ptrdiff_t pb = ft ? 2 * hb : hb;   /* bytes of a packed half row */
    for (int t = 0; t < 2; t++) {
        const ptrdiff_t step = t ? g->sin_s : g->cos_s;
        const char *tab = (t ? g->sin + b * g->sin_b : g->cos + b * g->cos_b) + s0 * step;
        for (ptrdiff_t k = 0; k < rows; k++) {
            const char *row = tab + k * step;
            if (k > 0 && step == 0 && pack == NULL)
                break;            /* (one row, broadcast: checked) */
            if (k == 0 || step != 0) {
                /* (rows of ROPE_LONG_ROW bytes or more: the row's lines in
                 * order first, as the halves' compare would not fetch
                 * them: see ROPE_LONG_ROW; measured on those only) */
                if (2 * hb >= ROPE_LONG_ROW)
                    pe_prefetch_lines(row, 2 * hb, 0);
                if (memcmp(row, row + hb, (size_t)hb) != 0)
                    return 0;
            }
            if (pack != NULL && ft)
                pe_half_to_float_run((const uint16_t *)(const void *)row,
                                     (float *)(void *)(pack + k * 2 * pb + t * pb), hb / 2);
            else if (pack != NULL)
                memcpy(pack + k * 2 * hb + t * hb, row, (size_t)hb);
        }
    }
    return 1;
}

/* rows rows of bytes bytes each, src's step apart, to dst at dst_step */
static void copy_rows(char *dst, ptrdiff_t dst_step, const char *src, ptrdiff_t src_step,
                      ptrdiff_t rows, ptrdiff_t bytes)
{
    for (ptrdiff_t k = 0; k < rows; k++)
        memcpy(dst + k * dst_step, src + k * src_step, (size_t)bytes);
}

/* as copy_rows, of the first halves (bytes each) of rows of 2 * bytes, where
 * every row's halves are the same bits (rows_duplicated's test): 1 then,
 * else 0 (dst partly written).  One pass: each half row read once, no
 * call per row. */
static int copy_rows_dup(char *dst, ptrdiff_t dst_step, const char *src, ptrdiff_t src_step,
                         ptrdiff_t rows, ptrdiff_t bytes)
{
    for (ptrdiff_t k = 0; k < rows; k++) {
        const char *a = src + k * src_step;
        char *d = dst + k * dst_step;
        uint64_t diff = 0;
        ptrdiff_t i = 0;
        for (; i + 8 <= bytes; i += 8) {
            uint64_t u, v;
            memcpy(&u, a + i, 8);
            memcpy(&v, a + bytes + i, 8);
            diff |= u ^ v;
            memcpy(d + i, &u, 8);
        }
        for (; i < bytes; i++) {
            diff |= (uint8_t)(a[i] ^ a[bytes + i]);
            d[i] = a[i];
        }
        if (diff != 0)
            return 0;
    }
    return 1;
}
#if defined(PE_X86_SIMD)
/* ... a vector (32 or 64 bytes) at a time, the rest byte by byte.
 * Measured, Zen 4 EPYC VM, 1 thread, x 16 bytes past a line, in place,
 * against an in-place scale, 3 alternating processes against the build
 * with rows_duplicated then copy_rows (two libc calls per half row):
 * (1, 32, 128, 128) float32 1.38-1.39x -> 1.35-1.37x, float64 (1, 32, 128,
 * 64) 1.39-1.45x -> 1.37x; others even.  The copy with no check at all (a
 * bound, not a choice: alternated in one process) 1.36-1.37x against
 * 1.39-1.40x; the portable loop here in its place (16-byte vectors, as GCC
 * makes them) no faster than the libc calls. */
#define DEFINE_COPY_ROWS_DUP(NAME, TARGET, VI, W, LOADU, STOREU, XOR, OR, ZERO, NONZERO) \
__attribute__((target(TARGET)))                                               \
static int NAME(char *dst, ptrdiff_t dst_step, const char *src, ptrdiff_t src_step, \
                ptrdiff_t rows, ptrdiff_t bytes)                              \
{                                                                             \
    const ptrdiff_t vb = bytes / (W) * (W);                                   \
    for (ptrdiff_t k = 0; k < rows; k++) {                                    \
        const char *a = src + k * src_step;                                   \
        char *d = dst + k * dst_step;                                         \
        VI diff = ZERO();                                                     \
        unsigned tail = 0;                                                    \
        for (ptrdiff_t i = 0; i < vb; i += (W)) {                             \
            const VI u = LOADU((const void *)(a + i));                        \
            diff = OR(diff, XOR(u, LOADU((const void *)(a + bytes + i))));    \
            STOREU((void *)(d + i), u);                                       \
        }                                                                     \
        for (ptrdiff_t i = vb; i < bytes; i++) {                              \
            tail |= (uint8_t)(a[i] ^ a[bytes + i]);                           \
            d[i] = a[i];                                                      \
        }                                                                     \
        if (NONZERO(diff) || tail != 0)                                       \
            return 0;                                                         \
    }                                                                         \
    return 1;                                                                 \
}
#define NONZERO_256(v) (!_mm256_testz_si256((v), (v)))
#define NONZERO_512(v) (_mm512_test_epi64_mask((v), (v)) != 0)
DEFINE_COPY_ROWS_DUP(copy_rows_dup_avx2, "avx2", __m256i, 32, _mm256_loadu_si256,
                     _mm256_storeu_si256, _mm256_xor_si256, _mm256_or_si256,
                     _mm256_setzero_si256, NONZERO_256)
DEFINE_COPY_ROWS_DUP(copy_rows_dup_avx512, "avx512f", __m512i, 64, _mm512_loadu_si512,
                     _mm512_storeu_si512, _mm512_xor_si512, _mm512_or_si512,
                     _mm512_setzero_si512, NONZERO_512)
#endif

/* a tile's copy of one table: its rows (16 positions of float32 rows of
 * 512 bytes, or 8 of float64, with a 48 KiB L1) and a page to place them */
#define TILE_TABLE_BYTES (8192 + 4096)

/*
 * The kernel for the tile of L's m positions from p0 of batch entry b:
 * job->fn on the tables where they are if the tiled kernel is the
 * duplicated-table one and a row's halves differ (rows_duplicated, as the
 * other walks check per block), else job->tiled, with the table rows it
 * reads (the first halves, or whole interleaved rows) copied into buf and L
 * pointed there, where they fit and at least 8 heads read them: each row on
 * a 64-byte line, rows y's row step apart, the first half a page from y0
 * (the tile's first output row) in address bits 0-11.
 * Why: the tile walk's 64-byte table loads split lines where rows lie 16
 * bytes past one (NumPy's own arrays, posemb's large tables), and a table
 * load whose address bits 0-11 match a store just made to y waits for it
 * (4K aliasing: beyond the cache, the 16-byte kernels in place took 4.83 ms
 * with tables 16 bytes before x in those bits, 4.60 at 80 before, 4.46 at
 * 48 after, 4.04-4.35 ms at 15 other distances).  Measured, 1 thread, Zen
 * 5 EPYC, through apply_rope, 3 alternating runs against the build before:
 * (1, 32, 128, 128) float32 in place with tables sliced from rope_cos_sin's
 * 8192-row ones (as the bench) 30.1-31.7 against 31.0-33.0 us, with its
 * own 128-row tables 29.2-29.7 against 28.7-29.8, interleaved 33.0-33.6
 * against 35.5-38.3, out of place 51.2-52.8 against 53.2-54.1; float64 (1,
 * 32, 64, 128) 31.8-32.7 against 34.8-35.7 us.  Rows packed on lines
 * instead of placed from y0 (a first version): 29.1-32.4, 29.3-33.3,
 * 33.1-36.3, 50.2-51.9 and 32.4-34.9 us.
 */
static pe_rope_fn tile_tables(const rope_grid_job *job, pe_rope_loop *L, ptrdiff_t b,
                              ptrdiff_t p0, char (*buf)[TILE_TABLE_BYTES], const char *y0)
{
    const pe_rope_grid *g = job->g;
    const int dup = job->tiled == job->dup;   /* half-split: reads first halves */
    const ptrdiff_t used = (dup ? g->r / 2 : g->r) * job->itemsize;
    const ptrdiff_t stride = g->y_s >= used && g->y_s % 64 == 0 ? g->y_s : (used + 63) / 64 * 64;
    /* (with 3 heads, (1, 3, 128, 128) in place, the copy cost more than it
     * saved: 4.6-4.7 -> 4.9-5.0 us; 8 heads even) */
    const int copy = g->H >= 8 && L->m * stride <= TILE_TABLE_BYTES - 4096;
    if (dup && !copy && !rows_duplicated(g, b, p0, L->m, g->r / 2 * job->itemsize, NULL, 0))
        return job->fn;
    if (copy) {
        char *dst[2];
        for (int t = 0; t < 2; t++) {
            const char *tab = t ? L->sin : L->cos;
            const ptrdiff_t step = t ? g->sin_s : g->cos_s;
            /* buf[t] + s on a line, s = y0 + 2048 in bits 0-11 (for
             * inter_lines: at y0's offset within a line) */
            const uintptr_t want = ((uintptr_t)y0 + 2048) & (dup || job->lines == NULL ? 4032u : 4095u);
            dst[t] = buf[t] + ((want - ((uintptr_t)buf[t] & 4095u)) & 4095u);
            /* (duplicated rows checked as they are copied) */
            if (!dup)
                copy_rows(dst[t], stride, tab, step, L->m, used);
            else if (!job->copy_dup(dst[t], stride, tab, step, L->m, used))
                return job->fn;
        }
        L->cos = dst[0];
        L->sin = dst[1];
        L->cos_outer = L->sin_outer = stride;
        if (job->lines != NULL)
            return job->lines;
    }
    return job->tiled;
}

/*
 * The staged grouped walk (job->stage): out of place into a y whose lines a
 * streaming kernel would leave partly written (rows 16 bytes past a line, as
 * NumPy's large arrays start), on a CPU where that costs
 * (pe_cpu_partial_lines).  The plain kernel writes STAGE_ROWS_BYTES of each
 * head's rows at a time into a buffer in L1, at y's offset within a line;
 * then each whole line of y they cover goes out in one run of streaming
 * stores, the partial last line waits in the buffer for the next rows, and
 * the lines the block shares with its neighbours (its first and last) are
 * stored plainly.  Each head's rows must lie back to back in y and every
 * head at the same offset within a line (y_s = d * itemsize, y_h on 64
 * bytes), rows of at most STAGE_ROWS_BYTES / 2 (at least two rows per
 * flush), and groups of at least two heads (only the grouped walk stages or
 * realigns): pe_rope_apply checks (MAY_STAGE).  Rows of 2 KiB beyond the
 * last-level cache (float64 d = 256), realigned in groups of 2: measured,
 * Zen 4 EPYC VM, 1
 * thread, (1, 32, 2048, 256) into np.empty_like(x), 3.3-3.7x a streaming
 * copy with plain stores (rows of 2 KiB were not staged before), 1.54-1.78x
 * realigned (float32 d = 512 3.6x -> 1.50-1.63x); in groups of 4 2.3x.
 */
#define STAGE_ROWS_BYTES 4096

#if defined(PE_X86_SIMD)
/* stream_lines' 32-byte stores.  Measured, Zen 3 EPYC VM, 1 thread, a
 * streaming copy of 128 MiB into a y on a line, 3 runs: 16-byte stores
 * 8.2-9.0 ms, 32-byte 7.5-7.8 ms, two to a line 7.0-7.4 ms.  The staged
 * walk, (1, 32, S, 128) of 128 MiB into y 16 bytes past a line, 32-byte
 * over 16-byte stores, medians of 9 pairs in one process, 5 runs: float32
 * half-split 0.92-1.05 (median 0.99), interleaved 0.93-1.01, float64
 * 0.90-1.00, float16 0.86-1.00, bfloat16 0.94-0.99. */
__attribute__((target("avx")))
static void stream_lines_32(char *dst, const char *src, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i += 64) {
        _mm256_stream_si256((__m256i *)(void *)(dst + i),
                            _mm256_load_si256((const __m256i *)(const void *)(src + i)));
        _mm256_stream_si256((__m256i *)(void *)(dst + i + 32),
                            _mm256_load_si256((const __m256i *)(const void *)(src + i + 32)));
    }
}
#endif

/* n bytes from src to dst, both on 64-byte lines: streaming stores of
 * `width` bytes (16 or 32), line by line (in order, each line whole) */
static void stream_lines(char *dst, const char *src, ptrdiff_t n, int width)
{
#if defined(PE_X86_SIMD)
    if (width == 32) {
        stream_lines_32(dst, src, n);
        return;
    }
    for (ptrdiff_t i = 0; i < n; i += 64)
        for (ptrdiff_t j = 0; j < 64; j += 16)
            _mm_stream_si128((__m128i *)(void *)(dst + i + j),
                             _mm_load_si128((const __m128i *)(const void *)(src + i + j)));
#else
    (void)width;
    memcpy(dst, src, (size_t)n);
#endif
}

/* Flush a staging buffer: buf holds y's bytes from offset bo on (bo on a
 * line of y, buf on a line) to eo, of which [fo, eo) are this block's and
 * not yet stored (offsets from y, the block's first byte: bo may be
 * negative, y itself is 0).  Whole lines go out streamed, a partial first
 * line plainly; a partial last line (< 64 bytes) moves to buf's start, its
 * new base, unless last (the block's end): then it is stored plainly too.
 * Whole lines are streamed `width` bytes a store (stream_lines).
 * Returns the new base offset (bo where no line was done). */
static ptrdiff_t stage_flush(char *buf, char *y, ptrdiff_t bo, ptrdiff_t fo, ptrdiff_t eo,
                             int last, int width)
{
    const ptrdiff_t first = bo + (fo - bo + 63) / 64 * 64;   /* fo's line end */
    const ptrdiff_t stop = bo + (eo - bo) / 64 * 64;         /* eo's line start */
    if (first > stop) {          /* fo and eo within one line */
        if (last)
            memcpy(y + fo, buf + (fo - bo), (size_t)(eo - fo));
        return bo;               /* (nothing moves: the line is not done) */
    }
    if (fo < first)
        memcpy(y + fo, buf + (fo - bo), (size_t)(first - fo));
    stream_lines(y + first, buf + (first - bo), stop - first, width);
    if (last)
        memcpy(y + stop, buf + (stop - bo), (size_t)(eo - stop));
    else
        memmove(buf, buf + (stop - bo), (size_t)(eo - stop));
    return stop;
}

/* items are (b, block) pairs; each runs every head over the block */
static void rope_grid_task(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const rope_grid_job *job = (const rope_grid_job *)ctx;
    const pe_rope_grid *g = job->g;
    /* the bytes of one vector of x, where they lie together (prefetched
     * rows of the grouped and heads-inner walks) */
    const ptrdiff_t row = g->x_inner == job->itemsize ? g->d * job->itemsize : 0;
    /* bytes of each half table row the duplicated-table kernels read, and
     * the grouped walk's buffer for a block of them (both halves of a
     * block's rows: at most half its table bytes, see grid_run;
     * float32 copies, job->pack_ft: all of them) */
    const ptrdiff_t hb = g->r / 2 * job->itemsize;
    /* ... and of each in the buffer (job->pack_ft: widened to float32) */
    const ptrdiff_t pb = job->pack_ft ? 2 * hb : hb;
    /* the grouped walk, or the tile walk where job->tiled */
    const int grouped = !job->heads_inner && job->head_group > 1;
    /* the heads-inner walk's positions as two runs of rows for job->lines
     * (see there), their table rows packed */
    const ptrdiff_t rb = g->d * job->itemsize;
    const int runs = job->heads_inner && !job->one_head && job->lines != NULL &&
                     job->dup != NULL && g->H % 2 == 0 && g->x_h == rb && g->y_h == rb &&
                     g->r == g->d && (hb == 128 || hb == 256) &&   /* (rows of 2 or 4 vectors) */
                     ((uintptr_t)g->x & 31u) != 0 && (((uintptr_t)g->x - (uintptr_t)g->y) & 63u) == 0;
    void *pack_mem = (job->pack && grouped && job->tiled == NULL) || runs
                         ? malloc((size_t)(2 * job->rows * pb + 64)) : NULL;
    char *pack_buf = pack_mem == NULL ? NULL
                     : (char *)pack_mem + (64 - (uintptr_t)pack_mem % 64) % 64;
    /* the staged walk's buffer: per head of a group, STAGE_ROWS_BYTES of
     * rows, a line before them and a line of slack */
    const ptrdiff_t stage_rows = job->stage ? STAGE_ROWS_BYTES / rb : 0;
    const ptrdiff_t stage_step = (stage_rows * rb + 63) / 64 * 64 + 128;
    void *stage_mem = job->stage && grouped && job->tiled == NULL
                          ? malloc((size_t)(job->head_group * stage_step + 64)) : NULL;
    char *stage_buf = stage_mem == NULL ? NULL
                      : (char *)stage_mem + (64 - (uintptr_t)stage_mem % 64) % 64;
    for (ptrdiff_t t = begin; t < end; t++) {
        const ptrdiff_t b = t / job->blocks;
        const ptrdiff_t s0 = (t % job->blocks) * job->rows;
        const ptrdiff_t rows = g->S - s0 < job->rows ? g->S - s0 : job->rows;
        /* the next head's part of the block (the hardware prefetcher starts
         * afresh at each jump between heads; measured: about 5% of in-place
         * time) is prefetched, up to the part's bytes when they run forward */
        const ptrdiff_t span = g->x_s > 0 && g->x_inner > 0
                                   ? (rows - 1) * g->x_s + g->d * g->x_inner : 0;
        const ptrdiff_t pf = span < job->prefetch ? span : job->prefetch;
        const int tile_walk = grouped && job->tiled != NULL;
        /* (the grouped walk's tables packed as they are checked: see there) */
        const int dup = !tile_walk && job->dup &&
                        rows_duplicated(g, b, s0, rows, hb, pack_buf, job->pack_ft);
        const char *packed = dup ? pack_buf : NULL;
        /* the kernels of float32 copies of the tables (job->pack_ft) */
        const int ft = packed != NULL && job->pack_ft;
        const pe_rope_fn fn =
            tile_walk ? job->tiled      /* (tile_tables checks each tile) */
            : dup ? (ft ? job->dup_ft : job->dup) : job->fn;
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
        L.m = 1;
        L.x_outer = L.cos_outer = L.sin_outer = L.y_outer = 0;
        if (tile_walk) {
            /* (b, h, s, d) memory within the last-level cache: tiles of
             * job->tile positions, whose table rows stay in L1, each run
             * over pairs of heads (2 heads sharing each table row, m = the
             * tile's positions: the one-pass kernels loop over them
             * themselves), one call per pair, or one call for all where
             * the kernel is job->lines (which takes the pairs in turn
             * itself, and falls back to calls per pair): measured, Zen 4
             * EPYC VM, 1 thread, in place, x 16 bytes past a line, against
             * an in-place scale, 3 alternating processes, the build
             * before: (1, 32, 128, 128) float32 1.43-1.46x -> 1.37x,
             * interleaved 1.40-1.42x -> 1.29x, float64 (1, 32, 128, 64)
             * 1.46-1.50x -> 1.38-1.39x, (1, 32, 256, 64) float32
             * 1.46x -> 1.43-1.46x; out of place and the calls the kernel
             * falls back on even.  Measured earlier, 1 thread, Zen
             * 5 EPYC (48 KiB L1d), against the grouped walk below (the
             * build before, 3 alternating runs), mean over x at 0, 16, 32
             * and 48 bytes past a line, in place: (1, 32, 128, 128) float32
             * 34.7-35.4 -> 29.8-31.5 us; (1, 32, 32, 128) 8.7-8.8 -> 7.1-7.3
             * us; (1, 32, 512, 128) 151-156 -> 124-131 us; interleaved
             * (1, 32, 128, 128) 36.6-37.1 -> 32.4-34.2 us; d = 64 (1, 32,
             * 256, 64) 37.7-38.5 -> 34.9-36.6 us; float64 (1, 32, 64, 128)
             * 39.7-39.9 -> 32.6-33.7 us; out of place (1, 32, 128, 128)
             * 52.9-58.2 -> 49.7-55.0 us.  A first version was slower at
             * (1, 32, 1024, 128), 16 MiB (331 -> 362-444 us), and 2-3x
             * slower beyond the cache, hence a quarter of the LLC.  Tiles
             * of 8, 16 and 32 positions: 16 best (16 KiB of table rows);
             * one head per call (no pairs), and pairs called position by
             * position, both slower than the grouped walk.  float16
             * slower too ((1, 32, 128, 128) in place 29.5-30.3 -> 32.4-34.2
             * us; its kernels run the groups one call each), bfloat16 even
             * (58-60 us): the tile walk is the one-pass kernels'
             * (job->tiled). */
            L.x_step = g->x_h;
            L.y_step = g->y_h;
            L.cos_step = 0;
            L.sin_step = 0;
            L.x_outer = g->x_s;
            L.y_outer = g->y_s;
            for (ptrdiff_t p0 = s0; p0 < s0 + rows; p0 += job->tile) {
                _Alignas(64) char tbuf[2][TILE_TABLE_BYTES];
                pe_rope_fn tfn;
                L.m = s0 + rows - p0 < job->tile ? s0 + rows - p0 : job->tile;
                L.cos = g->cos + b * g->cos_b + p0 * g->cos_s;
                L.sin = g->sin + b * g->sin_b + p0 * g->sin_s;
                L.cos_outer = g->cos_s;
                L.sin_outer = g->sin_s;
                tfn = tile_tables(job, &L, b, p0, tbuf, g->y + b * g->y_b + p0 * g->y_s);
                L.n = g->H;
                L.x = g->x + b * g->x_b + p0 * g->x_s;
                L.y = g->y + b * g->y_b + p0 * g->y_s;
                if (tfn == job->lines)
                    tfn(&L);      /* (its pairs of heads in turn, as below) */
                else
                    rope_in_pairs(&L, tfn);
            }
            continue;
        }
        if (grouped) {
            /* (b, h, s, d) memory: groups of heads (about 2 KiB of x per
             * position), position by position within the group, each call
             * over the group's heads sharing the position's table row: a
             * few forward streams, each table row read once per group.
             * Measured, 1 thread, CPU time, (1, 32, 8192, 128) float32:
             * in place, one head at a time 1.8x an in-place scale, groups
             * of 2 1.5x, 4 1.2x, 8 1.4x, 32 2.9x; out of place (streaming
             * stores, one fence per task) one head 1.5x a copy, 2 1.24x,
             * 4 1.11x, 8 1.16x; float64 out of place best at 2.
             *
             * For large arrays (job->pack), the duplicated-table kernels'
             * half rows of the block (every group reads them again) are
             * first copied side by side into one buffer (rows_duplicated):
             * read in place, half of each row's lines skipped, they came
             * from the caches beyond L2 on every group.  Measured, 1
             * thread, Zen 5 EPYC, out of place against the build before (5
             * alternating runs; a streaming copy of the same bytes 4.8-5.5
             * ms): float64 (1, 32, 4096, 128) into np.empty_like(x)
             * 7.5-8.3 -> 6.4-7.0 ms, float32 (1, 32, 8192, 128) y on a
             * line 6.6-7.4 -> 5.4-5.6 ms (with the SSE2 one-pass change,
             * into np.empty_like 6.2-6.5 -> 5.9-6.2 ms).  In place,
             * toggled in one process (an in-place scale 4.7-4.8 ms):
             * float64 6.19 / 6.30 -> 5.63 / 5.75 ms, float16 (1, 32,
             * 16384, 128) 5.90 / 6.27 -> 5.44 / 5.49 ms, float32 even;
             * 16 MiB float32 0.38 -> 0.33 ms (2 threads 0.28 -> 0.19).
             * Interleaved (whole rows, in order) is not packed. */
            const ptrdiff_t G = job->head_group;
            const char *cos0 = packed != NULL ? packed : g->cos + b * g->cos_b + s0 * g->cos_s;
            const char *sin0 = packed != NULL ? packed + pb : g->sin + b * g->sin_b + s0 * g->sin_s;
            const ptrdiff_t cos_s = packed != NULL ? 2 * pb : g->cos_s;
            const ptrdiff_t sin_s = packed != NULL ? 2 * pb : g->sin_s;
            /* the table bytes of a row the kernel reads (job->lead) */
            const ptrdiff_t tb = ft ? pb : fn == job->dup ? hb : g->r * job->itemsize;
            L.x_step = g->x_h;
            L.y_step = stage_buf != NULL ? stage_step : g->y_h;
            L.cos_step = 0;
            L.sin_step = 0;
            for (ptrdiff_t h0 = 0; h0 < g->H; h0 += G) {
                /* head h0's rows of the block from y0; staged (see
                 * STAGE_ROWS_BYTES), at offsets from y0 in the buffer from
                 * bo on, [fo, ...) not yet stored, the other heads' rows
                 * q * y_h on and their buffers q * stage_step */
                char *const y0 = g->y + b * g->y_b + h0 * g->y_h + s0 * g->y_s;
                ptrdiff_t bo = -(ptrdiff_t)((uintptr_t)y0 % 64), fo = 0;
                L.n = g->H - h0 < G ? g->H - h0 : G;
                /* y 16 bytes past a line (float16, bfloat16: or on one),
                 * realigned in registers (half_realign_fwd_f32,
                 * f16_realign1_fwd) instead of staged: each head's carry */
                const int realign =
                    job->realign != NULL && fn == (job->dup != NULL ? job->dup : job->fn);
                _Alignas(64) char carry[ROPE_GROUP_MAX * 64] = {0};
                if (realign) {
                    /* float16/bfloat16: head q at row t - q, so that the
                     * heads' rows in flight lie at different offsets within
                     * a page (see pe_rope_apply); float32/float64 measured
                     * slower so: no skew */
                    const ptrdiff_t sk = job->itemsize == 2;
                    for (ptrdiff_t t = 0; t < rows + (L.n - 1) * sk; t++) {
                        /* (position t: head 0's now, head q's q rows on) */
                        if (job->lead && t < rows)
                            prefetch_position(g->x + b * g->x_b + h0 * g->x_h + (s0 + t) * g->x_s,
                                              g->x_h, L.n, row, cos0 + t * cos_s,
                                              sin0 + t * sin_s, tb, 0);
                        for (ptrdiff_t q = 0; q < L.n; q++) {
                            const ptrdiff_t k = t - q * sk;
                            if (k < 0 || k >= rows)
                                continue;
                            const char *xq = g->x + b * g->x_b + (h0 + q) * g->x_h +
                                             (s0 + k) * g->x_s;
                            if (job->ahead > 0 && k + job->ahead < rows)
                                pe_prefetch(xq + job->ahead * g->x_s, row);
                            job->realign(xq, y0 + q * g->y_h + k * rb, cos0 + k * cos_s,
                                         sin0 + k * sin_s, g->r / 2, carry + 64 * q, k == 0,
                                         k + 1 == rows);
                        }
                    }
                    continue;
                }
                for (ptrdiff_t k = 0; k < rows; k++) {
                    L.x = g->x + b * g->x_b + h0 * g->x_h + (s0 + k) * g->x_s;
                    L.y = stage_buf != NULL ? stage_buf + (k * rb - bo) : y0 + k * g->y_s;
                    if (job->ahead > 0 && k + job->ahead < rows)
                        for (ptrdiff_t q = 0; q < L.n; q++)
                            pe_prefetch(L.x + q * g->x_h + job->ahead * g->x_s, row);
                    L.cos = cos0 + k * cos_s;
                    L.sin = sin0 + k * sin_s;
                    if (job->lead)
                        prefetch_position(L.x, g->x_h, L.n, row, L.cos, L.sin, tb,
                                          job->next_l2 && k + 1 < rows ? g->x_s : 0);
                    fn(&L);
                    if (stage_buf != NULL && ((k + 1) % stage_rows == 0 || k + 1 == rows)) {
                        ptrdiff_t nb = bo;
                        for (ptrdiff_t q = 0; q < L.n; q++)
                            nb = stage_flush(stage_buf + q * stage_step, y0 + q * g->y_h, bo, fo,
                                             (k + 1) * rb, k + 1 == rows, job->stage);
                        fo = fo > nb ? fo : nb;
                        bo = nb;
                    }
                }
            }
            continue;
        }
        if (job->heads_inner) {
            /* (b, s, h, d) memory (HF's view().transpose(1, 2), Meta's
             * layout, heads sliced from a fused projection): position by
             * position, a forward walk through x.  The kernel's order
             * within a position (pairs of heads, both halves) is not one
             * the hardware prefetcher runs ahead of, and it restarts at
             * every gap between positions (sliced heads), so x is
             * prefetched one position ahead:
             * - up to the last-level cache, every head of a position in one
             *   call (sharing its table row), the whole next position
             *   prefetched first (up to a quarter of L2), unless y streams;
             *   where the heads' rows lie one after another past a line
             *   (Meta's layout from NumPy: 16 bytes), are rows the kernel
             *   takes (every feature rotating, 2 or 4 vectors a half row:
             *   others fell back at every position, packed for nothing,
             *   float32 d = 96 55-56 -> 69-72 us) and the table rows are
             *   HF's duplicated ones, job->lines (realigned in
             *   registers, see DEFINE_ROPE_LINES) over the position's rows
             *   as two runs of H / 2 rows (as two heads, sharing the table
             *   loads), the block's half table rows packed on lines as
             *   they are checked (runs).  Measured, Zen 4 EPYC VM, in
             *   place, x 16 bytes past a line, against an in-place scale,
             *   3 alternating processes, the build before (all heads in
             *   one call of the one-pass kernel): float32 (1, 128, 32,
             *   128) 1.55-1.59x -> 1.40-1.47x (1 thread), 1.57-1.60x ->
             *   1.47-1.48x (2 threads), float64 d = 64 1.33-1.56x ->
             *   1.20-1.43x (1 thread), 1.39-1.56x -> 1.23-1.48x (2
             *   threads; 1.56-1.58x -> 1.64-1.66x in 3 other pairs),
             *   (1, 512, 32, 128) 1.48-1.50x -> 1.42-1.44x; out of place
             *   even.  (One run of 32 rows: 1.59-1.61x; runs of 8, 4: 1.52,
             *   1.62x, settings alternated in one process, 1.53-1.56x
             *   without);
             * - beyond it (one_head, where the measured choice
             *   job->choice_one says so: see pe_rope_apply), one head per
             *   call, that head's row at the next position prefetched into
             *   L2 as it starts (see below).
             * Measured, 1 thread, Zen 5 EPYC, float32, all heads per call
             * against one head: (1, 32, 8192, 128) sliced heads of a fused
             * qkv into a new array 12.3 -> 6.3-7.2 ms (the contiguous call
             * 5.7-6.9 ms; the whole next position prefetched: 10.5-10.9 ms;
             * two heads per call: 7.0-7.4 ms), in place 7.4-7.5 -> 5.6-6.4
             * ms; HF's transposed q in place 5.2 -> 4.4-4.8 ms.  Up to the
             * cache, all heads per call with the prefetch was faster:
             * (1, 32, 1024, 128) in place 295-305 us against 445-450 us one
             * head per call and 394-400 us without the prefetch.  Earlier,
             * the prefetch took HF's transposed q in place from 6.86-6.94
             * to 5.52-5.61 ms, and made streaming new arrays slower (5.8-6.3
             * -> 9.0-9.3 ms), so not there.
             * The next position goes into L1 (prefetcht0) beside the one
             * being rotated, so only where both and the table rows fit in
             * L1d (Zen 5's 48 KiB: 2 x 16 KiB + 1 KiB for 32 heads of 128
             * float32).  On a Zen 3 EPYC VM (32 KiB L1d), 1 thread,
             * (1, s, 32, 128) float32 in place, min of 31 runs, the
             * prefetch against none: s = 128 64-87 -> 51-68 us (HF's
             * layout 53-71), s = 512 282-331 -> 211-225 us (HF's 250-321),
             * s = 2048 3.38-3.85 -> 2.33-2.71 ms; 1 or 4 KiB of the next
             * position, or the heads' part of it before each call of 8, 4
             * or 2 heads, between the two.
             * One head per call, the row prefetched into L1 (prefetcht0,
             * as before) against L2 (prefetcht1), Zen 4 EPYC VM, 1
             * thread, (1, 32, 8192, 128) float32, one head per call forced,
             * settings alternated in one process, medians of 21 rounds:
             * sliced heads of a fused qkv in place 12.97 -> 7.96 ms (the
             * contiguous call 5.8-6.1), into a new array 16.16 -> 12.50
             * ms, into (b, s, h, d) y 17.61 -> 15.29 ms; HF's transposed q
             * in place 8.27 -> 6.87 ms, new array 13.42 -> 11.62; Meta's
             * layout in place 8.27 -> 6.47, new array 13.84 -> 11.28.
             * (A C read of the sliced heads' bytes alone, 16 of every 24
             * KiB: 2.35-2.61x a dense read of as many bytes, 1.47-1.55x a
             * read of the whole span, gaps included; with each line of the
             * next position prefetched into L2 as the same line of this
             * one is read 1.13-1.29x, into L1 1.66-2.22x, in 3 runs of a
             * first harness and benchmarks/strided_read.c.)  The
             * whole next position into L2 before each call of all heads
             * was slower for HF's q (in place 7.2 -> 13.9 ms): not there. */
            const ptrdiff_t span = g->x_h > 0 && g->x_s > 0 && g->x_inner > 0
                                       ? (g->H - 1) * g->x_h + g->d * g->x_inner : 0;
            const ptrdiff_t ahead =
                !job->streaming && 2 * (span + 2 * g->r * job->itemsize) <= pe_cache_l1_bytes()
                    ? span : 0;
            L.n = job->one_head ? 1 : g->H;
            L.x_step = g->x_h;
            L.y_step = g->y_h;
            L.cos_step = 0;
            L.sin_step = 0;
            for (ptrdiff_t k = 0; k < rows; k++) {
                const char *x = g->x + b * g->x_b + (s0 + k) * g->x_s;
                char *y = g->y + b * g->y_b + (s0 + k) * g->y_s;
                L.cos = g->cos + b * g->cos_b + (s0 + k) * g->cos_s;
                L.sin = g->sin + b * g->sin_b + (s0 + k) * g->sin_s;
                if (!job->one_head) {
                    L.x = x;
                    L.y = y;
                    if (k + 1 < rows)
                        pe_prefetch(x + g->x_s, ahead);
                    if (runs && packed != NULL) {
                        pe_rope_loop R = L;
                        R.n = 2;
                        R.m = g->H / 2;
                        R.x_step = R.m * g->x_h;
                        R.y_step = R.m * g->y_h;
                        R.x_outer = g->x_h;
                        R.y_outer = g->y_h;
                        R.cos = packed + k * 2 * hb;
                        R.sin = packed + k * 2 * hb + hb;
                        R.cos_outer = R.sin_outer = 0;
                        job->lines(&R);
                    } else {
                        fn(&L);
                    }
                    continue;
                }
                for (ptrdiff_t q = 0; q < g->H; q++) {
                    L.x = x + q * g->x_h;
                    L.y = y + q * g->y_h;
                    if (k + 1 < rows)
                        pe_prefetch_l2(L.x + g->x_s, row);
                    fn(&L);
                }
            }
            continue;
        }
        for (ptrdiff_t h = 0; h < g->H; h++) {
            L.x = g->x + b * g->x_b + h * g->x_h + s0 * g->x_s;
            L.y = g->y + b * g->y_b + h * g->y_h + s0 * g->y_s;
            if (h + 1 < g->H)
                pe_prefetch(L.x + g->x_h, pf);
            fn(&L);
        }
    }
#if defined(PE_X86_SIMD)
    if (job->streaming || stage_buf != NULL || job->realign != NULL)
        _mm_sfence();   /* order the streaming stores before the task ends */
#endif
    free(pack_mem);
    free(stage_mem);
}

/*
 * The table bytes (cos and sin rows) of one block of positions: the size of
 * one core's L2 cache, read at run time (pe_cache_l2_bytes).  Every head of
 * the block runs over the block's rows while they stay in L2, so each
 * head's part is one long forward run (rows x d x itemsize bytes) that the
 * hardware prefetcher follows.  Measured on a 1 MiB-L2, 32 MiB-L3 EPYC,
 * in-place (1, 32, 8192, 128) float32 at 1 thread (CPU time, against an
 * in-place scale of the same bytes): 16 KiB blocks (8 KiB runs per head)
 * 3.4x the scale, 64 KiB 2.9x, 256 KiB 2.8x, 1 MiB 1.9-2.0x, 4 MiB 1.8x,
 * 16 MiB 2.2-2.4x; out of place with streaming stores, against a copy:
 * 128 KiB 2.1x, 1 MiB 1.5x.
 */
static ptrdiff_t rope_block_table_bytes(void)
{
    return pe_cache_l2_bytes();
}

/* table_bytes: the cos and sin rows of one block, about; blocks stay
 * numerous enough (8 per thread where rows allow) to spread over the pool;
 * group_bytes: about the bytes of x in a group of the grouped walk */
static int grid_run(rope_grid_job *job, ptrdiff_t table_bytes, ptrdiff_t group_bytes)
{
    const pe_rope_grid *g = job->g;
    const ptrdiff_t row_bytes = 2 * (g->r > 0 ? g->r : 1) * job->itemsize;
    ptrdiff_t rows = table_bytes / row_bytes, block_bytes;
    if (g->B <= 0 || g->H <= 0 || g->S <= 0)
        return 0;
    if (rows < 1)
        rows = 1;
    if (rows > g->S)
        rows = g->S;
    {
        /* only for calls the pool splits (two parts of PE_PARALLEL_MIN_BYTES
         * at least): a call it runs on one thread gained nothing from the
         * smaller blocks (callgrind, (1, 32, 64, 128) float32 in place, 200
         * calls: 22.33 M instructions in posemb._core with 2 threads set,
         * blocks of 16 positions, against 21.91 M with 1 thread; now 21.92
         * M either way) */
        const ptrdiff_t want = 8 * (ptrdiff_t)pe_get_num_threads();
        const ptrdiff_t all = g->B * g->H * g->S * rope_vector_bytes(g->d, 0, job->itemsize);
        if (pe_get_num_threads() > 1 && all / 2 >= PE_PARALLEL_MIN_BYTES &&
            g->B * ((g->S + rows - 1) / rows) < want) {
            ptrdiff_t r = g->B * g->S / want;
            if (r < 16)
                r = 16;
            if (r < rows)
                rows = r;
        }
    }
    job->rows = rows;
    job->blocks = (g->S + rows - 1) / rows;
    {
        const ptrdiff_t vec = (g->d > 0 ? g->d : 1) * job->itemsize;
        job->head_group = vec < group_bytes ? group_bytes / vec : 1;
        if (job->head_group > ROPE_GROUP_MAX)
            job->head_group = ROPE_GROUP_MAX;
    }
    {
        const ptrdiff_t ah = g->x_h < 0 ? -g->x_h : g->x_h;
        const ptrdiff_t as = g->x_s < 0 ? -g->x_s : g->x_s;
        job->heads_inner = g->H > 1 && g->S > 1 && ah < as;
    }
    block_bytes = g->H * rows * rope_vector_bytes(g->d, 0, job->itemsize);
    {
        /* the measured choices (job->choice, job->choice_one) of the walk
         * this call takes, timed here */
        const int kind = job->heads_inner                ? job->choice_one
                         : job->head_group > 1           ? job->choice : -1;
        const int way = kind >= 0 ? pe_choice_way(kind) : -1;
        double t0 = 0;
        int rc;
        if (way >= 0) {
            if (job->heads_inner)
                job->one_head = way;
            else if (way == 0)
                job->ahead = 0;
            t0 = pe_now_seconds();
        }
        rc = pe_parallel_for_stoppable(g->B * job->blocks, PE_PARALLEL_MIN_BYTES / block_bytes + 1,
                                       block_bytes, rope_grid_task, job, g->stop);
        if (way >= 0 && rc == 0)
            pe_choice_report(kind, way, pe_now_seconds() - t0,
                             (double)g->B * (double)g->H * (double)g->S * (double)g->d *
                                 (double)job->itemsize);
        return rc;
    }
}

/* is p a multiple of a (a power of two)? */
#define ALIGNED(p, a) ((((uintptr_t)(p)) & ((uintptr_t)(a) - 1u)) == 0)

/*
 * The kernels of the dispatched CPU level (pe_rope_dispatch, called once
 * at import): full[kind][type] for any vectors (type 0..3: float16,
 * float32, float64, bfloat16), dup[back][type] for duplicated half-split
 * tables, reading only the first half of each table row (float16 and
 * bfloat16: at AVX2 and above, float16 with F16C), the explicit SIMD
 * kernels one[interleaved][back][f64][run width: 16, 32 or 64 bytes] and
 * nt[..][..][..][store width: 16 bytes, nt_align], and nt_half (NULL where
 * the level has none).
 */
static struct {
    pe_rope_fn full[4][4];
    pe_rope_fn dup[2][4];
    pe_rope_fn one[2][2][2][3];
    pe_rope_fn nt[2][2][2][2];
    pe_rope_fn nt_half[2][2]; /* [bf16][back]: float16/bfloat16 duplicated
                               * tables, streaming (NULL: none) */
    ptrdiff_t nt_align;  /* the bytes each of nt[..][1]'s streaming stores writes */
    rope_realign_fn realign[2][2][2];  /* [interleaved][f64][back]: y 16 bytes
                                        * past a line (half-split: duplicated
                                        * tables) (NULL: none) */
    rope_realign_fn realign_hp[2][2][2]; /* [bf16][y 16 bytes past a line][back]:
                                          * float16/bfloat16, half-split,
                                          * duplicated tables (NULL: none) */
    pe_rope_fn pipe[2][2];  /* [f64][back]: half-split rows of 1 KiB or more
                             * in place beyond the last-level cache
                             * (DEFINE_ROPE_PIPE; NULL: none) */
    /* float16, half-split, the kernels of the float32 table copies
     * (rope_grid_job.pack_ft, in place; NULL: none): dup[back]'s */
    pe_rope_fn dup_ft[2];
    pe_rope_fn lines[2][2][2];  /* [interleaved][f64][back]: rows past a line
                                 * within the cache (DEFINE_ROPE_LINES,
                                 * DEFINE_INTER_LINES; NULL: none) */
    rope_copy_dup_fn copy_dup;  /* tile_tables' copy of duplicated half
                                 * rows, checked (copy_rows_dup) */
} rope_table = {   /* baseline until pe_rope_dispatch runs (C-only callers) */
    {{pe_rope_half_fwd_f16, pe_rope_half_fwd_f32, pe_rope_half_fwd_f64, pe_rope_half_fwd_bf16},
     {pe_rope_half_back_f16, pe_rope_half_back_f32, pe_rope_half_back_f64,
      pe_rope_half_back_bf16},
     {pe_rope_inter_fwd_f16, pe_rope_inter_fwd_f32, pe_rope_inter_fwd_f64,
      pe_rope_inter_fwd_bf16},
     {pe_rope_inter_back_f16, pe_rope_inter_back_f32, pe_rope_inter_back_f64,
      pe_rope_inter_back_bf16}},
    {{NULL, rope_dup_fwd_f32, rope_dup_fwd_f64, NULL},
     {NULL, rope_dup_back_f32, rope_dup_back_f64, NULL}},
    {{{{NULL}}}}, {{{{NULL}}}}, {{NULL}}, 16, {{{NULL}}}, {{{NULL}}}, {{NULL}},
    {NULL}, {{{NULL}}}, copy_rows_dup};

const char *pe_rope_dispatch(int level)
{
    static const pe_rope_fn dup_c[2][4] = {
        {NULL, rope_dup_fwd_f32, rope_dup_fwd_f64, NULL},
        {NULL, rope_dup_back_f32, rope_dup_back_f64, NULL}};
    rope_table.full[0][1] = pe_rope_half_fwd_f32;
    rope_table.full[0][2] = pe_rope_half_fwd_f64;
    rope_table.full[1][1] = pe_rope_half_back_f32;
    rope_table.full[1][2] = pe_rope_half_back_f64;
    rope_table.full[2][1] = pe_rope_inter_fwd_f32;
    rope_table.full[2][2] = pe_rope_inter_fwd_f64;
    rope_table.full[3][1] = pe_rope_inter_back_f32;
    rope_table.full[3][2] = pe_rope_inter_back_f64;
    memcpy(rope_table.dup, dup_c, sizeof dup_c);
    rope_table.copy_dup = copy_rows_dup;
    memset(rope_halfprec, 0, sizeof rope_halfprec);
    memset(rope_halfprec_wide, 0, sizeof rope_halfprec_wide);
#if defined(PE_HAVE_NEON_ROPE)
    /* AArch64: NEON is in every CPU (ARMv8-A), float32 only */
    rope_table.full[0][1] = pe_rope_half_fwd_f32_neon;
    rope_table.full[1][1] = pe_rope_half_back_f32_neon;
    rope_table.full[2][1] = pe_rope_inter_fwd_f32_neon;
    rope_table.full[3][1] = pe_rope_inter_back_f32_neon;
    (void)level;
    return "neon";
#endif
    memset(rope_table.one, 0, sizeof rope_table.one);
    memset(rope_table.nt, 0, sizeof rope_table.nt);
    memset(rope_table.nt_half, 0, sizeof rope_table.nt_half);
    memset(rope_table.realign, 0, sizeof rope_table.realign);
    memset(rope_table.realign_hp, 0, sizeof rope_table.realign_hp);
    memset(rope_table.dup_ft, 0, sizeof rope_table.dup_ft);
    memset(rope_table.lines, 0, sizeof rope_table.lines);
    rope_table.nt_align = 16;
#if defined(PE_X86_SIMD)
    if (level >= PE_CPU_AVX2) {
        static const pe_rope_fn full_avx2[4][2] = {
            {rope_half_fwd_f32_avx2, rope_half_fwd_f64_avx2},
            {rope_half_back_f32_avx2, rope_half_back_f64_avx2},
            {rope_inter_fwd_f32_avx2, rope_inter_fwd_f64_avx2},
            {rope_inter_back_f32_avx2, rope_inter_back_f64_avx2}};
        static const pe_rope_fn dup_avx2[2][2] = {
            {rope_dup_fwd_f32_avx2, rope_dup_fwd_f64_avx2},
            {rope_dup_back_f32_avx2, rope_dup_back_f64_avx2}};
        static const pe_rope_fn f16c[2][2] = {{f16c_half_fwd, f16c_half_back},
                                              {f16c_inter_fwd, f16c_inter_back}};
        static const pe_rope_fn bf16[2][2] = {{bf16x16_half_fwd, bf16x16_half_back},
                                              {bf16x16_inter_fwd, bf16x16_inter_back}};
        for (int k = 0; k < 4; k++)
            memcpy(&rope_table.full[k][1], full_avx2[k], sizeof full_avx2[k]);
        for (int b = 0; b < 2; b++)
            memcpy(&rope_table.dup[b][1], dup_avx2[b], sizeof dup_avx2[b]);
        if (pe_cpu_f16c()) {
            memcpy(rope_halfprec[0], f16c, sizeof f16c);
            rope_table.dup[0][0] = f16c_dup_fwd;
            rope_table.dup[1][0] = f16c_dup_back;
            rope_table.nt_half[0][0] = f16c_nt_dup_fwd;
            rope_table.nt_half[0][1] = f16c_nt_dup_back;
            rope_table.dup_ft[0] = f16c_ft_dup_fwd;
            rope_table.dup_ft[1] = f16c_ft_dup_back;
        }
        memcpy(rope_halfprec[1], bf16, sizeof bf16);
        rope_table.dup[0][3] = bf16x16_dup_fwd;
        rope_table.dup[1][3] = bf16x16_dup_back;
        {
            static const rope_realign_fn realign_hp[2][2][2] = {
                {{f16_realign0_avx2_fwd, f16_realign0_avx2_back},
                 {f16_realign1_avx2_fwd, f16_realign1_avx2_back}},
                {{bf16_realign0_avx2_fwd, bf16_realign0_avx2_back},
                 {bf16_realign1_avx2_fwd, bf16_realign1_avx2_back}}};
            if (pe_cpu_f16c())
                memcpy(rope_table.realign_hp[0], realign_hp[0], sizeof realign_hp[0]);
            memcpy(rope_table.realign_hp[1], realign_hp[1], sizeof realign_hp[1]);
        }
        static const rope_realign_fn realign[2][2][2] = {
            {{half_realign_fwd_f32, half_realign_back_f32},
             {half_realign_fwd_f64, half_realign_back_f64}},
            {{inter_realign_fwd_f32, inter_realign_back_f32},
             {inter_realign_fwd_f64, inter_realign_back_f64}}};
        memcpy(rope_table.realign, realign, sizeof realign);
        rope_table.copy_dup = copy_rows_dup_avx2;
    }
    if (level >= PE_CPU_SSE2) {
        const int avx2 = level >= PE_CPU_AVX2;
        /* AVX-512 one-pass kernels (runs of 64 bytes; the interleaved ones
         * use vxorps on zmm, which is AVX-512DQ).  Separate mul and add/sub
         * instructions (-ffp-contract=off): the bits of the C formula. */
        __builtin_cpu_init();
        const int avx512 = level >= PE_CPU_AVX512 && __builtin_cpu_supports("avx512dq");
        const int bf16c = avx512 && level >= PE_CPU_AVX512BF16;   /* (it has BW, DQ) */
        for (int i = 0; i < 2; i++)
            for (int b = 0; b < 2; b++)
                for (int f = 0; f < 2; f++) {
                    rope_table.one[i][b][f][0] = rope_one_x86[i][b][f][0];
                    rope_table.one[i][b][f][1] = rope_one_x86[i][b][f][avx2];
                    rope_table.one[i][b][f][2] =
                        avx512 ? rope_one_avx512[i][b][f] : rope_one_x86[i][b][f][avx2];
                    rope_table.nt[i][b][f][0] = rope_nt_x86[i][b][f][0];
                    rope_table.nt[i][b][f][1] = rope_nt_x86[i][b][f][avx2];
                }
        rope_table.nt_align = avx2 ? 32 : 16;
        if (avx512) {
            static const pe_rope_fn pipe[2][2] = {
                {rope_pipe_avx512f_fwd_f32, rope_pipe_avx512f_back_f32},
                {rope_pipe_avx512f_fwd_f64, rope_pipe_avx512f_back_f64}};
            memcpy(rope_table.pipe, pipe, sizeof pipe);
            static const pe_rope_fn lines[2][2][2] = {
                {{rope_lines_avx512f_fwd_f32, rope_lines_avx512f_back_f32},
                 {rope_lines_avx512f_fwd_f64, rope_lines_avx512f_back_f64}},
                {{inter_lines_avx512dq_fwd_f32, inter_lines_avx512dq_back_f32},
                 {inter_lines_avx512dq_fwd_f64, inter_lines_avx512dq_back_f64}}};
            memcpy(rope_table.lines, lines, sizeof lines);
            rope_table.copy_dup = copy_rows_dup_avx512;
            static const pe_rope_fn bf16_wide[2][2][2] = {
                {{bf16x32_half_fwd, bf16x32_half_back}, {bf16x32_inter_fwd, bf16x32_inter_back}},
                {{bf16x32c_half_fwd, bf16x32c_half_back},
                 {bf16x32c_inter_fwd, bf16x32c_inter_back}}};
            static const pe_rope_fn bf16_dup[2][2][2] = {
                {{bf16x32_dup_fwd, bf16x32_dup_back}, {bf16x32_nt_dup_fwd, bf16x32_nt_dup_back}},
                {{bf16x32c_dup_fwd, bf16x32c_dup_back},
                 {bf16x32c_nt_dup_fwd, bf16x32c_nt_dup_back}}};
            const int c = bf16c;
            memcpy(rope_halfprec_wide[1], bf16_wide[c], sizeof bf16_wide[c]);
            rope_table.dup[0][3] = bf16_dup[c][0][0];
            rope_table.dup[1][3] = bf16_dup[c][0][1];
            rope_table.nt_half[1][0] = bf16_dup[c][1][0];
            rope_table.nt_half[1][1] = bf16_dup[c][1][1];
            static const rope_realign_fn realign_hp[3][2][2] = {
                {{f16_realign0_fwd, f16_realign0_back}, {f16_realign1_fwd, f16_realign1_back}},
                {{bf16_realign0_fwd, bf16_realign0_back},
                 {bf16_realign1_fwd, bf16_realign1_back}},
                {{bf16c_realign0_fwd, bf16c_realign0_back},
                 {bf16c_realign1_fwd, bf16c_realign1_back}}};
            memcpy(rope_table.realign_hp[1], realign_hp[1 + c], sizeof realign_hp[1]);
            if (__builtin_cpu_supports("f16c")) {   /* (the 8-wide F16C kernels serve
                                                     * the other calls) */
                static const pe_rope_fn f16_wide[2][2] = {
                    {avx512_f16_half_fwd, avx512_f16_half_back},
                    {avx512_f16_inter_fwd, avx512_f16_inter_back}};
                memcpy(rope_halfprec_wide[0], f16_wide, sizeof f16_wide);
                memcpy(rope_table.realign_hp[0], realign_hp[0], sizeof realign_hp[0]);
                rope_table.dup[0][0] = avx512_f16_dup_fwd;
                rope_table.dup[1][0] = avx512_f16_dup_back;
                rope_table.dup_ft[0] = avx512_f16_ft_dup_fwd;
                rope_table.dup_ft[1] = avx512_f16_ft_dup_back;
            }
        }
        return bf16c ? "avx512bf16" : avx512 ? "avx512" : avx2 ? "avx2" : "sse2";
    }
#else
    (void)level;
#endif
    return "baseline";
}

pe_rope_fn pe_rope_kernel(int kind, int type)
{
    return rope_table.full[kind][type];
}

int pe_rope_apply(const pe_rope_grid *grid, int kind, int type)
{
    static const ptrdiff_t itemsizes[4] = {2, 4, 8, 2};
    const ptrdiff_t itemsize = itemsizes[type];
    const int inter = kind >= 2, back = kind & 1;
    pe_rope_grid gv = *grid;
    const pe_rope_grid *g = &gv;
    const ptrdiff_t h = g->r / 2;
    rope_grid_job job = {rope_table.full[kind][type],
                         inter ? NULL : rope_table.dup[back][type], g,
                         itemsize, 2048, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0, NULL, -1, -1, 0,
                         0, 0, NULL, NULL, rope_table.copy_dup};
    int tables_ok, in_place, large, past_llc;
    ptrdiff_t llc_vectors, group_bytes = ROPE_GROUP_BYTES;
    /* a length-1 axis has no stride (NumPy may pass any): 0, so that the
     * in-place test below sees x and y alike */
    if (gv.B == 1)
        gv.x_b = gv.y_b = gv.cos_b = gv.sin_b = 0;
    if (gv.H == 1)
        gv.x_h = gv.y_h = 0;
    if (gv.S == 1)
        gv.x_s = gv.y_s = gv.cos_s = gv.sin_s = 0;
    tables_ok = g->cos_inner == itemsize && g->sin_inner == itemsize && h > 0;
    in_place = g->y == g->x && g->y_b == g->x_b && g->y_h == g->x_h && g->y_s == g->x_s;
    /* at least PE_STREAM_MIN_BYTES of x: prefetch (and streaming stores
     * from pe_cpu_stream_min_bytes) */
    large = g->d > 0 && g->B * g->H * g->S >= PE_STREAM_MIN_BYTES / (g->d * itemsize);
    /* the vectors of x (and y, out of place) that the last-level cache
     * holds; beyond them x passes through memory */
    llc_vectors = g->d > 0 ? pe_cache_llc_bytes() / ((in_place ? 1 : 2) * g->d * itemsize) : 0;
    past_llc = g->d > 0 && g->B * g->H * g->S > llc_vectors;
    if (!tables_ok || g->x_inner != itemsize || g->y_inner != itemsize)
        job.dup = NULL;   /* the dup kernels need contiguous vectors and rows */
    if (type == 0 && job.dup != NULL)
        job.dup_ft = rope_table.dup_ft[back];
    /* Rows of ROPE_LONG_ROW bytes or more beyond the cache go in groups of
     * 4 KiB of rows (4 heads of 1 KiB, not 2; 2 of 2 KiB), whatever the
     * kernel; half-split, each position's
     * rows of x and table rows are prefetched first, every line of them in
     * memory order (job->lead, prefetch_position): those kernels read each
     * row as two streams half a row apart, which with rows of 1 KiB the
     * hardware prefetcher does not follow.  An in-place pass over 128 MiB
     * in rows, line i of each row beside line i + h, against one in order
     * (benchmarks/halves_read.c, Zen 4 EPYC VM): rows of 256 and 512 bytes
     * 1.0x, 1 KiB 1.7x with 64-byte vectors (1.3x with 32-byte, 1.0x with
     * 16-byte), 2 and 4 KiB 2.1-2.7x; each row's lines prefetched in order
     * just before it, 1.0-1.1x.  Earlier, a C harness of the grouped walk:
     * the rotation 1.3-1.5x a streaming copy with 1 KiB rows, 1.0x with
     * the table row in L1.
     * Measured through apply_rope, Zen 4 EPYC VM (1 MiB L2, 32 MiB L3), each
     * call over a streaming copy or an in-place scale timed just before it,
     * settings alternated in one process, 11-13 rounds (medians): float64
     * (1, 32, 4096, 128) into np.empty_like(x) 1.56-1.60x in groups of 2,
     * 1.94x of 4, 1.20-1.25x of 4 with the prefetch (2 threads 1.38x ->
     * 1.12x); into y on a line 1.01x -> 0.88x; float32 (1, 32, 4096, 256)
     * 1.54-1.59x -> 1.21-1.24x; interleaved float64 in place 1.38-1.43x ->
     * 1.12x with 4 heads (2 threads 1.16x -> 1.12x), out of place 1.18x ->
     * 1.15x (with the prefetch 1.34x: not there), float32 head size 256 in
     * place 1.43x -> 1.13x.  Half-split in place, the pipelined kernels,
     * prefetched only the table rows until the prefetch covered the last
     * line of each row (a row of 1 KiB 16 bytes past a line, where NumPy
     * puts large arrays, spans 17 lines, and pe_prefetch(x, 1024) asks for
     * 16: the kernel's last loads of every row then waited for memory).
     * With every line, the rows of x too (15-21 rounds; the first figure
     * the table rows alone, as before): float32 (1, 32, 4096, 256)
     * 1.39-1.43x an in-place scale -> 1.24-1.33x (the 16 lines alone:
     * 1.32-1.34x), float64 (1, 32, 4096, 128) 1.38-1.47x -> 1.33-1.38x;
     * 2 threads 7.7 -> 6.9 ms and 6.2 -> 5.7 ms; out of place (already so,
     * now every line, and the table rows checked in order: see
     * rows_duplicated) into a reused y, float64 8.9 -> 7.7 ms, float32
     * d = 256 9.1 -> 8.2 ms.  In place, float32 and float64, the group's
     * rows at the next position also go into L2 (job->next_l2; 9-13
     * rounds): float32 (1, 32, 4096, 256) 1.37-1.45x -> 1.21-1.23x,
     * float64 (1, 32, 4096, 128) 1.35x -> 1.22x, (1, 32, 2048, 256) 2.04x
     * -> 1.70x, 2 threads 1.10x -> 1.06x; into L1 one position ahead
     * instead 2.2x, into L2 2, 4 or 8 positions ahead 1.37-1.43x; out of
     * place even (float64 8.4 -> 8.5 ms), float16 even (1.55x), bfloat16
     * slower (1.31x -> 1.39x): not there.  Interleaved (each row read in
     * order) measured even with the table rows prefetched and slower with
     * the rows of x too (out of place 1.16x -> 1.47x; in place, every
     * line, float64 1.14x -> 1.49x, float32 d = 256 1.15x -> 1.46x): none.
     * Rows of 2 KiB (float64 d = 256) in place were 2.9-3.0x before every
     * line was prefetched (2.6x with the rows of x prefetched too, 16 lines
     * of 17; groups of 4 no better); with every line and the next position
     * into L2 1.53-1.59x (alternating processes); groups of 4 1.86x
     * against 1.56x; out of place see STAGE_ROWS_BYTES.
     * float16 and bfloat16 half-split, the same with the rows of x
     * prefetched in place too (settings alternated in one process, 11
     * rounds, medians, against a streaming copy / an in-place scale):
     * float16 (1, 32, 4096, 512) 2.38x / 2.10x -> 1.98x / 1.77x (only the
     * table rows prefetched: 2.43x / 2.22x), (1, 32, 2048, 1024) 4.78x /
     * 3.77x -> 2.20x / 2.51x; bfloat16 2.88x / 2.37x -> 2.74x / 2.24x and
     * 4.20x / 4.09x -> 2.70x / 2.39x; with every line, float16 d = 512
     * 1.42x -> 1.23x / 1.70x -> 1.51x.  Interleaved float16 (2.24x / 1.92x
     * at d = 1024) was slower so with any prefetch (2.42-2.61x / 2.24-2.79x):
     * not there. */
    if (past_llc && g->x_inner == itemsize && g->d * itemsize >= ROPE_LONG_ROW &&
        (type == 1 || type == 2 || !inter)) {
        group_bytes = ROPE_GROUP_MAX * ROPE_LONG_ROW;
        job.lead = !inter;
        job.next_l2 = !inter && in_place && itemsize > 2;
    }
#define Y_ALIGNED(a) (ALIGNED(g->y, a) && ALIGNED(g->y_b, a) && ALIGNED(g->y_h, a) && \
                      ALIGNED(g->y_s, a))
    /* y may take streaming stores: out of place, and as pe_memory_stream_ok
     * says (WHOLE: the kernel writes each line whole) */
#define MAY_STREAM(WHOLE) (!in_place && large &&                                \
                           pe_memory_stream_ok(g->y + g->B / 2 * g->y_b + g->H / 2 * g->y_h + \
                                               g->S / 2 * g->y_s, WHOLE,           \
                                               (size_t)(g->B * g->H * g->S * g->d * itemsize)))
    /* or staged (see STAGE_ROWS_BYTES) where only the partial lines keep y
     * from streaming: each head's rows back to back, heads on lines; the
     * staged lines streamed 32 bytes a store where the level has AVX */
    const int stage_width = rope_table.nt_align >= 32 ? 32 : 16;
#define MAY_STAGE() (g->y_inner == itemsize && g->y_s == g->d * itemsize && \
                     2 * g->d * itemsize <= STAGE_ROWS_BYTES &&                     \
                     2 * g->d * itemsize <= group_bytes && ALIGNED(g->y_h, 64) &&      \
                     !in_place && large && MAY_STREAM(1) && !pe_cpu_partial_lines())
    if ((type == 0 || type == 3) && job.dup != NULL && MAY_STAGE()) {
        job.stage = stage_width;   /* (the plain dup kernel: not two heads' rows
                               * streamed 16 bytes at a time) */
        /* whole rows of whole 64-byte chunks, y on a line or 16 bytes past
         * one, every row and head alike: streamed straight from registers
         * (f16_realign1_fwd), not staged, each head of a group a row behind
         * the one before (rope_grid_task): the heads' rows at one position lie
         * at one offset within a page (x's and, from np.empty_like(x),
         * y's), and a load whose offset within a page matches a store's
         * still in flight waits for it.  Measured, Zen 4 EPYC VM (AVX-512),
         * 1 thread, (1, 32, 16384, 128) into np.empty_like(x), minima of 7
         * in 3 alternating processes (a streaming copy 6.6-7.1 ms): float16
         * staged 12.3-12.4 ms, realigned 10.5-11.0, with the skew 9.5-9.7;
         * bfloat16 12.0-12.1, 12.0-12.7 and 9.7-10.6.  Into y at other
         * offsets from x within a page (one process, float16): 16 bytes
         * past a line 9.3-9.7 ms with the skew (10.0-11.2 without), on a
         * line 8.5-8.7 (9.0-9.6; 10.9 where y is x + 48 bytes within a
         * page).  float32's realigned walk measured slower with the skew
         * (6.8 -> 7.7-8.3 ms into np.empty_like(x)), so only here.
         * At level AVX2 (f16_realign1_avx2_fwd, 32-byte streaming stores),
         * Zen 3 EPYC VM (no AVX-512), the same calls, staged against
         * realigned, settings alternated in one process, medians of 9-13
         * rounds, 2 runs each: 2 threads, into np.empty_like(x), float16
         * 12.96-13.66 -> 12.04-13.36 ms, bfloat16 14.86-16.86 -> 13.85-14.79;
         * into y on a line float16 14.33 -> 12.19, bfloat16 14.52 -> 13.29;
         * 1 thread into np.empty_like(x) float16 20.96-26.73 ->
         * 21.38-22.25, bfloat16 23.31-26.96 -> 18.77-26.76 (one run the
         * other way, 33.6 -> 35.7); on a line 20.65-23.96 -> 19.81-20.20
         * and 22.53-28.09 -> 19.28-25.12.  Without the skew there: 1 thread
         * float16 22.2 -> 23.1-23.2 ms, bfloat16 25.6-26.8 -> 25.4-32.7. */
        const uintptr_t off = (uintptr_t)g->y % 64;
        if (g->r == g->d && h * itemsize % 64 == 0 && ALIGNED(g->y_b, 64) &&
            (off == 0 || off == 16))
            job.realign = rope_table.realign_hp[type == 3][off == 16][back];
    } else if ((type == 0 || type == 3) && job.dup != NULL && rope_table.nt_half[type == 3][back] &&
        Y_ALIGNED(16) && MAY_STREAM(0)) {
        /* float16/bfloat16 with duplicated tables (job.dup: contiguous
         * vectors and tables) into y on 16 bytes (measured: see
         * F16_STREAM); never whole lines: they write two heads' rows, both
         * halves, 16 bytes at a time */
        job.dup = rope_table.nt_half[type == 3][back];
        job.dup_ft = NULL;   /* (out of place: see job.pack_ft) */
        job.streaming = 1;
        job.prefetch = 0;
    }
    if (type == 1 || type == 2) {
        const int f64 = type == 2;
        /* vectors run within a half (half-split) or across all pairs */
        const ptrdiff_t run_bytes = (inter ? 2 : 1) * h * itemsize;
        if (tables_ok && rope_table.nt[inter][back][f64][0] != NULL &&
            g->x_inner == itemsize && g->y_inner == itemsize && run_bytes % 16 == 0) {
            /* streaming only where every streaming store is a whole aligned
             * vector: of the level's width (nt_align) where y allows, else
             * of 16 bytes, as NumPy's own arrays (16 bytes past a line)
             * allow.  Measured, Zen 5 EPYC, 1 thread, (1, 32, 8192, 128)
             * float32 out of place, y 16 bytes past a line: the AVX2
             * kernels' 16-byte streaming stores at each half's ends among
             * 32-byte ones 11.9-12.5 ms; plain stores 8.6-8.8 ms (8.8-9.2
             * with AVX-512); 16-byte streaming stores throughout 6.1-6.5
             * ms (interleaved 7.6-8.3 -> 5.5-6.1; float64 (1, 32, 4096,
             * 128) 11.7-12.2 -> 7.8-8.1, interleaved 9.4-9.9 -> 5.6-6.1),
             * all at POSEMB_CPU=sse2; as built, the AVX-512 level with the
             * SSE2 streaming kernels for such y: 6.0-6.1 ms (interleaved
             * 5.5, float64 6.5-7.3, interleaved 5.4); y on 32 bytes, the
             * AVX2 kernels 6.0-7.4 ms. */
            const ptrdiff_t nt = rope_table.nt_align;
            const int wide = run_bytes % nt == 0 && Y_ALIGNED(nt);
            const int streaming = (wide || Y_ALIGNED(16)) && MAY_STREAM(Y_ALIGNED(64));
            pe_rope_fn fast;
            job.stage = !streaming && MAY_STAGE() ? stage_width : 0;
            /* into y 16 bytes past a line, every row and head alike (rows
             * of whole lines, no tail): realigned in registers, not staged
             * (half_realign_fwd_f32) */
            if (job.stage && rope_table.realign[inter][f64][back] != NULL &&
                g->r == g->d && h * itemsize % 32 == 0 && (uintptr_t)g->y % 64 == 16 &&
                ALIGNED(g->y_b, 64))   /* (y_s = 2 h itemsize: whole lines) */
                job.realign = rope_table.realign[inter][f64][back];
            if (streaming) {
                /* the kernels do not fence: rope_grid_task does, once */
                fast = rope_table.nt[inter][back][f64][wide];
                job.streaming = 1;
                job.prefetch = 0;                      /* (measured: no gain) */
            } else {
                /* in place beyond the last-level cache, not the widest:
                 * measured, 1 thread, Zen 5 EPYC, the 16-byte kernels
                 * against the widest (AVX-512), 3 alternating runs each:
                 * (1, 32, 8192, 128) float32 half-split in place 5.5-5.8
                 * -> 4.7-4.9 ms (an in-place scale 4.3-4.5), float64 (1,
                 * 32, 4096, 128) 6.9-7.9 -> 6.0-6.2 ms, HF's transposed q
                 * 4.8-4.9 -> 4.6-4.8 ms, interleaved alike (5.0 ms); at 2
                 * threads no slower.
                 * Longer prefetch distances did not close the gap; in cache
                 * the 16-byte kernels are 30% slower ((1, 32, 512, 128) 157
                 * against 206 us).  Interleaved, the 32-byte kernels where
                 * rows allow: measured later, same CPU, each call timed
                 * next to the other kernel's in one process (median of the
                 * ratios of 10-12 pairs): (1, 32, 8192, 128) float32 in
                 * place, 2 threads with both cores free, 0.84-0.99 (8
                 * runs, median 0.90) of the 16-byte kernels' time, float64
                 * (1, 32, 4096, 128) 0.87-1.03 (median 0.94); 1 thread
                 * 0.94-0.97 and 0.91-0.98; 2 threads, the second core
                 * busy, even; HF's transposed q (1 thread) 0.82-0.84,
                 * heads sliced from a fused projection 0.94.  Half-split
                 * there: contiguous, 2 threads free 0.94-1.11, 1 thread
                 * 1.01-1.06.  On a Zen 3 EPYC VM (AVX2, 512 KiB L2), 1
                 * thread, 9 interleaved rounds, the 16-byte kernels
                 * against the 32-byte ones: float32 half-split 12.3 against
                 * 9.7 ms (an in-place scale 9.1-9.4), float64 12.3 against
                 * 10.7, interleaved 13.9 against 11.3, HF's transposed q
                 * 13.2 against 11.1; 2 threads even (7.3-8.2 ms).  So the
                 * 32-byte kernels, where rows allow, for both layouts. */
                const int w32 = run_bytes % 32 == 0;   /* (index 1: 32 bytes) */
                fast = rope_table.one[inter][back][f64]
                                     [in_place && past_llc ? w32
                                      : run_bytes % 64 == 0 ? 2 : w32];
                if (in_place && past_llc && !inter && rope_table.pipe[f64][back] != NULL &&
                    2 * run_bytes >= ROPE_LONG_ROW && run_bytes % 128 == 0)
                    fast = rope_table.pipe[f64][back];   /* (see DEFINE_ROPE_PIPE) */
            }
            if (inter)
                job.fn = fast;
            else
                job.dup = fast;
            job.tiled = fast;
        }
    }
    {
        /* grouped walk, large, in place or streaming: each head's row 4
         * positions ahead is prefetched.  Measured, 1 thread, Zen 5 EPYC,
         * against an in-place scale (in place) or a streaming copy (y on a
         * line), ahead 0 / 2 / 4 / 8, one run each: (1, 32, 8192, 128) float32
         * in place 1.31 / 1.16 / 1.14 / 1.18x, out of place 1.36 / 1.17 / 1.24
         * / 1.12x; float64 (1, 32, 4096, 128) in place 1.55 / 1.11 / 1.05 /
         * 1.20x, out of place 1.61 / 1.34 / 1.36 / 1.30x; float32 d = 256 in
         * place 2.03 / 1.54 / 1.41 / 1.67x.  Not with plain stores out of
         * place (1.63x -> 1.83-1.87x a copy), nor in cache ((1, 32, 128, 128)
         * in place 35 -> 38-39 us).  As built, 3 runs: float32 in place
         * 1.19-1.29x, float64 1.21-1.36x, d = 256 1.56-1.59x.  bfloat16 (more
         * instructions per byte) also out of place with plain stores:
         * (1, 32, 16384, 128) out= 17.5-19.3 -> 10.6-12.4 ms; float16 not
         * ((1, 32, 8192, 128) any tables 6.2-6.5 -> 6.0-6.2 ms, duplicated
         * tables 3.7 -> 3.7-3.9 ms, new arrays (1, 32, 16384, 128) 8.0-8.2
         * -> 8.4 ms). */
        /* Not where job.lead prefetches each position (rows of
         * ROPE_LONG_ROW bytes, half-split): with it, ahead 4 measured
         * 2.32x an in-place scale against 1.29x (float32 (1, 32, 4096,
         * 256), Zen 4 EPYC VM), out of place 1.05x and 1.35x a copy against
         * 0.67x and 0.69x (float64 d = 128, float32 d = 256); left to the
         * measured choice below, its trials and rechecks paid that, and its
         * verdict, shared with shorter rows of the dtype, went against
         * them. */
        if ((in_place || job.streaming || job.stage || type == 3) && large && !job.lead)
            job.ahead = 4;
        /* Beyond the last-level cache the same prefetch measured the other
         * way on a Zen 4 EPYC VM (1 MiB L2, 32 MiB L3, the sizes of the Zen
         * 5 above), 1 thread, minima of 11 in one process per setting,
         * against an in-place scale or a copy: (1, 32, 8192, 128) float32
         * half-split in place 1.42-1.52x with it and 1.13-1.16x without
         * (out of place 1.35-1.42x and 0.96-1.06x), interleaved 1.68-1.75x
         * and 1.09-1.17x, float64 (1, 32, 4096, 128) 2.21-2.26x and
         * 1.71-1.86x; ahead 1, 2, 8 or 16 and the other prefetch hints
         * (into L2 or L3, for writing) all between; 2 threads the same
         * way, by less.  Nothing in the cache sizes tells these CPUs apart,
         * so there the calls choose by measuring (pe_choice_way): one kind
         * per dtype, in place or not. */
        if (job.ahead > 0 && past_llc && g->x_inner == itemsize)
            job.choice = 4 * in_place + type;   /* (strided rows: nothing prefetched) */
        /* (the kinds: ROPE_CHOICE_KINDS each for the grouped walk's
         * prefetch, one head per call where positions lie together, and
         * where they have gaps) */
    }
#undef MAY_STAGE
#undef MAY_STREAM
#undef Y_ALIGNED
    job.pack = large && job.dup != NULL;   /* (see the grouped walk) */
    /* float16 in place: float32 copies where the walk's kernel has a
     * version that reads them (see rows_duplicated; out of place measured
     * even with the realigning kernels, not measured with the others) */
    job.pack_ft = in_place && job.pack && job.dup_ft != NULL && job.realign == NULL;
    /* (see the heads-inner walk) beyond the last-level cache one head per
     * call measured faster on a Zen 5 EPYC, all heads per call on a Zen 4
     * VM: (1, 32, 8192, 128) float32, 1 thread, minima of 11, each way
     * forced (_core._choice) in 3 alternating processes: HF's transposed q
     * in place 6.16-6.33 ms one head per call, 5.49-5.73 ms all heads (an
     * in-place scale 4.9-5.2), into a new array 11.0-11.1 against 8.8-9.0
     * ms, heads sliced from a fused qkv into a new array 14.3-14.4 against
     * 14.3-14.9 ms: a measured choice there (pe_choice_way).  Positions
     * with gaps between them (heads sliced from a fused projection) and
     * without (HF's and Meta's layouts) are separate kinds: with the
     * prefetch into L2, one head per call measured faster for the sliced
     * heads (into a new array 12.5 against 16.2 ms, see the heads-inner
     * walk) and slower for HF's q (11.6 against 10.5 ms), so one verdict
     * for both was wrong for one of them. */
    job.one_head = past_llc;
    if (past_llc && g->x_inner == itemsize) {
        const ptrdiff_t as = g->x_s < 0 ? -g->x_s : g->x_s, ah = g->x_h < 0 ? -g->x_h : g->x_h;
        const int gaps = as > (g->H - 1) * ah + g->d * itemsize;   /* (either direction) */
        job.choice_one = ROPE_CHOICE_KINDS * (1 + gaps) + 4 * in_place + type;
    }
    /* the tile walk (see rope_grid_task) for the one-pass kernels where x
     * (and y, out of place) fit in a quarter of the last-level cache and y
     * is not streamed: tiles of table rows (cos and sin) filling a third
     * of L1 */
    if (job.tiled != NULL && !job.streaming && !job.stage &&
        g->B * g->H * g->S <= llc_vectors / 4) {
        const ptrdiff_t tile = pe_cache_l1_bytes() / 3 / (2 * g->r * itemsize);
        job.tile = tile > 1 ? tile : 1;
        if ((type == 1 || type == 2) &&
            job.tiled == rope_table.one[inter][back][type == 2][2])
            job.lines = rope_table.lines[inter][type == 2][back];
    } else {
        job.tiled = NULL;
    }
    return grid_run(&job, rope_block_table_bytes(), group_bytes);
}
