/*
 * memory.c - the runtime's memory policy.  May a kernel use streaming
 * (non-temporal) stores into an output?  Only into outputs of at least
 * pe_cpu_stream_min_bytes (3/4 of the last-level cache, within 4 .. 24
 * MiB); into a fresh allocation, whose pages the kernel zeroes on first
 * touch, leaving them in cache, only where the output is at least the size
 * of a last-level cache the runtime found (see pe_memory_resident in
 * posemb.h);
 * and, on CPUs that pay for it
 * (pe_memory_stream_ok), only where each line is written whole.  And the
 * output cache (pe_out_cache in posemb.h),
 * which keeps freed large outputs for the next output of the same size.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1   /* mincore, posix_memalign */
#endif

#include "posemb.h"

#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>

/* Ask for transparent huge pages on a fresh block, as NumPy's own allocator
 * does from 4 MiB on (with THP set to "madvise", the default of many
 * distributions, a block gets none without it): the whole pages inside. */
static void huge_pages(void *p, size_t n)
{
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)p + huge - 1) & ~(huge - 1),
                    end = ((uintptr_t)p + n) & ~(huge - 1);
#if defined(MADV_HUGEPAGE)
    if (end > a)
        (void)madvise((void *)a, end - a, MADV_HUGEPAGE);
#else
    (void)a, (void)end;
#endif
}

/* RAM, or a container's memory limit (cgroup v2, else v1) if less */
static size_t physical_memory(void)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && page > 0 && (unsigned long)pages <= SIZE_MAX / (unsigned long)page
                     ? (size_t)pages * (size_t)page : 0;
    const size_t v2 = pe_file_bytes("/sys/fs/cgroup/memory.max"),
                 v1 = pe_file_bytes("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    const size_t cg = v2 != 0 ? v2 : v1;
    return cg != 0 && (ram == 0 || cg < ram) ? cg : ram;
}

int pe_memory_resident(const void *p)
{
    const long page = sysconf(_SC_PAGESIZE);
    unsigned char v = 0;
    if (page <= 0)
        return 1;
    if (mincore((void *)((uintptr_t)p & ~((uintptr_t)page - 1u)), 1, &v) != 0)
        return 1;
    return v & 1u;
}

#if defined(PE_X86_SIMD)
#include <emmintrin.h>
#include <time.h>

static double seconds(void)
{
    struct timespec t;
    return clock_gettime(CLOCK_MONOTONIC, &t) == 0 ? (double)t.tv_sec + 1e-9 * (double)t.tv_nsec
                                                   : 0.0;
}

/* PROBE_ROWS regions of `region` bytes written as the streaming kernels
 * write a group of four heads (both halves of each head's row in turn):
 * row k of each region in turn, 256 bytes in 16-byte streaming stores,
 * starting `off` bytes past a line (off 16: each row's last line stays
 * partly written until the region's next row). */
#define PROBE_ROWS 8
static void probe_rows(char *y, size_t region, size_t off)
{
    const __m128i v = _mm_set1_epi32(0x3f800000);
    for (size_t k = 0; k + 256 + 64 <= region; k += 256)
        for (size_t r = 0; r < PROBE_ROWS; r++)
            for (size_t i = 0; i < 256; i += 16)
                _mm_stream_si128((__m128i *)(void *)(y + r * region + k + off + i), v);
    _mm_sfence();
}

/*
 * Eight rows in turn, with the lines flushed from the caches first (as a
 * large output's lines are not in them): measured on a 2-vCPU Zen 3 EPYC
 * VM, 16 bytes past a line over on a line, 120 of 120 trials 3.2-3.8x.
 * Four rows, the lines left in the cache by the memset (the first
 * version): 3.0-3.6x in most trials, but 1.0x in runs of them, whole
 * processes at times, while streaming (1, 32, 8192, 128) float32 into an
 * output 16 bytes past a line stayed 1.7-2x slower than staging it in the
 * same processes; with eight rows but no flush, 60 of 60 trials 2.6-5.4x.
 */
int pe_memory_probe_partial_lines(void)
{
    const size_t region = (size_t)256 << 10, bytes = PROBE_ROWS * region;
    double best[2] = {1e30, 1e30};
    char *y = NULL;
    if (posix_memalign((void **)&y, 64, bytes) != 0)
        return 1;
    memset(y, 0, bytes);   /* (its pages in memory first) */
    for (size_t i = 0; i < bytes; i += 64)
        _mm_clflush(y + i);
    _mm_mfence();
    for (int round = 0; round < 3; round++)
        for (int p = 0; p < 2; p++) {
            const double t0 = seconds();
            probe_rows(y, region, p ? 16 : 0);
            const double t = seconds() - t0;
            best[p] = t < best[p] ? t : best[p];
        }
    free(y);
    return best[1] <= 1.3 * best[0];
}
#else
int pe_memory_probe_partial_lines(void) { return 1; }
#endif
#else
int pe_memory_resident(const void *p)
{
    (void)p;
    return 1;
}

int pe_memory_probe_partial_lines(void) { return 1; }

static void huge_pages(void *p, size_t n) { (void)p, (void)n; }
static size_t physical_memory(void) { return 0; }
#endif

int pe_memory_stream_ok(const void *mid, int whole_lines, size_t bytes)
{
    /* (an LLC no larger than L2: none was found, the runtime's guess) */
    const ptrdiff_t llc = pe_cache_llc_bytes();
    const int past_llc = llc > pe_cache_l2_bytes() && bytes >= (size_t)llc;
    return bytes >= pe_cpu_stream_min_bytes() && (past_llc || pe_memory_resident(mid)) &&
           (whole_lines || pe_cpu_partial_lines());
}

