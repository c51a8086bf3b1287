/*
 * posemb.h - the plain-C kernels of posemb.
 *
 * Nothing here includes Python.h or NumPy headers: the kernels
 * (src/kernels/, one file per family) and the runtime (src/runtime/: CPU
 * dispatch, thread pool, memory policy) see raw pointers, sizes and byte
 * strides; the binding (src/binding.c) is the only C that talks to CPython
 * and the NumPy C API.
 *
 * Naming: pe_<family>_<variant>_<direction>_<dtype>, e.g.
 * pe_rope_half_fwd_f32.  f16 kernels compute in float32 and round once.
 * Sizes and strides are ptrdiff_t (the same width as npy_intp).
 */
#ifndef POSEMB_H
#define POSEMB_H

#include <stddef.h>
#include <stdint.h>

/*
 * SIMD: one CPU dispatch (dispatch.c).  The CPU is probed once, at import,
 * and each family fills its table of kernels for the level chosen
 * (baseline, sse2, avx2, avx512; POSEMB_CPU may ask for a lower one).
 * Per-ISA kernels are separate functions with a target attribute, never
 * target_clones or ifunc (musl has neither), and the build itself never
 * uses -march, so one wheel runs everywhere.  No kernel uses FMA: the
 * "avx2" target has none, GCC 12 would form vfmaddsub from the interleaved
 * RoPE's a*b -/+ c*d under "avx512f" despite -ffp-contract=off, so the
 * few AVX-512F kernels (sinusoidal.c) are explicit intrinsics, and a test
 * checks the binary holds no FMA.  Every level gives the same bits.
 * Building with -DPOSEMB_NO_CLONES leaves only the portable C kernels (no
 * intrinsics, no streaming stores): .ci/portable.sh runs the suite on such
 * a build, and .ci/cpu_levels.sh runs the kernel tests at every level this
 * machine has.
 */
/*
 * x86-64 SIMD kernels (explicit intrinsics in functions with a target
 * attribute) are built unless -DPOSEMB_NO_CLONES asks for the portable C
 * kernels only.
 */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(POSEMB_NO_CLONES)
#define PE_X86_SIMD 1
#endif

/* ------------------------------------------------------------------ */
/* CPU dispatch (dispatch.c): one level for the whole process          */
/* ------------------------------------------------------------------ */
enum { PE_CPU_BASELINE, PE_CPU_SSE2, PE_CPU_AVX2, PE_CPU_AVX512, PE_CPU_AVX512BF16,
       PE_CPU_LEVELS };
int pe_cpu_supported(void);      /* the best level this CPU and build run */
/* Use level (-1: the best; above the best: clamped); returns the level
 * used.  Called once, at import, before any kernel runs. */
int pe_cpu_select(int level);
int pe_cpu_level(void);          /* the level in use */
int pe_cpu_f16c(void);           /* F16C kernels: the level is AVX2+ and the CPU has it */
const char *pe_cpu_name(int level);
int pe_cpu_parse(const char *name);   /* the level named name, or -1 */
/* The ISA each family's SIMD kernels use at the level in use. */
enum { PE_FAMILY_ROPE, PE_FAMILY_SINUSOIDAL, PE_FAMILY_LEARNED, PE_FAMILY_STREAM,
       PE_FAMILIES };
const char *pe_family_isa(int family);
/* Does this CPU stream (non-temporal stores) as fast into lines left partly
 * written while other lines are written, as into lines written whole?  See
 * pe_memory_stream_ok.  Probed once, at the first call
 * (pe_memory_probe_partial_lines); pe_cpu_set_partial_lines(0 or 1) sets
 * the answer (for tests), -1 leaves it; both return it. */
int pe_cpu_partial_lines(void);
int pe_cpu_set_partial_lines(int v);
/* The smallest output the kernels stream (see PE_STREAM_MIN_BYTES);
 * pe_cpu_set_stream_min_bytes(v) sets it to v bytes (for tests: at least
 * PE_STREAM_MIN_BYTES, whole KiB), -1 back to the rule, below -1 leaves
 * it; both return it. */
size_t pe_cpu_stream_min_bytes(void);
size_t pe_cpu_set_stream_min_bytes(ptrdiff_t v);
/*
 * Measured choices: two ways (0 and 1) of running one kind of call that give
 * the same bits and whose speed the cache sizes do not predict (a software
 * prefetch that one CPU's hardware prefetcher needs and another's is slowed
 * by).  pe_choice_way(kind) says which way the next call of the kind takes;
 * the caller times it and hands the time to pe_choice_report.  Each kind's
 * first PE_CHOICE_TRIALS calls take both ways (0 1 1 0 0 1 1 0), later calls
 * the way whose best time per byte is lower, and every PE_CHOICE_RECHECK-th
 * call the other way again, so a verdict is revisited.  pe_choice_set(way)
 * forces a way for every kind (0 or 1: calls are then not measured; -1:
 * measure afresh, forgetting every time; below -1 leaves it) and returns the
 * setting; pe_choice_best gives a kind's best time per byte of a way in
 * picoseconds (0: none yet).  Kinds: 0 .. PE_CHOICE_KINDS - 1.  Where there
 * is no monotonic clock or atomic (MSVC, mingw-w64), nothing is measured
 * and every call takes way 1 unless set.
 */
