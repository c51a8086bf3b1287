"""The bench's bandwidth limit: the best streaming passes we can write, in a
small C library that the bench compiles and loads with ctypes (never part of
the shipped extension).

Each pass moves the same bytes as the kernel it limits: an in-place scale
(read + write the same lines), a copy (read one array, write another), a
fill (write only), a read.  Every pass comes in several variants (plain
vector stores, streaming stores, libc's memcpy/memset) at the vector width
the CPU has (SSE2, AVX2 or AVX-512, chosen at run time), on 1 thread or on
this library's own pool of the bench's thread count; the bench takes the
fastest of them (and of NumPy's own pass), so a slow "limit" never flatters
a kernel.

Built with the system C compiler (``$CC``, else ``cc``) into a cache
directory (``$POSEMB_BENCH_CACHE``, else ``~/.cache/posemb-bench``, else a
temporary directory); :func:`load` returns None when no compiler works.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Any

import numpy as np

SOURCE = r"""
#define _GNU_SOURCE 1
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { OP_SCALE = 0, OP_COPY = 1, OP_FILL = 2, OP_READ = 3 };
enum { V_PLAIN = 0, V_NT = 1, V_LIBC = 2 };
#define MAXT 64

typedef struct { int op, variant; char *a; const char *b; size_t n; } job_t;

static volatile float sink;
static volatile float factor = 1.0f;   /* read at run time: x * 1 is not folded */

