/*
 * dispatch.c - the one CPU dispatch of posemb.
 *
 * The CPU is probed once, when the extension is imported
 * (pe_cpu_select), and the level chosen there -- the best this CPU and
 * build can run, or a lower one asked for with POSEMB_CPU -- decides every
 * SIMD kernel afterwards.  Per-ISA kernels are compiled with per-function
 * target attributes (no ifunc, no target_clones: musl has no ifunc), so one
 * build runs on every x86-64 CPU.  A build with -DPOSEMB_NO_CLONES has no
 * ISA-specific code at all and always runs at level "baseline".
 */
#include <limits.h>
#include <string.h>

#include "posemb.h"

#if defined(PE_X86_SIMD)   /* (GCC or Clang: the builds whose probe times) */
#include <stdatomic.h>
#define PARTIAL_INT atomic_int
#define PARTIAL_LOAD(p) atomic_load_explicit(p, memory_order_relaxed)
#define PARTIAL_STORE(p, v) atomic_store_explicit(p, v, memory_order_relaxed)
#else                      /* (elsewhere the probe answers 1 at once) */
#define PARTIAL_INT int
#define PARTIAL_LOAD(p) (*(p))
#define PARTIAL_STORE(p, v) (*(p) = (v))
#endif

static const char *const level_names[PE_CPU_LEVELS] = {"baseline", "sse2", "avx2",
                                                       "avx512", "avx512bf16"};

/* the level in use: written once at import (before any kernel runs) */
static int cpu_level = PE_CPU_BASELINE;

const char *pe_cpu_name(int level)
{
    return level >= 0 && level < PE_CPU_LEVELS ? level_names[level] : "unknown";
}