#define PE_CHOICE_KINDS 24
#define PE_CHOICE_TRIALS 8
#define PE_CHOICE_RECHECK 17
int pe_choice_way(int kind);
void pe_choice_report(int kind, int way, double seconds, double bytes);
int pe_choice_set(int way);
unsigned pe_choice_best(int kind, int way);
/* seconds on a monotonic clock (0 where there is none) */
double pe_now_seconds(void);

/*
 * Limits, defined here once (the binding exports them to Python as
 * posemb._core.MAX_EXTENT, ...):
 *   PE_MAX_EXTENT: sizes and |query_offset| of bias and mask tables, so
 *       that every key - query difference stays well inside int64;
 *   PE_MAX_EXACT: positions (and T5's max_distance), exact in float64;
 *   PE_MAX_EXACT_DISTANCE: ALiBi's sizes and |query_offset|, so that every
 *       distance is exact in float64 after adding them;
 *   PE_T5_MAX_BUCKETS: T5 buckets (the boundary table has one per bucket).
 */
#define PE_MAX_EXTENT (INT64_C(1) << 61)
#define PE_MAX_EXACT (INT64_C(1) << 53)
#define PE_MAX_EXACT_DISTANCE (INT64_C(1) << 52)
#define PE_T5_MAX_BUCKETS (INT64_C(1) << 20)

/* Helpers inlined into each SIMD clone, so they are compiled for its target. */
#if defined(__GNUC__)
#define PE_INLINE static inline __attribute__((always_inline))
#else
#define PE_INLINE static inline
#endif

/* ------------------------------------------------------------------ */
/* float16 <-> float32 (IEEE binary16, round to nearest even)          */
/* ------------------------------------------------------------------ */
float pe_half_to_float(uint16_t h);
uint16_t pe_float_to_half(float f);
/* float64 -> binary16 rounded once (nearest even), as NumPy's cast */
uint16_t pe_double_to_half(double v);
/* n binary16 values widened to float, and n floats rounded to binary16
 * (F16C where pe_cpu_f16c; a signalling NaN is widened to a quiet one
 * there, as arithmetic on the result would make it) */
void pe_half_to_float_run(const uint16_t *src, float *dst, ptrdiff_t n);
void pe_float_to_half_run(const float *src, uint16_t *dst, ptrdiff_t n);
/* n bfloat16 bit patterns widened to float (8 at a time at the AVX2 level) */
void pe_bf16_to_float_run(const uint16_t *src, float *dst, ptrdiff_t n);
/* bfloat16 (the top 16 bits of a binary32) <-> float32, nearest even */
float pe_bf16_to_float(uint16_t b);
uint16_t pe_float_to_bf16(float f);

/*
 * Ask for cache lines ahead of use: a hint that never faults, for reads the
 * hardware prefetcher cannot guess (a jump to another head's rows, a table
 * row picked by position).  pe_prefetch(p, n): the lines at p, p + 64, ...
 * below p + n, which miss the last line of [p, p + n) where p lies past a
 * line and n is a multiple of 64 (that line's rest is the next row's,
 * where rows run back to back, and the next row's prefetch takes it);
 * pe_prefetch_lines(p, n): every line of [p, p + n) (a row of 1 KiB 16
 * bytes past a line spans 17).  [p, p + n) must lie within one array.
 * Always inlined, and so must be any helper that does nothing but call
 * them: GCC 12 at -O3 finds such a helper free of side effects and drops
 * the calls to it that it does not inline.
 */
PE_INLINE void pe_prefetch(const void *p, ptrdiff_t nbytes)
{
#if defined(__GNUC__) || defined(__clang__)
    for (ptrdiff_t i = 0; i < nbytes; i += 64)
        __builtin_prefetch((const char *)p + i);
#else
    (void)p;
    (void)nbytes;
#endif
}
/* ... into the second-level cache only (prefetcht1 on x86): the line does
 * not wait in L1's fill buffers, which the loads of the rows being
 * rotated need (see rope.c's heads-inner walk) */
PE_INLINE void pe_prefetch_l2(const void *p, ptrdiff_t nbytes)
{
#if defined(__GNUC__) || defined(__clang__)
    for (ptrdiff_t i = 0; i < nbytes; i += 64)
        __builtin_prefetch((const char *)p + i, 0, 2);
#else
    (void)p;
    (void)nbytes;
#endif
}
/* every line of [p, p + nbytes), the lines' addresses as integers (no
 * pointer past the array); l2: into the second-level cache only */
PE_INLINE void pe_prefetch_lines(const void *p, ptrdiff_t nbytes, int l2)
{
#if defined(__GNUC__) || defined(__clang__)
    const uintptr_t end = (uintptr_t)p + (uintptr_t)(nbytes > 0 ? nbytes : 0);
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64) {
        if (l2)
            __builtin_prefetch((const void *)a, 0, 2);
        else
            __builtin_prefetch((const void *)a);
    }
