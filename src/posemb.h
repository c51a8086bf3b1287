/*
 * posemb.h - the plain-C kernels of posemb.
 *
 * Nothing here includes Python.h or NumPy headers: the kernels see raw
 * pointers, sizes and byte strides, and the single binding file
 * (module.c) is the only place that talks to CPython and the NumPy C API.
 *
 * Naming: pe_<family>_<variant>_<direction>_<dtype>, e.g.
 * pe_rope_half_fwd_f32.  f16 kernels compute in float32 and round once.
 * Sizes and strides are ptrdiff_t (the same width as npy_intp).
 */
#ifndef POSEMB_H
#define POSEMB_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* float16 <-> float32 (IEEE binary16, round to nearest even)          */
/* ------------------------------------------------------------------ */
float pe_half_to_float(uint16_t h);
uint16_t pe_float_to_half(float f);

/* ------------------------------------------------------------------ */
/* RoPE: rotary position embeddings (rope.c)                           */
/* ------------------------------------------------------------------ */

/*
 * One generalized-ufunc call of a rotary kernel, signature (d),(r),(r)->(d):
 * n vectors x[k] of d features, each rotated by the full-width tables
 * cos[k], sin[k] of r <= d features; features 2*(r/2)..d-1 are copied
 * (partial rotary; an odd r leaves its unpaired feature unchanged).
 * *_step are the byte strides between vectors, *_inner between features.
 * y may be x itself (in place): every pair is read before it is written.
 */
typedef struct pe_rope_loop {
    ptrdiff_t n, d, r;
    const char *x, *cos, *sin;
    char *y;
    ptrdiff_t x_step, cos_step, sin_step, y_step;
    ptrdiff_t x_inner, cos_inner, sin_inner, y_inner;
} pe_rope_loop;

typedef void (*pe_rope_fn)(const pe_rope_loop *);

/*
 * Half-split pairing (GPT-NeoX, HF rotate_half), h = r/2, i < h:
 *   fwd:  y[i]   = x[i]*cos[i]     - x[i+h]*sin[i]
 *         y[i+h] = x[i+h]*cos[i+h] + x[i]*sin[i+h]
 *   back: the adjoint (gradient of fwd with respect to x)
 *         y[i]   = x[i]*cos[i]     + x[i+h]*sin[i+h]
 *         y[i+h] = x[i+h]*cos[i+h] - x[i]*sin[i]
 * Interleaved pairing (GPT-J, Meta llama): the same with (2i, 2i+1)
 * in place of (i, i+h).
 */
void pe_rope_half_fwd_f16(const pe_rope_loop *a);
void pe_rope_half_fwd_f32(const pe_rope_loop *a);
void pe_rope_half_fwd_f64(const pe_rope_loop *a);
void pe_rope_half_back_f16(const pe_rope_loop *a);
void pe_rope_half_back_f32(const pe_rope_loop *a);
void pe_rope_half_back_f64(const pe_rope_loop *a);
void pe_rope_inter_fwd_f16(const pe_rope_loop *a);
void pe_rope_inter_fwd_f32(const pe_rope_loop *a);
void pe_rope_inter_fwd_f64(const pe_rope_loop *a);
void pe_rope_inter_back_f16(const pe_rope_loop *a);
void pe_rope_inter_back_f32(const pe_rope_loop *a);
void pe_rope_inter_back_f64(const pe_rope_loop *a);

/*
 * rotate_half over n vectors of d (even) features, signature (d)->(d):
 *   y[i] = -x[i+h],  y[i+h] = x[i]      (h = d/2)
 * y may be x itself.
 */
typedef struct pe_unary_loop {
    ptrdiff_t n, d;
    const char *x;
    char *y;
    ptrdiff_t x_step, y_step, x_inner, y_inner;
} pe_unary_loop;

void pe_rotate_half_f16(const pe_unary_loop *a);
void pe_rotate_half_f32(const pe_unary_loop *a);
void pe_rotate_half_f64(const pe_unary_loop *a);

/*
 * Rotary tables for n integer positions and h frequencies:
 *   angle = (double)pos[k] * inv_freq[i]            (float64, rounded once)
 *   c = attn * cos(angle), s = attn * sin(angle)
 * written full width (2h per row, row k at cos + k*2h):
 *   interleaved == 0: row[i] = row[i+h] = c        (half-split layout)
 *   interleaved != 0: row[2i] = row[2i+1] = c      (interleaved layout)
 * Rows are contiguous.  pos values must be exact in float64 (|pos| < 2**53).
 */
void pe_rope_table_f32(ptrdiff_t n, const int64_t *pos, ptrdiff_t h,
                       const double *inv_freq, double attn, int interleaved,
                       float *cos_out, float *sin_out);
void pe_rope_table_f64(ptrdiff_t n, const int64_t *pos, ptrdiff_t h,
                       const double *inv_freq, double attn, int interleaved,
                       double *cos_out, double *sin_out);

/*
 * RoPE over packed variable-length batches (rope_varlen.c), flash-attn's
 * cu_seqlens convention.  x and y are (total, heads, d) with byte strides
 * per token, head and feature; cos/sin are (rows, r) tables with byte
 * strides per row and feature.  Token t of sequence b
 * (cu_seqlens[b] <= t < cu_seqlens[b+1]) is rotated by table row
 *   offsets[b] + (t - cu_seqlens[b])          (offsets NULL: 0)
 * with one of the apply kernels above; y may be x (in place).
 */
typedef struct pe_rope_varlen {
    ptrdiff_t nseq, total, heads, d, r, rows;
    const int64_t *cu_seqlens; /* nseq + 1 */
    const int64_t *offsets;    /* nseq, or NULL */
    const char *x, *cos, *sin;
    char *y;
    ptrdiff_t x_token, x_head, x_inner;
    ptrdiff_t y_token, y_head, y_inner;
    ptrdiff_t cos_row, cos_inner, sin_row, sin_inner;
} pe_rope_varlen;

enum {
    PE_VARLEN_OK = 0,
    PE_VARLEN_BAD_SIZE,        /* a negative size or a NULL cu_seqlens */
    PE_VARLEN_BAD_WIDTH,       /* r > d */
    PE_VARLEN_BAD_START,       /* cu_seqlens[0] != 0 */
    PE_VARLEN_DECREASING,      /* cu_seqlens[where] < cu_seqlens[where-1] */
    PE_VARLEN_BAD_END,         /* cu_seqlens[where] > total, or the last != total */
    PE_VARLEN_NEGATIVE_OFFSET, /* offsets[where] < 0 */
    PE_VARLEN_OUT_OF_RANGE     /* sequence where needs rows past the table */
};

/* Check the sizes and every cu_seqlens/offsets entry (reads nothing else):
 * PE_VARLEN_OK, or a code with *where the offending index. */
int pe_rope_varlen_check(const pe_rope_varlen *a, ptrdiff_t *where);
/* Check, then rotate with kernel; returns the check's code (a failed check
 * writes nothing; the bounds are re-read per sequence, so arrays changed
 * concurrently can stop it part way, never take it out of range).  Needs no
 * Python: call it without the GIL. */
int pe_rope_varlen_apply(const pe_rope_varlen *a, pe_rope_fn kernel);

/* ------------------------------------------------------------------ */
/* Sinusoidal (absolute) encodings (sinusoidal.c)                      */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Learned encodings (learned.c)                                       */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Relative position bias: T5 buckets, Shaw tables (relative.c)        */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* ALiBi (alibi.c)                                                      */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Attention masks (masks.c)                                            */
/* ------------------------------------------------------------------ */

#endif /* POSEMB_H */