int pe_cpu_parse(const char *name)
{
    for (int i = 0; name != NULL && i < PE_CPU_LEVELS; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

int pe_cpu_supported(void)
{
#if defined(PE_X86_SIMD)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512bf16")
                   ? PE_CPU_AVX512BF16
                   : PE_CPU_AVX512;
    if (__builtin_cpu_supports("avx2"))
        return PE_CPU_AVX2;
    return PE_CPU_SSE2;
#else
    return PE_CPU_BASELINE;
#endif
}

/* the ISA each family's kernels use at the selected level */
static const char *family_isa[PE_FAMILIES];

int pe_cpu_select(int level)
{
    const int best = pe_cpu_supported();
    if (level < 0 || level > best)
        level = best;
    cpu_level = level;
    family_isa[PE_FAMILY_ROPE] = pe_rope_dispatch(level);
    family_isa[PE_FAMILY_SINUSOIDAL] = pe_sinusoidal_dispatch(level);
    family_isa[PE_FAMILY_LEARNED] = pe_learned_dispatch(level);
    /* streaming (non-temporal) stores: SSE2 and up (AVX512_BF16 adds none) */
    family_isa[PE_FAMILY_STREAM] =
        level >= PE_CPU_SSE2 ? level_names[level < PE_CPU_AVX512 ? level : PE_CPU_AVX512] : "none";
    return level;
}

const char *pe_family_isa(int family)
{
    return family >= 0 && family < PE_FAMILIES && family_isa[family] ? family_isa[family]
                                                                      : "baseline";
}

int pe_cpu_level(void) { return cpu_level; }

int pe_cpu_f16c(void)
{
#if defined(PE_X86_SIMD)
    /* (every AVX2 CPU made has F16C; asked all the same) */
    __builtin_cpu_init();
    return cpu_level >= PE_CPU_AVX2 && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

/* May streaming stores leave lines partly written (pe_memory_stream_ok)?
 * -1: not yet probed.  Probed once, at the first call that asks; two
 * threads asking at once both probe and store the same answer, and a
 * forked child keeps its parent's. */
static PARTIAL_INT partial_lines = -1;

int pe_cpu_partial_lines(void)
{
    int v = PARTIAL_LOAD(&partial_lines);
    if (v < 0) {
        v = pe_memory_probe_partial_lines();
        PARTIAL_STORE(&partial_lines, v);
    }
    return v;
}

int pe_cpu_set_partial_lines(int v)
{
    if (v >= 0)
        PARTIAL_STORE(&partial_lines, v != 0);
    return pe_cpu_partial_lines();
}

/* pe_cpu_set_stream_min_bytes's setting in KiB, -1: none (the rule) */
static PARTIAL_INT stream_min_kib = -1;

size_t pe_cpu_stream_min_bytes(void)
{
    const int set = PARTIAL_LOAD(&stream_min_kib);
    if (set >= 0)
        return (size_t)set << 10;
    const ptrdiff_t llc = pe_cache_llc_bytes();
    const size_t most = (size_t)PE_STREAM_MOST_BYTES,
                 share = llc > 0 ? (size_t)llc / 4 * 3 : most;
    return share < (size_t)PE_STREAM_MIN_BYTES ? (size_t)PE_STREAM_MIN_BYTES
           : share > most                      ? most : share;
}

size_t pe_cpu_set_stream_min_bytes(ptrdiff_t v)
{
    if (v >= -1) {
        const ptrdiff_t kib = (v < PE_STREAM_MIN_BYTES ? PE_STREAM_MIN_BYTES : v) >> 10;
        PARTIAL_STORE(&stream_min_kib, v < 0 ? -1 : kib > INT_MAX ? INT_MAX : (int)kib);
    }
    return pe_cpu_stream_min_bytes();
}

/* ------------------------------------------------------------------ */
/* Measured choices (see posemb.h)                                      */
/* ------------------------------------------------------------------ */

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__unix__) || defined(__APPLE__))
#define CHOICE_MEASURED 1
#define CHOICE_LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define CHOICE_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)
#else
#define CHOICE_MEASURED 0
#endif

#if CHOICE_MEASURED
/* -1: measure; 0 or 1: that way for every kind */
static int choice_forced = -1;
/* each kind's calls so far, and each way's best time in picoseconds per
 * byte (0: none yet); a forked child keeps its parent's verdicts */
static unsigned choice_calls[PE_CHOICE_KINDS];
static unsigned choice_ps[PE_CHOICE_KINDS][2];

int pe_choice_way(int kind)
{
    const int forced = CHOICE_LOAD(&choice_forced);
    if (forced >= 0 || kind < 0 || kind >= PE_CHOICE_KINDS)
        return forced >= 0 ? forced : 1;
    const unsigned n = __atomic_fetch_add(&choice_calls[kind], 1u, __ATOMIC_RELAXED);
    /* trials 0 1 1 0 0 1 1 0: a caller alternating two calls of one kind
     * (q then k) tries both ways on each; rechecks every PE_CHOICE_RECHECK
     * calls, an odd count, so they too fall on both */
    if (n < PE_CHOICE_TRIALS)
        return (int)(((n + 1u) >> 1) & 1u);
    const unsigned p0 = CHOICE_LOAD(&choice_ps[kind][0]),
                   p1 = CHOICE_LOAD(&choice_ps[kind][1]);
    const int best = p0 == 0 ? 0 : p1 == 0 ? 1 : p1 < p0;   /* (an untimed way: try it) */
    return n % PE_CHOICE_RECHECK == 0 ? !best : best;
}

void pe_choice_report(int kind, int way, double seconds, double bytes)
{
    if (kind < 0 || kind >= PE_CHOICE_KINDS || (way != 0 && way != 1) || !(seconds > 0) ||
        !(bytes > 0) || CHOICE_LOAD(&choice_forced) >= 0)   /* (forced: not a measurement) */
        return;
    const double ps = seconds * 1e12 / bytes;
    const unsigned v = ps >= 4e9 ? 4000000000u : ps < 1 ? 1u : (unsigned)ps;
    unsigned old = CHOICE_LOAD(&choice_ps[kind][way]);
    while ((old == 0 || v < old) &&
           !__atomic_compare_exchange_n(&choice_ps[kind][way], &old, v, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
}

int pe_choice_set(int way)
{
    if (way == -1)   /* measure afresh */
        for (int k = 0; k < PE_CHOICE_KINDS; k++) {
            CHOICE_STORE(&choice_calls[k], 0u);
            CHOICE_STORE(&choice_ps[k][0], 0u);
            CHOICE_STORE(&choice_ps[k][1], 0u);
        }
    if (way >= -1 && way <= 1)
        CHOICE_STORE(&choice_forced, way);
    return CHOICE_LOAD(&choice_forced);
}

unsigned pe_choice_best(int kind, int way)
{
    return kind >= 0 && kind < PE_CHOICE_KINDS && (way == 0 || way == 1)
               ? CHOICE_LOAD(&choice_ps[kind][way]) : 0u;
}
#else
/* nothing is measured: way 1 unless set */
static PARTIAL_INT choice_forced = -1;

int pe_choice_way(int kind)
{
    const int forced = PARTIAL_LOAD(&choice_forced);
    (void)kind;
    return forced >= 0 ? forced : 1;
}

void pe_choice_report(int kind, int way, double seconds, double bytes)
{
    (void)kind, (void)way, (void)seconds, (void)bytes;
}

int pe_choice_set(int way)
{
    if (way >= -1 && way <= 1)
        PARTIAL_STORE(&choice_forced, way);
    return PARTIAL_LOAD(&choice_forced);
}

unsigned pe_choice_best(int kind, int way)
{
    (void)kind, (void)way;
    return 0;
}
#endif