#else
    (void)p;
    (void)nbytes;
    (void)l2;
#endif
}

/* ------------------------------------------------------------------ */
/* Thread pool (pool.c)                                                */
/* ------------------------------------------------------------------ */

/* fn(ctx, begin, end) processes items [begin, end) of a parallel job. */
typedef void (*pe_task_fn)(void *ctx, ptrdiff_t begin, ptrdiff_t end);

/*
 * Run fn over [0, n) split into at most get_num_threads() parts of at least
 * `grain` items (the items that make a part worth a thread: 1 when each
 * item is, however large); serial when small or when the pool is busy.
 * Parts must write disjoint memory.
 */
void pe_parallel_for(ptrdiff_t n, ptrdiff_t grain, pe_task_fn fn, void *ctx);
/*
 * pe_parallel_for over [0, n) in chunks of at most PE_STOP_CHECK_BYTES
 * (item_bytes per item); between chunks, once every ~100 ms of work, the
 * caller asks stop() (if not NULL) whether to stop, with no chunk running
 * on the pool.  Returns 1 if it stopped, else 0.
 */
typedef int (*pe_stop_fn)(void);
int pe_parallel_for_stoppable(ptrdiff_t n, ptrdiff_t grain, ptrdiff_t item_bytes,
                              pe_task_fn fn, void *ctx, pe_stop_fn stop);
#define PE_STOP_CHECK_BYTES ((ptrdiff_t)32 << 20)
int pe_set_num_threads(int n);   /* clamps to [1, 64]; returns the value */
int pe_get_num_threads(void);    /* default: online CPUs */

/*
 * The per-core L2 cache size in bytes, read once at run time (sysconf;
 * 1 MiB where the system does not say), clamped to [256 KiB, 4 MiB].
 */
ptrdiff_t pe_cache_l2_bytes(void);
/* The per-core L1 data cache size, read once at run time (32 KiB where the
 * system does not say), clamped to [16 KiB, 256 KiB]. */
ptrdiff_t pe_cache_l1_bytes(void);
/* The last-level (L3) cache size, read once at run time (the L2 size where
 * the system does not say). */
ptrdiff_t pe_cache_llc_bytes(void);
/* The first line of a small text file (sysfs, cgroups) into buf, without
 * its newline: 1, or 0 if the file cannot be read.  (runtime/pool.c) */
int pe_file_line(const char *path, char *buf, size_t n);
/* A number of bytes from that line ("1048576", "32768K"; K/M/G suffixes),
 * or 0 (no file, "max", not a number). */
size_t pe_file_bytes(const char *path);
/*
 * Work below this many bytes touched per thread runs on one thread: five
 * of one core's L2 (pe_cache_l2_bytes; an in-place vector counts its bytes
 * twice, read and written).  Work of that size takes tens of microseconds
 * on one core, little more than waking a second one, and a second thread
 * that the OS runs late or preempts holds the caller up for longer.
 * Measured, in-place RoPE, 1 vs 2 threads (speedups, interleaved rounds):
 * earlier, on a 1 MiB-L2 EPYC, 2 MiB arrays 0.85x, 4 MiB 1.38x, 8 MiB 1.6x
 * (two L2s per thread then); on a 1 MiB-L2 Zen 5 EPYC VM, 4 MiB arrays
 * 0.93-1.15x in a script but 0.48x and 0.73x in two bench runs (other
 * libraries' threads about), 6 MiB 0.98-1.23x, 8 MiB 1.07-1.33x, 16 MiB
 * 1.27-1.8x: so 4 MiB (8 MiB touched) stays on one thread.
 */
#define PE_PARALLEL_MIN_BYTES (5 * pe_cache_l2_bytes())

/*
 * Toeplitz fill (toeplitz.c): out[h, i, :] = diag[h, q-1-i : q-1-i+k] for a
 * (heads, q, k) C-contiguous out and diag (heads, q + k - 1), on the pool.
 */
void pe_toeplitz_fill(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                      ptrdiff_t itemsize, const void *diag, void *out);

/* Streaming passes for the benchmarks' bandwidth limit (bench/stream.c,
 * built into posemb._stream only, never into posemb._core). */
void pe_stream_scale_f32(ptrdiff_t n, float *x, float a);   /* x *= a */
void pe_stream_fill_f32(ptrdiff_t n, float *x, float a);    /* x = a  */
void pe_stream_copy(ptrdiff_t nbytes, const void *src, void *dst);
void pe_stream_read_f32(ptrdiff_t n, const float *x);       /* reads x */

/* ------------------------------------------------------------------ */
/* RoPE: rotary position embeddings (rope.c)                           */
/* ------------------------------------------------------------------ */

