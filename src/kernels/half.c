/*
 * half.c - IEEE binary16 <-> binary32 conversion for the float16 loops.
 *
 * float16 inputs are computed in float32 and rounded once on the way out,
 * so a float16 result is the correctly rounded float32 result.
 */
#include <string.h>

#include "posemb.h"
#include "bf16_avx2.h"

/* Given h, a binary16 bit pattern.  Returned: its exact float value. */
float pe_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    float f;

    if (e == 0) {
        /* zero or subnormal: m * 2**-24 is exact in float32 */
        f = (float)m * 0x1p-24f;
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);          /* inf, NaN */
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);    /* rebias 15 -> 127 */
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Given f.  Returned: f rounded to the nearest binary16, ties to even. */
uint16_t pe_float_to_half(float f)
{
    uint32_t x, sign, absx, r, rem, halfway;
    int shift;

    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000u;
    absx = x & 0x7fffffffu;

    if (absx >= 0x7f800000u) {                           /* inf or NaN */
        if (absx == 0x7f800000u)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    }
    if (absx >= 0x477ff000u)                             /* >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {                            /* < 2**-14 */
        if (absx < 0x33000000u)                          /* < 2**-25: 0 */
            return (uint16_t)sign;
        /* subnormal: round(|f| / 2**-24) = m * 2**(e - 126), e <= 112 */
        shift = 126 - (int)(absx >> 23);
        r = (absx & 0x7fffffu) | 0x800000u;
        rem = r & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1);
        r >>= shift;
        if (rem > halfway || (rem == halfway && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    r = absx - 0x38000000u;                              /* rebias 127 -> 15 */
    rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;                                             /* may carry into e */
    return (uint16_t)(sign | r);
}

/*
 * Given v, a double.  Returned: v rounded once to the nearest binary16,
 * ties to even (as NumPy's float64 -> float16 cast), straight from the
 * float64 bits (pe_float_to_half's method, 42 dropped bits instead of 13).
 */
uint16_t pe_double_to_half(double v)
{
    uint64_t x, absx, r, rem, halfway;
    uint16_t sign;
    int shift;

    memcpy(&x, &v, sizeof x);
    sign = (uint16_t)((x >> 48) & 0x8000u);
    absx = x & 0x7fffffffffffffffu;
    if (absx >= 0x7ff0000000000000u) {                     /* inf or NaN */
        if (absx == 0x7ff0000000000000u)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((absx >> 42) & 0x3ffu));
    }
    if (absx >= 0x40effe0000000000u)                       /* >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x3f10000000000000u) {                      /* < 2**-14 */
        if (absx < 0x3e60000000000000u)                    /* < 2**-25: 0 */
            return sign;
        /* subnormal: round(|v| / 2**-24) = m * 2**(e - 1051), e <= 1008 */
        shift = 1051 - (int)(absx >> 52);
        r = (absx & 0xfffffffffffffu) | 0x10000000000000u;
        rem = r & ((UINT64_C(1) << shift) - 1u);
        halfway = UINT64_C(1) << (shift - 1);
        r >>= shift;
        if (rem > halfway || (rem == halfway && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    r = absx - 0x3f00000000000000u;                        /* rebias 1023 -> 15 */
    rem = r & ((UINT64_C(1) << 42) - 1u);
    r >>= 42;
    halfway = UINT64_C(1) << 41;
    if (rem > halfway || (rem == halfway && (r & 1u)))
        r++;                                               /* may carry into e */
    return (uint16_t)(sign | r);
}

/* Given b, a bfloat16 bit pattern (the top half of a binary32).  Returned:
 * its exact float value. */
float pe_bf16_to_float(uint16_t b)
{
    const uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Given f.  Returned: f rounded to the nearest bfloat16, ties to even (a
 * NaN stays NaN, made quiet), as PyTorch's c10::BFloat16 and ml_dtypes
 * round. */
uint16_t pe_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/*
 * Runs of n values converted 8 at a time at the AVX2 level (F16C for
 * binary16, where pe_cpu_f16c; the dispatched level, read here), else one
 * at a time.  The values are the same: widening is exact (a signalling NaN
 * comes out of F16C quiet, as it would from any arithmetic on the result),
 * and vcvtps2ph rounds to nearest even, NaNs made quiet keeping their sign
 * and top payload bits, as pe_float_to_half does.
 */
#if defined(PE_X86_SIMD)
#define F16_WIDEN8(d, s) _mm256_storeu_ps((d), _mm256_cvtph_ps(                \
    _mm_loadu_si128((const __m128i *)(const void *)(s))))
#define F16_NARROW8(d, s) _mm_storeu_si128((__m128i *)(void *)(d),              \
    _mm256_cvtps_ph(_mm256_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT))
#define BF16_WIDEN8(d, s) _mm256_storeu_ps((d), PE_BF16_LOAD8(s))
#define DEFINE_CONVERT_RUN(NAME, TS, TD, TARGET, SIMD_OK, EIGHT, ONE)         \
__attribute__((target(TARGET)))                                              \
static void NAME##_simd(const TS *src, TD *dst, ptrdiff_t n)                  \
{                                                                             \
    ptrdiff_t i = 0;                                                          \
    for (; i + 8 <= n; i += 8)                                                \
        EIGHT(dst + i, src + i);                                              \
    for (; i < n; i++)                                                        \
        dst[i] = ONE(src[i]);                                                 \
}                                                                             \
void NAME(const TS *src, TD *dst, ptrdiff_t n)                                \
{                                                                             \
    if (SIMD_OK) {                                                            \
        NAME##_simd(src, dst, n);                                             \
        return;                                                               \
    }                                                                         \
    for (ptrdiff_t i = 0; i < n; i++)                                         \
        dst[i] = ONE(src[i]);                                                 \
}
#else
#define DEFINE_CONVERT_RUN(NAME, TS, TD, TARGET, SIMD_OK, EIGHT, ONE)         \
void NAME(const TS *src, TD *dst, ptrdiff_t n)                                \
{                                                                             \
    for (ptrdiff_t i = 0; i < n; i++)                                         \
        dst[i] = ONE(src[i]);                                                 \
}
#endif

DEFINE_CONVERT_RUN(pe_half_to_float_run, uint16_t, float, "avx2,f16c", pe_cpu_f16c(),
                   F16_WIDEN8, pe_half_to_float)
DEFINE_CONVERT_RUN(pe_float_to_half_run, float, uint16_t, "avx2,f16c", pe_cpu_f16c(),
                   F16_NARROW8, pe_float_to_half)
DEFINE_CONVERT_RUN(pe_bf16_to_float_run, uint16_t, float, "avx2",
                   pe_cpu_level() >= PE_CPU_AVX2, BF16_WIDEN8, pe_bf16_to_float)
