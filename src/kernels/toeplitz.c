/*
 * toeplitz.c - fill (heads, q, k) matrices whose entries depend only on
 * j - i (T5 and ALiBi biases, relative masks), on the thread pool.
 *
 * Given diag (heads, q + k - 1) of itemsize-byte values, where diag[h, t]
 * is the value at key - query = t - (q - 1).  Returned: out (heads, q, k),
 * C-contiguous, with row i of head h the contiguous slice
 *   out[h, i, :] = diag[h, q - 1 - i : q - 1 - i + k]
 * so the cost is writing the output (one memcpy per row).
 */
#include <string.h>

#include "posemb.h"

typedef struct {
    ptrdiff_t q, k, itemsize;
    const char *diag;
    char *out;
} toeplitz_job;

static void toeplitz_rows(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const toeplitz_job *j = (const toeplitz_job *)ctx;
    const ptrdiff_t nd = j->q + j->k - 1, row = j->k * j->itemsize;
    for (ptrdiff_t r = begin; r < end; r++) {      /* r = h * q + i */
        const ptrdiff_t h = r / j->q, i = r % j->q;
        memcpy(j->out + r * row, j->diag + (h * nd + (j->q - 1 - i)) * j->itemsize,
               (size_t)row);
    }
}

void pe_toeplitz_fill(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                      ptrdiff_t itemsize, const void *diag, void *out)
{
    toeplitz_job j = {q, k, itemsize, (const char *)diag, (char *)out};
    const ptrdiff_t row = k * itemsize > 0 ? k * itemsize : 1;
    if (heads <= 0 || q <= 0 || k <= 0)
        return;
    pe_parallel_for(heads * q, PE_PARALLEL_MIN_BYTES / row + 1, toeplitz_rows, &j);
}
