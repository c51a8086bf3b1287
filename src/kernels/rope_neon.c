/*
 * rope_neon.c - RoPE apply kernels for AArch64 with explicit Advanced SIMD
 * (NEON) vectors, float32: half-split and interleaved, forward and adjoint.
 *
 * The contract is pe_rope_loop's (posemb.h) and the maths is rope.c's
 * ROT_fwd/ROT_back: for each pair (a, b),
 *
 *   fwd:  y[a] = x[a]*cos[a] - x[b]*sin[a];   y[b] = x[b]*cos[b] + x[a]*sin[b]
 *   back: y[a] = x[a]*cos[a] + x[b]*sin[b];   y[b] = x[b]*cos[b] - x[a]*sin[a]
 *
 * as two vector multiplies and one vector add or subtract, never a fused
 * multiply-add (the build passes -ffp-contract=off, under which GCC keeps
 * vmulq/vaddq/vsubq apart; .ci/aarch64.sh checks the object code), so the
 * results are the portable kernels' bit for bit.  Half-split pairs are
 * (i, i + r/2): four pairs per step from two plain loads of x; interleaved
 * pairs are (2i, 2i + 1): vld2q/vst2q split and rejoin even and odd
 * features.  For every step all loads come before the stores, so y may be x
 * itself (in place).  Features 2*(r/2) .. d-1 are copied.  Vectors or tables
 * with non-unit feature strides take the portable kernel.
 *
 * NEON is part of every AArch64 CPU (ARMv8-A), so there is nothing to
 * detect at run time: on aarch64 these kernels replace the portable float32
 * ones in the dispatch.
 */
#include "rope_neon.h"

#if defined(PE_HAVE_NEON_ROPE)
#include <arm_neon.h>
#include <string.h>

#define NEON_ROT_fwd(ya, yb, xa, xb, ca, cb, sa, sb)                          \
    do {                                                                      \
        ya = vsubq_f32(vmulq_f32(xa, ca), vmulq_f32(xb, sa));                 \
        yb = vaddq_f32(vmulq_f32(xb, cb), vmulq_f32(xa, sb));                 \
    } while (0)
#define NEON_ROT_back(ya, yb, xa, xb, ca, cb, sa, sb)                         \
    do {                                                                      \
        ya = vaddq_f32(vmulq_f32(xa, ca), vmulq_f32(xb, sb));                 \
        yb = vsubq_f32(vmulq_f32(xb, cb), vmulq_f32(xa, sa));                 \
    } while (0)
#define SCALAR_ROT_fwd(ya, yb, xa, xb, ca, cb, sa, sb) \
    do { ya = xa * ca - xb * sa; yb = xb * cb + xa * sb; } while (0)
#define SCALAR_ROT_back(ya, yb, xa, xb, ca, cb, sa, sb) \
    do { ya = xa * ca + xb * sb; yb = xb * cb - xa * sa; } while (0)

/* one contiguous half-split vector: pairs (i, i + h) */
#define DEFINE_NEON_HALF(DIR)                                                 \
static inline void half_##DIR##_vec(ptrdiff_t h, const float *x,              \
                                    const float *c, const float *s, float *y) \
{                                                                             \
    ptrdiff_t i = 0;                                                          \
    for (; i + 4 <= h; i += 4) {                                              \
        const float32x4_t xa = vld1q_f32(x + i), xb = vld1q_f32(x + h + i);   \
        const float32x4_t ca = vld1q_f32(c + i), cb = vld1q_f32(c + h + i);   \
        const float32x4_t sa = vld1q_f32(s + i), sb = vld1q_f32(s + h + i);   \
        float32x4_t ya, yb;                                                   \
        NEON_ROT_##DIR(ya, yb, xa, xb, ca, cb, sa, sb);                       \
        vst1q_f32(y + i, ya);                                                 \
        vst1q_f32(y + h + i, yb);                                             \
    }                                                                         \
    for (; i < h; i++) {                                                      \
        const float xa = x[i], xb = x[h + i];                                 \
        float ya, yb;                                                         \
        SCALAR_ROT_##DIR(ya, yb, xa, xb, c[i], c[h + i], s[i], s[h + i]);     \
        y[i] = ya;                                                            \
        y[h + i] = yb;                                                        \
    }                                                                         \
}

/* one contiguous interleaved vector: pairs (2i, 2i + 1) */
#define DEFINE_NEON_INTER(DIR)                                                \
static inline void inter_##DIR##_vec(ptrdiff_t h, const float *x,             \
                                     const float *c, const float *s, float *y) \
{                                                                             \
    ptrdiff_t i = 0;                                                          \
    for (; i + 4 <= h; i += 4) {                                              \
        const float32x4x2_t xv = vld2q_f32(x + 2 * i);                        \
        const float32x4x2_t cv = vld2q_f32(c + 2 * i);                        \
        const float32x4x2_t sv = vld2q_f32(s + 2 * i);                        \
        float32x4x2_t yv;                                                     \
        NEON_ROT_##DIR(yv.val[0], yv.val[1], xv.val[0], xv.val[1],            \
                       cv.val[0], cv.val[1], sv.val[0], sv.val[1]);           \
        vst2q_f32(y + 2 * i, yv);                                             \
    }                                                                         \
    for (; i < h; i++) {                                                      \
        const float xa = x[2 * i], xb = x[2 * i + 1];                         \
        float ya, yb;                                                         \
        SCALAR_ROT_##DIR(ya, yb, xa, xb, c[2 * i], c[2 * i + 1], s[2 * i],    \
                         s[2 * i + 1]);                                       \
        y[2 * i] = ya;                                                        \
        y[2 * i + 1] = yb;                                                    \
    }                                                                         \
}

#define DEFINE_NEON_KERNEL(LAYOUT, DIR)                                       \
void pe_rope_##LAYOUT##_##DIR##_f32_neon(const pe_rope_loop *L)               \
{                                                                             \
    const ptrdiff_t z = (ptrdiff_t)sizeof(float), h = L->r / 2;               \
    if (pe_rope_groups(L, pe_rope_##LAYOUT##_##DIR##_f32_neon))               \
        return;                                                               \
    if (L->x_inner != z || L->y_inner != z || L->cos_inner != z ||            \
        L->sin_inner != z) {                                                  \
        pe_rope_##LAYOUT##_##DIR##_f32(L);                                    \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t k = 0; k < L->n; k++) {                                    \
        const float *x = (const float *)(const void *)(L->x + k * L->x_step); \
        const float *c = (const float *)(const void *)(L->cos + k * L->cos_step); \
        const float *s = (const float *)(const void *)(L->sin + k * L->sin_step); \
        float *y = (float *)(void *)(L->y + k * L->y_step);                   \
        LAYOUT##_##DIR##_vec(h, x, c, s, y);                                  \
        if (y != x && L->d > 2 * h)                                           \
            memcpy(y + 2 * h, x + 2 * h, (size_t)(L->d - 2 * h) * sizeof(float)); \
    }                                                                         \
}

DEFINE_NEON_HALF(fwd)
DEFINE_NEON_HALF(back)
DEFINE_NEON_INTER(fwd)
DEFINE_NEON_INTER(back)
DEFINE_NEON_KERNEL(half, fwd)
DEFINE_NEON_KERNEL(half, back)
DEFINE_NEON_KERNEL(inter, fwd)
DEFINE_NEON_KERNEL(inter, back)

#else
/* ISO C wants at least one declaration in a translation unit */
typedef int pe_rope_neon_unused;
#endif