/*
 * One run of a rotary kernel (pe_rope_apply calls them block by block):
 * n vectors x[k] of d features, each rotated by the full-width tables
 * cos[k], sin[k] of r <= d features; features 2*(r/2)..d-1 are copied
 * (partial rotary; an odd r leaves its unpaired feature unchanged).
 * *_step are the byte strides between vectors, *_inner between features.
 * y may be x itself (in place): every pair is read before it is written.
 * m > 1: m groups of those n vectors, group o's at x + o * x_outer (y, cos
 * and sin alike); m <= 1 (a zeroed field too): one group.
 */
typedef struct pe_rope_loop {
    ptrdiff_t n, d, r;
    const char *x, *cos, *sin;
    char *y;
    ptrdiff_t x_step, cos_step, sin_step, y_step;
    ptrdiff_t x_inner, cos_inner, sin_inner, y_inner;
    ptrdiff_t m, x_outer, cos_outer, sin_outer, y_outer;
} pe_rope_loop;

typedef void (*pe_rope_fn)(const pe_rope_loop *);

/* For a kernel without its own loop over groups: if L has m > 1 groups,
 * runs self once per group and returns 1; else 0 (rope.c). */
int pe_rope_groups(const pe_rope_loop *L, pe_rope_fn self);

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
/* bfloat16 (uint16 bit patterns): computed in float32, rounded once */
void pe_rope_half_fwd_bf16(const pe_rope_loop *a);
void pe_rope_half_back_bf16(const pe_rope_loop *a);
void pe_rope_inter_fwd_bf16(const pe_rope_loop *a);
void pe_rope_inter_back_bf16(const pe_rope_loop *a);

/*
 * RoPE over a grid: the inner loop of the gufunc (h,s,d),(s,r),(s,r)->(h,s,d).
 * B batch entries (the gufunc's outer loop) of H heads x S positions, each
 * a vector of d features rotated by table row (b, s) of r <= d features:
 * x/y byte strides over (b, h, s), table strides over (b, s), inner strides
 * over features.  Any strides; y is x itself (same strides: in place) or
 * overlaps no input (NumPy copies any other overlap first).  The typical
 * layouts are HF/Julia (batch, heads, seq, head_dim) with tables (seq, dim)
 * or (batch, seq, dim).
 */
typedef struct pe_rope_grid {
    ptrdiff_t B, H, S, d, r;
    const char *x, *cos, *sin;
    char *y;
    ptrdiff_t x_b, x_h, x_s, y_b, y_h, y_s;
    ptrdiff_t cos_b, cos_s, sin_b, sin_s;
    ptrdiff_t x_inner, cos_inner, sin_inner, y_inner;
    /* asked every ~100 ms of work whether to stop (NULL: never) */
    pe_stop_fn stop;
} pe_rope_grid;

/*
 * Run a grid: kind 0..3 (half fwd, half back, interleaved fwd, interleaved
 * back), type 0..3 (float16, float32, float64, bfloat16 as uint16 bit
 * patterns, computed in float32 and rounded once).  The grid is cut into
 * blocks of positions with all H heads inside a block, so each table row is
 * read from memory once and reused from cache for every head; blocks are
 * spread over the pool.  Each block takes the fastest kernel it allows, all
 * with the bits of pe_rope_{half,inter}_*: half-split blocks whose table
 * rows are duplicated (checked bitwise) read half the tables; f32/f64 take
 * the SIMD kernels of the dispatched CPU level, with streaming stores for
 * large out-of-place outputs.  Returns 1 if stopped part way (g->stop said
 * so), else 0.
 */
int pe_rope_apply(const pe_rope_grid *g, int kind, int type);

/* Fill RoPE's kernel table for a CPU level (dispatch.c calls it once);
 * returns the ISA its SIMD kernels use. */
const char *pe_rope_dispatch(int level);
/* The full-width kernel of the dispatched level, kind 0..3, type 0..2. */
pe_rope_fn pe_rope_kernel(int kind, int type);

/*
 * Streaming (non-temporal) stores send an out-of-place output to memory,
 * past the caches: they skip the read of each line before it is written
 * (read-for-ownership), so they pay where the output would not stay in the
 * last-level cache anyway, and cost where it would (the call, and whatever
 * reads the output next, then go to memory).  So the kernels stream only
 * outputs of at least pe_cpu_stream_min_bytes(): 3/4 of the last-level
 * cache, kept within PE_STREAM_MIN_BYTES .. PE_STREAM_MOST_BYTES.
 * Measured, 1 thread, Zen 3 EPYC VM (32 MiB L3), float32 RoPE out of place
 * into a reused output, minima over 3 processes each, plain / streaming
 * stores: x of 4 MiB 195 / 257 us (with a y.max() after: 271 / 492), 8
 * MiB 454 / 594, 12 MiB 1027 / 1201, 16 MiB 1264 / 1229 (1936 / 2275),
 * 24 MiB 2354 / 2418 (3715 / 4151), 32 MiB 2948 / 2107, 48 MiB 5342 /
 * 3575.  On a Xeon VM whose 480 MB L3 is shared with other guests, x +
 * table plain stores were faster up to a 16 MiB output and streaming
 * stores from about 24 MiB on (by 1.5x): a core's share of a large shared
 * cache is smaller than the cache, hence the cap.  (runtime/dispatch.c)
 */