/* ---- portable passes (also the tails of the vector ones) ---- */
static void pass_c(const job_t *j, size_t lo, size_t hi)
{
    float *x = (float *)(void *)j->a;
    const float f = factor;
    switch (j->op) {
    case OP_SCALE: for (size_t i = lo / 4; i < hi / 4; i++) x[i] *= f; break;
    case OP_COPY: memcpy(j->a + lo, j->b + lo, hi - lo); break;
    case OP_FILL: memset(j->a + lo, 0, hi - lo); break;
    default: {
        const float *y = (const float *)(const void *)j->b;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t i = lo / 4;
        for (; i + 4 <= hi / 4; i += 4) { s0 += y[i]; s1 += y[i+1]; s2 += y[i+2]; s3 += y[i+3]; }
        for (; i < hi / 4; i++) s0 += y[i];
        sink = s0 + s1 + s2 + s3;
    }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* W: bytes per vector; V: type; L/S/N: load, store, streaming store */
#define DEFINE_PASS(NAME, ISA, V, W, L, S, N, MUL, SET1, ADD, ZERO, FENCE)   \
__attribute__((target(ISA))) static void NAME(const job_t *j, size_t lo, size_t hi) \
{                                                                           \
    char *a = j->a; const char *b = j->b;                                   \
    size_t i = lo;                                                          \
    const size_t end = lo + (hi - lo) / (4 * W) * (4 * W);                  \
    const V one = SET1(factor);                                               \
    const int nt = j->variant == V_NT;                                      \
    if (j->op == OP_READ) {                                                 \
        V s0 = ZERO(), s1 = ZERO(), s2 = ZERO(), s3 = ZERO();               \
        for (; i < end; i += 4 * W) {                                       \
            s0 = ADD(s0, L((const float *)(const void *)(b + i)));          \
            s1 = ADD(s1, L((const float *)(const void *)(b + i + W)));      \
            s2 = ADD(s2, L((const float *)(const void *)(b + i + 2 * W)));  \
            s3 = ADD(s3, L((const float *)(const void *)(b + i + 3 * W)));  \
        }                                                                   \
        float t[W / 4]; S(t, ADD(ADD(s0, s1), ADD(s2, s3))); sink = t[0];   \
    } else {                                                                \
        for (; i < end; i += W) {                                           \
            V v;                                                            \
            if (j->op == OP_SCALE) v = MUL(L((const float *)(const void *)(a + i)), one); \
            else if (j->op == OP_COPY) v = L((const float *)(const void *)(b + i)); \
            else v = ZERO();                                                \
            if (nt) N((float *)(void *)(a + i), v);                         \
            else S((float *)(void *)(a + i), v);                            \
        }                                                                   \
        if (nt) FENCE();                                                    \
    }                                                                       \
    if (i < hi) pass_c(j, i, hi);                                           \
}
DEFINE_PASS(pass_sse2, "sse2", __m128, 16, _mm_load_ps, _mm_store_ps, _mm_stream_ps,
            _mm_mul_ps, _mm_set1_ps, _mm_add_ps, _mm_setzero_ps, _mm_sfence)
DEFINE_PASS(pass_avx2, "avx2", __m256, 32, _mm256_load_ps, _mm256_store_ps,
            _mm256_stream_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_add_ps,
            _mm256_setzero_ps, _mm_sfence)
DEFINE_PASS(pass_avx512, "avx512f", __m512, 64, _mm512_load_ps, _mm512_store_ps,
            _mm512_stream_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_add_ps,
            _mm512_setzero_ps, _mm_sfence)
#endif

static int level = -1;      /* 0 C, 1 SSE2, 2 AVX2, 3 AVX-512F */

int bs_level(void)
{
    if (level < 0) {
        level = 0;
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        level = __builtin_cpu_supports("avx512f") ? 3 : __builtin_cpu_supports("avx2") ? 2 : 1;
#endif
    }
    return level;
}

static void pass(const job_t *j, size_t lo, size_t hi)
{
    if (j->variant == V_LIBC || lo >= hi) {
        pass_c(j, lo, hi);
        return;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    /* vector passes start at a vector-aligned byte (a peel in C) */
    const size_t w = level >= 3 ? 64 : level == 2 ? 32 : 16;
    const uintptr_t base = (uintptr_t)j->a;
    size_t first = (size_t)(((base + lo + w - 1) & ~(uintptr_t)(w - 1)) - base);
    if (j->op == OP_READ)
        first = (size_t)((((uintptr_t)j->b + lo + w - 1) & ~(uintptr_t)(w - 1)) - (uintptr_t)j->b);
    if (j->op == OP_COPY && (((uintptr_t)j->b ^ base) & (w - 1)) != 0) {
        pass_c(j, lo, hi);
        return;
    }
    if (((base | (uintptr_t)j->b) & 3u) != 0) {
        pass_c(j, lo, hi);
        return;
    }
    if (first > hi) first = hi;
    pass_c(j, lo, first);
    if (level >= 3) pass_avx512(j, first, hi);
    else if (level == 2) pass_avx2(j, first, hi);
    else pass_sse2(j, first, hi);
#else
    pass_c(j, lo, hi);
#endif
}

/* ---- a small pool: workers wait on a condition variable ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int started = 0, parts = 1, pending = 0;
static unsigned long gen = 0;
static job_t cur;

static void part_range(int k, int np, size_t n, size_t *lo, size_t *hi)
{
    size_t per = (n / (size_t)np + 63) & ~(size_t)63;
    *lo = per * (size_t)k; *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n || k == np - 1) *hi = n;
}

static void *worker(void *arg)
{
    const int k = (int)(intptr_t)arg;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (gen == seen) pthread_cond_wait(&go, &mu);
        seen = gen;
        job_t j = cur; int np = parts;
        pthread_mutex_unlock(&mu);
        if (k < np) {
            size_t lo, hi;
            part_range(k, np, j.n, &lo, &hi);
            pass(&j, lo, hi);
        }
        pthread_mutex_lock(&mu);
        if (--pending == 0) pthread_cond_signal(&done);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* threads: 1 runs on the caller; more wake started-1 workers */
int bs_run(int op, int variant, int threads, void *a, const void *b, size_t nbytes)
{
    job_t j = {op, variant, (char *)a, (const char *)b, nbytes};
    bs_level();
    if (op == OP_READ) j.b = (const char *)a;
    if (threads > MAXT) threads = MAXT;
    if (threads <= 1) { pass(&j, 0, nbytes); return 1; }
    pthread_mutex_lock(&mu);
    while (started < threads - 1) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)(intptr_t)(started + 1)) != 0) break;
        pthread_detach(t);
        started++;
    }
    parts = started + 1 < threads ? started + 1 : threads;
    cur = j;
    pending = started;
    gen++;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&mu);
    {
        size_t lo, hi;
        part_range(0, parts, nbytes, &lo, &hi);
        pass(&j, lo, hi);
    }
    pthread_mutex_lock(&mu);
    while (pending > 0) pthread_cond_wait(&done, &mu);
    pthread_mutex_unlock(&mu);
    return parts;
}
"""

OPS = {"scale": 0, "copy": 1, "fill": 2, "read": 3}
VARIANTS = {"plain": 0, "nt": 1, "libc": 2}
LEVELS = ("C", "SSE2", "AVX2", "AVX-512F")


class Stream:
    """The compiled passes: ``run(op, variant, threads, a, b=None)``."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        lib.bs_run.restype = ctypes.c_int
        lib.bs_run.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.bs_level.restype = ctypes.c_int
        self.level = LEVELS[lib.bs_level()]

    def run(self, op: str, variant: str, threads: int, a: np.ndarray,
            b: np.ndarray | None = None) -> int:
        """One pass over a's bytes (b: the copy's source).  Returns the
        number of threads used."""
        if not (a.flags.c_contiguous and (b is None or b.flags.c_contiguous)):
            raise ValueError("the streaming passes need contiguous arrays")
        if b is not None and b.nbytes != a.nbytes:
            raise ValueError("copy: arrays of different sizes")
        if op in ("scale", "read") and a.dtype != np.float32:
            raise ValueError(f"{op}: float32 arrays only")
        return int(self._lib.bs_run(OPS[op], VARIANTS[variant], threads, a.ctypes.data,
                                    None if b is None else b.ctypes.data, a.nbytes))


def _cache_dir() -> str:
    for d in (os.environ.get("POSEMB_BENCH_CACHE"),
              os.path.join(os.path.expanduser("~"), ".cache", "posemb-bench")):
        if d:
            try:
                os.makedirs(d, exist_ok=True)
                if os.access(d, os.W_OK):
                    return d
            except OSError:
                pass
    return tempfile.mkdtemp(prefix="posemb-bench-")


_LOADED: list[Stream | None] = []


def load() -> Stream | None:
    """Compile (once per source version) and load the passes, or None."""
    if _LOADED:
        return _LOADED[0]
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    stream = None
    if cc:
        tag = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
        d = _cache_dir()
        so = os.path.join(d, f"posemb_stream_{tag}.so")
        try:
            if not os.path.exists(so):
                src = os.path.join(d, f"posemb_stream_{tag}.c")
                with open(src, "w") as f:
                    f.write(SOURCE)
                tmp = f"{so}.{os.getpid()}.tmp"
                subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp, src],
                               check=True, capture_output=True, timeout=120)
                os.replace(tmp, so)
            stream = Stream(ctypes.CDLL(so))
        except (OSError, subprocess.SubprocessError):
            stream = None
    _LOADED.append(stream)
    return stream
