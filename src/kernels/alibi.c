/*
 * alibi.c - ALiBi (Press et al., "Train Short, Test Long") attention biases.
 *
 * The bias of query position p_i = query_offset + i and key j depends only
 * on p_i - j, so the (heads, q, k) output is q + k - 1 diagonals per head:
 * each value is computed once, in float64, rounded once to the output type,
 * and rows are memcpy'd slices of the diagonal vector.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "posemb.h"

/*
 * Given: heads slopes m (float64), sizes q and k, query_offset, symmetric.
 * Returned: out (heads, q, k), C-contiguous:
 *   out[h, i, j] = -(m[h] * (p_i - j))       (causal form)
 *   out[h, i, j] = -(m[h] * |p_i - j|)       (symmetric)
 * with p_i = query_offset + i; the product is formed in float64 and
 * rounded once to T, float16 too (a zero distance gives +0, not -0);
 * bfloat16 bit patterns (bf16) through float32, as torch's cast of the
 * float64 values.
 * |query_offset| + q + k must stay below 2**53 so that every distance is
 * exact.  Returns 0, or -1 without scratch memory.
 */
#define DEFINE_ALIBI_BIAS(T, SUF, CVT)                                      \
int pe_alibi_bias_##SUF(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,            \
                        int64_t query_offset, const double *slopes,           \
                        int symmetric, T *out)                                \
{                                                                             \
    const ptrdiff_t nd = q + k - 1;                                           \
    T *diag;                                                                  \
    if (heads == 0 || q == 0 || k == 0)                                       \
        return 0;                                                             \
    diag = (T *)malloc((size_t)heads * (size_t)nd * sizeof(T));               \
    if (diag == NULL)                                                         \
        return -1;                                                            \
    for (ptrdiff_t h = 0; h < heads; h++) {                                   \
        const double m = slopes[h];                                           \
        for (ptrdiff_t t = 0; t < nd; t++) {                                  \
            /* diagonal t holds j - i = t - (q - 1) */                        \
            double d = (double)(query_offset - (int64_t)(t - (q - 1)));       \
            if (symmetric)                                                    \
                d = fabs(d);                                                  \
            diag[h * nd + t] = CVT(-(m * d) + 0.0); /* no -0 at i == j */      \
        }                                                                     \
    }                                                                         \
    pe_toeplitz_fill(heads, q, k, (ptrdiff_t)sizeof(T), diag, out);          \
    free(diag);                                                               \
    return 0;                                                                 \
}

#define CVT_f32(v) ((float)(v))
#define CVT_f64(v) (v)
#define CVT_bf16(v) pe_float_to_bf16((float)(v))   /* as torch's float64 cast */

DEFINE_ALIBI_BIAS(uint16_t, f16, pe_double_to_half)
DEFINE_ALIBI_BIAS(uint16_t, bf16, CVT_bf16)
DEFINE_ALIBI_BIAS(float, f32, CVT_f32)
DEFINE_ALIBI_BIAS(double, f64, CVT_f64)