#define PE_STREAM_MIN_BYTES ((ptrdiff_t)4 << 20)
#define PE_STREAM_MOST_BYTES ((ptrdiff_t)24 << 20)

/*
 * Is the page holding p in memory (1), or not yet touched / swapped out
 * (0)?  1 where the system cannot tell.  Streaming stores pay into a
 * buffer whose pages are in memory (a reused out=): they skip reading each
 * output line before writing it.  Into a fresh allocation they cost: the
 * kernel zeroes each page on first touch, leaving it in cache, and a
 * streaming store must then evict that line (measured on an earlier VM
 * whose last-level cache held the output, a reused 64 MiB out= taking
 * 2.9-3.0 ms: apply_rope into a fresh 64 MiB array, 12.3 ms with streaming
 * stores, 9.9 ms with plain ones).  Where the output is as large as the
 * last-level cache or larger it leaves the cache either way, and streaming
 * paid:
 * Zen 3 EPYC VM (32 MiB L3), apply_rope(x, cos, sin,
 * out=np.empty_like(x)), (1, 32, S, 128), settings alternated in one
 * process, medians of 7-9 rounds, 1 / 2 threads: float32 128 MiB 45.1-49.0
 * -> 40.6-42.9 ms / 40.9-43.3 -> 36.7-36.9 ms, 64 MiB 22.0-23.0 ->
 * 19.9-21.0 / 17.6 -> 14.3, 32 MiB 12.1-13.6 -> 11.3-12.7 / 9.5-11.5 ->
 * 8.5-9.8; float16 128 MiB 52.4-53.4 -> 42.4-45.5 / 42.3-46.3 ->
 * 32.6-40.0, bfloat16 49.3-50.5 -> 42.8-48.3 / 40.6-44.6 -> 33.5-38.0;
 * learned_pe_forward (8, 2048, 1024) float32 into a fresh 64 MiB
 * 25.7-27.1 against 27.2 ms / 22.5-26.4 against 23.8-26.1.  So the
 * kernels stream into an output smaller than the last-level cache (or
 * where no cache larger than L2 was found) only where its middle element's
 * page is in memory (the first page of a fresh
 * malloc block holds the allocator's header, so it is always in).
 * (runtime/memory.c)
 */
int pe_memory_resident(const void *p);

/*
 * May a kernel stream into an output of bytes bytes whose middle element
 * is at mid?  Where it is that large (pe_cpu_stream_min_bytes), its
 * middle page is in memory (pe_memory_resident) or it is at least the size
 * of the last-level cache (one larger than L2: a cache the runtime found),
 * and
 * either the kernel
 * writes each line it streams whole before it leaves it (whole_lines: y and
 * its steps on 64-byte lines, with each kernel's store order) or this CPU
 * streams as fast into lines left partly written (pe_cpu_partial_lines).
 * Measured, 1 thread, (1, 32, 16384, 128) float16 out of place: Zen 5 EPYC,
 * y 16 bytes past a line, streaming 6.5-7.1 ms against plain stores 7.8-8.1;
 * Zen 3 EPYC (AMD family 25), streaming 44-58 ms (y on a line, four heads'
 * rows interleaved: 31 ms) against plain stores 12-15.  The probe: eight
 * rows of 256 bytes in turn, 16-byte streaming stores, at 16 bytes past a
 * line against on a line, the lines flushed from the caches first (Zen 3,
 * four rows: 24-37 against 9-11 ms for 128 MiB).
 */
int pe_memory_stream_ok(const void *mid, int whole_lines, size_t bytes);
/* The probe: 1 if streaming at 16 bytes past a line takes at most 1.3x the
 * time on a line (1 where it cannot time, or without streaming stores). */
int pe_memory_probe_partial_lines(void);

/*
 * The output cache: where a large output array's memory goes when its
 * array is freed, and comes back from for the next output of the same
 * size.  A fresh allocation of tens of MiB is fresh pages, which the
 * system zeroes on first touch: measured here, apply_rope into a new
 * 128 MiB array took 18-23 ms, into a reused one 8-9 ms.  A training or
 * notebook loop allocates the same output sizes again and again, so the
 * binding hands NumPy these functions (as its allocator, only while a
 * posemb call allocates its outputs), and a freed output of at least
 * PE_OUT_CACHE_MIN_BYTES is kept, up to `limit` bytes in all, the oldest
 * released first.  Blocks come from malloc (large ones from posix_memalign,
 * at the start of a page), so realloc and free of any of them stay valid; the
 * cache keeps its own record of each block's size.
 * Not thread-safe: the binding calls it with the GIL held.
 * (runtime/memory.c)
 */
