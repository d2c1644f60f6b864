/*
 * heap_peak.c: the peak of live heap bytes of a process, for bench/memory.py's
 * onnxruntime column.  Built as a shared library and LD_PRELOADed: malloc and friends
 * pass to glibc's own (__libc_*) and count malloc_usable_size of what they hand out;
 * aotc_heap_live() and aotc_heap_peak() read the counts, aotc_heap_reset_peak() starts
 * a new peak at the bytes live now (ctypes calls them in the preloaded process).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static int64_t live, peak;

static void *counted(void *p) {
    if (p) {
        int64_t now = __atomic_add_fetch(&live, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
        int64_t seen = __atomic_load_n(&peak, __ATOMIC_RELAXED);
        while (now > seen &&
               !__atomic_compare_exchange_n(&peak, &seen, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    return p;
}

static void uncount(void *p) {
    if (p) __atomic_sub_fetch(&live, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
}

void *malloc(size_t n) { return counted(__libc_malloc(n)); }
void *calloc(size_t k, size_t n) { return counted(__libc_calloc(k, n)); }
void free(void *p) {
    uncount(p);
    __libc_free(p);
}
void *realloc(void *p, size_t n) {
    uncount(p);
    return counted(__libc_realloc(p, n));
}
void *memalign(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = counted(__libc_memalign(a, n));
    if (!p) return 12; /* ENOMEM */
    *out = p;
    return 0;
}

int64_t aotc_heap_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }
int64_t aotc_heap_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
void aotc_heap_reset_peak(void) { __atomic_store_n(&peak, aotc_heap_live(), __ATOMIC_RELAXED); }
