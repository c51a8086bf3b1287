/*
 * memory.c - the runtime's memory policy: may a kernel use streaming
 * (non-temporal) stores into an output?  See pe_memory_resident in posemb.h:
 * only into pages already in memory (a reused out=), never into a fresh
 * allocation, whose pages the kernel zeroes on first touch, leaving them in
 * cache.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1   /* mincore */
#endif

#include "posemb.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>

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
#else
int pe_memory_resident(const void *p)
{
    (void)p;
    return 1;
}
#endif