#define PE_OUT_CACHE_MIN_BYTES ((size_t)4 << 20)
#define PE_OUT_CACHE_SLOTS 8     /* blocks kept */
#define PE_OUT_CACHE_LIVE 64     /* blocks handed out and tracked */
typedef struct { void *p; size_t n; } pe_block;
typedef struct {
    size_t limit, held;                      /* bytes: at most, kept now */
    pe_block keep[PE_OUT_CACHE_SLOTS];       /* oldest first */
    pe_block live[PE_OUT_CACHE_LIVE];        /* p == NULL: free slot */
    int nkeep;
} pe_out_cache;
void *pe_out_cache_malloc(pe_out_cache *c, size_t n);
void *pe_out_cache_calloc(pe_out_cache *c, size_t count, size_t size);
void pe_out_cache_free(pe_out_cache *c, void *p);
void *pe_out_cache_realloc(pe_out_cache *c, void *p, size_t n);
/* keep at most limit bytes from now on; 0 releases every block kept */
void pe_out_cache_set_limit(pe_out_cache *c, size_t limit);
/* the default limit: 1 GiB, or 1/16 of RAM (or of a cgroup memory limit) if less */
size_t pe_out_cache_default_limit(void);
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

/*
 * Sinusoidal table for the n integer positions start .. start+n-1 and dim
 * features, row k at out + k*dim (rows contiguous), w = inv_freq:
 *   concat == 0 (interleaved, Vaswani):  out[k, j] = sin(p*w[j/2]) for even j,
 *                                                    cos(p*w[j/2]) for odd j
 *   concat != 0:  out[k, i] = sin(p*w[i]), out[k, h+i] = cos(p*w[i]) (i < h),
 *                 out[k, dim-1] = 0 for odd dim                (h = dim/2)
 * inv_freq holds PE_SINUSOIDAL_NFREQ(dim) = ceil(dim/2) values; work is
 * scratch space of PE_SINUSOIDAL_WORK(dim) doubles.  Values are computed in
 * float64 and rounded once to the output type; a value depends only on its
 * position (not on start or n).  0 <= start, start + n <= 2**53.
 * BLOCK and SUPER set the angle-sum split p = P + q*BLOCK + k (sinusoidal.c).
 */
#define PE_SINUSOIDAL_BLOCK 32
#define PE_SINUSOIDAL_SUPER 32
#define PE_SINUSOIDAL_NFREQ(dim) (((dim) + 1) / 2)
/* frequencies are made in blocks of at most FREQS (a multiple of 16): the
 * scratch is bounded whatever dim is */
#define PE_SINUSOIDAL_FREQS 256
#define PE_SINUSOIDAL_WORK(dim) \
    ((2 * PE_SINUSOIDAL_BLOCK + 2 * PE_SINUSOIDAL_SUPER + 4) * \
     (PE_SINUSOIDAL_NFREQ(dim) < PE_SINUSOIDAL_FREQS ? \
      PE_SINUSOIDAL_NFREQ(dim) : PE_SINUSOIDAL_FREQS))

void pe_sinusoidal_table_f16(ptrdiff_t n, int64_t start, ptrdiff_t dim,
                             const double *inv_freq, int concat,
                             uint16_t *out, double *work);
void pe_sinusoidal_table_f32(ptrdiff_t n, int64_t start, ptrdiff_t dim,
                             const double *inv_freq, int concat,
                             float *out, double *work);
void pe_sinusoidal_table_f64(ptrdiff_t n, int64_t start, ptrdiff_t dim,
                             const double *inv_freq, int concat,
                             double *out, double *work);

/*
 * One elementwise-ufunc call adding a precomputed table: n elements,
 * byte steps between them.  y may be x itself.
 *   f32, f64:  y = x + t                  (x, t, y of one type)
 *   f16:       y = half(x + t)            (x, y float16, t float64: the sum
 *                                          is formed in float64, rounded once)
 */
typedef struct pe_sinusoidal_add_loop {
    ptrdiff_t n;
    const char *x, *t;
    char *y;
    ptrdiff_t x_step, t_step, y_step;
} pe_sinusoidal_add_loop;

void pe_sinusoidal_add_f16(const pe_sinusoidal_add_loop *a);
void pe_sinusoidal_add_f32(const pe_sinusoidal_add_loop *a);
void pe_sinusoidal_add_f64(const pe_sinusoidal_add_loop *a);

/*
 * x + table over a (B, S, D) grid: y[b, s, j] = x[b, s, j] + t[b, s, j],
 * byte strides per batch (t_b is 0 for a table broadcast over the batch),
 * position and feature; a generalized-ufunc call of signature
 * (s,d),(s,d)->(s,d).  y is x itself (same strides: in place) or overlaps
 * neither input.  Runs tile by tile (one L2 of table, 16 KiB where a
 * strided table is gathered; every batch inside a tile, so each table
 * tile is read from memory once), tiles
 * spread over the pool; a grid whose features are strided but whose
 * positions are contiguous (Julia's (batch, features, seq)) is walked
 * transposed.  Out-of-place f32/f64 outputs use streaming stores along
 * contiguous rows where pe_memory_stream_ok allows.
 * kind: 2 = f16 (t float64), 4 = f32, 8 = f64 (the element size of x, y).
 */
