/*
 * bf16_avx2.h - bfloat16 bit patterns <-> float32, 8 values at a time in
 * order, with AVX2 (rope.c's 8-wide bfloat16 kernels, learned.c).
 *
 * A bfloat16 value is the top half of a float32, so it widens with a zero
 * extension and a shift.  Rounding back is pe_float_to_bf16's rule (add
 * 0x7fff plus the kept lsb, keep the top 16 bits) without its NaN test:
 * it is used only on products and sums of bfloat16 values, and an x86
 * multiply or add returns one of its NaN operands made quiet, or the
 * default NaN 0xffc00000, so a NaN's low 16 bits are 0 and its top 16
 * already carry the quiet bit: adding at most 0x8000 leaves them as
 * pe_float_to_bf16 makes them.
 */
#ifndef PE_BF16_AVX2_H
#define PE_BF16_AVX2_H

#if defined(PE_X86_SIMD)
#include <immintrin.h>
#include <stdint.h>

#define PE_BF16_LOAD8(p) _mm256_castsi256_ps(_mm256_slli_epi32(                \
    _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))

__attribute__((target("avx2")))
static inline void pe_bf16_store8(uint16_t *p, __m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    _mm_storeu_si128((__m128i *)(void *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}
#endif

#endif
