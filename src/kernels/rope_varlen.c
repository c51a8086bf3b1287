/*
 * rope_varlen.c - RoPE over packed variable-length batches (flash-attn's
 * cu_seqlens convention), reading each token's position from cu_seqlens
 * instead of gathering a per-token table.
 *
 * Given:
 *   x          (total, heads, d) values, any byte strides
 *   cu_seqlens nseq + 1 int64, 0 = cu[0] <= cu[1] <= ... <= cu[nseq] = total
 *   offsets    nseq int64 >= 0, or NULL for all 0
 *   cos, sin   (rows, r) tables, any byte strides
 * Returned:
 *   y          (total, heads, d): for cu[b] <= t < cu[b+1], every head of
 *              token t rotated by table row  offsets[b] + (t - cu[b])
 *
 * The rotation is one of rope.c's kernels (pe_rope_fn), called once per
 * token with the table row broadcast over the heads (table step 0), so the
 * result equals apply_rope with gathered tables bit for bit.  y may be x
 * (in place), as for those kernels.
 */
#include "posemb.h"

/*
 * Check one sequence, reading its bounds once: 0 or a PE_VARLEN_* code, with
 * *where set to the offending index.
 */
static int
varlen_sequence(const pe_rope_varlen *a, ptrdiff_t b, int64_t *lo, int64_t *hi,
                int64_t *off, ptrdiff_t *where)
{
    *lo = a->cu_seqlens[b];
    *hi = a->cu_seqlens[b + 1];
    *off = a->offsets != NULL ? a->offsets[b] : 0;
    *where = b;
    if (b == 0 && *lo != 0)
        return PE_VARLEN_BAD_START;
    if (*hi < *lo) {
        *where = b + 1;
        return PE_VARLEN_DECREASING;
    }
    if (*hi > (int64_t)a->total) {
        *where = b + 1;
        return PE_VARLEN_BAD_END;
    }
    if (*off < 0)
        return PE_VARLEN_NEGATIVE_OFFSET;
    /* rows needed: off + (hi - lo) <= rows, written so it cannot overflow */
    if (*off > (int64_t)a->rows - (*hi - *lo))
        return PE_VARLEN_OUT_OF_RANGE;
    return PE_VARLEN_OK;
}

int
pe_rope_varlen_check(const pe_rope_varlen *a, ptrdiff_t *where)
{
    int64_t lo, hi, off;
    ptrdiff_t b;

    *where = 0;
    if (a->nseq < 0 || a->total < 0 || a->heads < 0 || a->d < 0 || a->r < 0 ||
        a->rows < 0 || a->cu_seqlens == NULL)
        return PE_VARLEN_BAD_SIZE;
    if (a->r > a->d)
        return PE_VARLEN_BAD_WIDTH;
    if (a->nseq == 0)
        return a->cu_seqlens[0] != 0 ? PE_VARLEN_BAD_START
               : a->total != 0     ? PE_VARLEN_BAD_END
                                   : PE_VARLEN_OK;
    /* cu_seqlens itself first (start, order, end), then the offsets, then the
     * table rows, so an error names what is wrong rather than a consequence
     * of it (a decreasing cu_seqlens is not a table too short) */
    if (a->cu_seqlens[0] != 0)
        return PE_VARLEN_BAD_START;
    for (b = 0; b < a->nseq; b++) {
        *where = b + 1;
        if (a->cu_seqlens[b + 1] < a->cu_seqlens[b])
            return PE_VARLEN_DECREASING;
        if (a->cu_seqlens[b + 1] > (int64_t)a->total)
            return PE_VARLEN_BAD_END;
    }
    if (a->cu_seqlens[a->nseq] != (int64_t)a->total) {
        *where = a->nseq;
        return PE_VARLEN_BAD_END;
    }
    for (b = 0; a->offsets != NULL && b < a->nseq; b++) {
        *where = b;
        if (a->offsets[b] < 0)
            return PE_VARLEN_NEGATIVE_OFFSET;
    }
    for (b = 0; b < a->nseq; b++) {
        int rc = varlen_sequence(a, b, &lo, &hi, &off, where);
        if (rc != PE_VARLEN_OK)
            return rc;
    }
    return PE_VARLEN_OK;
}

int
pe_rope_varlen_apply(const pe_rope_varlen *a, pe_rope_fn kernel)
{
    ptrdiff_t b, where;
    int rc = pe_rope_varlen_check(a, &where);
    pe_rope_loop L;

    if (rc != PE_VARLEN_OK)
        return rc;
    L.n = a->heads;
    L.d = a->d;
    L.r = a->r;
    L.x_step = a->x_head;
    L.y_step = a->y_head;
    L.cos_step = 0;
    L.sin_step = 0;
    L.x_inner = a->x_inner;
    L.y_inner = a->y_inner;
    L.cos_inner = a->cos_inner;
    L.sin_inner = a->sin_inner;
    L.m = 1;
    L.x_outer = L.cos_outer = L.sin_outer = L.y_outer = 0;
    for (b = 0; b < a->nseq; b++) {
        int64_t lo, hi, off, t;
        /* bounds are read (and checked) once more here, so the loop stays
         * in range even if the caller's arrays changed after the check */
        rc = varlen_sequence(a, b, &lo, &hi, &off, &where);
        if (rc != PE_VARLEN_OK)
            return rc;
        for (t = lo; t < hi; t++) {
            const ptrdiff_t row = (ptrdiff_t)(off + (t - lo));
            L.x = a->x + (ptrdiff_t)t * a->x_token;
            L.y = a->y + (ptrdiff_t)t * a->y_token;
            L.cos = a->cos + row * a->cos_row;
            L.sin = a->sin + row * a->sin_row;
            kernel(&L);
        }
    }
    return PE_VARLEN_OK;
}