/* a large block at the start of a page (malloc's large blocks start 16
 * bytes past one):
 * - on a 64-byte line: the kernels' streaming stores need whole aligned
 *   vectors (see pe_rope_apply), and a vector on a line touches one line,
 *   not two.  Measured on a Zen 5 EPYC, (1, 32, 8192, 128) float32 into a
 *   reused output, 1 thread: 8.4-8.6 ms from malloc, 7.3-7.7 ms on a line.
 * - not just past the inputs' offset within a page: the outputs were once
 *   on the line after malloc's 16 bytes (64 bytes into a page), 48 bytes
 *   past where NumPy's large inputs and tables start (16), and every
 *   vector stored there shares its address bits 0-11 with the loads just
 *   after it, which then wait (x, cos and sin at 16 bytes into a page, y
 *   at 0, 64, 128, ..., 4032: only 64 and, less, 128 slow).  Measured, Zen 4
 *   EPYC VM, 1 thread, into y at 64 bytes into a page against half a page
 *   on (medians of 5 rounds alternated in one process): float32 (1, 32,
 *   8192, 128) half-split 8.5 against 5.7 ms, interleaved 18.1 against
 *   6.6-7.7, float64 (1, 32, 4096, 128) 10.1 against 7.4, float16 (1, 32,
 *   16384, 128) 11.1 against 8.2, bfloat16 9.9 against 7.4; at the start
 *   of a page 6.0, 6.6, 7.6, 8.6 and 7.6 ms.  A page's start is behind
 *   inputs anywhere but the last 128 bytes of a page.  (Such an output
 *   taken as x by a call into y from NumPy, 16 bytes on: half-split 7.5
 *   against 6.7-6.9 ms, interleaved even; with x half a page on, 6.8.)
 * free() and realloc() take posix_memalign's blocks as malloc's. */
static void *large_block(size_t n)
{
#if defined(__linux__) || defined(__APPLE__)
    void *p = NULL;
    return posix_memalign(&p, 4096, n) == 0 ? p : NULL;
#else
    return malloc(n);
#endif
}

size_t pe_out_cache_default_limit(void)
{
    const size_t gib = (size_t)1 << 30, ram = physical_memory();
    return ram != 0 && ram / 16 < gib ? ram / 16 : gib;
}

/* the oldest kept block, freed */
static void release_oldest(pe_out_cache *c)
{
    free(c->keep[0].p);
    c->held -= c->keep[0].n;
    memmove(&c->keep[0], &c->keep[1], (size_t)(--c->nkeep) * sizeof(pe_block));
}

/* the live slot holding p, or -1 */
static int live_slot(const pe_out_cache *c, const void *p)
{
    for (int i = 0; i < PE_OUT_CACHE_LIVE; i++)
        if (c->live[i].p == p)
            return i;
    return -1;
}

/* p (just returned by the system) is n bytes: recorded if n is large, and
 * any record of the same address (a block freed behind the cache's back)
 * dropped, so a size is never believed that is not the block's */
static void *track(pe_out_cache *c, void *p, size_t n)
{
    int slot;
    if (p == NULL)
        return NULL;
    while ((slot = live_slot(c, p)) >= 0)
        c->live[slot].p = NULL;
    if (n >= PE_OUT_CACHE_MIN_BYTES && (slot = live_slot(c, NULL)) >= 0)
        c->live[slot] = (pe_block){p, n};   /* (no slot left: freed as usual) */
    return p;
}

void *pe_out_cache_malloc(pe_out_cache *c, size_t n)
{
    if (n >= PE_OUT_CACHE_MIN_BYTES)
        for (int i = 0; i < c->nkeep; i++)   /* a kept block of this size */
            if (c->keep[i].n == n) {
                void *p = c->keep[i].p;
                c->held -= n;
                memmove(&c->keep[i], &c->keep[i + 1],
                        (size_t)(--c->nkeep - i) * sizeof(pe_block));
                return track(c, p, n);
            }
    if (n >= PE_OUT_CACHE_MIN_BYTES) {
        void *p = large_block(n);
        if (p != NULL)
            huge_pages(p, n);
        return track(c, p, n);
    }
    void *p = malloc(n > 0 ? n : 1);   /* (never NULL for 0 bytes, as NumPy's own) */
    return track(c, p, n);
}

void *pe_out_cache_calloc(pe_out_cache *c, size_t count, size_t size)
{
    /* (zeroed blocks are not reused; never NULL for 0 bytes) */
    return track(c, count > 0 && size > 0 ? calloc(count, size) : calloc(1, 1), 0);
}

void pe_out_cache_free(pe_out_cache *c, void *p)
{
    const int slot = p == NULL ? -1 : live_slot(c, p);
    if (slot < 0) {
        free(p);
        return;
    }
    const size_t n = c->live[slot].n;
    c->live[slot].p = NULL;
    if (n > c->limit) {
        free(p);
        return;
    }
    while (c->nkeep > 0 && (c->nkeep == PE_OUT_CACHE_SLOTS || c->held > c->limit - n))
        release_oldest(c);
    c->keep[c->nkeep++] = (pe_block){p, n};
    c->held += n;
}

void *pe_out_cache_realloc(pe_out_cache *c, void *p, size_t n)
{
    const int slot = p == NULL ? -1 : live_slot(c, p);
    if (slot >= 0)   /* resized (or freed): no longer a block of a known size */
        c->live[slot].p = NULL;
    return track(c, realloc(p, n > 0 ? n : 1), 0);
}

void pe_out_cache_set_limit(pe_out_cache *c, size_t limit)
{
    c->limit = limit;
    while (c->nkeep > 0 && c->held > limit)
        release_oldest(c);
}