typedef struct pe_sinusoidal_grid {
    ptrdiff_t B, S, D;
    const char *x, *t;
    char *y;
    ptrdiff_t x_b, t_b, y_b;
    ptrdiff_t x_s, t_s, y_s;
    ptrdiff_t x_d, t_d, y_d;
    pe_stop_fn stop;   /* asked every ~100 ms of work whether to stop, or NULL */
} pe_sinusoidal_grid;

void pe_sinusoidal_add_grid(const pe_sinusoidal_grid *g, int kind);
/* Fill the family's kernel table for a CPU level (once, from dispatch.c);
 * returns the ISA its SIMD kernels use. */
const char *pe_sinusoidal_dispatch(int level);

/* ------------------------------------------------------------------ */
/* Learned encodings (learned.c)                                       */
/* ------------------------------------------------------------------ */

/*
 * One generalized-ufunc call of the fused learned forward, signature
 * (d),(),(m,d)->(d): n vectors x[k] of d features, each plus row pos[k] of
 * the (m, d) table w, with no gathered temporary:
 *   y[k, j] = x[k, j] + w[pos[k], j]
 * f16 adds in float32 and rounds once.  A position outside [0, m) (the
 * Python layer rejects those first) gives a row of NaN, never a read out
 * of bounds.  *_step are byte strides between vectors, w_row between table
 * rows, *_inner between features.  y may be x itself.
 */
typedef struct pe_learned_loop {
    ptrdiff_t n, d, m;
    const char *x, *pos, *w;
    char *y;
    ptrdiff_t x_step, pos_step, w_step, y_step;
    ptrdiff_t x_inner, w_row, w_inner, y_inner;
    pe_stop_fn stop;   /* pe_learned_fwd_run: asked every ~100 ms, or NULL */
} pe_learned_loop;

void pe_learned_fwd_f16(const pe_learned_loop *a);
void pe_learned_fwd_f32(const pe_learned_loop *a);
void pe_learned_fwd_f64(const pe_learned_loop *a);
void pe_learned_fwd_bf16(const pe_learned_loop *a);   /* bfloat16 bit patterns */
/* Run the forward over the pool, vectors split across threads, type 0..3
 * (float16, float32, float64, bfloat16); out-of-place f32/f64 outputs use
 * streaming stores where the level has them and pe_memory_stream_ok allows. */
void pe_learned_fwd_run(const pe_learned_loop *L, int type);
/* Fill the family's kernel table for a CPU level (once, from dispatch.c);
 * returns the ISA its SIMD kernels use. */
const char *pe_learned_dispatch(int level);

/*
 * Learned backward, the scatter-add of n gradient rows g[t] (d features,
 * rows contiguous) into the (m, d) table gw, each element receiving its
 * addends in token order t = 0, 1, ..., n-1 (the bits of a serial loop,
 * and of PyTorch's Embedding backward / index_add_ on the CPU):
 *   gw[pos[t], j] += g[t, j]
 * starting from gw's contents, or, when assign is set, from a zeroed table
 * (the bits of torch.zeros(m, d).index_add_; gw's contents are never read,
 * so it may be uninitialised).  work is scratch of pe_learned_back_work(n,
 * m) int64 values (0 means none is used), or NULL.  f16 and bf16 (bit
 * pattern) gradients accumulate into a float32 table (round once
 * afterwards).  Rows with
 * pos[t] outside [0, m) are skipped (the binding rejects them before
 * calling).  gw must not overlap g, pos or work.
 */
ptrdiff_t pe_learned_back_work(ptrdiff_t n, ptrdiff_t m);
void pe_learned_back_f16(ptrdiff_t n, ptrdiff_t d, const uint16_t *g,
                         const int64_t *pos, ptrdiff_t m, float *gw,
                         int64_t *work, int assign);
void pe_learned_back_f32(ptrdiff_t n, ptrdiff_t d, const float *g,
                         const int64_t *pos, ptrdiff_t m, float *gw,
                         int64_t *work, int assign);
void pe_learned_back_f64(ptrdiff_t n, ptrdiff_t d, const double *g,
                         const int64_t *pos, ptrdiff_t m, double *gw,
                         int64_t *work, int assign);
void pe_learned_back_bf16(ptrdiff_t n, ptrdiff_t d, const uint16_t *g,
                          const int64_t *pos, ptrdiff_t m, float *gw,
                          int64_t *work, int assign);

/* ------------------------------------------------------------------ */
/* Relative position bias: T5 buckets, Shaw tables (relative.c)        */
/* ------------------------------------------------------------------ */

/*
 * T5 buckets as Hugging Face's T5Attention._relative_position_bucket, bit
 * for bit.  nb = num_buckets / 2 when bidirectional, else num_buckets;
 * me = nb / 2 >= 1; max_distance > me.  bound has nb - 1 entries, filled
 * by pe_t5_boundaries: bound[b - 1] is the smallest |rp| in bucket >= b
 * (HF's float32 log decides it), so bucket(|rp|) = #{b : bound[b-1] <= |rp|}.
 */
typedef struct pe_t5_spec {
    int bidirectional;
    int64_t num_buckets;        /* as HF's num_buckets (both directions) */
    const uint64_t *bound;      /* nb - 1 entries, ascending */
} pe_t5_spec;

