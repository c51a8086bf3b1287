/*
 * masks.c - boolean attention masks in PyTorch scaled_dot_product_attention's
 * convention: 1 (True) = the key may be attended to.
 *
 * Every row is one or two runs of equal bytes, written with memset, so the
 * cost is that of writing the mask.
 */
#include <string.h>

#include "posemb.h"

static ptrdiff_t clamp(int64_t v, ptrdiff_t lo, ptrdiff_t hi)
{
    return v < lo ? lo : (v > hi ? hi : (ptrdiff_t)v);
}

/*
 * Given: q, k, query_offset, window (< 1: none).
 * Returned: out (q, k) bytes,
 *   out[i, j] = (j <= p_i) && (window < 1 || j > p_i - window)
 * with p_i = query_offset + i (query_offset = k - q is PyTorch's
 * lower-right causal mask, tril(ones(q, k), diagonal=k-q)).
 * |query_offset| + q + k must stay below 2**62.
 */
void pe_causal_mask(ptrdiff_t q, ptrdiff_t k, int64_t query_offset,
                    int64_t window, unsigned char *out)
{
    for (ptrdiff_t i = 0; i < q; i++) {
        unsigned char *o = out + i * k;
        const int64_t p = query_offset + (int64_t)i;
        const ptrdiff_t stop = clamp(p + 1, 0, k);           /* j <= p */
        const ptrdiff_t start =
            window < 1 ? 0 : clamp(p - window + 1, 0, stop);  /* j > p - W */
        memset(o, 0, (size_t)start);
        memset(o + start, 1, (size_t)(stop - start));
        memset(o + stop, 0, (size_t)(k - stop));
    }
}

/*
 * Given: batch lengths (each 0 <= lengths[b] <= max_length), side.
 * Returned: out (batch, max_length) bytes, 1 at real tokens:
 *   right padding:  out[b, p] = p < lengths[b]
 *   left padding:   out[b, p] = p >= max_length - lengths[b]
 */
void pe_padding_mask(ptrdiff_t batch, ptrdiff_t max_length,
                     const int64_t *lengths, int left, unsigned char *out)
{
    for (ptrdiff_t b = 0; b < batch; b++) {
        unsigned char *o = out + b * max_length;
        const ptrdiff_t n = clamp(lengths[b], 0, max_length);
        if (left) {
            memset(o, 0, (size_t)(max_length - n));
            memset(o + (max_length - n), 1, (size_t)n);
        } else {
            memset(o, 1, (size_t)n);
            memset(o + n, 0, (size_t)(max_length - n));
        }
    }
}