void pe_t5_boundaries(int bidirectional, int64_t num_buckets,
                      int64_t max_distance, uint64_t *bound);

/* out[i] = bucket(rp[i]); out may be rp. */
void pe_t5_bucket_i64(const pe_t5_spec *s, ptrdiff_t n, const int64_t *rp,
                      int64_t *out);

/*
 * out (heads, q, k) = table[bucket(j - query_offset - i), h], table
 * (num_buckets, heads); both C-contiguous.  |query_offset| + q + k < 2**63.
 * Returns 0, or -1 when scratch memory (O(q + k)) is not available.
 */
int pe_t5_bias_f16(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                   ptrdiff_t k, int64_t query_offset, const uint16_t *table,
                   uint16_t *out);
int pe_t5_bias_f32(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                   ptrdiff_t k, int64_t query_offset, const float *table,
                   float *out);
int pe_t5_bias_f64(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                   ptrdiff_t k, int64_t query_offset, const double *table,
                   double *out);

/* table_grad (num_buckets, heads) = scatter-add of grad (heads, q, k);
 * float16 and bfloat16 (bit pattern) gradients give a float32 table_grad. */
int pe_t5_bias_back_f16(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                        ptrdiff_t k, int64_t query_offset, const uint16_t *grad,
                        float *table_grad);
int pe_t5_bias_back_bf16(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                         ptrdiff_t k, int64_t query_offset, const uint16_t *grad,
                         float *table_grad);
int pe_t5_bias_back_f32(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                        ptrdiff_t k, int64_t query_offset, const float *grad,
                        float *table_grad);
int pe_t5_bias_back_f64(const pe_t5_spec *s, ptrdiff_t heads, ptrdiff_t q,
                        ptrdiff_t k, int64_t query_offset, const double *grad,
                        double *table_grad);

/*
 * Shaw et al.: query i at key position k - q + i, key j, clip K:
 *   idx(i, j) = clip(j - (k - q + i), -K, K) + K
 * index: out (q, k) = idx; embed: out (q, k, dim) = table[idx] with table
 * (2K + 1, dim); embed_back: table_grad = scatter-add of grad (q, k, dim)
 * (a float32 table_grad for float16 and bfloat16 gradients).
 */
void pe_shaw_index_i64(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K, int64_t *out);
void pe_shaw_embed_f16(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K, ptrdiff_t dim,
                       const uint16_t *table, uint16_t *out);
void pe_shaw_embed_f32(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K, ptrdiff_t dim,
                       const float *table, float *out);
void pe_shaw_embed_f64(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K, ptrdiff_t dim,
                       const double *table, double *out);
int pe_shaw_embed_back_f16(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K,
                           ptrdiff_t dim, const uint16_t *grad, float *table_grad);
int pe_shaw_embed_back_bf16(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K,
                            ptrdiff_t dim, const uint16_t *grad, float *table_grad);
int pe_shaw_embed_back_f32(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K,
                           ptrdiff_t dim, const float *grad, float *table_grad);
int pe_shaw_embed_back_f64(ptrdiff_t q, ptrdiff_t k, ptrdiff_t K,
                           ptrdiff_t dim, const double *grad,
                           double *table_grad);

/* ------------------------------------------------------------------ */
/* ALiBi (alibi.c)                                                      */
/* ------------------------------------------------------------------ */

/*
 * out (heads, q, k) = -(m[h] * (p_i - j)), or -(m[h] * |p_i - j|) when
 * symmetric, p_i = query_offset + i; float64 product rounded once (to
 * float16 too; to bfloat16 bit patterns through float32, as torch's cast).
 * Returns 0, or -1 when scratch memory (O(q + k)) is not available.
 */
int pe_alibi_bias_bf16(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                       int64_t query_offset, const double *slopes,
                       int symmetric, uint16_t *out);
int pe_alibi_bias_f16(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                      int64_t query_offset, const double *slopes,
                      int symmetric, uint16_t *out);
int pe_alibi_bias_f32(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                      int64_t query_offset, const double *slopes,
                      int symmetric, float *out);
int pe_alibi_bias_f64(ptrdiff_t heads, ptrdiff_t q, ptrdiff_t k,
                      int64_t query_offset, const double *slopes,
                      int symmetric, double *out);

/* ------------------------------------------------------------------ */
/* Attention masks (masks.c)                                            */
/* ------------------------------------------------------------------ */

/* Bytes 1 = may attend.  out (q, k)[i, j] = j <= p_i && (window < 1 ||
 * j > p_i - window), p_i = query_offset + i. */
void pe_causal_mask(ptrdiff_t q, ptrdiff_t k, int64_t query_offset,
                    int64_t window, unsigned char *out);

/* out (batch, max_length)[b, p] = p < lengths[b] (right padding) or
 * p >= max_length - lengths[b] (left); 0 <= lengths[b] <= max_length. */
void pe_padding_mask(ptrdiff_t batch, ptrdiff_t max_length,
                     const int64_t *lengths, int left, unsigned char *out);

#endif /* POSEMB_H */
